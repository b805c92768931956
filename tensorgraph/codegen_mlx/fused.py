"""MLX lowerings of the fused ops (`ir.fused`), added to `LOWERINGS` on import.

Attention, layer norm, RMS norm and rotary embedding call MLX's fused kernels
(`mx.fast.*`), whose semantics the IR ops copy (see `ir.fused`): grouped-query heads
and the bottom-right-aligned causal mask are native there. `group_norm` has no fast
kernel and is the composite of mean/variance over (N, G, -1) groups in float32.

On the CPU, MLX has no fused kernels for these: `mx.fast` runs its own composite there
as one opaque primitive, which `mx.compile` cannot fuse with its neighbours. So on the
CPU, layer norm, RMS norm and rope lower to the same float32 composites written out
(measured inside mx.compile at a Llama's dispatch-bound sizes: RMS norm 31 -> 20 us,
rope 43 -> 25 us per op); attention keeps `mx.fast` (the same speed either way).
`FAST_ON_CPU` switches the CPU path back to `mx.fast` (the tests run both).

Precision: the fast kernels compute in float32 (half inputs accumulate in float32 and
round once), the oracle in float64; their difference is float32 rounding of a few
reductions, bounded in the tests. Inputs of rank below what a fast kernel accepts are
reshaped around it (rope wants (..., L, D) with at least 3 axes). Attention rows with
every key masked out are set to 0 after the fast kernel (MLX averages them instead).
"""

from __future__ import annotations

from collections import OrderedDict

import mlx.core as mx

from tensorgraph.codegen_mlx.arrays import MX_DTYPES
from tensorgraph.codegen_mlx.lowering import LOWERINGS, Lowering, _lowered
from tensorgraph.ir.node import Node


def _optional(node: Node, args: list[mx.array]) -> tuple[mx.array | None, mx.array | None]:
    rest = list(args[1:])
    weight = rest.pop(0) if node.attr("has_weight", True) and rest else None
    bias = rest.pop(0) if node.attr("has_bias", False) and rest else None
    return weight, bias


def _live_rows(node: Node, args: list[mx.array]) -> mx.array | None:
    """(…, L, 1) bool: rows with at least one key not masked out; None when every row
    has one. MLX gives such dead rows a uniform or NaN average; the IR says 0."""
    length, keys = node.shape[2], args[1].shape[2]
    if len(args) == 4:
        mask = args[3]
        allowed = mask if mask.dtype == mx.bool_ else mask > -mx.inf
        allowed = mx.broadcast_to(allowed, (*allowed.shape[:-1], keys))
        return mx.any(allowed, axis=-1, keepdims=True)
    if node.attr("causal") and keys < length:
        return (mx.arange(length) >= length - keys).reshape(length, 1)
    return None


def _sdpa(node: Node, args: list[mx.array]) -> mx.array:
    q, k, v = args[:3]
    mask: mx.array | str | None = "causal" if node.attr("causal") else None
    if len(args) == 4:
        mask = args[3]
    out = mx.fast.scaled_dot_product_attention(q, k, v, scale=node.attr("scale"), mask=mask)
    live = _live_rows(node, args)
    return out if live is None else mx.where(live, out, mx.zeros((), out.dtype))


def _standardise(x: mx.array, eps: float) -> mx.array:
    """(x - mean) / sqrt(var + eps) over the last axis (float32 in, float32 out)."""
    centred = x - mx.mean(x, axis=-1, keepdims=True)
    return centred * mx.rsqrt(mx.mean(mx.square(centred), axis=-1, keepdims=True) + eps)


FAST_ON_CPU = False  # True: the CPU path calls mx.fast too (see the module docstring)


def _composite() -> bool:
    """True when the op should be written out (the CPU, unless FAST_ON_CPU)."""
    return not FAST_ON_CPU and mx.default_device() == mx.cpu


def _layer_norm(node: Node, args: list[mx.array]) -> mx.array:
    weight, bias = _optional(node, args)
    if not _composite():
        return mx.fast.layer_norm(args[0], weight, bias, node.attr("eps"))
    y = _standardise(args[0].astype(mx.float32), node.attr("eps"))
    if weight is not None:
        y = y * weight.astype(mx.float32)
    if bias is not None:
        y = y + bias.astype(mx.float32)
    return y.astype(args[0].dtype)


def _rms_norm(node: Node, args: list[mx.array]) -> mx.array:
    weight = args[1] if len(args) == 2 else None
    if not _composite():
        return mx.fast.rms_norm(args[0], weight, node.attr("eps"))
    x = args[0].astype(mx.float32)
    y = x * mx.rsqrt(mx.mean(mx.square(x), axis=-1, keepdims=True) + node.attr("eps"))
    if weight is not None:
        y = y * weight.astype(mx.float32)
    return y.astype(args[0].dtype)


def _group_norm(node: Node, args: list[mx.array]) -> mx.array:
    x = args[0].astype(mx.float32)
    batch, channels = x.shape[:2]
    grouped = x.reshape(batch, node.attr("num_groups"), -1)
    y = _standardise(grouped, node.attr("eps")).reshape(x.shape)
    per_channel = (channels,) + (1,) * (x.ndim - 2)
    weight, bias = _optional(node, args)
    if weight is not None:
        y = y * weight.astype(mx.float32).reshape(per_channel)
    if bias is not None:
        y = y + bias.astype(mx.float32).reshape(per_channel)
    return y.astype(MX_DTYPES[node.dtype.name])


_ROPE_TABLES: OrderedDict[tuple, tuple[mx.array, mx.array]] = OrderedDict()
ROPE_TABLES_KEPT = 64  # most recently used tables kept (a decode loop makes one per offset)


def _rope_tables(node: Node, length: int) -> tuple[mx.array, mx.array]:
    """float32 (L, dims/2) cos and sin of the angles (offset + l) * scale *
    base^(-2i/dims), computed once per distinct table and kept (a model's rope ops
    share one): inside a trace they are constants, not recomputed on every call."""
    key = (*(node.attr(k) for k in ("dims", "base", "scale", "offset")), length)
    if key in _ROPE_TABLES:
        _ROPE_TABLES.move_to_end(key)
    else:
        dims = node.attr("dims")
        positions = mx.arange(length, dtype=mx.float32) + node.attr("offset")
        positions = positions * node.attr("scale")
        inv_freq = node.attr("base") ** (-mx.arange(0, dims, 2, dtype=mx.float32) / dims)
        angles = positions[:, None] * inv_freq[None, :]
        tables = (mx.cos(angles), mx.sin(angles))
        mx.eval(tables)
        _ROPE_TABLES[key] = tables
        if len(_ROPE_TABLES) > ROPE_TABLES_KEPT:
            _ROPE_TABLES.popitem(last=False)
    return _ROPE_TABLES[key]


_INVERSE_FREQUENCIES: dict[tuple[int, float], mx.array] = {}
# Tables of a run-time offset, per offset array: (offset, cos, sin) by (id(offset), dims,
# base, scale, length). The rope ops of one model (2 per layer) get the same offset array
# from the executor, so they share one table computation in a trace (or an eager run).
# Each entry holds its offset array, so no other array can have that id while the entry
# lives: a hit is always the same (immutable) array, whose tables these are.
_RUN_TIME_TABLES: OrderedDict[tuple, tuple[mx.array, mx.array, mx.array]] = OrderedDict()
RUN_TIME_TABLES_KEPT = 16


def _inverse_frequencies(dims: int, base: float) -> mx.array:
    """base^(-2i/dims), i < dims/2, float32, computed once per (dims, base)."""
    inv_freq = _INVERSE_FREQUENCIES.get((dims, base))
    if inv_freq is None:
        inv_freq = base ** (-mx.arange(0, dims, 2, dtype=mx.float32) / dims)
        mx.eval(inv_freq)
        _INVERSE_FREQUENCIES[dims, base] = inv_freq
    return inv_freq


def _rope_tables_at(node: Node, length: int, offset: mx.array) -> tuple[mx.array, mx.array]:
    """The cos and sin tables of `_rope_tables` for a run-time offset (an integer array
    of one element), computed on the device in the same float32 steps (so equal, bit
    for bit, to the table of the same int offset): once per offset array and table
    (see _RUN_TIME_TABLES), not once per rope op."""
    dims, base, scale = node.attr("dims"), node.attr("base"), node.attr("scale")
    key = (id(offset), dims, base, scale, length)
    kept = _RUN_TIME_TABLES.get(key)
    if kept is not None:
        _RUN_TIME_TABLES.move_to_end(key)
        return kept[1], kept[2]
    positions = mx.arange(length, dtype=mx.float32) + offset.reshape(()).astype(mx.float32)
    angles = (positions * scale)[:, None] * _inverse_frequencies(dims, base)[None, :]
    cos, sin = mx.cos(angles), mx.sin(angles)
    _RUN_TIME_TABLES[key] = (offset, cos, sin)
    if len(_RUN_TIME_TABLES) > RUN_TIME_TABLES_KEPT:
        _RUN_TIME_TABLES.popitem(last=False)
    return cos, sin


def _rope_composite(node: Node, x: mx.array, offset: mx.array | None) -> mx.array:
    """`mx.fast.rope` written out in float32: features [0, dims) rotate by angle
    (offset + l) * scale * base^(-2i/dims), as halves (or adjacent pairs when
    traditional); features from dims on pass through. `offset`: the run-time offset
    operand, or None for the attribute's."""
    dims = node.attr("dims")
    if offset is None:
        cos, sin = _rope_tables(node, x.shape[-2])
    else:
        cos, sin = _rope_tables_at(node, x.shape[-2], offset)
    wide = x.astype(mx.float32)
    rotated, rest = wide[..., :dims], wide[..., dims:]
    if node.attr("traditional"):
        pairs = rotated.reshape(*rotated.shape[:-1], dims // 2, 2)
        a, b = pairs[..., 0], pairs[..., 1]
        turned = mx.stack([a * cos - b * sin, a * sin + b * cos], axis=-1).reshape(rotated.shape)
    else:
        a, b = rotated[..., : dims // 2], rotated[..., dims // 2 :]
        turned = mx.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)
    if rest.shape[-1]:
        turned = mx.concatenate([turned, rest], axis=-1)
    return turned.astype(x.dtype)


def _rope(node: Node, args: list[mx.array]) -> mx.array:
    x = args[0]
    offset = args[1] if len(args) == 2 else None
    if _composite():
        return _rope_composite(node, x, offset)
    shape = x.shape
    if x.ndim < 3:
        x = x.reshape(1, *shape)
    y = mx.fast.rope(
        x,
        node.attr("dims"),
        traditional=node.attr("traditional"),
        base=node.attr("base"),
        scale=node.attr("scale"),
        offset=node.attr("offset") if offset is None else offset.reshape(()),
    )
    return y.reshape(shape)


FUSED_LOWERINGS: dict[str, Lowering] = {
    "scaled_dot_product_attention": _sdpa,
    "layer_norm": _layer_norm,
    "rms_norm": _rms_norm,
    "group_norm": _group_norm,
    "rope": _rope,
}
LOWERINGS.update({op: _lowered(op, fn) for op, fn in FUSED_LOWERINGS.items()})
