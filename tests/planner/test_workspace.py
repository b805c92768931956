"""Declared workspace: one buffer per fused node, live exactly during its step, planned
like any buffer, verified, physically reserved in the arena oracle, shown in the
report, kept by save/load; sizes and lower bounds derived by hand."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.ir.node import Node
from tensorgraph.planner.buffers import Assignment, Buffer
from tensorgraph.planner.check import verify_plan
from tensorgraph.planner.liveness import NO_ALIASING, WorkspaceId, analyze, owner
from tensorgraph.planner.plan import assemble_plan, plan_memory
from tensorgraph.runtime.arena import run_arena
from tensorgraph.runtime.reference import run_reference


def norm_chain() -> tuple[tg.Graph, tg.Tensor, tg.Tensor]:
    """x (4, 8) -> layer_norm -> relu: steps 0, 1, 2."""
    g = tg.Graph("norm")
    x = g.input("x", (4, 8))
    normed = tg.layer_norm(x)
    g.output(tg.relu(normed))
    return g, x, normed


def test_workspace_id_is_a_negative_int_naming_its_node() -> None:
    ws = WorkspaceId(5)
    assert ws == -6 and hash(ws) == hash(-6), "saved as JSON and read back as a plain int"
    assert ws.node == 5 and owner(ws) == 5 and owner(7) == 7
    assert repr(ws) == str(ws) == "workspace(%5)"
    assert sorted([3, ws, -7]) == [-7, ws, 3], "sorts with node ids"


def test_workspace_buffer_lives_exactly_during_its_step() -> None:
    g, x, normed = norm_chain()
    live = analyze(g)
    # mean and 1/std of 4 rows in float32: 2 * 4 * 4 bytes, at step 1 only
    expected = Buffer(WorkspaceId(normed.id), 32, 1, 2)
    assert live.workspace == {normed.id: expected}
    assert expected in live.buffers, "planned with every other buffer"
    assert [b.id for b in live.live_at(1)] == [x.id, normed.id], "value buffers only"
    assert live.workspace_at(1) == [expected] and live.workspace_at(2) == []


def test_lower_bound_and_arena_count_the_workspace() -> None:
    g, _, _ = norm_chain()
    plan = plan_memory(g, alignment=1)
    # step 1 holds x (128 B, read there), the norm's result (128 B) and its 32 B workspace;
    # step 2 holds the result and the relu output (256 B). Peak: 288 B.
    assert plan.lower_bound == 288
    assert plan.arena_size == 288


def test_attention_scores_are_the_peak_of_an_attention_step() -> None:
    g = tg.Graph("attention")
    q = g.input("q", (1, 4, 16, 8))
    kv = g.input("kv", (1, 2, 32, 8))
    g.output(tg.scaled_dot_product_attention(q, kv, kv))
    plan = plan_memory(g, alignment=1)
    # q 2048 B + kv 2048 B + out 2048 B + scores 1*4*16*32*4 B (the softmax in place)
    # + scaled queries 1*4*16*8*4 B, all live at step 2
    assert plan.lower_bound == 2048 * 3 + 8192 + 2048
    assert plan.arena_size == plan.lower_bound


def sabotaged(graph: tg.Graph, victim: int) -> object:
    """The plan of `graph` with its one workspace moved onto node `victim`'s bytes."""
    plan = plan_memory(graph, alignment=1)
    (ws,) = plan.liveness.workspace.values()
    offsets = dict(plan.buffer_offsets)
    offsets[ws.id] = plan.buffer_offsets[victim]
    top = max(offsets[b.id] + b.size for b in plan.buffers)
    return assemble_plan(graph, plan.liveness, Assignment(offsets, top), "hand", 1, plan.aliasing)


def test_verifier_refuses_a_workspace_over_a_live_operand() -> None:
    g, x, _ = norm_chain()
    with pytest.raises(tg.PlanError, match=r"workspace\(%1\)"):
        verify_plan(g, sabotaged(g, x.id), NO_ALIASING)


def test_arena_oracle_scribbles_the_workspace_so_overlap_shows() -> None:
    g, x, _ = norm_chain()
    feed = {"x": np.arange(32, dtype=np.float32).reshape(4, 8)}
    (good,) = run_arena(g, plan_memory(g, alignment=1), feed)
    np.testing.assert_allclose(good, run_reference(g, feed)[0], rtol=1e-6)
    (bad,) = run_arena(g, sabotaged(g, x.id), feed)
    # The 32 scratch bytes cover x's first row (8 float32) before the norm reads it.
    assert np.isnan(bad[0]).all(), "the first row was poisoned"
    np.testing.assert_array_equal(bad[1:], good[1:])


def test_report_shows_workspace() -> None:
    g, _, normed = norm_chain()
    text = tg.compile(g).report()
    assert "workspace 32 B in 1 buffers | largest 32 B: %1 layer_norm" in text
    assert f"ws %{normed.id}" in text


def test_save_and_load_keep_the_workspace(tmp_path) -> None:
    g, _, normed = norm_chain()
    prog = tg.compile(g)
    prog.save(tmp_path / "n.tgp")
    loaded = tg.load(str(tmp_path / "n.tgp"))
    assert loaded.plan.buffer_offsets == prog.plan.buffer_offsets
    assert loaded.plan.liveness.workspace == prog.plan.liveness.workspace
    assert WorkspaceId(normed.id) in loaded.plan.buffer_offsets


def test_a_negative_node_id_that_collides_is_refused() -> None:
    x = Node(
        -2, "input", (), {"name": "x", "shape": (2, 4), "dtype": "float32"}, (2, 4), tg.float32
    )
    norm = Node(1, "rms_norm", (-2,), {"eps": 1e-5}, (2, 4), tg.float32)
    g = tg.Graph.from_nodes("odd", [x, norm], [1])
    with pytest.raises(tg.PlanError, match=r"%1 rms_norm: its workspace buffer id -2"):
        analyze(g)


@st.composite
def fused_graphs(draw: st.DrawFn) -> tg.Graph:
    """A few fused ops on random (B, H, L, D) activations, with elementwise ops between."""
    g = tg.Graph("fused")
    b, h, length = (draw(st.integers(1, 3)) for _ in range(3))
    d = 2 * draw(st.integers(1, 3))
    live = [g.input("x", (b, h, length, d))]
    for _ in range(draw(st.integers(1, 5))):
        x = draw(st.sampled_from(live))
        kind = draw(st.sampled_from(["sdpa", "layer", "rms", "group", "rope", "add"]))
        if kind == "sdpa":
            y = tg.scaled_dot_product_attention(
                x, x, x, mask=draw(st.sampled_from([None, "causal"]))
            )
        elif kind == "layer":
            y = tg.layer_norm(x)
        elif kind == "rms":
            y = tg.rms_norm(x)
        elif kind == "group":
            y = tg.group_norm(x, 1)
        elif kind == "rope":
            y = tg.rope(x, d)
        else:
            y = x + draw(st.sampled_from(live))
        live.append(y)
    g.output(live[-1])
    if draw(st.booleans()):
        g.output(draw(st.sampled_from(live)))
    return g


@given(fused_graphs(), st.integers(0, 2**16))
def test_every_workspace_is_planned_and_the_arena_matches_the_reference(graph, seed) -> None:
    prog = tg.compile(graph)
    live = prog.plan.liveness
    for node_id, buffer in live.workspace.items():
        step = live.step_of[node_id]
        assert (buffer.id, buffer.start, buffer.end) == (WorkspaceId(node_id), step, step + 1)
        assert buffer.id in prog.plan.buffer_offsets
    feed = {"x": np.random.default_rng(seed).uniform(-2, 2, graph.node(0).shape).astype(np.float32)}
    for got, want in zip(prog.run(feed, backend="arena"), run_reference(graph, feed), strict=True):
        np.testing.assert_array_equal(got, want)
