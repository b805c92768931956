"""scatter_add (ir.scatter): the op table's cases and a property over random shapes,
axes and (repeated) indices against an independent oracle (a Python loop adding one
element at a time, in float64), every backend; out-of-range indices a RunError naming
the node on every backend, from a feed (host-checked) or computed (the device guard);
named inference errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.errors import DTypeError, RunError, ShapeError
from tensorgraph.ir.scatter import scatter_add
from tests.ir.op_cases import BF16, Case, case_adder, check_case

CASES: list[Case] = []  # the op table's cases (tests/ir/test_ops.py runs them all)
case = case_adder(CASES)
BACKENDS = ("numpy", "arena", "mlx")


def loop_oracle(axis: int):
    """out = target; out[..., indices[i], ...] += update[i] one element at a time."""

    def oracle(target: np.ndarray, update: np.ndarray, indices: np.ndarray) -> np.ndarray:
        out = target.astype(np.float64)
        for position in np.ndindex(update.shape):
            into = list(position)
            into[axis] = int(indices[position])
            out[tuple(into)] += float(update[position])
        return out

    return oracle


_rng = np.random.default_rng(5)
case(
    "scatter_add",
    "rows-repeated",
    [
        _rng.standard_normal((4, 3)).astype(np.float32),
        _rng.standard_normal((5, 3)).astype(np.float32),
        np.array([[1] * 3, [3] * 3, [1] * 3, [0, 2, 1], [3] * 3], np.int32),
    ],
    lambda t, u, i: scatter_add(t, u, i, 0),
    tg.float32,
    loop_oracle(0),
)
case(
    "scatter_add",
    "last-axis-smaller-bf16",
    [
        _rng.standard_normal((2, 3, 4)).astype(BF16),
        _rng.standard_normal((2, 2, 3)).astype(BF16),
        np.array([[[0, 3, 3], [1, 1, 2]], [[2, 0, 1], [3, 3, 3]]], np.int64),
    ],
    lambda t, u, i: scatter_add(t, u, i, -1),
    tg.bfloat16,
    loop_oracle(2),
)


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_case(c: Case) -> None:
    check_case(c)


@st.composite
def _problems(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    target_shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    axis = draw(st.integers(0, len(target_shape) - 1))
    shape = [draw(st.integers(1, d)) for d in target_shape]
    shape[axis] = draw(st.integers(0, 6))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    target = rng.standard_normal(target_shape).astype(np.float32)
    update = rng.standard_normal(shape).astype(np.float32)
    indices = rng.integers(0, target_shape[axis], shape).astype(np.int32)
    return target, update, indices, axis


@given(_problems())
def test_random_scatters_agree_on_every_backend(problem) -> None:
    target, update, indices, axis = problem
    g = tg.Graph("scatter")
    out = scatter_add(
        g.input("t", target.shape),
        g.input("u", update.shape),
        g.input("i", indices.shape, tg.int32),
        axis,
    )
    g.output(out * 2.0)
    prog = tg.compile(g)
    feeds = {"t": target, "u": update, "i": indices}
    want = 2 * loop_oracle(axis)(target, update, indices)
    ref = prog.run(feeds, backend="numpy")[0]
    np.testing.assert_allclose(ref, want, rtol=1e-5, atol=1e-5)
    assert prog.run(feeds, backend="arena")[0].tobytes() == ref.tobytes()
    np.testing.assert_allclose(prog.run(feeds, backend="mlx")[0], ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("computed", [False, True])
@pytest.mark.parametrize("backend", BACKENDS)
def test_an_index_past_the_axis_is_a_run_error(backend: str, computed: bool) -> None:
    """From a feed (host-checked) or computed from one (an argmax over scores, which only
    the device can check: 4 lies past the 3 rows)."""
    g = tg.Graph("bad")
    target = g.input("t", (3, 2))
    if computed:
        best = tg.argmax(g.input("scores", (2, 5)), axis=1).astype(tg.int32)
        indices = tg.broadcast_to(best.reshape(2, 1), (2, 2))
        feeds = {"scores": np.array([[0, 1, 0, 0, 0], [0, 0, 0, 0, 9]], np.float32)}
    else:
        indices = g.input("i", (2, 2), tg.int32)
        feeds = {"i": np.array([[1, 1], [4, 0]], np.int32)}
    g.output(scatter_add(target, g.input("u", (2, 2)), indices, 0))
    prog = tg.compile(g)
    feeds |= {"t": np.ones((3, 2), np.float32), "u": np.ones((2, 2), np.float32)}
    with pytest.raises(RunError, match=r"%\d+ scatter_add: index 4 is out of range for axis 0"):
        prog.run(feeds, backend=backend)


@pytest.mark.parametrize(
    ("shapes", "error", "match"),
    [
        (((3, 2), (2, 2), (2, 1)), ShapeError, "must have the shape of update"),
        (((3, 2), (2, 3), (2, 3)), ShapeError, "no larger extent off axis 0"),
        (((3, 2), (2,), (2,)), ShapeError, "the rank of target"),
    ],
)
def test_disagreements_are_named(shapes, error, match) -> None:
    g = tg.Graph("g")
    t, u, i = shapes
    with pytest.raises(error, match=match):
        scatter_add(g.input("t", t), g.input("u", u), g.input("i", i, tg.int32), 0)


def test_dtypes_are_named() -> None:
    g = tg.Graph("g")
    t, u = g.input("t", (3, 2)), g.input("u", (2, 2), tg.float16)
    with pytest.raises(DTypeError, match="must be integer"):
        scatter_add(t, g.input("v", (2, 2)), g.input("f", (2, 2)), 0)
    with pytest.raises(DTypeError, match="float16, target float32"):
        scatter_add(t, u, g.input("i", (2, 2), tg.int32), 0)
