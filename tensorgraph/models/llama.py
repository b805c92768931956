"""Llama-style decoders: prefill over a sequence, and one decode step with KV caches.

Both are written on the fused ops: `rms_norm`, `rope` on q and k (at position `pos` when
decoding), and `scaled_dot_product_attention` (causal in prefill; a decode step's one
query reads every cached row up to its own, so it needs no mask). The attention scores
are that op's workspace, planned for its step only. Weights are named `l{layer}.{key}`
with the keys `nn.llama_block` takes, plus `embed`, `norm`, `lm_head`.
"""

from __future__ import annotations

from attrs import field, frozen

import tensorgraph as tg
from tensorgraph.ir.builder import Tensor
from tensorgraph.ir.dtypes import DType
from tensorgraph.models.common import (
    Model,
    Weights,
    dtype_of,
    make_config,
    model_dtype,
    non_negative_int,
    positive_float,
    positive_int,
    random_inputs,
    require,
)
from tensorgraph.nn import (
    attention,
    llama_block,
    merge_heads,
    rms_norm,
    rotary,
    split_heads,
    swiglu_mlp,
)


def _check_heads(config: object, dim: int, heads: int) -> None:
    """Heads split `dim` evenly, and rotary needs an even head size."""
    require(config, dim % heads == 0, f"dim {dim} is not divisible by heads {heads}")
    require(config, dim // heads % 2 == 0, f"head size dim / heads = {dim // heads} is odd")


def layer_weights(
    w: Weights, prefix: str, dim: int, hidden: int, dtype: DType | None = None
) -> dict[str, Tensor]:
    """One decoder layer's params, named `prefix + key` (keys as `nn.llama_block` takes
    them); norm weights start at 1, projections at normal / sqrt(fan_in)."""
    return {
        "attn_norm": w.constant(f"{prefix}attn_norm", (dim,), 1.0, dtype),
        "wq": w.normal(f"{prefix}wq", (dim, dim), dtype=dtype),
        "wk": w.normal(f"{prefix}wk", (dim, dim), dtype=dtype),
        "wv": w.normal(f"{prefix}wv", (dim, dim), dtype=dtype),
        "wo": w.normal(f"{prefix}wo", (dim, dim), dtype=dtype),
        "mlp_norm": w.constant(f"{prefix}mlp_norm", (dim,), 1.0, dtype),
        "w_gate": w.normal(f"{prefix}w_gate", (dim, hidden), dtype=dtype),
        "w_up": w.normal(f"{prefix}w_up", (dim, hidden), dtype=dtype),
        "w_down": w.normal(f"{prefix}w_down", (hidden, dim), dtype=dtype),
    }


@frozen
class BlockConfig:
    """One decoder block on activations (the unit of the memory tests and benches)."""

    batch: int = field(default=1, validator=positive_int)
    seq: int = field(default=64, validator=positive_int)
    dim: int = field(default=256, validator=positive_int)
    heads: int = field(default=4, validator=positive_int)
    hidden: int = field(default=512, validator=positive_int)
    seed: int = field(default=0, validator=non_negative_int)

    def __attrs_post_init__(self) -> None:
        _check_heads(self, self.dim, self.heads)


def llama_block_model(config: BlockConfig | None = None, /, **overrides: object) -> Model:
    """One Llama decoder block on activations `x` (batch, seq, dim): the unit the memory
    tests and the passes benchmark measure. Params are named by their keys (`wq`, ...)."""
    c = make_config(BlockConfig, config, overrides)
    g = tg.Graph("llama_block")
    x = g.input("x", (c.batch, c.seq, c.dim), tg.float32)
    params = layer_weights(Weights(g, c.seed), "", c.dim, c.hidden)
    g.output(llama_block(x, params, c.heads))
    return Model(g, lambda seed: random_inputs(g, seed))


@frozen
class LlamaConfig:
    """Prefill sizes; `hidden` is the SwiGLU width, `dtype` the weights' element type."""

    batch: int = field(default=1, validator=positive_int)
    seq: int = field(default=64, validator=positive_int)
    dim: int = field(default=256, validator=positive_int)
    heads: int = field(default=4, validator=positive_int)
    # Llama's FFN width rule: 8/3 of dim rounded up to a multiple of 64 (the reference
    # code's `multiple_of`), so MLX's quantization groups of 32 and 64 divide the down
    # projection's reduction axis (688, a multiple of 16 only, kept it float).
    hidden: int = field(default=704, validator=positive_int)
    layers: int = field(default=2, validator=positive_int)
    vocab: int = field(default=512, validator=positive_int)
    eps: float = field(default=1e-5, validator=positive_float)
    dtype: str = field(default="float32", validator=model_dtype)

    def __attrs_post_init__(self) -> None:
        _check_heads(self, self.dim, self.heads)


def llama(config: LlamaConfig | None = None, /, **overrides: object) -> Model:
    """Prefill: token ids (batch, seq) -> logits (batch, seq, vocab). Fields of `config`
    (default LlamaConfig()) may be overridden by keyword."""
    c = make_config(LlamaConfig, config, overrides)
    dtype = dtype_of(c.dtype)
    g = tg.Graph("llama")
    w = Weights(g, dtype=dtype)
    tokens = g.input("tokens", (c.batch, c.seq), tg.int32)
    h = tg.take(w.normal("embed", (c.vocab, c.dim), fan_in=1), tokens, axis=0)
    for i in range(c.layers):
        h = llama_block(h, layer_weights(w, f"l{i}.", c.dim, c.hidden), c.heads, eps=c.eps)
    h = rms_norm(h, w.constant("norm", (c.dim,), 1.0), c.eps)
    g.output(h @ w.normal("lm_head", (c.dim, c.vocab)))
    return Model(g, lambda seed: random_inputs(g, seed, c.vocab))


@frozen
class LlamaDecodeConfig:
    """Decode-step sizes: caches hold `max_seq` positions; the new token sits at `pos`."""

    batch: int = field(default=1, validator=positive_int)
    max_seq: int = field(default=128, validator=positive_int)
    pos: int = field(default=64, validator=non_negative_int)
    dim: int = field(default=256, validator=positive_int)
    heads: int = field(default=4, validator=positive_int)
    # Llama's FFN width rule: 8/3 of dim rounded up to a multiple of 64 (the reference
    # code's `multiple_of`), so MLX's quantization groups of 32 and 64 divide the down
    # projection's reduction axis (688, a multiple of 16 only, kept it float).
    hidden: int = field(default=704, validator=positive_int)
    layers: int = field(default=2, validator=positive_int)
    vocab: int = field(default=512, validator=positive_int)
    eps: float = field(default=1e-5, validator=positive_float)
    dtype: str = field(default="float32", validator=model_dtype)

    def __attrs_post_init__(self) -> None:
        _check_heads(self, self.dim, self.heads)
        require(self, self.pos < self.max_seq, f"pos {self.pos} must lie in [0, {self.max_seq})")


def llama_decode(config: LlamaDecodeConfig | None = None, /, **overrides: object) -> Model:
    """One decode step at position `pos`: the new token's k/v are written into per-layer
    caches (inputs `k_cache{i}`, `v_cache{i}`, batch x heads x max_seq x head_dim) with
    slice_update; outputs are the logits (batch, 1, vocab) and then the updated caches,
    k before v, layer by layer. Attention reads cache rows [0, pos + 1) only.

    The caches are graph inputs, so reinplace never overwrites them: each update is a
    copy into a fresh arena buffer that lives to the end as an output."""
    c = make_config(LlamaDecodeConfig, config, overrides)
    dtype = dtype_of(c.dtype)
    g = tg.Graph("llama_decode")
    w = Weights(g, dtype=dtype)
    head_dim = c.dim // c.heads
    token = g.input("token", (c.batch, 1), tg.int32)
    h = tg.take(w.normal("embed", (c.vocab, c.dim), fan_in=1), token, axis=0)
    caches = []
    for i in range(c.layers):
        p = layer_weights(w, f"l{i}.", c.dim, c.hidden)
        x = rms_norm(h, p["attn_norm"], c.eps)
        q, k, v = (split_heads(x @ p[name], c.heads) for name in ("wq", "wk", "wv"))
        q, k = rotary(q, offset=c.pos), rotary(k, offset=c.pos)
        shape = (c.batch, c.heads, c.max_seq, head_dim)
        k_cache = tg.slice_update(g.input(f"k_cache{i}", shape, dtype), k, 2, c.pos)
        v_cache = tg.slice_update(g.input(f"v_cache{i}", shape, dtype), v, 2, c.pos)
        caches += [k_cache, v_cache]
        keys = tg.narrow(k_cache, 2, 0, c.pos + 1)
        values = tg.narrow(v_cache, 2, 0, c.pos + 1)
        h = h + merge_heads(attention(q, keys, values)) @ p["wo"]
        h = h + swiglu_mlp(rms_norm(h, p["mlp_norm"], c.eps), p["w_gate"], p["w_up"], p["w_down"])
    h = rms_norm(h, w.constant("norm", (c.dim,), 1.0), c.eps)
    g.output(h @ w.normal("lm_head", (c.dim, c.vocab)), *caches)
    return Model(g, lambda seed: random_inputs(g, seed, c.vocab))
