"""Element types: name, item size in bytes, kind, and the promotion lattice.

Promotion (`promote_types`) is symmetric and associative on the supported set:
bool < integers < floats; within a kind the wider type wins; mixing signed and
unsigned integers of one width widens to the next signed width (uint8+int8 ->
int16); float16 with bfloat16 gives float32 (neither holds the other).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
from attrs import frozen

from tensorgraph.errors import DTypeError


@frozen
class DType:
    """An element type. `kind` is 'bool', 'int', 'uint' or 'float'; `itemsize` is bytes."""

    name: str
    itemsize: int
    kind: str

    def __repr__(self) -> str:
        return f"tg.{self.name}"

    def __str__(self) -> str:
        return self.name

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_integer(self) -> bool:
        return self.kind in ("int", "uint")

    def to_numpy(self) -> np.dtype:
        """The NumPy dtype holding this type (bfloat16 from ml_dtypes)."""
        return _NUMPY[self.name]


bool_ = DType("bool", 1, "bool")
uint8 = DType("uint8", 1, "uint")
uint32 = DType("uint32", 4, "uint")  # packed quantized weights (ir.quantized)
int8 = DType("int8", 1, "int")
int16 = DType("int16", 2, "int")
int32 = DType("int32", 4, "int")
int64 = DType("int64", 8, "int")
float16 = DType("float16", 2, "float")
bfloat16 = DType("bfloat16", 2, "float")
float32 = DType("float32", 4, "float")

DTYPES: dict[str, DType] = {
    d.name: d for d in (bool_, uint8, uint32, int8, int16, int32, int64, float16, bfloat16, float32)
}

_NUMPY: dict[str, np.dtype] = {
    "bool": np.dtype(np.bool_),
    "uint8": np.dtype(np.uint8),
    "uint32": np.dtype(np.uint32),
    "int8": np.dtype(np.int8),
    "int16": np.dtype(np.int16),
    "int32": np.dtype(np.int32),
    "int64": np.dtype(np.int64),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float32": np.dtype(np.float32),
}
_FROM_NUMPY = {v: DTYPES[k] for k, v in _NUMPY.items()}

_RANK = {"bool": 0, "uint": 1, "int": 1, "float": 2}


def as_dtype(value: object) -> DType:
    """A DType from a DType, its name, or a NumPy dtype; DTypeError names an unknown one."""
    if isinstance(value, DType):
        return value
    if isinstance(value, str):
        if value in DTYPES:
            return DTYPES[value]
        raise DTypeError(f"unknown dtype {value!r}; known: {', '.join(DTYPES)}")
    try:
        return _FROM_NUMPY[np.dtype(value)]
    except (KeyError, TypeError) as err:
        raise DTypeError(f"unsupported dtype {value!r}; known: {', '.join(DTYPES)}") from err


def promote_types(a: DType, b: DType) -> DType:
    """The smallest supported type that holds both `a` and `b` (see module docstring)."""
    if a == b:
        return a
    if _RANK[a.kind] != _RANK[b.kind]:
        return a if _RANK[a.kind] > _RANK[b.kind] else b
    if a.is_float:
        if a.itemsize == b.itemsize:  # float16 vs bfloat16
            return float32
        return a if a.itemsize > b.itemsize else b
    if a.kind == b.kind:
        return a if a.itemsize > b.itemsize else b
    signed, unsigned = (a, b) if a.kind == "int" else (b, a)
    if signed.itemsize > unsigned.itemsize:
        return signed
    return {1: int16, 2: int32}.get(unsigned.itemsize, int64)


def scalar_dtype(value: object, other: DType) -> DType:
    """The dtype a Python scalar takes next to a tensor of dtype `other` (weak typing).

    A scalar adopts the tensor's dtype when its kind fits (an int next to any number, a
    float next to a float); a float next to an integer or bool tensor is float32; an int
    next to bool is int32; a bool adopts the tensor's dtype. An int outside the range of
    the integer dtype it would take is a DTypeError (as in NumPy 2 and JAX), never a
    silently wrapped constant."""
    if isinstance(value, bool):
        return other
    if isinstance(value, int):
        dtype = other if other.kind != "bool" else int32
        if dtype.is_integer:
            limits = np.iinfo(dtype.to_numpy())
            if not limits.min <= value <= limits.max:
                raise DTypeError(
                    f"Python int {value} does not fit {dtype} [{limits.min}, {limits.max}]"
                )
        return dtype
    if isinstance(value, float):
        return other if other.is_float else float32
    raise DTypeError(f"unsupported scalar {value!r} of type {type(value).__name__}")
