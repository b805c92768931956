"""Every pass, alone and in the pipeline, keeps outputs and invariants (random graphs)."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.ir.verify import verify
from tensorgraph.passes import REWRITES
from tensorgraph.planner.plan import plan_memory
from tensorgraph.runtime.arena import run_arena
from tensorgraph.runtime.reference import run_reference
from tests.strategies import bound_graphs, chains, feeds, graphs


def assert_same(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


@given(graphs(), st.sampled_from(sorted(REWRITES)))
def test_each_pass_alone_preserves_outputs_and_invariants(graph: tg.Graph, name: str) -> None:
    before = graph.to_json()
    inputs, params = feeds(graph)
    want = run_reference(graph, inputs, params)
    result = REWRITES[name](graph)
    verify(result.graph)
    assert graph.to_json() == before, "a pass mutated its input graph"
    assert_same(run_reference(result.graph, inputs, params), want)
    plan = plan_memory(result.graph, algorithm="greedy_size", alignment=64)
    assert_same(run_arena(result.graph, plan, inputs, params), want)


@settings(max_examples=60)
@given(st.one_of(graphs(), chains(), bound_graphs()), st.sampled_from(("best", "greedy_size")))
def test_pipeline_preserves_outputs_through_the_arena(graph: tg.Graph, planner: str) -> None:
    before = graph.to_json()
    inputs, params = feeds(graph, seed=1)
    want = run_reference(graph, inputs, params)
    prog = tg.compile(graph, planner=planner)
    assert graph.to_json() == before
    verify(prog.graph)
    assert_same(prog.run(inputs, params, backend="numpy"), want)
    assert_same(prog.run(inputs, params, backend="arena"), want)
    assert prog.plan.lower_bound <= prog.plan.arena_size <= prog.plan.total_unshared


@given(graphs())
def test_passes_never_raise_the_lower_bound(graph: tg.Graph) -> None:
    unoptimised = tg.compile(graph, passes=(), planner="greedy_size")
    optimised = tg.compile(graph, planner="greedy_size")
    assert optimised.plan.lower_bound <= unoptimised.plan.lower_bound


def test_a_small_slice_returned_does_not_pin_its_source() -> None:
    # Found by the property above: y = -x (80 B) is read only by an output row narrow(y)
    # (20 B). As a view, the row keeps all of y to the end: x, y and |x| live together,
    # 3 * 128 B at alignment 64. Copied early, y dies at once: x, y and the row at the
    # copy (128 + 128 + 64), then x, the row and |x|: 320 B.
    g = tg.Graph("slice")
    x = g.input("x0", (4, 5))
    y = tg.negative(x)
    g.output(tg.abs(x), tg.narrow(y, 0, 0, 1))
    prog = tg.compile(g, planner="greedy_size")
    assert prog.plan.lower_bound == 320
    assert prog.aliasing.count("view") == 0
