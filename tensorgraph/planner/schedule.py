"""Memory-aware scheduling: the topological order whose peak live bytes is lowest.

The order decides the fixed-order lower bound every offset algorithm is measured
against, so a better order can beat any planner on the program order. Strategies (the
greedy and subtree heuristics are planner/order_heuristics.py's):

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
  or hoist a last reader of such a buffer to just after its latest input; where neither
  improves, hoist the buffer's last reader with the producers only it reads and the
  readers it makes ready, `_hoist_cluster`), keeping the lowest; never worse than
  `program`, since `program` is a candidate. Each heuristic's order (and the search's
  result) is also costed with its state updates placed (planner/update_placement.py:
  each update chain right after the last reader of the state's old value, so it writes
  over the state and frees its gradient there). For a graph that updates state the
  search also runs from every other placed candidate, under a budget of what the first
  searches spent (the update placement makes basins the lowest start misses).

The exact cost of an order (`CostModel`) is the lower bound of the plan the compiler
would make for it: the alias analyses run for that order, the one liveness analysis
gives the buffers, and `lower_bound` is taken at the plan's alignment, with the plan's
params placement and tail guard. The search budget counts work (nodes analysed), never
seconds, so an order is reproducible on any machine and under any load. An order costed
twice (a heuristic that returns the program order, the local search's incumbent) is
analysed once: the cost model keeps each order's aliasing and liveness, and still
charges the work, so budgets cut the search exactly where they did without the cache;
the result carries the chosen order's aliasing for the compiler to reuse.

A symbolic graph is scheduled at a stated representative length, each dim's max (the
cost model's sizes there): `symbolic_program.compile_symbolic` calls `schedule` on the
graph specialised there, so the order minimises the peak at the longest call, where
the arena is largest. Boundary nodes
(inputs, params, constants) keep their program position relative to each other and go
first: inputs live from step 0 and params/constants sit
in the constant segment, so their position never changes a peak.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from attrs import define, field, frozen

from tensorgraph.errors import GraphError, PlanError
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.ops import OPS
from tensorgraph.planner.aliasing import ANALYSES, Aliasing, analyze_aliasing
from tensorgraph.planner.buffers import lower_bound
from tensorgraph.planner.liveness import Liveness, analyze
from tensorgraph.planner.order_heuristics import (
    _Facts,
    _facts,
    _split_boundary,
    greedy_order,
    subtree_order,
)
from tensorgraph.planner.update_placement import place_updates

# The module's own names, and the heuristics it defined before they moved to
# order_heuristics.py (re-exported: they are importable from here as before).
__all__ = [
    "CACHED_ORDERS",
    "DEFAULT_BUDGET",
    "STRATEGIES",
    "CostModel",
    "ScheduleResult",
    "_Facts",
    "_facts",
    "_split_boundary",
    "greedy_order",
    "is_topological",
    "peak_of",
    "reorder",
    "schedule",
    "subtree_order",
]

STRATEGIES = ("program", "greedy", "subtree", "best")
# Work units for `best`'s local search: one unit per node of every candidate order it
# costs (a liveness analysis is linear in the nodes). About 1.5 s on a 10k-node graph
# here; small graphs stop long before it, when no move improves the peak.
DEFAULT_BUDGET = 2_000_000
# Orders whose analysis the cost model keeps: the candidates compared in one round of the
# local search are analysed once each, and only the incumbent is costed again.
CACHED_ORDERS = 4


@frozen
class ScheduleResult:
    """The chosen order and the peaks (lower bounds, bytes) that justified it; `work`
    spent, and `cut_short` when the wall-clock `time_limit` stopped the search."""

    order: tuple[int, ...]
    strategy: str
    peak: int
    program_peak: int
    peaks: dict[str, int]
    work: int = 0
    cut_short: bool = False
    # The aliasing the cost model computed for `order` (`analyze_aliasing` with the
    # schedule's analyses and alignment): what the compiler would compute again.
    aliasing: Aliasing | None = None


def reorder(graph: Graph, order: Sequence[int]) -> Graph:
    """`graph` with its nodes in `order` (GraphError unless a topological permutation)."""
    if not is_topological(graph, order):
        raise GraphError(
            f"graph {graph.name!r}: an order must list every node id exactly once, "
            "each after its inputs"
        )
    return graph.rebuilt(graph.node(i) for i in order)


def is_topological(graph: Graph, order: Sequence[int]) -> bool:
    """True when `order` lists every node once, each after all of its inputs."""
    position = {node_id: step for step, node_id in enumerate(order)}
    if len(position) != len(graph) or len(order) != len(graph):
        return False
    if any(n.id not in position for n in graph.nodes):
        return False
    return all(position[i] < position[n.id] for n in graph.nodes for i in n.inputs)


@define
class CostModel:
    """The exact cost of an order: the lower bound of the plan the compiler makes for it
    (alias analyses `analyses` run for that order, one liveness analysis, planned sizes
    at `alignment`, params placement and tail guard as the plan has them). Counts the
    work it does, in nodes analysed, a cached order included (see the module docstring),
    and keeps the last CACHED_ORDERS orders' aliasing, liveness and peak."""

    graph: Graph
    analyses: tuple[str, ...] = ANALYSES
    alignment: int = 64
    params_in_arena: bool = False
    tail_guard: int = 0
    work: int = 0
    _seen: dict = field(factory=dict, init=False, repr=False)

    def _costed(self, order: Sequence[int]) -> list:
        """[aliasing, liveness, peak or None] of `order`, analysed on first sight."""
        self.work += len(order)
        key = tuple(order)
        found = self._seen.pop(key, None)
        if found is None:
            aliasing = analyze_aliasing(self.graph, key, self.analyses, alignment=self.alignment)
            live = analyze(
                self.graph,
                key,
                aliasing,
                params_in_arena=self.params_in_arena,
                tail_guard=self.tail_guard,
            )
            found = [aliasing, live, None]
        self._seen[key] = found  # most recent last
        if len(self._seen) > CACHED_ORDERS:
            del self._seen[next(iter(self._seen))]
        return found

    def aliasing(self, order: Sequence[int]) -> Aliasing:
        return self._costed(order)[0]

    def liveness(self, order: Sequence[int]) -> Liveness:
        return self._costed(order)[1]

    def peak(self, order: Sequence[int]) -> int:
        found = self._costed(order)
        if found[2] is None:
            found[2] = lower_bound(found[1].buffers, self.alignment)
        return found[2]


def peak_of(graph: Graph, alignment: int = 64, analyses: Sequence[str] = ANALYSES) -> int:
    """The lower bound of the plan for `graph` in its own node order (see module doc)."""
    return CostModel(graph, tuple(analyses), alignment).peak(tuple(n.id for n in graph.nodes))


# ---------------------------------------------------------------- local search


def _moves(graph: Graph, order: tuple[int, ...], cost: CostModel) -> list[tuple[int, ...]]:
    """Candidate neighbours of `order`: for each buffer live at the peak step, sink its
    producer to just before its first reader, and hoist its last reader to just after
    that reader's latest input, largest buffers first; then, for each, its last reader
    through any alias hoisted with its cluster (`_hoist_cluster`). The cluster moves come
    last, so the first-improvement search takes the path it took without them up to
    where no single-node move improves, and goes on from there."""
    live = cost.liveness(order)
    peak_step = live.peak_step(cost.alignment)
    position = {node_id: step for step, node_id in enumerate(order)}
    users = graph.users()
    moves, clusters = [], []
    for buffer in sorted(live.live_at(peak_step), key=lambda b: (-b.size, b.id)):
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
        # The buffer's last reader through any alias (an in-place successor's reader;
        # for a buffer holding an output, the last node).
        if order[buffer.end - 1] != producer.id:
            hoisted = _hoist_cluster(graph, order, position, users, order[buffer.end - 1])
            if hoisted is not None:
                clusters.append(hoisted)
    return moves + clusters


def _hoist_cluster(
    graph: Graph,
    order: tuple[int, ...],
    position: dict[int, int],
    users: dict[int, list[int]],
    last: int,
) -> tuple[int, ...] | None:
    """`order` with `last` (the last reader of a buffer live at the peak) hoisted
    together with its cluster: the producers read only within the cluster (a value
    made for `last` alone, as a recomputed copy is, and a param or input only it reads,
    which costs no step wherever it stands) and the readers of cluster values
    whose every input the cluster or the nodes before it give (a reduction of `last`'s
    result), all placed right after the latest input from outside, in their order.
    None when that moves nothing earlier. One move where single-node moves each leave
    the peak where it is: a reader hoisted without its operand's producer, or without
    the reduction that frees its result, holds as much as before."""
    cluster = {last}
    stack = [last]
    while stack:
        for i in graph.node(stack.pop()).inputs:
            if i not in cluster and all(u in cluster for u in users[i]):
                cluster.add(i)
                stack.append(i)
    outside = [position[i] for n in cluster for i in graph.node(n).inputs if i not in cluster]
    anchor = max(outside, default=-1) + 1
    for n in sorted(cluster, key=position.__getitem__):
        for u in users[n]:
            if all(i in cluster or position[i] < anchor for i in graph.node(u).inputs):
                cluster.add(u)
    if len(cluster) == 1:
        return None  # the single-node hoist
    members = sorted(cluster, key=position.__getitem__)
    rest = [n for n in order if n not in cluster]
    cut = sum(1 for n in order[:anchor] if n not in cluster)
    moved = (*rest[:cut], *members, *rest[cut:])
    return None if moved == order else moved


def _move(order: tuple[int, ...], source: int, target: int) -> tuple[int, ...]:
    items = list(order)
    node = items.pop(source)
    items.insert(target, node)
    return tuple(items)


def _search(
    graph: Graph,
    cost: CostModel,
    order: tuple[int, ...],
    name: str,
    peak: int,
    spent: int,
    budget: int,
    deadline: float | None,
) -> tuple[tuple[int, ...], str, int, bool]:
    """The local search of `best` from `order` (peak `peak`, made by strategy `name`):
    take the first move that lowers the peak, until none does or the work since `spent`
    units were already charged reaches `budget`; then the result with its state updates
    placed, where that is no higher. Returns (order, name, peak, cut short by `deadline`)."""
    limit = cost.work - spent + budget  # `budget` units counted from when `spent` were
    improved, cut_short = True, False
    while improved and cost.work < limit:
        improved = False
        for candidate in _moves(graph, order, cost):
            if cost.work >= limit:
                break
            if deadline is not None and time.perf_counter() >= deadline:
                cut_short = True
                break
            moved = cost.peak(candidate)
            if moved < peak:
                order, peak, improved = candidate, moved, True
                name = name if name.endswith("+search") else name + "+search"
                break
        if cut_short:
            break
    # Placed at an equal peak too: the updates then write over their states (the search
    # may have moved a weight's last reader after its chain, leaving the new weight in
    # the arena at no cost to the peak, but to the bytes the offsets must place).
    placed = place_updates(graph, order)
    if placed != order and cost.peak(placed) <= peak:
        order, peak = placed, cost.peak(placed)
        name = name if name.endswith("+updates") else name + "+updates"
    return order, name, peak, cut_short


def schedule(
    graph: Graph,
    strategy: str = "best",
    *,
    alignment: int = 64,
    analyses: Sequence[str] = ANALYSES,
    params_in_arena: bool = False,
    tail_guard: int = 0,
    budget: int | None = None,
    time_limit: float | None = None,
) -> ScheduleResult:
    """Choose a topological order of `graph` by `strategy` (one of STRATEGIES).

    The result's `peak` is the lower bound of the plan for that order (`CostModel`, with
    the alias analyses `analyses`). `best` never returns a higher peak than `program`;
    its local search stops when no move improves the peak or after `budget` work units
    (None: DEFAULT_BUDGET), so the same graph and options always give the same order.
    `time_limit` (seconds) is an optional wall-clock cap; the result says when it cut
    the search short. PlanError on a negative budget or time limit."""
    if strategy not in STRATEGIES:
        raise GraphError(f"unknown schedule {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    budget = DEFAULT_BUDGET if budget is None else budget
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
        raise PlanError(f"schedule budget must be an int >= 0 (work units) but got {budget!r}")
    if time_limit is not None and not time_limit >= 0:
        raise PlanError(f"time_limit must be None or >= 0 seconds but got {time_limit!r}")
    cost = CostModel(graph, tuple(analyses), alignment, params_in_arena, tail_guard)
    program = tuple(n.id for n in graph.nodes)
    program_peak = cost.peak(program)
    builders: dict[str, Callable[[Graph, Sequence[str]], tuple[int, ...]]] = {
        "greedy": greedy_order,
        "subtree": subtree_order,
    }
    peaks = {"program": program_peak}
    if strategy == "program":
        return ScheduleResult(
            program,
            "program",
            program_peak,
            program_peak,
            peaks,
            cost.work,
            aliasing=cost.aliasing(program),
        )
    if strategy in builders:
        order = builders[strategy](graph, cost.analyses)
        peaks[strategy] = cost.peak(order)
        work = cost.work
        return ScheduleResult(
            order,
            strategy,
            peaks[strategy],
            program_peak,
            peaks,
            work,
            aliasing=cost.aliasing(order),
        )
    deadline = None if time_limit is None else time.perf_counter() + time_limit
    best_order, best_name, best_peak = program, "program", program_peak
    candidates = {"program": program}
    candidates.update((name, build(graph, cost.analyses)) for name, build in builders.items())
    for name, order in candidates.items():
        if name != "program":
            peaks[name] = cost.peak(order)
            if peaks[name] < best_peak:
                best_order, best_name, best_peak = order, name, peaks[name]
    spent = cost.work  # what the candidates cost: each search's budget counts it
    # Each order again with the state updates placed (planner/update_placement.py): the
    # heuristics score an update as a new arena buffer and the local search moves one
    # node at a time, so neither moves an update chain to where it frees its gradient
    # and writes over its state.
    starts = [(best_order, best_name, best_peak)]
    others = {}  # the placed orders: the extra starts (below)
    for name, order in candidates.items():
        placed = place_updates(graph, order)
        if placed != order:
            others[name + "+updates"] = placed
            peaks[name + "+updates"] = peak = cost.peak(placed)
            if peak < starts[-1][2] and peak < best_peak:
                starts[1:] = [(placed, name + "+updates", peak)]
    # The local search from the best order without placement and, where placement found
    # a lower one, from that too, each under the whole budget: a search from another
    # start can end higher (measured: checkpoint-every-layer's MLP step, 3.15 MB from
    # the placed program order against 2.91 MB from the builder's), so searching both
    # keeps every peak at or below what the search alone found. Then, for a graph that
    # updates state, from every other placed candidate, lowest start first, under one
    # more budget shared by them (what the first searches spent; never from an unplaced
    # one, so placement stays never worse than none by construction): the lowest start is not
    # always the best basin (measured: the zoo Llama's training step, 3.28 MB from the
    # placed program order, 3.15 MB from the placed greedy order's 3.64 MB; with a whole
    # budget instead, the zoo CNN's step compiled in 44 s instead of 3 s for 0.4%).
    best = None
    for order, name, peak in starts:
        found = _search(graph, cost, order, name, peak, spent, budget, deadline)
        if best is None or found[2] < best[2]:
            best = found
    tried = {order for order, _, _ in starts}
    rest = sorted(
        ((peaks[name], name, order) for name, order in others.items() if order not in tried),
        key=lambda item: item[:2],
    )
    # The extra starts' budget: what the searches above spent (at most `budget`), so a
    # compile does at most twice the search work it did without them; only for graphs
    # that update state (a training step's updates are what the placement reorders).
    shared = cost.work
    extra = min(budget, shared - spent) if graph.state_updates else 0
    for peak, name, order in rest:
        if cost.work - shared >= extra:
            break
        if order in tried:  # two candidates gave one order
            continue
        tried.add(order)
        # `spent`: what this shared budget has paid so far, so the search stops at it
        found = _search(graph, cost, order, name, peak, cost.work - shared, extra, deadline)
        if found[2] < best[2]:
            best = found
        if found[3]:  # the wall-clock limit cut this search short: stop there
            break
    best_order, best_name, best_peak, cut_short = best
    peaks["best"] = best_peak
    work = cost.work
    return ScheduleResult(
        best_order,
        best_name,
        best_peak,
        program_peak,
        peaks,
        work,
        cut_short,
        cost.aliasing(best_order),
    )
