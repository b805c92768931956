"""Copy elimination: concat operands written in place, splits as views, proven by the
verifier, the replay and the arena executor (which writes only the copied slots)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.errors import PlanError
from tensorgraph.planner.aliasing import Alias, Aliasing, analyze_aliasing
from tensorgraph.planner.check import verify_plan
from tensorgraph.planner.copy_elim import concat_slots, copied_slots
from tensorgraph.planner.liveness import analyze
from tensorgraph.planner.plan import plan_memory
from tensorgraph.planner.replay import replay
from tensorgraph.planner.schedule import STRATEGIES
from tensorgraph.runtime.reference import run_reference
from tests.strategies import feeds

NO_COPY = ("dce", "cse", "fold", "view_alias", "reinplace")


def exact(prog: tg.Program, graph: tg.Graph) -> None:
    """Replay accepts the plan; the arena equals the reference bit for bit."""
    replay(prog.graph, prog.plan, prog.aliasing)
    inputs, params = feeds(graph, seed=5)
    want = run_reference(graph, inputs, params)
    got = prog.run(inputs, params, backend="arena")
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape and g.tobytes() == w.tobytes()


def two_halves() -> tuple[tg.Graph, tg.Tensor, tg.Tensor, tg.Tensor]:
    g = tg.Graph("halves")
    x = g.input("x", (1, 4, 8))
    a, b = tg.tanh(x), tg.sigmoid(x)
    c = tg.concatenate([a, b], axis=1)
    g.output(tg.exp(c))
    return g, a, b, c


def test_operands_are_written_into_their_slots_and_the_concat_copies_nothing() -> None:
    g, a, b, c = two_halves()
    prog = tg.compile(g, schedule="program", debug=True)
    plan, concat = prog.plan, prog.graph.node(c.node.id)
    assert concat_slots(prog.graph, concat) == (0, 128)  # 1*4*8 float32 = 128 bytes each
    assert plan.offsets[a.node.id] == plan.offsets[c.node.id]
    assert plan.offsets[b.node.id] == plan.offsets[c.node.id] + 128
    locate = lambda i: ("arena", plan.offsets[i])  # noqa: E731
    assert copied_slots(prog.graph, concat, locate) == frozenset()
    # x is 128 bytes, a, b 128 each, c 256. Placed: the peak is at b's step, x plus c's
    # 256 bytes (a already inside) = 384; the concat step holds only c. Copying needs
    # a, b and c at the concat's step: 512.
    assert plan.lower_bound == 384
    assert tg.compile(g, passes=NO_COPY, schedule="program").plan.lower_bound == 512
    assert prog.stats["copy_elim"]["placed"] == 2
    assert prog.stats["copy_elim"]["copy_bytes_eliminated"] == 256
    exact(prog, g)


def test_swapped_placements_are_refused_by_the_verifier() -> None:
    # a placed at b's slot and b at a's: the concat must copy both, each over the other
    # operand while it is still read. The verifier finds it from offsets alone.
    g, a, b, c = two_halves()
    prog = tg.compile(g, schedule="program")
    wrong = Aliasing(
        {
            **prog.aliasing.aliases,
            a.node.id: Alias(c.node.id, 128, "concat"),
            b.node.id: Alias(c.node.id, 0, "concat"),
        },
        prog.aliasing.analyses,
    )
    # Swapped slots: the concat copies both operands over each other while both are read.
    bad = plan_memory(prog.graph, prog.order, wrong, check=False)
    with pytest.raises(PlanError, match="overwriting"):
        verify_plan(prog.graph, bad, wrong)
    with pytest.raises(PlanError):
        replay(prog.graph, bad, wrong)


def test_inputs_params_and_values_read_by_two_concats() -> None:
    g = tg.Graph("mixed")
    x = g.input("x", (2, 3))
    w = g.param("w", (2, 3))
    t = tg.tanh(x)
    first = tg.concatenate([x, t, w], axis=0)
    second = tg.concatenate([t, tg.sigmoid(x)], axis=0)
    g.output(tg.exp(first), tg.exp(second))
    order = tuple(n.id for n in g.nodes)
    aliasing = analyze_aliasing(g, order, ("view_alias", "copy_elim"))
    placed = {i: a for i, a in aliasing.aliases.items() if a.kind == "concat"}
    # x and w are the caller's / loaded once: copied. t is claimed by the later concat
    # (second, processed first), so first copies it. sigmoid(x) goes into second too.
    assert placed[t.node.id] == Alias(second.node.id, 0, "concat")
    assert x.node.id not in placed and w.node.id not in placed
    assert len(placed) == 2
    exact(tg.compile(g, debug=True), g)


def test_prefix_concats_are_slices_of_the_last_one_densenet_style() -> None:
    # features x0..x3 with concats cat(x0), cat(x0,x1), ... : every prefix concat lies in
    # the final one, so the block needs one buffer of the final size.
    g = tg.Graph("dense")
    x = g.input("x", (1, 2, 4))
    features = [tg.tanh(x)]
    for _ in range(3):
        block = tg.concatenate(features, axis=1)
        features.append(tg.sigmoid(block.sum(axis=1, keepdims=True) * 0.1 + features[-1]))
    final = tg.concatenate(features, axis=1)
    g.output(tg.exp(final))
    prog = tg.compile(g, schedule="program", debug=True)
    kinds = [a.kind for a in prog.aliasing.aliases.values()]
    assert kinds.count("concat") >= 4 + 2  # the 4 features and the 2 multi-operand prefixes
    final_at = prog.plan.offsets[final.node.id]
    for i, f in enumerate(features):
        assert prog.plan.offsets[f.node.id] == final_at + 32 * i  # 1*2*4 float32 = 32 B
    exact(prog, g)


def test_a_reinplaced_op_over_a_placed_value_stays_in_its_slot() -> None:
    g = tg.Graph("chain")
    x = g.input("x", (1, 3, 4))
    y = tg.tanh(x)  # its own buffer
    z = tg.sigmoid(y)  # in place over y, and placed: y takes the placement
    c = tg.concatenate([z, tg.exp(x)], axis=1)
    g.output(tg.negative(c))
    prog = tg.compile(g, schedule="program", debug=True)
    assert prog.aliasing.of(z.node.id) == Alias(y.node.id, 0, "inplace")
    assert prog.aliasing.of(y.node.id) == Alias(c.node.id, 0, "concat")
    assert prog.plan.offsets[y.node.id] == prog.plan.offsets[c.node.id]
    exact(prog, g)


def test_a_concat_of_concats_is_one_buffer() -> None:
    g = tg.Graph("nested")
    x = g.input("x", (1, 2, 16))  # 128 B: every buffer a multiple of the alignment
    inner = tg.concatenate([tg.tanh(x), tg.sigmoid(x)], axis=1)
    outer = tg.concatenate([inner, tg.exp(x)], axis=1)
    g.output(tg.negative(outer))
    prog = tg.compile(g, schedule="program", debug=True)
    at = prog.plan.offsets
    assert at[inner.node.id] == at[outer.node.id]
    assert len(prog.plan.buffers) == 2  # the input and the outer concat
    exact(prog, g)


def test_a_concat_off_the_outer_axis_keeps_its_copies() -> None:
    g = tg.Graph("strided")
    x = g.input("x", (2, 3))
    c = tg.concatenate([tg.tanh(x), tg.sigmoid(x)], axis=1)  # rows interleave
    g.output(c)
    prog = tg.compile(g, debug=True)
    assert prog.aliasing.count("concat") == 0
    exact(prog, g)


def test_a_split_along_an_axis_after_unit_axes_is_a_view() -> None:
    g = tg.Graph("split")
    x = g.input("x", (1, 6, 2))
    y = tg.tanh(x)
    left, right = tg.narrow(y, 1, 0, 2), tg.narrow(y, 1, 2, 4)
    g.output(tg.exp(left), tg.exp(right))
    prog = tg.compile(g, debug=True)
    assert prog.aliasing.of(right.node.id) == Alias(y.node.id, 2 * 2 * 4, "view")
    assert prog.aliasing.of(left.node.id) == Alias(y.node.id, 0, "view")
    exact(prog, g)


def test_a_placement_into_something_not_a_later_concat_is_refused() -> None:
    g, a, _b, c = two_halves()
    order = tuple(n.id for n in g.nodes)
    with pytest.raises(PlanError, match="not a later concat"):
        analyze(g, order, Aliasing({c.node.id: Alias(a.node.id, 0, "concat")}))
    with pytest.raises(PlanError, match="boundary"):
        x = g.node(0)
        analyze(g, order, Aliasing({x.id: Alias(c.node.id, 0, "concat")}))
    with pytest.raises(PlanError, match="reach past"):
        analyze(g, order, Aliasing({a.node.id: Alias(c.node.id, 200, "concat")}))


@st.composite
def concat_graphs(draw: st.DrawFn) -> tg.Graph:
    """Graphs of unit-leading values (1, n, k) built by unaries, in-place-able binaries,
    concats of 1-4 operands (repeated operands, inputs, params, earlier concats), splits
    (narrow on axis 1) and slice updates; 1-3 outputs, which may be concat operands."""
    g = tg.Graph("concats")
    k = draw(st.integers(1, 3))
    live = [g.input("x", (1, draw(st.integers(1, 3)), k)), g.param("w", (1, 2, k))]
    for _ in range(draw(st.integers(2, 12))):
        kind = draw(st.integers(0, 4))
        x = draw(st.sampled_from(live))
        if kind == 0:
            y = draw(st.sampled_from((tg.tanh, tg.sigmoid, tg.negative)))(x)
        elif kind == 1:
            others = [t for t in live if t.shape == x.shape]
            y = tg.tanh(x + draw(st.sampled_from(others)))
        elif kind == 2:
            parts = draw(st.lists(st.sampled_from(live), min_size=1, max_size=4))
            y = tg.concatenate(parts, axis=1)
        elif kind == 3 and x.shape[1] > 1:
            start = draw(st.integers(0, x.shape[1] - 1))
            y = tg.narrow(x, 1, start, draw(st.integers(1, x.shape[1] - start)))
        elif kind == 4 and x.shape[1] > 1:
            y = tg.slice_update(x, tg.sigmoid(tg.narrow(x, 1, 0, 1)), 1, x.shape[1] - 1)
        else:
            y = tg.exp(tg.tanh(x))
        live.append(y)
    outputs = draw(st.lists(st.sampled_from(live[2:]), min_size=1, max_size=3))
    g.output(*outputs)
    return g


@settings(max_examples=60, deadline=None)
@given(concat_graphs(), st.sampled_from(STRATEGIES), st.sampled_from((1, 16, 64)))
def test_random_concat_graphs_are_exact_and_verified(graph, schedule, alignment) -> None:
    prog = tg.compile(graph, schedule=schedule, alignment=alignment, debug=True)
    exact(prog, graph)
    without = tg.compile(graph, passes=NO_COPY, schedule="program", alignment=alignment)
    with_copy = tg.compile(graph, schedule="program", alignment=alignment)
    # Placing an operand never makes the program-order lower bound worse than copying.
    assert with_copy.plan.lower_bound <= without.plan.lower_bound


def test_program_with_placements_survives_save_and_load(tmp_path) -> None:
    g, *_ = two_halves()
    prog = tg.compile(g)
    path = tmp_path / "halves.tgp"
    prog.save(path)
    again = tg.load(path)
    assert again.aliasing == prog.aliasing
    x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(1, 4, 8)
    assert again.run({"x": x}, backend="arena")[0].tobytes() == (
        prog.run({"x": x}, backend="numpy")[0].tobytes()
    )


def test_the_design_name_concat_selects_copy_elimination() -> None:
    g, *_ = two_halves()
    by_design = tg.compile(g, passes=("view_alias", "concat"))
    assert by_design.options.passes == ("view_alias", "copy_elim")
    assert by_design.aliasing.count("concat") == 2


def test_an_earlier_concat_of_the_same_operands_is_a_slice_of_the_later_one() -> None:
    # Without CSE, two concats of (a, b): the later claims a and b, and the earlier,
    # whose operands then lie back to back inside it, becomes a slice of it (offset 0).
    g = tg.Graph("twice")
    x = g.input("x", (1, 2, 16))
    a, b = tg.tanh(x), tg.sigmoid(x)
    first, second = tg.concatenate([a, b], axis=1), tg.concatenate([a, b], axis=1)
    g.output(tg.exp(first), tg.negative(second))
    prog = tg.compile(g, passes=("view_alias", "copy_elim", "reinplace"), schedule="program")
    assert prog.aliasing.of(first.node.id) == Alias(second.node.id, 0, "concat")
    assert prog.aliasing.of(b.node.id) == Alias(second.node.id, 128, "concat")
    exact(prog, g)
