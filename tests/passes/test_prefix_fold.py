"""Prefix folding (passes/prefix_fold.py): values of the dims alone become a constant at
the max read through a view narrow, only where every length's value is a prefix of the
max's. Oracle: the reference interpreter on the graph specialised at a random length,
unfolded, bit for bit; and the compiled program on the arena backend."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.passes.prefix_fold import prefix_fold
from tensorgraph.runtime import run_reference


def _same_at(graph: tg.Graph, folded: tg.Graph, length: int) -> None:
    """`folded` computes what `graph` computes at seq=`length`, bit for bit."""
    x = np.random.default_rng(length).standard_normal((1, length)).astype(np.float32)
    expected = run_reference(tg.specialize(graph, seq=length), {"x": x})
    got = run_reference(tg.specialize(folded, seq=length), {"x": x})
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        assert np.array_equal(a, b)


@st.composite
def index_graphs(draw: st.DrawFn) -> tg.Graph:
    """x (1, seq) plus values built from `arange(seq)` (some prefix-stable, some not:
    a length-valued arange, a concat whose symbolic operand comes first), mixed into
    outputs of x's shape or output as they are."""
    low = draw(st.integers(1, 3))
    seq = tg.Dim("seq", min=low, max=draw(st.integers(low + 1, 24)))
    g = tg.Graph("index")
    x = g.input("x", (1, seq), tg.float32)
    table = g.param("table", (seq.max + 3, 2), tg.float32)
    values = [tg.arange(g, seq, dtype=tg.int64)]
    g.bind("table", np.arange(2 * seq.max + 6, dtype=np.float32).reshape(-1, 2) / 7)
    for _ in range(draw(st.integers(1, 6))):
        v = draw(st.sampled_from(values))
        step = draw(st.integers(0, 8))
        if step == 0:
            v = v + draw(st.integers(0, 3))
        elif step == 1:
            v = tg.cumsum(v, axis=0)
        elif step == 2:
            zero = tg.full(g, (1,), 0, dtype=tg.int64)
            v = tg.where(tg.less(v, 0), v + tg.arange(g, seq, seq + 1, dtype=tg.int64), v)
            v = v + zero * tg.arange(g, seq, seq + 1, dtype=tg.int64)
        elif step == 3:  # stable: the first operand is static along the axis
            head = tg.full(g, (1,), 5, dtype=tg.int64)
            v = tg.narrow(tg.concatenate([head, v]), 0, draw(st.integers(0, 1)), seq)
        elif step == 4:  # not stable: the length's own value
            v = v * tg.arange(g, seq, seq + 1, dtype=tg.int64)
        elif step == 5:  # not stable: the symbolic operand first
            tail = tg.full(g, (1,), 5, dtype=tg.int64)
            v = tg.narrow(tg.concatenate([v, tail]), 0, 1, seq)
        elif step == 6:
            v = tg.take(tg.cumsum(tg.arange(g, seq, dtype=tg.int64), axis=0), values[0])
        elif step == 7:
            v = tg.minimum(v, seq.max + 2)
        else:
            v = tg.reshape(v, (1, seq))[0]
        values.append(v)
    picked = draw(st.lists(st.sampled_from(values), min_size=1, max_size=3))
    for k, v in enumerate(picked):
        if draw(st.booleans()):
            rows = tg.take(table, tg.minimum(tg.maximum(v, 0), seq.max + 2), axis=0)
            g.output(x + tg.reshape(rows[:, 0 if k % 2 else 1], (1, seq)))
        else:
            column = tg.reshape(v, (seq, 1))
            g.output(tg.less_equal(tg.reshape(values[0], (1, seq)), column))
    return g


@settings(max_examples=40)
@given(index_graphs(), st.data())
def test_prefix_folding_keeps_every_output_at_every_length(
    graph: tg.Graph, data: st.DataObject
) -> None:
    result = prefix_fold(graph)
    (dim,) = graph.dims.values()
    for length in {dim.min, dim.max, data.draw(st.integers(dim.min, dim.max))}:
        _same_at(graph, result.graph, length)
    prog = tg.compile(graph)
    length = data.draw(st.integers(dim.min, dim.max))
    x = np.ones((1, length), dtype=np.float32)
    expected = run_reference(tg.specialize(graph, seq=length), {"x": x})
    for a, b in zip(prog.run({"x": x}, backend="arena"), expected, strict=True):
        assert np.array_equal(a, b)


def _positions_graph() -> tg.Graph:
    """GPT-2's pattern: position rows taken from a table by `arange(seq)`, and a causal
    mask from the position vectors as a row and a column."""
    seq = tg.Dim("seq", min=1, max=32)
    g = tg.Graph("positions")
    x = g.input("x", (1, seq), tg.float32)
    table = g.param("wpe", (32, 4), tg.float32)
    g.bind("wpe", np.arange(128, dtype=np.float32).reshape(32, 4) / 3)
    positions = tg.arange(g, seq, dtype=tg.int64)
    rows = tg.take(table, tg.reshape(positions, (1, seq)), axis=0)  # (1, seq, 4)
    mask = tg.less_equal(tg.reshape(positions, (1, seq)), tg.reshape(positions, (seq, 1)))
    g.output(tg.reshape(x, (1, seq, 1)) + rows)
    g.output(mask)
    return g


def test_position_rows_fold_to_a_view_of_the_table_at_the_max() -> None:
    graph = _positions_graph()
    result = prefix_fold(graph)
    assert result.stats["prefix_folded"] == 3  # the rows, the mask's row and its column
    folded = [n for n in result.graph.nodes if n.op == "param" and n.name != "wpe"]
    assert sorted(n.shape for n in folded) == [(1, 32), (1, 32, 4), (32, 1)]
    assert "take" not in {n.op for n in result.graph.nodes}
    assert "le" in {n.op for n in result.graph.nodes}  # the (seq, seq) mask stays computed
    for length in (1, 7, 32):
        _same_at(graph, result.graph, length)


def test_a_value_of_the_lengths_own_value_does_not_fold() -> None:
    seq = tg.Dim("seq", min=1, max=16)
    g = tg.Graph("not stable")
    x = g.input("x", (1, seq), tg.float32)
    last = tg.arange(g, seq, seq + 1, dtype=tg.int64)  # [seq]: differs per length
    g.output(x + tg.reshape(tg.arange(g, seq, dtype=tg.int64) * last, (1, seq)).astype(tg.float32))
    result = prefix_fold(g)
    assert result.stats == {"prefix_folded": 0, "prefix_dropped": 0}
    assert result.graph is g


def test_a_take_past_a_shorter_tables_end_is_not_folded_into_a_value() -> None:
    # Index 5 into the running sums of arange(seq): out of range while seq <= 5, where the
    # program must raise; a constant taken at the max would silently give a number.
    seq = tg.Dim("seq", min=1, max=16)
    g = tg.Graph("beyond")
    x = g.input("x", (1, seq), tg.float32)
    sums = tg.cumsum(tg.arange(g, seq, dtype=tg.int64), axis=0)
    fifth = tg.take(sums, tg.full(g, (1,), 5, dtype=tg.int64))  # (1,), static shape
    g.output(x + fifth.astype(tg.float32))
    result = prefix_fold(g)
    # The running sums fold (a view of their values at the max); the take stays.
    assert result.stats["prefix_folded"] == 1
    assert "take" in {n.op for n in result.graph.nodes}
    for length in (6, 16):
        _same_at(g, result.graph, length)
    x3 = {"x": np.zeros((1, 3), dtype=np.float32)}
    with pytest.raises(tg.RunError, match=r"index 5 is out of range"):
        run_reference(tg.specialize(result.graph, seq=3), x3)


def test_gpt2s_negative_index_wrap_folds_by_the_values_at_the_max() -> None:
    # transformers' mask: where(p < 0, p + seq, p) over positions that are never negative,
    # plus a batch offset 0 * seq: both are p at every length, so the take folds.
    seq = tg.Dim("seq", min=1, max=16)
    g = tg.Graph("wrap")
    x = g.input("x", (1, seq), tg.float32)
    p = tg.arange(g, seq, dtype=tg.int64)
    length = tg.arange(g, seq, seq + 1, dtype=tg.int64)
    zero = g.param("zero", (1,), tg.int64)
    g.bind("zero", np.zeros(1, dtype=np.int64))
    wrapped = tg.where(tg.less(p, 0), p + length, p) + zero * length
    g.output(x + tg.reshape(tg.take(tg.cumsum(p, axis=0), wrapped), (1, seq)).astype(tg.float32))
    result = prefix_fold(g)
    assert result.stats["prefix_folded"] == 1
    assert {"take", "where", "cumsum"}.isdisjoint(n.op for n in result.graph.nodes)
    for n in (1, 9, 16):
        _same_at(g, result.graph, n)


def test_a_value_whose_extent_shrinks_as_the_length_grows_does_not_fold() -> None:
    # arange(20 - seq) cast: stable element by element, but at seq < max it is longer
    # than at the max, so no prefix of the max's value holds it.
    seq = tg.Dim("seq", min=1, max=16)
    g = tg.Graph("shrinking")
    x = g.input("x", (1, seq), tg.float32)
    g.output(tg.sum(tg.arange(g, 20 - seq, dtype=tg.int64).astype(tg.float32)) + x)
    result = prefix_fold(g)
    assert result.stats["prefix_folded"] == 0
    for length in (1, 8, 16):
        _same_at(g, result.graph, length)
