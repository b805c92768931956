"""Cotangent accumulation (autodiff/accumulate.py): a value read through several narrowed
slices gets the sum of their zero-padded cotangents, written as a chain of slice updates
where the slices are disjoint, and added otherwise; either way the gradient is the
independent oracle's (each slice's weights placed at its rows, summed) on every backend,
the arena bit for bit the reference."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg


@st.composite
def _slicings(draw: st.DrawFn) -> tuple:
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
    axis = draw(st.integers(0, len(shape) - 1))
    extent = shape[axis]
    slices = []
    for _ in range(draw(st.integers(1, 4))):
        start = draw(st.integers(0, extent - 1))
        slices.append((start, draw(st.integers(1, extent - start))))
    return shape, axis, slices, draw(st.integers(0, 2**32 - 1))


@given(_slicings())
@settings(max_examples=25, deadline=None)
def test_slices_cotangents_sum_to_the_oracles_gradient(problem) -> None:
    shape, axis, slices, seed = problem
    rng = np.random.default_rng(seed)
    g = tg.Graph("slices")
    x = g.input("x", shape)
    terms, want = [], np.zeros(shape, np.float64)
    for start, length in slices:
        part = tg.narrow(x, axis, start, length)
        weights = rng.standard_normal(part.shape).astype(np.float32)
        terms.append((part * g.constant(weights)).sum())
        rows = [slice(None)] * len(shape)
        rows[axis] = slice(start, start + length)
        want[tuple(rows)] += weights
    total = terms[0]
    for term in terms[1:]:
        total = total + term
    g.output(total)
    vg = tg.value_and_grad(g, "x")
    disjoint = all(
        a + n <= b or b + m <= a for k, (a, n) in enumerate(slices) for b, m in slices[k + 1 :]
    )
    whole = [n for n in vg.nodes if n.op == "add" and n.shape == shape]
    if disjoint:  # one chain of updates over one fill: no whole-value sums
        assert not whole
        assert sum(n.op == "full" and n.shape == shape for n in vg.nodes) == 1
    prog = tg.compile(vg)
    feeds = {"x": rng.standard_normal(shape).astype(np.float32)}
    ref = prog.run(feeds, backend="numpy")[1]
    np.testing.assert_allclose(ref, want, rtol=1e-6, atol=1e-6)
    assert prog.run(feeds, backend="arena")[1].tobytes() == ref.tobytes()
    np.testing.assert_allclose(prog.run(feeds, backend="mlx")[1], ref, rtol=1e-6, atol=1e-6)


def test_a_fused_projection_split_in_three_keeps_one_cotangent_buffer() -> None:
    """q, k, v as three narrows of one (2, 4, 12) projection: its cotangent is one fill
    with three slices written into it in place, never three whole-size tensors added."""
    g = tg.Graph("qkv")
    x = g.input("x", (2, 4, 12))
    q, k, v = (tg.narrow(x, 2, 4 * i, 4) for i in range(3))
    g.output((tg.tanh(q) * k + v * v).sum())
    prog = tg.compile(tg.value_and_grad(g, "x"))
    updates = [n for n in prog.graph.nodes if n.op == "slice_update"]
    assert len(updates) == 3
    assert all(prog.aliasing.of(n.id).kind == "inplace" for n in updates)
    assert not [n for n in prog.graph.nodes if n.op == "add" and n.shape == (2, 4, 12)]
