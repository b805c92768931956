"""Offset algorithms on random interval sets: valid, never below the bound, `best` never
worse than the others, naive equal to the sum of aligned sizes."""

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorgraph.errors import PlanError
from tensorgraph.planner import Buffer, assign_offsets, lower_bound, verify_assignment
from tensorgraph.planner.assign import ALGORITHMS
from tensorgraph.planner.buffers import align_up, read_minimalloc_csv

# MiniMalloc's own example instance, kept in the repository
EXAMPLE = Path(__file__).resolve().parents[1] / "data" / "minimalloc_input.12.csv"


@st.composite
def interval_sets(draw: st.DrawFn, max_size: int = 40) -> list[Buffer]:
    """Random buffers with sizes 1..1e6 and lifetimes inside a short horizon, so many
    overlap (the hard case)."""
    horizon = draw(st.integers(2, 30))
    buffers = []
    for i in range(draw(st.integers(0, max_size))):
        start = draw(st.integers(0, horizon - 1))
        end = draw(st.integers(start + 1, horizon))
        size = draw(st.one_of(st.integers(1, 1_000_000), st.sampled_from([64, 1000, 4096])))
        buffers.append(Buffer(i, size, start, end))
    return buffers


@settings(max_examples=60)
@given(interval_sets(), st.sampled_from([1, 16, 64]))
def test_every_algorithm_is_valid_and_best_is_never_worse(buffers, alignment) -> None:
    bound = lower_bound(buffers, alignment)
    sizes = {}
    for name in ALGORITHMS:
        plan = assign_offsets(buffers, name, alignment, budget=20_000)
        verify_assignment(buffers, plan, alignment)
        assert plan.arena_size >= lower_bound(buffers, 1)
        assert align_up(plan.arena_size, alignment) >= bound
        sizes[name] = plan.arena_size
    assert sizes["best"] <= min(sizes.values())
    aligned = [align_up(b.size, alignment) for b in buffers]
    assert sizes["naive"] == (sum(aligned[:-1]) + buffers[-1].size if buffers else 0)


def test_lower_bound_counts_half_open_lifetimes() -> None:
    # [0, 2) and [2, 4) never coexist; [1, 3) overlaps both.
    buffers = [Buffer("a", 10, 0, 2), Buffer("b", 20, 2, 4), Buffer("c", 5, 1, 3)]
    assert lower_bound(buffers) == 25
    plan = assign_offsets(buffers, "best")
    verify_assignment(buffers, plan)
    assert plan.arena_size == 25


def test_minimalloc_example_reaches_its_capacity() -> None:
    buffers = read_minimalloc_csv(EXAMPLE)
    # The file's capacity (12) equals its lower bound, so 12 is optimal and reachable.
    assert lower_bound(buffers) == 12
    plan = assign_offsets(buffers, "best")
    verify_assignment(buffers, plan)
    assert plan.arena_size == 12


def test_edge_cases() -> None:
    assert assign_offsets([], "best").arena_size == 0
    one = [Buffer(0, 100, 0, 1)]
    assert assign_offsets(one, "greedy_size", 64).arena_size == 100
    zero = [Buffer(0, 0, 0, 5), Buffer(1, 8, 0, 5)]
    plan = assign_offsets(zero, "best")
    verify_assignment(zero, plan)
    assert plan.arena_size == 8
    with pytest.raises(PlanError, match="unknown algorithm 'fastest'"):
        assign_offsets(one, "fastest")
    with pytest.raises(PlanError, match="alignment must be a positive integer below 2"):
        assign_offsets(one, "naive", 0)
    with pytest.raises(PlanError, match="empty"):
        Buffer(0, 1, 3, 3)
