"""Greedy text generation on the zoo Llama: prefill buckets and a decode step compiled as
one multi-entry program around per-layer KV caches held as state, and its driver.

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
`generate` drives a compiled program; `tensorgraph.models.generation_reference` holds
the independent NumPy loop it is checked against.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np
from attrs import frozen

import tensorgraph as tg
from tensorgraph.compiler import check_run_arguments
from tensorgraph.errors import GraphError, RunError
from tensorgraph.ir import fused
from tensorgraph.ir.builder import Tensor
from tensorgraph.ir.quantized import MODES
from tensorgraph.models.common import Weights, dtype_of, make_config
from tensorgraph.models.generation_reference import ReferenceGeneration, reference_generate
from tensorgraph.models.llama import LlamaConfig, layer_weights
from tensorgraph.models.prompt_cache import PromptCache, program_identity
from tensorgraph.models.sampling import Sampler
from tensorgraph.nn import MASK_VALUE, attention, merge_heads, rms_norm, split_heads, swiglu_mlp
from tensorgraph.prefill_modes import PREFILL_MODES, check_prefill_mode
from tensorgraph.runtime.state import check_state

__all__ = [
    "DEFAULT_BUCKETS",
    "PREFILL_MODES",
    "CacheQuantization",
    "GenerationLayout",
    "GenerationMemory",
    "GenerationResult",
    "PromptCache",
    "ReferenceGeneration",
    "Sampler",
    "cache_prompt",
    "cache_quantization",
    "choose_bucket",
    "decode_graph",
    "generate",
    "generation_layout",
    "generation_memory",
    "llama_generation",
    "llama_weights",
    "prefill_graph",
    "quantized_attention",
    "reference_generate",
]

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


@frozen
class GenerationMemory:
    """Bytes of a generation program: each entry's own activation arena (`entries`), and
    the shared regions: the one activation arena (the largest entry's), the weights
    (stored once) and the state (the KV caches)."""

    entries: Mapping[str, int]
    arena: int
    weights: int
    state: int

    @property
    def total(self) -> int:
        return self.arena + self.weights + self.state


class DecodeRate:
    """The decode figures of a generation result with `tokens` (batch, count), the
    first made before any decode step, and `decode_seconds` of all decode calls."""

    __slots__ = ()
    tokens: np.ndarray
    decode_seconds: float

    @property
    def decode_steps(self) -> int:
        return self.tokens.shape[1] - 1

    @property
    def decode_tokens_per_second(self) -> float:
        """Tokens made by decode steps (all rows) per second; NaN with no decode step."""
        if self.decode_steps == 0:
            return float("nan")
        return self.tokens.shape[0] * self.decode_steps / self.decode_seconds


@frozen
class GenerationResult(DecodeRate):
    """One generation: `tokens` (batch, count) int32 new token ids, the first from the
    prefill; the `bucket` the prompt of `prompt_length` was padded to (0: resumed from a
    prompt cache; the prompt's own length with a symbolic prefill); wall-clock seconds
    of the prefill call and of all decode calls (each including its logits' transfer to
    the host and the sampler's pick); the program's memory; the `state` it ran on."""

    tokens: np.ndarray
    prompt_length: int
    bucket: int
    prefill_seconds: float
    decode_seconds: float
    memory: GenerationMemory
    state: object

    @property
    def prefill_tokens_per_second(self) -> float:
        """Prompt tokens (all rows of the batch) per second of prefill."""
        return self.tokens.shape[0] * self.prompt_length / self.prefill_seconds


@frozen
class GenerationLayout:
    """What a generation program accepts: its prefill `buckets` (ascending), the cache
    length `max_seq`, the `batch`, the `vocab` and its decode `windows` (ascending).
    A program with a symbolic "prefill" entry has no buckets and its prompt length's
    range instead (`prompt_range`, (min, max)): it prefills at the prompt's length."""

    buckets: tuple[int, ...]
    max_seq: int
    batch: int
    vocab: int
    windows: tuple[int, ...] = ()
    prompt_range: tuple[int, int] | None = None

    def prefill_entry(self, bucket: int) -> str:
        """The entry that prefills at `bucket` (from `bucket_for`)."""
        return "prefill" if self.prompt_range is not None else f"prefill{bucket}"

    def decode_entry(self, position: int) -> str:
        """The decode entry for a step at `position`: the smallest window above it, else
        the whole-cache "decode"."""
        fitting = [w for w in self.windows if position < w]
        return f"decode{min(fitting)}" if fitting else "decode"

    def bucket_for(self, prompt_length: int, new_tokens: int) -> int:
        """`choose_bucket` for this program's buckets and max_seq; with a symbolic prefill,
        the prompt's own length, after the same checks (RunError naming the prompt's
        length and the entry's range when it lies outside)."""
        if self.prompt_range is None:
            return choose_bucket(self.buckets, self.max_seq, prompt_length, new_tokens)
        low, high = self.prompt_range
        if prompt_length >= 1 and not low <= prompt_length <= high:
            raise RunError(
                f"prompt length {prompt_length} is outside the symbolic prefill's range "
                f"[{low}, {high}] (dim 'prompt' of entry 'prefill')"
            )
        return choose_bucket((max(prompt_length, 1),), self.max_seq, prompt_length, new_tokens)


def choose_bucket(buckets: Sequence[int], max_seq: int, prompt_length: int, new_tokens: int) -> int:
    """The smallest of `buckets` >= prompt_length. RunError, naming both numbers, when the
    prompt is empty or longer than the largest bucket, when new_tokens < 1, or when
    prompt_length + new_tokens is past max_seq."""
    largest = max(buckets)
    if prompt_length < 1:
        raise RunError(f"the prompt is empty (length {prompt_length}); it needs >= 1 token")
    if new_tokens < 1:
        raise RunError(f"tokens {new_tokens}: generation makes at least 1 new token")
    if prompt_length > largest:
        raise RunError(
            f"prompt length {prompt_length} is longer than the largest prefill bucket "
            f"{largest} (buckets {sorted(buckets)})"
        )
    if prompt_length + new_tokens > max_seq:
        raise RunError(
            f"prompt length {prompt_length} + {new_tokens} new tokens = "
            f"{prompt_length + new_tokens} is past the cache length max_seq {max_seq}"
        )
    return min(b for b in buckets if b >= prompt_length)


def generation_layout(program: object) -> GenerationLayout:
    """The layout of a program compiled from `llama_generation`'s entries (or any with the
    same entry names and inputs named as in INPUT_ROLES, whose first 4-D state is a
    (batch, heads, max_seq, head_dim) cache, or a quantized cache's codes (batch, heads,
    max_seq, packed)). RunError when an entry is missing."""
    entries = program.entries
    buckets = sorted(
        int(n[len("prefill") :]) for n in entries if n.startswith("prefill") and n != "prefill"
    )
    windows = sorted(
        int(n[len("decode") :]) for n in entries if n.startswith("decode") and n != "decode"
    )
    prompt_range = _prompt_range(entries["prefill"]) if "prefill" in entries else None
    if "decode" not in entries or not (buckets or prompt_range):
        raise RunError(
            f"a generation program needs 'decode' and 'prefill<L>' (or a symbolic 'prefill') "
            f"entries but has {sorted(entries)}"
        )
    if prompt_range is not None:
        buckets = []  # the symbolic entry serves every length: no padding to a bucket
    decode = entries["decode"].graph
    token = next(n for n in decode.inputs if INPUT_ROLES.get(n.name) == "ids")
    logits = decode.node(decode.returned[0])
    # a ring (from_torch_generation's `key_ring_{i}`: a sliding window) bounds no position
    caches = [n.shape[2] for n in decode.states if len(n.shape) == 4 and "_ring_" not in n.name]
    max_seq = caches[0] if caches else sys.maxsize
    return GenerationLayout(
        tuple(buckets), max_seq, token.shape[0], logits.shape[-1], tuple(windows), prompt_range
    )


def _prompt_range(entry: object) -> tuple[int, int]:
    """(min, max) of the symbolic prefill entry's one dim, the prompt's length (RunError
    when the entry has no dim or several)."""
    dims = list(entry.graph.dims.values())
    if len(dims) != 1:
        raise RunError(
            f"entry 'prefill' must have one symbolic dim, the prompt's length, but has "
            f"{[d.describe() for d in dims]}"
        )
    return dims[0].min, dims[0].max


# What each entry input is, by name: the zoo entries' names and those of
# `tensorgraph.importers.generation.from_torch_generation` (int64 ids and positions).
INPUT_ROLES = {
    "tokens": "ids",
    "token": "ids",
    "input_ids": "ids",
    "pos": "position",
    "position": "position",
    "length": "length",
}


def _feeds(
    graph: tg.Graph, values: Mapping[str, object], roles: list | None = None
) -> dict[str, np.ndarray]:
    """Each input of the entry `graph` fed its role's value, in the input's dtype (a
    copy: the caller may change its arrays later); `roles`: `input_roles(graph)`, when the
    caller keeps it."""
    roles = input_roles(graph) if roles is None else roles
    return {name: np.array(values[role], dtype, order="C") for name, role, dtype in roles}


def input_roles(graph: tg.Graph) -> list[tuple[str, str, np.dtype]]:
    """(input name, its role, its NumPy dtype) for every input of entry `graph`: what
    `_feeds` feeds, read once per step. RunError naming an input of no role."""
    roles = []
    for node in graph.inputs:
        role = INPUT_ROLES.get(node.name)
        if role is None:
            raise RunError(
                f"entry {graph.name!r}: input {node.name!r} is none of the generation inputs "
                f"{sorted(INPUT_ROLES)}"
            )
        roles.append((node.name, role, node.dtype.to_numpy()))
    return roles


def generation_memory(program: object) -> GenerationMemory:
    """The program's memory by entry and in total (see GenerationMemory)."""
    arenas = {name: entry.plan.arena_size for name, entry in program.entries.items()}
    return GenerationMemory(arenas, program.arena_size, program.constant_size, program.state_size)


def _prompt(prompt: object, batch: int) -> np.ndarray:
    """The prompt as (batch, n) int32: a 1-D sequence is one row, repeated for the batch."""
    array = np.asarray(prompt)
    if array.ndim == 1:
        array = np.broadcast_to(array, (batch, array.shape[0]))
    if array.ndim != 2 or array.shape[0] != batch:
        raise RunError(f"prompt of shape {array.shape}: expected (n,) or ({batch}, n) token ids")
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise RunError(f"prompt token ids must be integers but got dtype {array.dtype}")
    return np.ascontiguousarray(array, dtype=np.int32)


def generate(
    program: object,
    prompt: object,
    tokens: int,
    *,
    backend: str = "mlx",
    state: object = None,
    sampler: Sampler | None = None,
    on_token: Callable[[np.ndarray], object] | None = None,
    prompt_cache: PromptCache | None = None,
    **backend_options: object,
) -> GenerationResult:
    """Generation of `tokens` new token ids after `prompt` ((n,) or (batch, n) ids) with a
    program compiled from `llama_generation`'s entries (or from_torch_generation's:
    inputs are fed by name, see INPUT_ROLES): the prompt, padded with id 0, runs the
    smallest prefill bucket >= n at position 0 (a symbolic "prefill" entry runs it
    unpadded, at its length n), then `tokens - 1` decode steps at
    positions n, n + 1, ... each feed the previous token (each on the smallest decode
    window above its position, see GenerationLayout.decode_entry). `state` (default: a fresh
    `program.new_state(backend)`) holds the KV caches; options go to the backend.

    Each token is picked from its logits by `sampler` (default: greedy, the argmax; see
    `tensorgraph.models.sampling`: its draws restart at its seed on every call, so a seed
    gives the same tokens on every backend that computes the same logits), and handed to
    `on_token` as a (batch,) int32 array as soon as it is picked, before the next step.
    Greedy decoding on MLX is pipelined (`decode_pipeline.decode_greedy`: the argmax on
    the device, step t + 1 queued before token t is read): the same tokens, each handed
    to `on_token` once the next step is queued.

    With `prompt_cache` (from `cache_prompt` or `load_prompt_cache`, made by a program of
    the same identity), the prompt must start with the cache's prompt: the cached states
    are written into `state`, any further prompt tokens run as decode steps at their
    positions, and the first token is picked from the cache's (or the last such step's)
    logits; `bucket` is then 0 (no prefill ran). On the cache's own prompt this gives
    exactly the tokens of a run over the whole prompt.

    Bad lengths (see GenerationLayout.bucket_for: with a prompt cache, only the empty
    prompt, tokens < 1 and prompt + tokens past max_seq), a prompt cache of another
    program or prompt, and an out-of-range sampler (RunError when the Sampler is made)
    raise RunError before any call, so the state is untouched."""
    layout = generation_layout(program)
    ids = _prompt(prompt, layout.batch)
    length = ids.shape[1]
    sampler = Sampler() if sampler is None else sampler
    if not isinstance(sampler, Sampler):
        raise RunError(f"sampler must be a Sampler but got {type(sampler).__name__}")
    if prompt_cache is None:
        bucket = layout.bucket_for(length, tokens)
    else:
        bucket = 0
        _check_prompt_cache(program, prompt_cache, ids)
        choose_bucket((length,), layout.max_seq, length, tokens)
    state = program.new_state(backend) if state is None else state
    draws = sampler.generator()
    out = np.empty((layout.batch, tokens), np.int32)

    entry_roles: dict[str, list] = {}  # entry -> its input_roles, read once per generate

    def call(entry: str, ids: np.ndarray, position: int) -> np.ndarray:
        graph = program.entries[entry].graph
        if entry not in entry_roles:
            entry_roles[entry] = input_roles(graph)
        roles = {"ids": ids, "position": position, "length": length}
        feeds = _feeds(graph, roles, entry_roles[entry])
        (logits,) = program.run(entry, feeds, backend=backend, state=state, **backend_options)
        return np.asarray(logits).reshape(layout.batch, -1)

    def pick(step: int, logits: np.ndarray) -> None:
        out[:, step] = sampler.sample(logits, draws)
        if on_token is not None:
            on_token(out[:, step].copy())

    began = time.perf_counter()
    if prompt_cache is None:
        padded = np.zeros((layout.batch, bucket), np.int32)
        padded[:, :length] = ids
        logits = call(layout.prefill_entry(bucket), padded, 0)
    else:
        region = (program.state_layout, program.state_size)
        for entry in program.entries.values():  # before a value is written, not in run
            check_state(state, backend, entry.graph, None, region)
        state.assign(prompt_cache.states)
        logits = prompt_cache.logits
        for position in range(prompt_cache.length, length):
            logits = call(layout.decode_entry(position), ids[:, position : position + 1], position)
    pick(0, logits)
    prefill_seconds = time.perf_counter() - began
    began = time.perf_counter()
    positions = range(length, length + tokens - 1)
    if pipelines_greedy(program, backend, sampler, backend_options):
        from tensorgraph.models.decode_pipeline import decode_greedy

        def roles(entry: str) -> list:
            if entry not in entry_roles:
                entry_roles[entry] = input_roles(program.entries[entry].graph)
            return entry_roles[entry]

        def emit(step: int, token: np.ndarray) -> None:
            out[:, step] = token
            if on_token is not None:
                on_token(token.copy())

        decode_greedy(
            program, layout.decode_entry, roles, out[:, 0], positions, layout.vocab, state,
            backend_options, emit,
        )  # fmt: skip
    else:
        for step, position in enumerate(positions, start=1):
            pick(step, call(layout.decode_entry(position), out[:, step - 1 : step], position))
    decode_seconds = time.perf_counter() - began
    return GenerationResult(
        out, length, bucket, prefill_seconds, decode_seconds, generation_memory(program), state
    )


def pipelines_greedy(
    program: object, backend: str, sampler: Sampler, options: Mapping[str, object]
) -> bool:
    """Whether `generate` decodes through `decode_pipeline.decode_greedy`: greedy picks
    on MLX (the argmax stays on the device) with static decode entries, their run
    `options` valid (checked here, as `Program.run` checks them, since the pipelined
    steps call the entries directly). Sampling draws on the host (sampling.py: the same
    draws on every backend), so it keeps the synchronous loop."""
    if backend != "mlx" or not sampler.is_greedy:
        return False
    decodes = [e for name, e in program.entries.items() if name.startswith("decode")]
    if any(e.graph.dims for e in decodes):
        return False
    check_run_arguments(decodes[0].graph, {}, None, backend, options)
    return not options.get("stats")  # a run measured alone waits for its outputs anyway


def _check_prompt_cache(program: object, cache: PromptCache, ids: np.ndarray) -> None:
    """RunError unless `cache` is a PromptCache of `program` whose prompt begins `ids`."""
    if not isinstance(cache, PromptCache):
        raise RunError(f"prompt_cache must be a PromptCache but got {type(cache).__name__}")
    cache.check_program(program)
    cached = cache.prompt
    if cached.shape[0] != ids.shape[0] or cached.shape[1] > ids.shape[1]:
        raise RunError(
            f"the prompt {ids.shape} is not an extension of the cached prompt {cached.shape}"
        )
    if not np.array_equal(ids[:, : cached.shape[1]], cached):
        step = int(np.argmax((ids[:, : cached.shape[1]] != cached).any(axis=0)))
        raise RunError(f"the prompt differs from the cached prompt at position {step}")


def cache_prompt(
    program: object, prompt: object, *, backend: str = "mlx", state: object = None
) -> PromptCache:
    """Run the prompt ((n,) or (batch, n) ids) through the smallest prefill bucket >= n
    (or the symbolic prefill at n), as `generate` does, on `state` (default: a fresh
    one), and return its PromptCache: the states after it, the logits of its last
    position and the program's identity. RunError (nothing run) for a prompt no bucket
    (or the symbolic prefill's range) holds, or past max_seq - 1."""
    ids = _prompt(prompt, generation_layout(program).batch)
    state = program.new_state(backend) if state is None else state
    logits = prefill_logits(program, ids, backend, state).astype(np.float32)
    values = {name: state[name] for name in state.names}
    return PromptCache(program_identity(program), ids, logits, values)


def prefill_logits(
    program: object, prompt: object, backend: str = "mlx", state: object = None
) -> np.ndarray:
    """The logits (batch, vocab) of the first new token after `prompt`, from the
    prefill entry `generate` would run, on `state` (default: a fresh one, then
    discarded): what to compare between backends where greedy tokens may flip on a
    near tie (reduced precision), and what a prompt cache keeps. RunError (nothing run)
    for a prompt no bucket holds or past max_seq - 1."""
    layout = generation_layout(program)
    ids = _prompt(prompt, layout.batch)
    bucket = layout.bucket_for(ids.shape[1], 1)
    padded = np.zeros((layout.batch, bucket), np.int32)
    padded[:, : ids.shape[1]] = ids
    entry = layout.prefill_entry(bucket)
    roles = {"ids": padded, "position": 0, "length": ids.shape[1]}
    feeds = _feeds(program.entries[entry].graph, roles)
    state = program.new_state(backend) if state is None else state
    (logits,) = program.run(entry, feeds, backend=backend, state=state)
    return np.asarray(logits).reshape(layout.batch, -1)
