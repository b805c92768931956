"""GPT-2 style decoder: learned token and position embeddings, LayerNorm, GELU (tanh)
MLP, causal multi-head attention with biases, tied-free output head."""

from __future__ import annotations

from attrs import frozen

import tensorgraph as tg
from tensorgraph.models.common import Model, Weights, random_inputs
from tensorgraph.nn import attention, causal_mask, layer_norm, linear, merge_heads, split_heads


@frozen
class GPT2Config:
    batch: int = 1
    seq: int = 64
    dim: int = 256
    heads: int = 4
    layers: int = 2
    vocab: int = 512
    max_positions: int = 128


def gpt2(config: GPT2Config = GPT2Config()) -> Model:
    c = config
    if c.seq > c.max_positions:
        raise tg.GraphError(f"gpt2: seq {c.seq} exceeds max_positions {c.max_positions}")
    g = tg.Graph("gpt2")
    w = Weights(g)
    tokens = g.input("tokens", (c.batch, c.seq), tg.int32)
    positions = tg.arange(g, 0, c.seq)
    h = tg.take(w.normal("wte", (c.vocab, c.dim), fan_in=1), tokens, axis=0)
    h = h + tg.take(w.normal("wpe", (c.max_positions, c.dim), fan_in=1), positions, axis=0)
    for i in range(c.layers):
        x = layer_norm(
            h, w.constant(f"h{i}.ln1.w", (c.dim,), 1.0), w.constant(f"h{i}.ln1.b", (c.dim,), 0.0)
        )
        qkv = linear(
            x,
            w.normal(f"h{i}.attn.w", (c.dim, 3 * c.dim)),
            w.constant(f"h{i}.attn.b", (3 * c.dim,), 0.0),
        )
        q, k, v = (split_heads(tg.narrow(qkv, -1, j * c.dim, c.dim), c.heads) for j in range(3))
        a = merge_heads(attention(q, k, v, causal_mask(g, c.seq)))
        h = h + linear(
            a, w.normal(f"h{i}.proj.w", (c.dim, c.dim)), w.constant(f"h{i}.proj.b", (c.dim,), 0.0)
        )
        x = layer_norm(
            h, w.constant(f"h{i}.ln2.w", (c.dim,), 1.0), w.constant(f"h{i}.ln2.b", (c.dim,), 0.0)
        )
        x = tg.gelu(
            linear(
                x,
                w.normal(f"h{i}.fc.w", (c.dim, 4 * c.dim)),
                w.constant(f"h{i}.fc.b", (4 * c.dim,), 0.0),
            ),
            approximate="tanh",
        )
        h = h + linear(
            x, w.normal(f"h{i}.out.w", (4 * c.dim, c.dim)), w.constant(f"h{i}.out.b", (c.dim,), 0.0)
        )
    h = layer_norm(h, w.constant("ln_f.w", (c.dim,), 1.0), w.constant("ln_f.b", (c.dim,), 0.0))
    g.output(h @ w.normal("lm_head", (c.dim, c.vocab)))
    return Model(g, lambda seed: random_inputs(g, seed, c.vocab))
