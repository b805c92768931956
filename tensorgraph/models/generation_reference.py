"""The plain NumPy reference of Llama generation: the zoo Llama's math written directly
in NumPy (float64), with a KV cache that grows by one row per step, no padding, no
buckets and no tensorgraph code but, for a quantized cache, MLX's quantizer
(`runtime.quant_kernels`). It is the oracle `generate` is checked against:
the same weights must give the same greedy token ids, and its cache rows the same values
as the program's state rows (up to float32 rounding).

Math (Llama, half-split rotary, as the zoo model): h = embed[ids]; per layer
x = rms(h) * attn_norm; q, k, v = x wq, x wk, x wv split into heads; q, k rotated by the
angles p * base^(-2i/head_dim) (feature i paired with i + head_dim/2) at their absolute
positions p; softmax(q k^T / sqrt(head_dim)) over keys at positions <= the query's;
h += merged heads wo; h += (silu(rms(h) * mlp_norm w_gate) * (.. w_up)) w_down; logits =
rms(h) * norm lm_head, with rms(x) = x / sqrt(mean(x^2) + eps).

With `kv_bits` the cache holds each new k/v row as MLX would store it: the row in the
model's dtype, quantized along head_dim (`runtime.quant_kernels.quantize`, bit for bit
MLX's affine quantizer) and dequantized back; a prompt attends over its own rows
unquantized (they enter the cache after), every later step over the stored rows, its
own included (mlx-lm's QuantizedKVCache with `quantized_kv_start=0`).
"""

from __future__ import annotations

from collections.abc import Mapping

import ml_dtypes
import numpy as np
from attrs import frozen

from tensorgraph.errors import RunError, ShapeError
from tensorgraph.runtime.quant_kernels import QuantSpec, check_spec, dequantize, quantize

ROPE_BASE = 10000.0


@frozen
class ReferenceGeneration:
    """The reference's greedy run: `tokens` (batch, count) new ids; `keys[i]` / `values[i]`
    layer i's cache (batch, heads, n + count - 1, head_dim), float64 (a row never changes
    once written, so its first p + 1 rows are the cache after the step at position p;
    the dequantized rows with `kv_bits`);
    `logits[s]` (batch, vocab) float64 whose argmax is tokens[:, s]."""

    tokens: np.ndarray
    keys: list[np.ndarray]
    values: list[np.ndarray]
    logits: list[np.ndarray]


def _rms(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def _rotate(x: np.ndarray, start: int) -> np.ndarray:
    """x (batch, heads, rows, d) rotated at positions start + [0, rows)."""
    rows, d = x.shape[-2:]
    half = d // 2
    inv_freq = ROPE_BASE ** (-2.0 * np.arange(half) / d)
    angles = np.arange(start, start + rows)[:, None] * inv_freq[None, :]
    cos, sin = np.cos(angles), np.sin(angles)
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)


class _Llama:
    """The decoder over float64 copies of the weights, with per-layer growing caches."""

    def __init__(
        self, config: object, weights: Mapping[str, np.ndarray], kv: QuantSpec | None = None
    ) -> None:
        self.c = config
        self.w = {name: np.asarray(a, np.float64) for name, a in weights.items()}
        self.keys: list[np.ndarray | None] = [None] * config.layers
        self.values: list[np.ndarray | None] = [None] * config.layers
        self.kv = kv
        name = getattr(config, "dtype", "float32")
        self.dtype = np.dtype(ml_dtypes.bfloat16 if name == "bfloat16" else name)

    def stored(self, rows: np.ndarray) -> np.ndarray:
        """`rows` as the cache holds them: as they are, or quantized and dequantized."""
        if self.kv is None:
            return rows
        parts = quantize(rows.astype(self.dtype), self.kv)
        return dequantize(*parts, self.kv).astype(np.float64)

    def heads(self, x: np.ndarray) -> np.ndarray:
        batch, rows, dim = x.shape
        return x.reshape(batch, rows, self.c.heads, dim // self.c.heads).transpose(0, 2, 1, 3)

    def forward(self, ids: np.ndarray, start: int) -> np.ndarray:
        """Logits (batch, vocab) of the last of `ids` (batch, rows) at positions
        start + [0, rows); appends their k/v to the caches, which must hold `start` rows."""
        c, w = self.c, self.w
        h = w["embed"][ids]
        rows = ids.shape[1]
        for i in range(c.layers):
            p = {key[len(f"l{i}.") :]: a for key, a in w.items() if key.startswith(f"l{i}.")}
            x = _rms(h, p["attn_norm"], c.eps)
            q = _rotate(self.heads(x @ p["wq"]), start)
            k = _rotate(self.heads(x @ p["wk"]), start)
            v = self.heads(x @ p["wv"])
            keys, values = self.stored(k), self.stored(v)
            if self.keys[i] is not None:  # a later step attends over the stored rows
                keys = np.concatenate([self.keys[i], keys], axis=2)
                values = np.concatenate([self.values[i], values], axis=2)
                k, v = keys, values
            self.keys[i], self.values[i] = keys, values
            scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1])
            query_pos = np.arange(start, start + rows)[:, None]
            scores = np.where(np.arange(start + rows)[None, :] <= query_pos, scores, -np.inf)
            probs = np.exp(scores - scores.max(axis=-1, keepdims=True))
            probs /= probs.sum(axis=-1, keepdims=True)
            attended = (probs @ v).transpose(0, 2, 1, 3).reshape(h.shape)
            h = h + attended @ p["wo"]
            x = _rms(h, p["mlp_norm"], c.eps)
            gate = x @ p["w_gate"]
            h = h + (gate / (1.0 + np.exp(-gate)) * (x @ p["w_up"])) @ p["w_down"]
        return _rms(h[:, -1], w["norm"], c.eps) @ w["lm_head"]


def reference_generate(
    config: object,
    weights: Mapping[str, np.ndarray],
    prompt: object,
    tokens: int,
    kv_bits: int | None = None,
    kv_group_size: int = 64,
) -> ReferenceGeneration:
    """Greedy generation of `tokens` ids after `prompt` ((n,) or (batch, n) ids; a 1-D
    prompt is one row repeated for config.batch) with a `LlamaConfig`'s sizes and the
    weight arrays by name (`llama_weights`), the cache quantized with `kv_bits` bits
    in groups of `kv_group_size` (see the module docstring). RunError names an empty
    prompt, a token count < 1, or an id outside [0, vocab); ShapeError a kv_bits or
    group MLX does not take, or a group that does not divide the head size."""
    ids = np.asarray(prompt)
    if ids.ndim == 1:
        ids = np.broadcast_to(ids, (config.batch, ids.shape[0]))
    if ids.ndim != 2 or ids.shape[1] < 1 or tokens < 1:
        raise RunError(f"reference_generate: prompt {ids.shape} and tokens {tokens} must be >= 1")
    if ids.min() < 0 or ids.max() >= config.vocab:
        raise RunError(
            f"reference_generate: prompt ids must lie in [0, {config.vocab}) but span "
            f"[{ids.min()}, {ids.max()}]"
        )
    kv = None if kv_bits is None else QuantSpec("affine", kv_bits, kv_group_size)
    if kv is not None:
        check_spec(kv.mode, kv.bits, kv.group_size)
        head_dim = config.dim // config.heads
        if head_dim % kv_group_size:
            raise ShapeError(
                f"reference_generate: kv_group_size {kv_group_size} does not divide the "
                f"head size {head_dim}"
            )
    model = _Llama(config, weights, kv)
    logits = [model.forward(ids, 0)]
    out = [np.argmax(logits[0], axis=-1)]
    for step in range(1, tokens):
        logits.append(model.forward(out[-1][:, None], ids.shape[1] + step - 1))
        out.append(np.argmax(logits[-1], axis=-1))
    return ReferenceGeneration(
        np.stack(out, axis=1).astype(np.int32), model.keys, model.values, logits
    )
