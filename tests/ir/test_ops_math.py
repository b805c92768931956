"""The elementwise math of ir.math_functions (rounding, erf/log1p/expm1/tan/atan/atan2,
isnan/isinf, remainder/fmod/floor_divide, bitwise logic, logical_xor) through the builder,
against Python's own arithmetic on each element (see tests/ir/op_cases.py): `%`, `//`,
math.fmod, math.erf, math.atan2, and integer bit operations, never the kernels' NumPy
calls. Then the semantics torch fixes and NumPy does not share."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tensorgraph as tg
from tensorgraph.ir.dtypes import as_dtype
from tests.ir.op_cases import BF16, F16, F64, Arrays, Case, build_and_run, case_adder, check_case

CASES: list[Case] = []
case = case_adder(CASES)
_random = Arrays(seed=11)
rand, ints, flags = _random.rand, _random.ints, _random.flags


def elementwise(fn, otype=F64):
    """`fn` on every element pair as Python numbers (ints stay ints, floats are float64)."""

    def apply(*arrays):
        broadcast = np.broadcast_arrays(*arrays)
        flat = [
            (a if a.dtype.kind in "iub" else a.astype(F64)).reshape(-1).tolist() for a in broadcast
        ]
        values = [fn(*items) for items in zip(*flat, strict=True)]
        return np.array(values, dtype=otype).reshape(broadcast[0].shape)

    return apply


# ---------------------------------------------------------------- unary float math

FLOAT_MATH = {
    "erf": (tg.erf, math.erf, (-3, 3)),
    "log1p": (tg.log1p, math.log1p, (-0.9, 4)),
    "expm1": (tg.expm1, math.expm1, (-3, 3)),
    "tan": (tg.tan, math.tan, (-1.4, 1.4)),
    "atan": (tg.atan, math.atan, (-5, 5)),
}
for _op, (_fn, _py, (_lo, _hi)) in FLOAT_MATH.items():
    for _shape in [(3, 4), (), (0, 5)]:
        case(
            _op,
            f"f32{_shape}",
            [rand(*_shape, low=_lo, high=_hi)],
            _fn,
            tg.float32,
            elementwise(_py),
        )
    for _dtype in (F16, BF16):
        _x = rand(3, 4, dtype=_dtype, low=_lo, high=_hi)
        case(_op, str(_dtype), [_x], _fn, as_dtype(_dtype), elementwise(_py))
case("atan", "mlx-name", [rand(4)], tg.arctan, tg.float32, elementwise(math.atan))

# ---------------------------------------------------------------- rounding and sign

_HALVES = (ints(4, 6, low=-12, high=12) / 2).astype(np.float32)  # ties for round
ROUNDING = {
    "floor": (tg.floor, math.floor),
    "ceil": (tg.ceil, math.ceil),
    "trunc": (tg.trunc, math.trunc),
    "round": (tg.round, round),  # Python's round: half to even, like torch.round
}
_BIG = np.array([2**53 + 1, -(2**62) - 1, 7], np.int64)  # a float64 detour would lose these
for _op, (_fn, _py) in ROUNDING.items():
    case(_op, "halves", [_HALVES], _fn, tg.float32, elementwise(_py))
    case(_op, "f32", [rand(3, 5, low=-9, high=9)], _fn, tg.float32, elementwise(_py))
    case(_op, "f16", [_HALVES.astype(F16)], _fn, tg.float16, elementwise(_py))
    case(_op, "0-d", [rand()], _fn, tg.float32, elementwise(_py))
    case(_op, "zero-size", [rand(2, 0)], _fn, tg.float32, elementwise(_py))
    for _x in (ints(3, 4), ints(5, dtype=np.int8), _BIG):
        case(_op, f"{_x.dtype}-unchanged", [_x], _fn, as_dtype(_x.dtype), lambda x: x)


def _py_sign(v):
    return 0.0 if v != v else (v > 0) - (v < 0)  # nan -> 0, as torch gives


_SPECIALS = np.array([-np.inf, -2.5, -0.0, 0.0, 1e-30, np.inf, np.nan], np.float32)
case("sign", "specials", [_SPECIALS], tg.sign, tg.float32, elementwise(_py_sign))
case("sign", "f32", [rand(3, 4)], tg.sign, tg.float32, elementwise(_py_sign))
case("sign", "bf16", [rand(6, dtype=BF16)], tg.sign, tg.bfloat16, elementwise(_py_sign))
for _x in (ints(3, 4), ints(4, dtype=np.int8), ints(4, low=0, dtype=np.uint8), ints(0)):
    case(
        "sign",
        f"{_x.dtype}{_x.shape}",
        [_x],
        tg.sign,
        as_dtype(_x.dtype),
        elementwise(_py_sign, np.int64),
    )

# ---------------------------------------------------------------- predicates

for _op, _py in (("isnan", math.isnan), ("isinf", math.isinf)):
    _fn = getattr(tg, _op)
    case(_op, "specials", [_SPECIALS], _fn, tg.bool_, elementwise(_py, bool))
    case(_op, "f16", [_SPECIALS.astype(F16)], _fn, tg.bool_, elementwise(_py, bool))
    case(
        _op,
        "bf16-2d",
        [_SPECIALS.astype(BF16).reshape(7, 1)],
        _fn,
        tg.bool_,
        elementwise(_py, bool),
    )
    for _x in (ints(3, 2), flags(4), ints(0, 2)):
        case(_op, f"{_x.dtype}{_x.shape}", [_x], _fn, tg.bool_, lambda x: np.zeros(x.shape, bool))

# ---------------------------------------------------------------- bitwise and xor


def _invert(v):
    return (not v) if isinstance(v, bool) else ~v


for _x, _out in (
    (ints(3, 4, low=-50, high=50), np.int32),
    (ints(5, dtype=np.int8), np.int8),
    (ints(5, low=0, high=256, dtype=np.uint8), np.uint8),
    (flags(2, 3), bool),
    (ints(), np.int32),
):
    _expected = elementwise(_invert, object)
    case(
        "bitwise_not",
        f"{_x.dtype}{_x.shape}",
        [_x],
        tg.bitwise_not,
        as_dtype(_x.dtype),
        lambda x, e=_expected, o=_out: (
            e(x).astype(np.int64).astype(o) if o is not bool else e(x).astype(bool)
        ),
    )
case("bitwise_not", "mlx-name", [ints(3)], tg.bitwise_invert, tg.int32, lambda x: -x - 1)

BITWISE = {
    "bitwise_and": (tg.bitwise_and, lambda a, b: a & b),
    "bitwise_or": (tg.bitwise_or, lambda a, b: a | b),
    "bitwise_xor": (tg.bitwise_xor, lambda a, b: a ^ b),
}
for _op, (_fn, _py) in BITWISE.items():
    _pairs = {
        "i32-broadcast": ((ints(3, 1, low=-99, high=99), ints(4, low=-99, high=99)), tg.int32),
        "i8-u8": (
            (ints(2, 3, dtype=np.int8), ints(2, 3, low=0, high=200, dtype=np.uint8)),
            tg.int16,
        ),
        "bool": ((flags(3, 4), flags(1, 4)), tg.bool_),
        "0-d-and-empty": ((ints(), ints(0, 3)), tg.int32),
    }
    for _name, (_pair, _dtype) in _pairs.items():
        case(_op, _name, _pair, _fn, _dtype, elementwise(_py, object))
    case(
        _op,
        "python-int",
        [ints(4)],
        lambda a, f=_fn: f(a, 6),
        tg.int32,
        lambda a, p=_py: elementwise(p, object)(a, np.array(6)),
    )
for _pair in ((flags(3, 4), flags(3, 4)), (flags(1, 4), flags(3, 1)), (flags(), flags(0))):
    case(
        "logical_xor",
        f"{_pair[0].shape}{_pair[1].shape}",
        _pair,
        tg.logical_xor,
        tg.bool_,
        lambda a, b: a != b,
    )

# ---------------------------------------------------------------- division family


def _py_fmod(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return abs(a) % abs(b) * (1 if a >= 0 else -1)  # C: the dividend's sign
    return math.fmod(a, b)


DIVISIONS = {
    "remainder": (tg.remainder, lambda a, b: a % b),
    "fmod": (tg.fmod, _py_fmod),
    "floor_divide": (tg.floor_divide, lambda a, b: a // b),
}


def _divisors(*shape, dtype=np.int32):
    """Non-zero integers of both signs, -1 and 1 included."""
    values = ints(*shape, low=1, high=8, dtype=dtype)
    signs = np.where(flags(*shape), 1, -1).astype(dtype)
    return (values * signs).astype(dtype)


for _op, (_fn, _py) in DIVISIONS.items():
    _int_pairs = {
        "i32-broadcast": ((ints(3, 4, low=-40, high=40), _divisors(4)), tg.int32),
        "i8-i32": ((ints(2, 5, dtype=np.int8), _divisors(2, 1)), tg.int32),
        "u8": (
            (ints(6, low=0, high=250, dtype=np.uint8), ints(6, low=1, high=9, dtype=np.uint8)),
            tg.uint8,
        ),
        "i64-0-d": ((ints(), _divisors(3, dtype=np.int64)), tg.int64),
        "zero-size": ((ints(0, 3), _divisors(3)), tg.int32),
    }
    for _name, (_pair, _dtype) in _int_pairs.items():
        case(_op, _name, _pair, _fn, _dtype, elementwise(_py, np.int64))
    _a, _b = rand(4, 5, low=-9, high=9), rand(5, low=0.5, high=3) * np.where(flags(5), 1, -1)
    case(
        _op,
        "f32",
        [_a, _b.astype(np.float32)],
        _fn,
        tg.float32,
        elementwise(_py),
        rtol=1e-5,
        atol=1e-5,
    )
    case(_op, "f16-by-int", [_a.astype(F16), _divisors(5)], _fn, tg.float16, elementwise(_py))
    case(
        _op,
        "python-scalar",
        [ints(6, low=-20, high=20)],
        lambda a, f=_fn: f(a, 3),
        tg.int32,
        lambda a, p=_py: elementwise(p, np.int64)(a, np.array(3)),
    )

case("atan2", "f32-broadcast", [rand(3, 1), rand(4)], tg.atan2, tg.float32, elementwise(math.atan2))
case("atan2", "int-and-f32", [ints(4), rand(4)], tg.atan2, tg.float32, elementwise(math.atan2))
case(
    "atan2",
    "bf16",
    [rand(5, dtype=BF16), rand(5, dtype=BF16)],
    tg.arctan2,
    tg.bfloat16,
    elementwise(math.atan2),
)
case(
    "atan2",
    "zeros",
    [np.array([0.0, -0.0, 0.0], np.float32), np.array([0.0, -1.0, 1.0], np.float32)],
    tg.atan2,
    tg.float32,
    elementwise(math.atan2),
)


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_inference_and_reference_numerics(c: Case) -> None:
    check_case(c)


# ---------------------------------------------------------------- semantics


def test_round_takes_halves_to_even() -> None:
    x = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 3.49], np.float32)
    _, _, got = build_and_run(tg.round, (x,))
    np.testing.assert_array_equal(got, [0.0, 2.0, 2.0, -0.0, -2.0, 3.0])


def test_float_floor_divide_is_pythons_not_floor_of_the_rounded_quotient() -> None:
    # 1 / 0.1f rounds to exactly 10.0 in float32, but 0.1f is slightly above 0.1, so the
    # true quotient is 9.99999985...: Python, NumPy and torch all give 9 (and remainder
    # 1 - 9 * 0.1f = 0.09999998658895493 in float32).
    one, tenth = np.array([1.0], np.float32), np.array([0.1], np.float32)
    _, _, quotient = build_and_run(tg.floor_divide, (one, tenth))
    _, _, rest = build_and_run(tg.remainder, (one, tenth))
    assert quotient.tolist() == [9.0]
    assert rest.tolist() == [np.float32(0.09999998658895493)]


def test_remainder_takes_the_divisors_sign_and_fmod_the_dividends() -> None:
    a, b = np.array([-7, 7, -7, 7], np.int32), np.array([2, -2, -2, 2], np.int32)
    _, _, rem = build_and_run(tg.remainder, (a, b))
    _, _, fmod = build_and_run(tg.fmod, (a, b))
    _, _, div = build_and_run(tg.floor_divide, (a, b))
    assert rem.tolist() == [1, -1, -1, 1]  # -7 = 2 * -4 + 1
    assert fmod.tolist() == [-1, 1, -1, 1]  # -7 = 2 * -3 - 1
    assert div.tolist() == [-4, -4, 3, 3]


def test_most_negative_integer_by_minus_one_wraps() -> None:
    a, b = np.array([-(2**31), -(2**31)], np.int32), np.array([-1, 1], np.int32)
    _, _, div = build_and_run(tg.floor_divide, (a, b))
    _, _, rem = build_and_run(tg.remainder, (a, b))
    assert div.tolist() == [-(2**31), -(2**31)]  # 2**31 wraps to -2**31, as in torch
    assert rem.tolist() == [0, 0]


@pytest.mark.parametrize("op", sorted(DIVISIONS))
def test_integer_division_by_zero_is_a_run_error(op) -> None:
    a, b = np.array([5, 6], np.int32), np.array([3, 0], np.int32)
    with pytest.raises(tg.RunError, match=rf"%\d+ {op}: integer division by zero"):
        build_and_run(getattr(tg, op), (a, b))


def test_float_division_by_zero_follows_ieee() -> None:
    a, b = np.array([1.0, -1.0, 0.0], np.float32), np.zeros(3, np.float32)
    _, _, div = build_and_run(tg.floor_divide, (a, b))
    _, _, rem = build_and_run(tg.remainder, (a, b))
    np.testing.assert_array_equal(div, [np.inf, -np.inf, np.nan])
    assert np.isnan(rem).all()


@pytest.mark.parametrize(
    ("build", "dtype", "message"),
    [
        (tg.erf, np.int32, "erf needs a floating-point input"),
        (tg.floor, np.bool_, "floor needs a numeric input"),
        (tg.bitwise_not, np.float32, "bitwise ops need integer or bool inputs"),
        (lambda x: tg.atan2(x, x), np.int32, "atan2 needs a floating-point operand"),
        (lambda x: tg.remainder(x, x), np.bool_, "remainder needs a numeric input"),
        (lambda x: tg.logical_xor(x, x), np.int32, "logical ops need bool inputs"),
    ],
)
def test_bad_dtypes_are_dtype_errors(build, dtype, message) -> None:
    g = tg.Graph("bad")
    with pytest.raises(tg.DTypeError, match=message):
        build(g.input("x", (3,), as_dtype(np.dtype(dtype))))
