"""`Program`: a compiled graph, frozen, with its order, aliasing and memory plan, and the
entry points that run it (`run`, its states, `memory`, `report`, `save`).

Invariants: a Program never changes after `compile` (or `tg.load`) made it; its `plan`
was made for exactly its (`graph`, `order`, `aliasing`) and passed `verify_plan`.
Executors keep their caches outside the program, keyed by it. `check_run_arguments`
refuses an unknown backend, ill-formed `inputs` or `params`, or an option the backend
does not take (RUN_OPTIONS) before anything runs, naming it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from attrs import field, frozen

from tensorgraph.compile_options import CompileOptions
from tensorgraph.errors import RunError
from tensorgraph.ir.graph import Graph
from tensorgraph.planner.aliasing import Aliasing
from tensorgraph.planner.footprint import Footprint, footprint
from tensorgraph.planner.parametric import ParametricPlan
from tensorgraph.planner.plan import MemoryPlan
from tensorgraph.remat import RematReport

BACKENDS = ("mlx", "numpy", "arena")


# The options `run` passes to each backend's executor (see Program.run); others are refused.
RUN_OPTIONS = {"mlx": ("mode", "device", "stats"), "numpy": (), "arena": ("fill", "aliasing")}


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
