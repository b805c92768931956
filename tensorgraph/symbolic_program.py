"""Symbolic programs: `compile` of a graph over `tg.Dim`s, and its runs at any length.

The pipeline is `compiler`'s, deciding only what holds for every value of the dims:

    rewrites (dce -> cse -> fold) on the symbolic graph   fold leaves symbolic values (but
                                                          prefix_fold: a prefix of a
                                                          constant at the max is a view)
    -> schedule of the graph at each dim's max           the cost model's stated length
    -> alias analysis at each dim's max, kept only where it holds for every length
       (`parametric.range_failures`: an analysis with an alias the ranges do not decide
       is dropped, and the statistics name it and the condition)
    -> the static plan at each dim's max -> the parametric plan oriented by it
    -> the plan's orientation proven and checked at the ranges' corners

A run reads the dims from the feeds' shapes (`runtime.dim_feeds.bind_dims`: a length
outside its range is a RunError naming the dim, the value and the range), takes the
concrete program at those dims (the specialised graph, its aliasing and `plan.at(...)`:
exactly that arena) and runs it. On the MLX backend the concrete programs of the last
MLX_CACHED_LENGTHS lengths are kept (their per-length traces: the bounded cache of
compiled shapes) and share the symbolic program's one device copy of the weights, its
segmentation and its shapeless traces (codegen_mlx/symbolic.py).

A symbolic program may be an entry of a MultiProgram (tensorgraph/multi.py: generation's
prefill at the prompt's length): its static states then take the shared region's
offsets (`compile_symbolic(..., states=...)`), and each length's concrete program is
registered as sharing the entry's `Shared` record, so on MLX every length reads the one
device copy of the weights the other entries read.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Mapping

from tensorgraph.errors import PlanError, TensorGraphError
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.verify import verify
from tensorgraph.planner.aliasing import analyze_aliasing
from tensorgraph.planner.parametric import CACHED_LENGTHS, verify_parametric
from tensorgraph.planner.parametric_build import parametric_plan, range_failures
from tensorgraph.planner.plan import plan_memory, state_layout
from tensorgraph.planner.sharing import share, shared_of

MLX_CACHED_LENGTHS = 4  # concrete programs kept for the MLX backend, per symbolic program
_PROGRAMS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def compile_symbolic(
    graph: Graph,
    options: object,
    debug: bool,
    states: tuple[Mapping[str, int], int] | None = None,
) -> object:
    """The `Program` of symbolic `graph` under `options` (a CompileOptions), whose
    `plan` is a `ParametricPlan` (see the module docstring). `states` is the state
    region's (layout, size) when the graph is an entry of a multi-entry program (None:
    its own states'). PlanError for a state whose shape holds a dim (the state region
    is fixed across calls)."""
    from tensorgraph.compiler import Program
    from tensorgraph.passes import REWRITES
    from tensorgraph.planner.schedule import reorder
    from tensorgraph.planner.schedule import schedule as choose_order

    verify(graph)
    for node in graph.states:
        if node.symbolic:
            raise PlanError(
                f"state {node.name!r} has shape {node.shape}: a state's bytes persist across "
                "calls, so its shape must be static"
            )
    stats: dict[str, dict[str, object]] = {}
    rewritten = graph
    for name in options.rewrites:
        result = REWRITES[name](rewritten)
        if debug:
            try:
                verify(result.graph)
            except TensorGraphError as err:
                raise type(err)(f"after pass {name!r}: {err}") from err
        stats[name] = dict(result.stats)
        rewritten = result.graph
    if not rewritten.dims:  # the rewrites removed every value that held a dim
        from attrs import asdict, evolve

        from tensorgraph.compiler import compile

        static = compile(rewritten, **asdict(options, recurse=False), debug=debug, states=states)
        return evolve(static, source=graph)
    representative = {name: d.max for name, d in rewritten.dims.items()}
    at_max = rewritten.specialize(**representative)
    chosen = choose_order(
        at_max,
        options.schedule,
        alignment=options.alignment,
        analyses=options.analyses,
        params_in_arena=options.params_in_arena,
        tail_guard=options.tail_guard,
        budget=options.schedule_budget,
        time_limit=options.time_limit,
    )
    order = chosen.order
    ordered, ordered_at_max = reorder(rewritten, order), reorder(at_max, order)
    stats["schedule"] = {
        "strategy": chosen.strategy,
        "program_peak": chosen.program_peak,
        "chosen_peak": chosen.peak,
        "work": chosen.work,
        "cut_short": chosen.cut_short,
        "at": representative,
    }
    analyses, dropped = options.analyses, {}
    aliasing = chosen.aliasing  # the cost model's, for this order with every analysis
    while True:
        if aliasing is None:
            aliasing = analyze_aliasing(
                ordered_at_max, order, analyses, alignment=options.alignment
            )
        failures = range_failures(ordered, aliasing)
        if not failures:
            break
        dropped.update(failures)
        analyses = tuple(a for a in analyses if a not in failures)
        aliasing = None
    if states is None:
        states = state_layout([ordered_at_max], options.alignment)
    upper = plan_memory(
        ordered_at_max,
        order,
        aliasing,
        algorithm=options.planner,
        alignment=options.alignment,
        budget=options.planner_budget,
        time_limit=options.time_limit,
        params_in_arena=options.params_in_arena,
        tail_guard=options.tail_guard,
        states=states,
    )
    plan = parametric_plan(
        ordered,
        order,
        aliasing,
        upper,
        at_max=ordered_at_max,
        params_in_arena=options.params_in_arena,
        tail_guard=options.tail_guard,
        states=states,
    )
    verify_parametric(plan, interior=1 if debug else 0)
    stats["plan"] = {"algorithm": f"parametric ({options.planner} at the max)"}
    stats["parametric"] = {"representative": representative, "dropped_analyses": dropped}
    return Program(ordered, order, aliasing, plan, options, stats, graph)


def concrete_program(program: object, dims: Mapping[str, int], *, mlx: bool = False) -> object:
    """The static `Program` of symbolic `program` at `dims`: the specialised graph, its
    aliasing and `program.plan.at(**dims)`. The last CACHED_LENGTHS are kept for the
    NumPy backends and, apart (`mlx`), the last MLX_CACHED_LENGTHS for MLX, adopted by
    its executor (codegen_mlx/symbolic.py), which keeps each length's shape-dependent
    traces with it. PlanError for a dim missing or out of range."""
    from tensorgraph.compiler import Program

    caches = _PROGRAMS.setdefault(program, {"numpy": OrderedDict(), "mlx": OrderedDict()})
    cache, bound = (caches["mlx"], MLX_CACHED_LENGTHS) if mlx else (caches["numpy"], CACHED_LENGTHS)
    key = tuple(sorted(program.plan.values(dims).items()))
    if key in cache:
        cache.move_to_end(key)
        return cache[key]
    graph = program.plan.graph_at(**dims)
    plan = program.plan.at(**dims)
    concrete = Program(
        graph, program.order, plan.aliasing, plan, program.options, program.stats, program.source
    )
    shared = shared_of(program)
    if shared is not None:  # an entry of a MultiProgram: its lengths share its weights
        share(concrete, shared)
    if mlx:
        from tensorgraph.codegen_mlx.symbolic import prepare

        prepare(program, concrete)
    cache[key] = concrete
    if len(cache) > bound:
        cache.popitem(last=False)
    return concrete


def cached_lengths(program: object) -> dict[str, list[dict[str, int]]]:
    """ "numpy" (both NumPy backends) and "mlx" -> the dims of the concrete programs kept
    for symbolic `program`, least recently used first."""
    caches = _PROGRAMS.get(program, {"numpy": {}, "mlx": {}})
    return {name: [dict(key) for key in cache] for name, cache in caches.items()}


def run_symbolic(
    program: object,
    inputs: Mapping[str, object],
    params: Mapping[str, object] | None,
    backend: str,
    state: object | None,
    options: Mapping[str, object],
) -> list:
    """One run of symbolic `program` at the dims its feeds carry (module docstring)."""
    from tensorgraph.runtime.dim_feeds import bind_dims

    dims = bind_dims(program.graph, inputs, params)
    concrete = concrete_program(program, dims, mlx=backend == "mlx")
    if state is None and program.graph.states:
        state = program.state(backend)
    return concrete.run(inputs, params, backend, state=state, **options)
