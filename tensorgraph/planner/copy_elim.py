"""Copy elimination: concatenations assembled in place, by offset.

A `concat` along an axis whose preceding axes all have extent 1 lays every operand out
as one contiguous byte range of its result (`concat_slots` gives the ranges). Copy
elimination makes the operands' producers write straight into those ranges, so the
concat copies nothing and the operands and their concatenation are never in the arena
twice. The decision is an `Alias(concat, offset, "concat")` on the operand's storage
root (the first node of its bytes, before any placement): the root's whole class
(itself, its views, its in-place successors) then lives inside the concat's bytes, and
the concat's buffer is born at the first such producer (`liveness.analyze`).

`place_concats(graph, order, pre)` decides, from `pre` (the liveness with views only),
concats last to first, so a later concat claims a value before an earlier one that
reads it too:

- an operand is placed when it covers its storage root exactly (offset 0, same byte
  size: the value itself or a full-size view such as a reshape), the root is not an
  input, param or constant (the caller's bytes or the constant segment), the root is
  not placed already (by a later concat, or twice in this one), and it has bytes;
- a concat all of whose operands are already placed, in order and back to back, in one
  later concat becomes a slice of that concat itself (a concat of a prefix of features,
  as DenseNet builds, is free);
- a placement must pay: the concat's buffer is born at the placed producer, so it is
  refused when it would raise the peak of live bytes (program order, the views-only
  lifetimes with the placements so far), or make a concat that holds no graph output
  live to the end for an operand that is one;
- everything else keeps its copy; the decision is per operand.

Safety does not rest on these rules alone: a concat writes, at its step, exactly the
slots whose operand is not already at its place (`copied_slots`, derived from planned
offsets), and `check.verify_plan` proves that no write lands on bytes still read. The
reinplace analysis runs after this one on the merged lifetimes; when an in-place writer
is itself placed, its placement moves to the root of the class it joins.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node
from tensorgraph.ir.ops import OPS
from tensorgraph.ir.shapes import numel
from tensorgraph.planner.buffers import align_up

Locate = Callable[[int], tuple[str, int]]  # node id -> (segment, byte offset)


def concat_slots(graph: Graph, node: Node) -> tuple[int, ...] | None:
    """The byte offset of each operand slot inside `node`'s value when `node` is a
    concat whose operands are contiguous byte ranges of it (every axis before the concat
    axis has extent 1), else None."""
    if node.op != "concat" or numel(node.shape[: node.attr_dict["axis"]]) != 1:
        return None
    slots, at = [], 0
    for i in node.inputs:
        slots.append(at)
        at += graph.node(i).nbytes
    return tuple(slots)


def written_ranges(graph: Graph, node: Node, locate: Locate) -> list[tuple[str, int, int]]:
    """The byte ranges `(segment, low, high)` that `node` writes at its step, given where
    every value lies: its own bytes, except that a contiguous concat writes only the
    slots whose operand is not already at its place (`copied_slots`)."""
    segment, offset = locate(node.id)
    if not node.nbytes:
        return []
    slots = concat_slots(graph, node)
    if slots is None:
        return [(segment, offset, offset + node.nbytes)]
    copied = copied_slots(graph, node, locate)
    return [
        (segment, offset + slots[k], offset + slots[k] + graph.node(i).nbytes)
        for k, i in enumerate(node.inputs)
        if k in copied
    ]


def copied_slots(graph: Graph, node: Node, locate: Locate) -> frozenset[int]:
    """The operand slots a contiguous concat must copy: those with bytes whose operand
    does not already lie exactly at its slot of the concat's bytes."""
    slots = concat_slots(graph, node)
    if slots is None:
        return frozenset(range(len(node.inputs)))
    segment, offset = locate(node.id)
    return frozenset(
        k
        for k, i in enumerate(node.inputs)
        if graph.node(i).nbytes and locate(i) != (segment, offset + slots[k])
    )


def place_concats(
    graph: Graph, order: Sequence[int], pre: object, alignment: int = 1
) -> dict[int, object]:
    """Placement aliases (storage root -> `Alias(concat, offset, "concat")`) for `graph`
    run in `order`, from `pre`, its liveness with views only (module docstring rules).

    Concats are visited last to first. A concat first tries to take all its eligible
    operands at once, together with the earlier concats that then lie inside it (the
    DenseNet prefixes): that group often pays where no single operand would. Failing
    that, each operand is tried alone."""
    from tensorgraph.planner.aliasing import Alias

    curve = _Curve(pre, alignment)
    roots = {
        c: [_covered_root(graph, pre, i) for i in graph.node(c).inputs]
        for c in order
        if concat_slots(graph, graph.node(c)) is not None and graph.node(c).nbytes
    }
    readers: dict[int, list[int]] = {}  # a root -> the concats reading it, last first
    for c in reversed(order):
        for root in dict.fromkeys(roots.get(c, ())):
            if root is not None:
                readers.setdefault(root, []).append(c)
    position = {node_id: step for step, node_id in enumerate(order)}
    placed: dict[int, Alias] = {}
    for concat_id in reversed(order):
        if concat_id not in roots:
            continue
        concat = graph.node(concat_id)
        slots = concat_slots(graph, concat)
        inside = _already_inside(graph, concat, slots, roots[concat_id], placed)
        if inside is not None and concat_id not in placed:
            if curve.merge([(concat_id, inside.source)]):
                placed[concat_id] = inside
            continue
        group: dict[int, Alias] = {}
        for k, root in enumerate(roots[concat_id]):
            if root is not None and root not in placed and root not in group:
                group[root] = Alias(concat_id, slots[k], "concat")
        prefixes: dict[int, Alias] = {}
        tentative = {**placed, **group}
        for root in group:
            for earlier in readers.get(root, ()):
                if position[earlier] >= position[concat_id]:
                    continue  # a placement points forward: only earlier concats
                if earlier in tentative or earlier in prefixes:
                    continue
                e = graph.node(earlier)
                alias = _already_inside(graph, e, concat_slots(graph, e), roots[earlier], tentative)
                if alias is not None:
                    prefixes[earlier] = alias
        pairs = [(r, a.source) for r, a in (*group.items(), *prefixes.items())]
        if group and curve.merge(pairs):
            placed.update(group)
            placed.update(prefixes)
            continue
        for root, alias in group.items():
            if curve.merge([(root, concat_id)]):
                placed[root] = alias
    return placed


class _Curve:
    """Live bytes per step (sizes rounded up to `alignment`) while placements merge
    buffers. A merge that would raise the peak, or make a buffer that holds no output
    live to the end, is refused. Buffers are the storage roots of `pre`; `owner` maps a
    merged root to the root whose buffer now holds it."""

    def __init__(self, pre: object, alignment: int) -> None:
        self.span = {b.id: (b.start, b.end, align_up(b.size, alignment)) for b in pre.buffers}
        self.curve = np.zeros(len(pre.steps) + 1, np.int64)
        for start, end, size in self.span.values():
            self.curve[start:end] += size
        self.owner: dict[int, int] = {}
        end = len(pre.steps)
        self.outputs = {r for r, last in pre.last_read.items() if last >= end}

    def merge(self, pairs: Sequence[tuple[int, int]]) -> bool:
        """Put each `root`'s bytes inside `into`'s buffer, all or none: True, and
        committed, when every merge is possible and the peak does not rise."""
        span, owner, outputs = dict(self.span), dict(self.owner), set(self.outputs)
        curve = self.curve.copy()

        def final(root: int) -> int:
            while root in owner:
                root = owner[root]
            return root

        for root, into in pairs:
            into = final(into)
            if root in owner or root == into or root not in span or into not in span:
                return False
            if root in outputs and into not in outputs:
                return False
            (r_start, r_end, r_size), (i_start, i_end, i_size) = span[root], span[into]
            start, end = min(r_start, i_start), max(r_end, i_end)
            curve[r_start:r_end] -= r_size
            curve[i_start:i_end] -= i_size
            curve[start:end] += i_size
            span[into] = (start, end, i_size)
            del span[root]
            owner[root] = into
            if root in outputs:
                outputs.add(into)
        if curve.max(initial=0) > self.curve.max(initial=0):
            return False
        self.span, self.owner, self.outputs, self.curve = span, owner, outputs, curve
        return True


def _covered_root(graph: Graph, pre: object, node_id: int) -> int | None:
    """The storage root of `node_id` when the node covers it exactly and it could be
    placed (not a boundary value, some bytes), else None."""
    node = graph.node(node_id)
    where = pre.storage[node_id]
    root = graph.node(where.root)
    if not node.nbytes or where.offset != 0 or root.nbytes != node.nbytes:
        return None
    return None if OPS[root.op].boundary else root.id


def _already_inside(
    graph: Graph, concat: Node, slots: Sequence[int], roots: Sequence[int | None], placed: dict
) -> object | None:
    """`Alias(target, base, "concat")` when every operand with bytes is already placed,
    in order and back to back, in one concat `target` (so `concat` is a slice of it)."""
    from tensorgraph.planner.aliasing import Alias

    target = base = None
    for k, i in enumerate(concat.inputs):
        if not graph.node(i).nbytes:
            continue
        alias = placed.get(roots[k]) if roots[k] is not None else None
        if alias is None:
            return None
        if target is None:
            target, base = alias.source, alias.offset - slots[k]
        elif alias.source != target or alias.offset != base + slots[k]:
            return None
    return None if target is None else Alias(target, base, "concat")
