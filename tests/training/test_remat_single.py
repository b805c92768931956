"""The single-copy program beside multiple recomputation (issue 27, item 3): its points
copy each recomputed value once; the driver's choice never costs more FLOPs than the
single-copy program's point; with the full program out of
reach (as on GPT-2 and Llama, above MAX_VARIABLES) the compiled step still fits its
budget, equals the keep-everything step bit for bit and, on the MLP, is certified
optimal for the single-copy restriction."""

from __future__ import annotations

import json

import numpy as np
import pytest
from attrs import evolve
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph import remat as tg_remat
from tensorgraph.planner import remat_milp, remat_single
from tensorgraph.planner.remat_single import solve_single_copy
from tensorgraph.remat import RematReport, choose
from tests.training.remat_strategies import layered_networks
from tests.training.test_remat import check_program, deep_mlp_programs, feeds_for, halfway
from tests.training.test_remat_multi import budget_between, gradient_model


@settings(max_examples=4, deadline=None)
@given(graph=layered_networks(), fraction=st.floats(0.0, 1.0))
def test_the_choice_never_costs_more_than_the_single_copy_program(graph, fraction):
    _, _, model = gradient_model(graph)
    budget = budget_between(model, fraction)
    single = solve_single_copy(model, budget)
    chosen = choose(model, budget)
    if single is not None:
        assert all(len(steps) == 1 for steps in single.emit.values())  # one copy each
        assert set(single.emit) <= single.recompute
        assert int(model.profile(single.recompute, single.emit).max()) == single.peak
        assert single.flops == sum(model.cost[u] for u in single.emit)
        assert chosen is not None and chosen.flops <= single.flops
        assert single.peak <= budget  # its rows bound the profile (the horizon fix)
    if chosen is not None:
        assert int(model.profile(chosen.recompute, chosen.emit).max()) == chosen.peak <= budget
    # At keep-everything's model peak, recomputing nothing fits: the optimum is 0 FLOPs.
    at_high = solve_single_copy(model, budget_between(model, 1.0))
    assert at_high is not None and at_high.flops == 0 and at_high.gap == 0.0


@settings(max_examples=25, deadline=None)
@given(graph=layered_networks(), fraction=st.floats(0.0, 1.0))
def test_a_single_copy_read_after_its_horizon_is_counted_until_its_last_read(graph, fraction):
    """Regression: the program dropped a copy from its rows after its first backward
    reader (its horizon), so a value read by several backward steps was counted at the
    first only, and its points sat above the model budget (164 B on random networks,
    161,925 B on GPT-2's halfway budget, where the point never fit once placed)."""
    _, _, model = gradient_model(graph)
    budget = budget_between(model, fraction)
    single = solve_single_copy(model, budget)
    if single is not None:
        assert int(model.profile(single.recompute, single.emit).max()) <= budget


@pytest.fixture
def no_full_program(monkeypatch):
    """The full program out of reach, as on the transformers' training steps."""
    monkeypatch.setattr(remat_milp, "MAX_VARIABLES", 0)
    monkeypatch.setattr(remat_milp, "CERTIFY_MAX_VARIABLES", 0)


def test_without_the_full_program_the_single_copy_program_certifies_the_mlp(no_full_program):
    grads, keep, layers = deep_mlp_programs()
    budget = halfway(keep, layers)
    prog = tg.compile(grads, memory_budget=budget)
    assert prog.remat.method == "milp-single" and prog.remat.gap == 0.0
    assert prog.remat.copies == len(prog.remat.recomputed)  # one copy per value
    assert 0 < prog.remat.recompute_flops < layers.remat.recompute_flops
    feeds = feeds_for(grads)
    check_program(prog, budget, keep.run(*feeds, backend="numpy"), feeds)


@settings(
    max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)  # the fixture holds for every example: the full program stays out
@given(graph=layered_networks(max_layers=3), fraction=st.floats(0.6, 0.95))
def test_without_the_full_program_a_step_trains_as_without_a_budget(
    no_full_program, graph, fraction
):
    rng = np.random.default_rng(0)
    for p in graph.params:
        graph.bind(p.name, rng.uniform(-1, 1, p.shape).astype(np.float32))
    step = tg.train_step(graph, optimizer=tg.optim.AdamW(learning_rate=1e-3))
    keep = tg.compile(step)
    try:
        prog = tg.compile(step, memory_budget=max(1, int(keep.plan.arena_size * fraction)))
    except tg.PlanError as err:
        assert "smallest budget found feasible" in str(err)
        return
    assert prog.remat.method != "milp"
    feeds = feeds_for(step)
    for _ in range(2):  # weights and moments update in place: every call agrees
        ours = prog.run(*feeds, backend="arena")
        theirs = keep.run(*feeds, backend="arena")
        assert all(np.array_equal(a, b) for a, b in zip(ours, theirs, strict=True))


def test_a_single_copy_report_with_its_copies_round_trips():
    report = RematReport(100, "milp-single", 42, (3, 5), (7,), 0.0, 96, 128, 0.25, 2)
    assert RematReport.from_dict(json.loads(json.dumps(report.to_dict()))) == report


def test_a_report_saved_before_copies_were_stored_loads_with_none_counted():
    raw = RematReport(100, "greedy", 42, (3,), (), None, 96, 128, 0.5, 4).to_dict()
    del raw["copies"]
    assert RematReport.from_dict(raw).copies == 0


def test_a_trial_cut_short_is_certified_at_the_answers_model_budget(no_full_program, monkeypatch):
    """The bisection's single-copy searches stop after TRIAL_SINGLE_NODE_LIMIT nodes; at
    the answer's model budget the program is solved again with its full limit, so the
    answer is still certified (gap 0) when every trial stops at the root."""
    monkeypatch.setattr(tg_remat, "TRIAL_SINGLE_NODE_LIMIT", 1)
    limits: list[int] = []
    solve = remat_single.solve_single_copy

    def recorded(model, budget, node_limit=remat_single.SINGLE_NODE_LIMIT):
        limits.append(node_limit)
        return solve(model, budget, node_limit)

    monkeypatch.setattr(remat_single, "solve_single_copy", recorded)
    grads, keep, layers = deep_mlp_programs()
    budget = halfway(keep, layers)
    prog = tg.compile(grads, memory_budget=budget)
    assert 1 in limits  # the trials ran under the trial limit
    assert prog.remat.method == "milp-single" and prog.remat.gap == 0.0
    assert 0 < prog.remat.recompute_flops < layers.remat.recompute_flops
    feeds = feeds_for(grads)
    check_program(prog, budget, keep.run(*feeds, backend="numpy"), feeds)


def test_no_single_copy_search_runs_below_the_least_memory_the_model_knows(monkeypatch):
    """Regression: the first bisection trial was the scaled budget even below the model's
    least memory (recompute-all's peak), where only the single-copy search could answer
    and ran to its node limit proving infeasibility (8+ minutes at GPT-2's half budget).
    A budget far below every arena still names the smallest feasible one."""
    budgets: list[int] = []
    solve = remat_single.solve_single_copy

    def recorded(model, budget, node_limit=remat_single.SINGLE_NODE_LIMIT):
        everything = frozenset(model.candidates)
        budgets.append(budget - model.peak(everything, everything))
        return solve(model, budget, node_limit)

    monkeypatch.setattr(remat_single, "solve_single_copy", recorded)
    grads, _, _ = deep_mlp_programs()
    with pytest.raises(tg.PlanError, match="smallest budget found feasible"):
        tg.compile(grads, memory_budget=1024)
    assert budgets and min(budgets) >= 0


def test_a_deeper_single_copy_solve_states_the_gap_of_the_trials_point():
    """`proven`: the deeper solve's dual bound is its FLOPs times (1 - its gap); a point
    at or below it is certified (gap 0), a dearer one is (flops - bound) / flops."""
    deeper = remat_milp.RematChoice(frozenset(), {}, 100, 0, "milp-single", 0.25)  # bound 75
    assert tg_remat.proven(75, deeper) == 0.0
    assert tg_remat.proven(150, deeper) == pytest.approx(0.5)
    assert tg_remat.proven(100, evolve(deeper, gap=0.0)) == 0.0
    assert tg_remat.proven(100, evolve(deeper, gap=None)) is None


def test_no_trial_at_or_below_a_barren_one_searches_the_single_copy_program(monkeypatch):
    """Once the single-copy search found no point at a trial's model budget, no later
    trial at or below it searches (a smaller budget only removes points): each trial
    searches exactly when it lies above every earlier barren one. With every search
    barren the answer comes from the other methods, still fits and is exact."""
    trials: list[tuple[int, bool]] = []
    solve_all = tg_remat.solve_all

    def recorded(model, budget, single_node_limit=None, with_single=True):
        trials.append((budget, with_single))
        return solve_all(model, budget, single_node_limit, with_single)

    monkeypatch.setattr(tg_remat, "solve_all", recorded)
    monkeypatch.setattr(remat_single, "solve_single_copy", lambda *args, **kwargs: None)
    grads, keep, layers = deep_mlp_programs()
    budget = halfway(keep, layers)
    prog = tg.compile(grads, memory_budget=budget)
    barren = -1
    for trial, searched in trials:
        assert searched == (trial > barren)
        if searched:
            barren = trial
    assert not all(searched for _, searched in trials)  # the first point placed too big
    feeds = feeds_for(grads)
    check_program(prog, budget, keep.run(*feeds, backend="numpy"), feeds)
