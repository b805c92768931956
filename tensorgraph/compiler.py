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
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from attrs import field, frozen

from tensorgraph.errors import GraphError, PlanError, RunError, TensorGraphError
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.verify import verify
from tensorgraph.planner.aliasing import ANALYSES, Aliasing, analyze_aliasing
from tensorgraph.planner.footprint import Footprint, footprint
from tensorgraph.planner.parametric import ParametricPlan
from tensorgraph.planner.plan import MemoryPlan
from tensorgraph.remat import RematReport

DEFAULT_PASSES = (
    "dce",
    "cse",
    "fold",
    "transposed_matmul",
    "view_alias",
    "copy_elim",
    "reinplace",
)
# Other names a pass list may use: DESIGN.md calls copy elimination the "concat" analysis.
PASS_ALIASES = {"concat": "copy_elim"}
BACKENDS = ("mlx", "numpy", "arena")
# The options `run` passes to each backend's executor (see Program.run); others are refused.
RUN_OPTIONS = {"mlx": ("mode", "device", "stats"), "numpy": (), "arena": ("fill", "aliasing")}


def debug_default() -> bool:
    """Debug checks are on when TENSORGRAPH_DEBUG is set to anything but '' or '0'."""
    return os.environ.get("TENSORGRAPH_DEBUG", "") not in ("", "0")


@frozen
class CompileOptions:
    """Every option of a compile, as recorded in the Program (and its file)."""

    passes: tuple[str, ...] = DEFAULT_PASSES
    planner: str = "best"
    alignment: int = 64
    schedule: str = "best"
    schedule_budget: int | None = None
    planner_budget: int | None = None
    time_limit: float | None = None
    params_in_arena: bool = False
    tail_guard: int = 0

    @property
    def analyses(self) -> tuple[str, ...]:
        return tuple(a for a in ANALYSES if a in self.passes)

    @property
    def rewrites(self) -> tuple[str, ...]:
        from tensorgraph.passes import REWRITES

        return tuple(r for r in REWRITES if r in self.passes)


@frozen(eq=False)
class Program:
    """A compiled graph, frozen: `graph` (rewritten; its node list is in `order`), the
    `aliasing` computed for that order, the memory `plan`, the `options` that made it,
    and per-stage `stats`. `source` is the graph given to `compile` (the program's own
    graph after `load`). Executors keep their caches outside the program, keyed by it.

    Invariants: `order` is a topological order of `graph` equal to its node order;
    `plan` was made for exactly (`graph`, `order`, `aliasing`) and passed `verify_plan`.
    A graph over `tg.Dim`s has a `ParametricPlan` (its `aliasing` the structure at each
    dim's max; `plan.arena_size` and the other MemoryPlan fields read at each dim's max,
    `plan.at(seq=40)` the concrete plan) and runs at any length in range on every
    backend (tensorgraph/symbolic_program.py)."""

    graph: Graph
    order: tuple[int, ...]
    aliasing: Aliasing
    plan: MemoryPlan | ParametricPlan
    options: CompileOptions
    stats: Mapping[str, Mapping[str, object]] = field(factory=dict)
    source: Graph | None = None
    # What rematerialisation under `memory_budget` chose (tensorgraph/remat.py); None
    # when compiled without a budget (or loaded from a file).
    remat: RematReport | None = None

    @property
    def schedule(self) -> tuple[int, ...]:
        """Node ids in execution order (the same as `order`)."""
        return self.order

    @property
    def schedule_stats(self) -> Mapping[str, object]:
        return self.stats.get("schedule", {})

    def run(
        self,
        inputs: Mapping[str, object],
        params: Mapping[str, object] | None = None,
        backend: str = "mlx",
        *,
        state: object | None = None,
        **options: object,
    ) -> list:
        """Outputs in the graph's output order (`graph.returned`: state updates are
        committed, not returned) for `inputs` and `params` (bound params need not be
        given). A graph with states reads and updates `state` (a `State` from
        `new_state(backend)`; None: the program's own, `state(backend)`), see
        tensorgraph/calls.py. NumPy arrays in give NumPy arrays out; on the MLX backend,
        any mx.array feed gives mx.array outputs that stay on the device (mx.array feeds
        must have the declared dtype; NumPy arrays and Python data of another dtype are
        converted only when that is exact: see tensorgraph/runtime/feeds.py). RunError
        names a missing, extra or mistyped input, and `inputs` or `params` that is not a
        dict of name -> value; `backend` is one of BACKENDS. `options` go to the backend
        (RUN_OPTIONS; any other is a RunError naming it): the MLX backend's are `mode`
        ("auto", "eager", "compiled"), `device` ("cpu", "gpu") and `stats` (record a
        RunStats for `tensorgraph.codegen_mlx.last_run(prog)`), see
        tensorgraph/codegen_mlx/executor.py; the arena executor's are `fill` and
        `aliasing` (tensorgraph/runtime/arena.py)."""
        from tensorgraph.calls import call

        check_run_arguments(self.graph, inputs, params, backend, options)
        if self.graph.dims:
            from tensorgraph.symbolic_program import run_symbolic

            return run_symbolic(self, inputs, params, backend, state, options)
        return call(self, inputs, params, backend, state, options)

    def new_state(self, backend: str = "mlx") -> object:
        """A fresh `State` of this program for `backend`: each state at its initial value
        (`graph.state_values`) or zeros."""
        from tensorgraph.calls import new_state
        from tensorgraph.runtime.state import state_specs

        specs, plan = state_specs([self.graph]), self.plan
        initial = self.graph.state_values
        return new_state(specs, plan.state_layout, plan.state_size, backend, initial)

    def state(self, backend: str = "mlx") -> object:
        """The program's own `State` for `backend`: what `run` uses when given none,
        kept across calls (initial values or zeros at first)."""
        from tensorgraph.runtime.state import own_state

        return own_state(self, backend)

    def reset_state(self) -> None:
        """Every state of the program's own States back to its initial value or zeros."""
        from tensorgraph.runtime.state import reset_own_states

        reset_own_states(self)

    def memory(self) -> Footprint:
        """Every byte the program holds (planner/footprint.py): the constant segment by
        kind (float weights by dtype, quantized ones by bits), the state region, the
        arena, the inputs and outputs, and their total. A symbolic program's at each dim's
        max (the most it holds)."""
        if self.graph.dims:
            from tensorgraph.symbolic_program import concrete_program

            return concrete_program(self, self.plan.representative).memory()
        return footprint(self.graph, self.plan)

    def report(self) -> str:
        """The pass statistics and the memory plan's report, as text (a symbolic
        program's: the arena and lower bound at the ranges' ends, then the report of
        the program at each dim's max)."""
        from tensorgraph.planner.report import format_program_report

        if self.graph.dims:
            from tensorgraph.symbolic_program import concrete_program

            at_max = concrete_program(self, self.plan.representative)
            return self.plan.summary() + "\n" + format_program_report(at_max)
        return format_program_report(self)

    def save(self, path: str | os.PathLike, state: object | None = None) -> None:
        """Write the program to `path` (see `tensorgraph.program_io`); `tg.load` reads it
        back exactly and runs it without recompiling. With `state` (a State of this
        program), the loaded program's states start from its current values: a training
        run resumes where it was saved. A symbolic program saves its parametric plan (its
        dims' ranges and orientations): the loaded one gives the same `plan.at(...)` at
        every length."""
        from tensorgraph.program_io import save

        save(self, path, state)

    def __repr__(self) -> str:
        return (
            f"<Program {self.graph.name!r}: {len(self.graph)} nodes, "
            f"arena {self.plan.arena_size} B, lower bound {self.plan.lower_bound} B>"
        )


def check_run_arguments(
    graph: Graph,
    inputs: object,
    params: object,
    backend: str,
    options: Mapping[str, object],
) -> None:
    """RunError, before anything runs, for an unknown backend, `inputs` that is not a
    mapping of input name -> value (a list or None, say), `params` neither None nor a
    mapping, or an option `backend` does not take (RUN_OPTIONS), each named."""
    if backend not in BACKENDS:
        raise RunError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if not isinstance(inputs, Mapping):
        names = [n.attr("name") for n in graph.nodes if n.op == "input"]  # on error only
        raise RunError(
            f"graph {graph.name!r}: inputs must be a dict of input name -> array but got "
            f"{type(inputs).__name__}; its inputs: {', '.join(names) or 'none'}"
        )
    if params is not None and not isinstance(params, Mapping):
        raise RunError(
            f"graph {graph.name!r}: params must be None or a dict of param name -> array "
            f"but got {type(params).__name__}"
        )
    unknown = sorted(set(options) - set(RUN_OPTIONS[backend]))
    if unknown:
        known = ", ".join(RUN_OPTIONS[backend]) or "none"
        raise RunError(f"unknown option(s) {unknown} for backend {backend!r}; its options: {known}")


def check_options(options: CompileOptions) -> None:
    """Refuse an invalid option, naming it and its value: an unknown pass, planner or
    schedule (GraphError / PlanError), an alignment that is not a power of two (bytes;
    the command line's rule too), a negative budget, time limit or tail guard. `compile`
    and `tg.load` (for the options a program file records) both call it."""
    from tensorgraph.passes import REWRITES
    from tensorgraph.planner.assign import ALGORITHMS
    from tensorgraph.planner.schedule import STRATEGIES

    known = (*REWRITES, *ANALYSES)
    unknown = [p for p in options.passes if p not in known]
    if unknown:
        raise GraphError(f"unknown pass(es) {unknown}; known passes: {', '.join(known)}")
    if options.planner not in ALGORITHMS:
        raise PlanError(
            f"unknown planner {options.planner!r}; choose one of {', '.join(ALGORITHMS)}"
        )
    if options.schedule not in STRATEGIES:
        raise GraphError(
            f"unknown schedule {options.schedule!r}; choose one of {', '.join(STRATEGIES)}"
        )
    alignment = options.alignment
    if (
        isinstance(alignment, bool)
        or not isinstance(alignment, int)
        or alignment < 1
        or alignment & (alignment - 1)
    ):
        raise PlanError(f"alignment must be a power of two (bytes) but got {alignment!r}")
    for name in ("schedule_budget", "planner_budget"):
        value = getattr(options, name)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 0
        ):
            raise PlanError(f"{name} must be None or an int >= 0 (work units) but got {value!r}")
    limit = options.time_limit
    if limit is not None and (
        isinstance(limit, bool) or not isinstance(limit, int | float) or not limit >= 0
    ):
        raise PlanError(f"time_limit must be None or a number of seconds >= 0 but got {limit!r}")
    guard = options.tail_guard
    if isinstance(guard, bool) or not isinstance(guard, int) or guard < 0:
        raise PlanError(f"tail_guard must be an integer >= 0 but got {guard!r}")


def _check_state_region(states: object) -> None:
    """PlanError unless `states` is a (layout: state name -> int offset, size: int) pair;
    whether the offsets are sound for the graph is `verify_plan`'s to prove."""

    def is_int(value: object) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    if not (
        isinstance(states, tuple | list)
        and len(states) == 2
        and isinstance(states[0], Mapping)
        and all(isinstance(k, str) and is_int(v) for k, v in states[0].items())
        and is_int(states[1])
    ):
        raise PlanError(
            "states must be a (layout: dict of state name -> int offset, size: int) pair "
            f"but got {states!r}"
        )


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
