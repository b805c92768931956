"""Update placement (planner/update_placement.py): a training step's update chains run
right after the last reader of each weight's old value, write the new weights and
moments over their states and free the gradients there. Whatever the network, optimizer
and budget: the plan verifies, the arena equals the reference bit for bit (loss and
every new state), every state update lies in its state's bytes, and the scheduled peak
is never above the one the scheduler finds without placing updates."""

from __future__ import annotations

import re
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
import tensorgraph.planner.schedule as schedule_module
from tensorgraph.compiler import CompileOptions, _rewrite
from tensorgraph.planner.check import verify_plan
from tensorgraph.planner.liveness import analyze
from tensorgraph.planner.schedule import is_topological, schedule
from tensorgraph.planner.update_placement import place_updates, update_chains
from tests.training.remat_strategies import layered_networks
from tests.training.strategies import hyperparameters


def bound(graph: tg.Graph, seed: int = 0) -> tg.Graph:
    """`graph` with every param bound to seeded uniform values (a step trains them)."""
    rng = np.random.default_rng(seed)
    for p in graph.params:
        graph.bind(p.name, rng.uniform(-1, 1, p.shape).astype(np.float32))
    return graph


def in_state_bytes(prog: tg.Program) -> dict[str, bool]:
    """State name -> whether its new value is located in the state's own bytes."""
    plan = prog.plan
    return {
        name: plan.locate(value) == ("state", plan.state_layout[name])
        for name, value in prog.graph.state_updates.items()
    }


def assert_written_over_states(prog: tg.Program) -> None:
    """Every new weight and moment (and step count) is written over its state, unless
    placing every update chain after the last reader of its state's old value would
    raise the peak of the order chosen (a recompute copy reading an old weight after
    its update, at the least budget: scheduled and planned, the new weight then sits in
    the arena, within the plan)."""
    placed = place_updates(prog.graph, prog.order)
    if placed == prog.order:
        assert all(in_state_bytes(prog).values()), in_state_bytes(prog)
    else:
        options = prog.options
        cost = schedule_module.CostModel(prog.graph, options.analyses, options.alignment)
        assert cost.peak(placed) > cost.peak(prog.order)


def unplaced_peak(graph: tg.Graph) -> int:
    """The scheduler's peak for `graph` with update placement switched off: what it
    found before placement existed (the same candidates and the same search)."""
    with mock.patch.object(schedule_module, "place_updates", lambda g, order: tuple(order)):
        return schedule(graph, alignment=64).peak


def one_step(prog: tg.Program, feeds: dict, backend: str) -> tuple[list, dict]:
    state = prog.new_state(backend)
    outs = prog.run(feeds, backend=backend, state=state)
    return outs, {name: np.asarray(state[name]) for name in state.names}


@settings(max_examples=4)
@given(
    network=layered_networks(max_layers=2),
    hyper=hyperparameters(),
    fraction=st.sampled_from([None, 0.7]),
)
def test_updates_are_in_place_and_the_step_is_exact(network, hyper, fraction):
    check_step(network, hyper, fraction)


@pytest.mark.slow
@settings(max_examples=30)
@given(
    network=layered_networks(max_layers=4),
    hyper=hyperparameters(),
    fraction=st.sampled_from([None, 0.9, 0.7, 0.5, 0.3]),
)
def test_updates_are_in_place_and_the_step_is_exact_under_many_budgets(network, hyper, fraction):
    check_step(network, hyper, fraction)


def check_step(network: tg.Graph, hyper: tuple[str, dict], fraction: float | None) -> None:
    """The promises for one network, optimizer and budget (a fraction of the
    keep-everything arena, None for no budget; the smallest feasible when below it)."""
    kind, kwargs = hyper
    step = tg.train_step(bound(network), optimizer=getattr(tg.optim, kind)(**kwargs))
    rewritten, _ = _rewrite(step, CompileOptions(), debug=True)
    keep = tg.compile(step)
    # Never above the peak found without placement (same graph, same options).
    assert keep.plan.lower_bound <= unplaced_peak(rewritten)
    prog = keep
    if fraction is not None:
        try:
            prog = tg.compile(step, memory_budget=int(keep.plan.arena_size * fraction))
        except tg.PlanError as err:
            found = re.search(r"smallest budget found feasible is (\d+) B", str(err))
            assert found is not None, str(err)
            prog = tg.compile(step, memory_budget=int(found.group(1)))
    verify_plan(prog.graph, prog.plan, prog.aliasing)
    assert_written_over_states(prog)
    feeds = {"x": np.random.default_rng(1).uniform(-1, 1, network.inputs[0].shape)}
    feeds = {k: v.astype(np.float32) for k, v in feeds.items()}
    ref_outs, ref_states = one_step(prog, feeds, "numpy")
    arena_outs, arena_states = one_step(prog, feeds, "arena")
    for ours, theirs in zip(arena_outs, ref_outs, strict=True):
        assert ours.dtype == theirs.dtype and ours.tobytes() == theirs.tobytes()
    assert sorted(arena_states) == sorted(ref_states)
    for name, value in ref_states.items():
        assert arena_states[name].tobytes() == value.tobytes(), name
    # and equal to the keep-everything step's (a budget recomputes, never changes values)
    keep_outs, keep_states = one_step(keep, feeds, "numpy")
    assert [o.tobytes() for o in keep_outs] == [o.tobytes() for o in ref_outs]
    assert all(keep_states[n].tobytes() == v.tobytes() for n, v in ref_states.items())


def mlp_step(optimizer: tg.optim.Optimizer) -> tg.Graph:
    """loss = sum(maximum(x @ w0 + b0, 0) @ w1): two layers, batch 64 (activations
    dominate); maximum's gradient masks by the pre-activation (relu's by its output)."""
    g = tg.Graph("mlp")
    x = g.input("x", (64, 32), tg.float32)
    w0, b0 = g.param("w0", (32, 32), tg.float32), g.param("b0", (32,), tg.float32)
    w1 = g.param("w1", (32, 8), tg.float32)
    g.output((tg.maximum(x @ w0 + b0, 0.0) @ w1).sum())
    return tg.train_step(bound(g), optimizer=optimizer)


def test_the_sgd_chain_is_the_optimizer_arithmetic_only():
    # SGD without momentum: w - lr * grad, so each chain is the mul by the learning rate
    # and the sub, fused into one node (ir/elementwise_fused.py); the gradient's matmul
    # or sum stays where the scheduler puts it.
    step = mlp_step(tg.optim.SGD(learning_rate=0.1))
    chains = update_chains(step)
    assert sorted(chains) == ["b0", "w0", "w1"]
    for name, chain in chains.items():
        (fused,) = (step.node(i) for i in chain)
        assert fused.op == "elementwise" and fused.id == step.state_updates[name]
        steps = [part.split()[0] for part in fused.attr("program").split(";")]
        assert steps == ["mul", "sub"], name


def test_adam_chains_hold_the_moments_and_share_the_step_count():
    step = mlp_step(tg.optim.Adam(learning_rate=0.01, bias_correction=True))
    chains = update_chains(step)
    assert sorted(chains) == ["b0", "w0", "w1"]  # the moments' updates are in them
    for name, chain in chains.items():
        for moment in ("m", "v"):
            assert step.state_updates[f"{name}.{moment}"] in chain
    # the step counter's increment is read by every chain: it belongs to none
    counter = step.state_updates["optimizer.step"]
    assert all(counter not in chain for chain in chains.values())


def test_a_gradient_dies_at_its_update():
    # Regression: the builder appends every update after the backward, and the
    # scheduler's heuristics left them there, so each weight gradient was held to the
    # end of the step. Placed, the gradient's last reader is in its chain, and the last
    # layer's chain runs before the first layer's gradient exists (that gradient needs
    # the data gradient through w1, which is w1's last reader).
    step = mlp_step(tg.optim.AdamW(learning_rate=0.01))
    prog = tg.compile(step)
    graph, live = prog.graph, analyze(prog.graph, prog.order, prog.aliasing)
    chains = update_chains(graph)
    gradient = {}
    for name in ("w0", "w1"):
        chain = chains[name]
        outside = {i for n in chain for i in graph.node(n).inputs if i not in chain}
        (gradient[name],) = [i for i in outside if graph.node(i).op.startswith("matmul")]
        end = max(live.step_of[n] for n in chain)
        assert live.last_read[live.storage[gradient[name]].root] <= end, name
    assert max(live.step_of[n] for n in chains["w1"]) < live.step_of[gradient["w0"]]
    assert_written_over_states(prog)


def test_an_update_waits_for_every_reader_of_the_old_value():
    step = mlp_step(tg.optim.SGD(learning_rate=0.1, momentum=0.9, weight_decay=0.01))
    order = tuple(n.id for n in step.nodes)
    placed = place_updates(step, order)
    assert is_topological(step, placed)
    position = {n: k for k, n in enumerate(placed)}
    chains = update_chains(step)
    users = step.users()
    for name, chain in chains.items():
        state = next(n.id for n in step.states if n.name == name)
        readers = [u for u in users[state] if u not in chain]
        assert readers, name  # the forward and the data gradient read the weight
        assert min(position[n] for n in chain) > max(position[u] for u in readers)


def test_a_graph_without_states_keeps_its_order():
    g = tg.Graph("plain")
    x = g.input("x", (4, 4), tg.float32)
    g.output(tg.exp(x) + 1.0)
    order = tuple(n.id for n in g.nodes)
    assert place_updates(g, order) == order
    assert update_chains(g) == {}


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_the_keep_everything_peak_drops_on_the_mlp(optimizer):
    # The measured effect (benches/README.md): with the updates placed, the step's peak
    # is no higher than without, and the gradients no longer sit at the end.
    opt = {
        "sgd": tg.optim.SGD(learning_rate=0.1, momentum=0.9),
        "adamw": tg.optim.AdamW(learning_rate=1e-3),
    }[optimizer]
    step = mlp_step(opt)
    rewritten, _ = _rewrite(step, CompileOptions(), debug=True)
    assert schedule(rewritten, alignment=64).peak <= unplaced_peak(rewritten)
