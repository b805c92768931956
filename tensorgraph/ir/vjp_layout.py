"""Vector-Jacobian rules of the layout ops (reshape, transpose, broadcast_to, narrow,
concat, pad, slice_update), the gathers (take, gather) and sort, registered on the ops
in `OPS` on import.

Each moves the cotangent back to where its elements came from: the inverse reshape or
permutation, a sum over broadcast axes, zeros around a narrowed slice, slices of a
concatenation, the inverse (negated) padding, and for the gathers a `scatter_add` of the
cotangent at the indices (repeats accumulate: an embedding row looked up twice gets both
cotangents); sort's cotangent goes back to the positions argsort gives (stable: a tie's
k-th sorted element is the k-th of the tied ones in x). A reflect or replicate pad is a
take of source positions along each axis, so its cotangent is scattered back axis by
axis. A `slice_update` at a run-time start reads its update's cotangent with a `take` at
start + arange(rows). Index and position operands receive none.
"""

from __future__ import annotations

from collections.abc import Sequence

from tensorgraph.ir import functions as fn
from tensorgraph.ir.conv import pad
from tensorgraph.ir.node import Node
from tensorgraph.ir.ops import register_vjp
from tensorgraph.ir.scatter import scatter_add
from tensorgraph.ir.tensor import Tensor, emit
from tensorgraph.ir.vjp_support import extent_operand, unbroadcast, zeros


def _reshape(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list:
    return [fn.reshape(g, inputs[0].shape)]


def _transpose(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list:
    perm = node.attr("axes")
    inverse = [0] * len(perm)
    for k, axis in enumerate(perm):
        inverse[axis] = k
    return [fn.transpose(g, inverse)]


def _broadcast_to(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list:
    (x,) = inputs
    return [unbroadcast(g, x.shape) if x.dtype.is_float else None]


def _narrow(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list:
    (x,) = inputs
    return [fn.slice_update(zeros(x), g, node.attr("axis"), node.attr("start"))]


def _concat(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list:
    axis, start, result = node.attr("axis"), 0, []
    for x in inputs:
        length = x.shape[axis]
        result.append(fn.narrow(g, axis, start, length))
        start += length
    return result


def _sources(like: Tensor, size: object, lo: int, hi: int, mode: str) -> Tensor:
    """The source position of each padded position along an axis of extent `size` (an
    int or an expression of Dims), as int32 computed from an arange (torch's reflect: the
    edge not repeated; replicate: the edge repeated)."""
    positions = emit(
        "arange", [], graph=like.graph, start=-lo, stop=size + hi, step=1, dtype="int32"
    )
    last = extent_operand(positions, size) - 1
    if mode == "replicate":
        return fn.minimum(fn.maximum(positions, 0), last)
    positions = fn.abs(positions)
    return fn.where(fn.greater(positions, last), 2 * last - positions, positions)


def _pad(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list:
    """Constant mode: the negated pads (padding crops back, and a crop pads zeros).
    Reflect and replicate: per padded axis, g scattered onto the source positions."""
    (x,) = inputs
    pads = node.attr("pads")
    if node.attr("mode") == "constant":
        return [pad(g, [(-pads[2 * k], -pads[2 * k + 1]) for k in range(g.ndim)])]
    for axis in range(x.ndim):
        lo, hi = pads[2 * axis], pads[2 * axis + 1]
        if lo == hi == 0:
            continue
        sources = _sources(x, x.shape[axis], lo, hi, node.attr("mode"))
        placed = [1] * g.ndim
        placed[axis] = sources.shape[0]
        index = fn.broadcast_to(fn.reshape(sources, placed), g.shape)
        shape = (*g.shape[:axis], x.shape[axis], *g.shape[axis + 1 :])
        g = scatter_add(zeros(g, shape), g, index, axis)
    return [g]


def _slice_update(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list:
    """The target's cotangent is g with the written rows zeroed; the update's is those
    rows of g (read by a take when the start is a run-time operand)."""
    update = inputs[1]
    axis, rows = node.attr("axis"), update.shape[node.attr("axis")]
    if len(inputs) == 3:
        start = fn.reshape(inputs[2], ())
        count = emit(
            "arange", [], graph=g.graph, start=0, stop=rows, step=1, dtype=start.dtype.name
        )
        return [
            fn.slice_update(g, zeros(update), axis, inputs[2]),
            fn.take(g, count + start, axis),
            None,
        ]
    start = node.attr("start")
    return [fn.slice_update(g, zeros(update), axis, start), fn.narrow(g, axis, start, rows)]


def _take(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list:
    """g (x.shape[:axis] + indices.shape + x.shape[axis+1:]) flattened over the indices'
    axes, scattered into zeros at the indices (negative ones counted from the end, as
    take reads them)."""
    x, indices = inputs
    axis, size = node.attr("axis"), x.shape[node.attr("axis")]
    count = indices.size
    rows = fn.reshape(g, (*x.shape[:axis], count, *x.shape[axis + 1 :]))
    flat = fn.reshape(indices, (count,))
    flat = fn.where(fn.less(flat, 0), flat + extent_operand(flat, size), flat)
    placed = [1] * x.ndim
    placed[axis] = count
    spread = fn.broadcast_to(fn.reshape(flat, placed), rows.shape)
    return [scatter_add(zeros(x), rows, spread, axis), None]


def _gather(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list:
    x, indices = inputs
    return [scatter_add(zeros(x), g, indices, node.attr("axis")), None]


def _sort(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list:
    (x,) = inputs
    axis = node.attr("axis")
    positions = emit("argsort", [x], axis=axis, descending=node.attr("descending"))
    return [scatter_add(zeros(x), g, positions, axis)]


def _scatter_add(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list:
    """Linear in target and update: target gets g, update gets g read at the indices."""
    indices = inputs[2]
    picked = fn.gather(g, indices, node.attr("axis"))
    return [g, picked, None]


register_vjp("reshape", _reshape)
register_vjp("transpose", _transpose)
register_vjp("broadcast_to", _broadcast_to)
register_vjp("narrow", _narrow)
register_vjp("concat", _concat)
register_vjp("pad", _pad)
register_vjp("slice_update", _slice_update)
register_vjp("take", _take)
register_vjp("gather", _gather)
register_vjp("scatter_add", _scatter_add)
register_vjp("sort", _sort)
