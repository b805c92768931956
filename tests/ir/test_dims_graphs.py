"""Symbolic graphs: a graph built over `tg.Dim`s, specialised at any length in range, is
the graph the builder makes with that int (inference on expressions agrees with
inference on ints), the reference interpreter runs it at the length its feeds carry,
JSON keeps it, and compile plans it (a multi-entry program refuses it by name)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.ir.verify import verify
from tensorgraph.runtime import run_reference
from tests.strategies import DIMS, feeds, symbolic_graphs

SEQ, KV = DIMS


def _lengths(graph: tg.Graph) -> st.SearchStrategy[dict[str, int]]:
    return st.fixed_dictionaries(
        {name: st.integers(dim.min, dim.max) for name, dim in graph.dims.items()}
    )


@settings(max_examples=30)
@given(symbolic_graphs(), st.data())
def test_a_symbolic_graph_at_any_length_is_the_graph_built_with_that_int(
    built: tuple, data: st.DataObject
) -> None:
    graph, rebuild = built
    verify(graph)
    lengths = data.draw(_lengths(graph))
    static = rebuild(lengths.get("seq", SEQ.min), lengths.get("kv", KV.min))
    assert not static.dims
    specialised = tg.specialize(graph, **lengths)
    assert not specialised.dims
    verify(specialised)
    assert specialised == static, f"{specialised}\n!=\n{static}"


@settings(max_examples=20)
@given(symbolic_graphs(max_ops=6), st.data())
def test_the_reference_runs_a_symbolic_graph_at_the_length_of_its_feeds(
    built: tuple, data: st.DataObject
) -> None:
    graph, rebuild = built
    for _ in range(2):  # two lengths on one graph: nothing of the first call stays
        lengths = data.draw(_lengths(graph))
        static = rebuild(lengths.get("seq", SEQ.min), lengths.get("kv", KV.min))
        inputs, params = feeds(static, seed=sum(lengths.values()))
        got = run_reference(graph, inputs, params)
        expected = run_reference(static, inputs, params)
        assert len(got) == len(expected)
        for a, b in zip(got, expected, strict=True):
            assert a.shape == b.shape and a.dtype == b.dtype
            assert np.array_equal(a, b, equal_nan=True)


@settings(max_examples=25)
@given(symbolic_graphs())
def test_json_keeps_the_dims_and_every_extent(built: tuple) -> None:
    graph, _ = built
    text = graph.to_json()
    again = tg.Graph.from_json(text)
    assert again == graph
    assert again.dims == graph.dims
    assert again.to_json() == text


def test_the_reference_output_follows_numpy_at_each_length() -> None:
    """An independent oracle: NumPy slicing and concatenation at each length."""
    seq = tg.Dim("seq", min=2, max=64)
    g = tg.Graph("slices")
    x = g.input("x", (1, seq, 4), tg.float32)
    both = tg.concatenate([x, x * 2.0], axis=1)  # (1, 2*seq, 4)
    middle = tg.narrow(both, 1, 1, seq)  # rows 1 .. seq of the pair
    flat = tg.reshape(middle, (1, -1))  # (1, 4*seq)
    positions = tg.arange(g, seq).astype(tg.float32)
    g.output(middle, flat, tg.softmax(middle, axis=1), positions)
    assert g.node(flat.id).shape == (1, 4 * seq)
    rng = np.random.default_rng(3)
    for length in (2, 3, 17, 64):
        value = rng.standard_normal((1, length, 4)).astype(np.float32)
        pair = np.concatenate([value, value * np.float32(2)], axis=1)
        expected = pair[:, 1 : 1 + length]
        middle_out, flat_out, soft_out, positions_out = run_reference(g, {"x": value})
        np.testing.assert_array_equal(middle_out, expected)
        np.testing.assert_array_equal(flat_out, expected.reshape(1, 4 * length))
        e = np.exp(expected - expected.max(axis=1, keepdims=True))
        np.testing.assert_allclose(soft_out, e / e.sum(axis=1, keepdims=True), rtol=1e-6)
        np.testing.assert_array_equal(positions_out, np.arange(length, dtype=np.float32))


# ---------------------------------------------------------------- undecided conditions


def _graph(*shapes: tuple) -> tuple[tg.Graph, list[tg.Tensor]]:
    g = tg.Graph("undecided")
    return g, [g.input(f"x{i}", shape, tg.float32) for i, shape in enumerate(shapes)]


def test_two_different_dims_do_not_broadcast() -> None:
    _, (a, b) = _graph((SEQ,), (KV,))
    with pytest.raises(
        tg.GraphError, match=r"%2 add: .*seq == kv.*for every kv in \[1, 6\], seq in \[2, 9\]"
    ):
        _ = a + b


def test_a_dim_broadcasts_with_an_int_only_outside_its_range() -> None:
    _, (a, b, c) = _graph((SEQ,), (4,), (20,))
    with pytest.raises(tg.GraphError, match=r"%3 add: .*broadcast \(seq == 4\) does not hold"):
        _ = a + b
    with pytest.raises(tg.ShapeError, match=r"add: shapes do not broadcast"):
        _ = a + c  # 20 is outside [2, 9]: never equal
    assert (a + tg.sum(a, keepdims=True)).shape == (SEQ,)  # a 1 broadcasts


def test_matmul_inner_dims_must_be_one_extent() -> None:
    _, (a, b) = _graph((3, SEQ), (KV, 2))
    with pytest.raises(tg.GraphError, match=r"matmul: inner dims seq == kv"):
        _ = a @ b
    _, (a, b) = _graph((3, 2 * SEQ), (SEQ + SEQ, 5))
    assert (a @ b).shape == (3, 5)  # equal by expression is equal


def test_a_reshape_that_divides_for_some_lengths_is_refused() -> None:
    _, (a,) = _graph((3, SEQ))
    with pytest.raises(
        tg.GraphError,
        match=r"reshape of %0 input 'x0': 3\*seq elements divide into \(-1, 2\) does not "
        r"hold for every seq in \[2, 9\]",
    ):
        a.reshape(-1, 2)
    assert a.reshape(-1, 3).shape == (SEQ, 3)
    _, (b,) = _graph((SEQ, KV))
    with pytest.raises(
        tg.GraphError,
        match=r"%1 reshape: x0 \(seq, kv\) has kv\*seq elements to \(seq, seq\): "
        r"seq\*\*2 == kv\*seq",
    ):
        b.reshape(SEQ, SEQ)


def test_a_narrow_past_the_axis_for_some_lengths_is_refused() -> None:
    _, (a,) = _graph((SEQ,))
    with pytest.raises(tg.GraphError, match=r"%1 narrow: 5 <= seq does not hold"):
        tg.narrow(a, 0, 0, 5)
    with pytest.raises(tg.ShapeError, match=r"%1 narrow: narrow \[1, seq \+ 1\) is outside"):
        tg.narrow(a, 0, 1, SEQ)  # past the end for every length
    assert tg.narrow(a, 0, 1, SEQ - 1).shape == (SEQ - 1,)


def test_conditions_on_emptiness_and_signs_name_the_dims() -> None:
    g, (a,) = _graph((SEQ,))
    maybe_empty = tg.narrow(a, 0, 2, SEQ - 2)  # empty at seq = 2
    with pytest.raises(tg.GraphError, match=r"max: axis 0 .* non-empty .*seq in \[2, 9\]"):
        tg.max(maybe_empty, 0)
    with pytest.raises(tg.GraphError, match=r"arange\(0, seq - 5, 1\)"):
        tg.arange(g, SEQ - 5)
    with pytest.raises(tg.GraphError, match=r"input: seq - 4 >= 0 does not hold"):
        g.input("short", (SEQ - 4,))
    with pytest.raises(tg.GraphError, match=r"full: seq - 3 >= 0"):
        tg.full(g, (SEQ - 3,), 1.0)
    with pytest.raises(tg.GraphError, match=r"concatenate: .*agree on axis 0 \(seq == kv\)"):
        tg.concatenate([g.input("p", (SEQ, 2)), g.input("q", (KV, 3))], axis=1)


def test_a_rule_not_written_for_dims_is_refused_by_name() -> None:
    _, (x, w) = _graph((1, 1, SEQ, 4), (1, 1, 3, 3))
    with pytest.raises(tg.GraphError, match=r"conv2d's shape rule cannot compare Dim"):
        tg.conv2d(x, w)


def test_a_size_must_be_an_integer_expression_of_dims() -> None:
    import sympy

    _, (a,) = _graph((2, SEQ))
    with pytest.raises(tg.GraphError, match=r"seq/2 is not an integer .*use //"):
        a.reshape(-1, SEQ / 2)
    with pytest.raises(tg.GraphError, match=r"n is not an expression of tg.Dim"):
        a.reshape(2, sympy.Symbol("n", integer=True))
    assert a.reshape(2, SEQ // 2 * 0 + SEQ).shape == (2, SEQ)


def test_one_name_is_one_dim_in_a_graph() -> None:
    g = tg.Graph("names")
    g.input("a", (SEQ,))
    with pytest.raises(tg.GraphError, match=r"seq in \[1, 9\] beside the graph's Dim seq in"):
        g.input("b", (tg.Dim("seq", min=1, max=9),))


# ---------------------------------------------------------------- specialize and run


def _attention_graph() -> tg.Graph:
    seq = tg.Dim("seq", min=1, max=32)
    g = tg.Graph("attention")
    x = g.input("x", (1, 2, seq, 8), tg.float32)
    m = g.input("m", (1, 1, seq, seq), tg.bool_)
    g.output(tg.scaled_dot_product_attention(x, x, x, mask=m))
    return g


def test_specialize_refuses_unknown_dims_and_values_outside_the_range() -> None:
    g = _attention_graph()
    assert g.specialize(seq=32).node(2).shape == (1, 2, 32, 8)
    with pytest.raises(tg.GraphError, match=r"dim 'seq': value 33 is outside its range \[1, 32\]"):
        tg.specialize(g, seq=33)
    with pytest.raises(tg.GraphError, match=r"dim 'seq': value 0 is outside"):
        tg.specialize(g, seq=0)
    with pytest.raises(tg.GraphError, match=r"has no dim 'kv'; its dims: seq"):
        tg.specialize(g, kv=3)
    with pytest.raises(tg.GraphError, match=r"dim 'seq': value 2.0 is not an int"):
        tg.specialize(g, seq=2.0)
    assert tg.specialize(g) is g  # nothing named: nothing changes


def test_the_reference_refuses_feeds_whose_lengths_disagree_or_leave_the_range() -> None:
    g = _attention_graph()
    mask = np.ones((1, 1, 5, 5), bool)
    with pytest.raises(tg.RunError, match=r"input 'm': axis 2 has length 5, but the dim 'seq'"):
        run_reference(g, {"x": np.zeros((1, 2, 4, 8), np.float32), "m": mask})
    with pytest.raises(tg.RunError, match=r"input 'x': axis 2 has length 40.*range \[1, 32\]"):
        run_reference(g, {"x": np.zeros((1, 2, 40, 8), np.float32), "m": mask})
    with pytest.raises(tg.RunError, match=r"input 'x': expected shape \(1, 2, seq, 8\)"):
        run_reference(g, {"x": np.zeros((2, 5, 8), np.float32), "m": mask})
    with pytest.raises(tg.RunError, match=r"input 'x': expected shape \(1, 2, 5, 8\)"):
        run_reference(g, {"x": np.zeros((1, 3, 5, 8), np.float32), "m": mask})


def test_a_dim_no_input_axis_carries_is_a_run_error() -> None:
    seq = tg.Dim("seq", min=1, max=8)
    g = tg.Graph("doubled")
    g.output(tg.exp(g.input("x", (2 * seq,))))
    with pytest.raises(tg.RunError, match=r"no fed axis carries the dim\(s\) seq in \[1, 8\]"):
        run_reference(g, {"x": np.zeros(4, np.float32)})
    assert run_reference(g.specialize(seq=2), {"x": np.zeros(4, np.float32)})[0].shape == (4,)


def test_a_symbolic_attention_runs_on_the_arena_as_on_the_reference() -> None:
    # (a multi-entry program with a symbolic entry: tests/test_multi_symbolic.py)
    g = _attention_graph()
    prog = tg.compile(g)
    x = np.random.default_rng(0).standard_normal((1, 2, 6, 8)).astype(np.float32)
    m = np.tril(np.ones((6, 6), bool))[None, None]
    np.testing.assert_array_equal(
        prog.run({"x": x, "m": m}, backend="arena")[0], run_reference(g, {"x": x, "m": m})[0]
    )


def test_the_zoo_llama_over_a_symbolic_length_is_the_zoo_llama_at_each_length() -> None:
    """The zoo's prefill built over `seq` (its own block and weights) specialises to the
    graph `llama(seq=L)` builds, node for node, and runs as it does."""
    from tensorgraph.ir.fused import rms_norm
    from tensorgraph.models.common import Weights
    from tensorgraph.models.llama import LlamaConfig, layer_weights, llama, llama_block

    c = LlamaConfig(layers=1)
    g = tg.Graph("llama")
    w = Weights(g, dtype=tg.float32)
    tokens = g.input("tokens", (c.batch, tg.Dim("seq", min=1, max=2048)), tg.int32)
    h = tg.take(w.normal("embed", (c.vocab, c.dim), fan_in=1), tokens, axis=0)
    h = llama_block(h, layer_weights(w, "l0.", c.dim, c.hidden), c.heads, eps=c.eps)
    h = rms_norm(h, w.constant("norm", (c.dim,), 1.0), c.eps)
    g.output(h @ w.normal("lm_head", (c.dim, c.vocab)))
    for length in (1, 7, 2048):
        assert g.specialize(seq=length) == llama(c, seq=length).graph
    static = llama(c, seq=7).graph
    ids = np.random.default_rng(7).integers(0, c.vocab, (c.batch, 7)).astype(np.int32)
    np.testing.assert_array_equal(
        run_reference(g, {"tokens": ids})[0], run_reference(static, {"tokens": ids})[0]
    )


@pytest.mark.parametrize(
    ("index", "expected"),
    [
        (lambda s: np.s_[1:], lambda n: np.s_[1:]),
        (lambda s: np.s_[:, 1:3], lambda n: np.s_[:, 1:3]),
        (lambda s: np.s_[-1], lambda n: np.s_[-1]),
        (lambda s: np.s_[None, -2:, 0], lambda n: np.s_[None, -2:, 0]),
        (lambda s: np.s_[: s - 1], lambda n: np.s_[: n - 1]),
        (lambda s: np.s_[s // 2], lambda n: np.s_[n // 2]),
        (lambda s: np.s_[...], lambda n: np.s_[...]),
    ],
)
def test_basic_indexing_over_a_dim_axis_follows_numpy(index: object, expected: object) -> None:
    seq = tg.Dim("seq", min=2, max=40)
    g = tg.Graph("index")
    x = g.input("x", (seq, 4), tg.float32)
    g.output(x[index(seq)])
    for length in (2, 5, 40):
        value = np.arange(length * 4, dtype=np.float32).reshape(length, 4)
        np.testing.assert_array_equal(run_reference(g, {"x": value})[0], value[expected(length)])


def test_indexing_a_dim_axis_refuses_strides_and_slices_past_it() -> None:
    _, (x,) = _graph((SEQ, 4))
    with pytest.raises(tg.GraphError, match=r"slice of step 2 along axis 0 of extent seq"):
        _ = x[::2]
    with pytest.raises(tg.GraphError, match=r"narrow: 5 <= seq does not hold"):
        _ = x[:5]


def test_gather_slice_update_and_attention_decide_on_extents() -> None:
    g, (x, target) = _graph((SEQ, 4), (16, 4))
    indices = g.input("i", (SEQ, 2), tg.int32)
    assert tg.gather(x, indices, axis=1).shape == (SEQ, 2)
    with pytest.raises(tg.GraphError, match=r"gather: axis 0 of i_kv \(kv, 2\) fits"):
        tg.gather(x, g.input("i_kv", (KV, 2), tg.int32), axis=1)
    assert tg.slice_update(target, x, 0, 16 - SEQ).shape == (16, 4)  # seq <= 9 < 16
    long = tg.Dim("long", min=1, max=32)
    with pytest.raises(tg.GraphError, match=r"fits x1 \(16, 4\) \(long <= 16\) does not hold"):
        tg.slice_update(target, g.input("u", (long, 4)), 0, g.constant(0))
    with pytest.raises(tg.GraphError, match=r"head dim seq .* pass scale"):
        q = g.input("q", (1, 1, 4, SEQ))
        tg.scaled_dot_product_attention(q, q, q)
    q = g.input("q2", (1, 2, SEQ, 8))
    k = g.input("k", (1, 2, KV, 8))
    assert tg.scaled_dot_product_attention(q, k, k).shape == (1, 2, SEQ, 8)
