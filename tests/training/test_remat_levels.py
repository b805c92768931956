"""The level search and what it stands on (planner/remat_levels.py, remat_tighten's
allowances and exchanges): the order induced from a rematerialised program's schedule
is a topological order of the graph; a model on that order and the rewrite in it keep
every output bit for bit; a point tightened under a per-step allowance fits it at every
sub-step; exchanges never add FLOPs and keep the point within its allowance; the level
search's point fits its budget once placed, costs less than its bar and runs as the
keep-everything program does."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.compiler import CompileOptions, _rewrite
from tensorgraph.ir.verify import verify
from tensorgraph.planner.remat import build_model, rematerialize
from tensorgraph.planner.remat_levels import induced_order, search_levels
from tensorgraph.planner.remat_tighten import _Search, least_by_step, tighten
from tests.training.remat_strategies import layered_networks
from tests.training.test_remat import deep_mlp, feeds_for


def _rewritten(graph: tg.Graph) -> tuple[tg.Graph, tg.Graph]:
    grads = tg.value_and_grad(graph)
    return grads, _rewrite(grads, CompileOptions(), debug=True)[0]


def _floor_order(rewritten: tg.Graph) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(the order the scheduler chose for recompute-all, that order induced on
    `rewritten`'s nodes: what the driver's level search counts on)."""
    first = build_model(rewritten)
    everything = frozenset(first.candidates)
    scheduled = tg.compile(rematerialize(rewritten, first.emissions(everything, everything)))
    return scheduled.order, induced_order(rewritten, scheduled.order)


def _assert_runs_as_keep(grads: tg.Graph, prog: tg.Program) -> None:
    """`prog` (a rewrite of `grads`) on the arena gives `grads`' reference outputs, bit
    for bit."""
    feeds = feeds_for(grads)
    expected = tg.compile(grads).run(*feeds, backend="numpy")
    ours = prog.run(*feeds, backend="arena")
    assert all(np.array_equal(a, b) for a, b in zip(ours, expected, strict=True))


def _is_topological(graph: tg.Graph, order: tuple[int, ...]) -> bool:
    seen: set[int] = set()
    for i in order:
        if not set(graph.node(i).inputs) <= seen:
            return False
        seen.add(i)
    return sorted(order) == sorted(n.id for n in graph.nodes)


@settings(max_examples=6, deadline=None)
@given(graph=layered_networks(), data=st.data())
def test_the_induced_order_is_a_topological_order_of_the_graph(graph, data):
    _, rewritten = _rewritten(graph)
    scheduled, order = _floor_order(rewritten)
    assert _is_topological(rewritten, order)
    position = {i: k for k, i in enumerate(scheduled)}
    # where the schedule's own relative order is topological, it is kept
    kept = [i for i in scheduled if i in set(order)]
    if _is_topological(rewritten, tuple(kept)):
        assert order == tuple(kept)
    # any sequence of the ids, however scrambled, is repaired into one
    shuffled = data.draw(st.permutations(sorted(position)))
    assert _is_topological(rewritten, induced_order(rewritten, shuffled))


@settings(max_examples=4, deadline=None)
@given(graph=layered_networks(), data=st.data())
def test_a_model_on_an_induced_order_rewrites_bit_for_bit(graph, data):
    grads, rewritten = _rewritten(graph)
    _, order = _floor_order(rewritten)
    model = build_model(rewritten, order=order)
    pool = sorted(model.candidates)
    recompute = frozenset(data.draw(st.sets(st.sampled_from(pool))) if pool else ())
    fresh = frozenset(data.draw(st.sets(st.sampled_from(sorted(recompute)))) if recompute else ())
    emit = model.emissions(recompute, fresh)
    rewrite = rematerialize(rewritten, emit, order)
    verify(rewrite)
    assert len(rewrite) >= len(rewritten) + sum(len(s) for s in emit.values())
    _assert_runs_as_keep(grads, tg.compile(rewrite))


@settings(max_examples=6, deadline=None)
@given(graph=layered_networks(), level=st.floats(0.0, 1.0), data=st.data())
def test_a_point_tightened_under_an_allowance_fits_it_at_every_sub_step(graph, level, data):
    grads, rewritten = _rewritten(graph)
    model = build_model(rewritten)
    least = least_by_step(model)
    everything = frozenset(model.candidates)
    emit = model.emissions(everything, everything)
    # least_by_step is recompute-all's own profile, step by step
    assert (model.profile(everything, emit) <= least[model.substep_steps(emit)]).all()
    allowance = np.maximum(least, int(level * model.peak(frozenset())))
    drawn = data.draw(st.sets(st.sampled_from(model.candidates))) if model.candidates else ()
    point, spent = tighten(model, allowance, frozenset(drawn), 300)
    assert spent <= 300 + 2 * len(model.candidates) + 1
    if point is None:
        return
    assert point.emit == model.emissions(point.recompute, frozenset(), point.splits)
    assert (point.profile <= allowance[model.substep_steps(point.emit)]).all()
    _assert_runs_as_keep(grads, tg.compile(rematerialize(rewritten, point.emit)))


@settings(max_examples=6, deadline=None)
@given(graph=layered_networks(), fraction=st.floats(0.0, 0.6), data=st.data())
def test_exchanges_never_add_flops_and_keep_the_point_within_its_budget(graph, fraction, data):
    _, rewritten = _rewritten(graph)
    model = build_model(rewritten)
    everything = frozenset(model.candidates)
    low, high = model.peak(everything, everything), model.peak(frozenset())
    allowance = np.full(model.steps, int(low + fraction * (high - low)), dtype=np.int64)
    search = _Search(model, allowance, 2_000)
    drawn = data.draw(st.sets(st.sampled_from(model.candidates))) if model.candidates else ()
    point = search.tightened(search.point(frozenset(drawn), {}))
    if point is None:
        return
    point = search.drop(point)
    better = search.exchanged(point)
    assert search.fits(better)
    assert better.flops <= point.flops
    assert better.flops == sum(model.cost[u] * len(s) for u, s in better.emit.items())


def _floor_search(grads: tg.Graph, budget: int, bar: float):
    """(the model, search_levels' answer) on the model of recompute-all's own schedule,
    placed in that order, as the driver runs it."""
    rewritten, _ = _rewrite(grads, CompileOptions(), debug=True)
    _, order = _floor_order(rewritten)
    model = build_model(rewritten, order=order)

    def place(emit):
        return tg.compile(rematerialize(rewritten, emit, order))

    return model, search_levels(model, budget, budget, model.peak(frozenset()), place, bar, 64)


def test_the_level_search_point_fits_its_budget_below_its_bar_bit_for_bit():
    grads = tg.value_and_grad(deep_mlp())
    keep = tg.compile(grads)
    budget = keep.plan.arena_size - 64  # one alignment unit below keeping everything
    model, found = _floor_search(grads, budget, math.inf)
    assert found is not None
    choice, prog = found
    assert prog.plan.arena_size <= budget
    assert choice.flops == model.recompute_cost(choice.recompute, choice.emit)
    _assert_runs_as_keep(grads, prog)
    # with its own FLOPs as the bar, only a cheaper point may answer
    _, again = _floor_search(grads, budget, choice.flops)
    assert again is None or again[0].flops < choice.flops
