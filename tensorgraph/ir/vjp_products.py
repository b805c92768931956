"""Vector-Jacobian rules of the ops built from products: `prod`, `index_update` and
`gather_mm`, registered on the ops in `OPS` on import.

- prod: each element's cotangent is g times the product of the others, computed as the
  product of an exclusive running product from the left and one from the right over the
  reduced elements (no division, so zeros are exact: JAX's approach);
- index_update (last write wins): the target gets g with the written rows zeroed, an
  update row g's row at its index when it is the last write there, else nothing;
- gather_mm: a's cotangent is gather_mm(g, b^T, indices); b's is, per expert, the sum of
  a_i^T g_i over the positions i that chose it (the per-position products scattered
  onto the experts with `scatter_add`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tensorgraph.ir import functions as fn
from tensorgraph.ir.experts import gather_mm
from tensorgraph.ir.node import Node
from tensorgraph.ir.ops import register_vjp
from tensorgraph.ir.scatter import scatter_add
from tensorgraph.ir.tensor import Tensor
from tensorgraph.ir.updates import index_update
from tensorgraph.ir.vjp_support import zeros


def _reverse(x: Tensor) -> Tensor:
    """x reversed along its last axis (a take by a constant descending index)."""
    order = x.graph.constant(np.arange(x.shape[-1] - 1, -1, -1, dtype=np.int32))
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
    count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    if x.size == 0 or count == 0:
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
register_vjp("index_update", _index_update)
register_vjp("gather_mm", _gather_mm)
