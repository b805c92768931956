"""index_update (ir.updates): inference, and the three backends against an independent
oracle, a Python loop that writes the update's slices one by one in index order (so a
repeated index keeps its last write, as torch's CPU index_copy does). Values are only
copied, never computed, so every backend must agree bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.codegen_mlx.guards import guarded_nodes
from tensorgraph.ir.dtypes import as_dtype
from tensorgraph.ir.updates import index_update
from tests.ir.op_cases import Case, case_adder, check_case

BACKENDS = ("numpy", "arena", "mlx")
CASES: list[Case] = []  # the op table's cases (tests/ir/test_ops.py runs them all)
case = case_adder(CASES)


def loop_oracle(target: np.ndarray, update: np.ndarray, index: list[int], axis: int):
    out = target.copy()
    for i, position in enumerate(index):
        into = [slice(None)] * target.ndim
        into[axis] = position
        source = [slice(None)] * target.ndim
        source[axis] = i
        out[tuple(into)] = update[tuple(source)]
    return out


@st.composite
def update_cases(draw: st.DrawFn) -> tuple:
    """(target, update, index, axis, dtype name, computed): a target of rank 1-4, an axis,
    0-6 indices drawn from a few positions (so repeats are common); `computed` makes the
    target an intermediate (t + t), which the planner may update in place."""
    shape = draw(st.lists(st.integers(1, 5), min_size=1, max_size=4).map(tuple))
    axis = draw(st.integers(0, len(shape) - 1))
    index = draw(st.lists(st.integers(0, shape[axis] - 1), max_size=6))
    dtype = draw(st.sampled_from(("float32", "float16", "int32")))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    target = rng.integers(-50, 50, shape).astype(dtype)
    update_shape = (*shape[:axis], len(index), *shape[axis + 1 :])
    update = rng.integers(-50, 50, update_shape).astype(dtype)
    index_dtype = draw(st.sampled_from((np.int32, np.int64)))
    return target, update, np.array(index, index_dtype), axis, dtype, draw(st.booleans())


def build(target: np.ndarray, update: np.ndarray, index: np.ndarray, axis: int, computed: bool):
    g = tg.Graph("index_update")
    t = g.input("t", target.shape, as_dtype(target.dtype.name))
    u = g.input("u", update.shape, as_dtype(update.dtype.name))
    i = g.input("i", index.shape, as_dtype(index.dtype.name))
    g.output(index_update(t + t if computed else t, u, i, axis))
    return g


_T, _U = np.arange(24, dtype=np.float32).reshape(2, 4, 3), -np.ones((2, 2, 3), np.float32)
# rows 3 and 0 of axis 1 become -1; the rest keep arange's values
case(
    "index_update",
    "axis1",
    (_T, _U),
    lambda t, u: index_update(t, u, t.graph.constant(np.array([3, 0], np.int64)), 1),
    tg.float32,
    lambda t, u: np.where(np.isin(np.arange(4), [3, 0])[None, :, None], -1.0, t),
)


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_table_case(c: Case) -> None:
    check_case(c)


@given(update_cases())
def test_every_backend_writes_like_the_loop(case: tuple) -> None:
    target, update, index, axis, _, computed = case
    prog = tg.compile(build(target, update, index, axis, computed))
    base = target + target if computed else target
    want = loop_oracle(base, update, index.tolist(), axis)
    feeds = {"t": target, "u": update, "i": index}
    for backend in BACKENDS:
        (got,) = prog.run(feeds, backend=backend)
        assert got.shape == want.shape, backend
        assert got.dtype == want.dtype, backend
        np.testing.assert_array_equal(got, want, err_msg=backend)


def test_repeated_index_keeps_the_last_write_on_every_backend() -> None:
    # Rows 1, 1, 3 of a zero (4, 2) target get [1,1], [2,2], [3,3]: row 1 ends as [2, 2]
    # (the later of its two writes), row 3 as [3, 3], rows 0 and 2 stay zero.
    target = np.zeros((4, 2), np.float32)
    update = np.array([[1, 1], [2, 2], [3, 3]], np.float32)
    index = np.array([1, 1, 3], np.int64)
    want = np.array([[0, 0], [2, 2], [0, 0], [3, 3]], np.float32)
    prog = tg.compile(build(target, update, index, 0, True))
    for backend in BACKENDS:
        (got,) = prog.run({"t": target, "u": update, "i": index}, backend=backend)
        np.testing.assert_array_equal(got, want, err_msg=backend)


def test_inference_gives_the_target_shape_and_dtype() -> None:
    g = tg.Graph("infer")
    t = g.input("t", (2, 8, 3), tg.float16)
    out = index_update(t, g.input("u", (2, 5, 3), tg.float16), g.input("i", (5,), tg.int32), -2)
    assert (out.shape, out.dtype) == ((2, 8, 3), tg.float16)
    assert g.node(out.id).attr("axis") == 1  # a negative axis is stored normalised


@pytest.mark.parametrize(
    ("update", "index", "error", "culprit"),
    [
        (((2, 4, 3), tg.float32), ((5,), tg.int64), tg.ShapeError, r"must have shape \(2, 5, 3\)"),
        (
            ((2, 5, 3), tg.float32),
            ((5, 1), tg.int64),
            tg.ShapeError,
            r"index i \(5, 1\) must be 1-D",
        ),
        (((2, 5, 3), tg.float32), ((5,), tg.float32), tg.DTypeError, r"integer but i is float32"),
        (((2, 5, 3), tg.int32), ((5,), tg.int64), tg.DTypeError, r"u is int32, target float32"),
    ],
)
def test_bad_operands_are_named(update, index, error, culprit) -> None:
    g = tg.Graph("bad")
    t = g.input("t", (2, 8, 3), tg.float32)
    u = g.input("u", *update)
    i = g.input("i", *index)
    with pytest.raises(error, match=r"%\d+ index_update: .*" + culprit):
        index_update(t, u, i, 1)


@pytest.mark.parametrize("bad", [-1, 5, 2**40])
def test_an_index_out_of_range_is_a_run_error_on_every_backend(bad: int) -> None:
    target = np.zeros((2, 5), np.float32)
    update = np.ones((2, 2), np.float32)
    index = np.array([0, bad], np.int64)
    prog = tg.compile(build(target, update, index, 1, True))
    message = rf"%\d+ index_update: index {bad} is out of range for axis 1 of size 5"
    for backend in BACKENDS:
        with pytest.raises(tg.RunError, match=message):
            prog.run({"t": target, "u": update, "i": index}, backend=backend)


def test_mlx_guards_only_indices_that_can_leave_the_axis() -> None:
    # A run-time index is checked on the device; a constant one in range is not (checked
    # once on the host); a constant one out of range stays guarded, so the run raises.
    g = tg.Graph("guards")
    t = g.input("t", (4, 2))
    u = g.input("u", (2, 2))
    fed = index_update(t, u, g.input("i", (2,), tg.int64), 0)
    inside = index_update(fed, u, g.constant(np.array([3, 0], np.int32)), 0)
    outside = index_update(inside, u, g.constant(np.array([4, 0], np.int32)), 0)
    g.output(outside)
    assert [n.id for n in guarded_nodes(g)] == [fed.id, outside.id]
