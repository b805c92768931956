"""Certifying the recompute choice against the full multi-copy program (issue 27, item
3): the full program's dual bound is a lower bound on its points, the options that cut
HiGHS's root work change no optimum, solving the full program once at the answer's
model budget (instead of at every bisection trial) reaches the optimum solving it at
every trial does, planning trial points with a smaller schedule budget still gives a
program that fits, equals the reference bit for bit and is the same on every compile."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.planner import remat_milp
from tensorgraph.planner.remat_milp import Certificate, certify, solve_milp
from tensorgraph.planner.remat_single import solve_single_copy
from tests.training.remat_strategies import layered_networks
from tests.training.test_remat import (
    check_program,
    compile_or_smallest,
    deep_mlp_programs,
    feeds_for,
    halfway,
)
from tests.training.test_remat_multi import budget_between, gradient_model

UNLIMITED = 10**9


@settings(max_examples=4, deadline=None)
@given(graph=layered_networks(), fraction=st.floats(0.0, 1.0))
def test_the_dual_bound_is_below_every_point_and_equals_a_proven_optimum(graph, fraction):
    _, _, model = gradient_model(graph)
    budget = budget_between(model, fraction)
    cert = certify(model, budget, max_variables=UNLIMITED)
    if cert.point is None:  # infeasible (or no point within the node limit)
        assert cert.bound is None or math.isinf(cert.bound)
    else:
        assert cert.bound is not None and cert.bound <= cert.point.flops
        if cert.point.gap == 0.0:  # proven optimal: the bound is the optimum itself
            assert cert.bound == cert.point.flops and cert.gap(cert.point.flops) == 0.0
        # A larger budget never needs more FLOPs: its optimum is at most this bound.
        looser = certify(model, budget_between(model, 1.0), max_variables=UNLIMITED)
        assert looser.point is not None and looser.point.flops <= cert.point.flops
    single = solve_single_copy(model, budget)
    if single is not None and cert.bound is not None and not math.isinf(cert.bound):
        gap = cert.gap(single.flops)
        assert gap is not None and 0.0 <= gap <= 1.0
        assert (gap == 0.0) == (single.flops <= cert.bound)


@settings(max_examples=4, deadline=None)
@given(graph=layered_networks(), fraction=st.floats(0.0, 1.0))
def test_the_root_work_options_change_no_optimum(graph, fraction):
    _, _, model = gradient_model(graph)
    budget = budget_between(model, fraction)
    tuned = solve_milp(model, budget, max_variables=UNLIMITED)
    plain = solve_milp(model, budget, max_variables=UNLIMITED, options={})
    assert (tuned is None) == (plain is None)
    if tuned is not None and tuned.gap == 0.0 and plain.gap == 0.0:
        assert tuned.flops == plain.flops
        assert int(model.profile(tuned.recompute, tuned.emit).max()) <= budget


def test_certifying_once_reaches_the_optimum_of_solving_at_every_trial(monkeypatch):
    grads, keep, layers = deep_mlp_programs()
    budget = halfway(keep, layers)
    every_trial = tg.compile(grads, memory_budget=budget)
    assert every_trial.remat.method == "milp" and every_trial.remat.full_gap == 0.0
    monkeypatch.setattr(remat_milp, "MAX_VARIABLES", 0)  # the full program only at the end
    once = tg.compile(grads, memory_budget=budget)
    assert once.remat.full_gap == 0.0
    assert once.options.schedule_budget is None  # the answer re-planned with the full search
    assert once.remat.recompute_flops == every_trial.remat.recompute_flops
    feeds = feeds_for(grads)
    check_program(once, budget, keep.run(*feeds, backend="numpy"), feeds)


def test_without_any_full_program_no_full_gap_is_claimed(monkeypatch):
    grads, keep, layers = deep_mlp_programs()
    monkeypatch.setattr(remat_milp, "MAX_VARIABLES", 0)
    monkeypatch.setattr(remat_milp, "CERTIFY_MAX_VARIABLES", 0)
    prog = tg.compile(grads, memory_budget=halfway(keep, layers))
    assert prog.remat.method != "milp" and prog.remat.full_gap is None


@settings(max_examples=3, deadline=None)
@given(graph=layered_networks(), fraction=st.floats(0.3, 0.95))
def test_trial_points_planned_with_less_search_still_fit_and_compile_the_same(graph, fraction):
    grads = tg.value_and_grad(graph)
    keep = tg.compile(grads)
    budget = max(1, int(keep.plan.arena_size * fraction))
    first = compile_or_smallest(grads, budget)
    if isinstance(first, int):  # too small: the budget it names compiles
        assert first > budget
        budget, first = first, tg.compile(grads, memory_budget=first)
    feeds = feeds_for(grads)
    check_program(first, budget, keep.run(*feeds, backend="numpy"), feeds)
    second = tg.compile(grads, memory_budget=budget)  # deterministic: the same plan
    assert second.plan.offsets == first.plan.offsets
    assert second.order == first.order
    a, b = first.remat.to_dict(), second.remat.to_dict()
    a.pop("solve_seconds"), b.pop("solve_seconds")
    assert a == b


def test_a_certificate_without_a_bound_or_of_an_infeasible_program_claims_no_gap():
    assert Certificate(None, None).gap(100) is None
    assert Certificate(None, math.inf).gap(100) is None
    assert Certificate(None, 60.0).gap(100) == pytest.approx(0.4)
    assert Certificate(None, 100.0).gap(100) == 0.0
    assert np.isclose(Certificate(None, 0.0).gap(7), 1.0)
