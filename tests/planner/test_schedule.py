"""Memory-aware scheduling: valid orders, never above the program order's peak."""

import time

from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.planner.aliasing import analyze_aliasing
from tensorgraph.planner.schedule import (
    STRATEGIES,
    CostModel,
    _hoist_cluster,
    is_topological,
    peak_of,
    reorder,
    schedule,
)
from tests.passes.test_pipeline_properties import assert_same
from tests.strategies import chains, feeds, graphs

KIB, MIB = 1 << 10, 1 << 20


@settings(max_examples=60)
@given(st.one_of(graphs(), chains()), st.sampled_from(STRATEGIES))
def test_orders_are_topological_and_never_worse_than_program(graph, strategy) -> None:
    result = schedule(graph, strategy)
    assert is_topological(graph, result.order)
    assert result.peak == peak_of(reorder(graph, result.order))
    if strategy == "best":
        assert result.peak <= result.program_peak


@settings(max_examples=40)
@given(st.one_of(graphs(), chains()))
def test_scheduled_programs_compute_the_same_outputs(graph) -> None:
    inputs, params = feeds(graph)
    want = tg.compile(graph, passes=()).run(inputs, params, backend="numpy")
    prog = tg.compile(graph, schedule="best")
    assert prog.schedule_stats["chosen_peak"] <= prog.schedule_stats["program_peak"]
    assert_same(prog.run(inputs, params, backend="arena"), want)


def interleaved_branches() -> tg.Graph:
    """Two independent branches, each with a 1 MiB intermediate, emitted interleaved."""
    g = tg.Graph("interleaved")
    x = g.input("x", (1024,))  # 4 KiB
    a1 = tg.broadcast_to(x, (256, 1024))  # 1 MiB
    xb = tg.exp(x)  # 4 KiB
    b1 = tg.broadcast_to(xb, (256, 1024))  # 1 MiB, while a1 is still live
    a2 = a1.sum(0)  # 4 KiB
    b2 = b1.sum(0)  # 4 KiB
    g.output(a2 + b2)
    return g


def test_interleaved_branches_are_scheduled_one_after_the_other() -> None:
    g = interleaved_branches()
    # Program order: at b1's step a1 (1 MiB), xb (4 KiB) and b1 (1 MiB) are live; x died
    # at exp, its last reader.
    program = tg.compile(g, schedule="program")
    assert program.plan.lower_bound == 2 * MIB + 4 * KIB
    # Best order (exp first, then a1, a2, b1, b2): one 1 MiB intermediate at a time plus
    # two 4 KiB vectors (x and xb while a1 is built; then xb and a2, then a2 and b2).
    best = tg.compile(g, schedule="best")
    assert best.plan.lower_bound == MIB + 8 * KIB
    assert best.schedule_stats["program_peak"] == 2 * MIB + 4 * KIB
    inputs, _ = feeds(g)
    assert_same(best.run(inputs, backend="arena"), program.run(inputs, backend="numpy"))


def test_best_schedules_a_10k_node_graph() -> None:
    g = tg.Graph("long")
    h = g.input("x", (8, 8))
    skips = [h]
    for i in range(2500):
        h = tg.tanh(h * 0.5) + skips[-(i % 5) - 1]
        h = tg.exp(-tg.abs(h))
        skips.append(h)
    g.output(h)
    assert len(g) >= 10_000
    began = time.perf_counter()
    result = schedule(g, "best")
    elapsed = time.perf_counter() - began
    assert is_topological(g, result.order)
    assert result.peak <= result.program_peak
    print(f"best schedule of {len(g)} nodes in {elapsed:.2f} s")  # timed in benches/


@settings(max_examples=40)
@given(st.one_of(graphs(), chains()), st.sampled_from(STRATEGIES))
def test_the_chosen_orders_aliasing_is_what_the_alias_analysis_gives_for_it(
    graph, strategy
) -> None:
    """The cost model caches each order's analysis and the compiler reuses the chosen
    order's: it must be the aliasing `analyze_aliasing` computes afresh on the reordered
    graph, and the work counted must be what costing each order afresh counts."""
    result = schedule(graph, strategy)
    ordered = reorder(graph, result.order)
    assert result.aliasing == analyze_aliasing(ordered, result.order, alignment=64)
    fresh = CostModel(graph)
    for order in (result.order, result.order):
        fresh.peak(order)
    assert fresh.work == 2 * len(graph)
    assert fresh.peak(result.order) == peak_of(ordered)


def reader_of_a_private_copy() -> tg.Graph:
    """d = exp(x) is read twice: by e = d * s, whose copy t (a transpose, an output) is
    made right after it in program order, and by p = d * c, where c = sin(w) is made for
    p alone (as a recomputed copy is) and r = sum(p). Every buffer is 256 KiB."""
    g = tg.Graph("private_copy")
    n = 64 * 1024
    x = g.input("x", (n,))
    d = tg.exp(x)
    e = d * g.param("s", (n,))
    t = e.reshape(256, 256).transpose(1, 0).reshape(n)
    p = d * tg.sin(g.param("w", (n,)))
    g.output(t)
    g.output(p.sum())
    return g


def test_a_reader_is_hoisted_with_the_copy_made_for_it_and_the_reduction_freeing_it():
    # Program order: at t, d (read by p later), e and t are live: 3 x 256 KiB. Moving
    # p alone before e leaves it after its operand c, moving c alone holds c across t:
    # no single move lowers that. Hoisted together (c, p, r right after d), p writes
    # over c, then e over d (its last reader) and t beside it: 2 x 256 KiB, plus r's
    # 64-byte scalar, an output, live from there on.
    graph = reader_of_a_private_copy()
    result = schedule(graph, "best")
    assert result.program_peak == 3 * 256 * KIB
    assert result.peak == 2 * 256 * KIB + 64
    assert is_topological(graph, result.order)


@settings(max_examples=40)
@given(st.one_of(graphs(), chains()), st.data())
def test_a_cluster_hoist_is_a_topological_order_moving_its_reader_no_later(graph, data):
    order = schedule(graph, data.draw(st.sampled_from(STRATEGIES))).order
    position = {n: k for k, n in enumerate(order)}
    last = data.draw(st.sampled_from(order))
    moved = _hoist_cluster(graph, order, position, graph.users(), last)
    if moved is not None:
        assert sorted(moved) == sorted(order) and moved != order
        assert is_topological(graph, moved)
        assert moved.index(last) <= position[last]
