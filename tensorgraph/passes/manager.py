"""The pass manager: runs named passes in order, verifies after each, keeps statistics.

Every pass is a pure function `graph -> PassResult` that never mutates its input. The
manager records each pass's own counters plus its effect on the schedule's lower bound
(`bytes_saved`), runs the optional memory-aware scheduler before `reinplace` (in-place
decisions depend on the order), and in debug mode verifies the graph after every step,
naming the step that broke an invariant.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tensorgraph.errors import GraphError, TensorGraphError
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.verify import verify
from tensorgraph.passes.cse import cse
from tensorgraph.passes.dce import dce
from tensorgraph.passes.reinplace import reinplace
from tensorgraph.passes.result import PassResult
from tensorgraph.passes.view_alias import view_alias
from tensorgraph.planner.buffers import lower_bound
from tensorgraph.planner.liveness import analyze

STATS_ALIGNMENT = 64  # the lower bound reported per pass, at the default plan alignment


PASSES: dict[str, Callable[[Graph], PassResult]] = {
    "dce": dce,
    "cse": cse,
    "view_alias": view_alias,
    "reinplace": reinplace,
}


def _bound(graph: Graph) -> int:
    return lower_bound(analyze(graph).buffers, STATS_ALIGNMENT)


def _checked(graph: Graph, step: str, debug: bool) -> None:
    if not debug:
        return
    try:
        verify(graph)
    except TensorGraphError as err:
        raise type(err)(f"after pass {step!r}: {err}") from err


def run_passes(
    graph: Graph,
    names: Sequence[str],
    *,
    schedule: str = "program",
    debug: bool = False,
    alignment: int = STATS_ALIGNMENT,
) -> tuple[Graph, dict[str, dict[str, int]], dict[str, object]]:
    """Run the passes `names` in order on `graph`; return the result, per-pass stats and
    scheduling stats. The scheduler (`schedule` != "program") runs just before reinplace,
    or last when reinplace is off. GraphError names an unknown pass or schedule."""
    unknown = [n for n in names if n not in PASSES]
    if unknown:
        raise GraphError(f"unknown pass(es) {unknown}; known passes: {', '.join(PASSES)}")
    stats: dict[str, dict[str, int]] = {}
    schedule_stats: dict[str, object] = {}
    before = _bound(graph)
    scheduled = schedule == "program"
    for name in names:
        if name == "reinplace" and not scheduled:
            graph, schedule_stats = _schedule(graph, schedule, alignment, inplace=True)
            _checked(graph, f"schedule {schedule}", debug)
            before, scheduled = _bound(graph), True
        result = PASSES[name](graph)
        _checked(result.graph, name, debug)
        after = _bound(result.graph) if result.graph is not graph else before
        stats[name] = {**result.stats, "lower_bound": after, "bytes_saved": before - after}
        graph, before = result.graph, after
    if not scheduled:
        graph, schedule_stats = _schedule(graph, schedule, alignment, inplace=False)
        _checked(graph, f"schedule {schedule}", debug)
    return graph, stats, schedule_stats


def _schedule(
    graph: Graph, strategy: str, alignment: int, inplace: bool
) -> tuple[Graph, dict[str, object]]:
    from tensorgraph.planner.schedule import reorder, schedule

    result = schedule(graph, strategy, alignment=alignment, inplace=inplace)
    stats = {
        "strategy": result.strategy,
        "program_peak": result.program_peak,
        "chosen_peak": result.peak,
    }
    return reorder(graph, result.order), stats
