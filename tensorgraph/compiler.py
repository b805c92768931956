"""`compile`: the one driver of the pipeline, and the `Program` it produces.

    rewrites (dce -> cse -> fold -> transposed_matmul)  change the computation, keep every output
    -> schedule                              an order of the nodes (memory-aware)
    -> alias analysis for that order         views, reinplacing -> Aliasing
    -> liveness -> offsets -> verify_plan    one liveness analysis; the plan proven safe

The user's `passes` name which rewrites and which alias analyses run; the compiler fixes
the order above, so every subset is safe and none is order-dependent. The input graph is
never mutated, and the graph holds no memory decision: recompiling `prog.graph` (or a
JSON copy of it) under any options is as safe as compiling the source. Plans are
deterministic: every search counts work, never seconds (a `time_limit` is an optional
cap, and the statistics say when it cut a search short). `verify_plan` checks every
plan; debug mode (the `debug` argument or TENSORGRAPH_DEBUG) also verifies the graph
after every rewrite and replays the plan byte by byte.

The options and their validation are compile_options.py's; the `Program` this driver
returns is program.py's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tensorgraph.compile_options import (
    DEFAULT_PASSES,
    PASS_ALIASES,
    CompileOptions,
    _check_state_region,
    check_options,
    debug_default,
)
from tensorgraph.errors import GraphError, PlanError, TensorGraphError
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.verify import verify
from tensorgraph.planner.aliasing import Aliasing, analyze_aliasing
from tensorgraph.program import BACKENDS, RUN_OPTIONS, Program, check_run_arguments

# The names of the options and the Program, defined here before they moved to
# compile_options.py and program.py, re-exported: the package face, multi.py,
# program_io.py, remat.py, calls.py, tests and benches import them from here.
__all__ = [
    "BACKENDS",
    "DEFAULT_PASSES",
    "PASS_ALIASES",
    "RUN_OPTIONS",
    "CompileOptions",
    "Program",
    "_check_state_region",
    "check_options",
    "check_run_arguments",
    "compile",
    "debug_default",
]


def _rewrite(
    graph: Graph, options: CompileOptions, debug: bool
) -> tuple[Graph, dict[str, dict[str, object]]]:
    """Run the chosen rewrites in the compiler's order, recording each one's counters and
    its effect on the program-order lower bound of the plan (planned sizes)."""
    from tensorgraph.passes import REWRITES
    from tensorgraph.planner.schedule import CostModel

    def bound(g: Graph) -> int:
        model = CostModel(
            g, options.analyses, options.alignment, options.params_in_arena, options.tail_guard
        )
        return model.peak(tuple(n.id for n in g.nodes))

    stats: dict[str, dict[str, object]] = {}
    before = bound(graph)
    for name in options.rewrites:
        result = REWRITES[name](graph)
        if debug:
            try:
                verify(result.graph)
            except TensorGraphError as err:
                raise type(err)(f"after pass {name!r}: {err}") from err
        after = before if result.graph is graph else bound(result.graph)
        stats[name] = {**result.stats, "lower_bound": after, "bytes_saved": before - after}
        graph, before = result.graph, after
    return graph, stats


def _analysis_stats(
    graph: Graph, order: tuple[int, ...], aliasing: Aliasing, options: CompileOptions
) -> dict[str, dict[str, object]]:
    """Per alias analysis: how many nodes it aliased, their bytes, and the lower bound
    with the analyses up to it (so `bytes_saved` is each analysis's own effect)."""
    from tensorgraph.planner.schedule import CostModel

    stats: dict[str, dict[str, object]] = {}
    before = CostModel(
        graph, (), options.alignment, options.params_in_arena, options.tail_guard
    ).peak(order)
    kinds = {
        "view_alias": ("view", "aliased", "view_bytes"),
        "copy_elim": ("concat", "placed", "copy_bytes_eliminated"),
        "reinplace": ("inplace", "reinplaced", "bytes_reused"),
    }
    ran: list[str] = []
    for name in options.analyses:
        ran.append(name)
        kind, count_key, bytes_key = kinds[name]
        members = [i for i, a in aliasing.aliases.items() if a.kind == kind]
        after = CostModel(
            graph, tuple(ran), options.alignment, options.params_in_arena, options.tail_guard
        ).peak(order)
        stats[name] = {
            count_key: len(members),
            bytes_key: sum(graph.node(i).nbytes for i in members),
            "lower_bound": after,
            "bytes_saved": before - after,
        }
        before = after
    return stats


def compile(
    graph: Graph | Mapping[str, Graph],
    passes: Sequence[str] = DEFAULT_PASSES,
    planner: str = "best",
    alignment: int = 64,
    *,
    schedule: str = "best",
    schedule_budget: int | None = None,
    planner_budget: int | None = None,
    time_limit: float | None = None,
    params_in_arena: bool = False,
    tail_guard: int = 0,
    debug: bool | None = None,
    states: tuple[Mapping[str, int], int] | None = None,
    memory_budget: int | None = None,
) -> Program:
    """Compile `graph` into a `Program` (see the module docstring for the pipeline).
    Given a dict of entry name -> Graph, compile them together into a `MultiProgram`
    sharing weights, state region and arena (tensorgraph/multi.py).

    `passes` names the rewrites (dce, cse, fold, transposed_matmul) and alias analyses (view_alias,
    copy_elim, reinplace) to run, in any order (the compiler fixes theirs; repeats are ignored).
    `planner` is the offset algorithm; `alignment` (bytes, a power of two, as on the
    command line) applies to every buffer
    offset and to every size the statistics and the report show. `schedule` picks the
    order ("program", "greedy", "subtree", or "best", never worse than "program").
    `schedule_budget` and `planner_budget` are the searches' work budgets (None: their
    defaults); `time_limit` (seconds) optionally caps each search's wall clock.
    `params_in_arena` plans params and constants inside the arena instead of a separate
    constant segment; `tail_guard` adds that many bytes after every boundary buffer.
    `states` is the state region's (layout, size) when compiling an entry of a
    multi-entry program (None: this graph's own states); `verify_plan` proves its
    states aligned, inside the region and disjoint.
    A graph with `tg.Dim`s compiles to a Program whose `plan` is a `ParametricPlan`, one
    plan exact at every length in the dims' ranges (tensorgraph/symbolic_program.py); such
    a graph may be an entry of a multi-entry program (its states, static, take the
    shared region's offsets).
    `memory_budget` (bytes, for a gradient graph or training step) makes the arena fit
    that many bytes at the least recompute: forward values the backward reads are
    recomputed instead of kept where needed (tensorgraph/remat.py; `prog.remat` reports
    the choice); a budget no choice reaches is a PlanError naming the smallest arena
    found. None: every value is kept and the order scheduled for the lowest peak.
    Raises GraphError on an unknown pass or an invalid graph, PlanError on a bad option
    or a plan that fails verification."""
    if isinstance(graph, Mapping):
        if memory_budget is not None:
            raise PlanError("memory_budget applies to one graph, not to a dict of entries")
        from tensorgraph.multi import compile_entries

        return compile_entries(
            graph,
            passes=passes,
            planner=planner,
            alignment=alignment,
            schedule=schedule,
            schedule_budget=schedule_budget,
            planner_budget=planner_budget,
            time_limit=time_limit,
            params_in_arena=params_in_arena,
            tail_guard=tail_guard,
            debug=debug,
        )
    if not isinstance(graph, Graph):
        raise GraphError(f"compile needs a tensorgraph Graph but got {type(graph).__name__}")
    if isinstance(passes, str):
        raise GraphError(f"passes must be a sequence of pass names, not the string {passes!r}")
    options = CompileOptions(
        tuple(dict.fromkeys(PASS_ALIASES.get(p, p) for p in passes)),
        planner,
        alignment,
        schedule,
        schedule_budget,
        planner_budget,
        time_limit,
        params_in_arena,
        tail_guard,
    )
    check_options(options)
    if memory_budget is not None:
        from tensorgraph.remat import check_budget

        check_budget(memory_budget)
    if states is not None:
        _check_state_region(states)
    debug = debug_default() if debug is None else debug
    if graph.dims:
        if not graph.outputs:
            raise GraphError(f"graph {graph.name!r} has no outputs; call g.output(...)")
        if memory_budget is not None:  # the budget's choice is made on one plan's sizes
            raise PlanError(
                f"graph {graph.name!r}: memory_budget applies to static graphs; compile "
                "tg.specialize(graph, ...) at the length the budget is for"
            )
        from tensorgraph.symbolic_program import compile_symbolic

        return compile_symbolic(graph, options, debug, states)
    verify(graph)
    if not graph.outputs:
        raise GraphError(f"graph {graph.name!r} has no outputs; call g.output(...)")
    rewritten, stats = _rewrite(graph, options, debug)
    if memory_budget is not None:
        from tensorgraph.remat import compile_to_budget

        return compile_to_budget(
            rewritten,
            memory_budget,
            options.alignment,
            options.analyses,
            lambda g, schedule_budget=None: _finish(
                graph,
                g,
                dict(stats),
                options
                if schedule_budget is None
                else _with_schedule_budget(options, schedule_budget),
                states,
                debug,
            ),
        )
    return _finish(graph, rewritten, stats, options, states, debug)


def _with_schedule_budget(options: CompileOptions, budget: int) -> CompileOptions:
    """`options` with the schedule search's work budget at most `budget` (remat's trial
    points are planned with less search than its answer: tensorgraph/remat.py)."""
    from attrs import evolve

    own = options.schedule_budget
    return evolve(options, schedule_budget=budget if own is None else min(own, budget))


def _finish(
    graph: Graph,
    rewritten: Graph,
    stats: dict[str, dict[str, object]],
    options: CompileOptions,
    states: tuple[Mapping[str, int], int] | None,
    debug: bool,
) -> Program:
    """Schedule, alias, plan and verify `rewritten` (the rewrites' result for `graph`)."""
    from tensorgraph.planner.plan import plan_memory
    from tensorgraph.planner.schedule import reorder
    from tensorgraph.planner.schedule import schedule as choose_order

    alignment, planner = options.alignment, options.planner
    params_in_arena, tail_guard = options.params_in_arena, options.tail_guard
    schedule_budget, planner_budget = options.schedule_budget, options.planner_budget
    time_limit = options.time_limit
    chosen = choose_order(
        rewritten,
        options.schedule,
        alignment=alignment,
        analyses=options.analyses,
        params_in_arena=params_in_arena,
        tail_guard=tail_guard,
        budget=schedule_budget,
        time_limit=time_limit,
    )
    ordered = reorder(rewritten, chosen.order)
    order = chosen.order
    stats["schedule"] = {
        "strategy": chosen.strategy,
        "program_peak": chosen.program_peak,
        "chosen_peak": chosen.peak,
        "work": chosen.work,
        "cut_short": chosen.cut_short,
    }
    aliasing = chosen.aliasing  # the cost model's, for this order and these analyses
    if aliasing is None:
        aliasing = analyze_aliasing(ordered, order, options.analyses, alignment=alignment)
    stats.update(_analysis_stats(ordered, order, aliasing, options))
    plan = plan_memory(
        ordered,
        order,
        aliasing,
        algorithm=planner,
        alignment=alignment,
        budget=planner_budget,
        time_limit=time_limit,
        params_in_arena=params_in_arena,
        tail_guard=tail_guard,
        states=states,
    )
    stats["plan"] = {"algorithm": planner, "cut_short": plan.cut_short}
    if debug:
        from tensorgraph.planner.replay import replay

        replay(ordered, plan, aliasing)
    return Program(ordered, order, aliasing, plan, options, stats, graph)
