"""Work budgets: `best` and the exact search decide by counted work, never by the clock,
so a plan is the same under any load; an explicit time limit caps them and says so."""

import math
import multiprocessing
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorgraph.errors import PlanError
from tensorgraph.planner import Buffer, assign_offsets, lower_bound, verify_assignment
from tensorgraph.planner import work as work_module
from tensorgraph.planner.assign import greedy_breadth, greedy_size, naive
from tensorgraph.planner.search import default_budget, minimize_arena, search_offsets
from tensorgraph.planner.synthetic import random_buffers
from tests.planner.test_assign import interval_sets

# Dense random sets where the greedy packings stay above the lower bound, so `best`
# spends its budget instead of stopping at the bound (asserted in `hard`).
INSTANCES = ((150, 2), (250, 1), (350, 5))


def hard(n: int, seed: int) -> list[Buffer]:
    buffers = random_buffers(n, seed)
    assert greedy_size(buffers, 1).arena_size > lower_bound(buffers), "not a hard instance"
    return buffers


def _spin(ready, seconds: float) -> None:
    """Busy-loop on one CPU for at most `seconds` (a child process: load for the parent)."""
    ready.set()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def test_best_gives_identical_offsets_under_cpu_load() -> None:
    instances = [hard(n, seed) for n, seed in INSTANCES]
    quiet = [assign_offsets(b, "best", 1, 60_000) for b in instances]
    context = multiprocessing.get_context("spawn")
    ready = [context.Event() for _ in range(2)]
    hogs = [context.Process(target=_spin, args=(r, 120.0), daemon=True) for r in ready]
    try:
        for hog in hogs:
            hog.start()
        assert all(r.wait(120) for r in ready), "the busy-loop processes did not start"
        loaded = [assign_offsets(b, "best", 1, 60_000) for b in instances]
    finally:
        for hog in hogs:
            hog.terminate()
        for hog in hogs:
            hog.join(30)
    for buffers, calm, busy in zip(instances, quiet, loaded, strict=True):
        assert busy == calm  # offsets, arena, work and cut_short, all equal
        assert not calm.cut_short
        verify_assignment(buffers, calm)
        # The search went past the baselines (2 placement passes cost far less).
        assert calm.work > 2 * greedy_size(buffers, 1).work


def test_best_never_reads_the_clock_without_a_time_limit(monkeypatch) -> None:
    buffers = hard(200, 2)
    expected = assign_offsets(buffers, "best", 64)

    def no_clock() -> float:
        raise AssertionError("the clock was read in a decision path")

    monkeypatch.setattr(work_module.time, "perf_counter", no_clock)
    assert assign_offsets(buffers, "best", 64) == expected
    assert search_offsets(buffers, expected.arena_size, 64, 50_000).work > 0


def test_a_time_limit_that_stops_the_search_is_reported() -> None:
    buffers = hard(300, 5)
    # A zero limit has passed before the first stage after the three baselines, which
    # always run: the plan is theirs, valid, and marked cut short.
    plan = assign_offsets(buffers, "best", 1, time_limit=0.0)
    assert plan.cut_short
    verify_assignment(buffers, plan)
    baselines = [f(buffers, 1).arena_size for f in (naive, greedy_size, greedy_breadth)]
    assert plan.arena_size == min(baselines)
    # A limit the work budget runs out long before changes nothing: same plan as without.
    assert assign_offsets(buffers, "best", 1, 20_000, time_limit=1e6) == assign_offsets(
        buffers, "best", 1, 20_000
    )
    tiny = search_offsets(buffers, lower_bound(buffers), 1, 10**9, time_limit=0.0)
    assert tiny.cut_short and tiny.offsets is None and not tiny.proven_infeasible


def test_a_binding_time_limit_still_reaches_every_stage() -> None:
    # A budget no clock allows: each stage gets its share of the time instead (half
    # to the skyline constructions, a tenth of the rest to reordering when no
    # construction beat the orders, ...), so the exact search still runs. An instance the
    # constructions leave above the bound.
    buffers = hard(250, 9)
    lines: list[str] = []
    plan = assign_offsets(buffers, "best", 1, 10**12, time_limit=1.0, progress=lines.append)
    assert plan.cut_short
    verify_assignment(buffers, plan)
    assert any(line.startswith("skyline constructions") for line in lines)
    assert any(line.startswith("repairing the packing") for line in lines)
    assert any(line.startswith("exact search at capacity") for line in lines)


def test_budget_zero_is_the_three_baselines() -> None:
    buffers = hard(250, 5)
    plan = assign_offsets(buffers, "best", 16, 0)
    baselines = [f(buffers, 16) for f in (naive, greedy_size, greedy_breadth)]
    assert plan.arena_size == min(b.arena_size for b in baselines)
    # Work: a unit a buffer for naive, plus what each greedy pass reports it cost.
    assert plan.work == sum(b.work for b in baselines)
    assert not plan.cut_short


def test_a_larger_budget_is_spent_and_reported() -> None:
    buffers = hard(300, 1)
    small, large = (assign_offsets(buffers, "best", 1, b) for b in (20_000, 200_000))
    assert small.work <= 20_000 < large.work <= 200_000  # work <= budget above baselines
    assert large.arena_size <= small.arena_size  # not promised in general; true here
    for plan in (small, large):
        verify_assignment(buffers, plan)


def test_default_budget_formula() -> None:
    # 100,000 units plus 40 a buffer, at most 500,000: 100,000 + 40 * 1,000 = 140,000;
    # 10,000 buffers would get 500,000 but the cap holds it there.
    assert default_budget(0) == 100_000
    assert default_budget(1_000) == 140_000
    assert default_budget(10_000) == 500_000
    assert default_budget(1_000_000) == 500_000


def test_progress_reports_every_stage_and_each_smaller_arena() -> None:
    buffers = hard(200, 8)
    lines: list[str] = []
    plan = assign_offsets(buffers, "best", 1, 100_000, progress=lines.append)
    assert lines[0].startswith("best: 200 buffers, bound ")
    assert lines[-1].startswith(f"best: arena {plan.arena_size:,} B, {plan.certificate} (work ")
    assert any(line.startswith("order by_size: arena") for line in lines)
    assert any(line.startswith("exact search (work") for line in lines)
    found = [
        int(line.split("arena ")[1].split(" B")[0].replace(",", ""))
        for line in lines
        if line.startswith(("order ", "reordering: arena"))
    ]
    assert found == sorted(found, reverse=True) and len(set(found)) == len(found)
    assert all(line.endswith(" of 100,000)") for line in lines)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"budget": -1}, r"budget must be None or an int >= 0 \(work units\) but got -1"),
        ({"budget": 1.5}, r"budget must be None or an int >= 0 \(work units\) but got 1.5"),
        ({"budget": True}, r"budget must be None or an int >= 0 \(work units\) but got True"),
        ({"budget": "10"}, r"but got '10'"),
        ({"time_limit": -0.5}, r"time_limit must be None or a number of seconds >= 0 but got -0.5"),
        ({"time_limit": math.nan}, r"time_limit must be .* but got nan"),
        ({"time_limit": "1"}, r"time_limit must be .* but got '1'"),
    ],
)
def test_bad_budgets_name_the_value(kwargs, message) -> None:
    buffers = [Buffer(0, 8, 0, 2), Buffer(1, 8, 1, 3)]
    with pytest.raises(PlanError, match=message):
        assign_offsets(buffers, "best", **kwargs)
    with pytest.raises(PlanError, match=message):
        search_offsets(buffers, 16, **kwargs)
    incumbent = assign_offsets(buffers, "naive")
    with pytest.raises(PlanError, match=message):
        minimize_arena(buffers, 1, incumbent, **kwargs)


def test_search_budget_runs_out_without_a_verdict() -> None:
    buffers = hard(300, 9)
    # Building the section tables and one fresh start cost more than 100 units, so no
    # node is searched: neither a packing nor a proof, and not cut short by any clock.
    result = search_offsets(buffers, lower_bound(buffers), 1, 100)
    assert result.offsets is None and not result.proven_infeasible and not result.cut_short
    again = search_offsets(buffers, lower_bound(buffers), 1, 100)
    assert again == result


@settings(max_examples=40)
@given(interval_sets(), st.integers(0, 30_000), st.sampled_from([1, 64]))
def test_work_stays_within_the_budget_once_the_baselines_are_paid(buffers, budget, alignment):
    plan = assign_offsets(buffers, "best", alignment, budget)
    verify_assignment(buffers, plan, alignment)
    baselines = sum(f(buffers, alignment).work for f in (naive, greedy_size, greedy_breadth))
    assert plan.work <= max(budget, baselines)
    assert plan == assign_offsets(buffers, "best", alignment, budget)
