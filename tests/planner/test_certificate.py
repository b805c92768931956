"""Certificates of `best` and `minimize_arena`: the bounds they state hold against
brute force, "optimal" is claimed only at the optimum, and the same budget gives the
same certificate."""

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorgraph.errors import PlanError
from tensorgraph.planner import Buffer, assign_offsets, verify_assignment
from tensorgraph.planner.assign import greedy_size, place_in_order
from tensorgraph.planner.certificate import CertifiedAssignment, arena_bound
from tensorgraph.planner.search import minimize_arena
from tests.planner.test_search import brute_force_optimum, small_sets


def aligned_optimum(buffers: list[Buffer], alignment: int) -> int:
    """The smallest arena (unaligned top) of any aligned assignment: brute force over
    placement orders at aligned offsets. Lowest-fit at `alignment` reaches every
    gravity-packed aligned solution, as at alignment 1 (see brute_force_optimum)."""
    if alignment == 1:
        return brute_force_optimum(buffers)
    return min(
        place_in_order(buffers, order, alignment).arena_size
        for order in itertools.permutations(range(len(buffers)))
    )


@settings(max_examples=60)
@given(small_sets(), st.sampled_from([1, 4, 16]), st.integers(0, 200_000))
def test_certificate_brackets_the_true_optimum(buffers, alignment, budget) -> None:
    plan = assign_offsets(buffers, "best", alignment, budget)
    assert isinstance(plan, CertifiedAssignment)
    verify_assignment(buffers, plan, alignment)
    optimum = aligned_optimum(buffers, alignment)
    assert plan.bound == arena_bound(buffers, alignment) <= optimum <= plan.arena_size
    if plan.proven_infeasible is not None:
        assert plan.bound <= plan.proven_infeasible < optimum
    if plan.is_optimal:
        assert plan.arena_size == optimum and plan.certificate.startswith("optimal (")
    else:
        assert plan.certificate.startswith(f"optimum in [{plan.optimum_at_least:,}, ")
    again = assign_offsets(buffers, "best", alignment, budget)
    assert again == plan and again.certificate == plan.certificate


@settings(max_examples=30)
@given(small_sets())
def test_an_ample_budget_proves_optimality(buffers) -> None:
    # At most 6 buffers: 10**6 units settle every capacity the bisection tries, so it
    # ends at the optimum with the capacity one byte below proven (or at the bound).
    # Not so with a coarser alignment: the search packs aligned sizes, which cannot rule
    # out an arena whose top buffer ends short of its aligned extent (two overlapping
    # 2-byte buffers at alignment 4: arena 6, bound 5, and capacity 8 is feasible).
    plan = minimize_arena(buffers, 1, greedy_size(buffers, 1), 10**6)
    assert plan.is_optimal and plan.arena_size == brute_force_optimum(buffers)


def test_certificate_rejects_bounds_that_contradict_the_arena() -> None:
    with pytest.raises(PlanError, match="lower bound 20 exceeds the arena 16"):
        CertifiedAssignment({0: 0}, 16, bound=20)
    with pytest.raises(PlanError, match=r"proven infeasible arena 16 must lie in \[bound 8"):
        CertifiedAssignment({0: 0}, 16, bound=8, proven_infeasible=16)


def test_certificate_lines_by_hand() -> None:
    # Arena 100 at bound 100: optimal by the bound. Arena 100, 99 proven: optimal by
    # proof. Arena 100, bound 90, 94 proven: the optimum is in [95, 100].
    assert CertifiedAssignment({}, 100, bound=100).certificate.startswith("optimal (arena 100")
    proof = CertifiedAssignment({}, 100, bound=90, proven_infeasible=99)
    assert proof.is_optimal and "99 B proven infeasible" in proof.certificate
    gap = CertifiedAssignment({}, 100, bound=90, proven_infeasible=94)
    assert not gap.is_optimal and gap.certificate.startswith("optimum in [95, 100] B")
    assert CertifiedAssignment({}, 100, bound=90).certificate.startswith("optimum in [90, 100]")
