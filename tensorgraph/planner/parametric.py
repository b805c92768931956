"""The parametric plan: one memory plan for every length in the dims' ranges, exact at
each length.

A symbolic graph's buffers have sizes that are expressions of its `tg.Dim`s, but their
lifetimes depend only on the order and the aliasing's structure (which value lives in
which root), so one set of lifetimes serves every length. The construction:

1. orient every pair of conflicting buffers (lifetimes intersect): one sits below the
   other. The orientation is the static plan's at a representative length (each dim's
   max): a below b when b's offset there is higher (ties by id), a total order restricted
   to the conflicting pairs, hence acyclic;
2. at given dims, each buffer's offset is the maximum, over the conflicting buffers
   below it, of their offset plus their size at those dims, rounded up to the alignment
   (0 with none below); the arena is the highest end, aligned.

Why no two live buffers overlap, for any value in range: for a conflicting pair with a
below b, step 2 gives offset(b) >= offset(a) + size(a) whatever the sizes are, so their
byte ranges are disjoint; every conflicting pair is oriented, so every pair is covered.
At the representative length the static plan's offsets satisfy every constraint of step
2, so the parametric offsets there are no higher (each is the least that satisfies
them): the plan at each dim's max is never above the static plan at the max.

Offsets are the expressions step 2 defines (`offset(b) = Max(...)` over the sizes'
expressions); they are evaluated by the recurrence itself, in the order's rank, one
addition and one max per oriented pair: cheaper than any printed form of the nested
Max. The alias offsets of views and concat placements are exact per kind at each
length (`ops.view_offset`, `copy_elim.concat_slots` of the same operand), and
`liveness.analyze` re-checks every alias rule at that length: a length where the
structure would not hold is a PlanError, never an overlap.

`verify_parametric` proves the construction (every conflicting pair oriented, the
orientation acyclic, from lifetimes it recomputes) and checks `at(...)` numerically with
`check.verify_plan` at the ends of the ranges and at evenly spread interior points.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Hashable, Mapping, Sequence
from functools import lru_cache

import numpy as np
import sympy
from attrs import field, fields_dict, frozen

from tensorgraph.errors import PlanError
from tensorgraph.ir.dims import Dim, Extent, always, canonical
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.ops import OPS, Operand, view_offset
from tensorgraph.planner.aliasing import Alias, Aliasing
from tensorgraph.planner.assign import assign_offsets
from tensorgraph.planner.buffers import Assignment, align_up
from tensorgraph.planner.copy_elim import concat_slots
from tensorgraph.planner.liveness import Liveness, WorkspaceId, analyze
from tensorgraph.planner.plan import MemoryPlan, assemble_plan

CACHED_LENGTHS = 16  # concrete plans kept per parametric plan (most recently used)
INTERIOR_SAMPLES = 3  # interior values per dim that `verify_parametric` checks
CANDIDATES = 3  # interior lengths whose static plans may orient the plan (`candidate_dims`)
# The offset algorithm of the other candidates' static plans: the one at each dim's max
# uses the compile's planner; the others only orient, and greedy by size orients as well
# as `best` on the zoo Llama (benches/bench_symbolic.py) at a fraction of its time.
CANDIDATE_PLANNER = "greedy_size"


class RangeBytes(int):
    """Bytes at each dim's max (an int, so `plan.arena_size` compares and prints as
    bytes); called with dims (`plan.arena_size(seq=40)`), the bytes at those dims."""

    def __new__(cls, at_max: int, at: object) -> RangeBytes:
        value = super().__new__(cls, at_max)
        value._at = at
        return value

    def __call__(self, **dims: int) -> int:
        return self._at(**dims)


@frozen(eq=False)
class ParametricPlan:
    """The plan of a symbolic graph for every value of its dims (module docstring).

    `graph` is the symbolic graph in `order`; `aliasing` the alias structure (its
    offsets are those at each dim's max, re-derived per length); `lifetimes` buffer id
    -> (start, end) for every buffer; `orientations` one or more orientations, each
    safe for every length on its own (the first from `upper`), of which `at` takes the
    one giving the smallest arena at its dims; `sizes` buffer id -> its
    size expression in bytes (None for a workspace whose rule the ranges do not turn
    into one expression: its size is the op's rule at each length); `slots` concat
    placement -> the concat operand whose slot holds it; `upper` the static plan at
    each dim's max that gave the first orientation; `states` the state region (layout, size)."""

    graph: Graph
    order: tuple[int, ...]
    aliasing: Aliasing
    lifetimes: Mapping[Hashable, tuple[int, int]]
    orientations: tuple[Orientation, ...]
    sizes: Mapping[Hashable, Extent]
    slots: Mapping[int, int]
    upper: MemoryPlan
    algorithm: str
    alignment: int
    params_in_arena: bool = False
    tail_guard: int = 0
    states: tuple[Mapping[str, int], int] = ({}, 0)
    _cache: OrderedDict = field(factory=OrderedDict, init=False, repr=False)
    # dims key -> (graph, aliasing, liveness) that the construction already computed at
    # those dims (its candidates): `at` there skips specialising and the analysis again.
    _prepared: dict = field(factory=dict, init=False, repr=False)

    @property
    def dims(self) -> dict[str, Dim]:
        return self.graph.dims

    @property
    def representative(self) -> dict[str, int]:
        """The dims at which the orientation and the cost model were chosen: each max."""
        return {name: d.max for name, d in self.dims.items()}

    def values(self, dims: Mapping[str, int]) -> dict[str, int]:
        """`dims` checked: every dim of the graph given, as an int inside its range;
        PlanError naming the dim, the value and the range otherwise."""
        unknown = sorted(set(dims) - set(self.dims))
        if unknown:
            raise PlanError(f"graph {self.graph.name!r} has no dim(s) {unknown}")
        out = {}
        for name, dim in self.dims.items():
            if name not in dims:
                raise PlanError(f"the plan needs a value for {dim.describe()}")
            value = dims[name]
            if isinstance(value, bool) or not isinstance(value, int):
                raise PlanError(f"dim {name!r}: expected an int but got {value!r}")
            if not dim.min <= value <= dim.max:
                raise PlanError(f"dim {name!r} = {value} lies outside {dim.describe()}")
            out[name] = value
        return out

    def graph_at(self, **dims: int) -> Graph:
        """The graph at `dims` (in `order`, node ids unchanged)."""
        return self._concrete(dims)[0]

    def at(self, **dims: int) -> MemoryPlan:
        """The concrete MemoryPlan at `dims` (offsets, arena_size, lower_bound), proven by
        `check.verify_plan` on the graph at `dims`; cached for the last CACHED_LENGTHS
        lengths. PlanError for a dim missing or out of range."""
        return self._concrete(dims)[1]

    @property
    def arena_size(self) -> RangeBytes:
        return RangeBytes(
            self.at(**self.representative).arena_size, lambda **d: self.at(**d).arena_size
        )

    @property
    def lower_bound(self) -> RangeBytes:
        return RangeBytes(
            self.at(**self.representative).lower_bound, lambda **d: self.at(**d).lower_bound
        )

    def __getattr__(self, name: str) -> object:
        # The fields every MemoryPlan reader needs (constant segment, state region,
        # buffers, offsets, liveness) read as the plan at each dim's max.
        if name.startswith("_") or not (
            name in fields_dict(MemoryPlan) or hasattr(MemoryPlan, name)
        ):
            raise AttributeError(name)
        return getattr(self.at(**self.representative), name)

    def summary(self, lengths: Sequence[Mapping[str, int]] = ()) -> str:
        """The dims' ranges, then the arena and lower bound at each end of them and at
        each of `lengths` (dicts of dim name -> value)."""
        ends = [{n: d.min for n, d in self.dims.items()}, self.representative, *lengths]
        lines = ["parametric plan over " + ", ".join(d.describe() for d in self.dims.values())]
        for dims in ends:
            plan = self.at(**dims)
            where = ", ".join(f"{k}={v}" for k, v in dims.items())
            lines.append(
                f"  at {where}: arena {plan.arena_size:,} B, lower bound {plan.lower_bound:,} B"
            )
        return "\n".join(lines)

    def report(self, graph: Graph | None = None, top: int = 20) -> str:
        """`summary`, then the report of the plan at each dim's max (`graph` is ignored:
        the plan knows its own graph; the argument keeps MemoryPlan's signature)."""
        at_max = self.at(**self.representative)
        return self.summary() + "\n" + at_max.report(self.graph_at(**self.representative), top)

    def alias_offsets(self) -> dict[int, Extent]:
        """node id -> the byte offset of its alias as an expression of the dims (a view's
        `ops.view_offset`, a placement's slot in its concat, 0 in place): `aliasing_at`
        on the symbolic graph, the same rules `at` evaluates at each length."""
        at = aliasing_at(self.graph, self.aliasing, self.slots)
        return {i: _canonical(a.offset) for i, a in at.aliases.items()}

    def offset_expressions(self, orientation: int = 0) -> dict[Hashable, Extent]:
        """buffer id -> its offset as an expression of the dims under orientation number
        `orientation`: step 2 of the construction written with sympy's Max and ceiling
        (`at` evaluates the same recurrence by numbers and takes the orientation with the
        smallest arena). PlanError when a buffer's size has no expression."""
        chosen = self.orientations[orientation]
        missing = [b for b, size in self.sizes.items() if size is None]
        if missing:
            raise PlanError(f"buffer {missing[0]} has no size expression (see `sizes`)")
        offsets: dict[Hashable, Extent] = {}
        for b in chosen.ranked:
            ends = [offsets[a] + self.sizes[a] for a in chosen.below[b]]
            top = sympy.Max(0, *ends) if ends else 0
            offsets[b] = _canonical(sympy.ceiling(top / self.alignment) * self.alignment)
        return offsets

    def _concrete(self, dims: Mapping[str, int]) -> tuple[Graph, MemoryPlan]:
        values = self.values(dims)
        key = tuple(sorted(values.items()))
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        prepared = self._prepared.pop(key, None)
        if prepared is None:
            graph = self.graph.specialize(**values)
            aliasing = aliasing_at(graph, self.aliasing, self.slots)
            liveness = analyze(
                graph,
                self.order,
                aliasing,
                params_in_arena=self.params_in_arena,
                tail_guard=self.tail_guard,
            )
        else:
            graph, aliasing, liveness = prepared
        plan = assemble_plan(
            graph,
            liveness,
            self._assign(liveness, values),
            "parametric",
            self.alignment,
            aliasing,
            0.0,
            self.states,
        )
        from tensorgraph.planner.check import verify_plan

        verify_plan(graph, plan, aliasing)
        self._cache[key] = (graph, plan)
        if len(self._cache) > CACHED_LENGTHS:
            self._cache.popitem(last=False)
        return graph, plan

    def size_values(self, values: Mapping[str, int]) -> dict[Hashable, int | None]:
        """buffer id -> its size in bytes at `values` (dim name -> int), from `sizes`
        (None where the size has no expression); each distinct expression evaluated
        once (a model repeats a few sizes over all its layers)."""
        bound = {self.dims[n]: sympy.Integer(v) for n, v in values.items()}
        seen: dict[object, int] = {}
        out: dict[Hashable, int | None] = {}
        for b, size in self.sizes.items():
            if size is None or type(size) is int:
                out[b] = size
                continue
            if size not in seen:
                seen[size] = int(size.xreplace(bound))
            out[b] = seen[size]
        return out

    def _assign(self, liveness: Liveness, values: Mapping[str, int]) -> Assignment:
        """Step 2 of the construction at `values`, over `liveness` at those dims, whose
        buffers must have exactly the plan's lifetimes and the sizes' values."""
        found = {b.id: b for b in liveness.buffers}
        if found.keys() != self.lifetimes.keys():
            raise PlanError(
                f"at {values}: the buffers differ from the plan's "
                f"({sorted(map(str, found.keys() ^ self.lifetimes.keys()))[:4]})"
            )
        expected = self.size_values(values)
        sizes = {}
        for buffer_id, (start, end) in self.lifetimes.items():
            b, size = found[buffer_id], expected[buffer_id]
            if (b.start, b.end) != (start, end) or (size is not None and b.size != size):
                raise PlanError(
                    f"buffer {buffer_id}: at {values} it is {b}, the plan says [{start}, {end}) "
                    f"of {self.sizes[buffer_id]} = {size} bytes"
                )
            sizes[buffer_id] = b.size
        placed = [evaluate_orientation(o, sizes, self.alignment) for o in self.orientations]
        return min(placed, key=lambda a: a.arena_size)


@frozen
class Orientation:
    """One acyclic orientation of the conflicting pairs of buffers: `ranked` every
    buffer id, lowest first (the order the recurrence evaluates them in); `below` buffer
    id -> the conflicting buffers under it, each earlier in `ranked`; `source` the dims
    whose static plan gave it."""

    ranked: tuple[Hashable, ...]
    below: Mapping[Hashable, tuple[Hashable, ...]]
    source: Mapping[str, int]


def evaluate_orientation(
    orientation: Orientation, sizes: Mapping[Hashable, int], alignment: int
) -> Assignment:
    """Step 2 of the construction: each buffer at the aligned maximum end of the
    buffers below it, for buffer sizes `sizes` (bytes); the arena the highest end."""
    offsets: dict[Hashable, int] = {}
    top = 0
    for buffer_id in orientation.ranked:
        offset = 0
        for a in orientation.below[buffer_id]:
            offset = max(offset, offsets[a] + sizes[a])
        offsets[buffer_id] = offset = align_up(offset, alignment)
        top = max(top, offset + sizes[buffer_id])
    return Assignment(offsets, align_up(top, alignment))


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
    rank = {b.id: k for k, b in enumerate(ranked)}
    below: dict[Hashable, list[Hashable]] = {b.id: [] for b in ranked}
    for b, earlier in pairs.items():
        for a in earlier:
            low, high = (a, b) if rank[a] < rank[b] else (b, a)
            below[high].append(low)
    return Orientation(
        tuple(b.id for b in ranked),
        {b: tuple(sorted(a, key=rank.__getitem__)) for b, a in below.items()},
        dict(source),
    )


def aliasing_at(graph: Graph, structure: Aliasing, slots: Mapping[int, int]) -> Aliasing:
    """`structure`'s aliases with their offsets at `graph`'s lengths: a view's from
    `ops.view_offset`, a concat placement's the slot of the same operand (the one whose
    slot held it at the representative length, `Alias.offset` there), in-place 0."""
    aliases = {}
    for node_id, alias in structure.aliases.items():
        node = graph.node(node_id)
        if alias.kind == "view":
            source = graph.node(alias.source)
            offset = view_offset(node.op, node.attr_dict, source.shape, node.dtype, source.dtype)
        elif alias.kind == "concat":
            offset = concat_slots(graph, graph.node(alias.source))[slots[node_id]]
        else:
            offset = 0
        aliases[node_id] = Alias(alias.source, offset, alias.kind)
    return Aliasing(aliases, structure.analyses)


# ---------------------------------------------------------------- construction


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
            if always(canonical(prefix), "==", 1) is not True:
                failures.setdefault("view_alias", f"%{node_id} narrow: {prefix} == 1")
        elif alias.kind == "concat":
            concat = graph.node(alias.source)
            prefix = sympy.Mul(*concat.shape[: concat.attr("axis")])
            if always(canonical(prefix), "==", 1) is not True:
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
        return _canonical(graph.node(buffer_id).nbytes + guard)
    node = graph.node(buffer_id.node)
    operands = [Operand(f"%{i}", graph.node(i).shape, graph.node(i).dtype) for i in node.inputs]
    try:
        size = OPS[node.op].workspace(operands, node.attr_dict, node.shape, node.dtype)
    except TypeError:  # a comparison of extents the ranges do not decide (sympy's bool)
        return None
    return _canonical(size)


@lru_cache(maxsize=4096)
def _canonical(size: Extent) -> Extent:
    return canonical(size)


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
    (offset algorithm CANDIDATE_PLANNER) at `candidate_dims` that give the smallest arena
    at one of those dims (the others are dropped; each kept orientation is safe alone).
    `at_max` is `graph` specialised at each dim's max, when the caller has it."""
    representative = {name: d.max for name, d in graph.dims.items()}
    rep = graph.specialize(**representative) if at_max is None else at_max
    slots = _slots(rep, aliasing)
    lifetimes = {b.id: (b.start, b.end) for b in upper.buffers}
    pairs = conflicts(lifetimes)
    oriented = [orient(upper.buffers, upper.buffer_offsets, pairs, representative)]
    sized = [{b.id: b.size for b in upper.buffers}]
    prepared = {}
    for dims in candidate_dims(graph.dims, candidates)[1:]:
        at = graph.specialize(**dims)
        alias_at = aliasing_at(at, aliasing, slots)
        live = analyze(at, order, alias_at, params_in_arena=params_in_arena, tail_guard=tail_guard)
        static = assign_offsets(live.buffers, CANDIDATE_PLANNER, upper.alignment)
        oriented.append(orient(live.buffers, static.offsets, pairs, dims))
        sized.append({b.id: b.size for b in live.buffers})
        prepared[tuple(sorted(dims.items()))] = (at, alias_at, live)
    kept = {0}
    for sizes in sized:
        arenas = [evaluate_orientation(o, sizes, upper.alignment).arena_size for o in oriented]
        kept.add(arenas.index(min(arenas)))
    sizes = {}
    for b in upper.buffers:
        guard = 0 if isinstance(b.id, WorkspaceId) else b.size - rep.node(b.id).nbytes
        sizes[b.id] = _size_expression(graph, b.id, guard)
    plan = ParametricPlan(
        graph,
        tuple(order),
        aliasing,
        lifetimes,
        tuple(oriented[k] for k in sorted(kept)),
        sizes,
        slots,
        upper,
        upper.algorithm,
        upper.alignment,
        params_in_arena,
        tail_guard,
        states,
    )
    plan._prepared.update(prepared)
    plan._prepared[tuple(sorted(representative.items()))] = (rep, aliasing, upper.liveness)
    return plan


def sample_dims(dims: Mapping[str, Dim], interior: int = INTERIOR_SAMPLES) -> list[dict[str, int]]:
    """Every combination of each dim's min, max and `interior` evenly spread values."""
    axes = []
    for dim in dims.values():
        span = dim.max - dim.min
        values = {
            dim.min,
            dim.max,
            *(dim.min + span * (k + 1) // (interior + 1) for k in range(interior)),
        }
        axes.append(sorted(values))
    return [dict(zip(dims, combo, strict=True)) for combo in itertools.product(*axes)]


def _verify_orientation(orientation: Orientation, ids: list, together: np.ndarray) -> None:
    """PlanError unless `orientation` ranks exactly the buffers `ids`, each `below` lists
    earlier buffers only, and the pairs live together (`together`, indexed as `ids`)
    are exactly the pairs it orients, each once."""
    if sorted(map(str, orientation.ranked)) != sorted(map(str, ids)):
        raise PlanError(f"the orientation from {orientation.source} ranks other buffers")
    rank = {b: k for k, b in enumerate(orientation.ranked)}
    position = {b: k for k, b in enumerate(ids)}
    oriented = np.zeros_like(together)
    for b in ids:
        for a in orientation.below[b]:
            if rank[a] >= rank[b]:
                raise PlanError(f"buffer {b} sits above {a}, which comes later: not acyclic")
            oriented[position[b], position[a]] = True
    wrong = np.argwhere(together != (oriented | oriented.T))
    if len(wrong) or (oriented & oriented.T).any():
        i, k = wrong[0] if len(wrong) else np.argwhere(oriented & oriented.T)[0]
        raise PlanError(
            f"buffers {ids[i]} and {ids[k]}: live together {bool(together[i, k])}, but "
            f"oriented {int(oriented[i, k]) + int(oriented[k, i])} way(s) by the "
            f"orientation from {orientation.source}"
        )


def verify_parametric(plan: ParametricPlan, interior: int = INTERIOR_SAMPLES) -> None:
    """Prove `plan` safe for every value of its dims, or raise PlanError naming the
    buffers: every pair of buffers whose lifetimes intersect (recomputed pair by pair,
    not by `conflicts`) is oriented exactly one way, and every buffer's `below` lists
    only buffers earlier in the evaluation order (so the orientation is acyclic and the
    recurrence well defined). Then numerically: `plan.at` (itself checked by
    `check.verify_plan`) at every combination of `sample_dims`, and the plan at each
    dim's max no larger than `upper`."""
    ids = list(plan.lifetimes)
    starts = np.array([plan.lifetimes[b][0] for b in ids], dtype=np.int64)
    ends = np.array([plan.lifetimes[b][1] for b in ids], dtype=np.int64)
    together = (starts[:, None] < ends[None, :]) & (starts[None, :] < ends[:, None])
    np.fill_diagonal(together, False)
    for orientation in plan.orientations:
        _verify_orientation(orientation, ids, together)
    for dims in sample_dims(plan.dims, interior):
        plan.at(**dims)
    top = plan.at(**plan.representative).arena_size
    if top > plan.upper.arena_size:
        raise PlanError(
            f"the arena at each dim's max, {top} B, exceeds the static plan's "
            f"{plan.upper.arena_size} B"
        )
