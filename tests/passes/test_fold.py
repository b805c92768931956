"""Constant folding's size rules: small values fold, larger ones only within a share of
the model's weights (see passes/fold.py)."""

import importlib
from unittest import mock

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.passes.fold import GROWTH_SHARE, SMALL_FOLD, fold
from tensorgraph.runtime.reference import run_reference
from tests.strategies import bound_graphs, feeds

FOLD_MODULE = importlib.import_module("tensorgraph.passes.fold")  # `passes.fold` is the pass


def bias_graph(weight_bytes: int) -> tg.Graph:
    """A (4, 128, 128) float32 bias (256 KiB) broadcast from a 4-entry table, added to
    the input, beside a bound weight of `weight_bytes` that the output also reads."""
    g = tg.Graph("bias")
    x = g.input("x", (4, 128, 128))
    table = g.param("table", (4, 1, 1))
    g.bind("table", np.arange(4, dtype=np.float32).reshape(4, 1, 1))
    weight = g.param("w", (weight_bytes // 4,))
    g.bind("w", np.ones(weight_bytes // 4, np.float32))
    bias = tg.broadcast_to(tg.tanh(table), (4, 128, 128))
    g.output(x + bias, weight.sum())
    return g


def test_a_large_value_from_small_sources_folds_within_the_weights_share() -> None:
    # The bias adds 256 KiB - 16 B to the constants: more than SMALL_FOLD, and more than
    # its 16 B source. With 8 MiB of weights the share is 4 MiB: it folds.
    assert SMALL_FOLD < 4 * 128 * 128 * 4
    # (The weight's sum, 4 bytes, folds in both cases.)
    assert folded_shapes(bias_graph(8 << 20)) == [(4, 128, 128), ()]
    # With 128 KiB of weights the share is 64 KiB < 256 KiB: the broadcast stays a
    # run-time value, and what it reads, tanh(table) (16 B), is the folded value instead.
    assert GROWTH_SHARE * (128 << 10) < 4 * 128 * 128 * 4
    assert folded_shapes(bias_graph(128 << 10)) == [(4, 1, 1), ()]


def folded_shapes(graph: tg.Graph) -> list[tuple[int, ...]]:
    result = fold(graph).graph
    return [n.shape for n in result.nodes if n.op == "param" and n.name.startswith("folded")]


def test_folding_keeps_the_outputs_bit_for_bit() -> None:
    g = bias_graph(8 << 20)
    x = np.linspace(-1, 1, 4 * 128 * 128, dtype=np.float32).reshape(4, 128, 128)
    want = tg.compile(g, passes=()).run({"x": x}, backend="numpy")
    got = tg.compile(g).run({"x": x}, backend="arena")
    assert all(a.tobytes() == b.tobytes() for a, b in zip(want, got, strict=True))


def position_bias_graph() -> tg.Graph:
    """Swin v2's continuous position bias in small: a (49, 2) table of bound coordinates
    through a 512-wide MLP, relu((49, 2) @ (2, 512)) @ (512, 2), added to the input. The
    hidden (49, 512) activation (98 KiB) is larger than SMALL_FOLD and than every
    bound value it is computed from (4 KiB in all); the bias it yields is 392 B."""
    g = tg.Graph("position_bias")
    x = g.input("x", (49, 2))
    rng = np.random.default_rng(0)
    table, w1, w2 = (
        g.param(name, shape, value=rng.standard_normal(shape).astype(np.float32))
        for name, shape in (("table", (49, 2)), ("w1", (2, 512)), ("w2", (512, 2)))
    )
    g.output(x + tg.relu(table @ w1) @ w2)
    return g


def test_a_large_value_read_only_at_compile_time_folds_with_what_it_feeds() -> None:
    # Only the 392 B bias is read at run time: it folds, and the hidden activation is
    # computed once at compile time and never held, so the arena keeps no 98 KiB buffer.
    g = position_bias_graph()
    weights = sum(v.nbytes for v in g.param_values.values())
    assert max(SMALL_FOLD, GROWTH_SHARE * weights) < 49 * 512 * 4
    assert folded_shapes(g) == [(49, 2)]
    prog = tg.compile(g)
    assert [n.op for n in prog.graph.nodes if n.op not in ("input", "param")] == ["add"]
    x = np.linspace(-1, 1, 98, dtype=np.float32).reshape(49, 2)
    want = tg.compile(g, passes=()).run({"x": x}, backend="numpy")
    got = prog.run({"x": x}, backend="arena")
    assert all(a.tobytes() == b.tobytes() for a, b in zip(want, got, strict=True))


def compile_time_values(graph: tg.Graph) -> dict[int, set[int]]:
    """Node id -> ids of the bound params and constants it is computed from, for every
    non-boundary value that depends on nothing else (an oracle written apart from fold)."""
    nodes = {n.id: n for n in graph.nodes}
    bound = {
        n.id
        for n in graph.nodes
        if n.op == "constant" or (n.op == "param" and n.name in graph.param_values)
    }
    known: dict[int, set[int]] = {}
    for n in graph.nodes:
        if n.op in ("input", "param", "constant", "state"):
            continue
        if all(i in bound or i in known for i in n.inputs):
            known[n.id] = set().union(*({i} if i in bound else known[i] for i in n.inputs))
    for leaves in known.values():
        assert all(nodes[i].op in ("param", "constant") for i in leaves)
    return known


@given(bound_graphs(), st.sampled_from((0, 16, 64, 256)))
def test_only_values_read_at_run_time_are_weighed(graph: tg.Graph, small: int) -> None:
    # With SMALL_FOLD shrunk to the random graphs' scale, the size rule refuses values:
    # a value runs at run time only when refused, so it is larger than SMALL_FOLD and
    # than the bound values it is computed from, however large its sources (or, when a
    # source stays held, larger than SMALL_FOLD or no smaller than it); a value that
    # folds adds at most its excess over its bound sources, within the weights' share;
    # every folded value is read at run time; the outputs stay bit for bit.
    with mock.patch.object(FOLD_MODULE, "SMALL_FOLD", small):
        result = fold(graph).graph
    known = compile_time_values(graph)
    nodes = {n.id: n for n in graph.nodes}

    def held(i: int) -> int:
        return sum(nodes[leaf].nbytes for leaf in known[i])

    still = {n.id for n in result.nodes if n.op in ("param", "constant")}
    for node in result.nodes:
        if node.id in known and node.inputs and node.op != "param":
            kept = sum(nodes[leaf].nbytes for leaf in known[node.id] if leaf in still)
            if kept:  # folding would hold a source still read elsewhere a second time
                assert node.nbytes > small or node.nbytes >= kept, f"{node} at run time"
            else:
                assert node.nbytes > max(small, held(node.id)), f"{node} is computed at run time"
    folded = {n.id for n in result.nodes if n.op == "param" and n.name.startswith("folded.")}
    read = set(result.outputs) | {i for n in result.nodes for i in n.inputs}
    assert folded <= read
    excess = sum(max(0, nodes[f].nbytes - max(small, held(f))) for f in folded)
    assert excess <= GROWTH_SHARE * sum(v.nbytes for v in graph.param_values.values())
    inputs, params = feeds(graph)
    want = run_reference(graph, inputs, params)
    got = run_reference(result, inputs, params)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(want, got, strict=True))
