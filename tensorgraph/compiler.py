"""`compile`: graph -> passes -> schedule -> memory plan, giving a runnable `Program`.

The input graph is never mutated. In debug mode (the `debug` argument, or the
TENSORGRAPH_DEBUG environment variable that the test suite sets) the verifier runs after
every pass and the plan is checked with `verify_assignment`, whatever algorithm made it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import numpy as np

from tensorgraph.errors import GraphError, RunError
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.verify import verify

DEFAULT_PASSES = ("dce", "cse", "view_alias", "reinplace")
BACKENDS = ("mlx", "numpy", "arena")


def debug_default() -> bool:
    """Debug checks are on when TENSORGRAPH_DEBUG is set to anything but '' or '0'."""
    return os.environ.get("TENSORGRAPH_DEBUG", "") not in ("", "0")


class Program:
    """A compiled graph: the rewritten `graph` (whose node order is the `schedule`), the
    memory `plan`, and per-pass `stats`. `run` executes it on a backend."""

    def __init__(
        self,
        source: Graph,
        graph: Graph,
        plan: object,
        stats: dict,
        schedule_stats: dict | None = None,
    ) -> None:
        self.source = source
        self.graph = graph
        self.plan = plan
        self.stats = stats
        self.schedule_stats = schedule_stats or {}
        self.backend_cache: dict[str, object] = {}  # per-backend artefacts (MLX traces)

    @property
    def schedule(self) -> tuple[int, ...]:
        """Node ids in execution order."""
        return tuple(n.id for n in self.graph.nodes)

    def run(
        self,
        inputs: Mapping[str, np.ndarray],
        params: Mapping[str, np.ndarray] | None = None,
        backend: str = "mlx",
        **options: object,
    ) -> list[np.ndarray]:
        """Outputs (NumPy arrays, in the graph's output order) for `inputs` and `params`
        (bound params need not be given). RunError names a missing, extra or mistyped
        input; `backend` is one of "mlx", "numpy" (reference) and "arena"."""
        if backend == "numpy":
            from tensorgraph.runtime.reference import run_reference

            return run_reference(self.graph, inputs, params, **options)
        if backend == "arena":
            from tensorgraph.runtime.arena import run_arena

            return run_arena(self.graph, self.plan, inputs, params, **options)
        if backend == "mlx":
            from tensorgraph.codegen_mlx import run_mlx

            return run_mlx(self, inputs, params, **options)
        raise RunError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")

    def report(self) -> str:
        """The pass statistics and the memory plan's report, as text."""
        from tensorgraph.planner.report import format_program_report

        return format_program_report(self)

    def __repr__(self) -> str:
        return (
            f"<Program {self.graph.name!r}: {len(self.graph)} nodes, "
            f"arena {self.plan.arena_size} B, lower bound {self.plan.lower_bound} B>"
        )


def compile(
    graph: Graph,
    passes: Sequence[str] = DEFAULT_PASSES,
    planner: str = "best",
    alignment: int = 64,
    *,
    schedule: str = "best",
    debug: bool | None = None,
    time_budget: float | None = None,
    params_in_arena: bool = False,
    tail_guard: int = 0,
) -> Program:
    """Run `passes` (names, in order), then plan memory with algorithm `planner`.

    `schedule` picks the execution order ("program", "greedy", "subtree", or "best",
    which keeps the order with the lowest peak and is never worse than "program"); it
    runs just before reinplace, whose decisions depend on the order.
    `alignment` (bytes) applies to every buffer offset; `params_in_arena` plans params and
    constants inside the arena instead of a separate constant segment; `tail_guard` adds
    that many bytes after every boundary buffer. Raises GraphError on an unknown pass or
    an invalid graph, PlanError if the plan fails verification."""
    from tensorgraph.passes.manager import run_passes
    from tensorgraph.planner.plan import plan_memory

    if not isinstance(graph, Graph):
        raise GraphError(f"compile needs a tensorgraph Graph but got {type(graph).__name__}")
    debug = debug_default() if debug is None else debug
    verify(graph)
    if not graph.outputs:
        raise GraphError(f"graph {graph.name!r} has no outputs; call g.output(...)")
    rewritten, stats, schedule_stats = run_passes(
        graph, tuple(passes), schedule=schedule, debug=debug
    )
    plan = plan_memory(
        rewritten,
        algorithm=planner,
        alignment=alignment,
        time_budget=time_budget,
        params_in_arena=params_in_arena,
        tail_guard=tail_guard,
        check=debug,
    )
    return Program(graph, rewritten, plan, stats, schedule_stats)
