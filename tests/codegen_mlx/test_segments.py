"""segments.py: the schedule's cut into segments (partition, budget, the values crossing
each boundary) and segmented execution against the NumPy reference."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.codegen_mlx.arrays import to_mx, to_numpy
from tensorgraph.codegen_mlx.fusion import (
    ABS,
    MAX_ARRAYS,
    MAX_COMPONENT,
    MAX_DEPTH,
    REL,
    UNKNOWN,
    fusion_facts,
)
from tensorgraph.codegen_mlx.guards import device_guarded
from tensorgraph.codegen_mlx.segments import (
    Segment,
    run_segments,
    segment_schedule,
    step_costs,
    trace_segment,
)
from tensorgraph.runtime.kernels import constant_value
from tests.codegen_mlx.strategies import Case, typed_graphs
from tests.strategies import graphs


def cut(prog: tg.Program, budget: int) -> tuple[Segment, ...]:
    plan = prog.plan
    return segment_schedule(prog.graph, plan.liveness, plan.aliasing, budget)


def run_cut(prog: tg.Program, segments, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Run `segments` of `prog` on MLX; every boundary value converted here from `feeds`,
    the bound params and the constants' payloads."""
    graph = prog.graph
    named = {**graph.param_values, **feeds}
    values = {
        n.id: to_mx(constant_value(n) if n.op == "constant" else named[n.name])
        for n in graph.nodes
        if n.op in ("input", "param", "constant")
    }
    traces = [trace_segment(graph, s) for s in segments]
    results = run_segments(graph, segments, traces, values, prog.plan.liveness.last_use)
    return [to_numpy(r) for r in results]


def test_a_chain_is_cut_where_the_arena_is_full(monkeypatch) -> None:
    # x (input, 1024 float32 = 4096 B) -> a = exp(x) -> b = exp(a) -> c = exp(b), output.
    # Steps 0..3 run x, a, b, c; b and c write in place over a (reinplace), so the
    # buffers are x [0, 2) and a [1, 4): arena 8192 B. Carried bytes: x from step 0 (an
    # input), a from step 2, so carried = 4096 at every step. Every exp allocates 4096
    # (in-place writes counted).
    # Without fusion (MLX_DISABLE_COMPILE): with budget 8192, [x, a] costs 4096 + 0 +
    # 4096 = 8192; adding b would make 12288, so cut; [b] costs carried 4096 + 4096, and
    # so does [c].
    g = tg.Graph("chain")
    x = g.input("x", (1024,), tg.float32)
    g.output(tg.exp(tg.exp(tg.exp(x))))
    prog = tg.compile(g)
    assert prog.plan.arena_size == 8192
    ids = prog.order
    monkeypatch.setenv("MLX_DISABLE_COMPILE", "1")
    segments = cut(prog, 8192)
    assert [(s.start, s.stop, s.cost) for s in segments] == [
        (0, 2, 8192),
        (2, 3, 8192),
        (3, 4, 8192),
    ]
    assert [(s.nodes, s.inputs, s.outputs, s.released) for s in segments] == [
        ((ids[1],), (ids[0],), (ids[1],), (ids[0],)),
        ((ids[2],), (ids[1],), (ids[2],), (ids[1],)),
        ((ids[3],), (ids[2],), (ids[3],), (ids[2],)),  # c, the output, leaves as output
    ]
    # 4096 carried + 3 * 4096 allocated: a budget of 16384 takes the whole schedule.
    assert [(s.start, s.stop) for s in cut(prog, 16384)] == [(0, 4)]
    unfused = [cut(prog, 0), cut(prog, 8192), cut(prog, 16384)]
    monkeypatch.delenv("MLX_DISABLE_COMPILE")
    # With fusion: mx.compile makes exp(exp(exp(x))) one kernel (a and b each have one
    # reader, an exp of their shape, in the segment): [x, a] costs 8192 as before; b
    # adds 4096 and refunds a's 4096; c adds 4096 and refunds b's: still 8192, so the
    # whole chain is one segment at carried + one buffer.
    assert [(s.start, s.stop, s.cost) for s in cut(prog, 8192)] == [(0, 4, 8192)]
    assert [(s.start, s.stop, s.cost) for s in cut(prog, 8191)] == [
        (0, 1, 4096),  # carried 4096 + x (boundary) 0; a would make 8192 > 8191
        (1, 2, 8192),  # a lone step may exceed the budget; b would not refund a in time
        (2, 3, 8192),
        (3, 4, 8192),
    ]
    value = np.linspace(-1, 1, 1024, dtype=np.float32)
    for segments in (*unfused, cut(prog, 8192)):
        got = run_cut(prog, segments, {"x": value})[0]
        # float32 exp is good to ~2 ulp (2.4e-7); x <= 1 gives a = e^x <= 2.72 and
        # b = e^a <= 15.2, so the error compounds to (1 + b + a b) ~ 57 times that.
        want = np.exp(np.exp(np.exp(value.astype(np.float64))))
        np.testing.assert_allclose(got, want, rtol=57 * 2.4e-7)


def fusion_model(prog: tg.Program) -> tuple:
    """(fusion facts, step sizes) of `prog`'s schedule, for `absorbed_bytes`."""
    graph, lv = prog.graph, prog.plan.liveness
    facts = fusion_facts(graph, lv.steps, frozenset(n.id for n in device_guarded(graph)))
    return facts, step_costs(graph, lv, prog.aliasing)[1]


def absorbed_bytes(start: int, stop: int, model: tuple) -> int:
    """Bytes of the nodes that fusion.py's model absorbs in steps [start, stop), decided
    at once over the whole segment (the cut decides step by step): depth bounds by one
    sweep from the last step back, components by a union over the segment's edges."""
    facts, sizes = model
    inside = range(start, stop)
    depth = dict.fromkeys(inside, 0)
    for k in reversed(inside):
        for j, kind, value in facts.edges[k]:
            if j >= start:
                reach = {REL: depth[k] + value, ABS: value, UNKNOWN: MAX_DEPTH}[kind]
                depth[j] = min(max(depth[j], reach), MAX_DEPTH)
    group = {k: {k} for k in inside}
    unknown = set()
    for k in inside:
        for j, kind, _ in facts.edges[k]:
            if j >= start and kind != ABS and group[j] is not group[k]:
                merged = group[j] | group[k]
                for m in merged:
                    group[m] = merged
            if j >= start and kind == UNKNOWN:
                unknown.add(k)
    absorbed = 0
    for members in {id(g): g for g in group.values()}.values():
        eligible = [k for k in members if start <= k < facts.reader[k] < stop]
        shallow = [k for k in eligible if depth[k] < MAX_DEPTH]
        arrays = {i for k in members for i in facts.arrays[k]}
        width = len(arrays) - len(shallow) + sum(facts.extra[k] for k in members)
        if members & unknown or len(members) > MAX_COMPONENT or width >= MAX_ARRAYS:
            continue
        absorbed += sum(sizes[k] for k in shallow)
    return absorbed


def expected_cost(prog: tg.Program, start: int, stop: int, model: tuple) -> int:
    """A segment's cost recomputed from its definition: bytes of arena buffers born
    before `start` (boundary buffers: always) and read at or after it, plus each of its
    nodes' bytes unless a view or a boundary node (the random graphs have no conv or
    pool, so no scratch), plus buffers of no node (workspaces) born in the segment, less
    what fusion absorbs (`absorbed_bytes`)."""
    graph, lv = prog.graph, prog.plan.liveness
    kinds = {n.id: n.op for n in graph.nodes}
    boundary = {i for i, op in kinds.items() if op in ("input", "param", "constant")}
    carried = sum(
        b.size for b in lv.buffers if (b.start < start or b.id in boundary) and b.end > start
    )
    made = sum(b.size for b in lv.buffers if b.id not in kinds and start <= b.start < stop)
    for node_id in lv.steps[start:stop]:
        alias = prog.aliasing.of(node_id)
        if node_id not in boundary and not (alias and alias.kind == "view"):
            made += graph.node(node_id).nbytes
    return carried + made - absorbed_bytes(start, stop, model)


@given(graphs(), st.floats(0, 2.5))
def test_segments_partition_the_schedule_within_the_budget(graph, fraction) -> None:
    prog = tg.compile(graph)
    budget = int(fraction * prog.plan.arena_size)
    segments = cut(prog, budget)
    model = fusion_model(prog)
    steps = prog.order
    assert segments[0].start == 0 and segments[-1].stop == len(steps)
    for before, after in itertools.pairwise(segments):
        assert before.stop == after.start
    step_of = prog.plan.liveness.step_of
    readers = {
        n.id: [step_of[u.id] for u in prog.graph.nodes if n.id in u.inputs]
        for n in prog.graph.nodes
    }
    outputs = set(prog.graph.outputs)
    for s in segments:
        assert s.cost == expected_cost(prog, s.start, s.stop, model)
        assert s.stop - s.start == 1 or s.cost <= budget  # only a lone step may exceed it
        computed = [
            i
            for i in steps[s.start : s.stop]
            if prog.graph.node(i).op not in ("input", "param", "constant")
        ]
        assert list(s.nodes) == computed
        seen = set()
        for node_id in s.nodes:
            for i in prog.graph.node(node_id).inputs:
                assert i in seen or i in s.inputs  # every operand is computed here or fed
            seen.add(node_id)
        assert set(s.inputs).isdisjoint(s.nodes)
        read_later = {i for i in s.nodes if i in outputs or any(r >= s.stop for r in readers[i])}
        assert set(s.outputs) == read_later
        dying = {i for i in s.inputs if i not in outputs and all(r < s.stop for r in readers[i])}
        assert set(s.released) == dying
    if budget >= expected_cost(prog, 0, len(steps), model):  # the running cost never exceeds it
        assert len(segments) == 1


@settings(max_examples=40)
@given(typed_graphs(), st.sampled_from((0.0, 0.5, 1.0, 100.0)))
def test_segmented_runs_match_the_reference(case: Case, fraction: float) -> None:
    # Every dtype kind, 0-d and zero-size tensors, guarded take/pow: any cut of the
    # schedule computes what the NumPy oracle computes (floats within float32 rounding).
    prog = tg.compile(case.graph)
    want = prog.run(case.inputs, backend="numpy")
    got = run_cut(prog, cut(prog, int(fraction * prog.plan.arena_size)), case.inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        assert g.dtype == w.dtype
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, equal_nan=True)
        else:
            np.testing.assert_array_equal(g, w)


def test_a_broken_guard_raises_after_any_cut() -> None:
    # take with index 5 on an axis of 3: the oracle's RunError, whatever the segments.
    # The indices are a param, so the device checks them (fed indices are checked on
    # the host before the run, guards.py tier 3, which run_segments alone does not do).
    g = tg.Graph("take")
    x = g.input("x", (3, 2))
    i = g.param("i", (2,), tg.int32)
    g.output(tg.exp(tg.take(tg.exp(x), i, 0)))
    prog = tg.compile(g)
    feeds = {"x": np.zeros((3, 2), np.float32), "i": np.array([0, 5], np.int32)}
    for budget in (0, prog.plan.arena_size, 10**9):
        with pytest.raises(tg.RunError, match=r"%\d+ take: index 5 is out of range for axis 0"):
            run_cut(prog, cut(prog, budget), feeds)


WINDOWED = [  # (op, x shape, w shape, stride, padding, dilation): a training step's shapes
    ("conv_transpose2d", (8, 16, 8, 8), (16, 16, 3, 3), 1, 1, 1),  # 3x3/1 input gradient
    ("conv_transpose2d", (8, 128, 1, 1), (128, 128, 3, 3), 1, 1, 1),  # weight-heavy
    ("conv_transpose2d", (8, 32, 4, 4), (32, 16, 3, 3), 2, 1, 1),  # 3x3/2 input gradient
    ("conv2d", (3, 8, 32, 32), (16, 8, 16, 16), 1, 3, 2),  # 7x7/2 stem's weight gradient
    ("conv2d", (16, 8, 8, 8), (32, 8, 4, 4), 1, 1, 2),  # 3x3/2 weight gradient
]


@pytest.mark.parametrize(("op", "xs", "ws", "stride", "padding", "dilation"), WINDOWED)
def test_scratch_bounds_what_the_lowering_allocates(op, xs, ws, stride, padding, dilation):
    # SCRATCH is the segment cost's allowance for what a lowering allocates beyond its
    # output: an under-estimate lets a segment exceed its budget (and the run its plan).
    # Measured on MLX itself: the peak while one node's lowering runs on materialised
    # inputs, less those inputs and its output.
    import mlx.core as mx

    from tensorgraph.codegen_mlx.segments import SCRATCH

    g = tg.Graph("window")
    x, w = g.input("x", xs), g.input("w", ws)
    build = tg.conv2d if op == "conv2d" else tg.conv_transpose2d
    g.output(build(x, w, stride, padding, dilation=dilation))
    node = g.node(g.outputs[0])
    rng = np.random.default_rng(0)
    args = [mx.array(rng.standard_normal(s).astype(np.float32)) for s in (xs, ws)]
    assert lowering_scratch(node, args) <= SCRATCH[op](g, node)


WEIGHT_GRADIENTS = [  # (x shape, g shape, kernel, stride, padding, groups): a step's shapes
    ((8, 3, 64, 64), (8, 8, 32, 32), 7, 2, 3, 1),  # ResNet's 7x7/2 stem
    ((8, 16, 16, 16), (8, 32, 8, 8), 3, 2, 1, 1),  # a 3x3/2 downsampling convolution
    ((8, 16, 16, 16), (8, 16, 16, 16), 3, 1, 1, 1),  # a 3x3/1 one
    ((8, 64, 4, 4), (8, 64, 4, 4), 3, 1, 1, 1),  # weight-heavy: more taps than positions
    ((4, 8, 9, 9), (4, 8, 9, 9), 3, 1, 1, 4),  # grouped
]


@pytest.mark.parametrize(("xs", "gs", "kernel", "stride", "padding", "groups"), WEIGHT_GRADIENTS)
def test_scratch_bounds_what_the_weight_gradient_allocates(xs, gs, kernel, stride, padding, groups):
    # As above, for conv2d_weight_backward (x and the output's cotangent as stored).
    import mlx.core as mx

    from tensorgraph.codegen_mlx.segments import SCRATCH
    from tensorgraph.ir.conv_grad import conv2d_weight_backward

    g = tg.Graph("weight_gradient")
    x, cotangent = g.input("x", xs), g.input("g", gs)
    g.output(conv2d_weight_backward(x, cotangent, kernel, stride, padding, groups=groups))
    node = g.node(g.outputs[0])
    rng = np.random.default_rng(0)
    args = [mx.array(rng.standard_normal(s).astype(np.float32)) for s in (xs, gs)]
    assert lowering_scratch(node, args) <= SCRATCH["conv2d_weight_backward"](g, node)


def lowering_scratch(node, args) -> int:
    """What `node`'s MLX lowering allocates beyond its output, measured on MLX itself:
    the peak while it runs on the materialised `args`, less those and its output."""
    import mlx.core as mx

    from tensorgraph.codegen_mlx.lowering import lowering_of

    mx.eval(args)
    mx.synchronize()
    before = mx.get_active_memory()
    mx.reset_peak_memory()
    out = lowering_of(node)(node, args)
    mx.eval(out)
    assert out.shape == node.shape
    return mx.get_peak_memory() - before - node.nbytes
