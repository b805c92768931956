"""Rewrite passes on symbolic graphs: each runs on a graph over `tg.Dim`s without
failing, and rewriting then specialising computes what specialising then rewriting
computes, bit for bit, at any length in range (the reference interpreter is the oracle)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.ir.verify import verify
from tensorgraph.passes import REWRITES
from tensorgraph.runtime import run_reference
from tests.strategies import feeds, symbolic_graphs


def _run_passes(graph: tg.Graph) -> tg.Graph:
    for rewrite in REWRITES.values():
        graph = rewrite(graph).graph
        verify(graph)
    return graph


def _lengths(graph: tg.Graph) -> st.SearchStrategy[dict[str, int]]:
    return st.fixed_dictionaries(
        {name: st.integers(dim.min, dim.max) for name, dim in graph.dims.items()}
    )


@settings(max_examples=25)
@given(symbolic_graphs(max_ops=6), st.data())
def test_rewriting_a_symbolic_graph_commutes_with_specialising_it(
    built: tuple, data: st.DataObject
) -> None:
    graph, _ = built
    rewritten = _run_passes(graph)
    lengths = data.draw(_lengths(graph))
    late = tg.specialize(rewritten, **lengths)
    early = _run_passes(tg.specialize(graph, **lengths))
    inputs, params = feeds(early, seed=sum(lengths.values()))
    got, expected = run_reference(late, inputs, params), run_reference(early, inputs, params)
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        assert np.array_equal(a, b, equal_nan=True)


def test_fold_keeps_a_generator_over_a_dim_as_a_run_time_value() -> None:
    # Regression: fold compared a symbolic size with COMPILE_FOLD (sympy's TypeError).
    # A generator read by a run-time value stays one (prefix folding takes what is
    # computed from generators, such as a cast of this arange: tests/passes/
    # test_prefix_fold.py).
    seq = tg.Dim("seq", min=1, max=64)
    g = tg.Graph("mask")
    x = g.input("x", (seq,), tg.float32)
    g.output(x + tg.arange(g, seq, dtype=tg.float32))
    folded = REWRITES["fold"](g)
    assert folded.stats["folded"] == 0
    assert folded.stats["prefix_folded"] == 0
    assert [n.op for n in folded.graph.nodes] == [n.op for n in g.nodes]
    static = REWRITES["fold"](tg.specialize(g, seq=8)).graph
    x8 = np.arange(8, dtype=np.float32)
    (got,) = run_reference(tg.specialize(folded.graph, seq=8), {"x": x8})
    (expected,) = run_reference(static, {"x": x8})
    assert np.array_equal(got, x8 + np.arange(8, dtype=np.float32))
    assert np.array_equal(got, expected)
