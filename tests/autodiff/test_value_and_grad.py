"""tg.value_and_grad: gradients of random differentiable graphs against central
differences of the float64 evaluation, every backend on gradient graphs, the output
contract, and named errors for bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.errors import GraphError
from tensorgraph.ir.quantized import quantize_rows
from tensorgraph.ir.tensor import Tensor
from tests.autodiff.float64 import central_differences, evaluate
from tests.autodiff.strategies import differentiable_graphs
from tests.strategies import feeds, graphs


def _feeds(graph: tg.Graph, seed: int) -> tuple[dict, dict]:
    rng = np.random.default_rng(seed)
    inputs = {n.name: rng.uniform(-1.5, 1.5, n.shape).astype(np.float32) for n in graph.inputs}
    params = {n.name: rng.uniform(-1.5, 1.5, n.shape).astype(np.float32) for n in graph.params}
    return inputs, params


def _names(graph: tg.Graph, everything: bool) -> list[str]:
    names = [n.name for n in graph.params]
    return names + [n.name for n in graph.inputs] if everything else names


@given(differentiable_graphs(), st.integers(0, 2**16), st.booleans())
@settings(max_examples=25)
def test_gradients_equal_central_differences(graph: tg.Graph, seed: int, inputs: bool) -> None:
    """The gradient graph evaluated in float64 equals central differences of the float64
    loss. Tolerance: with step h = 1e-5 the central difference errs by h^2 |f'''| / 6
    (f''' of these squashed, bounded graphs stays below ~1e2: <= 2e-9) plus the float64
    rounding of two loss values divided by 2h (|f| <= ~1e2 here: 1e2 * 2^-53 / 1e-5 ~
    1e-9); both sides read the same float32 constants, so 1e-6 absolute plus 1e-6
    relative bounds the difference with margin. The float32 reference interpreter then
    agrees with the float64 gradient within 5e-4 of the gradient's scale: a float32 op
    errs by at most ~2^-24 relative, a value passes through <= ~40 ops (8 builders of
    <= 5 ops each) and sums of <= 64 terms, 40 * 64 * 6e-8 ~ 1.5e-4, doubled by the
    backward's own ops."""
    wrt = _names(graph, inputs)
    vg = tg.value_and_grad(graph, wrt)
    tg.ir.verify(vg)
    feeds, params = _feeds(graph, seed)
    exact = evaluate(vg, feeds, params)
    # The loss is the graph's, to float64 rounding, unless a tanh gelu was expanded
    # (autodiff/expand.py): its decomposition reads float32 constants (sqrt(2/pi) and
    # sqrt(2/pi) * 0.044715) where the kernel uses float64 ones, each off by at most 2^-24
    # relative; carried through <= ~40 bounded ops, 1e-6 relative bounds the change.
    expanded = any(n.op == "gelu" and n.attr("approximate") == "tanh" for n in graph.nodes)
    loss = evaluate(graph, feeds, params)[0]
    assert exact[0] == pytest.approx(loss, rel=1e-6 if expanded else 1e-12)
    for name, grad in zip(wrt, exact[1:], strict=True):
        numeric = central_differences(graph, feeds, params, name)
        np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-6, err_msg=name)
    prog = tg.compile(vg)
    ours = prog.run(feeds, params=params, backend="numpy")
    for grad, mine in zip(exact, ours, strict=True):
        assert mine.shape == grad.shape and mine.dtype == np.float32
        scale = 1 + np.max(np.abs(grad), initial=0)
        np.testing.assert_allclose(mine, grad, rtol=0, atol=5e-4 * scale)


@given(differentiable_graphs(), st.integers(0, 2**16))
@settings(max_examples=8)
def test_backends_agree_on_gradient_graphs(graph: tg.Graph, seed: int) -> None:
    """The arena executor equals the reference interpreter bit for bit on a gradient
    graph, as on any graph; MLX agrees within float32 rounding (1e-4 of the scale)."""
    vg = tg.value_and_grad(graph, _names(graph, True))
    feeds, params = _feeds(graph, seed)
    prog = tg.compile(vg)
    reference = prog.run(feeds, params=params, backend="numpy")
    arena = prog.run(feeds, params=params, backend="arena")
    mlx = prog.run(feeds, params=params, backend="mlx")
    for ref, got, fast in zip(reference, arena, mlx, strict=True):
        np.testing.assert_array_equal(got, ref)
        scale = 1 + np.max(np.abs(ref), initial=0)
        np.testing.assert_allclose(fast, ref, rtol=0, atol=1e-4 * scale)


def _summed(graph: tg.Graph) -> tg.Graph:
    """`graph` with its outputs replaced by one loss: the sum of each output times fixed
    weights."""
    g = tg.Graph.from_nodes(graph.name, graph.nodes, [], graph.param_values)
    total = None
    for k, o in enumerate(graph.outputs):
        weights = np.random.default_rng(k).uniform(-1, 1, graph.node(o).shape)
        term = (Tensor(g, o) * g.constant(weights.astype(np.float32))).sum()
        total = term if total is None else total + term
    g.output(total)
    return g


@given(graphs(), st.integers(0, 2**16))
@settings(max_examples=10)
def test_backends_agree_on_gradients_of_the_suite_random_graphs(graph: tg.Graph, seed: int):
    """The suite's random graphs (kinks, ties, views, slice updates, fused ops on empty
    slices: attention over zero keys, norms of empty rows) differentiate, and their
    gradient graphs run alike: arena bit for bit, MLX within 1e-3 of the scale (float32
    rounding through up to ~12 ops and their backward)."""
    g = _summed(graph)
    vg = tg.value_and_grad(g, [n.name for n in g.nodes if n.op in ("input", "param")])
    inputs, params = feeds(g, seed)
    prog = tg.compile(vg)
    reference = prog.run(inputs, params=params, backend="numpy")
    arena = prog.run(inputs, params=params, backend="arena")
    mlx = prog.run(inputs, params=params, backend="mlx")
    for ref, got, fast in zip(reference, arena, mlx, strict=True):
        np.testing.assert_array_equal(got, ref)
        scale = 1 + np.max(np.abs(ref), initial=0)
        np.testing.assert_allclose(fast, ref, rtol=0, atol=1e-3 * scale)


def test_attention_over_zero_keys_has_zero_gradients() -> None:
    """Its output is 0 whatever q is (the softmax over no key once raised a ShapeError
    in the backward: a max over a zero-size axis)."""
    g = tg.Graph("no_keys")
    q = g.input("q", (1, 1, 3, 4), tg.float32)
    keys = tg.narrow(q, 2, 0, 0)
    g.output(tg.sum(tg.scaled_dot_product_attention(q, keys, keys) + q))
    out = tg.compile(tg.value_and_grad(g, "q")).run(
        {"q": np.ones((1, 1, 3, 4), np.float32)}, backend="numpy"
    )
    np.testing.assert_array_equal(out[1], np.ones((1, 1, 3, 4), np.float32))


def _mlp() -> tg.Graph:
    g = tg.Graph("mlp")
    x = g.input("x", (4, 3), tg.float32)
    w1 = g.param("w1", (3, 5), tg.float32)
    b1 = g.param("b1", (5,), tg.float32)
    labels = g.input("labels", (4,), tg.int32)
    logits = tg.tanh(x @ w1 + b1)
    picked = tg.take(
        tg.log_softmax(logits, axis=-1).reshape(-1), labels + tg.arange(g, 0, 20, 5, dtype=tg.int32)
    )
    g.output(-picked.mean())
    return g


def test_outputs_are_loss_then_gradients_in_wrt_order() -> None:
    """Outputs: the loss (the forward's value exactly), then one gradient per wrt name in
    its order, each of its value's shape and dtype; params and bound values unchanged;
    an integer input (the labels) needs no gradient."""
    g = _mlp()
    vg = tg.value_and_grad(g, ["b1", "x", "w1"])
    shapes = [vg.node(o).shape for o in vg.outputs]
    assert shapes == [(), (5,), (4, 3), (3, 5)]
    assert [n.name for n in vg.params] == ["w1", "b1"]
    assert [n.name for n in vg.inputs] == ["x", "labels"]
    assert tg.value_and_grad(g).outputs[1:] == tuple(vg.outputs[i] for i in (3, 1))
    feeds = {"x": np.ones((4, 3), np.float32), "labels": np.array([0, 4, 2, 1], np.int32)}
    params = {"w1": np.full((3, 5), 0.1, np.float32), "b1": np.zeros(5, np.float32)}
    loss = tg.compile(g).run(feeds, params=params, backend="numpy")[0]
    assert tg.compile(vg).run(feeds, params=params, backend="numpy")[0] == loss


def test_by_default_only_float_params_are_differentiated() -> None:
    """An imported model's folded masks are bool params: constants of the model, not
    weights (wrt=None once raised a GraphError on them)."""
    g = tg.Graph("masked_weights")
    w = g.param("w", (3,), tg.float32)
    keep = g.param("keep", (3,), tg.bool_, np.array([True, False, True]))
    g.output(tg.sum(tg.where(keep, w, 0.0)))
    vg = tg.value_and_grad(g)
    assert len(vg.outputs) == 2
    out = tg.compile(vg).run({}, params={"w": np.ones(3, np.float32)}, backend="numpy")
    np.testing.assert_array_equal(out[1], np.array([1, 0, 1], np.float32))


def test_a_loss_not_reading_a_param_has_a_zero_gradient() -> None:
    g = tg.Graph("unused")
    x = g.input("x", (3,), tg.float32)
    g.param("w", (2, 2), tg.float32)
    g.output(tg.sum(x * x))
    vg = tg.value_and_grad(g, ["w", "x"])
    out = tg.compile(vg).run(
        {"x": np.array([1, 2, 3], np.float32)},
        params={"w": np.ones((2, 2), np.float32)},
        backend="numpy",
    )
    np.testing.assert_array_equal(out[1], np.zeros((2, 2), np.float32))
    np.testing.assert_array_equal(out[2], np.array([2, 4, 6], np.float32))


def test_a_value_read_twice_sums_both_cotangents() -> None:
    """d/dx sum(x * x + sin(x)) = 2x + cos(x): x has three readers."""
    g = tg.Graph("twice")
    x = g.input("x", (3,), tg.float32)
    g.output(tg.sum(x * x + tg.sin(x)))
    values = np.array([0.5, -1.0, 2.0], np.float32)
    out = tg.compile(tg.value_and_grad(g, "x")).run({"x": values}, backend="numpy")
    np.testing.assert_allclose(out[1], 2 * values + np.cos(values), rtol=1e-6)


def test_forward_and_backward_share_nodes_after_cse() -> None:
    """The backward of tanh reads the forward's tanh (1 - out^2), and the compiled
    program computes tanh once: CSE and the graph's reuse of forward values."""
    g = tg.Graph("shared")
    x = g.input("x", (4,), tg.float32)
    g.output(tg.sum(tg.tanh(x)))
    prog = tg.compile(tg.value_and_grad(g, "x"))
    assert [n.op for n in prog.graph.nodes].count("tanh") == 1


def test_a_gradient_graph_round_trips_through_json_and_save(tmp_path) -> None:
    """A CNN's gradient graph (max pool's lowest-value padding and constant indices,
    scatter_add, conv transposes) is an ordinary graph: exact JSON round trip, and its
    program saves and loads."""
    g = tg.Graph("cnn")
    x = g.input("x", (2, 3, 8, 8), tg.float32)
    w = g.param("w", (4, 3, 3, 3), tg.float32)
    h = tg.max_pool2d(tg.relu(tg.conv2d(x, w, padding=1)), 3, 2, 1)
    g.output(tg.sum(tg.adaptive_avg_pool2d(h, 1)))
    vg = tg.value_and_grad(g)
    assert tg.Graph.from_json(vg.to_json()) == vg
    prog = tg.compile(vg)
    prog.save(str(tmp_path / "grad.tgp"))
    feeds = {"x": np.linspace(-1, 1, 384, dtype=np.float32).reshape(2, 3, 8, 8)}
    params = {"w": np.linspace(-1, 1, 108, dtype=np.float32).reshape(4, 3, 3, 3)}
    again = tg.load(str(tmp_path / "grad.tgp")).run(feeds, params=params, backend="arena")
    for want, got in zip(prog.run(feeds, params=params, backend="numpy"), again, strict=True):
        np.testing.assert_array_equal(got, want)


def _scalar_graph() -> tg.Graph:
    g = tg.Graph("scalar")
    x = g.input("x", (3,), tg.float32)
    w = g.param("w", (3,), tg.float32)
    g.input("n", (3,), tg.int32)
    g.output(tg.sum(x * w))
    return g


def test_bad_loss_is_a_graph_error_naming_it() -> None:
    g = tg.Graph("vector")
    x = g.input("x", (3,), tg.float32)
    g.output(x * 2.0)
    with pytest.raises(GraphError, match=r"loss %\d+ mul .* must be a float scalar"):
        tg.value_and_grad(g, "x")
    g = tg.Graph("count")
    x = g.input("x", (3,), tg.int32)
    g.output(tg.sum(x))
    with pytest.raises(GraphError, match=r"loss %\d+ sum .* int32"):
        tg.value_and_grad(g, "x")
    g = tg.Graph("two")
    x = g.input("x", (3,), tg.float32)
    g.output(tg.sum(x), tg.sum(x))
    with pytest.raises(GraphError, match="has 2 outputs"):
        tg.value_and_grad(g, "x")


def test_bad_wrt_is_a_graph_error_naming_it() -> None:
    g = _scalar_graph()
    with pytest.raises(GraphError, match="wrt is empty"):
        tg.value_and_grad(g, [])
    with pytest.raises(GraphError, match="'nope', which is no input or param"):
        tg.value_and_grad(g, ["w", "nope"])
    with pytest.raises(GraphError, match=r"%\d+ input 'n' of dtype int32"):
        tg.value_and_grad(g, "n")
    h = tg.Graph("no_params")
    x = h.input("x", (3,), tg.float32)
    h.output(tg.sum(x))
    with pytest.raises(GraphError, match="graph has no float params"):
        tg.value_and_grad(h)


def test_a_state_update_is_a_graph_error() -> None:
    g = tg.Graph("stateful")
    x = g.input("x", (3,), tg.float32)
    s = g.state("s", (3,), tg.float32)
    g.update_state(s, x)
    g.output(tg.sum(x))
    with pytest.raises(GraphError, match=r"updates states \['s'\]"):
        tg.value_and_grad(g, "x")


def test_a_gradient_through_an_op_without_a_rule_names_the_node() -> None:
    """Run-time quantization has no rule (its codes are integers, its scales a
    piecewise function of the group's extremes): a gradient that would flow through it
    is refused, naming the node and its op; the same op off the gradient's path is fine."""
    g = tg.Graph("quantized")
    x = g.input("x", (2, 32), tg.float32)
    w = g.param("w", (2, 32), tg.float32)
    _, scales, _ = quantize_rows(x * w, group_size=32)
    g.output(tg.sum(scales))
    with pytest.raises(GraphError, match=r"%\d+ quantize has no gradient rule.*'w'"):
        tg.value_and_grad(g, "w")
    h = tg.Graph("quantized_inputs")
    x = h.input("x", (2, 32), tg.float32)
    w = h.param("w", (2, 1), tg.float32)
    _, scales, _ = quantize_rows(x, group_size=32)
    h.output(tg.sum(scales * w))
    tg.value_and_grad(h, "w")


def test_comparisons_and_integer_ops_carry_no_gradient() -> None:
    """A mask from a comparison and an argmax index are not differentiated: only the
    float path (where's branches) carries the gradient."""
    g = tg.Graph("masked")
    x = g.input("x", (4,), tg.float32)
    chosen = tg.take(x, tg.argmax(x, keepdims=True))
    g.output(tg.sum(tg.where(x > 0, x * 3.0, x)) + tg.sum(chosen))
    values = np.array([1.0, -2.0, 4.0, -0.5], np.float32)
    out = tg.compile(tg.value_and_grad(g, "x")).run({"x": values}, backend="numpy")
    np.testing.assert_array_equal(out[1], np.array([3, 1, 4, 1], np.float32))
