"""Hand-written MLX models of transformers' weights, the mlx-lm / mlx-examples way, for
the benches that compare tensorgraph with hand-written MLX (bench_decode_families.py,
bench_delegate_memory.py).

Each class takes a transformers model (eval mode, float32) and copies its weights into
mx.arrays once; nothing here reads tensorgraph. `DecoderLM` covers Llama, Qwen2 (Llama
with q/k/v biases) and Gemma 2 (embeddings scaled by sqrt(hidden), (1 + w) RMS norms,
pre and post norms around attention and MLP, gelu-tanh, attention and final logit
soft-capping; global attention only: its sliding windows are left out, so the
transformers model must be configured with full-attention layers). Its KV cache is
preallocated per layer, (batch, kv heads, max_seq, head dim), written with
mx.slice_update: `prefill` attends causally over the prompt's rows; `decode` is one
mx.compile'd step with the position as an mx.array and a bool mask over the whole
cache (shape-stable, traced once), as benches/bench_generate.py's compiled contender;
`decode_eager` is mlx-lm's uncompiled step over the rows written so far. `pipelined`
is mlx-lm's `generate_step` loop around a compiled step: the pick stays on the device
and step t + 1 is queued (mx.async_eval) before token t is read back.
`WhisperEncoder` and `WhisperDecoder` follow mlx-examples' whisper: two convolutions and
pre-norm blocks; the decoder here runs a whole token prefix against the encoder's
states without a cache (the first decoder call of a transcription). `WhisperDecodeLoop`
generates: the encoder once, every layer's cross-attention keys and values projected
once, a preallocated self-attention cache, and compiled or eager steps as DecoderLM's.
"""

from __future__ import annotations

import math
import time

import mlx.core as mx
import mlx.nn as nn
import numpy as np


def mlx_weights(model: object) -> dict[str, mx.array]:
    """Every tensor of `model.state_dict()` as an mx.array, evaluated; names of one
    storage (tied embeddings) share one array, as mlx-lm's models tie them."""
    converted: dict[tuple, mx.array] = {}
    weights = {}
    for name, tensor in model.state_dict().items():
        key = (tensor.data_ptr(), tuple(tensor.shape), tuple(tensor.stride()))
        if key not in converted:
            converted[key] = mx.array(tensor.detach().float().numpy())
        weights[name] = converted[key]
    mx.eval(weights)
    return weights


def _linear(x: mx.array, w: dict[str, mx.array], name: str) -> mx.array:
    """transformers' Linear `name` (weight (out, in), optional bias), as nn.Linear."""
    y = x @ w[f"{name}.weight"].T
    bias = w.get(f"{name}.bias")
    return y if bias is None else y + bias


def _softcap(x: mx.array, cap: float | None) -> mx.array:
    return x if cap is None else mx.tanh(x / cap) * cap


class DecoderLM:
    """A Llama, Qwen2 or Gemma 2 causal LM with a preallocated KV cache (module doc)."""

    def __init__(self, model: object, max_seq: int, batch: int = 1) -> None:
        c = model.config
        self.gemma = c.model_type == "gemma2"
        if c.model_type not in ("llama", "qwen2", "gemma2"):
            raise ValueError(f"DecoderLM writes llama, qwen2 and gemma2, not {c.model_type}")
        if self.gemma and any(t != "full_attention" for t in c.layer_types):
            raise ValueError("DecoderLM's Gemma 2 attends globally: use full-attention layers")
        self.c, self.max_seq, self.batch = c, max_seq, batch
        self.w = mlx_weights(model)
        self.heads, self.kv_heads = c.num_attention_heads, c.num_key_value_heads
        self.head_dim = getattr(c, "head_dim", None) or c.hidden_size // self.heads
        scalar = c.query_pre_attn_scalar if self.gemma else self.head_dim
        self.scale = scalar**-0.5
        self.theta = c.rope_parameters["rope_theta"]
        self.attn_cap = c.attn_logit_softcapping if self.gemma else None
        self.final_cap = c.final_logit_softcapping if self.gemma else None
        # Gemma's RMSNorm multiplies by (1 + w): fold the 1 in once, as mlx-lm does
        self.norms = {k: (v + 1.0 if self.gemma else v) for k, v in self.w.items() if "norm" in k}
        mx.eval(self.norms)
        self.lm_head = self.w.get("lm_head.weight", self.w["model.embed_tokens.weight"])
        self.step = mx.compile(self._masked_step)
        self.reset()

    def reset(self) -> None:
        """Zero caches (what a fresh tensorgraph state holds)."""
        shape = (self.batch, self.kv_heads, self.max_seq, self.head_dim)
        self.caches = [mx.zeros(shape) for _ in range(2 * self.c.num_hidden_layers)]
        mx.eval(self.caches)

    def _norm(self, x: mx.array, name: str) -> mx.array:
        return mx.fast.rms_norm(x, self.norms[f"{name}.weight"], self.c.rms_norm_eps)

    def _heads(self, x: mx.array, heads: int) -> mx.array:
        b, rows, _ = x.shape
        return x.reshape(b, rows, heads, self.head_dim).transpose(0, 2, 1, 3)

    def _attend(self, q: mx.array, keys: mx.array, values: mx.array, mask) -> mx.array:
        """Grouped-query attention; Gemma 2's soft-capped scores written out as mlx-lm's
        gemma2 does (mx.fast's kernel has no cap). `mask`: "causal" or a bool array."""
        if self.attn_cap is None:
            return mx.fast.scaled_dot_product_attention(
                q, keys, values, scale=self.scale, mask=mask
            )
        b, _, rows, d = q.shape
        q = (q * self.scale).reshape(b, self.kv_heads, -1, rows, d)
        scores = _softcap(q @ keys[:, :, None].swapaxes(-1, -2), self.attn_cap)
        if isinstance(mask, str):
            mask = mx.tril(mx.ones((rows, keys.shape[2]), mx.bool_))
        if mask is not None:
            scores = mx.where(mask, scores, -mx.inf)
        out = mx.softmax(scores, axis=-1, precise=True) @ values[:, :, None]
        return out.reshape(b, self.heads, rows, d)

    def _mlp(self, x: mx.array, p: str) -> mx.array:
        gate = _linear(x, self.w, f"{p}.mlp.gate_proj")
        act = nn.gelu_approx(gate) if self.gemma else nn.silu(gate)
        return _linear(act * _linear(x, self.w, f"{p}.mlp.up_proj"), self.w, f"{p}.mlp.down_proj")

    def _forward(self, ids: mx.array, caches: list, offset, start, mask, rows: int | None):
        """Last-row logits and the updated caches. The queries attend to the cache's
        first `rows` rows, or with `rows` None to their own rows only (a prompt at
        position 0)."""
        c, w, new = self.c, self.w, []
        h = w["model.embed_tokens.weight"][ids]
        if self.gemma:
            h = h * mx.array(math.sqrt(c.hidden_size), h.dtype)
        for i in range(c.num_hidden_layers):
            p = f"model.layers.{i}"
            x = self._norm(h, f"{p}.input_layernorm")
            q = self._heads(_linear(x, w, f"{p}.self_attn.q_proj"), self.heads)
            k = self._heads(_linear(x, w, f"{p}.self_attn.k_proj"), self.kv_heads)
            v = self._heads(_linear(x, w, f"{p}.self_attn.v_proj"), self.kv_heads)
            q = mx.fast.rope(q, self.head_dim, traditional=False, base=self.theta, scale=1.0,
                             offset=offset)  # fmt: skip
            k = mx.fast.rope(k, self.head_dim, traditional=False, base=self.theta, scale=1.0,
                             offset=offset)  # fmt: skip
            k_cache = mx.slice_update(caches[2 * i], k, start, axes=(2,))
            v_cache = mx.slice_update(caches[2 * i + 1], v, start, axes=(2,))
            new += [k_cache, v_cache]
            keys, values = (k, v) if rows is None else (k_cache, v_cache)
            if rows is not None and rows < self.max_seq:
                keys, values = keys[:, :, :rows], values[:, :, :rows]
            out = self._attend(q, keys, values, mask)
            out = _linear(out.transpose(0, 2, 1, 3).reshape(*h.shape[:2], -1), w,
                          f"{p}.self_attn.o_proj")  # fmt: skip
            if self.gemma:
                h = h + self._norm(out, f"{p}.post_attention_layernorm")
                x = self._norm(h, f"{p}.pre_feedforward_layernorm")
                h = h + self._norm(self._mlp(x, p), f"{p}.post_feedforward_layernorm")
            else:
                h = h + out
                h = h + self._mlp(self._norm(h, f"{p}.post_attention_layernorm"), p)
        logits = self._norm(h[:, -1], "model.norm") @ self.lm_head.T
        return _softcap(logits, self.final_cap), new

    def prefill(self, ids: np.ndarray) -> mx.array:
        """Logits (batch, vocab) of the prompt's last token; its k/v fill rows 0..n-1."""
        logits, self.caches = self._forward(
            mx.array(ids), self.caches, 0, mx.array([0]), "causal", None
        )
        return logits

    def _masked_step(self, token: mx.array, pos: mx.array, *caches: mx.array):
        mask = (mx.arange(self.max_seq) <= pos).reshape(1, self.max_seq)
        logits, new = self._forward(token, list(caches), pos, pos, mask, self.max_seq)
        return (logits, *new)

    def decode(self, token: np.ndarray | mx.array, pos: int) -> mx.array:
        """Logits (batch, vocab) of `token` (batch, 1) at position `pos`: one compiled step
        (`token` may be a lazy mx.array: mlx-lm's pipelined loop feeds its last pick)."""
        token = token if isinstance(token, mx.array) else mx.array(token)
        logits, *self.caches = self.step(token, mx.array([pos]), *self.caches)
        return logits

    def decode_eager(self, token: np.ndarray, pos: int) -> mx.array:
        """mlx-lm's step: uncompiled, attending to the rows written so far (a shape that
        grows), no mask."""
        logits, self.caches = self._forward(
            mx.array(token), self.caches, pos, mx.array([pos]), None, pos + 1
        )
        return logits


def pipelined(decode: object, first: mx.array, positions: range) -> tuple[list[np.ndarray], float]:
    """mlx-lm's `generate_step` pipelining around `decode(token (batch, 1), pos) ->
    logits`: each greedy pick is `mx.argmax` on the device, fed lazily to the next step,
    which is queued before the pick is read. (The picks (batch,) int32 after `first`,
    seconds of the loop.)"""
    out, token, pending = [], first, None
    began = time.perf_counter()
    for pos in positions:
        token = mx.argmax(decode(token.reshape(-1, 1), pos), axis=-1)
        mx.async_eval(token)
        if pending is not None:
            out.append(np.array(pending, np.int32))
        pending = token
    if pending is not None:
        out.append(np.array(pending, np.int32))
    return out, time.perf_counter() - began


def _attention(x: mx.array, source: mx.array, w: dict, p: str, heads: int, mask) -> mx.array:
    """Whisper's multi-head attention of `x` over `source` (k_proj has no bias)."""
    b, rows, dim = x.shape
    head_dim = dim // heads

    def split(y: mx.array) -> mx.array:
        return y.reshape(b, -1, heads, head_dim).transpose(0, 2, 1, 3)

    q = split(_linear(x, w, f"{p}.q_proj"))
    k, v = split(_linear(source, w, f"{p}.k_proj")), split(_linear(source, w, f"{p}.v_proj"))
    out = mx.fast.scaled_dot_product_attention(q, k, v, scale=head_dim**-0.5, mask=mask)
    return _linear(out.transpose(0, 2, 1, 3).reshape(b, rows, dim), w, f"{p}.out_proj")


def _layer_norm(x: mx.array, w: dict, name: str, eps: float = 1e-5) -> mx.array:
    return mx.fast.layer_norm(x, w[f"{name}.weight"], w[f"{name}.bias"], eps)


def _mlp(x: mx.array, w: dict, p: str) -> mx.array:
    return _linear(nn.gelu(_linear(x, w, f"{p}.fc1")), w, f"{p}.fc2")


class WhisperEncoder:
    """transformers' WhisperEncoder in MLX: log-mel (batch, mels, frames) -> states."""

    def __init__(self, encoder: object) -> None:
        self.heads = encoder.config.encoder_attention_heads
        self.layers = encoder.config.encoder_layers
        self.w = mlx_weights(encoder)
        for name in ("conv1", "conv2"):  # torch (out, in, k) -> MLX (out, k, in)
            self.w[f"{name}.weight"] = self.w[f"{name}.weight"].transpose(0, 2, 1)

    def __call__(self, mel: mx.array) -> mx.array:
        w = self.w
        x = mel.transpose(0, 2, 1)
        x = nn.gelu(mx.conv1d(x, w["conv1.weight"], padding=1) + w["conv1.bias"])
        x = nn.gelu(mx.conv1d(x, w["conv2.weight"], stride=2, padding=1) + w["conv2.bias"])
        x = x + w["embed_positions.weight"][: x.shape[1]]
        for i in range(self.layers):
            p = f"layers.{i}"
            y = _layer_norm(x, w, f"{p}.self_attn_layer_norm")
            x = x + _attention(y, y, w, f"{p}.self_attn", self.heads, None)
            x = x + _mlp(_layer_norm(x, w, f"{p}.final_layer_norm"), w, p)
        return _layer_norm(x, w, "layer_norm")


class WhisperDecoder:
    """transformers' WhisperDecoder + its tied output projection in MLX: token ids
    (batch, n) and encoder states -> logits (batch, n, vocab), without a cache."""

    def __init__(self, decoder: object) -> None:
        self.heads = decoder.config.decoder_attention_heads
        self.layers = decoder.config.decoder_layers
        self.w = mlx_weights(decoder)

    def __call__(self, ids: mx.array, states: mx.array) -> mx.array:
        w = self.w
        x = w["embed_tokens.weight"][ids] + w["embed_positions.weight"][: ids.shape[1]]
        for i in range(self.layers):
            p = f"layers.{i}"
            y = _layer_norm(x, w, f"{p}.self_attn_layer_norm")
            x = x + _attention(y, y, w, f"{p}.self_attn", self.heads, "causal")
            y = _layer_norm(x, w, f"{p}.encoder_attn_layer_norm")
            x = x + _attention(y, states, w, f"{p}.encoder_attn", self.heads, None)
            x = x + _mlp(_layer_norm(x, w, f"{p}.final_layer_norm"), w, p)
        return _layer_norm(x, w, "layer_norm") @ w["embed_tokens.weight"].T


class WhisperDecodeLoop:
    """transformers' WhisperForConditionalGeneration decoding in MLX, mlx-examples' way:
    `start(mel, token)` runs the encoder once, projects every decoder layer's
    cross-attention keys and values of its states once, zeroes a preallocated
    self-attention cache (batch, heads, max_seq, head_dim) per layer and returns the
    logits (batch, vocab) of `token` at position 0; `decode(token, pos)` is one
    mx.compile'd step (position an mx.array, the cache written by mx.slice_update, a bool
    mask over the whole cache) and `decode_eager` mlx-lm's uncompiled step over the rows
    written so far."""

    def __init__(self, model: object, max_seq: int) -> None:
        c = model.config
        self.encoder = WhisperEncoder(model.model.encoder)
        self.w = mlx_weights(model.model.decoder)
        self.heads, self.layers, self.max_seq = c.decoder_attention_heads, c.decoder_layers, max_seq
        self.head_dim = c.d_model // self.heads
        self.step = mx.compile(self._masked_step)

    def _split(self, y: mx.array) -> mx.array:
        return y.reshape(y.shape[0], -1, self.heads, self.head_dim).transpose(0, 2, 1, 3)

    def start(self, mel: np.ndarray, token: np.ndarray) -> mx.array:
        """Encode `mel` (batch, mels, frames); logits of `token` (batch, 1) at position 0."""
        states = self.encoder(mx.array(mel))
        self.cross = []
        for i in range(self.layers):
            p = f"layers.{i}.encoder_attn"
            self.cross += [self._split(_linear(states, self.w, f"{p}.{n}_proj")) for n in "kv"]
        shape = (mel.shape[0], self.heads, self.max_seq, self.head_dim)
        self.caches = [mx.zeros(shape) for _ in range(2 * self.layers)]
        mx.eval(self.cross, self.caches)
        return self.decode_eager(token, 0)

    def _forward(self, ids: mx.array, pos, caches: list, mask, rows: int):
        """Last-row logits and the updated caches: the token at `pos` attends to the
        first `rows` cache rows under `mask`, and to every cross row."""
        w, new = self.w, []
        x = w["embed_tokens.weight"][ids] + w["embed_positions.weight"][pos][:, None]
        scale = self.head_dim**-0.5
        for i in range(self.layers):
            p = f"layers.{i}"
            y = _layer_norm(x, w, f"{p}.self_attn_layer_norm")
            q, k, v = (self._split(_linear(y, w, f"{p}.self_attn.{n}_proj")) for n in "qkv")
            k_cache = mx.slice_update(caches[2 * i], k, pos, axes=(2,))
            v_cache = mx.slice_update(caches[2 * i + 1], v, pos, axes=(2,))
            new += [k_cache, v_cache]
            keys, values = k_cache[:, :, :rows], v_cache[:, :, :rows]
            out = mx.fast.scaled_dot_product_attention(q, keys, values, scale=scale, mask=mask)
            out = out.transpose(0, 2, 1, 3).reshape(x.shape)
            x = x + _linear(out, w, f"{p}.self_attn.out_proj")
            y = _layer_norm(x, w, f"{p}.encoder_attn_layer_norm")
            q = self._split(_linear(y, w, f"{p}.encoder_attn.q_proj"))
            cross_k, cross_v = self.cross[2 * i], self.cross[2 * i + 1]
            out = mx.fast.scaled_dot_product_attention(q, cross_k, cross_v, scale=scale)
            out = out.transpose(0, 2, 1, 3).reshape(x.shape)
            x = x + _linear(out, w, f"{p}.encoder_attn.out_proj")
            x = x + _mlp(_layer_norm(x, w, f"{p}.final_layer_norm"), w, p)
        logits = _layer_norm(x[:, -1], w, "layer_norm") @ w["embed_tokens.weight"].T
        return logits, new

    def _masked_step(self, token: mx.array, pos: mx.array, *caches: mx.array):
        mask = (mx.arange(self.max_seq) <= pos).reshape(1, self.max_seq)
        logits, new = self._forward(token, pos, list(caches), mask, self.max_seq)
        return (logits, *new)

    def decode(self, token: np.ndarray | mx.array, pos: int) -> mx.array:
        """Logits (batch, vocab) of `token` (batch, 1) at `pos`: one compiled step (`token`
        may be a lazy mx.array, as DecoderLM.decode)."""
        token = token if isinstance(token, mx.array) else mx.array(token)
        logits, *self.caches = self.step(token, mx.array([pos]), *self.caches)
        return logits

    def decode_eager(self, token: np.ndarray, pos: int) -> mx.array:
        """mlx-lm's step: uncompiled, attending to the rows written so far, no mask."""
        logits, self.caches = self._forward(
            mx.array(token), mx.array([pos]), self.caches, None, pos + 1
        )
        return logits
