"""Constant folding never holds a weight's data twice: a value computed from a bound
param or constant that the program still reads elsewhere folds only if it adds no bytes
(see passes/fold.py)."""

import importlib
from unittest import mock

import numpy as np
from hypothesis import given, settings

import tensorgraph as tg
from tensorgraph.passes.fold import fold
from tensorgraph.runtime.reference import run_reference
from tests.strategies import bound_graphs, feeds

FOLD_MODULE = importlib.import_module("tensorgraph.passes.fold")  # `passes.fold` is the pass
VOCAB, DIM, TOKENS = 300, 64, 5  # the table: 300 * 64 * 4 = 76,800 B, above SMALL_FOLD


def tied_embedding_graph() -> tg.Graph:
    """A language model's ends with a tied embedding: tokens looked up in the table by
    `take`, then logits = h @ table.T (the output projection reuses the same weights)."""
    g = tg.Graph("tied")
    ids = g.input("ids", (TOKENS,), tg.int32)
    rng = np.random.default_rng(0)
    table = g.param("embed", (VOCAB, DIM), value=rng.standard_normal((VOCAB, DIM), np.float32))
    h = tg.tanh(tg.take(table, ids, axis=0))
    g.output(h @ tg.transpose(table))
    return g


def held_bytes(graph: tg.Graph) -> int:
    """Bytes of the bound params and constants a graph holds."""
    constants = sum(n.nbytes for n in graph.nodes if n.op == "constant")
    params = {n.name for n in graph.nodes if n.op == "param"}
    return constants + sum(v.nbytes for k, v in graph.param_values.items() if k in params)


def test_a_tied_embedding_is_held_once() -> None:
    # Before the fix the transposed table folded into a second 76,800 B constant beside
    # the one `take` reads: 2 * VOCAB * DIM * 4 bytes held.
    g = tied_embedding_graph()
    prog = tg.compile(g)
    assert held_bytes(prog.graph) == VOCAB * DIM * 4
    assert prog.plan.constant_size < 2 * VOCAB * DIM * 4
    ids = np.array([0, 7, 299, 7, 42], np.int32)
    table = g.param_values["embed"]
    want = np.tanh(table[ids]) @ table.T  # an oracle apart from tensorgraph's kernels
    for backend in ("numpy", "arena", "mlx"):
        (got,) = prog.run({"ids": ids}, backend=backend)
        assert got.shape == (TOKENS, VOCAB)
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=backend)


@settings(max_examples=60)
@given(bound_graphs())
def test_folding_never_grows_the_held_bytes_when_no_growth_is_granted(graph: tg.Graph) -> None:
    # With the rule's allowances for growth set to zero (no small-value allowance, no
    # share of the weights), folding may only trade a weight's bytes for at most as many
    # folded bytes: a transpose or a scale of a weight that stays read elsewhere does not
    # fold. Outputs stay bit for bit.
    with (
        mock.patch.object(FOLD_MODULE, "SMALL_FOLD", 0),
        mock.patch.object(FOLD_MODULE, "GROWTH_SHARE", 0),
    ):
        result = fold(graph).graph
    assert held_bytes(result) <= held_bytes(graph)
    inputs, params = feeds(graph)
    want = run_reference(graph, inputs, params)
    got = run_reference(result, inputs, params)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(want, got, strict=True))
