"""Vector-Jacobian rules of matmul, the reductions, softmax, log_softmax and cumsum,
registered on the ops in `OPS` on import.

- matmul (NumPy's: 1-D operands promoted, batch dims broadcast): ga = g @ b^T and
  gb = a^T @ g, summed back over the batch dims each operand was broadcast along;
  matmul_transposed (a @ b^T): ga = g @ b, gb = g^T @ a, likewise, and
  matmul_transposed_a (a^T @ b): ga = b @ g^T, gb = a @ g; a b shared by
  every batch (a weight) gets one product over the batch folded into the rows
  (`_folded`), not a batched product summed;
- sum / mean: the cotangent broadcast back over the reduced axes (divided by the count,
  a run-time value when the axes hold a `tg.Dim`);
- max / min: MLX's convention, the cotangent split evenly among the elements equal to the
  result (a tie of k elements gives each 1/k);
- softmax: out * (g - sum(g * out)); log_softmax: g - exp(out) * sum(g), over the axis;
- cumsum: the reversed running sum of g, written sum(g) - cumsum(g) + g (no reversal op).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tensorgraph.ir import functions as fn
from tensorgraph.ir.dims import canonical, is_static
from tensorgraph.ir.node import Node
from tensorgraph.ir.ops import register_vjp
from tensorgraph.ir.tensor import Tensor
from tensorgraph.ir.vjp_support import cast_to, extent_operand, kept, unbroadcast


def _swap(x: Tensor) -> Tensor:
    return fn.swapaxes(x, -1, -2)


def _matmul(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list:
    """Both operands as (..., M, K) @ (..., K, N): a 1-D `a` is a (1, K) row and a 1-D `b`
    a (K, 1) column, so g gets the removed axis back before the two products."""
    a, b = (cast_to(x, out.dtype) for x in inputs)
    if a.ndim == 1:
        a = fn.reshape(a, (1, a.shape[0]))
        g = fn.expand_dims(g, g.ndim - (0 if inputs[1].ndim == 1 else 1))
    if b.ndim == 1:
        b = fn.reshape(b, (b.shape[0], 1))
        g = fn.expand_dims(g, g.ndim)
    ga = unbroadcast(fn.matmul(g, _swap(b)), a.shape)
    gb = _folded(a, g, b.shape)
    if gb is None:
        gb = unbroadcast(fn.matmul(_swap(a), g), b.shape)
    return [
        cast_to(c if c.shape == x.shape else fn.reshape(c, x.shape), x.dtype)
        if x.dtype.is_float
        else None
        for c, x in zip((ga, gb), inputs, strict=True)
    ]


def _folded(left: Tensor, right: Tensor, shape: tuple) -> Tensor | None:
    """left^T @ right summed over their (equal) batch axes, for the gradient of an operand
    of `shape` (..., P, Q) broadcast over every batch axis of the product (a weight: 2-D,
    or batch extents all 1); None for any other operand (the caller's batched product and
    sum). left is (..., M, P), right (..., M, Q): the batch axes are folded into the
    contraction, one (P, B*M) @ (B*M, Q) product, as MLX's own matmul does for a 2-D right
    operand, instead of B products of (P, Q) summed over B (which writes B times the
    gradient's bytes, then reads them again to reduce)."""
    if left.ndim <= 2 or any(d != 1 for d in shape[:-2]):
        return None
    rows = canonical(math.prod(left.shape[:-1]))
    flat_left = fn.reshape(left, (rows, left.shape[-1]))
    product = fn.matmul(_swap(flat_left), fn.reshape(right, (rows, right.shape[-1])))
    return product if product.shape == tuple(shape) else fn.reshape(product, shape)


def _spread(node: Node, x: Tensor, g: Tensor) -> Tensor:
    """The cotangent of a reduction brought back to x's shape (broadcast over the axes)."""
    shape = kept(x.shape, node.attr("axes"))
    return fn.broadcast_to(fn.reshape(g, shape), x.shape)


def _sum(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list:
    (x,) = inputs
    return [_spread(node, x, g) if x.dtype.is_float else None]


def _mean(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list:
    (x,) = inputs
    if not x.dtype.is_float:
        return [None]
    count = canonical(math.prod(x.shape[axis] for axis in node.attr("axes")))
    if is_static(count) and count == 0:
        return [_spread(node, x, g)]
    return [_spread(node, x, g) / extent_operand(g, count)]


def _extremum(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list:
    (x,) = inputs
    if not x.dtype.is_float:
        return [None]
    axes = node.attr("axes")
    hits = fn.astype(fn.equal(x, fn.reshape(out, kept(x.shape, axes))), x.dtype)
    ties = fn.sum(hits, axes, keepdims=True)
    return [hits * _spread(node, x, g) / ties]


def _softmax(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list:
    axis = node.attr("axis")
    return [out * (g - fn.sum(g * out, axis, keepdims=True))]


def _log_softmax(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list:
    axis = node.attr("axis")
    return [g - fn.exp(out) * fn.sum(g, axis, keepdims=True)]


def _cumsum(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list:
    """x is converted to the node's dtype first: a float x gets the cotangent cast back."""
    (x,) = inputs
    if not (x.dtype.is_float and out.dtype.is_float):
        return [None]
    axis = node.attr("axis")
    reversed_sum = fn.sum(g, axis, keepdims=True) - fn.cumsum(g, axis) + g
    return [cast_to(reversed_sum, x.dtype)]


def _matmul_transposed(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list:
    """out = a @ b^T (both of rank >= 2): ga = g @ b, gb = g^T @ a, summed back over the
    batch dims each operand was broadcast along."""
    a, b = (cast_to(x, out.dtype) for x in inputs)
    ga = unbroadcast(fn.matmul(g, b), a.shape)
    gb = _folded(g, a, b.shape)
    if gb is None:
        gb = unbroadcast(fn.matmul(_swap(g), a), b.shape)
    return [
        cast_to(c, x.dtype) if x.dtype.is_float else None
        for c, x in zip((ga, gb), inputs, strict=True)
    ]


def _matmul_transposed_a(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list:
    """out = a^T @ b (both of rank >= 2): ga = b @ g^T, gb = a @ g, summed back over the
    batch dims each operand was broadcast along (a b shared by every batch folded)."""
    a, b = (cast_to(x, out.dtype) for x in inputs)
    ga = unbroadcast(fn.matmul(b, _swap(g)), a.shape)
    gb = _folded(_swap(a), g, b.shape)
    if gb is None:
        gb = unbroadcast(fn.matmul(a, g), b.shape)
    return [
        cast_to(c, x.dtype) if x.dtype.is_float else None
        for c, x in zip((ga, gb), inputs, strict=True)
    ]


register_vjp("matmul", _matmul)
register_vjp("matmul_transposed", _matmul_transposed)
register_vjp("matmul_transposed_a", _matmul_transposed_a)
register_vjp("sum", _sum)
register_vjp("mean", _mean)
register_vjp("max", _extremum)
register_vjp("min", _extremum)
register_vjp("softmax", _softmax)
register_vjp("log_softmax", _log_softmax)
register_vjp("cumsum", _cumsum)
