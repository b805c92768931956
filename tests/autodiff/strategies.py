"""Random differentiable graphs for the autodiff properties: smooth float ops only
(no kinks where a finite difference would straddle one: relu, abs, maximum and max have
their own unit tests at points away from their kinks), broadcasting binaries, matmul,
reductions, softmax and log_softmax, cumsum and cumprod, layout ops (views, transposes, narrows,
concatenations, pads, slice updates) and gathers by constant indices, summed into a
scalar loss with fixed weights. Values stay bounded: every producer of large values is
squashed, divisors are at least 1."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

import tensorgraph as tg
from tests.strategies import shapes

SMOOTH_UNARY = (
    tg.tanh,
    tg.sigmoid,
    tg.silu,
    tg.gelu,
    tg.gelu_approx,
    tg.sin,
    tg.negative,
    tg.erf,
    tg.atan,
    lambda x: tg.exp(tg.tanh(x)),
    lambda x: tg.log(tg.square(x) + 1.0),
    lambda x: tg.sqrt(tg.square(x) + 0.5),
    lambda x: tg.rsqrt(tg.square(x) + 0.5),
    lambda x: tg.reciprocal(tg.square(x) + 1.0),
    lambda x: tg.log1p(tg.square(x)),
    lambda x: tg.expm1(tg.tanh(x)),
    lambda x: tg.power(tg.square(x) + 0.5, 1.5),
)


def _pick(draw: st.DrawFn, live: list[tg.Tensor]) -> tg.Tensor:
    return draw(st.sampled_from(live))


def _unary(draw: st.DrawFn, live: list[tg.Tensor]) -> tg.Tensor:
    return draw(st.sampled_from(SMOOTH_UNARY))(_pick(draw, live))


def _binary(draw: st.DrawFn, live: list[tg.Tensor]) -> tg.Tensor:
    a = _pick(draw, live)
    suffix = a.shape[draw(st.integers(0, a.ndim - 1)) :]
    shape = tuple(1 if draw(st.booleans()) else d for d in suffix)
    partners = [t for t in live if t.shape == shape]
    if partners:
        b = draw(st.sampled_from(partners))
    else:
        b = tg.tanh(tg.broadcast_to(_pick(draw, live).sum(), shape))
    if draw(st.booleans()):
        a, b = b, a
    kind = draw(st.integers(0, 4))
    if kind == 0:
        return a + b
    if kind == 1:
        return a - b
    if kind == 2:
        return tg.tanh(a * b)
    if kind == 3:
        return a / (tg.square(b) + 1.0)
    return tg.arctan2(a, tg.square(b) + 0.5)


def _matmul(draw: st.DrawFn, live: list[tg.Tensor]) -> tg.Tensor:
    a = _pick(draw, live)
    partners = [t for t in live if t.ndim in (1, 2) and t.shape[0] == a.shape[-1]]
    if partners:
        return tg.tanh(a @ draw(st.sampled_from(partners)))
    return tg.tanh(a @ a.T) if a.ndim == 2 else _unary(draw, live)


def _reduce(draw: st.DrawFn, live: list[tg.Tensor]) -> tg.Tensor:
    x = _pick(draw, live)
    axis = draw(st.integers(-x.ndim, x.ndim - 1))
    keepdims = draw(st.booleans())
    kind = draw(st.integers(0, 5))
    if kind == 0:
        return tg.tanh(x.sum(axis, keepdims))
    if kind == 5:
        return tg.cumprod(tg.tanh(x) + 0.5, axis)
    if kind == 1:
        return x.mean(axis, keepdims)
    if kind == 2:
        return tg.softmax(x, axis)
    if kind == 3:
        return tg.log_softmax(x, axis)
    return tg.tanh(tg.cumsum(x, axis))


def _layout(draw: st.DrawFn, live: list[tg.Tensor]) -> tg.Tensor:
    x = _pick(draw, live)
    kind = draw(st.integers(0, 6))
    axis = draw(st.integers(0, x.ndim - 1))
    if kind == 0:
        return x.T
    if kind == 1:
        return x.reshape(-1)
    if kind == 2 and x.shape[axis] > 1:
        return tg.narrow(x, axis, 1, x.shape[axis] - 1)
    if kind == 3:
        return tg.concatenate([x, tg.tanh(x)], axis=axis)
    if kind == 4:
        pads = [(draw(st.integers(0, 2)), draw(st.integers(-1, 1))) for _ in x.shape]
        pads = [(lo, hi if x.shape[k] + hi > 0 else 0) for k, (lo, hi) in enumerate(pads)]
        return tg.pad(x, pads, value=0.5)
    if kind == 5:
        start = draw(st.integers(0, x.shape[0] - 1))
        return tg.slice_update(x, tg.sin(x[:1]), 0, start)
    picks = draw(st.lists(st.integers(-x.shape[axis], x.shape[axis] - 1), min_size=1, max_size=6))
    index = x.graph.constant(np.array(picks, np.int32))
    return tg.take(x, index, axis)


BUILDERS = (_unary, _unary, _binary, _binary, _matmul, _reduce, _layout, _layout)


@st.composite
def differentiable_graphs(draw: st.DrawFn, max_ops: int = 8) -> tg.Graph:
    """A scalar loss over 1-2 inputs and 1-2 params (see the module docstring): the sum
    of 1-2 live values, each weighted elementwise by fixed constants in [-1, 1]."""
    g = tg.Graph("differentiable")
    shape = draw(shapes(max_rank=3, max_dim=4))
    live = [g.input(f"x{i}", shape, tg.float32) for i in range(draw(st.integers(1, 2)))]
    live += [g.param(f"w{i}", shape, tg.float32) for i in range(draw(st.integers(1, 2)))]
    for _ in range(draw(st.integers(1, max_ops))):
        made = draw(st.sampled_from(BUILDERS))(draw, live)
        live.append(made.reshape(1) if made.ndim == 0 else made)
    terms = []
    for k, t in enumerate(draw(st.lists(st.sampled_from(live), min_size=1, max_size=2))):
        weights = np.random.default_rng(k).uniform(-1, 1, t.shape).astype(np.float32)
        terms.append((t * g.constant(weights)).sum())
    loss = terms[0] if len(terms) == 1 else terms[0] + terms[1]
    g.output(loss)
    return g
