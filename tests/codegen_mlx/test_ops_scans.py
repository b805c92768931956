"""prod/any/all/argmin, cumsum/cumprod, gather and sort/argsort on the MLX backend (eager
and compiled) and the arena executor, against the NumPy reference (itself checked
against loops in tests/ir/test_ops_scans.py); gather's out-of-range indices are a
RunError everywhere. Sorting is also checked against torch's stable sort, NaN and ties
included."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tests.codegen_mlx.test_ops_math import run_all

RNG = np.random.default_rng(23)


def test_prod_any_all_argmin_over_axes() -> None:
    x = RNG.uniform(0.5, 1.5, (3, 4, 5)).astype(np.float32)
    x[0, 1, :] = 0.0
    x[2, 0, 3] = np.nan
    run_all(
        lambda a: (
            tg.prod(a),
            tg.prod(a, (0, 2), keepdims=True),
            tg.any(a, 1),
            tg.all(a, -1),
            tg.any(a),
            tg.all(a, (), keepdims=False),
            tg.argmin(a, 1),
            tg.argmin(a),
            tg.argmin(a, -1, keepdims=True),
        ),
        x,
        rtol=1e-5,
    )


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.int64, np.bool_])
def test_integer_and_bool_reductions_and_scans(dtype) -> None:
    x = RNG.integers(-3, 4, (4, 6)) if dtype != np.bool_ else RNG.random((4, 6)) > 0.4
    x = x.astype(dtype)
    run_all(
        lambda a: (
            tg.prod(a, 1),
            tg.any(a, 0),
            tg.all(a, 1),
            tg.cumsum(a, 1),
            tg.cumprod(a, 0),
            tg.cumsum(a, 0, dtype=tg.int32),
            tg.cumsum(a, -1, dtype=tg.float32),
            *((tg.argmin(a, 1),) if dtype != np.bool_ else ()),
        ),
        x,
    )


def test_empty_inputs_give_each_identity() -> None:
    run_all(
        lambda a: (tg.prod(a, 1), tg.any(a, 1), tg.all(a, 1), tg.cumsum(a, 1), tg.cumprod(a, 0)),
        np.zeros((3, 0), np.float32),
    )


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_float_scans_accumulate_like_the_reference(dtype) -> None:
    x = RNG.uniform(0.9, 1.1, (2, 50)).astype(dtype)
    tolerance = 4e-3 if dtype == np.float16 else 1e-5
    run_all(
        lambda a: (tg.cumsum(a, 1), tg.cumprod(a, 1), tg.cumsum(a, 0)),
        x,
        rtol=tolerance,
        atol=tolerance,
    )


@settings(max_examples=20)
@given(st.data())
def test_gather_matches_the_reference(data) -> None:
    rank = data.draw(st.integers(1, 3))
    shape = data.draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank))
    axis = data.draw(st.integers(-rank, rank - 1))
    index_shape = [
        data.draw(st.integers(0, 6)) if k == axis % rank else data.draw(st.integers(0, n))
        for k, n in enumerate(shape)
    ]
    dtype = data.draw(st.sampled_from([np.int32, np.int64, np.uint8, np.int8]))
    x = RNG.uniform(-2, 2, shape).astype(np.float32)
    index = RNG.integers(0, shape[axis], index_shape).astype(dtype)
    run_all(lambda a, i: tg.gather(a, i, axis), x, index, compiled=False)


@pytest.mark.parametrize("bad", [-1, 5])
@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_gather_out_of_range_is_a_run_error_on_every_backend(bad, mode) -> None:
    g = tg.Graph("gather")
    x, index = g.input("x", (2, 5)), g.input("i", (2, 2), tg.int32)
    g.output(tg.gather(x, index, 1))
    prog = tg.compile(g)
    feed = {"x": np.ones((2, 5), np.float32), "i": np.array([[0, 1], [bad, 2]], np.int32)}
    for backend, kwargs in (("numpy", {}), ("arena", {}), ("mlx", {"mode": mode})):
        with pytest.raises(tg.RunError, match=rf"%\d+ gather: index {bad} is out of range"):
            prog.run(feed, backend=backend, **kwargs)


def test_gather_with_small_index_dtype_into_a_long_axis_needs_no_check() -> None:
    from tensorgraph.codegen_mlx.guards import guarded_nodes

    g = tg.Graph("u8")
    long, short = g.input("long", (2, 256)), g.input("short", (2, 255))
    index = g.input("i", (2, 3), tg.uint8)
    g.output(tg.gather(long, index, 1), tg.gather(short, index, 1))
    assert [n.inputs[0] for n in guarded_nodes(g)] == [short.id]


@st.composite
def sortable(draw: st.DrawFn) -> tuple[np.ndarray, int, bool]:
    """An array with many ties (values from a small set), NaN in float ones, a 0-size
    axis now and then; an axis and a direction."""
    shape = tuple(draw(st.lists(st.integers(0, 6), min_size=1, max_size=3)))
    dtype = draw(st.sampled_from([np.float32, np.float16, np.int32, np.int64, np.uint8]))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    x = rng.integers(0, 4, shape).astype(dtype)
    if np.dtype(dtype).kind == "f" and x.size:
        x.flat[rng.integers(0, x.size)] = np.nan
    return x, draw(st.integers(-len(shape), len(shape) - 1)), draw(st.booleans())


@settings(max_examples=40, deadline=None)
@given(sortable())
def test_sort_and_argsort_equal_torchs_stable_sort_on_every_backend(case) -> None:
    torch = pytest.importorskip("torch", reason="the torch extra is not installed")
    x, axis, descending = case
    values, positions = torch.sort(
        torch.from_numpy(x), dim=axis, descending=descending, stable=True
    )
    g = tg.Graph("sort")
    a = g.input("x", x.shape, tg.ir.as_dtype(x.dtype))
    g.output(tg.sort(a, axis, descending), tg.argsort(a, axis, descending))
    prog = tg.compile(g)
    for backend, options in (("numpy", {}), ("arena", {}), ("mlx", {"mode": "eager"})):
        got_values, got_positions = prog.run({"x": x}, backend=backend, **options)
        assert got_values.dtype == x.dtype and got_positions.dtype == np.int64
        np.testing.assert_array_equal(got_values, values.numpy(), err_msg=backend)
        np.testing.assert_array_equal(got_positions, positions.numpy(), err_msg=backend)


def test_sort_and_argsort_compiled_and_segmented() -> None:
    x = RNG.integers(0, 3, (4, 9)).astype(np.float32)
    run_all(lambda a: (tg.sort(a, 0, True), tg.argsort(a), tg.argsort(a, 0, True)), x)
