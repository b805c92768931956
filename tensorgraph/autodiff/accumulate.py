"""Summing a value's cotangent contributions (reverse.py's step 3), with the sums of
zero-padded slices written as slice updates.

A narrowed slice's cotangent is its own cotangent written into zeros of the whole
value (`slice_update(zeros, g, axis, start)`, ir/vjp_layout.py): a fused projection split
in three (a transformer's q, k, v) gives three such whole-value tensors, added. Where
the new contribution is one of those, at a static start, and what is held so far is a
chain of them over zeros along the same axis whose slices it does not overlap, the sum
is the held chain with the new slice written in: `slice_update(held, g, axis, start)`.
Equal values (the held chain is zero in the new slice and the contribution zero outside
it; x + 0 only turns a -0.0 into +0.0), one whole-value buffer that the update writes
over in place instead of one per slice and the adds between them: GPT-2's step held
three (4, 64, 192) buffers per layer at its recompute-all peak. Any other pair is added.
"""

from __future__ import annotations

from tensorgraph.ir import functions as fn
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node
from tensorgraph.ir.tensor import Tensor


def _slice(graph: Graph, node: Node) -> tuple[int, int, int] | None:
    """(axis, start, stop) of a slice_update at a static start over a static extent."""
    if node.op != "slice_update" or len(node.inputs) != 2:
        return None
    axis, start = node.attr("axis"), node.attr("start")
    rows = graph.node(node.inputs[1]).shape[axis]
    if not (isinstance(start, int) and isinstance(rows, int)):
        return None
    return axis, start, start + rows


def _written(graph: Graph, node: Node) -> tuple[int, list[tuple[int, int]]] | None:
    """(axis, the [start, stop) slices written) when `node` is a chain of static
    slice_updates along one axis over a `full` of zeros; else None."""
    axis, slices = None, []
    while node.op == "slice_update":
        found = _slice(graph, node)
        if found is None or (axis is not None and found[0] != axis):
            return None
        axis = found[0]
        slices.append(found[1:])
        node = graph.node(node.inputs[0])
    if axis is None or node.op != "full" or node.attr("value") != 0:
        return None
    return axis, slices


def accumulate(held: Tensor, part: Tensor) -> Tensor:
    """`held + part`, the sum of two cotangent contributions of one value (same shape and
    dtype), as a slice update of `held` where the module docstring's condition holds."""
    graph = held.graph
    placed = _written(graph, graph.node(part.id))
    chain = _written(graph, graph.node(held.id))
    if placed is None or chain is None or len(placed[1]) != 1 or placed[0] != chain[0]:
        return held + part
    axis, ((start, stop),) = placed
    if any(start < other_stop and other_start < stop for other_start, other_stop in chain[1]):
        return held + part
    update = Tensor(graph, graph.node(part.id).inputs[1])
    return fn.slice_update(held, update, axis, start)
