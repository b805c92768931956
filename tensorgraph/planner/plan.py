"""The memory plan of a compiled graph: byte offsets for every value, one arena.

`plan_memory` runs liveness for an order and an aliasing, an offset algorithm, and (by
default) the independent verifier `check.verify_plan`. Invariants of a `MemoryPlan`:

- every arena buffer sits at an `alignment`-aligned offset inside `[0, arena_size)`, and
  `arena_size` is a multiple of `alignment`;
- buffers whose lifetimes overlap share no byte;
- `offsets` covers every node whose storage is in the arena: a root at its buffer's
  offset, a view or in-place node at its root's offset plus its byte offset in the root;
- params and constants outside the arena sit back to back in the constant segment
  (`constant_offsets`, each aligned, none shared; views of them included);
- states sit in the state region at the offsets of `state_layout` (name -> offset,
  aligned, none shared; one layout for every entry of a multi-entry program), and
  every value written in place over a state or viewing one is located there
  (`state_offsets`); the region persists across calls, the arena does not;
- `lower_bound <= arena_size <= total_unshared` (the last as every algorithm places a
  buffer at the lowest offset above the buffers it conflicts with).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence

from attrs import field, frozen

from tensorgraph.errors import GraphError, PlanError
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import describe
from tensorgraph.planner.aliasing import Aliasing
from tensorgraph.planner.assign import assign_offsets
from tensorgraph.planner.buffers import Assignment, Buffer, align_up, lower_bound
from tensorgraph.planner.liveness import NO_ALIASING, Liveness, analyze


@frozen
class MemoryPlan:
    """Where every value of a compiled graph lives (see the module docstring).

    Sizes and offsets are bytes. `buffer_offsets` is what the algorithm chose per buffer
    (root id); `offsets` derives every arena node's offset from it."""

    arena_size: int
    lower_bound: int
    offsets: Mapping[int, int]
    buffer_offsets: Mapping[int, int]
    constant_offsets: Mapping[int, int]
    constant_size: int
    buffers: tuple[Buffer, ...]
    liveness: Liveness
    algorithm: str
    alignment: int
    planning_seconds: float
    cut_short: bool = False  # a wall-clock time_limit stopped the offset search early
    aliasing: Aliasing = NO_ALIASING  # the alias decisions the plan was made with
    state_offsets: Mapping[int, int] = field(factory=dict)
    state_size: int = 0
    state_layout: Mapping[str, int] = field(factory=dict)

    @property
    def total_unshared(self) -> int:
        """Bytes with no reuse at all: the sum of aligned buffer sizes (the naive arena)."""
        return sum(align_up(b.size, self.alignment) for b in self.buffers)

    @property
    def bytes_saved(self) -> int:
        """Bytes that reuse saves over the naive arena: `total_unshared - arena_size`."""
        return self.total_unshared - self.arena_size

    @property
    def ratio(self) -> float:
        """arena / lower bound (1.0 is optimal for this schedule)."""
        return self.arena_size / self.lower_bound if self.lower_bound else 1.0

    def locate(self, node_id: int) -> tuple[str, int]:
        """Where node `node_id`'s bytes start: ("arena", offset), ("constants", offset)
        or ("state", offset). PlanError when the plan gives the node no bytes."""
        if node_id in self.offsets:
            return "arena", self.offsets[node_id]
        if node_id in self.constant_offsets:
            return "constants", self.constant_offsets[node_id]
        if node_id in self.state_offsets:
            return "state", self.state_offsets[node_id]
        raise PlanError(f"%{node_id}: the plan gives this value no bytes")

    def segment_size(self, segment: str) -> int:
        """Bytes of segment "arena", "constants" or "state"."""
        return {
            "arena": self.arena_size,
            "constants": self.constant_size,
            "state": self.state_size,
        }[segment]

    @property
    def peak_step(self) -> int:
        """The first schedule step with the most live bytes."""
        return self.liveness.peak_step()

    def live_at_peak(self) -> list[Buffer]:
        """The buffers live at the peak step, largest first. A buffer's id is the node
        that produces it (its root); these are what to change to shrink the arena."""
        return sorted(self.liveness.live_at(self.peak_step), key=lambda b: (-b.size, b.id))

    def report(self, graph: Graph, top: int = 20) -> str:
        """A text report of this plan for `graph` (the planned one): summary, the `top`
        largest buffers by offset, and the buffers live at the peak step."""
        from tensorgraph.planner.report import format_plan

        return format_plan(self, graph, top)

    def to_json(self) -> str:
        """The plan for tools: sizes, buffers with lifetimes and offsets, node offsets and
        the constant segment (JSON object keys are node ids as strings)."""
        document = {
            "arena_size": self.arena_size,
            "lower_bound": self.lower_bound,
            "alignment": self.alignment,
            "algorithm": self.algorithm,
            "planning_seconds": self.planning_seconds,
            "total_unshared": self.total_unshared,
            "peak_step": self.peak_step,
            "live_at_peak": [b.id for b in self.live_at_peak()],
            "buffers": [
                {
                    "id": b.id,
                    "size": b.size,
                    "start": b.start,
                    "end": b.end,
                    "offset": self.buffer_offsets[b.id],
                }
                for b in self.buffers
            ],
            "offsets": {str(k): v for k, v in self.offsets.items()},
            "constant_size": self.constant_size,
            "constant_offsets": {str(k): v for k, v in self.constant_offsets.items()},
            "state_size": self.state_size,
            "state_layout": dict(self.state_layout),
            "state_offsets": {str(k): v for k, v in self.state_offsets.items()},
            "schedule": list(self.liveness.steps),
        }
        return json.dumps(document)


def _constant_segment(graph: Graph, liveness: Liveness, alignment: int) -> tuple[dict, int]:
    """Offsets of constant-segment roots laid back to back (aligned), then their aliases."""
    offsets, cursor = {}, 0
    for root in liveness.constants:
        offsets[root] = cursor
        cursor = align_up(cursor + graph.node(root).nbytes, alignment)
    for node_id, where in liveness.storage.items():
        if where.root in offsets and node_id != where.root:
            offsets[node_id] = offsets[where.root] + where.offset
    return offsets, cursor


def state_layout(graphs: Sequence[Graph], alignment: int) -> tuple[dict[str, int], int]:
    """(state name -> offset, region size): every state of `graphs` once, in name order,
    back to back at `alignment`. GraphError when two graphs declare one name with
    different shapes or dtypes (entries of one program share each state's bytes)."""
    declared: dict[str, tuple[object, Graph]] = {}
    for graph in graphs:
        for node in graph.states:
            seen = declared.setdefault(node.name, (node, graph))
            if (seen[0].shape, seen[0].dtype) != (node.shape, node.dtype):
                raise GraphError(
                    f"state {node.name!r} is {seen[0].shape} {seen[0].dtype} in graph "
                    f"{seen[1].name!r} but {node.shape} {node.dtype} in graph {graph.name!r}"
                )
    layout, cursor = {}, 0
    for name in sorted(declared):
        layout[name] = cursor
        cursor = align_up(cursor + declared[name][0].nbytes, alignment)
    return layout, cursor


def _state_segment(graph: Graph, liveness: Liveness, layout: Mapping[str, int]) -> dict[int, int]:
    """Offsets in the state region of every state root and the values aliased to it."""
    offsets = {}
    for root in liveness.states:
        name = graph.node(root).name
        if name not in layout:
            raise PlanError(f"{describe(graph.node(root))}: the state layout has no {name!r}")
        offsets[root] = layout[name]
    for node_id, where in liveness.storage.items():
        if where.root in offsets and node_id != where.root:
            offsets[node_id] = offsets[where.root] + where.offset
    return offsets


def plan_memory(
    graph: Graph,
    order: Sequence[int] | None = None,
    aliasing: Aliasing = NO_ALIASING,
    *,
    algorithm: str = "best",
    alignment: int = 64,
    budget: int | None = None,
    time_limit: float | None = None,
    params_in_arena: bool = False,
    tail_guard: int = 0,
    check: bool = True,
    states: tuple[Mapping[str, int], int] | None = None,
) -> MemoryPlan:
    """Plan `graph` run in `order` (its node order when None) with `aliasing`, placing
    buffers with offset algorithm `algorithm`.

    `alignment` (bytes) may be any positive integer, not only a power of two: the
    algorithms and the verifier only ever round offsets up to a multiple of it.
    `budget` (work units) and `time_limit` (seconds, a cap) bound `best`;
    `params_in_arena` and `tail_guard` are passed to `liveness.analyze`. `states` is
    the state region (`state_layout`'s result; None: this graph's own states). With `check`
    (the default), `check.verify_plan` proves the result independently of the
    algorithm and the alias analysis. Raises PlanError naming the bad option, or the
    buffers or nodes of a plan that fails verification."""
    if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment < 1:
        raise PlanError(f"alignment must be a positive integer (bytes) but got {alignment!r}")
    began = time.perf_counter()
    liveness = analyze(
        graph, order, aliasing, params_in_arena=params_in_arena, tail_guard=tail_guard
    )
    limits = {k: v for k, v in (("budget", budget), ("time_limit", time_limit)) if v is not None}
    assignment = assign_offsets(liveness.buffers, algorithm, alignment, **limits)
    seconds = time.perf_counter() - began
    states = state_layout([graph], alignment) if states is None else states
    plan = assemble_plan(
        graph, liveness, assignment, algorithm, alignment, aliasing, seconds, states
    )
    if check:
        from tensorgraph.planner.check import verify_plan

        verify_plan(graph, plan, aliasing)
    return plan


def assemble_plan(
    graph: Graph,
    liveness: Liveness,
    assignment: Assignment,
    algorithm: str,
    alignment: int,
    aliasing: Aliasing,
    seconds: float = 0.0,
    states: tuple[Mapping[str, int], int] = ({}, 0),
) -> MemoryPlan:
    """The `MemoryPlan` for buffer offsets `assignment` over `liveness` (unverified: run
    `check.verify_plan` on it). Every node's offset derives from its root's buffer."""
    offsets = {
        node_id: assignment.offsets[where.root] + where.offset
        for node_id, where in liveness.storage.items()
        if where.root in assignment.offsets
    }
    constant_offsets, constant_size = _constant_segment(graph, liveness, alignment)
    return MemoryPlan(
        arena_size=align_up(assignment.arena_size, alignment),
        lower_bound=lower_bound(liveness.buffers, alignment),
        offsets=offsets,
        buffer_offsets=dict(assignment.offsets),
        constant_offsets=constant_offsets,
        constant_size=constant_size,
        buffers=liveness.buffers,
        liveness=liveness,
        algorithm=algorithm,
        alignment=alignment,
        planning_seconds=seconds,
        cut_short=bool(getattr(assignment, "cut_short", False)),
        aliasing=aliasing,
        state_offsets=_state_segment(graph, liveness, states[0]),
        state_size=states[1],
        state_layout=dict(states[0]),
    )
