"""MLX lowerings of the fused ops (`ir.fused`), added to `LOWERINGS` on import.

Attention, layer norm, RMS norm and rotary embedding call MLX's fused kernels
(`mx.fast.*`), whose semantics the IR ops copy (see `ir.fused`): grouped-query heads
and the bottom-right-aligned causal mask are native there. `group_norm` has no fast
kernel and is the composite of mean/variance over (N, G, -1) groups in float32.

Precision: the fast kernels compute in float32 (half inputs accumulate in float32 and
round once), the oracle in float64; their difference is float32 rounding of a few
reductions, bounded in the tests. Inputs of rank below what a fast kernel accepts are
reshaped around it (rope wants (..., L, D) with at least 3 axes). Attention rows with
every key masked out are set to 0 after the fast kernel (MLX averages them instead).
"""

from __future__ import annotations

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


def _layer_norm(node: Node, args: list[mx.array]) -> mx.array:
    weight, bias = _optional(node, args)
    return mx.fast.layer_norm(args[0], weight, bias, node.attr("eps"))


def _rms_norm(node: Node, args: list[mx.array]) -> mx.array:
    weight = args[1] if len(args) == 2 else None
    return mx.fast.rms_norm(args[0], weight, node.attr("eps"))


def _group_norm(node: Node, args: list[mx.array]) -> mx.array:
    x = args[0].astype(mx.float32)
    batch, channels = x.shape[:2]
    grouped = x.reshape(batch, node.attr("num_groups"), -1)
    mean = mx.mean(grouped, axis=-1, keepdims=True)
    var = mx.mean(mx.square(grouped - mean), axis=-1, keepdims=True)
    y = ((grouped - mean) * mx.rsqrt(var + node.attr("eps"))).reshape(x.shape)
    per_channel = (channels,) + (1,) * (x.ndim - 2)
    weight, bias = _optional(node, args)
    if weight is not None:
        y = y * weight.astype(mx.float32).reshape(per_channel)
    if bias is not None:
        y = y + bias.astype(mx.float32).reshape(per_channel)
    return y.astype(MX_DTYPES[node.dtype.name])


def _rope(node: Node, args: list[mx.array]) -> mx.array:
    x = args[0]
    shape = x.shape
    if x.ndim < 3:
        x = x.reshape(1, *shape)
    y = mx.fast.rope(
        x,
        node.attr("dims"),
        traditional=node.attr("traditional"),
        base=node.attr("base"),
        scale=node.attr("scale"),
        offset=node.attr("offset"),
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
