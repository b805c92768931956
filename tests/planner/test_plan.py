"""Memory plans: verified whatever the algorithm, node offsets derived from the marks,
the constant segment laid out back to back, a readable report and a parseable JSON."""

import itertools
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.ir.ops import view_offset
from tensorgraph.planner import plan as plan_module
from tensorgraph.planner.aliasing import Alias, Aliasing
from tensorgraph.planner.assign import ALGORITHMS
from tensorgraph.planner.buffers import Assignment, align_up
from tensorgraph.planner.plan import MemoryPlan, plan_memory
from tensorgraph.planner.report import WIDTH, human
from tensorgraph.planner.verify import verify_assignment
from tests.strategies import graphs


def verified(plan: MemoryPlan) -> None:
    """The plan's buffer offsets pass the independent verifier."""
    assignment = Assignment(dict(plan.buffer_offsets), plan.arena_size)
    verify_assignment(plan.buffers, assignment, plan.alignment)


def check_offsets(graph: tg.Graph, plan: MemoryPlan, aliasing: Aliasing) -> None:
    """Every node's offset from first principles: a view sits at its input's offset plus
    `view_offset`, an in-place node at its operand's, a root placed into a concat at the
    concat's plus its slot, any other node at its own buffer's
    (arena) or its own slot (constant segment); each node is in exactly one segment."""
    for node in graph.nodes:
        where = plan.offsets if node.id in plan.offsets else plan.constant_offsets
        assert (node.id in plan.offsets) != (node.id in plan.constant_offsets)
        alias = aliasing.of(node.id)
        if alias is not None and alias.kind == "view":
            source = graph.node(node.inputs[0])
            extra = view_offset(node.op, node.attr_dict, source.shape, node.dtype, source.dtype)
            assert where[node.id] == where[source.id] + extra
        elif alias is not None:  # in place (offset 0) or placed into a later concat
            assert where[node.id] == where[alias.source] + alias.offset
        elif where is plan.offsets:
            assert plan.offsets[node.id] == plan.buffer_offsets[node.id]


def check_constant_segment(graph: tg.Graph, plan: MemoryPlan) -> None:
    """Constant-segment roots are aligned, inside the segment, and pairwise disjoint."""
    spans = sorted(
        (plan.constant_offsets[r], plan.constant_offsets[r] + graph.node(r).nbytes)
        for r in plan.liveness.constants
    )
    for low, high in spans:
        assert low % plan.alignment == 0 and high <= plan.constant_size
    for (_, high), (low, _) in itertools.pairwise(spans):
        assert high <= low


@given(graphs(), st.sampled_from(sorted(ALGORITHMS)), st.sampled_from([1, 16, 64]))
def test_plans_of_random_graphs_verify(graph, algorithm, alignment) -> None:
    prog = tg.compile(graph, planner=algorithm, alignment=alignment)
    plan = prog.plan
    verified(plan)
    assert plan.algorithm == algorithm and plan.alignment == alignment
    assert plan.arena_size % alignment == 0
    assert plan.lower_bound <= plan.arena_size <= plan.total_unshared
    assert plan.bytes_saved == plan.total_unshared - plan.arena_size
    assert plan.total_unshared == sum(align_up(b.size, alignment) for b in plan.buffers)
    check_offsets(prog.graph, plan, prog.aliasing)
    check_constant_segment(prog.graph, plan)


@given(graphs(), st.booleans(), st.sampled_from([0, 8]))
def test_plan_options_of_random_graphs_verify(graph, params_in_arena, tail_guard) -> None:
    prog = tg.compile(graph, params_in_arena=params_in_arena, tail_guard=tail_guard)
    verified(prog.plan)
    check_offsets(prog.graph, prog.plan, prog.aliasing)
    if params_in_arena:
        assert prog.plan.constant_size == 0 and not prog.plan.constant_offsets


def test_view_offsets_are_the_root_offset_plus_the_view_offset() -> None:
    g = tg.Graph("views")
    x = g.input("x", (4, 3))
    t = tg.exp(x)
    rows = tg.narrow(t, 0, 1, 2)  # rows 1-2: 3 floats in, 12 bytes
    flat = rows.reshape(6)
    g.output(tg.tanh(flat), tg.sin(x))
    views = Aliasing({rows.id: Alias(t.id, 12, "view"), flat.id: Alias(rows.id, 0, "view")})
    for algorithm in sorted(ALGORITHMS):
        plan = plan_memory(g, None, views, algorithm=algorithm, alignment=64)
        root = plan.buffer_offsets[t.id]
        assert plan.offsets[rows.id] == root + 12 and plan.offsets[flat.id] == root + 12
        assert rows.id not in plan.buffer_offsets and flat.id not in plan.buffer_offsets


def test_constant_segment_is_back_to_back_and_aligned() -> None:
    g = tg.Graph("consts")
    x = g.input("x", (3,))
    a = g.param("a", (3,))  # 12 bytes
    b = g.param("b", (5,))  # 20 bytes
    g.output(x * a + b[:3])
    plan = plan_memory(g, algorithm="best", alignment=16, check=True)
    assert plan.constant_offsets[a.id] == 0 and plan.constant_offsets[b.id] == 16
    assert plan.constant_size == 48
    assert a.id not in plan.offsets and b.id not in plan.offsets
    in_arena = plan_memory(g, algorithm="best", alignment=16, params_in_arena=True, check=True)
    assert in_arena.constant_size == 0 and a.id in in_arena.offsets
    live = {buf.id: buf for buf in in_arena.buffers}
    assert (live[a.id].start, live[a.id].end) == (0, len(g))


@pytest.mark.parametrize("alignment", [0, -64, 2.5, True, "64"])
def test_bad_alignment_is_refused_by_name(alignment) -> None:
    g = tg.Graph()
    g.output(tg.exp(g.input("x", (2,))))
    with pytest.raises(tg.PlanError, match=rf"alignment must be a positive integer.*{alignment!r}"):
        plan_memory(g, alignment=alignment)


def test_alignment_need_not_be_a_power_of_two() -> None:
    g = tg.Graph()
    x = g.input("x", (5,))
    g.output(tg.exp(x) + tg.tanh(x))
    plan = plan_memory(g, algorithm="greedy_size", alignment=24, check=True)
    assert all(offset % 24 == 0 for offset in plan.buffer_offsets.values())
    assert plan.arena_size % 24 == 0


def test_unknown_algorithm_is_refused_by_name() -> None:
    g = tg.Graph()
    g.output(tg.exp(g.input("x", (2,))))
    with pytest.raises(tg.PlanError, match="unknown algorithm 'fastest'"):
        plan_memory(g, algorithm="fastest")


def test_check_verifies_whatever_algorithm_planned(monkeypatch) -> None:
    g = tg.Graph()
    x = g.input("x", (8,))
    a, b = tg.exp(x), tg.tanh(x)  # live together until the add
    g.output(a + b)

    def everything_at_zero(buffers, algorithm, alignment, **limits):
        return Assignment({buf.id: 0 for buf in buffers}, max(buf.size for buf in buffers))

    monkeypatch.setattr(plan_module, "assign_offsets", everything_at_zero)
    unchecked = plan_memory(g, check=False)
    assert unchecked.offsets[a.id] == unchecked.offsets[b.id] == 0, "no check, no error"
    with pytest.raises(tg.PlanError, match=r"buffer \d+ .*overlaps buffer \d+"):
        plan_memory(g, check=True)


def mlp() -> tg.Program:
    g = tg.Graph("mlp")
    x = g.input("x", (32, 64))
    h = tg.relu(x @ g.param("w1", (64, 256)))
    g.output(tg.tanh(h @ g.param("w2", (256, 8))))
    return tg.compile(g)


def test_report_lists_the_peak_with_producing_ops() -> None:
    prog = mlp()
    plan = prog.plan
    text = plan.report(prog.graph)
    assert all(len(line) <= WIDTH for line in text.splitlines())
    assert f"lower bound {human(plan.lower_bound)}" in text
    assert f"({plan.arena_size:,} B)" in text and "ratio" in text and "saved" in text
    peak_part = text.split(f"live at the peak step {plan.peak_step}:")[1]
    for buffer in plan.live_at_peak():
        node = prog.graph.node(buffer.id)
        assert f"%{node.id}" in peak_part and node.op in peak_part
    for buffer in plan.buffers:
        assert f"{plan.buffer_offsets[buffer.id]:,} {buffer.size:,}" in " ".join(text.split())


def test_live_at_peak_is_what_the_peak_holds() -> None:
    plan = mlp().plan
    at_peak = plan.live_at_peak()
    curve = plan.liveness.live_bytes()
    assert sum(b.size for b in at_peak) == max(curve) == curve[plan.peak_step]
    assert [b.size for b in at_peak] == sorted((b.size for b in at_peak), reverse=True)


def test_long_tables_are_cut_to_the_top_buffers() -> None:
    g = tg.Graph("wide")
    x = g.input("x", (4, 4))
    parts = [tg.exp(x * float(k)) for k in range(12)]
    g.output(tg.concatenate(parts, axis=0))
    prog = tg.compile(g, passes=())
    text = prog.plan.report(prog.graph, top=3)
    hidden = len(prog.plan.buffers) - 3
    assert f"... {hidden} more buffers" in text
    assert f"the 3 largest of {len(prog.plan.buffers)}" in text
    peak = len(prog.plan.live_at_peak())
    assert f"... {peak - 3} more buffers" in text


def test_program_report_has_the_pass_table_schedule_and_plan() -> None:
    prog = mlp()
    text = prog.report()
    lines = text.splitlines()
    assert all(len(line) <= WIDTH for line in lines)
    header = lines[lines.index("passes:") + 1]
    assert "lower bound" in header and "bytes saved" in header
    for name in prog.stats:
        assert any(line.strip().startswith(name) for line in lines), name
    assert any(line.startswith("schedule:") for line in lines)
    assert prog.plan.report(prog.graph) + "\n" + prog.memory().table() in text
    assert text.endswith(prog.memory().table())


def test_to_json_parses_and_matches_the_plan() -> None:
    prog = mlp()
    plan = prog.plan
    document = json.loads(plan.to_json())
    assert document["arena_size"] == plan.arena_size
    assert document["lower_bound"] == plan.lower_bound
    assert document["alignment"] == 64 and document["algorithm"] == "best"
    assert [(b["id"], b["size"], b["start"], b["end"]) for b in document["buffers"]] == [
        (b.id, b.size, b.start, b.end) for b in plan.buffers
    ]
    assert {b["id"]: b["offset"] for b in document["buffers"]} == plan.buffer_offsets
    assert {int(k): v for k, v in document["offsets"].items()} == plan.offsets
    assert {int(k): v for k, v in document["constant_offsets"].items()} == plan.constant_offsets
    assert document["constant_size"] == plan.constant_size >= (64 * 256 + 256 * 8) * 4
    assert document["live_at_peak"] == [b.id for b in plan.live_at_peak()]
