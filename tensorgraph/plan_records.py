"""Reading a compiled program's memory plan back from its saved record (program_io.py
writes the record; this module turns it into a plan again without planning).

Invariant: nothing here trusts the file. A static plan is the stored offsets laid over
liveness recomputed from (graph, order, aliasing), and its arena must equal the stored
one; a parametric plan is the static plan at each dim's max plus the stored rankings
turned back into orientations, proven by `verify_parametric`. Every malformed field is a
LoadError naming the file and the field, never a partial plan.
"""

from __future__ import annotations

from pathlib import Path

from tensorgraph.errors import LoadError
from tensorgraph.ir.graph import Graph


def int_field(where: Path, value: object, what: str) -> int:
    """`value` when it is a JSON integer (not a bool, a float or a string), else
    LoadError naming `what` and the value."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise LoadError(f"{where}: {what} must be an integer but got {value!r}")
    return value


def mapping_field(where: Path, value: object, what: str) -> dict:
    """`value` when it is a JSON object, else LoadError naming `what` and the value."""
    if not isinstance(value, dict):
        raise LoadError(f"{where}: {what} must be a JSON object but got {value!r:.60}")
    return value


def static_plan_record(
    where: Path, graph: Graph, order: tuple, aliasing: object, options: object, saved: dict
) -> object:
    """The MemoryPlan of static `graph` from its record's offsets (unverified)."""
    from tensorgraph.planner.buffers import Assignment
    from tensorgraph.planner.liveness import analyze
    from tensorgraph.planner.plan import assemble_plan

    liveness = analyze(
        graph,
        order,
        aliasing,
        params_in_arena=options.params_in_arena,
        tail_guard=options.tail_guard,
    )
    offsets = {
        int_field(where, b, "a buffer id"): int_field(where, o, f"the offset of buffer {b}")
        for b, o in saved["buffer_offsets"]
    }
    top = max((offsets.get(b.id, 0) + b.size for b in liveness.buffers), default=0)
    assignment = Assignment(offsets, top)
    layout = {
        str(k): int_field(where, v, f"the state offset of {k!r}")
        for k, v in mapping_field(where, saved.get("state_layout", {}), "plan.state_layout").items()
    }
    plan = assemble_plan(
        graph,
        liveness,
        assignment,
        str(saved["algorithm"]),
        options.alignment,
        aliasing,
        states=(layout, int_field(where, saved.get("state_size", 0), "plan.state_size")),
    )
    if plan.arena_size != saved["arena_size"]:
        raise LoadError(
            f"{where}: the stored offsets give an arena of {plan.arena_size} bytes, "
            f"but the file records {saved['arena_size']}"
        )
    return plan


def parametric_plan_record(
    where: Path, graph: Graph, order: tuple, aliasing: object, options: object, saved: dict
) -> object:
    """The ParametricPlan of symbolic `graph` from its record: the static plan at each
    dim's max (offsets laid over the liveness recomputed there, verified), the saved
    rankings turned back into orientations over the conflicts of its lifetimes, and the
    whole proven by `verify_parametric` (every conflicting pair oriented, acyclic, and
    `at(...)` verified at the ranges' ends and interior samples). The dims' ranges come
    with the graph's JSON, so `at(...)` is the saved program's at every length."""
    from tensorgraph.planner.check import verify_plan
    from tensorgraph.planner.parametric import verify_parametric
    from tensorgraph.planner.parametric_build import (
        assemble_parametric,
        conflicts,
        ranking_orientation,
    )

    at_max = graph.specialize(**{name: d.max for name, d in graph.dims.items()})
    upper = static_plan_record(where, at_max, order, aliasing, options, saved)
    verify_plan(at_max, upper, aliasing)
    ids = {int(b.id): b.id for b in upper.buffers}  # workspace ids are ints of a subclass
    lifetimes = {b.id: (b.start, b.end) for b in upper.buffers}
    pairs = conflicts(lifetimes)
    orientations = []
    for k, entry in enumerate(saved["orientations"]):
        entry = mapping_field(where, entry, f"plan.orientations[{k}]")
        ranked = [int_field(where, b, f"a buffer of orientation {k}") for b in entry["ranked"]]
        if sorted(ranked) != sorted(ids):
            raise LoadError(
                f"{where}: orientation {k} ranks other buffers than the plan at each dim's "
                "max holds"
            )
        source = {
            str(n): int_field(where, v, f"the source dim {n!r} of orientation {k}")
            for n, v in mapping_field(where, entry["source"], f"orientation {k}'s source").items()
        }
        orientations.append(ranking_orientation([ids[b] for b in ranked], pairs, source))
    if not orientations:
        raise LoadError(f"{where}: a parametric plan needs at least one orientation")
    plan = assemble_parametric(
        graph,
        order,
        aliasing,
        upper,
        orientations,
        at_max,
        params_in_arena=options.params_in_arena,
        tail_guard=options.tail_guard,
        states=(dict(upper.state_layout), upper.state_size),
    )
    verify_parametric(plan)
    return plan
