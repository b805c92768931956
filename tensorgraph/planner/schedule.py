"""Memory-aware scheduling: the topological order whose peak live bytes is lowest.

The order decides the fixed-order lower bound every offset algorithm is measured
against, so a better order can beat any planner on the program order. Strategies:

- `program`: the builder's order.
- `greedy`: list scheduling. Among the ready nodes, run the one whose step adds the
  fewest live bytes (its new buffer minus the buffers it is the last reader of; an
  elementwise op that can write into a dying operand adds nothing), ties broken by
  freeing the most, then by program position.
- `subtree`: Sethi-Ullman / Liu ordering. Walking back from the outputs, each node's
  not-yet-scheduled inputs are computed one after the other, the input whose subtree
  needs the most memory beyond its result first, which is optimal for trees (Liu 1987)
  and is applied to the tree-shaped regions of a DAG (a value with several readers is
  computed once, for its first reader).
- `best`: evaluates the others with the exact cost below and runs a bounded local
  search (sink a producer of a buffer live at the peak to just before its first reader,
  or hoist a last reader of such a buffer to just after its latest input), keeping the
  lowest; never worse than `program`, since `program` is a candidate.

The exact cost of an order is the lower bound of the plan the compiler would make for
it: the graph is reordered, reinplace decisions are recomputed for that order (when the
pipeline reinplaces), liveness is analysed and `lower_bound` taken at the plan's
alignment. Boundary nodes (inputs, params, constants) keep their program position
relative to each other and go first: inputs live from step 0 and params/constants sit
in the constant segment, so their position never changes a peak.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Sequence

from attrs import frozen

from tensorgraph.errors import GraphError
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node, evolve
from tensorgraph.ir.ops import INPLACE_ATTR, OPS, VIEW_ATTR
from tensorgraph.planner.buffers import lower_bound
from tensorgraph.planner.liveness import analyze

STRATEGIES = ("program", "greedy", "subtree", "best")
DEFAULT_BUDGET = 1.5  # seconds for `best`; a 10k-node graph must schedule in under 2 s


@frozen
class ScheduleResult:
    """The chosen order and the peaks (lower bounds, bytes) that justified it."""

    order: tuple[int, ...]
    strategy: str
    peak: int
    program_peak: int
    peaks: dict[str, int]


def reorder(graph: Graph, order: Sequence[int]) -> Graph:
    """`graph` with its nodes in `order` (GraphError unless a permutation of its ids)."""
    if sorted(order) != sorted(n.id for n in graph.nodes):
        raise GraphError(f"graph {graph.name!r}: an order must list every node id exactly once")
    return Graph.from_nodes(
        graph.name, [graph.node(i) for i in order], graph.outputs, graph.param_values
    )


def is_topological(graph: Graph, order: Sequence[int]) -> bool:
    """True when every node comes after all of its inputs in `order`."""
    position = {node_id: step for step, node_id in enumerate(order)}
    if len(position) != len(graph) or any(i not in position for i in (n.id for n in graph.nodes)):
        return False
    return all(position[i] < position[n.id] for n in graph.nodes for i in n.inputs)


def _clear_inplace(graph: Graph) -> Graph:
    """The graph with every `inplace` mark removed (decisions are per order)."""
    if not any(n.attr(INPLACE_ATTR, -1) != -1 for n in graph.nodes):
        return graph
    nodes = [
        evolve(n, attrs={**n.attr_dict, INPLACE_ATTR: -1}) if n.attr(INPLACE_ATTR, -1) != -1 else n
        for n in graph.nodes
    ]
    return Graph.from_nodes(graph.name, nodes, graph.outputs, graph.param_values)


def peak_of(graph: Graph, alignment: int = 64, inplace: bool = True) -> int:
    """The lower bound of the plan for `graph` in its own node order (see module doc)."""
    if inplace:
        from tensorgraph.passes.reinplace import reinplace

        graph = reinplace(_clear_inplace(graph)).graph
    return lower_bound(analyze(graph).buffers, alignment)


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


def _facts(graph: Graph) -> _Facts:
    root: dict[int, int] = {}
    readers: dict[int, list[int]] = {}
    size: dict[int, int] = {}
    for node in graph.nodes:
        is_view = bool(node.attr(VIEW_ATTR, False))
        root[node.id] = root[node.inputs[0]] if is_view else node.id
        if not is_view:
            readers[node.id] = []
            size[node.id] = 0 if OPS[node.op].boundary else node.nbytes
            for r in dict.fromkeys(root[i] for i in node.inputs):
                readers[r].append(node.id)
    pinned = {root[o] for o in graph.outputs}
    pinned |= {n.id for n in graph.nodes if OPS[n.op].boundary}
    can_inplace: dict[int, tuple[int, ...]] = {}
    for node in graph.nodes:
        opdef = OPS[node.op]
        if not (opdef.elementwise or node.op == "slice_update") or node.attr(VIEW_ATTR, False):
            continue
        slots = range(len(node.inputs)) if opdef.elementwise else (0,)
        candidates = []
        for k in slots:
            operand = graph.node(node.inputs[k])
            r = root[operand.id]
            full = size[r] == operand.nbytes == node.nbytes
            if full and operand.dtype == node.dtype and r not in pinned:
                candidates.append(r)
        if candidates:
            can_inplace[node.id] = tuple(candidates)
    return _Facts(root, readers, size, pinned, can_inplace)


def _split_boundary(graph: Graph) -> tuple[list[int], list[Node]]:
    boundary = [n.id for n in graph.nodes if OPS[n.op].boundary]
    return boundary, [n for n in graph.nodes if not OPS[n.op].boundary]


# ---------------------------------------------------------------- greedy


def greedy_order(graph: Graph) -> tuple[int, ...]:
    """List scheduling by least added live bytes (see module docstring). O(n log n) plus
    one re-scoring of a root's last pending reader when that root's count drops to 1."""
    facts = _facts(graph)
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
        reads = () if node.attr(VIEW_ATTR, False) else node.inputs  # a view reads nothing
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


def subtree_order(graph: Graph) -> tuple[int, ...]:
    """Sethi-Ullman / Liu order: post-order from the outputs, children by decreasing
    (subtree peak - result bytes). Iterative, so deep graphs do not hit recursion limits."""
    facts = _facts(graph)
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


# ---------------------------------------------------------------- local search


def _moves(graph: Graph, order: tuple[int, ...], alignment: int) -> list[tuple[int, ...]]:
    """Candidate neighbours of `order`: for each buffer live at the peak step, sink its
    producer to just before its first reader, and hoist its last reader to just after
    that reader's latest input. Largest buffers first."""
    live = analyze(reorder(graph, order))
    peak_step = live.peak_step()
    position = {node_id: step for step, node_id in enumerate(order)}
    users = graph.users()
    moves = []
    for buffer in sorted(live.live_at(peak_step), key=lambda b: -b.size):
        producer = graph.node(buffer.id)
        if OPS[producer.op].boundary:
            continue
        readers = [u for u in users[producer.id] if position[u] > position[producer.id]]
        if readers:
            target = min(position[u] for u in readers) - 1
            if target > position[producer.id]:
                moves.append(_move(order, position[producer.id], target))
        last = max(readers, key=lambda u: position[u], default=None)
        if last is not None:
            earliest = max(position[i] for i in graph.node(last).inputs) + 1
            if earliest < position[last]:
                moves.append(_move(order, position[last], earliest))
    return moves


def _move(order: tuple[int, ...], source: int, target: int) -> tuple[int, ...]:
    items = list(order)
    node = items.pop(source)
    items.insert(target, node)
    return tuple(items)


def schedule(
    graph: Graph,
    strategy: str = "best",
    *,
    alignment: int = 64,
    inplace: bool = True,
    time_budget: float | None = None,
) -> ScheduleResult:
    """Choose a topological order of `graph` by `strategy` (one of STRATEGIES).

    The result's `peak` is the lower bound of the plan for that order (with reinplace
    decisions recomputed when `inplace`); `best` never returns a higher peak than
    `program` and stops its local search after `time_budget` seconds."""
    if strategy not in STRATEGIES:
        raise GraphError(f"unknown schedule {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    program = tuple(n.id for n in graph.nodes)

    def cost(order: tuple[int, ...]) -> int:
        return peak_of(reorder(graph, order), alignment, inplace)

    program_peak = cost(program)
    builders: dict[str, Callable[[Graph], tuple[int, ...]]] = {
        "greedy": greedy_order,
        "subtree": subtree_order,
    }
    if strategy == "program":
        return ScheduleResult(
            program, "program", program_peak, program_peak, {"program": program_peak}
        )
    if strategy in builders:
        order = builders[strategy](graph)
        peak = cost(order)
        return ScheduleResult(
            order, strategy, peak, program_peak, {"program": program_peak, strategy: peak}
        )
    deadline = time.perf_counter() + (DEFAULT_BUDGET if time_budget is None else time_budget)
    peaks = {"program": program_peak}
    best_order, best_name, best_peak = program, "program", program_peak
    for name, build in builders.items():
        order = build(graph)
        peaks[name] = cost(order)
        if peaks[name] < best_peak:
            best_order, best_name, best_peak = order, name, peaks[name]
    improved = True
    while improved and time.perf_counter() < deadline:
        improved = False
        for candidate in _moves(graph, best_order, alignment):
            if time.perf_counter() >= deadline:
                break
            peak = cost(candidate)
            if peak < best_peak:
                best_order, best_peak, improved = candidate, peak, True
                best_name = best_name if best_name.endswith("+search") else best_name + "+search"
                break
    peaks["best"] = best_peak
    return ScheduleResult(best_order, best_name, best_peak, program_peak, peaks)
