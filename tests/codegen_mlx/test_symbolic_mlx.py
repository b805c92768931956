"""Symbolic programs on MLX (codegen_mlx/symbolic.py, shapeless.py): shapeless segments
traced once and replayed at every length give a per-shape compile's numbers, shape-
dependent ones are traced per length, every length shares one device copy of the
weights, and MLX's buffer cache stays within the arena at the max."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.codegen_mlx import executor
from tensorgraph.codegen_mlx.shapeless import is_shapeless
from tensorgraph.codegen_mlx.symbolic import shared_traces, symbolic_traces
from tensorgraph.runtime import run_reference
from tensorgraph.symbolic_program import MLX_CACHED_LENGTHS, cached_lengths, concrete_program
from tests.strategies import DIMS, feeds, symbolic_graphs

SEQ, KV = DIMS


def _shapeless_graph() -> tg.Graph:
    """One of each kind of shapeless node over seq: a matmul with a bound weight, a
    broadcasting add, softmax, a reshape with one symbolic extent, a transpose, a
    reduction over a fixed axis, an RMS norm, a concatenation, a comparison and where,
    a cast, a gather from a static table, and reductions over the symbolic axis (a mean
    divides by a count that changes with the length)."""
    seq = tg.Dim("seq", min=2, max=16)  # >= 2: reductions over seq stay shapeless
    g = tg.Graph("shapeless")
    x = g.input("x", (seq, 8), tg.float32)
    ids = g.input("ids", (seq,), tg.int32)
    rng = np.random.default_rng(0)
    w = g.param("w", (8, 8), tg.float32)
    g.bind("w", rng.normal(size=(8, 8)).astype(np.float32))
    table = g.param("table", (10, 8), tg.float32)
    g.bind("table", rng.normal(size=(10, 8)).astype(np.float32))
    h = tg.softmax(x @ w + tg.take(table, ids, 0), axis=-1)
    pairs = tg.reshape(h, (seq * 2, 4))
    folded = tg.sum(tg.transpose(pairs, (1, 0)), axis=0, keepdims=True)
    normed = tg.rms_norm(h, None, 1e-5)
    both = tg.concatenate([normed, tg.exp(h)], axis=0)
    over_seq = tg.mean(h, axis=0) + tg.sum(tg.log_softmax(h, axis=0), axis=0)  # N is a dim
    g.output(folded, tg.where(both > 0.5, both, -both).astype(tg.float16), over_seq)
    return g


def _feeds(length: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(length)
    return {
        "x": rng.normal(size=(length, 8)).astype(np.float32),
        "ids": rng.integers(0, 10, length).astype(np.int32),
    }


LENGTHS = (2, 3, 7, 16, 5)


@pytest.mark.parametrize("mode", ["auto", "compiled"])
def test_a_shapeless_trace_replays_every_length_as_a_per_shape_compile(mode: str) -> None:
    g = _shapeless_graph()
    prog = tg.compile(g)
    traces = symbolic_traces(prog)
    assert all(traces.shapeless) and traces.whole
    for length in LENGTHS:
        static = tg.compile(g.specialize(seq=length))
        got = prog.run(_feeds(length), backend="mlx", mode=mode)
        expected = static.run(_feeds(length), backend="mlx", mode=mode)  # traced at its shape
        for a, b in zip(got, expected, strict=True):
            assert a.shape == b.shape and a.dtype == b.dtype
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    # one trace per segment (or for the whole program), whatever the number of lengths
    kinds = {key[1] for key in shared_traces(prog)}
    expected_keys = {"compiled"} if mode == "compiled" else set(range(len(traces.bounds)))
    assert kinds == expected_keys and len(shared_traces(prog)) == len(expected_keys)


def test_a_reduction_over_an_axis_that_can_be_1_is_traced_per_length() -> None:
    # Regression: MLX 0.32's shapeless replay of a sum over an axis that is 1 at the
    # call crashed the process (segmentation fault).
    seq = tg.Dim("seq", min=1, max=8)
    g = tg.Graph("one")
    x = g.input("x", (seq, 4), tg.float32)
    g.output(tg.sum(tg.exp(x), axis=0), tg.softmax(x, axis=0))
    prog = tg.compile(g)
    reductions = [n for n in prog.graph.nodes if n.op in ("sum", "softmax")]
    assert len(reductions) == 2 and not any(is_shapeless(prog.graph, n) for n in reductions)
    assert is_shapeless(prog.graph, next(n for n in prog.graph.nodes if n.op == "exp"))
    for length in (3, 1, 2):
        x_np = np.linspace(-1, 1, 4 * length, dtype=np.float32).reshape(length, 4)
        for mode in ("auto", "compiled"):
            got = prog.run({"x": x_np}, backend="mlx", mode=mode)
            expected = run_reference(g.specialize(seq=length), {"x": x_np})
            for a, b in zip(got, expected, strict=True):
                np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def _dependent_graph() -> tg.Graph:
    """Causal attention (its mask is built for the traced length: MLX replays it wrong
    shapeless) and a narrow whose length is a dim (MLX's slice cannot infer its shape)."""
    seq = tg.Dim("seq", min=2, max=12)
    g = tg.Graph("dependent")
    x = g.input("x", (1, 1, seq, 8), tg.float32)
    attended = tg.scaled_dot_product_attention(x, x, x, mask="causal")
    g.output(tg.narrow(tg.exp(attended), 2, 1, seq - 1))
    return g


def test_shape_dependent_segments_are_traced_per_length_and_the_cache_is_bounded() -> None:
    g = _dependent_graph()
    prog = tg.compile(g)
    assert not any(
        is_shapeless(prog.graph, n)
        for n in prog.graph.nodes
        if n.op in ("narrow", "scaled_dot_product_attention")
    )
    assert not symbolic_traces(prog).whole
    lengths = (2, 3, 12, 5, 9, 4)
    for length in lengths:
        x = np.random.default_rng(length).normal(size=(1, 1, length, 8)).astype(np.float32)
        for mode in ("auto", "compiled", "eager"):
            (got,) = prog.run({"x": x}, backend="mlx", mode=mode)
            (expected,) = run_reference(g.specialize(seq=length), {"x": x})
            assert got.shape == expected.shape == (1, 1, length - 1, 8)
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    assert "compiled" not in {key[1] for key in shared_traces(prog)}
    kept = cached_lengths(prog)["mlx"]
    assert [d["seq"] for d in kept] == list(lengths[-MLX_CACHED_LENGTHS:])


def test_every_length_reads_one_device_copy_of_the_weights() -> None:
    prog = tg.compile(_shapeless_graph())
    for length in (2, 9, 16):
        prog.run(_feeds(length), backend="mlx")
    device = mx.default_device()
    copies = [
        executor._resident(concrete_program(prog, {"seq": n}, mlx=True), device) for n in (2, 9, 16)
    ]
    assert all(c is copies[0] for c in copies)
    bound = {n.id for n in prog.graph.params}
    assert bound <= set(copies[0])  # both weights, once
    assert executor._cache(prog)[f"values-{device}"] is copies[0]


def test_mlx_cache_stays_within_the_arena_at_the_max_and_the_limit_is_restored() -> None:
    prog = tg.compile(_shapeless_graph())
    before = mx.set_cache_limit(1 << 40)
    mx.set_cache_limit(before)
    for length in (16, 2, 9, 3, 16, 12):
        prog.run(_feeds(length), backend="mlx")
        assert mx.get_cache_memory() <= int(prog.plan.arena_size)
    assert mx.set_cache_limit(before) == before


@settings(max_examples=10)
@given(symbolic_graphs(max_ops=6), st.data())
def test_random_symbolic_programs_run_on_mlx_as_the_reference_at_random_lengths(
    built: tuple, data: st.DataObject
) -> None:
    graph, rebuild = built
    prog = tg.compile(graph)
    for _ in range(2):
        lengths = data.draw(
            st.fixed_dictionaries({n: st.integers(d.min, d.max) for n, d in graph.dims.items()})
        )
        static = rebuild(lengths.get("seq", SEQ.min), lengths.get("kv", KV.min))
        inputs, params = feeds(static, seed=sum(lengths.values()))
        expected = run_reference(static, inputs, params)
        for mode in ("auto", "compiled"):
            got = prog.run(inputs, params, backend="mlx", mode=mode)
            for a, b in zip(got, expected, strict=True):
                assert a.shape == b.shape and a.dtype == b.dtype
                np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-4)
