"""Bad input raises the right TensorGraphError, and the message names the culprit: the
node (`%id op`), the input or param, and the values involved."""

import numpy as np
import pytest

import tensorgraph as tg
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node
from tensorgraph.ir.verify import verify
from tensorgraph.runtime.feeds import bind_feeds
from tensorgraph.runtime.reference import run_reference


def test_all_errors_share_the_root_class() -> None:
    for cls in (tg.ShapeError, tg.DTypeError, tg.GraphError, tg.PlanError, tg.RunError):
        assert issubclass(cls, tg.TensorGraphError)


# ---------------------------------------------------------------- ShapeError


def test_matmul_inner_dims_name_both_shapes_and_the_node() -> None:
    g = tg.Graph("mlp")
    x = g.input("x", (32, 1024))
    w = g.param("w1", (512, 1024))
    with pytest.raises(tg.ShapeError, match=r"%\d+ matmul.*x \(32, 1024\).*w1 \(512, 1024\)"):
        _ = x @ w


def _shape_errors(g: tg.Graph) -> list:
    x = g.input("x", (2, 3))
    a, b = g.input("a", (2, 3)), g.input("b", (4, 3))
    image, kernel = g.input("image", (1, 3, 8, 8)), g.input("kernel", (4, 2, 3, 3))
    return [
        (lambda: a + b, r"%\d+ add: shapes do not broadcast: a \(2, 3\), b \(4, 3\)"),
        (lambda: x.reshape(4, 2), r"cannot reshape \(2, 3\).*\(4, 2\)"),
        (lambda: x.sum(2), "axis 2 is out of range for rank 2"),
        (lambda: tg.softmax(x, -3), "axis -3 is out of range for rank 2"),
        (lambda: tg.concatenate([a, x.T]), r"%\d+ concat: .*a \(2, 3\).*%\d+ \(3, 2\)"),
        (lambda: tg.slice_update(x, b, 0, 0), r"%\d+ slice_update: .*b \(4, 3\) does not fit x"),
        (lambda: tg.narrow(x, 1, 2, 2), r"%\d+ narrow: narrow \[2, 4\) is outside axis 1 of x"),
        (lambda: tg.broadcast_to(b, (2, 3)), r"%\d+ broadcast_to: .*b \(4, 3\)"),
        (lambda: tg.conv2d(image, kernel), r"%\d+ conv2d: .*image \(1, 3, 8, 8\).*kernel"),
        (lambda: tg.max_pool2d(image, 9), r"%\d+ max_pool2d: .*\(9, 9\).*image"),
        (lambda: tg.matmul(x, x.sum()), r"%\d+ matmul: .*rank >= 1 but %\d+ is a scalar"),
        (lambda: tg.matmul(g.input("p", (2, 3, 4)), g.input("q", (3, 4, 5))), r"batch dims.*p"),
    ]


@pytest.mark.parametrize("index", range(12))
def test_shape_errors_name_the_node_and_operands(index: int) -> None:
    build, pattern = _shape_errors(tg.Graph())[index]
    with pytest.raises(tg.ShapeError, match=pattern):
        build()


def test_conv_transpose2d_checks_name_the_node_and_the_rule() -> None:
    g = tg.Graph()
    image, kernel = g.input("image", (1, 4, 5, 5)), g.input("kernel", (4, 2, 3, 3))
    with pytest.raises(tg.ShapeError, match=r"%\d+ conv_transpose2d: output_padding \(2, 2\)"):
        tg.conv_transpose2d(image, kernel, stride=2, output_padding=2)
    with pytest.raises(tg.ShapeError, match=r"%\d+ conv_transpose2d: image .* groups=3"):
        tg.conv_transpose2d(image, g.input("k3", (4, 2, 3, 3)), groups=3)
    with pytest.raises(tg.ShapeError, match=r"padding \(5, 5\) leaves no output"):
        tg.conv_transpose2d(image, kernel, padding=5)
    ints = g.input("ints", (1, 4, 5, 5), tg.int32)
    with pytest.raises(tg.DTypeError, match=r"conv_transpose2d needs float operands"):
        tg.conv_transpose2d(ints, g.input("ik", (4, 2, 3, 3), tg.int32))


def test_the_shape_error_table_is_complete() -> None:
    assert len(_shape_errors(tg.Graph())) == 12


# ---------------------------------------------------------------- DTypeError


def test_dtype_errors_name_the_input() -> None:
    g = tg.Graph()
    ids = g.input("ids", (3,), tg.int32)
    x = g.input("x", (3,), tg.float32)
    with pytest.raises(tg.DTypeError, match=r"%\d+ exp: exp needs a floating-point .*ids is int32"):
        tg.exp(ids)
    with pytest.raises(tg.DTypeError, match=r"%\d+ where: .*cond is float32"):
        tg.where(g.input("cond", (3,), tg.float32), ids, ids)
    with pytest.raises(tg.DTypeError, match=r"%\d+ take: .*integer indices but x is float32"):
        tg.take(x, x)
    with pytest.raises(tg.DTypeError, match=r"%\d+ logical_and: .*ids is int32"):
        tg.logical_and(ids, ids)
    with pytest.raises(tg.DTypeError, match=r"%\d+ add: add needs a numeric input but b is bool"):
        _ = g.input("b", (3,), tg.bool_) + ids
    with pytest.raises(tg.DTypeError, match=r"%\d+ slice_update: .*ids is int32, target float32"):
        tg.slice_update(x, ids, 0, 0)


def test_unknown_dtype_names_are_named() -> None:
    g = tg.Graph()
    with pytest.raises(tg.DTypeError, match="unknown dtype 'float8'"):
        g.input("z", (1,), "float8")
    with pytest.raises(tg.DTypeError, match="constant of unsupported dtype complex64"):
        g.constant(np.zeros(2, np.complex64))
    with pytest.raises(tg.DTypeError, match="unknown dtype 'half'"):
        g.input("y", (1,)).astype("half")


# ---------------------------------------------------------------- GraphError


def test_graph_errors_name_the_culprit() -> None:
    g, other = tg.Graph("g"), tg.Graph("other")
    x = g.input("x", (2,))
    with pytest.raises(tg.GraphError, match="unknown op 'nope'"):
        g.add("nope", [x.id])
    with pytest.raises(tg.GraphError, match=r"different graphs \['g', 'other'\]"):
        _ = x + other.input("y", (2,))
    with pytest.raises(tg.GraphError, match=r"duplicate name 'x' \(already %0\)"):
        g.input("x", (3,))
    with pytest.raises(tg.GraphError, match=r"graph 'other': output .*%0 input.* not one of"):
        other.output(x)
    with pytest.raises(tg.GraphError, match=r"%\d+ relu: unknown attribute\(s\) \['alpha'\]"):
        g.add("relu", [x.id], {"alpha": 1})
    with pytest.raises(tg.GraphError, match=r"%\d+ softmax: missing required attribute 'axis'"):
        g.add("softmax", [x.id])
    with pytest.raises(tg.GraphError, match=r"%\d+ add: takes 2 inputs but got 1"):
        g.add("add", [x.id])
    with pytest.raises(tg.GraphError, match=r"%\d+ exp: input %99 is not a node of graph 'g'"):
        g.add("exp", [99])
    with pytest.raises(tg.GraphError, match=r"%\d+ sum: attribute 'keepdims' must be bool"):
        g.add("sum", [x.id], {"axes": (0,), "keepdims": 1})
    with pytest.raises(tg.GraphError, match="graph 'g' has no param named 'w'"):
        g.bind("w", np.zeros(2, np.float32))


F32 = tg.float32
A = Node(0, "input", (), {"name": "a", "shape": (2,), "dtype": "float32"}, (2,), F32)


def test_verifier_rejects_dangling_and_out_of_order_nodes() -> None:
    dangling = Node(1, "exp", (7,), {}, (2,), F32)
    with pytest.raises(tg.GraphError, match=r"%1 exp: input %7 is no node"):
        verify(Graph.from_nodes("bad", [A, dangling], [1]))
    later = Node(2, "exp", (3,), {}, (2,), F32)
    after = Node(3, "exp", (0,), {}, (2,), F32)
    with pytest.raises(tg.GraphError, match=r"%2 exp: input %3 is a later node"):
        verify(Graph.from_nodes("order", [A, later, after], [2]))
    cycle = [A, Node(1, "exp", (2,), {}, (2,), F32), later]
    with pytest.raises(tg.GraphError, match=r"%1 exp: input %2 is a later node"):
        verify(Graph.from_nodes("cycle", cycle, [1]))
    with pytest.raises(tg.GraphError, match=r"output 0 is %5, no node"):
        verify(Graph.from_nodes("outputs", [A], [5]))


def test_verifier_rejects_wrong_inference_unknown_ops_and_duplicates() -> None:
    wrong_shape = Node(1, "exp", (0,), {}, (3,), F32)
    with pytest.raises(tg.ShapeError, match=r"%1 exp: shape \(3,\) but inference gives \(2,\)"):
        verify(Graph.from_nodes("shape", [A, wrong_shape], [1]))
    wrong_dtype = Node(1, "exp", (0,), {}, (2,), tg.float16)
    with pytest.raises(tg.DTypeError, match=r"%1 exp: dtype float16 but inference gives float32"):
        verify(Graph.from_nodes("dtype", [A, wrong_dtype], [1]))
    with pytest.raises(tg.GraphError, match=r"%1 nope: unknown op 'nope'"):
        verify(Graph.from_nodes("op", [A, Node(1, "nope", (0,), {}, (2,), F32)], [1]))
    twin = Node(1, "input", (), {"name": "a", "shape": (2,), "dtype": "float32"}, (2,), F32)
    with pytest.raises(tg.GraphError, match=r"%1 input: duplicate name 'a' \(%0\)"):
        verify(Graph.from_nodes("names", [A, twin], [1]))
    with pytest.raises(tg.GraphError, match=r"duplicate node id %0"):
        Graph.from_nodes("ids", [A, A], [0])


# ---------------------------------------------------------------- RunError


def _net() -> tg.Graph:
    g = tg.Graph("net")
    x = g.input("x", (2, 3))
    w = g.param("w", (3,))
    g.output(x * w)
    return g


GOOD = np.ones((2, 3), np.float32)
W = {"w": np.ones(3, np.float32)}
RUN_ERRORS = [
    ({}, W, r"graph 'net': missing input\(s\) \['x'\]; expected x \(2, 3\) float32"),
    ({"x": GOOD, "y": GOOD}, W, r"unknown input\(s\) \['y'\]; its inputs: x"),
    ({"x": GOOD}, {**W, "v": W["w"]}, r"unknown param\(s\) \['v'\]; its params: w"),
    ({"x": GOOD.T}, W, r"input 'x': expected shape \(2, 3\) but got \(3, 2\)"),
    (
        {"x": np.full((2, 3), 0.1)},
        W,
        r"input 'x': expected dtype float32 but got float64; cannot convert it exactly: 0.1 at "
        r"index \(0, 0\) would become 0.10000000149",
    ),
    ({"x": GOOD}, {"w": np.full(3, 1e-8)}, "param 'w': expected dtype float32 but got float64"),
    ({"x": GOOD}, {"w": np.ones(4, np.float32)}, r"param 'w': expected shape \(3,\) but got"),
    ({"x": GOOD}, None, r"param 'w' is neither bound nor given \(expected \(3,\) float32\)"),
    ({"x": np.float32(1)}, W, r"input 'x': expected shape \(2, 3\) but got \(\)"),
    ({"x": [[1, 2, 3]]}, W, r"input 'x': expected shape \(2, 3\) but got \(1, 3\)"),
    ({"x": np.full((2, 3), "a")}, W, "input 'x': expected dtype float32 but got <U1"),
    ({"x": [["a"] * 3] * 2}, W, "input 'x': expected dtype float32 but got Python data of <U1"),
]


@pytest.mark.parametrize(("inputs", "params", "pattern"), RUN_ERRORS)
def test_run_errors_name_the_input_or_param(inputs, params, pattern) -> None:
    g = _net()
    with pytest.raises(tg.RunError, match=pattern):
        bind_feeds(g, inputs, params)
    with pytest.raises(tg.RunError, match=pattern):
        run_reference(g, inputs, params)


@pytest.mark.parametrize("backend", ["numpy", "arena"])
def test_programs_report_run_errors_before_running(backend: str) -> None:
    prog = tg.compile(_net())
    with pytest.raises(tg.RunError, match=r"missing input\(s\) \['x'\]"):
        prog.run({}, W, backend=backend)
    with pytest.raises(tg.RunError, match="input 'x': expected dtype float32 but got float64"):
        prog.run({"x": np.full((2, 3), 0.1)}, W, backend=backend)
    with pytest.raises(tg.RunError, match="unknown backend 'tpu'"):
        prog.run({"x": GOOD}, W, backend="tpu")


def test_python_data_that_would_change_is_rejected() -> None:
    g = tg.Graph("ints")
    g.output(g.input("ids", (2,), tg.int8) + 1)
    with pytest.raises(tg.RunError, match="input 'ids': expected dtype int8 but got Python data"):
        run_reference(g, {"ids": [1.5, 2.0]})
    with pytest.raises(tg.RunError, match=r"input 'ids': .*cannot convert it exactly: 300 at"):
        run_reference(g, {"ids": [1, 300]})
    flags = tg.Graph("flags")
    flags.output(tg.logical_not(flags.input("mask", (2,), tg.bool_)))
    with pytest.raises(tg.RunError, match="input 'mask': expected dtype bool but got Python"):
        run_reference(flags, {"mask": [1, 0]})


def test_take_out_of_range_names_the_node_and_the_index() -> None:
    g = tg.Graph("embed")
    table = g.param("table", (10, 4), value=np.zeros((10, 4), np.float32))
    g.output(tg.take(table, g.input("ids", (3,), tg.int32)))
    for bad in (10, -11):
        ids = np.array([1, bad, 2], np.int32)
        with pytest.raises(tg.RunError, match=rf"%\d+ take: index {bad} is out of range .*10"):
            run_reference(g, {"ids": ids})


def test_integer_power_with_a_negative_exponent_names_the_node() -> None:
    g = tg.Graph("pow")
    g.output(g.input("a", (2,), tg.int32) ** g.input("b", (2,), tg.int32))
    feeds = {"a": np.array([2, 3], np.int32), "b": np.array([1, -2], np.int32)}
    with pytest.raises(tg.RunError, match=r"%\d+ pow: integer power with the negative exponent -2"):
        run_reference(g, feeds)
