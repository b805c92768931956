"""Bad input raises the right TensorGraphError, and the message names the culprit."""

import numpy as np
import pytest

import tensorgraph as tg
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node
from tensorgraph.ir.verify import verify


def test_matmul_inner_dims_name_both_shapes_and_the_node() -> None:
    g = tg.Graph("mlp")
    x = g.input("x", (32, 1024))
    w = g.param("w1", (512, 1024))
    with pytest.raises(tg.ShapeError, match=r"%\d+ matmul.*x \(32, 1024\).*w1 \(512, 1024\)"):
        _ = x @ w


def test_broadcast_failure_names_operands() -> None:
    g = tg.Graph()
    a, b = g.input("a", (2, 3)), g.input("b", (4, 3))
    with pytest.raises(tg.ShapeError, match=r"%\d+ add.*a \(2, 3\).*b \(4, 3\)"):
        _ = a + b


def test_reshape_and_axis_errors() -> None:
    g = tg.Graph()
    x = g.input("x", (2, 3))
    with pytest.raises(tg.ShapeError, match=r"\(2, 3\).*\(4, 2\)"):
        x.reshape(4, 2)
    with pytest.raises(tg.ShapeError, match="axis 2 is out of range for rank 2"):
        x.sum(2)


def test_dtype_errors_name_the_input() -> None:
    g = tg.Graph()
    i = g.input("ids", (3,), tg.int32)
    with pytest.raises(tg.DTypeError, match=r"%\d+ exp.*ids is int32"):
        tg.exp(i)
    with pytest.raises(tg.DTypeError, match="float8"):
        g.input("z", (1,), "float8")
    with pytest.raises(tg.DTypeError, match="cond"):
        tg.where(g.input("cond", (3,), tg.float32), i, i)


def test_graph_errors() -> None:
    g, other = tg.Graph("g"), tg.Graph("other")
    x = g.input("x", (2,))
    with pytest.raises(tg.GraphError, match="unknown op 'nope'"):
        g.add("nope", [x.id])
    with pytest.raises(tg.GraphError, match=r"different graphs"):
        _ = x + other.input("y", (2,))
    with pytest.raises(tg.GraphError, match="duplicate name 'x'"):
        g.input("x", (3,))
    with pytest.raises(tg.GraphError, match="not one of its nodes"):
        other.output(x)
    with pytest.raises(tg.GraphError, match="unknown attribute"):
        g.add("relu", [x.id], {"alpha": 1})


def test_verifier_rejects_dangling_and_out_of_order_nodes() -> None:
    f32 = tg.float32
    a = Node(0, "input", (), {"name": "a", "shape": (2,), "dtype": "float32"}, (2,), f32)
    dangling = Node(1, "exp", (7,), {"inplace": -1}, (2,), f32)
    with pytest.raises(tg.GraphError, match=r"%1 exp: input %7 is no node"):
        verify(Graph.from_nodes("bad", [a, dangling], [1]))
    later = Node(2, "exp", (3,), {"inplace": -1}, (2,), f32)
    after = Node(3, "exp", (0,), {"inplace": -1}, (2,), f32)
    with pytest.raises(tg.GraphError, match=r"%2 exp: input %3 is a later node"):
        verify(Graph.from_nodes("cycle", [a, later, after], [2]))
    wrong_shape = Node(1, "exp", (0,), {"inplace": -1}, (3,), f32)
    with pytest.raises(tg.ShapeError, match=r"%1 exp: shape \(3,\)"):
        verify(Graph.from_nodes("shape", [a, wrong_shape], [1]))


def test_run_errors_name_the_input() -> None:
    g = tg.Graph("net")
    x = g.input("x", (2, 3))
    w = g.param("w", (3,))
    g.output(x * w)
    prog = tg.compile(g)
    good = np.ones((2, 3), np.float32)
    w_value = {"w": np.ones(3, np.float32)}
    with pytest.raises(tg.RunError, match=r"missing input\(s\) \['x'\]"):
        prog.run({}, w_value, backend="numpy")
    with pytest.raises(tg.RunError, match=r"unknown input\(s\) \['y'\]"):
        prog.run({"x": good, "y": good}, w_value, backend="numpy")
    with pytest.raises(tg.RunError, match=r"input 'x': expected shape \(2, 3\) but got \(3, 2\)"):
        prog.run({"x": good.T.copy()}, w_value, backend="arena")
    with pytest.raises(tg.RunError, match="input 'x': expected dtype float32 but got float64"):
        prog.run({"x": good.astype(np.float64)}, w_value, backend="numpy")
    with pytest.raises(tg.RunError, match="param 'w' is neither bound nor given"):
        prog.run({"x": good}, backend="numpy")
    with pytest.raises(tg.RunError, match="unknown backend 'tpu'"):
        prog.run({"x": good}, w_value, backend="tpu")


def test_all_errors_share_the_root_class() -> None:
    for cls in (tg.ShapeError, tg.DTypeError, tg.GraphError, tg.PlanError, tg.RunError):
        assert issubclass(cls, tg.TensorGraphError)
