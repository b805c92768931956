"""The construction of a `ParametricPlan` (see `planner.parametric` for the plan and
its safety argument): which aliases hold for every length, the lifetimes' conflicting
pairs, and the orientations of static plans at a few lengths.

Decisions follow the `statically_known_true` rule: an alias is kept only when its
condition holds for every value of the dims (`range_failures`); the compiler drops an
analysis with an undecided alias and names it. The schedule and the alias analysis run
at each dim's max (the representative length the cost model is evaluated at), the
orientations come from the static plan there and from greedy plans at the min and at
CANDIDATES lengths spread geometrically between, kept when one gives the smallest arena
at its own length.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

import sympy

from tensorgraph.errors import PlanError
from tensorgraph.ir.dims import Dim, Extent, always
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.ops import OPS, Operand
from tensorgraph.planner.aliasing import Aliasing
from tensorgraph.planner.assign import assign_offsets
from tensorgraph.planner.buffers import Buffer, align_up, lower_bound
from tensorgraph.planner.copy_elim import concat_slots
from tensorgraph.planner.liveness import WorkspaceId, analyze
from tensorgraph.planner.parametric import (
    Orientation,
    ParametricPlan,
    aliasing_at,
    cached_canonical,
    evaluate_orientation,
    evaluate_sizes,
)
from tensorgraph.planner.plan import MemoryPlan

CANDIDATES = 3  # interior lengths whose static plans may orient the plan (`candidate_dims`)
# The offset algorithm of the other candidates' static plans (the one at each dim's max
# uses the compile's planner), and its work budget per buffer. Greedy by size oriented
# the zoo Llama as well as `best`, but left the imported GPT-2 7.3% above its lower bound
# at every length below 100 (benches/bench_symbolic.py); `best` cut short at 96 units a
# buffer runs its baselines, more orders and one round of skyline constructions (about 6
# ms for GPT-2's 65 buffers), enough to reach the lower bound at every length there,
# where its default budget (over 100,000 units) took 70 ms a candidate for the same arena.
CANDIDATE_PLANNER = "best"
CANDIDATE_UNITS = 96


def orient(
    buffers: Sequence[object],
    offsets: Mapping[Hashable, int],
    pairs: Mapping[Hashable, Sequence[Hashable]],
    source: Mapping[str, int],
) -> Orientation:
    """The orientation of static offsets `offsets` of `buffers` (ranked by offset, then
    size, then position): for each conflicting pair of `pairs` (`conflicts`), the lower
    ranked sits below."""
    index = {b.id: k for k, b in enumerate(buffers)}
    ranked = sorted(buffers, key=lambda b: (offsets[b.id], b.size, index[b.id]))
    return ranking_orientation([b.id for b in ranked], pairs, source)


def ranking_orientation(
    ranked: Sequence[Hashable],
    pairs: Mapping[Hashable, Sequence[Hashable]],
    source: Mapping[str, int],
) -> Orientation:
    """The orientation that ranking `ranked` (buffer ids, lowest first) induces on the
    conflicting pairs `pairs` (`conflicts`): of each pair, the lower ranked sits below.
    A ranking determines its orientation, so a saved plan stores only the ranking."""
    rank = {b: k for k, b in enumerate(ranked)}
    below: dict[Hashable, list[Hashable]] = {b: [] for b in ranked}
    for b, earlier in pairs.items():
        for a in earlier:
            low, high = (a, b) if rank[a] < rank[b] else (b, a)
            below[high].append(low)
    return Orientation(
        tuple(ranked),
        {b: tuple(sorted(a, key=rank.__getitem__)) for b, a in below.items()},
        dict(source),
    )


def range_failures(graph: Graph, aliasing: Aliasing) -> dict[str, str]:
    """analysis name -> why one of its aliases does not hold for every value of the dims
    in symbolic `graph` (empty when all hold): a narrow view or a concat placement needs
    the axes before its axis to have extent 1 at every length, an in-place write the
    byte size of its operand and of the operand's root (through views and earlier
    in-place writes), and the element mapping of its other readers of that root, at
    every length (`_inplace_problem`) (the `statically_known_true` rule: undecided
    counts as failing)."""
    failures: dict[str, str] = {}
    for node_id, alias in aliasing.aliases.items():
        node = graph.node(node_id)
        if alias.kind == "view" and node.op == "narrow":
            source = graph.node(alias.source)
            prefix = sympy.Mul(*source.shape[: node.attr("axis")])
            if always(cached_canonical(prefix), "==", 1) is not True:
                failures.setdefault("view_alias", f"%{node_id} narrow: {prefix} == 1")
        elif alias.kind == "concat":
            concat = graph.node(alias.source)
            prefix = sympy.Mul(*concat.shape[: concat.attr("axis")])
            if always(cached_canonical(prefix), "==", 1) is not True:
                failures.setdefault("copy_elim", f"%{concat.id} concat: {prefix} == 1")
        elif alias.kind == "inplace":
            problem = _inplace_problem(graph, aliasing, node)
            if problem:
                failures.setdefault("reinplace", f"%{node_id} {node.op}: {problem}")
    return failures


def _root(aliasing: Aliasing, node_id: int) -> int:
    """The node whose bytes `node_id` lives in through views and in-place writes."""
    while node_id in aliasing.aliases and aliasing.aliases[node_id].kind != "concat":
        node_id = aliasing.aliases[node_id].source
    return node_id


def _inplace_problem(graph: Graph, aliasing: Aliasing, node: object) -> str | None:
    """The condition (as text) that in-place write `node` needs at every length and the
    ranges do not decide, or None: rule 2, its operand and the operand's root have the
    node's byte size; rule 4, every other operand reading that root has the node's shape
    (less leading 1s) extent by extent, so it reads element i where the node writes it."""
    root = _root(aliasing, aliasing.aliases[node.id].source)
    for other in (aliasing.aliases[node.id].source, root):
        size = graph.node(other).nbytes
        if always(node.nbytes, "==", size) is not True:
            return f"{node.nbytes} == {size} (%{other})"
    shape = _without_leading_ones(node.shape)
    for i in node.inputs:
        if i == aliasing.aliases[node.id].source or _root(aliasing, i) != root:
            continue
        other = _without_leading_ones(graph.node(i).shape)
        if len(other) != len(shape) or not all(
            always(a, "==", b) is True for a, b in zip(other, shape, strict=True)
        ):
            return f"%{i} {graph.node(i).shape} reads as {node.shape} (rule 4)"
    return None


def _without_leading_ones(shape: tuple) -> tuple:
    start = 0
    while start < len(shape) and shape[start] == 1:
        start += 1
    return shape[start:]


def _slots(graph: Graph, aliasing: Aliasing) -> dict[int, int]:
    """Concat placement -> the operand of its concat whose slot (in `graph`, static)
    starts at the placement's offset; PlanError naming the node when none does."""
    slots = {}
    for node_id, alias in aliasing.aliases.items():
        if alias.kind != "concat":
            continue
        offsets = concat_slots(graph, graph.node(alias.source)) or ()
        ks = [k for k, at in enumerate(offsets) if at == alias.offset]
        if not ks:
            raise PlanError(
                f"%{node_id}: placed at byte {alias.offset}, no slot of %{alias.source}"
            )
        inputs = graph.node(alias.source).inputs
        slots[node_id] = next((k for k in ks if inputs[k] == node_id), ks[0])
    return slots


def _size_expression(graph: Graph, buffer_id: Hashable, guard: int) -> Extent | None:
    if not isinstance(buffer_id, WorkspaceId):
        return cached_canonical(graph.node(buffer_id).nbytes + guard)
    node = graph.node(buffer_id.node)
    operands = [Operand(f"%{i}", graph.node(i).shape, graph.node(i).dtype) for i in node.inputs]
    try:
        size = OPS[node.op].workspace(operands, node.attr_dict, node.shape, node.dtype)
    except TypeError:  # a comparison of extents the ranges do not decide (sympy's bool)
        return None
    return cached_canonical(size)


def conflicts(lifetimes: Mapping[Hashable, tuple[int, int]]) -> dict[Hashable, list[Hashable]]:
    """buffer id -> the buffers whose lifetimes intersect its own and start no later
    (each conflicting pair listed once, under the later-starting one). A sweep over
    starts, O(n log n + pairs)."""
    active: list[tuple[Hashable, int]] = []
    found: dict[Hashable, list[Hashable]] = {}
    for buffer_id, (start, end) in sorted(lifetimes.items(), key=lambda item: item[1][0]):
        active = [(a, a_end) for a, a_end in active if a_end > start]
        found[buffer_id] = [a for a, _ in active]
        active.append((buffer_id, end))
    return found


def _at_bound(
    oriented: Sequence[Orientation],
    sizes: Mapping[Hashable, int | None],
    lifetimes: Mapping[Hashable, tuple[int, int]],
    alignment: int,
) -> bool:
    """True when one of `oriented` already places buffers of `sizes` (bytes; None where a
    size has no expression, then False) in an arena of the lower bound at `alignment`."""
    if any(size is None for size in sizes.values()):
        return False
    buffers = [Buffer(b, sizes[b], start, end) for b, (start, end) in lifetimes.items()]
    bound = align_up(lower_bound(buffers, alignment), alignment)
    return any(evaluate_orientation(o, sizes, alignment).arena_size <= bound for o in oriented)


def candidate_dims(dims: Mapping[str, Dim], interior: int = CANDIDATES) -> list[dict[str, int]]:
    """Each dim's max, then its min and `interior` points spread geometrically between
    (every dim at the same fraction of its span on a log scale): lengths at which a
    static plan may orient the parametric plan well for the lengths near it."""
    points = []
    for k in (interior + 1, 0, *range(1, interior + 1)):
        fraction = k / (interior + 1)
        point = {n: round(d.min * (d.max / d.min) ** fraction) for n, d in dims.items()}
        if point not in points:
            points.append(point)
    return points


def parametric_plan(
    graph: Graph,
    order: Sequence[int],
    aliasing: Aliasing,
    upper: MemoryPlan,
    *,
    at_max: Graph | None = None,
    candidates: int = CANDIDATES,
    params_in_arena: bool = False,
    tail_guard: int = 0,
    states: tuple[Mapping[str, int], int] = ({}, 0),
) -> ParametricPlan:
    """The parametric plan of symbolic `graph` (in `order`) with the alias structure
    `aliasing` (offsets at each dim's max, where `upper`, the static plan of the graph
    at each dim's max, was made with it): oriented by `upper`, and by the static plans
    (offset algorithm CANDIDATE_PLANNER, cut at CANDIDATE_UNITS work units a buffer) at
    `candidate_dims` that give the smallest arena at one of those dims (the others are
    dropped; each kept orientation is safe alone). A candidate where an orientation taken
    so far is already at the lower bound plans nothing (no plan there is smaller).
    `at_max` is `graph` specialised at each dim's max, when the caller has it."""
    representative = {name: d.max for name, d in graph.dims.items()}
    rep = graph.specialize(**representative) if at_max is None else at_max
    slots = _slots(rep, aliasing)
    lifetimes = {b.id: (b.start, b.end) for b in upper.buffers}
    pairs = conflicts(lifetimes)
    oriented = [orient(upper.buffers, upper.buffer_offsets, pairs, representative)]
    sized = [{b.id: b.size for b in upper.buffers}]
    sizes = {}
    for b in upper.buffers:
        guard = 0 if isinstance(b.id, WorkspaceId) else b.size - rep.node(b.id).nbytes
        sizes[b.id] = _size_expression(graph, b.id, guard)
    prepared = {}
    for dims in candidate_dims(graph.dims, candidates)[1:]:
        known = evaluate_sizes(sizes, graph.dims, dims)
        if _at_bound(oriented, known, lifetimes, upper.alignment):
            sized.append(known)  # no plan there can be smaller: orient by it for nothing
            continue
        at = graph.specialize(**dims)
        alias_at = aliasing_at(at, aliasing, slots)
        live = analyze(at, order, alias_at, params_in_arena=params_in_arena, tail_guard=tail_guard)
        budget = CANDIDATE_UNITS * len(live.buffers)
        static = assign_offsets(live.buffers, CANDIDATE_PLANNER, upper.alignment, budget)
        oriented.append(orient(live.buffers, static.offsets, pairs, dims))
        sized.append({b.id: b.size for b in live.buffers})
        prepared[tuple(sorted(dims.items()))] = (at, alias_at, live)
    kept = {0}
    for at_sizes in sized:
        arenas = [evaluate_orientation(o, at_sizes, upper.alignment).arena_size for o in oriented]
        kept.add(arenas.index(min(arenas)))
    plan = assemble_parametric(
        graph,
        order,
        aliasing,
        upper,
        tuple(oriented[k] for k in sorted(kept)),
        rep,
        slots,
        params_in_arena=params_in_arena,
        tail_guard=tail_guard,
        states=states,
    )
    plan._prepared.update(prepared)
    return plan


def assemble_parametric(
    graph: Graph,
    order: Sequence[int],
    aliasing: Aliasing,
    upper: MemoryPlan,
    orientations: Sequence[Orientation],
    at_max: Graph,
    slots: Mapping[int, int] | None = None,
    *,
    params_in_arena: bool = False,
    tail_guard: int = 0,
    states: tuple[Mapping[str, int], int] = ({}, 0),
) -> ParametricPlan:
    """The `ParametricPlan` of symbolic `graph` from its parts: the static plan `upper`
    at each dim's max (`at_max`, the graph there), which gives the lifetimes and the
    sizes' guard bytes, and `orientations` (unverified: run `verify_parametric`). Used by
    `parametric_plan` and by `load`, which stores the orientations' rankings only."""
    representative = {name: d.max for name, d in graph.dims.items()}
    sizes = {}
    for b in upper.buffers:
        guard = 0 if isinstance(b.id, WorkspaceId) else b.size - at_max.node(b.id).nbytes
        sizes[b.id] = _size_expression(graph, b.id, guard)
    plan = ParametricPlan(
        graph,
        tuple(order),
        aliasing,
        {b.id: (b.start, b.end) for b in upper.buffers},
        tuple(orientations),
        sizes,
        _slots(at_max, aliasing) if slots is None else slots,
        upper,
        upper.algorithm,
        upper.alignment,
        params_in_arena,
        tail_guard,
        states,
    )
    plan._prepared[tuple(sorted(representative.items()))] = (at_max, aliasing, upper.liveness)
    return plan
