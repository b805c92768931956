"""Memory plans of graphs: verified, consistent offsets, readable report and JSON."""

import json

import attrs
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.planner.buffers import Assignment
from tensorgraph.planner.verify import verify_assignment
from tensorgraph.runtime.arena import run_arena
from tensorgraph.runtime.reference import run_reference
from tests.strategies import feeds, graphs


@given(
    graphs(),
    st.sampled_from(["naive", "greedy_size", "greedy_breadth", "best"]),
    st.sampled_from([1, 16, 64]),
)
def test_plans_verify_and_run_in_the_arena(graph, algorithm, alignment) -> None:
    prog = tg.compile(graph, planner=algorithm, alignment=alignment)
    plan = prog.plan
    verify_assignment(
        plan.buffers, Assignment(dict(plan.buffer_offsets), plan.arena_size), alignment
    )
    assert plan.lower_bound <= plan.arena_size
    for node_id, where in plan.liveness.storage.items():
        if where.root in plan.buffer_offsets:
            assert plan.offsets[node_id] == plan.buffer_offsets[where.root] + where.offset
    inputs, params = feeds(graph)
    want = run_reference(graph, inputs, params)
    for got, expected in zip(run_arena(prog.graph, plan, inputs, params), want, strict=True):
        np.testing.assert_array_equal(got, expected)


def broken_copy(plan, victim: int, target: int):
    """The plan with buffer `victim` moved onto buffer `target`'s bytes."""
    offsets = {**plan.buffer_offsets, victim: plan.buffer_offsets[target]}
    node_offsets = {**plan.offsets, victim: plan.buffer_offsets[target]}
    return attrs.evolve(plan, buffer_offsets=offsets, offsets=node_offsets)


def test_a_broken_plan_is_rejected_and_gives_wrong_numbers() -> None:
    g = tg.Graph("two")
    x = g.input("x", (16, 16))
    a = tg.exp(x)
    b = tg.tanh(x)  # a and b are live together until the add
    g.output(a + b)
    prog = tg.compile(g, passes=("dce", "cse", "view_alias"))
    live = {buf.id: buf for buf in prog.plan.buffers}
    assert live[a.id].start < live[b.id].end and live[b.id].start < live[a.id].end
    broken = broken_copy(prog.plan, b.id, a.id)
    with pytest.raises(
        tg.PlanError, match=rf"buffer {b.id}.*buffer {a.id}|buffer {a.id}.*buffer {b.id}"
    ):
        verify_assignment(
            broken.buffers, Assignment(dict(broken.buffer_offsets), broken.arena_size)
        )
    inputs = {"x": np.random.default_rng(0).uniform(-1, 1, (16, 16)).astype(np.float32)}
    good = run_arena(prog.graph, prog.plan, inputs)[0]
    wrong = run_arena(prog.graph, broken, inputs)[0]
    want = run_reference(g, inputs)[0]
    np.testing.assert_array_equal(good, want)
    assert not np.allclose(wrong, want), "the arena oracle must expose an overlapping plan"


def test_report_lists_the_peak_and_json_parses() -> None:
    g = tg.Graph("mlp")
    x = g.input("x", (32, 64))
    h = tg.relu(x @ g.param("w1", (64, 256)))
    g.output(h @ g.param("w2", (256, 8)))
    prog = tg.compile(g)
    text = prog.report()
    assert "live at the peak step" in text and "matmul" in text and "ratio" in text
    document = json.loads(prog.plan.to_json())
    assert document["arena_size"] == prog.plan.arena_size
    assert len(document["buffers"]) == len(prog.plan.buffers)
    assert prog.plan.constant_size >= (64 * 256 + 256 * 8) * 4


@pytest.mark.parametrize(
    "options",
    [{"params_in_arena": True}, {"tail_guard": 64}, {"alignment": 1}, {"planner": "naive"}],
)
def test_plan_options_keep_the_arena_executor_exact(options) -> None:
    from tensorgraph.models import build_model

    model = build_model("gpt2", seq=8, dim=32, heads=2, vocab=16, max_positions=8)
    prog = tg.compile(model.graph, **options)
    inputs = model.inputs(0)
    want = run_reference(model.graph, inputs)
    for got, expected in zip(prog.run(inputs, backend="arena"), want, strict=True):
        np.testing.assert_array_equal(got, expected)
    if options.get("params_in_arena"):
        assert prog.plan.constant_size == 0
        params = sum(v.nbytes for v in model.graph.param_values.values())
        assert prog.plan.arena_size >= params, "the weights now live in the arena"
