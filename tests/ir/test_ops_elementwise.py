"""Elementwise ops: unary math, arithmetic, comparisons, logic and where, with their
broadcasting and dtype promotion, checked through the builder against NumPy (see
tests/ir/op_cases.py); then overflow, exact rounding and inf/nan semantics."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tensorgraph as tg
from tensorgraph.ir.dtypes import as_dtype
from tests.ir.op_cases import (
    BF16,
    F16,
    F64,
    Arrays,
    Case,
    build_and_run,
    case_adder,
    check_case,
    erf_f64,
    wide,
)

CASES: list[Case] = []
case = case_adder(CASES)
_random = Arrays(seed=1)
rand, ints, flags = _random.rand, _random.ints, _random.flags

# ---------------------------------------------------------------- elementwise


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
    "gelu": (tg.gelu, lambda x: 0.5 * x * (1 + erf_f64(x / np.sqrt(2))), (-4, 4)),
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


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_inference_and_reference_numerics(c: Case) -> None:
    check_case(c)


# ---------------------------------------------------------------- semantics


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
