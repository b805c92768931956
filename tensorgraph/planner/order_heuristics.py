"""The order heuristics `schedule` costs (planner/schedule.py): list scheduling
(`greedy_order`) and Sethi-Ullman / Liu ordering (`subtree_order`), both from one set of
per-node facts (`_facts`: storage roots through views, readers, owned bytes, what may
reinplace) for the alias analyses that will run.

Invariants: each returns every node id exactly once, each after its inputs, boundary
nodes (inputs, params, constants) first in their program order; neither mutates the
graph. Their byte counts are estimates that steer the order; the exact cost of the
order they return is `CostModel`'s, which `schedule` compares against the program
order, so a heuristic never makes the chosen peak worse.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from attrs import frozen

from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node
from tensorgraph.ir.ops import OPS
from tensorgraph.planner.aliasing import ANALYSES, inplace_slots, view_of

# ---------------------------------------------------------------- shared facts


@frozen
class _Facts:
    """Per-node facts both heuristics use: storage roots through views, readers of
    each root (through any view), the bytes each root owns, and what may reinplace."""

    root: dict[int, int]
    readers: dict[int, list[int]]  # root id -> distinct non-view nodes reading it
    size: dict[int, int]  # root id -> bytes (0 for boundary nodes: never scheduled)
    pinned: set[int]  # roots that never die: outputs, boundary nodes
    can_inplace: dict[int, tuple[int, ...]]  # node id -> roots it may overwrite
    views: frozenset[int]  # nodes that are views (own no buffer, read nothing)


def _facts(graph: Graph, analyses: Sequence[str] = ANALYSES) -> _Facts:
    """The facts for the alias analyses that will run: views only with `view_alias`,
    in-place candidates (the order-independent rules 2-3 of `planner.aliasing`) only
    with `reinplace`; the order-dependent rule (the operand dies here) is the
    heuristics' own estimate, and `CostModel` gives the exact cost of the result."""
    views = "view_alias" in analyses
    root: dict[int, int] = {}
    readers: dict[int, list[int]] = {}
    size: dict[int, int] = {}
    is_view: set[int] = set()
    for node in graph.nodes:
        if views and view_of(graph, node) is not None:
            is_view.add(node.id)
            root[node.id] = root[node.inputs[0]]
            continue
        root[node.id] = node.id
        readers[node.id] = []
        size[node.id] = 0 if OPS[node.op].boundary else node.nbytes
        for r in dict.fromkeys(root[i] for i in node.inputs):
            readers[r].append(node.id)
    pinned = {root[o] for o in graph.outputs}
    pinned |= {n.id for n in graph.nodes if OPS[n.op].boundary}
    can_inplace: dict[int, tuple[int, ...]] = {}
    for node in graph.nodes if "reinplace" in analyses else ():
        candidates = []
        for k in inplace_slots(node):
            operand = graph.node(node.inputs[k])
            r = root[operand.id]
            full = size[r] == operand.nbytes == node.nbytes > 0
            if full and operand.dtype == node.dtype and r not in pinned:
                candidates.append(r)
        if candidates:
            can_inplace[node.id] = tuple(candidates)
    return _Facts(root, readers, size, pinned, can_inplace, frozenset(is_view))


def _split_boundary(graph: Graph) -> tuple[list[int], list[Node]]:
    boundary = [n.id for n in graph.nodes if OPS[n.op].boundary]
    return boundary, [n for n in graph.nodes if not OPS[n.op].boundary]


# ---------------------------------------------------------------- greedy


def greedy_order(graph: Graph, analyses: Sequence[str] = ANALYSES) -> tuple[int, ...]:
    """List scheduling by least added live bytes (see module docstring). O(n log n) plus
    one re-scoring of a root's last pending reader when that root's count drops to 1."""
    facts = _facts(graph, analyses)
    boundary, compute = _split_boundary(graph)
    position = {n.id: p for p, n in enumerate(graph.nodes)}
    done = set(boundary)
    pending = {r: len(rs) for r, rs in facts.readers.items()}
    waiting = {n.id: len({i for i in n.inputs if i not in done}) for n in compute}
    users = graph.users()
    version = dict.fromkeys(waiting, 0)

    def score(node: Node) -> tuple[int, int, int]:
        reads = dict.fromkeys(facts.root[i] for i in node.inputs)
        dying = [r for r in reads if pending[r] == 1 and r not in facts.pinned]
        freed = sum(facts.size[r] for r in dying)
        alloc = facts.size.get(node.id, 0)
        if any(r in dying for r in facts.can_inplace.get(node.id, ())):
            alloc = 0
            freed -= max(facts.size[r] for r in dying if r in facts.can_inplace[node.id])
        return (alloc - freed, -freed, position[node.id])

    heap = [(score(n), n.id, 0) for n in compute if waiting[n.id] == 0]
    heapq.heapify(heap)
    order = list(boundary)
    while heap:
        _, node_id, stamp = heapq.heappop(heap)
        if stamp != version[node_id] or node_id in done:
            continue
        node = graph.node(node_id)
        done.add(node_id)
        order.append(node_id)
        reads = () if node_id in facts.views else node.inputs  # a view reads nothing
        for r in dict.fromkeys(facts.root[i] for i in reads):
            pending[r] -= 1
            if pending[r] == 1:  # its last reader now frees it: re-score that reader
                (last,) = [u for u in facts.readers[r] if u not in done]
                if waiting.get(last) == 0:
                    version[last] += 1
                    heapq.heappush(heap, (score(graph.node(last)), last, version[last]))
        for user in users[node_id]:
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(heap, (score(graph.node(user)), user, version[user]))
    return tuple(order)


# ---------------------------------------------------------------- subtree (Liu)


def subtree_order(graph: Graph, analyses: Sequence[str] = ANALYSES) -> tuple[int, ...]:
    """Sethi-Ullman / Liu order: post-order from the outputs, children by decreasing
    (subtree peak - result bytes). Iterative, so deep graphs do not hit recursion limits."""
    facts = _facts(graph, analyses)
    boundary, compute = _split_boundary(graph)
    result_bytes = {n.id: facts.size.get(n.id, 0) for n in graph.nodes}
    peak: dict[int, int] = {}
    for node in graph.nodes:  # bottom-up estimate, a value shared by readers counted once
        children = [i for i in dict.fromkeys(node.inputs) if not OPS[graph.node(i).op].boundary]
        children.sort(key=lambda c: peak[c] - result_bytes[c], reverse=True)
        held, worst = 0, 0
        for child in children:
            worst = max(worst, held + peak[child])
            held += result_bytes[child]
        peak[node.id] = max(worst, held + result_bytes[node.id])
    done = set(boundary)
    order = list(boundary)
    for output in dict.fromkeys(graph.outputs):
        stack = [(output, False)]
        while stack:
            node_id, expanded = stack.pop()
            if node_id in done:
                continue
            if expanded:
                done.add(node_id)
                order.append(node_id)
                continue
            stack.append((node_id, True))
            children = [i for i in dict.fromkeys(graph.node(node_id).inputs) if i not in done]
            children.sort(key=lambda c: peak[c] - result_bytes[c], reverse=True)
            stack.extend((c, False) for c in reversed(children))  # first child on top
    # Nodes no output needs (DCE off) keep their program order, after the rest.
    order += [n.id for n in compute if n.id not in done]
    return tuple(order)
