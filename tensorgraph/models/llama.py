"""Llama-style decoders: prefill over a sequence, and one decode step with KV caches.

Both build the causal mask and rotary tables inside every layer, as a naive exporter
emits them; CSE is what merges them into one copy."""

from __future__ import annotations

from attrs import frozen

import tensorgraph as tg
from tensorgraph.ir.builder import Tensor
from tensorgraph.models.common import Model, Weights, random_inputs
from tensorgraph.nn import (
    apply_rotary,
    attention,
    causal_mask,
    llama_block,
    merge_heads,
    rms_norm,
    rotary_tables,
    split_heads,
    swiglu_mlp,
)


@frozen
class LlamaConfig:
    batch: int = 1
    seq: int = 64
    dim: int = 256
    heads: int = 4
    hidden: int = 688
    layers: int = 2
    vocab: int = 512
    eps: float = 1e-5


def layer_weights(w: Weights, prefix: str, dim: int, hidden: int) -> dict[str, Tensor]:
    """One decoder layer's params, named `prefix + key` (keys as `nn.llama_block` takes
    them); norm weights start at 1, projections at normal / sqrt(fan_in)."""
    return {
        "attn_norm": w.constant(f"{prefix}attn_norm", (dim,), 1.0),
        "wq": w.normal(f"{prefix}wq", (dim, dim)),
        "wk": w.normal(f"{prefix}wk", (dim, dim)),
        "wv": w.normal(f"{prefix}wv", (dim, dim)),
        "wo": w.normal(f"{prefix}wo", (dim, dim)),
        "mlp_norm": w.constant(f"{prefix}mlp_norm", (dim,), 1.0),
        "w_gate": w.normal(f"{prefix}w_gate", (dim, hidden)),
        "w_up": w.normal(f"{prefix}w_up", (dim, hidden)),
        "w_down": w.normal(f"{prefix}w_down", (hidden, dim)),
    }


@frozen
class BlockConfig:
    batch: int = 1
    seq: int = 64
    dim: int = 256
    heads: int = 4
    hidden: int = 512
    seed: int = 0


def llama_block_model(config: BlockConfig = BlockConfig()) -> Model:
    """One Llama decoder block on activations `x` (batch, seq, dim): the unit the memory
    tests and the passes benchmark measure. Params are named by their keys (`wq`, ...)."""
    c = config
    g = tg.Graph("llama_block")
    x = g.input("x", (c.batch, c.seq, c.dim), tg.float32)
    cos, sin = rotary_tables(g, c.seq, c.dim // c.heads)
    params = layer_weights(Weights(g, c.seed), "", c.dim, c.hidden)
    g.output(llama_block(x, params, c.heads, cos, sin, causal_mask(g, c.seq)))
    return Model(g, lambda seed: random_inputs(g, seed))


def llama(config: LlamaConfig = LlamaConfig()) -> Model:
    """Prefill: token ids (batch, seq) -> logits (batch, seq, vocab)."""
    c = config
    g = tg.Graph("llama")
    w = Weights(g)
    tokens = g.input("tokens", (c.batch, c.seq), tg.int32)
    h = tg.take(w.normal("embed", (c.vocab, c.dim), fan_in=1), tokens, axis=0)
    for i in range(c.layers):
        cos, sin = rotary_tables(g, c.seq, c.dim // c.heads)
        mask = causal_mask(g, c.seq)
        h = llama_block(
            h, layer_weights(w, f"l{i}.", c.dim, c.hidden), c.heads, cos, sin, mask, c.eps
        )
    h = rms_norm(h, w.constant("norm", (c.dim,), 1.0), c.eps)
    g.output(h @ w.normal("lm_head", (c.dim, c.vocab)))
    return Model(g, lambda seed: random_inputs(g, seed, c.vocab))


@frozen
class LlamaDecodeConfig:
    batch: int = 1
    max_seq: int = 128
    pos: int = 64
    dim: int = 256
    heads: int = 4
    hidden: int = 688
    layers: int = 2
    vocab: int = 512
    eps: float = 1e-5


def llama_decode(config: LlamaDecodeConfig = LlamaDecodeConfig()) -> Model:
    """One decode step at position `pos`: the new token's k/v are written into per-layer
    caches (inputs, batch x heads x max_seq x head_dim) with slice_update; outputs are the
    logits and the updated caches. Attention reads cache rows [0, pos + 1) only."""
    c = config
    if not 0 <= c.pos < c.max_seq:
        raise tg.GraphError(f"llama_decode: pos {c.pos} must lie in [0, {c.max_seq})")
    g = tg.Graph("llama_decode")
    w = Weights(g)
    head_dim = c.dim // c.heads
    token = g.input("token", (c.batch, 1), tg.int32)
    h = tg.take(w.normal("embed", (c.vocab, c.dim), fan_in=1), token, axis=0)
    caches = []
    for i in range(c.layers):
        p = layer_weights(w, f"l{i}.", c.dim, c.hidden)
        cos, sin = rotary_tables(g, 1, head_dim, offset=c.pos)
        x = rms_norm(h, p["attn_norm"], c.eps)
        q, k, v = (split_heads(x @ p[name], c.heads) for name in ("wq", "wk", "wv"))
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        shape = (c.batch, c.heads, c.max_seq, head_dim)
        k_cache = tg.slice_update(g.input(f"k_cache{i}", shape, tg.float32), k, 2, c.pos)
        v_cache = tg.slice_update(g.input(f"v_cache{i}", shape, tg.float32), v, 2, c.pos)
        caches += [k_cache, v_cache]
        keys = tg.narrow(k_cache, 2, 0, c.pos + 1)
        values = tg.narrow(v_cache, 2, 0, c.pos + 1)
        h = h + merge_heads(attention(q, keys, values)) @ p["wo"]
        h = h + swiglu_mlp(rms_norm(h, p["mlp_norm"], c.eps), p["w_gate"], p["w_up"], p["w_down"])
    h = rms_norm(h, w.constant("norm", (c.dim,), 1.0), c.eps)
    g.output(h @ w.normal("lm_head", (c.dim, c.vocab)), *caches)
    return Model(g, lambda seed: random_inputs(g, seed, c.vocab))
