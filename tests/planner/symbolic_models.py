"""The zoo Llama prefill built over a `tg.Dim` sequence length: the zoo's own block and
weights (`tensorgraph.models.llama`), with `seq` in place of the config's int, so that
`graph.specialize(seq=L)` is `llama(config, seq=L).graph` node for node
(tests/ir/test_dims_graphs.py checks that)."""

from __future__ import annotations

import tensorgraph as tg
from tensorgraph.ir.fused import rms_norm
from tensorgraph.models.common import Weights
from tensorgraph.models.llama import LlamaConfig, layer_weights, llama_block


def symbolic_llama(config: LlamaConfig, seq: tg.Dim) -> tg.Graph:
    """Token ids (batch, seq) -> logits (batch, seq, vocab), as `models.llama.llama`."""
    c = config
    g = tg.Graph("llama")
    w = Weights(g, dtype=tg.float32)
    tokens = g.input("tokens", (c.batch, seq), tg.int32)
    h = tg.take(w.normal("embed", (c.vocab, c.dim), fan_in=1), tokens, axis=0)
    for i in range(c.layers):
        h = llama_block(h, layer_weights(w, f"l{i}.", c.dim, c.hidden), c.heads, eps=c.eps)
    h = rms_norm(h, w.constant("norm", (c.dim,), 1.0), c.eps)
    g.output(h @ w.normal("lm_head", (c.dim, c.vocab)))
    return g
