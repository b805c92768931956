"""Run-time positions on MLX, in every executor mode: a slice_update with a tensor start
writes exactly NumPy's slice assignment (one compiled trace serves every start); a
start whose rows do not fit is the oracle's RunError, never a crash (mx.slice_update
writes out of bounds from such a start: the lowering clamps it, guards.py reports it);
rope with a tensor offset equals rope with the same int offset, on both CPU lowerings.

Tolerances: rope's composite forms the same float32 angles from a tensor offset as from
an int one, and mx.fast.rope gets the same offset either way, so the two differ by far
less than the 1e-5 asked. Against the float64 oracle, MLX's float32 angle
(offset + l) * scale * inv_freq with positions below 640 errs by at most
640 * 2 * u = 8e-5 rad (u = 6e-8), moving a rotated pair of |x| <= 2 * sqrt(2) by at
most 2.3e-4: atol 3e-4.

MLX's compiled mode builds a CPU kernel per new shape (about a second each), so the
properties draw few examples and vary the position within each compiled program.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.codegen_mlx import fused
from tensorgraph.codegen_mlx.guards import guarded_nodes
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

MODES = ("eager", "compiled", "auto")
ORACLE = {"rtol": 0, "atol": 3e-4}


LOWERINGS = pytest.mark.parametrize("fast", [False, True], ids=["composite", "fast"])


@contextmanager
def rope_lowering(fast: bool) -> Iterator[None]:
    """Within: the CPU's written-out rope (fast False) or mx.fast.rope (True)."""
    fused.FAST_ON_CPU = fast
    try:
        yield
    finally:
        fused.FAST_ON_CPU = False


@settings(max_examples=8)
@given(st.data(), st.integers(0, 2**16))
def test_a_tensor_start_writes_numpy_s_slice_in_every_mode(data: st.DataObject, seed: int) -> None:
    case: SliceCase = data.draw(slice_cases())
    starts = data.draw(st.lists(st.integers(0, case.extent - case.rows), min_size=1, max_size=3))
    prog = tg.compile(slice_graph(case, True))
    for mode in MODES:
        for start in [case.start, *starts]:
            feeds = slice_feeds(case, seed, start)
            (got,) = prog.run(feeds, backend="mlx", mode=mode)
            want = expected_slice(case, feeds["target"], feeds["update"], start)
            assert got.shape == want.shape and got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)


@settings(max_examples=8)
@given(st.data(), st.integers(0, 2**16))
def test_a_start_whose_rows_do_not_fit_is_a_run_error_in_every_mode(
    data: st.DataObject, seed: int
) -> None:
    case: SliceCase = data.draw(slice_cases())
    bad = data.draw(bad_starts(case))
    prog = tg.compile(slice_graph(case, True))
    for mode in MODES:
        with pytest.raises(tg.RunError, match=out_of_range_pattern(case, bad)):
            prog.run(slice_feeds(case, seed, bad), backend="mlx", mode=mode)
        # The same program (and trace) still runs a start in range afterwards.
        feeds = slice_feeds(case, seed, case.start)
        (got,) = prog.run(feeds, backend="mlx", mode=mode)
        want = expected_slice(case, feeds["target"], feeds["update"], case.start)
        np.testing.assert_array_equal(got, want)


def test_the_error_words_a_decode_position_past_the_cache() -> None:
    g = tg.Graph("cache")
    cache = g.input("cache", (1, 2, 512, 4))
    g.output(tg.slice_update(cache, g.input("k", (1, 2, 4, 4)), 2, g.input("pos", (), tg.int32)))
    feeds = {
        "cache": np.zeros((1, 2, 512, 4), np.float32),
        "k": np.ones((1, 2, 4, 4), np.float32),
        "pos": np.int32(510),
    }
    for mode in MODES:
        with pytest.raises(
            tg.RunError, match=r"^%3 slice_update: start 510 \+ 4 rows is past the length 512 "
        ):
            tg.compile(g).run(feeds, backend="mlx", mode=mode)


def test_only_run_time_starts_that_can_break_are_guarded() -> None:
    g = tg.Graph("guards")
    cache, row = g.input("cache", (6, 2)), g.input("row", (2, 2))
    fed = tg.slice_update(cache, row, 0, g.input("pos", (1,), tg.int64))
    fixed = tg.slice_update(cache, row, 0, 4)  # checked when built
    in_range = tg.slice_update(cache, row, 0, g.constant(np.array(3, np.int32)))
    g.output(fed, fixed, in_range)
    assert [n.id for n in guarded_nodes(g)] == [fed.id]


def test_an_out_of_range_constant_start_stays_guarded_and_raises() -> None:
    g = tg.Graph("const")
    cache = g.input("cache", (6, 2))
    g.output(tg.slice_update(cache, g.input("row", (2, 2)), 0, g.constant(np.array(5, np.int32))))
    assert [n.op for n in guarded_nodes(g)] == ["slice_update"]
    feeds = {"cache": np.zeros((6, 2), np.float32), "row": np.ones((2, 2), np.float32)}
    for mode in MODES:
        with pytest.raises(tg.RunError, match=r"start 5 \+ 2 rows is past the length 6 of"):
            tg.compile(g).run(feeds, backend="mlx", mode=mode)


@LOWERINGS
@settings(max_examples=6)
@given(case=rope_cases(), offsets=st.lists(st.integers(-20, 600), max_size=2))
def test_a_tensor_offset_rotates_as_the_int_offset_does(
    fast: bool, case: RopeCase, offsets: list[int]
) -> None:
    dynamic = tg.compile(rope_graph(case, True))
    for offset in [case.offset, *offsets]:
        moved = RopeCase(
            case.shape, case.dims, case.traditional, case.base, case.scale, offset, case.position
        )
        feeds = rope_feeds(moved, 0)
        (oracle,) = dynamic.run(feeds, backend="numpy")
        with rope_lowering(fast):
            (want,) = tg.compile(rope_graph(moved, False)).run(static_feeds(feeds), backend="mlx")
            for mode in MODES:
                (got,) = dynamic.run(feeds, backend="mlx", mode=mode)
                assert got.shape == want.shape and got.dtype == want.dtype
                np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
                np.testing.assert_allclose(got, oracle, **ORACLE)


@LOWERINGS
def test_ropes_sharing_one_offset_follow_it_from_call_to_call(fast: bool) -> None:
    # A decoder's q and k ropes (8 and 2 heads) read one position input; a third rope of
    # other dims and base reads it too. One compiled trace, several positions: each call
    # must rotate by that call's position (a cached table would keep the first).
    g = tg.Graph("decode")
    pos = g.input("pos", (), tg.int32)
    q, k = g.input("q", (1, 8, 1, 16)), g.input("k", (1, 2, 1, 16))
    g.output(
        tg.rope(q, 16, offset=pos),
        tg.rope(k, 16, offset=pos),
        tg.rope(k, 8, offset=pos, base=500.0, traditional=True),
    )
    prog = tg.compile(g)
    rng = np.random.default_rng(3)
    feeds = {
        "q": rng.uniform(-2, 2, (1, 8, 1, 16)).astype(np.float32),
        "k": rng.uniform(-2, 2, (1, 2, 1, 16)).astype(np.float32),
    }
    for mode in MODES:
        for position in (0, 1, 37, 300, 2):
            step = {**feeds, "pos": feed_position(Position("int32", ()), position)}
            want = prog.run(step, backend="numpy")
            with rope_lowering(fast):
                got = prog.run(step, backend="mlx", mode=mode)
            for a, b in zip(got, want, strict=True):
                np.testing.assert_allclose(a, b, **ORACLE)
