"""Every primitive op: shape and dtype inference through the builder, and reference
numerics against an independent NumPy expression written here (never the kernels under
test). The CASES table must exercise every non-boundary op of the registry; special
semantics (rounding once in half precision, stability, conv2d and pools against naive
loops, basic indexing against NumPy's) have their own tests below."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.ir.dtypes import as_dtype
from tensorgraph.ir.ops import OPS
from tensorgraph.runtime.kernels import KERNELS
from tensorgraph.runtime.reference import run_reference

RNG = np.random.default_rng(0)
F64 = np.float64
F16 = np.dtype(np.float16)
BF16 = np.dtype(ml_dtypes.bfloat16)
PRIMITIVES = sorted(op for op, opdef in OPS.items() if not opdef.boundary)


def rand(*shape: int, dtype: object = np.float32, low: float = -2, high: float = 2) -> np.ndarray:
    return RNG.uniform(low, high, shape).astype(dtype)


def ints(*shape: int, low: int = -5, high: int = 6, dtype: object = np.int32) -> np.ndarray:
    return RNG.integers(low, high, shape).astype(dtype)


def flags(*shape: int) -> np.ndarray:
    return RNG.random(shape) > 0.5


def wide(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """`fn` applied to float64 copies of its array arguments."""
    return lambda *xs: fn(*(x.astype(F64) for x in xs))


def method(name: str, *args: object, **kwargs: object) -> Callable[..., object]:
    """Calls method `name` on a Tensor or an ndarray alike (the builder mirrors NumPy)."""
    return lambda x: getattr(x, name)(*args, **kwargs)


@dataclass(frozen=True)
class Case:
    """`build(*inputs)` (or `build(graph)` when there are no arrays) applies `op`.
    Inference must give the shape of `expected(*arrays)` and `dtype`; the reference must
    give its values: exactly for bool and integer results, else to rtol/atol (two units
    in the last place for half precision). `expected=None` means `build` itself on the
    NumPy arrays: the builder mirrors NumPy, so the same expression is the oracle."""

    id: str
    op: str
    arrays: tuple[np.ndarray, ...]
    build: Callable[..., tg.Tensor]
    dtype: tg.DType
    expected: Callable[..., np.ndarray] | None = None
    rtol: float = 1e-5
    atol: float = 1e-6


CASES: list[Case] = []


def case(op: str, id: str, arrays, build, dtype, expected=None, **tolerance) -> None:
    CASES.append(Case(f"{op}-{id}", op, tuple(arrays), build, dtype, expected, **tolerance))


def build_and_run(build: Callable[..., tg.Tensor], arrays: tuple[np.ndarray, ...]):
    """(graph, output tensor, reference value) of `build` over inputs like `arrays`."""
    g = tg.Graph("op")
    inputs = [g.input(f"a{i}", a.shape, as_dtype(a.dtype)) for i, a in enumerate(arrays)]
    out = build(*inputs) if arrays else build(g)
    g.output(out)
    (value,) = run_reference(g, {f"a{i}": a for i, a in enumerate(arrays)})
    return g, out, value


def assert_matches(got: np.ndarray, want: np.ndarray, dtype: tg.DType, rtol: float, atol: float):
    """Shape, then dtype, then values (see Case)."""
    target = dtype.to_numpy()
    assert got.shape == want.shape, f"shape {got.shape}, expected {want.shape}"
    assert got.dtype == target, f"dtype {got.dtype}, expected {target}"
    if not dtype.is_float:
        np.testing.assert_array_equal(got, want.astype(target))
        return
    if dtype.itemsize < 4:
        rtol = atol = 2 * float(ml_dtypes.finfo(target).eps)
    np.testing.assert_allclose(
        got.astype(F64), want.astype(F64), rtol=rtol, atol=atol, equal_nan=True
    )


# ---------------------------------------------------------------- elementwise


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[F64])(x)


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


# op -> (builder function, NumPy expression, input range)
FLOAT_UNARY = {
    "exp": (tg.exp, np.exp, (-2, 2)),
    "log": (tg.log, np.log, (0.1, 4)),
    "sqrt": (tg.sqrt, np.sqrt, (0, 4)),
    "rsqrt": (tg.rsqrt, lambda x: 1 / np.sqrt(x), (0.1, 4)),
    "reciprocal": (tg.reciprocal, lambda x: 1 / x, (0.25, 4)),
    "sin": (tg.sin, np.sin, (-3, 3)),
    "cos": (tg.cos, np.cos, (-3, 3)),
    "tanh": (tg.tanh, np.tanh, (-3, 3)),
    "sigmoid": (tg.sigmoid, lambda x: 1 / (1 + np.exp(-x)), (-6, 6)),
    "silu": (tg.silu, lambda x: x / (1 + np.exp(-x)), (-6, 6)),
    "gelu": (tg.gelu, lambda x: 0.5 * x * (1 + _erf(x / np.sqrt(2))), (-4, 4)),
}
for _op, (_fn, _np, (_lo, _hi)) in FLOAT_UNARY.items():
    for _shape in [(3, 4), (1,), (0, 5), ()]:
        _x = rand(*_shape, low=_lo, high=_hi)
        case(_op, f"f32{_shape}", [_x], _fn, tg.float32, wide(_np))
    for _dtype in (F16, BF16):
        _x = rand(3, 4, dtype=_dtype, low=_lo, high=_hi)
        case(_op, str(_dtype), [_x], _fn, as_dtype(_dtype), wide(_np))
_x = rand(4, 5, low=-4, high=4)
case("gelu", "tanh-form", [_x], lambda x: tg.gelu(x, "tanh"), tg.float32, wide(_gelu_tanh))
case("gelu", "gelu_approx", [_x], tg.gelu_approx, tg.float32, wide(_gelu_tanh))

NUMERIC_UNARY = {
    "neg": (tg.negative, lambda x: -x),
    "abs": (tg.abs, np.abs),
    "square": (tg.square, lambda x: x * x),
    "relu": (tg.relu, lambda x: np.where(x > 0, x, np.zeros_like(x))),
}
for _op, (_fn, _np) in NUMERIC_UNARY.items():
    for _x in (rand(3, 4), ints(3, 4), ints(2, 3, dtype=np.int8), rand(5, dtype=F16), rand(0, 2)):
        case(_op, f"{_x.dtype}{_x.shape}", [_x], _fn, as_dtype(_x.dtype), _np)
    case(_op, "scalar", [rand()], _fn, tg.float32, _np)
case("neg", "operator", [rand(3)], lambda x: -x, tg.float32)
case("abs", "operator", [ints(3)], abs, tg.int32)
for _x in (flags(3, 4), flags(), flags(0, 3)):
    case("logical_not", str(_x.shape), [_x], tg.logical_not, tg.bool_, np.logical_not)
case("logical_not", "invert", [flags(5)], lambda x: ~x, tg.bool_)

ARITHMETIC = {
    "add": (tg.add, np.add),
    "sub": (tg.subtract, np.subtract),
    "mul": (tg.multiply, np.multiply),
    "div": (tg.divide, np.divide),
    "pow": (tg.power, np.power),
    "maximum": (tg.maximum, np.maximum),
    "minimum": (tg.minimum, np.minimum),
}
BROADCASTS = [
    ((2, 3), (2, 3)),
    ((1, 3), (4, 3)),
    ((3,), (2, 1)),
    ((2, 1, 4), (3, 1)),
    ((0, 3), (1, 3)),
    ((), (2, 2)),
    ((5, 1, 1), (1,)),
]
# (a dtype, b dtype, result dtype; `div` of integers is float32)
ARITH_DTYPES = [
    (np.int32, np.int32, tg.int32),
    (F16, np.int32, tg.float16),
    (F16, BF16, tg.float32),
    (BF16, BF16, tg.bfloat16),
    (np.int8, np.uint8, tg.int16),
    (np.int64, F16, tg.float16),
    (np.float32, F16, tg.float32),
]


def _arith_operands(op: str, a_shape, b_shape, a_dtype=np.float32, b_dtype=np.float32):
    """Operands in each op's safe domain: pow's bases positive and exponents in [0, 3);
    second operands (divisors) positive; unsigned values non-negative."""

    def values(shape, dtype, low, high):
        if np.dtype(dtype).kind in "iu":
            return ints(*shape, low=math.ceil(low), high=int(high), dtype=dtype)
        return rand(*shape, dtype=dtype, low=low, high=high)

    if op == "pow":
        return values(a_shape, a_dtype, 0.5, 4), values(b_shape, b_dtype, 0, 3)
    first = values(a_shape, a_dtype, 0 if np.dtype(a_dtype).kind == "u" else -3, 4)
    return first, values(b_shape, b_dtype, 0.5, 4)


for _op, (_fn, _np) in ARITHMETIC.items():
    for _a_shape, _b_shape in BROADCASTS:
        _pair = _arith_operands(_op, _a_shape, _b_shape)
        case(_op, f"{_a_shape}{_b_shape}", _pair, _fn, tg.float32, wide(_np))
    for _a_dtype, _b_dtype, _out in ARITH_DTYPES:
        _out = tg.float32 if _op == "div" and not _out.is_float else _out
        _pair = _arith_operands(_op, (2, 3), (1, 3), _a_dtype, _b_dtype)
        case(_op, f"{np.dtype(_a_dtype)}-{np.dtype(_b_dtype)}", _pair, _fn, _out, wide(_np))
case("add", "f16+python-float", [rand(3, dtype=F16)], lambda a: a + 1.5, tg.float16)
case("add", "operator", [rand(3), rand(3)], lambda a, b: a + b, tg.float32)
case("sub", "reflected-int", [ints(3)], lambda a: 2 - a, tg.int32)
case("div", "int-by-int-scalar", [ints(4)], lambda a: a / 2, tg.float32)
case("mul", "int-by-float-scalar", [ints(4)], lambda a: a * 0.5, tg.float32)
case("pow", "operator", [rand(4, low=0.5, high=2)], lambda a: a**2, tg.float32)
case("pow", "reflected", [rand(4)], lambda a: 2.0**a, tg.float32)
_clip_low, _clip_high = (lambda a: tg.clip(a, -1.0, None)), (lambda a: tg.clip(a, None, 1.0))
case("maximum", "clip", [rand(6)], _clip_low, tg.float32, lambda a: np.clip(a, -1.0, None))
case("minimum", "clip", [rand(6)], _clip_high, tg.float32, lambda a: np.clip(a, None, 1.0))

COMPARISONS = {
    "eq": (tg.equal, np.equal),
    "ne": (tg.not_equal, np.not_equal),
    "lt": (tg.less, np.less),
    "le": (tg.less_equal, np.less_equal),
    "gt": (tg.greater, np.greater),
    "ge": (tg.greater_equal, np.greater_equal),
}
COMPARE_OPERANDS = {  # small integer values, so that ties occur
    "f32": (ints(4, 5, low=0, high=3), ints(1, 5, low=0, high=3), np.float32, np.float32),
    "i32-f32": (ints(4, 5, low=0, high=3), ints(5, low=0, high=3), np.int32, np.float32),
    "f16-bf16": (ints(3, 4, low=0, high=3), ints(3, 4, low=0, high=3), F16, BF16),
    "i8-u8": (ints(2, 3, low=-2, high=3), ints(2, 3, low=0, high=3), np.int8, np.uint8),
    "zero-size": (ints(0, 3), ints(3), np.float32, np.float32),
}
for _op, (_fn, _np) in COMPARISONS.items():
    for _name, (_a, _b, _a_dtype, _b_dtype) in COMPARE_OPERANDS.items():
        _pair = (_a.astype(_a_dtype), _b.astype(_b_dtype))
        case(_op, _name, _pair, _fn, tg.bool_, wide(_np))
    case(_op, "bool", (flags(3, 4), flags(3, 1)), _fn, tg.bool_, _np)
case("lt", "operator-with-scalar", [ints(5)], lambda a: a < 1, tg.bool_)
case("ge", "operator", [ints(5), ints(5)], lambda a, b: a >= b, tg.bool_)
case(
    "eq",
    "operator",
    [ints(4, low=0, high=2), ints(4, low=0, high=2)],
    lambda a, b: a == b,
    tg.bool_,
)

LOGICAL = {
    "logical_and": (tg.logical_and, np.logical_and),
    "logical_or": (tg.logical_or, np.logical_or),
}
for _op, (_fn, _np) in LOGICAL.items():
    for _pair in ((flags(3, 4), flags(3, 4)), (flags(1, 4), flags(3, 1)), (flags(), flags(2, 2))):
        case(_op, f"{_pair[0].shape}{_pair[1].shape}", _pair, _fn, tg.bool_, _np)
case("logical_and", "operator", [flags(4), flags(4)], lambda a, b: a & b, tg.bool_)
case("logical_or", "operator", [flags(4), flags(4)], lambda a, b: a | b, tg.bool_)

WHERES = {
    "broadcast-all-three": ((flags(4, 1), rand(1, 5), rand(4, 5)), tg.float32),
    "int-and-f16": ((flags(3), ints(3), rand(3, dtype=F16)), tg.float16),
    "scalar-condition": ((flags(), rand(2, 2), rand(2, 2)), tg.float32),
    "zero-size": ((flags(0, 2), rand(2), rand(1)), tg.float32),
    "bool-branches": ((flags(3), flags(3), flags(1)), tg.bool_),
}
for _name, (_arrays, _dtype) in WHERES.items():
    case("where", _name, _arrays, tg.where, _dtype, np.where)
case(
    "where",
    "python-scalar-branch",
    [flags(2, 3), rand(2, 3)],
    lambda c, a: tg.where(c, a, 0.0),
    tg.float32,
    lambda c, a: np.where(c, a, 0.0),
)

MATMULS = [
    ((3, 4), (4, 5)),
    ((2, 3, 4), (4, 5)),
    ((4, 5), (2, 5, 3)),
    ((2, 1, 3, 4), (5, 4, 2)),
    ((4,), (4, 3)),
    ((3, 4), (4,)),
    ((4,), (4,)),
    ((2, 3, 4), (4,)),
    ((4,), (2, 4, 3)),
    ((0, 4), (4, 2)),
    ((3, 0), (0, 2)),
    ((1, 1), (1, 1)),
]
for _a_shape, _b_shape in MATMULS:
    _pair = (rand(*_a_shape), rand(*_b_shape))
    case("matmul", f"{_a_shape}@{_b_shape}", _pair, tg.matmul, tg.float32, wide(np.matmul))
for _a_dtype, _b_dtype, _out in (
    (F16, F16, tg.float16),
    (BF16, BF16, tg.bfloat16),
    (F16, np.float32, tg.float32),
    (np.int32, np.int8, tg.int32),
):
    _make = ints if _out == tg.int32 else rand
    _pair = (_make(2, 3, 4, dtype=_a_dtype), _make(4, 5, dtype=_b_dtype))
    case(
        "matmul",
        f"{np.dtype(_a_dtype)}@{np.dtype(_b_dtype)}",
        _pair,
        lambda a, b: a @ b,
        _out,
        wide(np.matmul),
    )

# ---------------------------------------------------------------- reductions

REDUCTIONS = {
    "sum": (tg.sum, np.sum),
    "mean": (tg.mean, np.mean),
    "max": (tg.max, np.max),
    "min": (tg.min, np.min),
}
for _op, (_fn, _np) in REDUCTIONS.items():
    for _axis in (None, 0, -1, (0, 2), (-1, -3), ()):
        for _keep in (False, True):
            case(
                _op,
                f"axis={_axis}-keepdims={_keep}",
                [rand(2, 3, 4)],
                lambda x, f=_fn, a=_axis, k=_keep: f(x, a, k),
                tg.float32,
                lambda x, f=_np, a=_axis, k=_keep: f(x.astype(F64), axis=a, keepdims=k),
            )
    _method = method(_op, axis=1)
    case(_op, "method", [rand(3, 4)], _method, tg.float32)
    case(_op, "f16", [rand(4, 8, dtype=F16)], _method, tg.float16, wide(_method))
    case(_op, "bf16", [rand(8, 3, dtype=BF16)], _method, tg.bfloat16, wide(_method))
    case(
        _op,
        "int32",
        [ints(3, 5)],
        _method,
        tg.float32 if _op == "mean" else tg.int32,
        wide(_method),
    )
    case(_op, "zero-size-kept-axis", [rand(0, 3)], _method, tg.float32)
case("sum", "bool-counts", [flags(3, 4)], lambda x: x.sum(1), tg.int32)
case("mean", "bool", [flags(3, 4)], lambda x: x.mean(), tg.float32)
case("max", "bool", [flags(3, 4)], lambda x: x.max(0), tg.bool_)
case("min", "int8", [ints(3, 4, dtype=np.int8)], lambda x: x.min(0), tg.int8)
case("sum", "over-zero-size-axis", [rand(0, 3)], lambda x: x.sum(0), tg.float32)
case(
    "mean",
    "over-zero-size-axis-is-nan",
    [rand(0, 3)],
    lambda x: tg.mean(x, 0),
    tg.float32,
    lambda x: np.full(3, np.nan),
)

_TIES = np.array([[1, 3, 3, 0], [2, 2, 1, 2], [0, 0, 0, 0]], np.float32)
for _axis in (0, 1, -1, None):
    for _keep in (False, True):
        case(
            "argmax",
            f"axis={_axis}-keepdims={_keep}",
            [rand(3, 5)],
            lambda x, a=_axis, k=_keep: tg.argmax(x, a, k),
            tg.int32,
            lambda x, a=_axis, k=_keep: np.argmax(x, axis=a, keepdims=k),
        )
case("argmax", "ties-pick-the-first", [_TIES], lambda x: x.argmax(1), tg.int32)
case("argmax", "int8", [ints(4, 3, dtype=np.int8)], lambda x: x.argmax(0), tg.int32)
case(
    "argmax",
    "bf16",
    [rand(2, 7, dtype=BF16)],
    lambda x: tg.argmax(x, -1),
    tg.int32,
    wide(lambda x: np.argmax(x, -1)),
)


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    x = x.astype(F64)
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def _log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    x = x.astype(F64)
    shifted = x - x.max(axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis, keepdims=True))


_MASKED = np.where(np.tri(4, dtype=bool), rand(4, 4), -np.inf).astype(np.float32)
SOFTMAX_INPUTS = {
    "axis=-1": (rand(3, 4, low=-10, high=10), -1),
    "axis=0": (rand(3, 4, low=-10, high=10), 0),
    "middle-axis": (rand(2, 3, 4), 1),
    "large-logits": (rand(2, 5, low=500, high=1000), -1),
    "causal-mask": (_MASKED, -1),
    "size-1-axis": (rand(3, 1), -1),
    "zero-size-batch": (rand(0, 4), -1),
    "f16": (rand(3, 8, dtype=F16, low=-4, high=4), -1),
    "bf16": (rand(3, 8, dtype=BF16, low=-4, high=4), -1),
}
for _name, (_x, _axis) in SOFTMAX_INPUTS.items():
    _dtype = as_dtype(_x.dtype)
    case(
        "softmax",
        _name,
        [_x],
        lambda x, a=_axis: tg.softmax(x, a),
        _dtype,
        lambda x, a=_axis: _softmax(x, a),
    )
    case(
        "log_softmax",
        _name,
        [_x],
        lambda x, a=_axis: tg.log_softmax(x, a),
        _dtype,
        lambda x, a=_axis: _log_softmax(x, a),
        atol=1e-5,
    )

# ---------------------------------------------------------------- layout and views

_X = rand(2, 3, 4)
case("transpose", "axes", [_X], lambda x: x.transpose(2, 0, 1), tg.float32)
case("transpose", "negative-axes", [_X], lambda x: x.transpose((-1, 0, -2)), tg.float32)
case(
    "transpose",
    "function",
    [_X],
    lambda x: tg.transpose(x, (1, 2, 0)),
    tg.float32,
    lambda x: x.transpose(1, 2, 0),
)
case("transpose", "T", [_X], lambda x: x.T, tg.float32)
case("transpose", "swapaxes", [_X], lambda x: x.swapaxes(0, -1), tg.float32)
case(
    "transpose",
    "permute",
    [_X],
    lambda x: tg.permute(x, (0, 2, 1)),
    tg.float32,
    lambda x: x.transpose(0, 2, 1),
)
case("transpose", "int-zero-size", [ints(0, 3)], lambda x: x.T, tg.int32)
case("transpose", "scalar", [rand()], lambda x: x.T, tg.float32)
case("reshape", "minus-one", [_X], lambda x: x.reshape(4, -1), tg.float32)
case("reshape", "to-scalar", [rand(1, 1)], lambda x: x.reshape(()), tg.float32)
case("reshape", "zero-size", [rand(0, 3)], lambda x: x.reshape(3, 0), tg.float32)
case("reshape", "bool", [flags(2, 3)], lambda x: x.reshape(3, 2), tg.bool_)
case("reshape", "flatten", [_X], lambda x: x.flatten(1), tg.float32, lambda x: x.reshape(2, 12))
case(
    "reshape",
    "expand_dims",
    [_X],
    lambda x: tg.expand_dims(x, (0, -1)),
    tg.float32,
    lambda x: x[None, ..., None],
)
case(
    "reshape",
    "squeeze",
    [rand(3, 1, 2)],
    lambda x: tg.squeeze(x, 1),
    tg.float32,
    lambda x: x.squeeze(1),
)

_FRACTIONS = np.array([[-2.7, -0.5, 0.0, 0.5], [1.5, 2.5, 3.99, -1e-3]], np.float32)
CASTS = [
    (_FRACTIONS, tg.int32),
    (_FRACTIONS, tg.bool_),
    (_FRACTIONS, tg.float16),
    (rand(3, 5), tg.bfloat16),
    (rand(3, 5, dtype=BF16), tg.float16),
    (ints(4), tg.float16),
    (flags(4), tg.float32),
    (ints(3, 2), tg.int32),
    (np.array([300, -200, 127], np.int64), tg.int8),
    (rand(0, 2), tg.int64),
]
for _x, _dtype in CASTS:
    case(
        "cast",
        f"{_x.dtype}->{_dtype}",
        [_x],
        lambda x, d=_dtype: x.astype(d),
        _dtype,
        lambda x, d=_dtype: x.astype(d.to_numpy()),
    )
_TIES_BF16 = np.array([1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-9], np.float32)
case(
    "cast",
    "to-bf16-rounds-half-to-even",
    [_TIES_BF16],
    lambda x: tg.astype(x, "bfloat16"),
    tg.bfloat16,
    lambda x: np.array([1.0, 1 + 2**-6, 1.0]),
)

# (axis, start, length): a negative start counts from the end
for _axis, _start, _length in [(0, 1, 2), (-1, 1, 2), (1, 0, 3), (0, 1, 0), (2, -3, 2)]:
    case(
        "narrow",
        f"axis={_axis}-start={_start}-length={_length}",
        [rand(3, 4, 5)],
        lambda x, a=_axis, s=_start, n=_length: tg.narrow(x, a, s, n),
        tg.float32,
        lambda x, a=_axis, s=_start, n=_length: np.take(x, np.arange(n) + s % x.shape[a], a),
    )

BROADCAST_TO = [
    ((3,), (2, 3)),
    ((1, 3), (4, 3)),
    ((), (2, 2)),
    ((2, 1, 3), (2, 4, 3)),
    ((1,), (0,)),
    ((3,), (3,)),
]
for _source, _target in BROADCAST_TO:
    case(
        "broadcast_to",
        f"{_source}->{_target}",
        [rand(*_source)],
        lambda x, t=_target: tg.broadcast_to(x, t),
        tg.float32,
        lambda x, t=_target: np.broadcast_to(x, t),
    )
case(
    "broadcast_to",
    "bool",
    [flags(1, 3)],
    lambda x: tg.broadcast_to(x, (2, 3)),
    tg.bool_,
    lambda x: np.broadcast_to(x, (2, 3)),
)

CONCATS = {  # (arrays, axis, inferred dtype)
    "axis-0": ((rand(2, 3), rand(4, 3), rand(1, 3)), 0, tg.float32),
    "axis=-1": ((rand(2, 3), rand(2, 1)), -1, tg.float32),
    "one-input": ((ints(2, 3),), 1, tg.int32),
    "zero-size-part": ((rand(0, 3), rand(2, 3)), 0, tg.float32),
    "promoted-by-casts": ((rand(2, dtype=F16), rand(3)), 0, tg.float32),
    "bool": ((flags(2, 2), flags(2, 3)), 1, tg.bool_),
}
for _name, (_arrays, _axis, _dtype) in CONCATS.items():
    case(
        "concat",
        _name,
        _arrays,
        lambda *xs, a=_axis: tg.concatenate(xs, a),
        _dtype,
        lambda *xs, a=_axis: np.concatenate(xs, a),
    )
case(
    "concat",
    "stack",
    [rand(2, 3), rand(2, 3)],
    lambda a, b: tg.stack([a, b], axis=1),
    tg.float32,
    lambda a, b: np.stack([a, b], axis=1),
)

_TABLE = rand(10, 4)
TAKES = {  # (table, indices, axis)
    "embedding": (_TABLE, np.array([[1, 9], [0, 0]], np.int32), 0),
    "axis-1": (_TABLE, np.array([3, 0, 3], np.int32), 1),
    "axis=-1": (_TABLE, np.array([2], np.int32), -1),
    "negative-indices": (_TABLE, np.array([-1, -10, 4], np.int32), 0),
    "int64-indices": (_TABLE, np.array([[5], [6]], np.int64), 0),
    "uint8-indices": (_TABLE, np.array([7, 2], np.uint8), 0),
    "scalar-index": (_TABLE, np.array(3, np.int32), 0),
    "no-indices": (_TABLE, np.zeros((0,), np.int32), 0),
    "f16-table": (rand(6, 3, dtype=F16), np.array([5, 1], np.int32), 0),
    "zero-size-table": (rand(3, 0), np.array([2, 0], np.int32), 0),
}
for _name, (_x, _ids, _axis) in TAKES.items():
    case(
        "take",
        _name,
        (_x, _ids),
        lambda x, i, a=_axis: tg.take(x, i, a),
        as_dtype(_x.dtype),
        lambda x, i, a=_axis: np.take(x, i, axis=a),
    )


def _updated(target: np.ndarray, update: np.ndarray, axis: int, start: int) -> np.ndarray:
    result = target.copy()
    index = [slice(None)] * target.ndim
    index[axis % target.ndim] = slice(start, start + update.shape[axis])
    result[tuple(index)] = update
    return result


SLICE_UPDATES = [  # (target shape, update shape, axis, start, dtype)
    ((2, 6, 3), (2, 2, 3), 1, 3, np.float32),
    ((2, 6, 3), (1, 6, 3), 0, 1, np.float32),
    ((2, 6, 3), (2, 6, 1), -1, 2, np.float32),
    ((4, 2), (4, 2), 0, 0, np.int32),
    ((5,), (0,), 0, 5, np.float32),
    ((3, 4), (3, 1), 1, 3, F16),
]
for _t, _u, _axis, _start, _dtype in SLICE_UPDATES:
    case(
        "slice_update",
        f"{_t}<-{_u}-axis={_axis}-start={_start}",
        (rand(*_t, dtype=_dtype), rand(*_u, dtype=_dtype)),
        lambda t, u, a=_axis, s=_start: tg.slice_update(t, u, a, s),
        as_dtype(_dtype),
        lambda t, u, a=_axis, s=_start: _updated(t, u, a, s),
    )

# ---------------------------------------------------------------- generators

ARANGES = [  # (arguments, keyword arguments, NumPy's result, inferred dtype)
    ((2, 11, 3), {}, np.arange(2, 11, 3), tg.int32),
    ((0.5, 2.0, 0.25), {}, np.arange(0.5, 2.0, 0.25), tg.float32),
    ((10, 0, -3), {}, np.arange(10, 0, -3), tg.int32),
    ((5,), {}, np.arange(5), tg.int32),
    ((3, 3), {}, np.arange(3, 3), tg.int32),
    ((1.0, 0.0, -0.25), {}, np.arange(1.0, 0.0, -0.25), tg.float32),
    ((0, 4), {"dtype": tg.float16}, np.arange(4), tg.float16),
    ((-1.0, 1.0, 0.5), {"dtype": "bfloat16"}, np.arange(-1.0, 1.0, 0.5), tg.bfloat16),
]
for _args, _kwargs, _want, _dtype in ARANGES:
    case(
        "arange",
        f"{_args}{_kwargs}",
        [],
        lambda g, a=_args, k=_kwargs: tg.arange(g, *a, **k),
        _dtype,
        lambda w=_want: w,
    )

FULLS = [  # (shape, value, dtype argument, NumPy's result, inferred dtype)
    ((2, 3), 7.5, None, np.full((2, 3), 7.5), tg.float32),
    ((4,), 3, None, np.full(4, 3), tg.int32),
    ((2, 2), True, None, np.ones((2, 2), bool), tg.bool_),
    ((3,), 1 / 3, tg.float16, np.full(3, 1 / 3), tg.float16),
    ((2,), 7.9, tg.int32, np.full(2, 7), tg.int32),
    ((0, 2), 0, tg.float32, np.zeros((0, 2)), tg.float32),
    ((), -2.5, tg.bfloat16, np.array(-2.5), tg.bfloat16),
    ((2,), 300, tg.int8, np.full(2, 300 - 256), tg.int8),  # wraps, as a cast does
]
for _shape, _value, _dtype, _want, _out in FULLS:
    case(
        "full",
        f"{_shape}-{_value}-{_dtype}",
        [],
        lambda g, s=_shape, v=_value, d=_dtype: tg.full(g, s, v, d),
        _out,
        lambda w=_want: w,
    )
case("full", "zeros", [], lambda g: tg.zeros(g, (2, 3)), tg.float32, lambda: np.zeros((2, 3)))
case("full", "ones-int32", [], lambda g: tg.ones(g, (2,), tg.int32), tg.int32, lambda: np.ones(2))

# ---------------------------------------------------------------- convolution and pooling


def naive_conv2d(x, w, stride, padding, dilation, groups):
    """A direct loop over every output element: the independent oracle for conv2d."""
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    n, _c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.pad(x.astype(F64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, o, oh, ow))
    per_group = o // groups
    for b in range(n):
        for oc in range(o):
            first = (oc // per_group) * cg
            for i in range(oh):
                for j in range(ow):
                    for ic in range(cg):
                        for p in range(kh):
                            for q in range(kw):
                                pixel = xp[b, first + ic, i * sh + p * dh, j * sw + q * dw]
                                out[b, oc, i, j] += pixel * w[oc, ic, p, q]
    return out


CONVS = [  # (x shape, weight shape, stride, padding, dilation, groups, dtype)
    ((2, 3, 7, 6), (4, 3, 3, 3), (1, 1), (1, 1), (1, 1), 1, np.float32),
    ((1, 4, 7, 6), (4, 1, 3, 3), (2, 2), (1, 1), (1, 1), 4, np.float32),  # depthwise
    ((1, 4, 6, 6), (8, 1, 3, 3), (1, 1), (1, 1), (1, 1), 4, np.float32),  # depthwise x2
    ((1, 4, 7, 7), (6, 2, 3, 3), (1, 1), (0, 0), (2, 2), 2, np.float32),
    ((1, 2, 5, 5), (2, 2, 3, 3), (2, 2), (2, 2), (1, 1), 1, np.float32),
    ((2, 3, 4, 5), (5, 3, 1, 1), (1, 1), (0, 0), (1, 1), 1, np.float32),  # 1x1
    ((1, 3, 8, 7), (2, 3, 3, 2), (2, 1), (1, 0), (1, 2), 1, np.float32),  # per-axis pairs
    ((1, 6, 5, 5), (6, 2, 2, 2), (1, 2), (0, 1), (1, 1), 3, np.float32),
    ((1, 2, 3, 3), (2, 2, 3, 3), (1, 1), (0, 0), (1, 1), 1, np.float32),  # 1x1 output
    ((1, 2, 6, 6), (3, 2, 3, 3), (1, 1), (1, 1), (1, 1), 1, F16),
    ((1, 2, 5, 5), (2, 1, 3, 3), (1, 1), (1, 1), (1, 1), 2, np.int32),
]
for _xs, _ws, _stride, _pad, _dil, _groups, _dtype in CONVS:
    _make = ints if np.dtype(_dtype).kind == "i" else rand
    case(
        "conv2d",
        f"{_xs}*{_ws}-s{_stride}-p{_pad}-d{_dil}-g{_groups}-{np.dtype(_dtype)}",
        (_make(*_xs, dtype=_dtype), _make(*_ws, dtype=_dtype)),
        lambda x, w, s=_stride, p=_pad, d=_dil, k=_groups: tg.conv2d(x, w, s, p, d, k),
        as_dtype(_dtype),
        lambda x, w, s=_stride, p=_pad, d=_dil, k=_groups: naive_conv2d(x, w, s, p, d, k),
        rtol=1e-4,
        atol=1e-4,
    )
case(
    "conv2d",
    "scalar-arguments",
    [rand(1, 2, 5, 5), rand(4, 1, 3, 3)],
    lambda x, w: tg.conv2d(x, w, stride=2, padding=1, dilation=1, groups=2),
    tg.float32,
    lambda x, w: naive_conv2d(x, w, (2, 2), (1, 1), (1, 1), 2),
    rtol=1e-4,
    atol=1e-4,
)


def naive_pool(x, kernel, stride, padding, reduce, fill):
    """A direct loop over output positions; `fill` pads (-inf for max, 0 for sums)."""
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    xp = np.pad(x.astype(F64), ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=fill)
    oh, ow = (x.shape[2] + 2 * ph - kh) // sh + 1, (x.shape[3] + 2 * pw - kw) // sw + 1
    out = np.zeros((*x.shape[:2], oh, ow))
    for i in range(oh):
        for j in range(ow):
            out[:, :, i, j] = reduce(xp[:, :, i * sh : i * sh + kh, j * sw : j * sw + kw], (2, 3))
    return out


def naive_avg(x, kernel, stride, padding, count_include_pad=True):
    """Window sums over the zero-padded input, divided by the window area or by the
    number of real (unpadded) elements in each window."""
    sums = naive_pool(x, kernel, stride, padding, np.sum, 0)
    if count_include_pad:
        return sums / (kernel[0] * kernel[1])
    ones = np.ones((1, 1, *x.shape[2:]))
    return sums / naive_pool(ones, kernel, stride, padding, np.sum, 0)


POOLS = [  # (kernel, stride, padding); stride None means the kernel size
    ((2, 2), None, (0, 0)),
    ((3, 3), (2, 2), (1, 1)),
    ((3, 3), (1, 1), (1, 1)),
    ((3, 2), (2, 1), (1, 1)),
    ((1, 1), (1, 1), (0, 0)),
    ((4, 4), (3, 3), (2, 2)),
]
_NEGATIVE = rand(2, 3, 7, 6, low=-3, high=-1)  # zero padding would win a max here
for _k, _s, _p in POOLS:
    _stride = _s or _k
    case(
        "max_pool2d",
        f"k{_k}-s{_s}-p{_p}",
        [_NEGATIVE],
        lambda x, k=_k, s=_s, p=_p: tg.max_pool2d(x, k, s, p),
        tg.float32,
        lambda x, k=_k, s=_stride, p=_p: naive_pool(x, k, s, p, np.max, -np.inf),
    )
    for _include in (True, False):
        case(
            "avg_pool2d",
            f"k{_k}-s{_s}-p{_p}-count_include_pad={_include}",
            [_NEGATIVE],
            lambda x, k=_k, s=_s, p=_p, c=_include: tg.avg_pool2d(x, k, s, p, c),
            tg.float32,
            lambda x, k=_k, s=_stride, p=_p, c=_include: naive_avg(x, k, s, p, c),
        )
case(
    "max_pool2d",
    "int32",
    [ints(1, 2, 5, 5, low=-9, high=-1)],
    lambda x: tg.max_pool2d(x, 3, 2, 1),
    tg.int32,
    lambda x: naive_pool(x, (3, 3), (2, 2), (1, 1), np.max, -np.inf),
)
case(
    "max_pool2d",
    "f16",
    [rand(1, 2, 4, 4, dtype=F16)],
    lambda x: tg.max_pool2d(x, 2),
    tg.float16,
    lambda x: naive_pool(x, (2, 2), (2, 2), (0, 0), np.max, -np.inf),
)
case(
    "avg_pool2d",
    "bf16",
    [rand(1, 2, 4, 4, dtype=BF16)],
    lambda x: tg.avg_pool2d(x, 2, 1, 1),
    tg.bfloat16,
    lambda x: naive_avg(x, (2, 2), (1, 1), (1, 1)),
)


# ---------------------------------------------------------------- table-driven tests


def test_every_op_has_exactly_one_reference_kernel() -> None:
    assert sorted(KERNELS) == PRIMITIVES


def test_the_case_table_exercises_every_op() -> None:
    assert sorted({c.op for c in CASES}) == PRIMITIVES


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_inference_and_reference_numerics(c: Case) -> None:
    g, out, got = build_and_run(c.build, c.arrays)
    assert c.op in {n.op for n in g.nodes}, f"the builder emitted no {c.op} node"
    want = np.asarray((c.expected or c.build)(*c.arrays))
    assert out.shape == want.shape, f"inferred shape {out.shape}, NumPy gives {want.shape}"
    assert out.dtype == c.dtype, f"inferred dtype {out.dtype}, expected {c.dtype}"
    assert_matches(got, want, c.dtype, c.rtol, c.atol)


def test_boundary_nodes_declare_their_shape_and_dtype() -> None:
    g = tg.Graph()
    x = g.input("x", (2, 3), tg.bfloat16)
    assert (x.shape, x.dtype, x.node.op) == ((2, 3), tg.bfloat16, "input")
    assert g.input("y", ()).dtype == tg.float32, "float32 is the default"
    assert g.param("w", (4,), "int8").dtype == tg.int8
    assert g.constant(1.5).dtype == tg.float32, "float64 literals become float32"
    assert g.constant(2).dtype == tg.int32, "Python ints become int32"
    assert g.constant(np.zeros((2, 0), np.int64)).shape == (2, 0)
    assert g.constant([1, 2], tg.float16).dtype == tg.float16


# ---------------------------------------------------------------- semantics


HALF_PRECISION = {
    "exp": (tg.exp, np.exp),
    "softmax": (tg.softmax, lambda x: _softmax(x, -1)),
    "sum": (method("sum", 1), method("sum", 1)),
    "matmul": (lambda x: x @ x.T, lambda x: x @ x.T),
    "gelu": (tg.gelu, lambda x: 0.5 * x * (1 + _erf(x / np.sqrt(2)))),
    "conv2d": (
        lambda x: tg.conv2d(x.reshape(1, 4, 2, 4), x.reshape(4, 4, 2, 1)),
        lambda x: naive_conv2d(
            x.reshape(1, 4, 2, 4), x.reshape(4, 4, 2, 1), (1, 1), (0, 0), (1, 1), 1
        ),
    ),
}


@pytest.mark.parametrize("dtype", [F16, BF16], ids=str)
@pytest.mark.parametrize(("build", "expected"), HALF_PRECISION.values(), ids=list(HALF_PRECISION))
def test_half_precision_computes_in_float32_and_rounds_once(dtype, build, expected) -> None:
    x = rand(4, 8, dtype=dtype)
    _, _, got = build_and_run(build, (x,))
    want = np.asarray(expected(x.astype(np.float32))).astype(np.float32).astype(dtype)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))


def test_sigmoid_silu_and_softmax_do_not_overflow() -> None:
    x = np.array([-1000, -100, -1, 0, 1, 100, 1000], np.float32)
    _, _, sigmoid = build_and_run(tg.sigmoid, (x,))
    _, _, silu = build_and_run(tg.silu, (x,))
    _, _, soft = build_and_run(tg.softmax, (x,))
    assert np.isfinite(sigmoid).all() and np.isfinite(silu).all() and np.isfinite(soft).all()
    np.testing.assert_array_equal(sigmoid[[0, 3, 6]], [0.0, 0.5, 1.0])
    np.testing.assert_array_equal(silu[[0, 3, 6]], [0.0, 0.0, 1000.0])
    np.testing.assert_array_equal(soft, np.eye(7, dtype=np.float32)[6])


def test_gelu_exact_form_is_correctly_rounded_float32() -> None:
    x = np.linspace(-6, 6, 1001, dtype=np.float32)
    _, _, got = build_and_run(tg.gelu, (x,))
    want = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x.astype(F64)])
    np.testing.assert_array_equal(got, want.astype(np.float32))


def test_infinities_and_nans_propagate() -> None:
    x = np.array([np.inf, -np.inf, np.nan, 0.0], np.float32)
    _, _, exp = build_and_run(tg.exp, (x,))
    np.testing.assert_array_equal(exp, [np.inf, 0.0, np.nan, 1.0])
    _, _, ratio = build_and_run(lambda a: 1.0 / a, (x,))
    np.testing.assert_array_equal(ratio, [0.0, -0.0, np.nan, np.inf])
    _, _, biggest = build_and_run(lambda a: tg.maximum(a, 1.0), (x,))
    np.testing.assert_array_equal(biggest, [np.inf, 1.0, np.nan, 1.0])


# ---------------------------------------------------------------- indexing


BASIC_INDICES = [
    np.s_[1:3],
    np.s_[::2],
    np.s_[::-1],
    np.s_[3:0:-2],
    np.s_[1],
    np.s_[-1],
    np.s_[:, 1:],
    np.s_[..., 0],
    np.s_[1, ..., ::2],
    np.s_[None, 1:2, ::-1],
    np.s_[1:2, None, 3],
    np.s_[:, :, None],
    np.s_[..., None],
    np.s_[:0],
    np.s_[-10:10],
    np.s_[2, -1, 0],
    np.s_[()],
    np.s_[...],
]


@pytest.mark.parametrize("index", BASIC_INDICES, ids=str)
def test_basic_indexing_matches_numpy(index) -> None:
    x = rand(4, 5, 3)
    _, out, got = build_and_run(lambda a: a[index], (x,))
    assert out.shape == x[index].shape
    np.testing.assert_array_equal(got, x[index])


@st.composite
def index_cases(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple]:
    """A shape and a basic index for it: ints, slices with any step, Nones, at most one
    Ellipsis (standing for the axes between the leading and trailing explicit items)."""
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
    explicit = draw(st.integers(0, len(shape)))
    split = draw(st.none() | st.integers(0, explicit))
    leading = explicit if split is None else split
    axes = [*range(leading), *range(len(shape) - (explicit - leading), len(shape))]
    items: list[object] = []
    for axis in axes:
        dim = shape[axis]
        if draw(st.booleans()):
            items.append(draw(st.integers(-dim, dim - 1)))
        else:
            bound = st.none() | st.integers(-dim - 2, dim + 2)
            step = draw(st.sampled_from([None, 1, 2, 3, -1, -2]))
            items.append(slice(draw(bound), draw(bound), step))
    if split is not None:
        items.insert(split, Ellipsis)
    for _ in range(draw(st.integers(0, 2))):
        items.insert(draw(st.integers(0, len(items))), None)
    return shape, tuple(items)


@given(index_cases())
def test_random_basic_indexing_matches_numpy(shape_and_index) -> None:
    shape, index = shape_and_index
    x = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
    _, out, got = build_and_run(lambda a: a[index], (x,))
    assert out.shape == x[index].shape
    np.testing.assert_array_equal(got, x[index])


def test_unit_step_slice_on_axis_zero_is_a_narrow_view() -> None:
    g = tg.Graph("slice")
    x = g.input("x", (6, 4))
    y = x[2:5]
    assert y.node.op == "narrow" and y.node.attr("axis") == 0
    assert x[::2].node.op == "take"
