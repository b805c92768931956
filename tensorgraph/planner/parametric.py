"""The parametric plan: one memory plan for every length in the dims' ranges, exact at
each length.

A symbolic graph's buffers have sizes that are expressions of its `tg.Dim`s, but their
lifetimes depend only on the order and the aliasing's structure (which value lives in
which root), so one set of lifetimes serves every length. The construction:

1. orient every pair of conflicting buffers (lifetimes intersect): one sits below the
   other. An orientation is a static plan's at one length: a below b when b's offset
   there is higher (ties by size, then position), a total order restricted to the
   conflicting pairs, hence acyclic;
2. at given dims, each buffer's offset is the maximum, over the conflicting buffers
   below it, of their offset plus their size at those dims, rounded up to the alignment
   (0 with none below); the arena is the highest end, aligned.

The plan keeps a few orientations (`parametric_build`): the static plan's at each dim's
max, and those of static plans at shorter lengths that give the smallest arena at their
own length; `at` evaluates each and takes the smallest arena. Each orientation is safe
for every length on its own, so choosing per length is too. (With the max's alone, the
zoo Llama's arena was 1.53x the static plan's at short lengths: its attention scores,
quadratic in the length, set that orientation, where the linear buffers dominate short
lengths.)

Why no two live buffers overlap, for any value in range: for a conflicting pair with a
below b, step 2 gives offset(b) >= offset(a) + size(a) whatever the sizes are, so their
byte ranges are disjoint; every conflicting pair is oriented, so every pair is covered.
At a static plan's own length its offsets satisfy every constraint of its orientation's
step 2, so the parametric offsets there are no higher (each is the least that satisfies
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
from tensorgraph.ir.dims import Dim, Extent, canonical
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.ops import view_offset
from tensorgraph.planner.aliasing import Alias, Aliasing
from tensorgraph.planner.buffers import Assignment, align_up
from tensorgraph.planner.copy_elim import concat_slots
from tensorgraph.planner.liveness import Liveness, analyze
from tensorgraph.planner.plan import MemoryPlan, assemble_plan

CACHED_LENGTHS = 16  # concrete plans kept per parametric plan (most recently used)
INTERIOR_SAMPLES = 3  # interior values per dim that `verify_parametric` checks


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
        return {i: cached_canonical(a.offset) for i, a in at.aliases.items()}

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
            offsets[b] = cached_canonical(sympy.ceiling(top / self.alignment) * self.alignment)
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
        return evaluate_sizes(self.sizes, self.dims, values)

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


def evaluate_sizes(
    sizes: Mapping[Hashable, Extent | None], dims: Mapping[str, Dim], values: Mapping[str, int]
) -> dict[Hashable, int | None]:
    """buffer id -> its size expression in `sizes` at `values` (dim name -> int, for the
    `dims` of that name), None where it has none; each distinct expression once."""
    bound = {dims[n]: sympy.Integer(v) for n, v in values.items()}
    seen: dict[object, int] = {}
    out: dict[Hashable, int | None] = {}
    for b, size in sizes.items():
        if size is None or type(size) is int:
            out[b] = size
            continue
        if size not in seen:
            seen[size] = int(size.xreplace(bound))
        out[b] = seen[size]
    return out


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


@lru_cache(maxsize=4096)
def cached_canonical(size: Extent) -> Extent:
    """`dims.canonical`, memoised: a model repeats a few sizes over all its layers."""
    return canonical(size)


# ---------------------------------------------------------------- verification


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
