"""The options of a compile: which rewrites and alias analyses run, the planner, the
schedule strategy, the alignment and the searches' budgets, recorded as a
`CompileOptions` in the Program and in its file, and their validation.

Invariants: `check_options` refuses every invalid option before any work, naming it and
its value (an unknown pass, planner or schedule; an alignment that is not a power of
two; a negative budget, time limit or tail guard), and both `compile` and `tg.load` call
it, so no Program, compiled or loaded, carries an option the compiler would refuse.
`CompileOptions.rewrites` and `.analyses` list the chosen passes in the compiler's
order, whatever order the user named them in.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from attrs import frozen

from tensorgraph.errors import GraphError, PlanError
from tensorgraph.planner.aliasing import ANALYSES

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
