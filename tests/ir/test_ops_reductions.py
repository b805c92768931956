"""Contractions and reductions: matmul (a sum over the inner axis, with NumPy's 1-D and
batch rules), sum/mean/max/min over any axes, argmax, softmax and log_softmax, checked
through the builder against NumPy (see tests/ir/op_cases.py)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorgraph as tg
from tensorgraph.ir.dtypes import as_dtype
from tensorgraph.ir.functions import matmul_transposed, matmul_transposed_a
from tests.ir.op_cases import (
    BF16,
    F16,
    F64,
    Arrays,
    Case,
    case_adder,
    check_case,
    method,
    softmax_f64,
    wide,
)

CASES: list[Case] = []
case = case_adder(CASES)
_random = Arrays(seed=2)
rand, ints, flags = _random.rand, _random.ints, _random.flags

# ---------------------------------------------------------------- matmul

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

# a @ swapaxes(b, -1, -2), against NumPy's matmul of the transposed array
TRANSPOSED_MATMULS = [
    ((3, 4), (5, 4)),
    ((2, 3, 4), (5, 4)),
    ((4, 5), (2, 3, 5)),
    ((2, 1, 3, 4), (5, 2, 4)),
    ((1, 4), (6, 4)),
    ((0, 4), (2, 4)),
    ((3, 0), (2, 0)),
]
for _a_shape, _b_shape in TRANSPOSED_MATMULS:
    _pair = (rand(*_a_shape), rand(*_b_shape))
    case(
        "matmul_transposed",
        f"{_a_shape}@{_b_shape}.T",
        _pair,
        matmul_transposed,
        tg.float32,
        wide(lambda a, b: np.matmul(a, np.swapaxes(b, -1, -2))),
    )
_pair = (ints(2, 3, 4, dtype=np.int32), ints(5, 4, dtype=np.int32))
case(
    "matmul_transposed",
    "int32",
    _pair,
    matmul_transposed,
    tg.int32,
    wide(lambda a, b: np.matmul(a, np.swapaxes(b, -1, -2))),
)
# swapaxes(a, -1, -2) @ b: the same products, each operand with its last two axes swapped
for _a_shape, _b_shape in TRANSPOSED_MATMULS:
    _a_shape, _b_shape = ((*s[:-2], s[-1], s[-2]) for s in (_a_shape, _b_shape))
    _pair = (rand(*_a_shape), rand(*_b_shape))
    case(
        "matmul_transposed_a",
        f"{_a_shape}.T@{_b_shape}",
        _pair,
        matmul_transposed_a,
        tg.float32,
        wide(lambda a, b: np.matmul(np.swapaxes(a, -1, -2), b)),
    )
_pair = (ints(4, 3, dtype=np.int32), ints(2, 4, 5, dtype=np.int32))
case(
    "matmul_transposed_a",
    "int32",
    _pair,
    matmul_transposed_a,
    tg.int32,
    wide(lambda a, b: np.matmul(np.swapaxes(a, -1, -2), b)),
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
        lambda x, a=_axis: softmax_f64(x, a),
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


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_inference_and_reference_numerics(c: Case) -> None:
    check_case(c)
