"""Vector-Jacobian rules of the ops built from products: `prod`, `cumprod`,
`index_update` and `gather_mm`, registered on the ops in `OPS` on import.

- prod: each element's cotangent is g times the product of the others, computed as the
  product of an exclusive running product from the left and one from the right over the
  reduced elements (no division, so zeros are exact: JAX's approach);
- index_update (last write wins): the target gets g with the written rows zeroed, an
  update row g's row at its index when it is the last write there, else nothing;
- cumprod: out_i = prod_{k<=i} x_k, so x_j's cotangent is
  (prod_{k<j} x_k) * sum_{i>=j} g_i prod_{j<k<=i} x_k: both factors are read off (n, n)
  tables along the scanned axis (a masked product and a masked running product), with no
  division, so zeros are exact (torch divides when x has no zero and falls back to such
  an O(n^2) form when it has one; we always take the exact form: the scanned axis is
  short in the models that differentiate a cumprod, and one form keeps the gradient
  graph independent of the values). The masks come from `arange`, so a symbolic
  scanned axis works;
- gather_mm: a's cotangent is gather_mm(g, b^T, indices); b's is, per expert, the sum of
  a_i^T g_i over the positions i that chose it (the per-position products scattered
  onto the experts with `scatter_add`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from tensorgraph.ir import functions as fn
from tensorgraph.ir.dims import canonical, is_static
from tensorgraph.ir.experts import gather_mm
from tensorgraph.ir.node import Node
from tensorgraph.ir.ops import register_vjp
from tensorgraph.ir.scatter import scatter_add
from tensorgraph.ir.tensor import Tensor, emit
from tensorgraph.ir.updates import index_update
from tensorgraph.ir.vjp_support import cast_to, positions, zeros


def _reverse(x: Tensor) -> Tensor:
    """x reversed along its last axis (a take by a constant descending index)."""
    last = x.shape[-1] - 1
    order = emit("arange", [], graph=x.graph, start=last, stop=-1, step=-1, dtype="int32")
    return fn.take(x, order, x.ndim - 1)


def _exclusive(x: Tensor) -> Tensor:
    """Running product along the last axis of the elements before each one (1 first)."""
    ones = fn.astype(zeros(x, (*x.shape[:-1], 1)) + 1.0, x.dtype)
    shifted = fn.concatenate([ones, fn.narrow(x, -1, 0, x.shape[-1] - 1)], -1)
    return fn.cumprod(shifted, x.ndim - 1)


def _prod(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list:
    (x,) = inputs
    axes = node.attr("axes")
    if not x.dtype.is_float:
        return [None]
    count = canonical(math.prod(x.shape[a] for a in axes))
    if any(is_static(d) and d == 0 for d in x.shape):
        return [zeros(x)]
    rest = [a for a in range(x.ndim) if a not in axes]
    perm = (*rest, *axes)
    moved = fn.transpose(x, perm) if perm != tuple(range(x.ndim)) else x
    flat = fn.reshape(moved, (*[x.shape[a] for a in rest], count))
    others = _exclusive(flat) * _reverse(_exclusive(_reverse(flat)))
    spread = fn.reshape(g, (*[x.shape[a] for a in rest], 1)) * others
    spread = fn.reshape(spread, moved.shape)
    inverse = [0] * x.ndim
    for k, a in enumerate(perm):
        inverse[a] = k
    back = fn.transpose(spread, inverse) if perm != tuple(range(x.ndim)) else spread
    return [back]


def _cumprod(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list:
    """x is converted to the node's dtype first (as the kernel does), so the tables are
    in that dtype and the cotangent is cast back to x's."""
    (x,) = inputs
    if not (x.dtype.is_float and out.dtype.is_float):
        return [None]
    axis = node.attr("axis") % x.ndim
    last = x.ndim - 1
    moved = (
        fn.swapaxes(cast_to(x, out.dtype), axis, last) if axis != last else cast_to(x, out.dtype)
    )
    cotangent = fn.swapaxes(g, axis, last) if axis != last else g
    n = moved.shape[-1]
    count = positions(x, n)
    i, j = fn.reshape(count, (1, n)), fn.reshape(count, (n, 1))  # table [j, i]
    row = fn.expand_dims(moved, moved.ndim - 1)  # (..., 1, n): x_i along the table's rows
    before = fn.prod(fn.where(fn.less(i, j), row, 1.0), moved.ndim)  # prod_{k<j} x_k
    running = fn.cumprod(fn.where(fn.greater(i, j), row, 1.0), moved.ndim)  # prod_{j<k<=i}
    reach = fn.where(fn.greater_equal(i, j), running, 0.0)
    after = fn.sum(reach * fn.expand_dims(cotangent, moved.ndim - 1), moved.ndim)
    grad = before * after
    return [cast_to(fn.swapaxes(grad, axis, last) if axis != last else grad, x.dtype)]


def _index_update(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list:
    update, index = inputs[1:]
    axis, rows = node.attr("axis"), index.shape[0]
    later = index.graph.constant(np.triu(np.ones((rows, rows), bool), 1))
    same = fn.equal(fn.reshape(index, (rows, 1)), fn.reshape(index, (1, rows)))
    overwritten = fn.any(fn.logical_and(same, later), 1)
    placed = [1] * update.ndim
    placed[axis] = rows
    keep = fn.reshape(fn.astype(fn.logical_not(overwritten), update.dtype), placed)
    return [index_update(g, zeros(update), index, axis), fn.take(g, index, axis) * keep, None]


def _gather_mm(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list:
    a, b, indices = inputs
    ga = gather_mm(g, fn.transpose(b, (0, 2, 1)), indices)
    products = fn.matmul(fn.swapaxes(a, -1, -2), g)  # (..., K, N) per position
    count = indices.size
    _, k, n = b.shape
    flat = fn.reshape(products, (count, k, n))
    chosen = fn.broadcast_to(fn.reshape(indices, (count, 1, 1)), (count, k, n))
    return [ga, scatter_add(zeros(b), flat, chosen, 0), None]


register_vjp("prod", _prod)
register_vjp("cumprod", _cumprod)
register_vjp("index_update", _index_update)
register_vjp("gather_mm", _gather_mm)
