"""Hypothesis strategies for the MLX backend: random graphs over every kind of dtype.

tests/strategies.py draws float32 graphs of rank >= 1 without empty tensors (the
planner's cases). The MLX backend's bugs live elsewhere, so these graphs mix float32,
signed and unsigned integers and bool, 0-d tensors and tensors with a zero-size axis,
and the ops where MLX and NumPy part ways: integer arithmetic that wraps, reductions
over empty axes, `take` with 0-d and empty index arrays (also feeding `slice_update`),
`full` and `arange` of every dtype, integer matmul, pools and convolutions on integers
and bools, and the fused ops on zero-size operands (attention over zero keys or of head
dim 0, norms of empty rows, group norm of batch 0, rope of length 0). Every graph is
valid and every feed in range, so the NumPy reference never raises: each case is a graph
the MLX backend must run to the reference's result.

Values are kept comparable: each tensor carries a bound on its magnitude and whether
both backends compute it bit for bit ("exact": inputs, integer and bool arithmetic,
selections of exact values). Ops that turn a small numeric difference into a large one
(a float comparison, argmax, a float -> int cast) only see exact operands, and
integers become floats only while float32 holds them exactly (bound <= 2^24).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st

import tensorgraph as tg

INTEGERS = (tg.int8, tg.uint8, tg.int32, tg.int64)
DTYPES = (tg.float32, tg.float32, tg.bool_, *INTEGERS)
EXACT_IN_FLOAT32 = 2**24


@dataclass(frozen=True)
class Case:
    """A graph and inputs within its ops' preconditions."""

    graph: tg.Graph
    inputs: dict[str, np.ndarray]

    def __repr__(self) -> str:  # what hypothesis prints for a failing case
        feeds = "\n".join(f"{k} = {v!r}" for k, v in self.inputs.items())
        return f"\n{self.graph}\n{feeds}"


@dataclass
class _Builder:
    draw: st.DrawFn
    graph: tg.Graph
    rng: np.random.Generator
    live: list[tg.Tensor] = field(default_factory=list)
    inputs: dict[str, np.ndarray] = field(default_factory=dict)
    bound: dict[int, float] = field(default_factory=dict)  # |value| <= bound
    exact: set[int] = field(default_factory=set)  # ids computed bit-identically

    def pick(self, ok=lambda t: True) -> tg.Tensor | None:
        choices = [t for t in self.live if ok(t)]
        return self.draw(st.sampled_from(choices)) if choices else None

    def add(self, t: tg.Tensor, bound: float, exact: bool) -> tg.Tensor:
        if t.dtype.is_integer:
            info = np.iinfo(t.dtype.to_numpy())
            bound = min(bound, max(-info.min, info.max))  # wrapping stays in range
        self.bound[t.id] = 1 if t.dtype == tg.bool_ else bound
        if exact or not t.dtype.is_float:
            self.exact.add(t.id)
        self.live.append(t)
        return t

    def is_exact(self, *ts: tg.Tensor) -> bool:
        return all(t.id in self.exact for t in ts)

    def input(self, shape: tuple[int, ...], dtype: tg.DType, low: int = -5, high: int = 5):
        name = f"x{len(self.inputs)}"
        if dtype == tg.bool_:
            value = self.rng.integers(0, 2, shape).astype(bool)
        elif dtype.is_float:
            value = self.rng.uniform(-2, 2, shape).astype(np.float32)
        else:
            low = max(low, int(np.iinfo(dtype.to_numpy()).min))
            value = self.rng.integers(low, max(high, low) + 1, shape).astype(dtype.to_numpy())
        self.inputs[name] = value
        t = self.graph.input(name, shape, dtype)
        return self.add(t, 2 if dtype.is_float else max(abs(low), abs(high)), True)


def shapes(max_rank: int = 3) -> st.SearchStrategy[tuple[int, ...]]:
    """Shapes of rank 0 to `max_rank` with dims 0 to 4: about one in three is empty."""
    return st.lists(st.sampled_from([0, 1, 1, 2, 3, 4]), max_size=max_rank).map(tuple)


def _numeric(t: tg.Tensor) -> bool:
    return t.dtype != tg.bool_


def _broadcasts(a: tg.Tensor, b: tg.Tensor) -> bool:
    try:
        np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        return False
    return True


def _floatable(b: _Builder, t: tg.Tensor) -> bool:
    """True when `t` as float32 keeps its values exactly (what float results need)."""
    return t.dtype.is_float or b.bound[t.id] <= EXACT_IN_FLOAT32


# ---------------------------------------------------------------- elementwise


def _new_input(b: _Builder) -> tg.Tensor:
    return b.input(b.draw(shapes()), b.draw(st.sampled_from(DTYPES)))


def _unary(b: _Builder) -> tg.Tensor:
    x = b.pick()
    if x.dtype == tg.bool_:
        return b.add(tg.logical_not(x), 1, True)
    selections = [tg.negative, tg.abs, tg.relu]  # exact: they move no bits but the sign
    if x.dtype.is_float:
        op = b.draw(st.sampled_from([*selections, tg.tanh, tg.sigmoid, "exp_tanh"]))
        if op in selections:
            return b.add(op(x), b.bound[x.id], b.is_exact(x))
        return b.add(tg.exp(tg.tanh(x)) if op == "exp_tanh" else op(x), 3, False)
    op = b.draw(st.sampled_from([*selections, tg.square]))
    return b.add(op(x), b.bound[x.id] ** (2 if op is tg.square else 1), True)


def _arith(b: _Builder) -> tg.Tensor:
    a = b.pick(_numeric)
    if a is None:
        return _new_input(b)
    if b.draw(st.booleans()):  # a Python scalar (a constant of the weak dtype)
        other = b.draw(st.sampled_from([2, -3, 1.5] if a.dtype != tg.uint8 else [3]))
        if isinstance(other, float) and not _floatable(b, a):
            other = 2
        other_bound, other_exact = abs(other), True
    else:
        other = b.pick(
            lambda t: (
                _numeric(t)
                and _broadcasts(a, t)
                and (
                    a.dtype.is_float == t.dtype.is_float or (_floatable(b, a) and _floatable(b, t))
                )
            )
        )
        other_bound, other_exact = b.bound[other.id], b.is_exact(other)
    op = b.draw(st.sampled_from([tg.add, tg.subtract, tg.multiply, tg.maximum, tg.minimum]))
    y = op(a, other)
    if y.dtype.is_float and op is tg.multiply:
        return b.add(tg.tanh(y), 1, False)  # float products stay small
    if op in (tg.maximum, tg.minimum):
        return b.add(y, max(b.bound[a.id], other_bound), b.is_exact(a) and other_exact)
    if op is tg.multiply:
        return b.add(y, b.bound[a.id] * other_bound, True)
    return b.add(y, b.bound[a.id] + other_bound, not y.dtype.is_float)


def _divide_or_power(b: _Builder) -> tg.Tensor:
    a = b.pick(lambda t: _numeric(t) and _floatable(b, t))
    if a is None:
        return _new_input(b)
    if not a.dtype.is_integer or b.draw(st.booleans()):
        # Division: integers divide in float32; a zero divisor gives inf or nan as IEEE.
        d = b.pick(lambda t: _numeric(t) and _broadcasts(a, t) and _floatable(b, t))
        return b.add(tg.tanh(tg.divide(a, d)), 1, False)
    # Integer power of a fresh small exponent (>= 0: negative ones are a RunError).
    exponent = b.input(b.draw(st.sampled_from([a.shape, (), a.shape[1:]])), a.dtype, 0, 3)
    return b.add(tg.power(a, exponent), b.bound[a.id] ** 3, True)


def _compare_where(b: _Builder) -> tg.Tensor:
    a = b.pick(lambda t: b.is_exact(t))
    other = b.pick(
        lambda t: (
            b.is_exact(t) and _broadcasts(a, t) and (t.dtype == tg.bool_) == (a.dtype == tg.bool_)
        )
    )
    kind = b.draw(st.sampled_from(["equal", "not_equal", "less", "greater_equal", "logic"]))
    if a.dtype == tg.bool_:
        cond = (tg.logical_and if kind in ("less", "equal") else tg.logical_or)(a, other)
    else:
        cond = getattr(tg, "less" if kind == "logic" else kind)(a, other)
    b.add(cond, 1, True)
    if a.dtype == tg.bool_ or not b.draw(st.booleans()):
        return cond
    y = tg.where(cond, a, other)
    return b.add(y, max(b.bound[a.id], b.bound[other.id]), True)


def _cast(b: _Builder) -> tg.Tensor:
    x = b.pick()
    if x.dtype.is_float and not b.is_exact(x):
        return b.add(x.astype(tg.float32), b.bound[x.id], False)
    choices = [tg.float32, tg.bool_, tg.int32] if _floatable(b, x) else [tg.bool_, tg.int64]
    if x.dtype in (tg.uint8, tg.bool_):
        choices.append(tg.uint8)  # never a negative value into uint8 (UB in C casts)
    return b.add(x.astype(b.draw(st.sampled_from(choices))), b.bound[x.id], b.is_exact(x))


# ---------------------------------------------------------------- reductions


def _reduce(b: _Builder) -> tg.Tensor:
    x = b.pick()
    axes = b.draw(st.lists(st.integers(0, max(x.ndim - 1, 0)), unique=True, max_size=x.ndim))
    axes = sorted(a for a in axes if a < x.ndim)
    keepdims = b.draw(st.booleans())
    count = math.prod(x.shape[a] for a in axes)
    kind = b.draw(st.sampled_from(["sum", "mean", "max", "min", "argmax", "softmax"]))
    full_axes = [a for a in range(x.ndim) if x.shape[a]]
    if kind == "argmax" and full_axes and b.is_exact(x):  # ties must tie on both backends
        axis = b.draw(st.sampled_from(full_axes))
        return b.add(tg.argmax(x, axis, keepdims), x.shape[axis], True)
    if kind == "softmax" and x.dtype.is_float and x.ndim:
        op = b.draw(st.sampled_from([tg.softmax, tg.log_softmax]))
        return b.add(tg.tanh(op(x, b.draw(st.integers(0, x.ndim - 1)))), 1, False)
    if kind in ("max", "min") and count:  # over an empty axis: a ShapeError, no identity
        return b.add(getattr(tg, kind)(x, axes, keepdims), b.bound[x.id], b.is_exact(x))
    if kind == "mean" and _floatable(b, x):
        return b.add(tg.mean(x, axes, keepdims), b.bound[x.id], False)
    y = tg.sum(x, axes, keepdims)
    return b.add(y, b.bound[x.id] * max(count, 1), b.is_exact(x) and not x.dtype.is_float)


# ---------------------------------------------------------------- layout, gathers, updates


def _layout(b: _Builder) -> tg.Tensor:
    x = b.pick()
    bound, exact = b.bound[x.id], b.is_exact(x)
    kind = b.draw(st.integers(0, 4))
    if kind == 0:
        return b.add(tg.transpose(x), bound, exact)
    if kind == 1:
        count = math.prod(x.shape)
        sizes = [
            (count,),
            (1, count),
            *([()] if count == 1 else []),
            *([(0, 7)] if not count else []),
        ]
        return b.add(x.reshape(b.draw(st.sampled_from(sizes))), bound, exact)
    if x.ndim == 0:
        return b.add(tg.broadcast_to(x, (2, 3)), bound, exact)
    axis = b.draw(st.integers(0, x.ndim - 1))
    if kind == 2:
        start = b.draw(st.integers(0, x.shape[axis]))
        length = b.draw(st.integers(0, x.shape[axis] - start))
        return b.add(tg.narrow(x, axis, start, length), bound, exact)
    if kind == 3:
        other = b.pick(
            lambda t: (
                t.dtype == x.dtype
                and t.ndim == x.ndim
                and all(
                    d == e
                    for i, (d, e) in enumerate(zip(t.shape, x.shape, strict=True))
                    if i != axis
                )
            )
        )
        return b.add(
            tg.concatenate([x, other], axis),
            max(bound, b.bound[other.id]),
            exact and b.is_exact(other),
        )
    return b.add(tg.broadcast_to(x, (2, *x.shape)), bound, exact)


def _index_input(b: _Builder, shape: tuple[int, ...], size: int) -> tg.Tensor:
    """Indices valid for an axis of `size`: negative ones too, unless unsigned."""
    dtype = b.draw(st.sampled_from(INTEGERS))
    low = 0 if dtype == tg.uint8 else max(-size, -128)
    return b.input(shape, dtype, low, min(size, 127) - 1)


def _take(b: _Builder) -> tg.Tensor:
    x = b.pick(lambda t: t.ndim > 0)
    if x is None:
        return _new_input(b)
    axis = b.draw(st.integers(0, x.ndim - 1))
    size = x.shape[axis]
    shape = b.draw(st.sampled_from([(), (0,), (2,), (2, 2)] if size else [(0,), (2, 0)]))
    indices = _index_input(b, shape, size)
    return b.add(tg.take(x, indices, axis), b.bound[x.id], b.is_exact(x))


def _slice_update(b: _Builder) -> tg.Tensor:
    """An update of the target's slice at a 0-d or 1-d index (the 0-d path once crashed
    MLX: its take came back one rank too high and mx.slice_update segfaulted)."""
    target = b.pick(lambda t: t.ndim > 0)
    if target is None:
        return _new_input(b)
    axis = b.draw(st.integers(0, target.ndim - 1))
    size = target.shape[axis]
    source = b.pick(lambda t: t.shape == target.shape and t.dtype == target.dtype)
    if size and b.draw(st.booleans()):
        row = tg.take(source, _index_input(b, (), size), axis)  # 0-d index: axis dropped
        update = tg.expand_dims(row, axis)
    else:
        length = b.draw(st.integers(0, size))
        update = (
            tg.take(source, _index_input(b, (length,), max(size, 1)), axis)
            if size
            else (tg.narrow(source, axis, 0, 0))
        )
    start = b.draw(st.integers(0, size - update.shape[axis]))
    y = tg.slice_update(target, update, axis, start)
    return b.add(y, max(b.bound[target.id], b.bound[source.id]), b.is_exact(target, source))


# ---------------------------------------------------------------- generators, contractions


def _generator(b: _Builder) -> tg.Tensor:
    dtype = b.draw(st.sampled_from(DTYPES))
    if b.draw(st.booleans()):
        value = b.draw(st.sampled_from([2.7, -1.5, 0, 1, True, 300, -7]))
        if dtype == tg.uint8 and value in (-1.5, -7):
            value = 2.7  # negative floats into uint8 are UB in C; -7 wraps in both
        y = tg.full(b.graph, b.draw(shapes()), value, dtype=dtype)
        return b.add(y, 300, True)
    start, stop, step = b.draw(
        st.sampled_from([(0, 5, 1), (2, -3, -2), (0.5, 4.0, 0.7), (0.1, 2.0, 0.3), (3, 3, 1)])
    )
    if dtype == tg.uint8 and stop < 0:
        start, stop, step = 0, 5, 2
    y = tg.arange(b.graph, start, stop, step, dtype=dtype)
    return b.add(y, 5, not dtype.is_float)


def _matmul(b: _Builder) -> tg.Tensor:
    dtype = b.draw(st.sampled_from([tg.float32, tg.int32, tg.int8, tg.int64]))
    m, k, n = (b.draw(st.sampled_from([0, 1, 3])) for _ in range(3))
    a_shape = b.draw(st.sampled_from([(m, k), (k,), (2, m, k)]))
    w_shape = b.draw(st.sampled_from([(k, n), (k,)]))
    y = tg.matmul(b.input(a_shape, dtype), b.input(w_shape, dtype))
    if dtype.is_float:
        return b.add(tg.tanh(y), 1, False)
    return b.add(y, 25 * max(k, 1), True)


def _pool_or_conv(b: _Builder) -> tg.Tensor:
    dtype = b.draw(st.sampled_from([tg.float32, tg.uint8, tg.int8, tg.int32, tg.bool_]))
    kernel = b.draw(st.integers(1, 3))
    padding = b.draw(st.integers(0, kernel // 2))
    n, c = b.draw(st.sampled_from([(1, 2), (0, 2), (2, 1)]))
    h, w = (b.draw(st.integers(max(kernel - 2 * padding, 1), 5)) for _ in range(2))
    x = b.input((n, c, h, w), dtype, 0 if dtype == tg.uint8 else -5, 5)
    stride = b.draw(st.integers(1, 2))
    kind = b.draw(st.sampled_from(["max", "avg", "conv", "transposed"]))
    if kind == "transposed" and dtype.is_float:  # float only, as in torch
        groups = b.draw(st.sampled_from([1, c]))
        weight = b.input((c, 2, kernel, kernel), dtype, -3, 3)
        extra = b.draw(st.integers(0, stride - 1))
        reach = (min(h, w) - 1) * stride + kernel + extra  # output extent without padding
        y = tg.conv_transpose2d(
            x, weight, stride, padding if reach > 2 * padding else 0, 1, extra, groups
        )
        return b.add(tg.tanh(y), 1, False)
    if kind == "max":
        return b.add(tg.max_pool2d(x, kernel, stride, padding), 5, True)
    if kind == "avg":
        y = tg.avg_pool2d(x, kernel, stride, padding, count_include_pad=b.draw(st.booleans()))
        return b.add(y, 5, not dtype.is_float)
    groups = b.draw(st.sampled_from([1, c]))
    weight = b.input((2 * groups, c // groups, kernel, kernel), dtype, -3, 3)
    dilations = [d for d in (1, 2) if min(h, w) + 2 * padding >= d * (kernel - 1) + 1]
    y = tg.conv2d(x, weight, stride, padding, b.draw(st.sampled_from(dilations)), groups)
    return b.add(tg.tanh(y) if dtype.is_float else y, 1 if dtype.is_float else 300, False)


# ---------------------------------------------------------------- fused ops


def _dim(b: _Builder) -> int:
    return b.draw(st.sampled_from([0, 1, 2, 3]))


def _fused(b: _Builder) -> tg.Tensor:
    """A fused op on fresh float32 inputs whose dims may be 0 (see the module docstring);
    fresh inputs keep the normalised rows well conditioned for the float32 comparison."""
    kind = b.draw(st.sampled_from(["attention", "layer_norm", "rms_norm", "group", "rope"]))
    if kind == "attention":
        batch, length, keys, depth = (_dim(b) for _ in range(4))
        kv_heads, group = b.draw(st.integers(1, 2)), b.draw(st.integers(1, 2))
        q = b.input((batch, kv_heads * group, length, depth), tg.float32)
        k = b.input((batch, kv_heads, keys, depth), tg.float32)
        v = b.input((batch, kv_heads, keys, _dim(b)), tg.float32)
        mask = b.draw(st.sampled_from([None, "causal", tg.bool_, tg.float32]))
        if isinstance(mask, tg.DType):
            mask = b.input((length, keys), mask, -2, 2)
        y = tg.scaled_dot_product_attention(q, k, v, mask=mask)
        return b.add(y, 2, False)  # an average of v's rows, or 0
    if kind == "group":
        groups = b.draw(st.integers(1, 2))
        x = b.input((_dim(b), groups * _dim(b), _dim(b)), tg.float32)
        return b.add(tg.group_norm(x, groups), 8, False)
    if kind == "rope":
        depth = b.draw(st.sampled_from([2, 4]))
        x = b.input((_dim(b), _dim(b), depth), tg.float32)
        dims = b.draw(st.sampled_from([2, depth]))
        y = tg.rope(x, dims, traditional=b.draw(st.booleans()), offset=b.draw(st.integers(0, 5)))
        return b.add(y, 3, False)
    shape = (*b.draw(shapes(max_rank=2)), _dim(b))
    x = b.input(shape, tg.float32)
    if kind == "layer_norm":
        weight, bias = (b.input(shape[-1:], tg.float32) for _ in range(2))
        return b.add(tg.layer_norm(x, weight, bias), 8, False)
    return b.add(tg.rms_norm(x, b.input(shape[-1:], tg.float32)), 8, False)


BUILDERS = (
    _new_input,
    _unary,
    _unary,
    _arith,
    _arith,
    _divide_or_power,
    _compare_where,
    _cast,
    _reduce,
    _reduce,
    _layout,
    _layout,
    _take,
    _slice_update,
    _generator,
    _matmul,
    _pool_or_conv,
    _fused,
)


@st.composite
def typed_graphs(draw: st.DrawFn, max_ops: int = 10) -> Case:
    """Valid random graphs over all dtype kinds with in-range feeds (module docstring)."""
    b = _Builder(draw, tg.Graph("typed"), np.random.default_rng(draw(st.integers(0, 2**16))))
    for _ in range(draw(st.integers(1, 3))):
        _new_input(b)
    for _ in range(draw(st.integers(1, max_ops))):
        draw(st.sampled_from(BUILDERS))(b)
    for t in draw(st.lists(st.sampled_from(b.live), min_size=1, max_size=3)):
        b.graph.output(t)
    return Case(b.graph, b.inputs)
