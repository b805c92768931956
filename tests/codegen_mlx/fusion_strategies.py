"""Hypothesis strategies for the fusion model's tests: random graphs where mx.compile
has much to fuse, with tensors large enough (>= 1 KB) that one buffer charged wrongly
stands out of what MLX allocates besides (its 16-byte rounding, scalar constants).

Chains of elementwise ops over a (rows, cols) float32 tensor, with what ends or widens
MLX's kernels between them: operands broadcast from a row or a scalar, nodes read by
two ops, casts to int32 and back (AsType), comparisons into `where`, the multi-primitive
lowerings (gelu, silu), non-fusable readers (a row sum, a matmul, a transpose), and bool
masks as outputs (a smaller buffer: MLX cannot hand it a dying operand's memory, which
would hide a temporary charged as fused).
Values stay in [-2, 2] (tanh after anything that could grow), so the reference and MLX
agree within float32 rounding.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

import tensorgraph as tg
from tests.codegen_mlx.strategies import Case

_UNARY = (tg.tanh, tg.sigmoid, tg.sin, tg.cos, tg.negative, tg.abs, tg.relu, tg.square)
_BINARY = (tg.add, tg.subtract, tg.multiply, tg.maximum, tg.minimum)


def _bounded(t: tg.Tensor) -> tg.Tensor:
    return tg.tanh(t)


def _step(draw: st.DrawFn, g: tg.Graph, live: list[tg.Tensor], row: tg.Tensor) -> tg.Tensor:
    full = [t for t in live if t.shape == live[0].shape and t.dtype == tg.float32]
    x = draw(st.sampled_from(full))
    kind = draw(st.integers(0, 10))
    if kind == 10:  # a mask, only ever an output: a buffer MLX cannot donate to it
        # against an input: two computed values can tie (relu(x) and x where x > 0) and
        # then differ by a rounding between the backends, flipping the mask
        return tg.greater(x, row)
    if kind <= 2:
        return draw(st.sampled_from(_UNARY))(x)
    if kind <= 5:
        other = draw(
            st.one_of(
                st.sampled_from(full),
                st.just(row),
                st.floats(-1, 1, allow_nan=False, width=32),
            )
        )
        return _bounded(draw(st.sampled_from(_BINARY))(x, other))
    if kind == 6:
        y = draw(st.sampled_from(full))
        return tg.where(tg.less(x, y), x, y)
    if kind == 7:
        scaled = (x * 4.0).astype(tg.int32)  # AsType, then back
        return scaled.astype(tg.float32) * 0.25
    if kind == 8:
        return draw(st.sampled_from((tg.gelu, tg.gelu_approx, tg.silu)))(x)
    opaque = draw(st.integers(0, 2))
    if opaque == 0:
        return _bounded(x - x.sum(axis=-1, keepdims=True))
    if opaque == 1:
        w = g.param(f"w{len(live)}", (x.shape[1], x.shape[1]), tg.float32)
        return _bounded(x @ w)
    return tg.transpose(tg.transpose(x) * 0.5)


@st.composite
def fusible_graphs(draw: st.DrawFn, max_ops: int = 14) -> Case:
    """Valid random graphs of the kinds in the module docstring, with feeds; params
    bound to values in [-0.5, 0.5]."""
    rows, cols = draw(st.integers(16, 48)), draw(st.integers(16, 32))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    g = tg.Graph("fusible")
    inputs = {f"x{i}": rng.uniform(-2, 2, (rows, cols)).astype(np.float32) for i in range(2)}
    live = [g.input(name, (rows, cols), tg.float32) for name in inputs]
    inputs["row"] = rng.uniform(-2, 2, (cols,)).astype(np.float32)
    row = g.input("row", (cols,), tg.float32)
    for _ in range(draw(st.integers(1, max_ops))):
        live.append(_step(draw, g, live, row))
    for t in draw(st.lists(st.sampled_from(live[2:]), min_size=1, max_size=4, unique_by=id)):
        g.output(t)
    params = {
        n.name: rng.uniform(-0.5, 0.5, n.shape).astype(np.float32)
        for n in g.nodes
        if n.op == "param"
    }
    for name, value in params.items():
        g.bind(name, value)
    return Case(g, inputs)
