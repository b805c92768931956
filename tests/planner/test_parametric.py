"""The parametric plan: a symbolic graph compiles to one plan proven for every length in
its dims' ranges; at any length the arena executor allocates exactly `plan.at(...)`'s
arena and computes what the reference computes on the graph built with that int."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.planner.parametric import (
    ParametricPlan,
    evaluate_orientation,
    sample_dims,
    verify_parametric,
)
from tensorgraph.runtime import run_reference
from tests.planner.symbolic_models import symbolic_llama
from tests.strategies import DIMS, feeds, symbolic_graphs

SEQ, KV = DIMS


def _lengths(graph: tg.Graph) -> st.SearchStrategy[dict[str, int]]:
    return st.fixed_dictionaries(
        {name: st.integers(dim.min, dim.max) for name, dim in graph.dims.items()}
    )


def _same(got: list, expected: list) -> None:
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        assert np.array_equal(a, b, equal_nan=True)


@settings(max_examples=15)
@given(symbolic_graphs(max_ops=6), st.data())
def test_a_symbolic_program_runs_every_length_on_arena_as_the_reference_does(
    built: tuple, data: st.DataObject
) -> None:
    graph, rebuild = built
    prog = tg.compile(graph)
    assert isinstance(prog.plan, ParametricPlan)
    verify_parametric(prog.plan, interior=1)
    for _ in range(2):  # two lengths on one program: nothing of the first call stays
        lengths = data.draw(_lengths(graph))
        static = rebuild(lengths.get("seq", SEQ.min), lengths.get("kv", KV.min))
        inputs, params = feeds(static, seed=sum(lengths.values()))
        _same(prog.run(inputs, params, backend="arena"), run_reference(static, inputs, params))
        plan = prog.plan.at(**lengths)
        assert plan.lower_bound <= plan.arena_size <= prog.plan.upper.arena_size
        assert plan.arena_size == prog.plan.arena_size(**lengths)


def test_the_zoo_llama_over_seq_runs_on_arena_as_its_static_compile_at_each_length() -> None:
    from tensorgraph.models.llama import LlamaConfig, llama

    c = LlamaConfig(layers=1, dim=64, hidden=192, vocab=128)
    g = symbolic_llama(c, tg.Dim("seq", min=1, max=256))
    assert g.specialize(seq=5) == llama(c, seq=5).graph
    prog = tg.compile(g)
    verify_parametric(prog.plan)
    for length in (1, 5, 40, 256):
        static = tg.compile(llama(c, seq=length).graph)
        ids = np.random.default_rng(length).integers(0, c.vocab, (c.batch, length))
        feeds_ = {"tokens": ids.astype(np.int32)}
        _same(prog.run(feeds_, backend="arena"), static.run(feeds_, backend="arena"))
        at = prog.plan.at(seq=length)
        assert at.lower_bound <= at.arena_size <= prog.plan.upper.arena_size
        assert prog.plan.lower_bound(seq=length) == static.plan.lower_bound or (
            static.schedule != prog.schedule
        )


def _even_prefix_graph() -> tg.Graph:
    """exp(x)[: seq // 2 * 2] + 1: at seq's max (even) the sum could be written in place
    over exp's bytes (same size), at odd lengths it could not."""
    seq = tg.Dim("seq", min=3, max=8)
    g = tg.Graph("even")
    x = g.input("x", (seq,), tg.float32)
    g.output(tg.narrow(tg.exp(x), 0, 0, seq // 2 * 2) + 1.0)
    return g


def test_reinplacing_that_holds_only_at_some_lengths_is_dropped_and_named() -> None:
    g = _even_prefix_graph()
    at_max = tg.compile(g.specialize(seq=8))
    assert at_max.aliasing.count("inplace") == 1  # the decision the ranges must refuse
    prog = tg.compile(g)
    assert prog.aliasing.count("inplace") == 0
    assert "reinplace" in prog.stats["parametric"]["dropped_analyses"]
    for length in (3, 4, 7):
        x = np.linspace(-1, 1, length, dtype=np.float32)
        (got,) = prog.run({"x": x}, backend="arena")
        expected = np.exp(x)[: length // 2 * 2] + np.float32(1.0)
        np.testing.assert_array_equal(got, expected)


def test_a_length_outside_the_range_is_named() -> None:
    prog = tg.compile(_even_prefix_graph())
    with pytest.raises(tg.RunError, match=r"input 'x': axis 0 has length 9.*seq.*\[3, 8\]"):
        prog.run({"x": np.zeros(9, np.float32)}, backend="arena")
    with pytest.raises(tg.PlanError, match=r"dim 'seq' = 2 lies outside seq in \[3, 8\]"):
        prog.plan.at(seq=2)
    with pytest.raises(tg.PlanError, match=r"needs a value for seq in \[3, 8\]"):
        prog.plan.at()


def test_mlx_runs_a_symbolic_program_per_length_and_keeps_a_bounded_cache() -> None:
    from tensorgraph.symbolic_program import MLX_CACHED_LENGTHS, cached_lengths

    prog = tg.compile(_two_length_graph())
    lengths = (1, 2, 5, 7, 9, 12)
    for length in lengths:
        x = np.linspace(-1, 1, length, dtype=np.float32).reshape(length, 1)
        feeds_ = {"x": x, "t": np.linspace(0, 1, 64, dtype=np.float32)}
        (got,) = prog.run(feeds_, backend="mlx")
        (expected,) = run_reference(prog.source, feeds_)
        assert got.shape == expected.shape and got.dtype == expected.dtype
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    kept = cached_lengths(prog)["mlx"]
    assert [d["seq"] for d in kept] == list(lengths[-MLX_CACHED_LENGTHS:])
    with pytest.raises(tg.RunError, match=r"axis 0 has length 13.*seq.*\[1, 12\]"):
        prog.run({"x": np.zeros((13, 1), np.float32), "t": np.zeros(64, np.float32)}, backend="mlx")


def test_the_plan_at_each_length_is_the_orientation_bound_and_never_above_the_max() -> None:
    prog = tg.compile(_even_prefix_graph())
    plan = prog.plan
    assert int(plan.arena_size) == plan.at(seq=8).arena_size <= plan.upper.arena_size
    assert [d["seq"] for d in sample_dims(plan.dims, interior=1)] == [3, 5, 8]
    for length in range(3, 9):
        at = plan.at(seq=length)
        # exp(x) and the sum are live together: at least both (aligned) at every length
        assert at.lower_bound == 64 * (-(-4 * length // 64) + -(-4 * (length // 2 * 2) // 64))
        assert at.lower_bound <= at.arena_size <= plan.arena_size


def test_a_saved_symbolic_program_loads_and_its_graph_json_recompiles(tmp_path: object) -> None:
    # Regression: save wrote the plan at the max and load failed on a sympy comparison.
    prog = tg.compile(_even_prefix_graph())
    prog.save(tmp_path / "even.tgp")
    loaded = tg.load(tmp_path / "even.tgp")
    again = tg.compile(tg.Graph.from_json(prog.source.to_json()))
    for length in (3, 5, 8):
        x = np.linspace(-1, 1, length, dtype=np.float32)
        expected = prog.run({"x": x}, backend="arena")
        _same(again.run({"x": x}, backend="arena"), expected)
        _same(loaded.run({"x": x}, backend="arena"), expected)
        assert loaded.plan.at(seq=length).offsets == prog.plan.at(seq=length).offsets


def _two_length_graph() -> tg.Graph:
    """Buffers of sizes growing at different rates in seq (seq, seq*seq, a fixed 64
    floats) and a narrow view at a seq-dependent offset."""
    seq = tg.Dim("seq", min=1, max=12)
    g = tg.Graph("rates")
    x = g.input("x", (seq, 1), tg.float32)
    table = g.input("t", (64,), tg.float32)
    square = tg.exp(x @ tg.reshape(x, (1, seq)))  # (seq, seq)
    tail = tg.narrow(tg.reshape(square, (seq * seq,)), 0, seq, seq * seq - seq)
    g.output(tg.sum(tail) + tg.sum(tg.exp(table)) + tg.sum(tg.tanh(x)))
    return g


def test_offsets_are_expressions_that_the_recurrence_evaluates() -> None:
    prog = tg.compile(_two_length_graph())
    plan = prog.plan
    offsets = plan.alias_offsets()
    seq = plan.dims["seq"]
    views = [i for i, a in plan.aliasing.aliases.items() if a.kind == "view"]
    narrow = next(i for i in views if prog.graph.node(i).op == "narrow")
    assert offsets[narrow] == 4 * seq  # seq floats in: start * 1 * itemsize
    for k, orientation in enumerate(plan.orientations):
        expressions = plan.offset_expressions(k)
        for length in (1, 2, 5, 12):
            values = plan.size_values({"seq": length})
            numbers = evaluate_orientation(orientation, values, plan.alignment).offsets
            at = {
                b: int(e.subs(seq, length)) if not isinstance(e, int) else e
                for b, e in expressions.items()
            }
            assert at == numbers
    for length in (1, 5, 12):
        x = np.linspace(-1, 1, length, dtype=np.float32).reshape(length, 1)
        t = np.linspace(0, 1, 64, dtype=np.float32)
        feeds_ = {"x": x, "t": t}
        static = tg.compile(tg.specialize(prog.source, seq=length))
        _same(prog.run(feeds_, backend="arena"), static.run(feeds_, backend="arena"))
        _same(prog.run(feeds_, backend="arena"), run_reference(prog.source, feeds_))


def test_verify_plan_proves_a_parametric_plan_for_its_graph_only() -> None:
    from tensorgraph.planner.check import verify_plan

    prog = tg.compile(_two_length_graph())
    verify_plan(prog.graph, prog.plan, prog.aliasing)
    other = tg.compile(_even_prefix_graph())
    with pytest.raises(tg.PlanError, match=r"made for another graph"):
        verify_plan(other.graph, prog.plan, prog.aliasing)


def test_a_graph_whose_dims_the_rewrites_remove_compiles_statically() -> None:
    # Regression: the symbolic path planned a graph with no dims left as parametric.
    g = tg.Graph("unused")
    tg.arange(g, tg.Dim("seq", min=1, max=8))  # read by nothing: dce removes it
    y = g.input("y", (3,), tg.float32)
    g.output(tg.exp(y))
    assert g.dims
    prog = tg.compile(g)
    assert not prog.graph.dims and not isinstance(prog.plan, ParametricPlan)
    assert prog.source is g
    y_np = np.arange(3, dtype=np.float32)
    (got,) = prog.run({"y": y_np}, backend="arena")
    np.testing.assert_array_equal(got, np.exp(y_np))
