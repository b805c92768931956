"""The transposed-matmul rewrite: a matmul of a transposed operand reads the operand as
stored (no transposed copy in the plan), every output kept bit for bit on the NumPy
executors and to float32 rounding on MLX."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.ir.verify import verify
from tensorgraph.passes import transposed_matmul
from tensorgraph.planner.plan import plan_memory
from tensorgraph.runtime.arena import run_arena
from tensorgraph.runtime.reference import run_reference
from tests.strategies import feeds, transposed_matmul_graphs


@settings(max_examples=15)
@given(transposed_matmul_graphs())
def test_rewrite_reads_the_untransposed_operand_and_keeps_outputs(case) -> None:
    graph, absorbed, dropped = case
    before = graph.to_json()
    inputs, params = feeds(graph)
    want = run_reference(graph, inputs, params)
    result = transposed_matmul(graph)
    verify(result.graph)
    assert graph.to_json() == before, "the pass mutated its input graph"
    ops = [n.op for n in result.graph.nodes]
    assert result.stats == {"absorbed": absorbed}
    assert ops.count("matmul_transposed") == absorbed
    assert ops.count("matmul") == 1  # the product of a (1, 0, 2) transpose stays
    # every transpose the rewritten matmuls alone read is gone; the others stay
    assert ops.count("transpose") == [n.op for n in graph.nodes].count("transpose") - dropped
    got = run_reference(result.graph, inputs, params)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
    plan = plan_memory(result.graph, algorithm="greedy_size", alignment=64)
    for g, w in zip(run_arena(result.graph, plan, inputs, params), want, strict=True):
        np.testing.assert_array_equal(g, w)
    prog = tg.compile(graph)
    for g, w in zip(prog.run(inputs, params, backend="mlx"), want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_no_transposed_operand_leaves_the_graph_as_it_is() -> None:
    g = tg.Graph("plain")
    x = g.input("x", (3, 4), tg.float32)
    g.output(x @ g.input("w", (4, 5), tg.float32), tg.transpose(x))
    result = transposed_matmul(g)
    assert result.graph is g and result.stats == {"absorbed": 0}


def test_tied_embedding_projection_plans_no_transposed_table() -> None:
    # Regression (issue 25): a tied output projection `h @ embed.T` kept a run-time
    # transpose of the whole table (the lookup holds the table, so fold may not store a
    # second copy): 1 MiB of a Whisper decode step's arena, and a second MLX segment.
    vocab, dim = 512, 256
    table = np.random.default_rng(0).standard_normal((vocab, dim)).astype(np.float32)
    g = tg.Graph("tied")
    ids = g.input("ids", (1, 4), tg.int32)
    embed = g.param("embed", (vocab, dim), tg.float32)
    g.param_values["embed"] = table
    h = tg.tanh(tg.take(embed, ids, axis=0))
    g.output(h @ tg.transpose(embed))
    prog = tg.compile(g)
    ops = [n.op for n in prog.graph.nodes]
    assert "transpose" not in ops and ops.count("matmul_transposed") == 1
    logits_bytes = 1 * 4 * vocab * 4
    assert prog.plan.arena_size < table.nbytes  # only h and the logits: no table copy
    assert prog.plan.arena_size <= 2 * (logits_bytes + 4 * dim * 4)
    feed = {"ids": np.array([[1, 7, 300, 511]], np.int32)}
    want = np.tanh(table[feed["ids"]]) @ table.T
    for backend in ("numpy", "arena", "mlx"):
        (got,) = prog.run(feed, backend=backend)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    unrewritten = tg.compile(g, passes=("dce", "cse", "fold", "view_alias", "reinplace"))
    assert unrewritten.plan.arena_size >= table.nbytes  # what the rewrite removed


@settings(max_examples=15, deadline=None)
@given(
    st.lists(st.integers(1, 3), max_size=2),
    st.integers(1, 4),
    st.integers(1, 4),
    st.integers(1, 4),
    st.booleans(),
    st.integers(0, 2**32 - 1),
)
def test_a_transposed_first_operand_is_read_as_stored(batch, m, n, inner, both, seed) -> None:
    """x^T @ dy (a weight gradient's product) becomes matmul_transposed_a: no transposed
    copy of x in the graph, outputs bit for bit on the NumPy executors and to float32
    rounding on MLX. With b transposed too, b's rewrite is taken and a's transpose stays."""
    rng = np.random.default_rng(seed)
    g = tg.Graph("xt_dy")
    x = g.input("x", (*batch, inner, m), tg.float32)
    dy = g.input("dy", (*batch, inner, n) if not both else (*batch, n, inner), tg.float32)
    right = tg.swapaxes(dy, -1, -2) if both else dy
    g.output(tg.tanh(tg.swapaxes(x, -1, -2) @ right))
    result = transposed_matmul(g)
    ops = [node.op for node in result.graph.nodes]
    assert result.stats == {"absorbed": 1}
    assert ops.count("matmul_transposed" if both else "matmul_transposed_a") == 1
    assert ops.count("transpose") == (1 if both else 0)
    values = {"x": rng.standard_normal(x.shape).astype(np.float32)}
    values["dy"] = rng.standard_normal(dy.shape).astype(np.float32)
    (want,) = run_reference(g, values, {})
    (got,) = run_reference(result.graph, values, {})
    np.testing.assert_array_equal(got, want)
    prog = tg.compile(g)
    (arena,) = prog.run(values, backend="arena")
    np.testing.assert_array_equal(arena, want)
    (fast,) = prog.run(values, backend="mlx")
    np.testing.assert_allclose(fast, want, rtol=1e-5, atol=1e-5)
