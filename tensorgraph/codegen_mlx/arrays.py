"""Moving arrays between NumPy and MLX without changing their shape, dtype or values.

Invariant: `to_numpy(to_mx(a))` equals `a` in shape (0-d included), dtype and bits, for
every dtype of the IR (bfloat16 travels through float32, which holds it exactly).
`MX_DTYPES` maps each IR dtype name to its mlx.core dtype; `native_dtype` reads it back
from an mx.array, so feeds given as mx.array are checked without leaving the device.
"""

from __future__ import annotations

import ml_dtypes
import mlx.core as mx
import numpy as np

MX_DTYPES: dict[str, mx.Dtype] = {
    "bool": mx.bool_,
    "uint8": mx.uint8,
    "uint32": mx.uint32,
    "int8": mx.int8,
    "int16": mx.int16,
    "int32": mx.int32,
    "int64": mx.int64,
    "float16": mx.float16,
    "bfloat16": mx.bfloat16,
    "float32": mx.float32,
}

_IR_NAMES: dict[mx.Dtype, str] = {dtype: name for name, dtype in MX_DTYPES.items()}


def native_dtype(value: object) -> str | None:
    """The IR dtype name of an mx.array (MLX's own name, e.g. "float64", for a dtype the
    IR lacks, so a mismatch reads plainly), or None for anything that is not an mx.array."""
    if not isinstance(value, mx.array):
        return None
    return _IR_NAMES.get(value.dtype, str(value.dtype).removeprefix("mlx.core."))


def to_mx(array: np.ndarray) -> mx.array:
    """A NumPy array as an MLX array of the same shape, dtype and values.

    Not `np.ascontiguousarray`: it returns at least 1-d, so a 0-d feed or constant came
    back with shape (1,) (and a 0-d `take` index then made a gather of the wrong rank).
    mx.array copies strided arrays correctly, so any layout is accepted as is."""
    array = np.asarray(array)
    if array.dtype == ml_dtypes.bfloat16:
        return mx.array(array.astype(np.float32)).astype(mx.bfloat16)
    return mx.array(array)


def to_numpy(value: mx.array) -> np.ndarray:
    """An MLX array as a fresh NumPy array of the same shape, dtype and values."""
    if value.dtype == mx.bfloat16:
        return np.array(value.astype(mx.float32)).astype(ml_dtypes.bfloat16)
    return np.array(value, copy=True)
