"""Vector-Jacobian rules of the fused ops, decomposed into IR ops (the fused forward
stays one node; its backward recomputes the statistics it needs), registered on the ops
in `OPS` on import.

- layer_norm / group_norm: with xhat = (x - mean) * rstd over the normalised row (a
  group's channels and positions for group_norm) and gy = g * weight,
  gx = rstd * (gy - mean(gy) - xhat * mean(gy * xhat)); weight gets sum(g * xhat) and
  bias sum(g) over every axis but the feature (channel) axis.
- rms_norm: with r = rsqrt(mean(x^2) + eps), gx = r * (gy - x * r^2 * mean(gy * x)),
  weight gets sum(g * x * r).
- scaled_dot_product_attention: the probabilities p are recomputed (key/value heads
  repeated for grouped queries, the mask applied as the kernel does: a row with every
  key masked has p = 0, hence output 0 and no gradient); gv = p^T g, gs = p * (g v^T -
  rowsum(g v^T * p)), gq = scale * gs k, gk = scale * gs^T q, summed back over each
  group of query heads; an additive float mask gets gs summed to its shape.
- rope: a rotation by the angle of each pair; its transpose is the rotation by minus
  that angle, which is rope applied to g with each pair's second feature negated before
  and after (P rope(P g), P = diag(1, -1) per pair).
"""

from __future__ import annotations

from collections.abc import Sequence

import ml_dtypes
import numpy as np

from tensorgraph.ir import functions as fn
from tensorgraph.ir.dims import canonical, is_static
from tensorgraph.ir.fused import rope
from tensorgraph.ir.node import Node
from tensorgraph.ir.ops import register_vjp
from tensorgraph.ir.tensor import Tensor, emit
from tensorgraph.ir.vjp_support import extent_operand, positions, unbroadcast


def _affine(node: Node, inputs: Sequence[Tensor]) -> tuple[Tensor | None, Tensor | None]:
    rest = list(inputs[1:])
    weight = rest.pop(0) if node.attr("has_weight") else None
    bias = rest.pop(0) if node.attr("has_bias") else None
    return weight, bias


def _normalised(x: Tensor, gy: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """(gx, xhat) of a normalisation over the last axis of x and gy."""
    centred = x - fn.mean(x, -1, keepdims=True)
    rstd = fn.rsqrt(fn.mean(centred * centred, -1, keepdims=True) + eps)
    xhat = centred * rstd
    gx = rstd * (gy - fn.mean(gy, -1, keepdims=True) - xhat * fn.mean(gy * xhat, -1, keepdims=True))
    return gx, xhat


def _all_but(x: Tensor, axis: int) -> tuple[int, ...]:
    return tuple(a for a in range(x.ndim) if a != axis)


def _layer_norm(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list:
    x = inputs[0]
    weight, bias = _affine(node, inputs)
    if x.size == 0:
        return [fn.reshape(g, x.shape)] + [None] * (len(inputs) - 1)
    gx, xhat = _normalised(x, g * weight if weight is not None else g, node.attr("eps"))
    leading = tuple(range(x.ndim - 1))
    result = [gx]
    if weight is not None:
        result.append(fn.sum(g * xhat, leading))
    if bias is not None:
        result.append(fn.sum(g, leading))
    return result


def _rms_norm(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list:
    x = inputs[0]
    weight = inputs[1] if len(inputs) == 2 else None
    if x.size == 0:
        return [fn.reshape(g, x.shape)] + [None] * (len(inputs) - 1)
    r = fn.rsqrt(fn.mean(x * x, -1, keepdims=True) + node.attr("eps"))
    gy = g * weight if weight is not None else g
    gx = r * (gy - x * (r * r) * fn.mean(gy * x, -1, keepdims=True))
    if weight is None:
        return [gx]
    return [gx, fn.sum(g * x * r, tuple(range(x.ndim - 1)))]


def _group_norm(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list:
    x = inputs[0]
    weight, bias = _affine(node, inputs)
    if x.size == 0:
        return [fn.reshape(g, x.shape)] + [None] * (len(inputs) - 1)
    channels = x.shape[1]
    per_channel = (channels,) + (1,) * (x.ndim - 2)
    gy = g * fn.reshape(weight, per_channel) if weight is not None else g
    grouped = (x.shape[0], node.attr("num_groups"), -1)
    gx, xhat = _normalised(fn.reshape(x, grouped), fn.reshape(gy, grouped), node.attr("eps"))
    result = [fn.reshape(gx, x.shape)]
    if weight is not None:
        result.append(fn.sum(g * fn.reshape(xhat, x.shape), _all_but(x, 1)))
    if bias is not None:
        result.append(fn.sum(g, _all_but(x, 1)))
    return result


# ---------------------------------------------------------------- attention


def repeated_heads(x: Tensor, times: int) -> Tensor:
    """(B, Hkv, S, D) -> (B, Hkv * times, S, D), head h reading head h // times."""
    if times == 1:
        return x
    b, heads, s, d = x.shape
    wide = fn.broadcast_to(fn.reshape(x, (b, heads, 1, s, d)), (b, heads, times, s, d))
    return fn.reshape(wide, (b, heads * times, s, d))


def _group_sum(x: Tensor, heads: int) -> Tensor:
    """The reverse of `repeated_heads`: (B, H, S, D) summed over each group of H / heads."""
    b, h, s, d = x.shape
    if h == heads:
        return x
    return fn.sum(fn.reshape(x, (b, heads, h // heads, s, d)), 2)


def _lowest(x: Tensor) -> float:
    return float(ml_dtypes.finfo(x.dtype.to_numpy()).min)


def attention_probabilities(node: Node, inputs: Sequence[Tensor], q: Tensor, k: Tensor) -> Tensor:
    """softmax(scale q k^T + mask) of attention `node` with rows of no attended key all 0
    (the kernel's), for q and k with as many heads (`repeated_heads`). A causal mask
    with at least as many keys as queries (static) leaves no row dead: it is applied to
    the scores as a (L, S) mask broadcast, with no liveness factor."""
    scores = fn.matmul(q, fn.swapaxes(k, -1, -2)) * node.attr("scale")
    length, keys = scores.shape[-2:]
    if keys == 0:  # no key: the output is 0 and p is empty
        return scores
    keep = None
    if node.attr("causal"):
        # key j is visible from query i when j <= i + keys - length (lengths may be Dims)
        rows = fn.reshape(positions(q, length), (length, 1))
        cols = fn.reshape(positions(q, keys), (1, keys))
        keep = fn.less_equal(cols, rows + extent_operand(rows, canonical(keys - length)))
        gap = canonical(keys - length)
        if is_static(gap) and gap >= 0:  # query i sees key 0 at least
            return fn.softmax(fn.where(keep, scores, _lowest(scores)), -1)
    elif len(inputs) == 4 and inputs[3].dtype.kind == "bool":
        keep = inputs[3]
    elif len(inputs) == 4:
        scores = scores + inputs[3]
    if keep is not None:
        keep = fn.broadcast_to(keep, scores.shape)
        scores = fn.where(keep, scores, _lowest(scores))
        alive = fn.any(keep, -1, keepdims=True)
    else:
        alive = fn.greater(fn.max(scores, -1, keepdims=True), _lowest(scores))
        scores = fn.where(alive, scores, 0.0)
    return fn.softmax(scores, -1) * fn.astype(alive, scores.dtype)


def _sdpa(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list:
    q, k, v = inputs[:3]
    heads = k.shape[1]
    times = q.shape[1] // heads
    kk, vv = repeated_heads(k, times), repeated_heads(v, times)
    p = attention_probabilities(node, inputs, q, kk)
    scale = node.attr("scale")
    gv = _group_sum(fn.matmul(fn.swapaxes(p, -1, -2), g), heads)
    gp = fn.matmul(g, fn.swapaxes(vv, -1, -2))
    gs = p * (gp - fn.sum(gp * p, -1, keepdims=True))
    gq = fn.matmul(gs, kk) * scale
    gk = _group_sum(fn.matmul(fn.swapaxes(gs, -1, -2), q) * scale, heads)
    result = [gq, gk, gv]
    if len(inputs) == 4:
        mask = inputs[3]
        result.append(unbroadcast(gs, mask.shape) if mask.dtype.is_float else None)
    return result


# ---------------------------------------------------------------- rope


def _rope(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list:
    dims, depth = node.attr("dims"), g.shape[-1]
    signs = np.ones(depth, g.dtype.to_numpy())
    if node.attr("traditional"):
        signs[1:dims:2] = -1
    else:
        signs[dims // 2 : dims] = -1
    flip = g.graph.constant(signs)
    attrs = {k: node.attr(k) for k in ("dims", "traditional", "base", "scale", "offset")}
    if len(inputs) == 2:
        attrs["offset"] = inputs[1]
        turned = rope(g * flip, **attrs)
        return [turned * flip, None]
    turned = emit("rope", [g * flip], **attrs)
    return [turned * flip]


register_vjp("layer_norm", _layer_norm)
register_vjp("rms_norm", _rms_norm)
register_vjp("group_norm", _group_norm)
register_vjp("scaled_dot_product_attention", _sdpa)
register_vjp("rope", _rope)
