"""The exact search against brute force on small instances: it finds a packing at the
optimum and proves the capacity below it infeasible."""

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorgraph.errors import PlanError
from tensorgraph.planner import Buffer, lower_bound, verify_assignment
from tensorgraph.planner.assign import place_in_order
from tensorgraph.planner.buffers import Assignment
from tensorgraph.planner.search import minimize_arena, search_offsets
from tensorgraph.planner.synthetic import random_buffers


@st.composite
def small_sets(draw: st.DrawFn) -> list[Buffer]:
    horizon = draw(st.integers(2, 8))
    buffers = []
    for i in range(draw(st.integers(1, 6))):
        start = draw(st.integers(0, horizon - 1))
        buffers.append(
            Buffer(i, draw(st.integers(1, 12)), start, draw(st.integers(start + 1, horizon)))
        )
    return buffers


def brute_force_optimum(buffers: list[Buffer]) -> int:
    """Every placement order with lowest-fit placement: some order reproduces any
    gravity-packed optimum (place buffers by increasing offset), so the minimum is exact."""
    return min(
        place_in_order(buffers, order, 1).arena_size
        for order in itertools.permutations(range(len(buffers)))
    )


def packed_top(buffers, offsets) -> int:
    return max(offsets[b.id] + b.size for b in buffers)


@settings(max_examples=80)
@given(small_sets())
def test_search_finds_the_optimum_and_proves_the_capacity_below(buffers) -> None:
    optimum = brute_force_optimum(buffers)
    # At most 6 buffers: a few thousand units settle any capacity, 10**7 is ample.
    found = search_offsets(buffers, optimum, 1, 10**7)
    assert found.offsets is not None and not found.cut_short
    verify_assignment(buffers, Assignment(found.offsets, packed_top(buffers, found.offsets)))
    assert packed_top(buffers, found.offsets) <= optimum
    below = search_offsets(buffers, optimum - 1, 1, 10**7)
    assert below.offsets is None and below.proven_infeasible


@settings(max_examples=40)
@given(small_sets(), st.sampled_from([1, 4, 16]))
def test_minimize_never_exceeds_the_incumbent(buffers, alignment) -> None:
    incumbent = place_in_order(buffers, list(range(len(buffers))), alignment)
    result = minimize_arena(buffers, alignment, incumbent, 10**6)
    verify_assignment(buffers, result, alignment)
    assert lower_bound(buffers) <= result.arena_size <= incumbent.arena_size
    assert result.work <= 10**6 and not result.cut_short


# Portfolios: any string of the preorder keys, alone or several round-robin.
heuristic_strings = st.text(alphabet="WSATZ", min_size=1, max_size=4)


@settings(max_examples=40)
@given(small_sets(), st.lists(heuristic_strings, min_size=1, max_size=3), st.integers(1, 4))
def test_any_portfolio_settles_the_optimum_and_the_capacity_below(
    buffers, heuristics, alignment
) -> None:
    # The optimum by brute force at alignment 1; with a coarser alignment the same
    # brute force runs on sizes rounded up (a packing of rounded sizes at aligned offsets
    # is exactly an aligned packing: each buffer owns its rounded extent).
    rounded = [Buffer(b.id, -(-b.size // alignment) * alignment, b.start, b.end) for b in buffers]
    optimum = brute_force_optimum(rounded) if alignment > 1 else brute_force_optimum(buffers)
    found = search_offsets(buffers, optimum, alignment, 10**7, heuristics=heuristics)
    assert found.offsets is not None and found.nodes >= 1
    plan = Assignment(found.offsets, packed_top(buffers, found.offsets))
    verify_assignment(buffers, plan, alignment)
    assert plan.arena_size <= optimum
    below = search_offsets(buffers, optimum - 1, alignment, 10**7, heuristics=heuristics)
    assert below.offsets is None and below.proven_infeasible


@settings(max_examples=15)
@given(st.integers(0, 10**6), st.integers(0, 3))
def test_same_budget_same_result(budget, seed) -> None:
    buffers = random_buffers(60, seed)
    capacity = lower_bound(buffers)
    first = search_offsets(buffers, capacity, 1, budget)
    again = search_offsets(buffers, capacity, 1, budget)
    assert first == again and first.work <= budget
    if first.offsets is not None:
        verify_assignment(buffers, Assignment(first.offsets, packed_top(buffers, first.offsets)))


@pytest.mark.parametrize("bad", ["WAT", [], ["WAX"], [""], [3]])
def test_bad_portfolio_is_a_plan_error(bad) -> None:
    with pytest.raises(PlanError, match="heuristic"):
        search_offsets([Buffer(0, 4, 0, 1)], 4, 1, 1000, heuristics=bad)
