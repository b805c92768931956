"""The builder API: operators, scalars, methods and canonical attributes."""

import numpy as np
import pytest

import tensorgraph as tg
from tensorgraph.runtime.reference import run_reference


def test_operators_build_the_named_ops() -> None:
    g = tg.Graph()
    a, b = g.input("a", (2, 3)), g.input("b", (2, 3))
    ops = {
        "add": a + b,
        "sub": a - b,
        "mul": a * b,
        "div": a / b,
        "pow": a**b,
        "neg": -a,
        "lt": a < b,
        "ge": a >= b,
        "eq": a == b,
        "ne": a != b,
    }
    for op, tensor in ops.items():
        assert tensor.node.op == op
    assert (a @ b.T).node.op == "matmul"
    assert (2.0 - a).node.inputs[1] == a.id, "r-ops keep operand order"


def test_python_scalars_take_the_tensor_dtype() -> None:
    g = tg.Graph()
    h = g.input("h", (2,), tg.float16)
    i = g.input("i", (2,), tg.int32)
    assert (h + 1.0).dtype == tg.float16
    assert (i + 2).dtype == tg.int32
    assert (i + 1.5).dtype == tg.float32
    assert (i < 1).dtype == tg.bool_


def test_methods_mirror_functions_and_normalise_axes() -> None:
    g = tg.Graph()
    x = g.input("x", (2, 3, 4))
    negative, positive = x.sum(-1).node, x.sum(2).node
    assert (negative.op, negative.attrs, negative.inputs) == (
        positive.op,
        positive.attrs,
        positive.inputs,
    )
    assert x.sum(-1).node.attr("axes") == x.sum(2).node.attr("axes") == (2,)
    assert x.transpose(1, 0, 2).shape == (3, 2, 4)
    assert x.T.shape == (4, 3, 2)
    assert x.reshape(6, -1).shape == (6, 4)
    assert x.astype("float16").dtype == tg.float16
    assert tg.squeeze(tg.expand_dims(x, 0)).shape == (2, 3, 4)
    assert x.flatten().shape == (24,)


def test_cross_graph_and_truthiness_are_rejected() -> None:
    g, h = tg.Graph("g"), tg.Graph("h")
    x, y = g.input("x", (2,)), h.input("y", (2,))
    with pytest.raises(tg.GraphError):
        tg.add(x, y)
    with pytest.raises(tg.GraphError, match="truth value"):
        bool(x < 1)


def test_indexing_runs_like_numpy() -> None:
    g = tg.Graph()
    x = g.input("x", (4, 5))
    g.output(x[1:3], x[:, ::2], x[-1], x[None, 2, 1:4])
    value = np.arange(20, dtype=np.float32).reshape(4, 5)
    got = run_reference(g, {"x": value})
    for a, b in zip(got, [value[1:3], value[:, ::2], value[-1], value[None, 2, 1:4]], strict=True):
        np.testing.assert_array_equal(a, b)


def test_bound_params_travel_with_the_graph() -> None:
    g = tg.Graph()
    x = g.input("x", (2,))
    w = g.param("w", (2,), value=np.array([2.0, 3.0], np.float32))
    g.output(x * w)
    (out,) = tg.compile(g).run({"x": np.ones(2, np.float32)}, backend="numpy")
    np.testing.assert_array_equal(out, [2.0, 3.0])
    with pytest.raises(tg.ShapeError, match="param 'w'"):
        g.bind("w", np.ones(3, np.float32))


def test_generators_take_mlx_signatures_inside_a_graph_block() -> None:
    g = tg.Graph("gen")
    with g:
        steps = tg.arange(0, 10, 2)
        halves = tg.arange(3, dtype=tg.float32)
        filled = tg.full((2, 2), 1.5)
        blank = tg.zeros((3,), tg.int32)
    g.output(steps, halves, filled, blank, tg.ones((2,), graph=g))
    got = run_reference(g, {})
    want = [
        np.arange(0, 10, 2, dtype=np.int32),
        np.arange(3, dtype=np.float32),
        np.full((2, 2), 1.5, np.float32),
        np.zeros(3, np.int32),
        np.ones(2, np.float32),
    ]
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    with pytest.raises(tg.GraphError, match="arange needs a graph"):
        tg.arange(5)


def test_tensor_methods_for_scans_and_logical_reductions() -> None:
    g = tg.Graph("methods")
    x = g.input("x", (2, 3), tg.int32)
    g.output(x.cumsum(1), x.prod(0), (x > 1).any(1), (x > 1).all(), x.argmin(1), x.cumprod(0))
    data = np.array([[1, 2, 3], [4, 0, 6]], np.int32)
    got = tg.compile(g).run({"x": data}, backend="numpy")
    # By hand: running row sums; column products; x > 1 is [[F,T,T],[T,F,T]];
    # row minima at columns 0 and 1; running column products [[1,2,3],[4,0,18]].
    want = [
        [[1, 3, 6], [4, 4, 10]],
        [4, 0, 18],
        [True, True],
        False,
        [0, 1],
        [[1, 2, 3], [4, 0, 18]],
    ]
    assert [o.tolist() for o in got] == want
    assert got[0].dtype == np.int64  # integer scans accumulate in int64, as torch does
