"""GPT-2 style decoder: learned token and position embeddings (both via `take`),
pre-LayerNorm blocks with biases, GELU (tanh) MLP, causal multi-head attention, an
untied output head. LayerNorm and attention are the fused ops (`layer_norm`,
`scaled_dot_product_attention` with the causal flag, so no mask tensor is built)."""

from __future__ import annotations

from attrs import field, frozen

import tensorgraph as tg
from tensorgraph.ir.builder import Tensor
from tensorgraph.models.common import (
    Model,
    Weights,
    dtype_of,
    make_config,
    model_dtype,
    positive_int,
    random_inputs,
    require,
)
from tensorgraph.nn import attention, layer_norm, linear, merge_heads, split_heads


@frozen
class GPT2Config:
    """Sizes; the position table has `max_positions` rows, of which `seq` are used."""

    batch: int = field(default=1, validator=positive_int)
    seq: int = field(default=64, validator=positive_int)
    dim: int = field(default=256, validator=positive_int)
    heads: int = field(default=4, validator=positive_int)
    layers: int = field(default=2, validator=positive_int)
    vocab: int = field(default=512, validator=positive_int)
    max_positions: int = field(default=128, validator=positive_int)
    dtype: str = field(default="float32", validator=model_dtype)

    def __attrs_post_init__(self) -> None:
        require(
            self, self.dim % self.heads == 0, f"dim {self.dim} is not divisible by {self.heads}"
        )
        require(
            self,
            self.seq <= self.max_positions,
            f"seq {self.seq} exceeds max_positions {self.max_positions}",
        )


def _layer_norm(w: Weights, x: Tensor, name: str) -> Tensor:
    dim = x.shape[-1]
    return layer_norm(x, w.constant(f"{name}.w", (dim,), 1.0), w.constant(f"{name}.b", (dim,), 0.0))


def _linear(w: Weights, x: Tensor, name: str, out: int) -> Tensor:
    weight = w.normal(f"{name}.w", (x.shape[-1], out))
    return linear(x, weight, w.constant(f"{name}.b", (out,), 0.0))


def gpt2(config: GPT2Config | None = None, /, **overrides: object) -> Model:
    """Token ids (batch, seq) -> logits (batch, seq, vocab). Fields of `config` (default
    GPT2Config()) may be overridden by keyword."""
    c = make_config(GPT2Config, config, overrides)
    dtype = dtype_of(c.dtype)
    g = tg.Graph("gpt2")
    w = Weights(g, dtype=dtype)
    tokens = g.input("tokens", (c.batch, c.seq), tg.int32)
    positions = tg.arange(g, 0, c.seq)
    h = tg.take(w.normal("wte", (c.vocab, c.dim), fan_in=1), tokens, axis=0)
    h = h + tg.take(w.normal("wpe", (c.max_positions, c.dim), fan_in=1), positions, axis=0)
    for i in range(c.layers):
        qkv = _linear(w, _layer_norm(w, h, f"h{i}.ln1"), f"h{i}.attn", 3 * c.dim)
        q, k, v = (split_heads(tg.narrow(qkv, -1, j * c.dim, c.dim), c.heads) for j in range(3))
        h = h + _linear(w, merge_heads(attention(q, k, v, "causal")), f"h{i}.proj", c.dim)
        x = tg.gelu(_linear(w, _layer_norm(w, h, f"h{i}.ln2"), f"h{i}.fc", 4 * c.dim), "tanh")
        h = h + _linear(w, x, f"h{i}.out", c.dim)
    h = _layer_norm(w, h, "ln_f")
    g.output(h @ w.normal("lm_head", (c.dim, c.vocab)))
    return Model(g, lambda seed: random_inputs(g, seed, c.vocab))
