"""Multiple recomputation (issue 27, item 3): a forward value copied before several
backward steps, freed in between (at every read, or a copy split at chosen reads).
Whatever the copies, the rewrite keeps every output bit for bit; the integer
program's, the heuristic's and the tightening's points fit the model budget they were
asked for; a value the compiled program copies twice is counted twice."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.compiler import CompileOptions, _rewrite
from tensorgraph.ir.verify import verify
from tensorgraph.planner.remat import build_model, rematerialize
from tensorgraph.planner.remat_milp import solve_greedy, solve_milp
from tensorgraph.planner.remat_tighten import tighten
from tensorgraph.remat import compile_checkpointed
from tests.training.remat_strategies import layered_networks
from tests.training.test_remat import check_program, compile_or_smallest, deep_mlp, feeds_for


def gradient_model(graph: tg.Graph):
    grads = tg.value_and_grad(graph)
    rewritten, _ = _rewrite(grads, CompileOptions(), debug=True)
    return grads, rewritten, build_model(rewritten)


def budget_between(model, fraction: float) -> int:
    """The model budget `fraction` of the way from recomputing everything (0) to
    keeping everything (1)."""
    everything = frozenset(model.candidates)
    low, high = model.peak(everything, everything), model.peak(frozenset())
    return int(low + fraction * (high - low))


@settings(max_examples=4, deadline=None)
@given(graph=layered_networks(), data=st.data())
def test_any_copies_keep_every_output_bit_for_bit(graph, data):
    grads, rewritten, model = gradient_model(graph)
    recompute = frozenset(
        data.draw(st.sets(st.sampled_from(model.candidates))) if model.candidates else ()
    )
    fresh = frozenset(data.draw(st.sets(st.sampled_from(sorted(recompute)))) if recompute else ())
    splits = {  # a copy split at some of the root's backward readers
        u: tuple(data.draw(st.sets(st.sampled_from(model.uses[u]))))
        for u in sorted(recompute - fresh)
        if model.uses[u]
    }
    emit = model.emissions(recompute, fresh, splits)
    for u, steps in emit.items():  # a fresh root is copied at every step reading it
        reads = set(model.uses[u]) | {s for v in model.consumers[u] for s in emit.get(v, ())}
        assert reads == set(model.reads(u, emit))
        once = {min(reads), *(s for s in splits.get(u, ()) if s in reads)}
        assert steps == tuple(sorted(reads if u in fresh else once))
    graph2 = rematerialize(rewritten, emit)
    verify(graph2)
    assert len(graph2) >= len(rewritten) + sum(len(s) for s in emit.values())
    feeds = feeds_for(grads)
    expected = tg.compile(grads).run(*feeds, backend="numpy")
    ours = tg.compile(graph2).run(*feeds, backend="arena")
    assert all(np.array_equal(a, b) for a, b in zip(ours, expected, strict=True))


@settings(max_examples=4, deadline=None)
@given(graph=layered_networks(), fraction=st.floats(0.3, 1.0))
def test_the_solvers_points_fit_the_model_budget(graph, fraction):
    _, _, model = gradient_model(graph)
    budget = budget_between(model, fraction)
    for choice in (solve_milp(model, budget), solve_greedy(model, budget)):
        if choice is None:
            continue
        assert int(model.profile(choice.recompute, choice.emit).max()) == choice.peak <= budget
        assert choice.flops == sum(model.cost[u] * len(s) for u, s in choice.emit.items())
    # The least-memory point fits its own peak: the heuristic always answers there.
    assert solve_greedy(model, budget_between(model, 0.0)) is not None


def test_a_budget_one_copy_each_cannot_meet_is_met_by_copying_twice():
    grads = tg.value_and_grad(deep_mlp())
    rewritten, _ = _rewrite(grads, CompileOptions(), debug=True)
    model = build_model(rewritten)
    everything = frozenset(model.candidates)
    once = min(model.peak(everything), model.peak(frozenset()))
    fresh = model.peak(everything, everything)
    assert fresh < once  # the chain of single copies lives through the whole backward
    keep = tg.compile(grads)
    layers = compile_checkpointed(grads)
    smallest = compile_or_smallest(grads, 1024)
    assert isinstance(smallest, int) and smallest < layers.plan.arena_size
    prog = tg.compile(grads, memory_budget=smallest)
    assert prog.remat.copies > len(prog.remat.recomputed)  # some value copied twice
    feeds = feeds_for(grads)
    check_program(prog, smallest, keep.run(*feeds, backend="numpy"), feeds)


@settings(max_examples=4, deadline=None)
@given(graph=layered_networks(), fraction=st.floats(0.0, 1.0), data=st.data())
def test_a_tightened_point_fits_and_keeps_every_output_bit_for_bit(graph, fraction, data):
    grads, rewritten, model = gradient_model(graph)
    budget = budget_between(model, fraction)
    drawn = data.draw(st.sets(st.sampled_from(model.candidates))) if model.candidates else ()
    point, spent = tighten(model, budget, frozenset(drawn), 300)
    assert spent <= 300 + 2 * len(model.candidates) + 1  # the work, plus one step's moves
    if point is None:
        return
    assert point.emit == model.emissions(point.recompute, frozenset(), point.splits)
    assert point.peak == model.peak(point.recompute, frozenset(), point.splits) <= budget
    for u, steps in point.emit.items():  # the copies stand at steps reading their root
        assert set(steps) <= set(model.reads(u, point.emit))
    assert point.flops == sum(model.cost[u] * len(s) for u, s in point.emit.items())
    feeds = feeds_for(grads)
    expected = tg.compile(grads).run(*feeds, backend="numpy")
    ours = tg.compile(rematerialize(rewritten, point.emit)).run(*feeds, backend="arena")
    assert all(np.array_equal(a, b) for a, b in zip(ours, expected, strict=True))
