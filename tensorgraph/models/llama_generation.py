"""The zoo Llama's generation program: prefill buckets and a decode step compiled as one
multi-entry program around per-layer KV caches held as state (the driver that runs any
such program is tensorgraph.models.generation).

`llama_generation(config, max_seq=..., buckets=..., seed=...)` builds the entries:

- `prefill{L}`, one per bucket L <= max_seq: `tokens` (batch, L) int32, the prompt padded
  to L, and `length` () int32, its real length (1 <= length <= L). It writes the k/v of
  all L rows into the states `k{i}` / `v{i}` (batch, heads, max_seq, head_dim) at rows
  [0, L), attends causally over them, and returns the logits (batch, vocab) of position
  length - 1.
- or, with `prefill="symbolic"`, one `prefill` entry over the prompt's real length: a
  `tg.Dim("prompt", min=1, max=max_seq)`. `tokens` (batch, prompt) int32, no padding and
  no `length`; it writes exactly the prompt's rows [0, prompt) of the caches, attends
  causally over them and returns the logits of position prompt - 1. The entry's plan is
  parametric (planner/parametric.py): a call computes and holds only the prompt's rows,
  where a bucket computes all L of them (issue 26's item 6).
- `decode`: `token` (batch, 1) int32 and `pos` () int32. The token's k/v (rotated at
  position pos) are written at row pos; its query attends over the whole cache with the
  bool mask arange(max_seq) <= pos; it returns the logits (batch, vocab) of that token.
- `decode{W}`, one per window W < max_seq (by default the prefill buckets): the same
  step, but its query attends over the cache's first W rows only (mask arange(W) <=
  pos), so a short context reads W rows instead of max_seq: shapes are static, so
  these are shape buckets of the decode step, as a static-shape compiler keeps them.
  The entry requires pos < W: `take(arange(W), pos)` makes that a precondition the
  host checks before the call (a RunError naming pos and W, nothing written), never
  a silently truncated attention. `generate` picks the smallest window above pos.

Padding: a prefill also writes k/v at rows [length, L), computed from the padding
tokens. Those rows are garbage, and harmless: decode at pos = length writes row pos
before it reads it, and its mask hides every row past pos, so each row is overwritten
before any query sees it. Rows at or past L keep whatever an earlier call left there,
likewise hidden. The zoo Llama has as many key/value heads as query heads.

A quantized KV cache (`kv_bits`, `kv_group_size`), as mlx-lm's `QuantizedKVCache`: each
cache is three states laid out as `mx.quantize` lays out a (batch, heads, max_seq,
head_dim) array along head_dim: `k{i}` the uint32 codes (..., head_dim * bits / 32),
`k{i}.scales` and `k{i}.biases` (..., head_dim / group) in the model's dtype (likewise
`v{i}`). Every entry quantizes the rows it computes (`quantize_rows`) and writes their
three parts at its position. A decode step attends over the quantized cache through
`quantized_matmul` as mlx-lm's `quantized_scaled_dot_product_attention` does (queries
scaled first, scores = q K^T, bool mask, softmax, probs V; no fused attention, which
reads a float cache), its own row included; a prefill starts at position 0 and attends
over its own rows in float, as mlx-lm's first prompt chunk does before its cache is
quantized (`quantized_kv_start=0`). The cache shrinks from 4 * head_dim bytes a row
(float32) to head_dim * bits / 8 + 2 * 4 * head_dim / group (0.28x at 8 bits, group 64).

Every entry binds the same weight arrays under the same names (`llama_weights`; seed 0
gives the zoo `llama` model's weights), so the compiled program stores them once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from attrs import frozen

import tensorgraph as tg
from tensorgraph.errors import GraphError
from tensorgraph.ir import fused
from tensorgraph.ir.builder import Tensor
from tensorgraph.ir.quantized import MODES
from tensorgraph.models.common import Weights, dtype_of, make_config
from tensorgraph.models.llama import LlamaConfig, layer_weights
from tensorgraph.nn import MASK_VALUE, attention, merge_heads, rms_norm, split_heads, swiglu_mlp
from tensorgraph.prefill_modes import check_prefill_mode

DEFAULT_BUCKETS = (32, 128, 512)
LAYER_KEYS = ("attn_norm", "wq", "wk", "wv", "wo", "mlp_norm", "w_gate", "w_up", "w_down")


def llama_weights(config: LlamaConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """The Llama's weight arrays by param name, drawn in the order `llama` draws them, so
    seed 0 gives exactly the zoo `llama` model's weights (same names, same values)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise GraphError(f"llama weights: seed must be a non-negative int but got {seed!r}")
    g = tg.Graph("weights")
    w = Weights(g, seed, dtype_of(config.dtype))
    w.normal("embed", (config.vocab, config.dim), fan_in=1)
    for i in range(config.layers):
        layer_weights(w, f"l{i}.", config.dim, config.hidden)
    w.constant("norm", (config.dim,), 1.0)
    w.normal("lm_head", (config.dim, config.vocab))
    return dict(g.param_values)


@frozen
class CacheQuantization:
    """How a quantized KV cache stores its rows: affine `bits` per value, one scale and
    one bias per `group_size` values along head_dim (mlx-lm's `kv_bits`,
    `kv_group_size`)."""

    bits: int = 8
    group_size: int = 64

    @property
    def options(self) -> dict[str, object]:
        return {"group_size": self.group_size, "bits": self.bits, "mode": "affine"}


# A cache: one float state, or the (codes, scales, biases) states of a quantized one.
Cache = Tensor | tuple[Tensor, Tensor, Tensor]


def _cache_state(
    g: tg.Graph, name: str, shape: tuple[int, ...], dtype: tg.DType, kv: CacheQuantization | None
) -> Cache:
    """The state(s) of one cache of `shape` (batch, heads, max_seq, head_dim) (see the
    module docstring for the quantized layout and names)."""
    if kv is None:
        return g.state(name, shape, dtype)
    *rows, head_dim = shape
    return (
        g.state(name, (*rows, head_dim * kv.bits // 32), tg.uint32),
        g.state(f"{name}.scales", (*rows, head_dim // kv.group_size), dtype),
        g.state(f"{name}.biases", (*rows, head_dim // kv.group_size), dtype),
    )


def _write(
    cache: Cache, rows: Tensor, position: int | Tensor, kv: CacheQuantization | None
) -> Cache:
    """`rows` (batch, heads, n, head_dim) written into `cache` at row `position` (each
    part quantized first when the cache is), set as the states' updates; the updated
    cache."""
    if kv is None:
        updated = tg.slice_update(cache, rows, 2, position)
        rows.graph.update_state(cache, updated)
        return updated
    parts = tg.quantize_rows(rows, **kv.options)
    updated = tuple(tg.slice_update(c, p, 2, position) for c, p in zip(cache, parts, strict=True))
    for state, value in zip(cache, updated, strict=True):
        rows.graph.update_state(state, value)
    return updated


def _window(cache: Cache, window: int | None) -> Cache:
    """The cache's first `window` rows (all when None)."""
    if isinstance(cache, Tensor):
        return cache if window is None else tg.narrow(cache, 2, 0, window)
    return tuple(_window(part, window) for part in cache)


def quantized_attention(
    q: Tensor, keys: Cache, values: Cache, mask: Tensor, kv: CacheQuantization
) -> Tensor:
    """softmax(q K^T / sqrt(d), keys where `mask` (bool, True = attend)) V over the
    quantized K and V (codes, scales, biases), read through `quantized_matmul` as
    mlx-lm's `quantized_scaled_dot_product_attention` does: the queries are scaled
    first and masked scores are MASK_VALUE (exp of it is exactly 0)."""
    scaled = q * (1.0 / math.sqrt(q.shape[-1]))
    scores = tg.quantized_matmul(scaled, *keys, transpose=True, **kv.options)
    probs = tg.softmax(tg.where(mask, scores, MASK_VALUE), axis=-1)
    return tg.quantized_matmul(probs, *values, transpose=False, **kv.options)


def _layer(
    h: Tensor,
    p: Mapping[str, Tensor],
    config: LlamaConfig,
    caches: tuple[Cache, Cache],
    position: int | Tensor,
    mask: Tensor | None,
    window: int | None = None,
    kv: CacheQuantization | None = None,
) -> Tensor:
    """One decoder layer over h (batch, rows, dim) at positions position + [0, rows): the
    rows' k/v are written into the caches at row `position` (quantized under `kv`) and
    become the caches' state updates. Without a mask (prefill, position 0) the queries
    attend causally over their own rows (in float); with one (decode) over the updated
    cache's first `window` rows (all when None) under `mask`."""
    x = rms_norm(h, p["attn_norm"], config.eps)
    q, k, v = (split_heads(x @ p[name], config.heads) for name in ("wq", "wk", "wv"))
    head_dim = config.dim // config.heads
    q = fused.rope(q, head_dim, offset=position)
    k = fused.rope(k, head_dim, offset=position)
    k_cache = _write(caches[0], k, position, kv)
    v_cache = _write(caches[1], v, position, kv)
    if window is not None and window >= _cache_rows(caches[0]):
        window = None
    if mask is None:
        attended = attention(q, k, v, "causal")
    elif kv is None:
        attended = attention(q, _window(k_cache, window), _window(v_cache, window), mask)
    else:
        keys, values = _window(k_cache, window), _window(v_cache, window)
        attended = quantized_attention(q, keys, values, mask, kv)
    h = h + merge_heads(attended) @ p["wo"]
    mlp_in = rms_norm(h, p["mlp_norm"], config.eps)
    return h + swiglu_mlp(mlp_in, p["w_gate"], p["w_up"], p["w_down"])


def _cache_rows(cache: Cache) -> int:
    """The rows a cache holds."""
    return (cache if isinstance(cache, Tensor) else cache[0]).shape[2]


def _decoder(
    g: tg.Graph,
    weights: Mapping[str, np.ndarray],
    config: LlamaConfig,
    max_seq: int,
    ids: Tensor,
    position: int | Tensor,
    mask: Tensor | None,
    window: int | None = None,
    kv: CacheQuantization | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """(hidden states after every layer, the params by name) for `ids`: every weight is
    bound in `g` under its name, and layer i reads and updates the states k{i}, v{i}
    (quantized under `kv`, see the module docstring; attending over their first `window`
    rows under `mask`, when given)."""
    dtype = dtype_of(config.dtype)
    params = {name: g.param(name, a.shape, dtype, a) for name, a in weights.items()}
    shape = (config.batch, config.heads, max_seq, config.dim // config.heads)
    h = tg.take(params["embed"], ids, axis=0)
    for i in range(config.layers):
        p = {key: params[f"l{i}.{key}"] for key in LAYER_KEYS}
        caches = tuple(_cache_state(g, f"{side}{i}", shape, dtype, kv) for side in "kv")
        h = _layer(h, p, config, caches, position, mask, window, kv)
    return h, params


def _logits(h: Tensor, params: Mapping[str, Tensor], config: LlamaConfig) -> Tensor:
    """Final norm and vocabulary projection: h (batch, dim) -> logits (batch, vocab)."""
    return rms_norm(h, params["norm"], config.eps) @ params["lm_head"]


def prefill_graph(
    config: LlamaConfig,
    weights: Mapping[str, np.ndarray],
    bucket: int | tg.Dim,
    max_seq: int,
    kv: CacheQuantization | None = None,
) -> tg.Graph:
    """The `prefill{bucket}` entry, or given a `tg.Dim` (max <= max_seq) the symbolic
    `prefill` entry over that many real tokens (see the module docstring; a quantized
    cache under `kv`)."""
    symbolic = isinstance(bucket, tg.Dim)
    g = tg.Graph("prefill" if symbolic else f"prefill{bucket}")
    tokens = g.input("tokens", (config.batch, bucket), tg.int32)
    if symbolic:
        h, params = _decoder(g, weights, config, max_seq, tokens, 0, None, kv=kv)
        last = tg.narrow(h, 1, bucket - 1, 1).reshape(config.batch, config.dim)
    else:
        length = g.input("length", (), tg.int32)
        h, params = _decoder(g, weights, config, max_seq, tokens, 0, None, kv=kv)
        last = tg.take(h, length - 1, axis=1)  # (batch, dim): the last real position
    g.output(_logits(last, params, config))
    return g


def decode_graph(
    config: LlamaConfig,
    weights: Mapping[str, np.ndarray],
    max_seq: int,
    window: int | None = None,
    kv: CacheQuantization | None = None,
) -> tg.Graph:
    """The `decode` entry, or with `window` < max_seq the `decode{window}` entry (see
    the module docstring; a quantized cache under `kv`)."""
    window = max_seq if window is None else window
    g = tg.Graph("decode" if window == max_seq else f"decode{window}")
    token = g.input("token", (config.batch, 1), tg.int32)
    pos = g.input("pos", (), tg.int32)
    rows = tg.arange(g, 0, window)
    # take(rows, pos) == pos for 0 <= pos < window, and a checked index error otherwise
    last = pos if window == max_seq else tg.take(rows, pos, axis=0)
    visible = (rows <= last).reshape(1, window)  # keys 0..pos of the window
    h, params = _decoder(g, weights, config, max_seq, token, pos, visible, window, kv)
    g.output(_logits(h.reshape(config.batch, config.dim), params, config))
    return g


def llama_generation(
    config: LlamaConfig | None = None,
    *,
    max_seq: int = 512,
    buckets: Sequence[int] = DEFAULT_BUCKETS,
    seed: int = 0,
    windows: Sequence[int] | None = None,
    kv_bits: int | None = None,
    kv_group_size: int = 64,
    prefill: str = "buckets",
) -> dict[str, tg.Graph]:
    """The generation entries of the zoo Llama: "prefill{L}" for every bucket L <= max_seq
    (ascending), "decode{W}" for every decode window W < max_seq (None: the buckets;
    () for none) and "decode", all binding `llama_weights(config, seed)`; ready for
    `tg.compile(entries)`. `config.seq` is not used (the buckets are the prompt lengths).
    With `kv_bits` the KV caches are quantized (`kv_bits` bits a value, a scale and a
    bias per `kv_group_size` values; see the module docstring); None keeps them float.
    `prefill` is "buckets" (a padded prefill per bucket) or "symbolic" (one "prefill"
    entry at the prompt's real length, 1..max_seq, in place of the bucket entries; the
    buckets then only name the default decode windows). See PREFILL_MODES for why the
    default stays "buckets".

    GraphError names a bad max_seq, an empty or non-positive bucket list, buckets of
    which none fits max_seq, a kv_bits or kv_group_size MLX's affine quantization does
    not take, a head size the group does not divide, or an unknown `prefill`."""
    config = make_config(LlamaConfig, config, {})
    kv = cache_quantization(config, kv_bits, kv_group_size)
    check_prefill_mode(prefill, "llama_generation")
    if isinstance(max_seq, bool) or not isinstance(max_seq, int) or max_seq < 1:
        raise GraphError(f"llama_generation: max_seq must be a positive int but got {max_seq!r}")
    sizes = sorted(set(buckets))
    if not sizes or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in sizes):
        raise GraphError(f"llama_generation: buckets must be positive ints but got {buckets!r}")
    fitting = [b for b in sizes if b <= max_seq]
    if not fitting:
        raise GraphError(
            f"llama_generation: no bucket of {sizes} fits max_seq {max_seq} (the smallest "
            f"bucket {sizes[0]} is longer than the cache)"
        )
    weights = llama_weights(config, seed)
    if prefill == "symbolic":
        prompt = tg.Dim("prompt", min=1, max=max_seq)
        entries = {"prefill": prefill_graph(config, weights, prompt, max_seq, kv)}
    else:
        entries = {f"prefill{b}": prefill_graph(config, weights, b, max_seq, kv) for b in fitting}
    chosen = fitting if windows is None else sorted(set(windows))
    if any(isinstance(w, bool) or not isinstance(w, int) or w < 1 for w in chosen):
        raise GraphError(f"llama_generation: windows must be positive ints but got {windows!r}")
    for window in (w for w in chosen if w < max_seq):
        entries[f"decode{window}"] = decode_graph(config, weights, max_seq, window, kv)
    entries["decode"] = decode_graph(config, weights, max_seq, kv=kv)
    return entries


def cache_quantization(
    config: LlamaConfig, kv_bits: int | None, kv_group_size: int = 64
) -> CacheQuantization | None:
    """The CacheQuantization of (`kv_bits`, `kv_group_size`) for `config`'s heads (None
    when kv_bits is None). GraphError naming the value unless MLX's affine quantization
    takes the width and group, and the group divides the head size."""
    if kv_bits is None:
        return None
    widths, groups = MODES["affine"]
    if isinstance(kv_bits, bool) or kv_bits not in widths:
        raise GraphError(
            f"kv_bits must be one of {widths} (MLX's affine widths) or None, not {kv_bits!r}"
        )
    if isinstance(kv_group_size, bool) or kv_group_size not in groups:
        raise GraphError(f"kv_group_size must be one of {groups}, not {kv_group_size!r}")
    head_dim = config.dim // config.heads
    if head_dim % kv_group_size:
        raise GraphError(
            f"kv_group_size {kv_group_size} does not divide the head size {head_dim} (dim "
            f"{config.dim} / {config.heads} heads): the cache is quantized along head_dim"
        )
    return CacheQuantization(kv_bits, kv_group_size)
