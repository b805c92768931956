"""CSE merges equal computations, commutative ones in either order, never inputs/params."""

import tensorgraph as tg
from tensorgraph import nn
from tensorgraph.models.common import Weights
from tensorgraph.models.llama import layer_weights
from tensorgraph.passes import cse
from tests.passes.test_pipeline_properties import assert_same
from tests.strategies import feeds


def count(graph: tg.Graph, op: str) -> int:
    return sum(n.op == op for n in graph.nodes)


def test_commutative_operands_in_either_order_merge() -> None:
    g = tg.Graph()
    a, b = g.input("a", (3,)), g.input("b", (3,))
    g.output(a + b, b + a, a - b, b - a)
    result = cse(g)
    assert result.stats["merged"] == 1
    assert count(result.graph, "add") == 1 and count(result.graph, "sub") == 2


def test_equal_constants_merge_but_inputs_and_params_never() -> None:
    g = tg.Graph()
    a, b = g.input("a", (3,)), g.input("b", (3,))
    p, q = g.param("p", (3,)), g.param("q", (3,))
    g.output(a * 2.0, b * 2.0, p + q)
    result = cse(g)
    assert count(result.graph, "constant") == 1
    assert count(result.graph, "input") == 2 and count(result.graph, "param") == 2


def test_decoder_layers_share_one_mask_and_one_rotary_table() -> None:
    layers, seq, dim, heads = 4, 8, 16, 2
    g = tg.Graph("decoder")
    h = g.input("x", (1, seq, dim))
    weights = Weights(g)
    for i in range(layers):
        # Rebuilt in every layer, as a naive exporter emits them.
        cos, sin = nn.rotary_tables(g, seq, dim // heads)
        mask = nn.causal_mask(g, seq)
        params = layer_weights(weights, f"l{i}.", dim, 32)
        h = nn.llama_block(h, params, heads, cos, sin, mask)
    g.output(h)
    assert count(g, "where") == layers and count(g, "cos") == layers and count(g, "sin") == layers
    prog = tg.compile(g, passes=("dce", "cse", "view_alias", "reinplace"))  # no folding
    assert count(prog.graph, "where") == 1
    assert count(prog.graph, "cos") == 1 and count(prog.graph, "sin") == 1
    # Three distinct aranges survive: inv_freq exponents (0..4, float32), positions (0..8,
    # float32), and the mask's rows and columns, which are the same arange (0..8, int32).
    assert count(prog.graph, "arange") == 3
    # With folding, the one mask and the one pair of tables become constants: nothing of
    # them is computed at run time.
    folded = tg.compile(g)
    assert {"where", "cos", "sin", "arange"}.isdisjoint(n.op for n in folded.graph.nodes)
    assert folded.stats["fold"]["folded"] == 3  # mask, cos table, sin table
    inputs, _ = feeds(g)
    assert_same(
        prog.run(inputs, backend="arena"), tg.compile(g, passes=()).run(inputs, backend="numpy")
    )
