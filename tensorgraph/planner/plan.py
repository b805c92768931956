"""The memory plan of a compiled graph: byte offsets for every value, one arena.

`plan_memory` runs liveness, an offset algorithm, and (in debug) the independent
verifier. Invariants of a `MemoryPlan`: every arena buffer sits at an aligned offset
inside `[0, arena_size)`; buffers whose lifetimes overlap share no byte; a view's offset
is its root's plus the view's byte offset; `lower_bound <= arena_size <= total_unshared`
(the last because `best` never does worse than `naive`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping

from attrs import frozen

from tensorgraph.errors import PlanError
from tensorgraph.ir.graph import Graph
from tensorgraph.planner.assign import assign_offsets
from tensorgraph.planner.buffers import Buffer, align_up, lower_bound
from tensorgraph.planner.liveness import Liveness, analyze
from tensorgraph.planner.verify import verify_assignment


@frozen
class MemoryPlan:
    """Where every value of a compiled graph lives (see the module docstring)."""

    arena_size: int
    lower_bound: int
    offsets: Mapping[int, int]
    constant_offsets: Mapping[int, int]
    constant_size: int
    buffers: tuple[Buffer, ...]
    buffer_offsets: Mapping[int, int]
    liveness: Liveness
    algorithm: str
    alignment: int
    planning_seconds: float

    @property
    def total_unshared(self) -> int:
        """Bytes with no reuse at all: the sum of aligned buffer sizes (naive arena)."""
        return sum(align_up(b.size, self.alignment) for b in self.buffers)

    @property
    def bytes_saved(self) -> int:
        return self.total_unshared - self.arena_size

    @property
    def ratio(self) -> float:
        """arena / lower bound (1.0 is optimal for this schedule)."""
        return self.arena_size / self.lower_bound if self.lower_bound else 1.0

    @property
    def peak_step(self) -> int:
        return self.liveness.peak_step()

    def live_at_peak(self) -> list[Buffer]:
        """Buffers live at the peak step, largest first: what to change to shrink the arena."""
        return sorted(self.liveness.live_at(self.peak_step), key=lambda b: (-b.size, b.id))

    def report(self, graph: Graph, top: int = 20) -> str:
        """A text report: summary, the largest buffers by offset, and the peak's buffers."""
        from tensorgraph.planner.report import format_plan

        return format_plan(self, graph, top)

    def to_json(self) -> str:
        """The plan for tools: sizes, buffers with lifetimes and offsets, node offsets."""
        document = {
            "arena_size": self.arena_size,
            "lower_bound": self.lower_bound,
            "alignment": self.alignment,
            "algorithm": self.algorithm,
            "planning_seconds": self.planning_seconds,
            "total_unshared": self.total_unshared,
            "peak_step": self.peak_step,
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
            "schedule": list(self.liveness.steps),
        }
        return json.dumps(document)


def plan_memory(
    graph: Graph,
    algorithm: str = "best",
    alignment: int = 64,
    time_budget: float | None = None,
    params_in_arena: bool = False,
    tail_guard: int = 0,
    check: bool = False,
) -> MemoryPlan:
    """Plan `graph` in its node order. `alignment` must be a positive integer (bytes);
    with `check`, `verify_assignment` validates the offsets whatever algorithm made them.
    Raises PlanError on a bad alignment or an assignment that fails verification."""
    if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment < 1:
        raise PlanError(f"alignment must be a positive integer but got {alignment!r}")
    began = time.perf_counter()
    liveness = analyze(graph, params_in_arena=params_in_arena, tail_guard=tail_guard)
    assignment = assign_offsets(liveness.buffers, algorithm, alignment, time_budget)
    if check:
        verify_assignment(liveness.buffers, assignment, alignment)
    offsets = {
        node_id: assignment.offsets[where.root] + where.offset
        for node_id, where in liveness.storage.items()
        if where.root in assignment.offsets
    }
    constant_offsets, cursor = {}, 0
    for root in liveness.constants:
        constant_offsets[root] = cursor
        cursor = align_up(cursor + graph.node(root).nbytes, alignment)
    for node_id, where in liveness.storage.items():
        if where.root in constant_offsets and node_id not in constant_offsets:
            constant_offsets[node_id] = constant_offsets[where.root] + where.offset
    return MemoryPlan(
        arena_size=align_up(assignment.arena_size, alignment),
        lower_bound=lower_bound(liveness.buffers, alignment),
        offsets=offsets,
        constant_offsets=constant_offsets,
        constant_size=cursor,
        buffers=liveness.buffers,
        buffer_offsets=dict(assignment.offsets),
        liveness=liveness,
        algorithm=algorithm,
        alignment=alignment,
        planning_seconds=time.perf_counter() - began,
    )
