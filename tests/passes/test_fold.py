"""Constant folding's size rules: small values fold, larger ones only within a share of
the model's weights (see passes/fold.py)."""

import numpy as np

import tensorgraph as tg
from tensorgraph.passes.fold import GROWTH_SHARE, SMALL_FOLD, fold


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
