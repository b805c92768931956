"""Shape, view and data-movement ops: transpose, reshape (flatten, expand_dims, squeeze),
cast, narrow, broadcast_to, concat (stack), take and slice_update, checked through the
builder against NumPy (see tests/ir/op_cases.py)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorgraph as tg
from tensorgraph.ir.dtypes import as_dtype
from tests.ir.op_cases import BF16, F16, Arrays, Case, case_adder, check_case

CASES: list[Case] = []
case = case_adder(CASES)
_random = Arrays(seed=3)
rand, ints, flags = _random.rand, _random.ints, _random.flags

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


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_inference_and_reference_numerics(c: Case) -> None:
    check_case(c)
