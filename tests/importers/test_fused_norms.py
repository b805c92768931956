"""importers/fused_norms.py: written-out RMS norms become one `rms_norm` op, with the
written-out form's values, and nothing else changes."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.importers.fused_norms import fuse_rms_norms
from tensorgraph.importers.torch_compat import import_transformers

CHAIN_OPS = {"square", "mean", "rsqrt"}


def written_out(
    shape: tuple[int, ...],
    eps: float,
    *,
    bf16: bool = False,
    weight_left: bool = True,
    rsqrt_left: bool = False,
    eps_left: bool = False,
    extra: str = "",
) -> tuple[tg.Graph, dict[str, np.ndarray]]:
    """transformers' LlamaRMSNorm as torch.export writes it (module docstring), on an
    input x of `shape`: in bfloat16 with casts to float32 and back when `bf16`. `extra`
    breaks the pattern: "read-rsqrt" also outputs the rsqrt, "other-axis" means over
    axis 0, "vector-eps" adds a (D,) eps."""
    dtype = tg.bfloat16 if bf16 else tg.float32
    g = tg.Graph("norm")
    x = g.input("x", shape, dtype)
    rng = np.random.default_rng(len(shape))
    w = g.param("w", (shape[-1],), dtype, rng.standard_normal(shape[-1]).astype(dtype.to_numpy()))
    x32 = tg.astype(x, tg.float32) if bf16 else x
    axis = 0 if extra == "other-axis" else len(shape) - 1
    mean = tg.mean(tg.square(x32), axis=axis, keepdims=True)
    epsilon = g.constant(np.full(shape[-1], eps, np.float32)) if extra == "vector-eps" else eps
    r = tg.rsqrt(epsilon + mean if eps_left else mean + epsilon)
    y = r * x32 if rsqrt_left else x32 * r
    y = tg.astype(y, dtype) if bf16 else y
    g.output(w * y if weight_left else y * w)
    if extra == "read-rsqrt":
        g.output(r)
    value = rng.standard_normal(shape) * 3
    return g, {"x": value.astype(dtype.to_numpy())}


@settings(max_examples=25, deadline=None)
@given(
    shape=st.lists(st.integers(1, 6), min_size=1, max_size=3).map(tuple),
    eps=st.sampled_from([1e-5, 1e-6, 1e-12]),
    bf16=st.booleans(),
    orders=st.tuples(st.booleans(), st.booleans(), st.booleans()),
)
def test_a_written_out_norm_becomes_one_op_with_its_values(shape, eps, bf16, orders) -> None:
    weight_left, rsqrt_left, eps_left = orders
    graph, feeds = written_out(
        shape, eps, bf16=bf16, weight_left=weight_left, rsqrt_left=rsqrt_left, eps_left=eps_left
    )
    fused = fuse_rms_norms(graph)
    ops = [n.op for n in fused.nodes]
    assert ops.count("rms_norm") == 1 and not CHAIN_OPS & set(ops)
    assert ops.count("cast") == 0  # the float32 copy of x and the cast back go too
    (node,) = (n for n in fused.nodes if n.op == "rms_norm")
    assert node.attr("eps") == np.float32(eps) and node.id == graph.outputs[0]
    want = np.asarray(tg.compile(graph).run(feeds, backend="numpy")[0], np.float64)
    got = np.asarray(tg.compile(fused).run(feeds, backend="numpy")[0], np.float64)
    # float32: the written-out chain rounds about six times (each <= 2^-24 relative),
    # the fused kernel once. bfloat16: y was rounded to bfloat16 before the weight
    # multiply (2^-8 relative) and the product again; the fused kernel rounds once.
    tolerance = 2.0**-7 if bf16 else 8 * 2.0**-24
    scale = np.abs(want).max() + 1e-30
    assert np.abs(got - want).max() <= tolerance * scale


def test_a_broken_pattern_stays_written_out() -> None:
    for extra in ("read-rsqrt", "other-axis", "vector-eps"):
        graph, _ = written_out((4, 8), 1e-6, extra=extra)
        assert fuse_rms_norms(graph) is graph, extra


def test_an_imported_llama_has_one_rms_norm_per_norm() -> None:
    transformers = import_transformers()
    config = transformers.LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, vocab_size=50, use_cache=False,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 50, (1, 6))
    graph = tg.from_torch(model, (ids,))
    ops = [n.op for n in graph.nodes]
    # input and post-attention norms per layer, and the final norm
    assert ops.count("rms_norm") == 2 * 2 + 1 and not CHAIN_OPS & set(ops)
    with torch.no_grad():
        want = model(ids).logits.numpy()
    got = tg.compile(graph).run({graph.inputs[0].name: ids.numpy()}, backend="mlx")[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
