"""Run-time positions on the two NumPy executors: a slice_update with a tensor start
equals the one with the same int start and NumPy's own slice assignment, bit for bit;
a start whose rows do not fit is a RunError naming the start, the rows and the length;
rope with a tensor offset equals rope with the same int offset, bit for bit; and a
slice_update planned in place over a cache still gives the oracle's numbers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tensorgraph as tg
from tests.position_cases import (
    Position,
    RopeCase,
    SliceCase,
    bad_starts,
    expected_slice,
    feed_position,
    out_of_range_pattern,
    rope_cases,
    rope_feeds,
    rope_graph,
    slice_cases,
    slice_feeds,
    slice_graph,
    static_feeds,
)

BACKENDS = ("numpy", "arena")


def assert_identical(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@given(slice_cases(), st.integers(0, 2**16))
def test_a_tensor_start_writes_where_the_int_start_does(case: SliceCase, seed: int) -> None:
    feeds = slice_feeds(case, seed, case.start)
    want = expected_slice(case, feeds["target"], feeds["update"], case.start)
    dynamic, static = tg.compile(slice_graph(case, True)), tg.compile(slice_graph(case, False))
    for backend in BACKENDS:
        (got,) = dynamic.run(feeds, backend=backend)
        (same,) = static.run(static_feeds(feeds), backend=backend)
        assert_identical(got, want)
        assert_identical(same, want)


@given(st.data(), st.integers(0, 2**16))
def test_a_start_whose_rows_do_not_fit_is_a_run_error(data: st.DataObject, seed: int) -> None:
    case = data.draw(slice_cases())
    start = data.draw(bad_starts(case))
    prog = tg.compile(slice_graph(case, True))
    for backend in BACKENDS:
        with pytest.raises(tg.RunError, match=out_of_range_pattern(case, start)):
            prog.run(slice_feeds(case, seed, start), backend=backend)


def test_the_error_words_a_decode_position_past_the_cache() -> None:
    # The cache holds 512 positions; 4 rows from 510 would write rows 510..513.
    g = tg.Graph("cache")
    cache = g.input("cache", (1, 2, 512, 4))
    pos = g.input("pos", (), tg.int32)
    g.output(tg.slice_update(cache, g.input("k", (1, 2, 4, 4)), 2, pos))
    feeds = {"cache": np.zeros((1, 2, 512, 4), np.float32), "k": np.ones((1, 2, 4, 4), np.float32)}
    for backend in BACKENDS:
        with pytest.raises(
            tg.RunError, match=r"^%3 slice_update: start 510 \+ 4 rows is past the length 512 "
        ):
            tg.compile(g).run({**feeds, "pos": np.int32(510)}, backend=backend)


@given(rope_cases(), st.integers(0, 2**16))
def test_a_tensor_offset_rotates_as_the_int_offset_does(case: RopeCase, seed: int) -> None:
    # Both read the same integer and form the same float64 angles, so bit for bit.
    feeds = rope_feeds(case, seed)
    dynamic, static = tg.compile(rope_graph(case, True)), tg.compile(rope_graph(case, False))
    for backend in BACKENDS:
        (got,) = dynamic.run(feeds, backend=backend)
        (want,) = static.run(static_feeds(feeds), backend=backend)
        assert_identical(got, want)


def test_a_tensor_offset_rotates_row_l_by_offset_plus_l() -> None:
    # By hand: dims 2 of D 2, base b, so the one frequency is b^0 = 1 and row l turns by
    # the angle offset + l: (1, 0) -> (cos(offset + l), sin(offset + l)).
    g = tg.Graph("rope")
    x, pos = g.input("x", (3, 2)), g.input("pos", (1,), tg.int64)
    g.output(tg.rope(x, 2, offset=pos))
    ones = np.tile(np.array([1.0, 0.0], np.float32), (3, 1))
    for backend in BACKENDS:
        (got,) = tg.compile(g).run({"x": ones, "pos": np.array([7])}, backend=backend)
        angles = 7.0 + np.arange(3)
        np.testing.assert_allclose(got, np.stack([np.cos(angles), np.sin(angles)], 1), atol=1e-7)


def cache_graph(shape: tuple[int, ...], rows: int) -> tuple[tg.Graph, tg.Tensor, tg.Tensor]:
    """A cache computed in the graph (2 * x: not an input, so it may be overwritten),
    updated at a run-time position along axis 2 by tanh(k), and read after."""
    g = tg.Graph("cache")
    cache = g.input("x", shape) * 2.0
    step = g.input("k", (*shape[:2], rows, shape[3]))
    updated = tg.slice_update(cache, tg.tanh(step), 2, g.input("pos", (), tg.int32))
    g.output(updated.sum(axis=3), updated)
    return g, cache, updated


@given(st.data(), st.integers(0, 2**16))
def test_a_reinplaced_update_at_a_run_time_start_keeps_the_oracle(
    data: st.DataObject, seed: int
) -> None:
    shape = (1, data.draw(st.integers(1, 3)), data.draw(st.integers(1, 12)), 4)
    rows = data.draw(st.integers(1, shape[2]))
    g, cache, updated = cache_graph(shape, rows)
    prog = tg.compile(g)
    alias = prog.aliasing.of(updated.id)
    assert alias is not None and (alias.kind, alias.source) == ("inplace", cache.id)
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2, 2, shape).astype(np.float32)
    k = rng.uniform(-2, 2, (*shape[:2], rows, 4)).astype(np.float32)
    for start in data.draw(st.lists(st.integers(0, shape[2] - rows), min_size=1, max_size=3)):
        feeds = {"x": x, "k": k, "pos": feed_position(Position("int32", ()), start)}
        want = 2.0 * x
        want[:, :, start : start + rows] = np.tanh(k)  # float32 tanh, as the kernel's
        got = prog.run(feeds, backend="arena")
        reference = tg.compile(g, passes=()).run(feeds, backend="numpy")
        for a, b in zip(got, reference, strict=True):
            assert_identical(a, b)
        assert_identical(got[1], want)
