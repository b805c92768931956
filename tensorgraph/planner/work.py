"""Work budgets of the offset search: `Work` counts the units a search spends (nodes
and the entries they scan) against a budget, shared by its stages, with an optional
wall-clock cap; `default_budget` is `best`'s budget for a buffer count; the checks name
a bad budget, time limit or preordering. Counting units, not seconds, makes the same
buffers, capacity and budget give the same plan on any machine and under any load.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from tensorgraph.errors import PlanError
from tensorgraph.planner.canonical import KEYS


def default_budget(count: int) -> int:
    """Work units `best` may spend by default on `count` buffers (it stops at once when
    it reaches the bound): 100,000 plus 40 a buffer, at most 500,000 (about 0.1 s plus
    40 us a buffer, at most 0.5 s, on the quiet reference machine; up to five times as
    long under load, with the same plan)."""
    return min(500_000, 100_000 + 40 * count)


def check_heuristics(heuristics: object) -> tuple[str, ...]:
    """`heuristics` as a tuple; PlanError naming the value unless it is a non-empty
    sequence of non-empty strings of the letters of `planner.canonical.KEYS`."""
    if isinstance(heuristics, str) or not isinstance(heuristics, Sequence) or not heuristics:
        raise PlanError(
            f"heuristics must be a non-empty sequence of strings but got {heuristics!r}"
        )
    for h in heuristics:
        if not isinstance(h, str) or not h or set(h) - set(KEYS):
            raise PlanError(
                f"heuristic {h!r} must be a non-empty string of the letters {''.join(KEYS)}"
            )
    return tuple(heuristics)


def check_limits(budget: object, time_limit: object) -> None:
    """PlanError naming the value unless `budget` is None or an int >= 0 and
    `time_limit` is None or a number of seconds >= 0."""
    if budget is not None and (
        not isinstance(budget, int) or isinstance(budget, bool) or budget < 0
    ):
        raise PlanError(f"budget must be None or an int >= 0 (work units) but got {budget!r}")
    if time_limit is not None and (
        isinstance(time_limit, bool)
        or not isinstance(time_limit, int | float)
        or not time_limit >= 0
    ):
        raise PlanError(
            f"time_limit must be None or a number of seconds >= 0 but got {time_limit!r}"
        )


class Work:
    """Work units spent against a budget, shared by the stages of one search, plus an
    optional wall-clock cap.

    `spent` only grows. A stage takes a `share` of what is left: a ceiling on `spent`,
    and, under a time limit, the same share of the time left (so a binding clock splits
    the time between stages as the budget would have split the work). Without a time
    limit the clock is never read and every decision depends on counts alone; with one,
    `cut_short` becomes True the first time the clock stops work that the budget (or the
    stage's share of it) would still have allowed."""

    def __init__(self, budget: int, time_limit: float | None = None) -> None:
        self.budget = budget
        self.spent = 0
        self.nodes = 0  # exact-search nodes visited (a statistic: budgets count units)
        self.deadline = None if time_limit is None else time.perf_counter() + time_limit
        self.stage_deadline: float | None = None  # the current stage's share of the time
        self.cut_short = False

    def left(self, ceiling: int | None = None) -> int:
        """Units that may still be spent (under `ceiling` too, when given)."""
        limit = self.budget if ceiling is None else min(self.budget, ceiling)
        return max(0, limit - self.spent)

    def share(self, numerator: int, denominator: int) -> int:
        """Start a stage with `numerator / denominator` of the units (and time) left;
        returns its ceiling on `spent`."""
        if self.deadline is not None:
            now = time.perf_counter()
            self.stage_deadline = now + (self.deadline - now) * numerator / denominator
        return self.spent + self.left() * numerator // denominator

    def end_share(self) -> None:
        """End the current stage: from now on only the whole time limit applies."""
        self.stage_deadline = None

    def afford(self, units: int, ceiling: int | None = None) -> bool:
        """True when `units` more fit under the budget (and `ceiling`) and neither the
        time limit nor the stage's share of it, if any, has passed."""
        return units <= self.left(ceiling) and not self.timed_out()

    def charge(self, units: int) -> None:
        self.spent += units

    def clock_limit(self) -> float | None:
        """The earlier of the time limit and the stage's share of it (None: no limit)."""
        if self.deadline is None or self.stage_deadline is None:
            return self.deadline
        return min(self.deadline, self.stage_deadline)

    def timed_out(self) -> bool:
        """True when the time limit or the stage's share of it has passed (sets
        `cut_short`); never reads the clock without a time limit."""
        limit = self.clock_limit()
        if limit is None or time.perf_counter() < limit:
            return False
        self.cut_short = True
        return True
