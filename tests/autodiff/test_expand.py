"""Expansion before differentiation (autodiff/expand.py): the expanded gradient graph
equals central differences of the float64 forward and the fused rules' gradients (which
`expand=False` keeps, and which stay tested here), its arena run equals its reference
bit for bit, and the expansion fires exactly where its test says."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.autodiff.expand import EXPANSIONS
from tests.autodiff.float64 import central_differences, evaluate
from tests.autodiff.test_rules import CASES, _loss_graph

_FUSED_CASES = [c for c in CASES if c[0] in EXPANSIONS]


@pytest.mark.parametrize(
    ("op", "build", "arrays"),
    [c[0:1] + c[2:] for c in _FUSED_CASES],
    ids=[c[1] for c in _FUSED_CASES],
)
def test_fused_rule_without_expansion_equals_central_differences(
    op: str, build: object, arrays: list
) -> None:
    g, wrt = _loss_graph(build, arrays)
    vg = tg.value_and_grad(g, wrt, expand=False)
    assert op in {n.op for n in vg.nodes}  # the fused forward node is kept
    feeds = {f"a{k}": a for k, a in enumerate(arrays)}
    exact = evaluate(vg, feeds, {})
    for name, grad in zip(wrt, exact[1:], strict=True):
        np.testing.assert_allclose(grad, central_differences(g, feeds, {}, name), 1e-6, 1e-6)


@st.composite
def attention_graphs(draw: st.DrawFn) -> tuple[tg.Graph, dict[str, np.ndarray]]:
    """A loss over gelu_approx(q) attending to k, v: random batch, heads (grouped or
    not), lengths, head dim, scale and mask (none, causal, bool with dead rows, float)."""
    batch, kv_heads = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    heads = kv_heads * draw(st.integers(1, 2))
    length, keys, depth = draw(st.integers(1, 5)), draw(st.integers(1, 5)), draw(st.integers(1, 4))
    kind = draw(st.sampled_from(["none", "causal", "bool", "float"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    arrays = {
        "q": rng.uniform(-1.5, 1.5, (batch, heads, length, depth)),
        "k": rng.uniform(-1.5, 1.5, (batch, kv_heads, keys, depth)),
        "v": rng.uniform(-1.5, 1.5, (batch, kv_heads, keys, depth)),
    }
    if kind == "bool":
        arrays["m"] = rng.uniform(size=(length, keys)) < 0.6
    elif kind == "float":
        arrays["m"] = rng.uniform(-1, 1, (length, keys))
    arrays = {k: v.astype(np.float32) if v.dtype != bool else v for k, v in arrays.items()}
    g = tg.Graph("attention")
    t = {
        k: g.input(k, v.shape, tg.float32 if v.dtype != bool else tg.bool_)
        for k, v in arrays.items()
    }
    mask = "causal" if kind == "causal" else t.get("m")
    scale = draw(st.sampled_from([None, 0.6]))
    out = tg.scaled_dot_product_attention(
        tg.gelu_approx(t["q"]), t["k"], t["v"], scale=scale, mask=mask
    )
    weights = rng.uniform(-1, 1, out.shape).astype(np.float32)
    g.output((out * g.constant(weights)).sum())
    return g, arrays


@settings(max_examples=10)  # ~1 s each: two compiled gradient graphs, finite differences
@given(attention_graphs())
def test_expanded_gradients_equal_fused_rules_and_differences(case: tuple) -> None:
    g, feeds = case
    wrt = ["q", "k", "v"] + (["m"] if feeds.get("m", np.bool_(0)).dtype == np.float32 else [])
    expanded = tg.value_and_grad(g, wrt)
    fused = tg.value_and_grad(g, wrt, expand=False)
    assert "gelu" not in {n.op for n in expanded.nodes}
    exact = evaluate(expanded, feeds, {})
    for name, grad in zip(wrt, exact[1:], strict=True):
        numeric = central_differences(g, feeds, {}, name)
        np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-6, err_msg=name)
    program = tg.compile(expanded, planner="greedy_size", schedule="program")
    ours = program.run(feeds, backend="numpy")
    theirs = tg.compile(fused, planner="greedy_size", schedule="program").run(
        feeds, backend="numpy"
    )
    for mine, reference, grad in zip(ours, theirs, exact, strict=True):
        np.testing.assert_allclose(mine, grad, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(mine, reference, rtol=1e-4, atol=1e-5)
    for mine, arena in zip(ours, program.run(feeds, backend="arena"), strict=True):
        np.testing.assert_array_equal(arena, mine)


def _attention_loss(length: int, keys: int, dtype: tg.DType = tg.float32) -> tg.Graph:
    g = tg.Graph("attention")
    q = g.input("q", (1, 2, length, 8), dtype)
    k = g.input("k", (1, 2, keys, 8), dtype)
    v = g.input("v", (1, 2, keys, 8), dtype)
    g.output(tg.scaled_dot_product_attention(q, k, v, mask="causal").astype(tg.float32).sum())
    return g


def test_attention_expands_only_while_its_probabilities_are_small() -> None:
    """p (B, H, L, S) against q, k, v and the output: 16 * 16 = 256 <= 4 * 16 * 8 = 512
    per head expands; 128 * 128 = 16,384 > 4 * 128 * 8 = 4,096 keeps the fused op."""
    short = tg.value_and_grad(_attention_loss(16, 16), ["q", "k", "v"])
    long = tg.value_and_grad(_attention_loss(128, 128), ["q", "k", "v"])
    assert "scaled_dot_product_attention" not in {n.op for n in short.nodes}
    assert "softmax" in {n.op for n in short.nodes}
    assert "scaled_dot_product_attention" in {n.op for n in long.nodes}


def test_no_expansion_for_16_bit_or_exact_gelu_and_dims_judged_at_their_max() -> None:
    half = tg.value_and_grad(_attention_loss(4, 4, tg.float16), ["q"])
    assert "scaled_dot_product_attention" in {n.op for n in half.nodes}
    g = tg.Graph("gelu")
    seq = tg.Dim("seq", min=1, max=64)
    x = g.input("x", (2, seq), tg.float32)
    y = g.input("y", (2, 3), tg.float32)
    g.output(tg.gelu_approx(x).sum() + tg.gelu(y).sum())
    ops = [n.op for n in tg.value_and_grad(g, ["x", "y"]).nodes]
    assert ops.count("gelu") == 1  # the exact (erf) gelu keeps the op, the tanh one expands
    for longest, expands in ((16, True), (17, False)):  # 16 * 16 <= 4 * 16 * 4 < 17 * 17
        seq = tg.Dim("seq", min=1, max=longest)
        g = tg.Graph("attention")
        q, k, v = (g.input(n, (1, 1, seq, 4), tg.float32) for n in "qkv")
        g.output(tg.scaled_dot_product_attention(q, k, v, mask="causal").sum())
        ops = {n.op for n in tg.value_and_grad(g, ["q"]).nodes}
        assert ("scaled_dot_product_attention" not in ops) is expands


def test_only_active_nodes_expand() -> None:
    """A gelu no gradient reaches (of an input not in wrt) keeps its fused forward."""
    g = tg.Graph("inactive")
    x = g.input("x", (2, 3), tg.float32)
    w = g.param("w", (3, 3), tg.float32)
    g.output((tg.gelu_approx(x) @ w).sum())
    g.param_values["w"] = np.eye(3, dtype=np.float32)
    assert "gelu" in {n.op for n in tg.value_and_grad(g, ["w"]).nodes}
    assert "gelu" not in {n.op for n in tg.value_and_grad(g, ["w", "x"]).nodes}
