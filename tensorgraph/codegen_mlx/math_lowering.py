"""MLX lowerings of the elementwise math in `ir.math_functions`, registered in
`codegen_mlx.lowering.LOWERINGS` (same contract: the node's shape, dtype and the NumPy
kernels' values).

Where MLX parts from the oracle the lowering does not call it as is:

- Integer division by zero, and the most negative integer divided by -1, kill the
  process with SIGFPE inside MLX's integer kernels. Those divisors are replaced by 1
  before MLX sees them; a divisor of -1 gets its exact result (-a for floor_divide,
  wrapping as NumPy does; 0 for remainder and fmod) and a zero divisor is reported as a
  RunError by guards.py, as the oracle raises it.
- MLX has no fmod, and its float floor_divide is floor(a / b), which is off by one when
  a / b rounds up to an integer (1.0 // 0.1 is 9 in NumPy and torch, 10 in MLX). Both are
  computed from MLX's remainder, which for floats is the exact fmod adjusted to the
  divisor's sign, by NumPy's own divmod algorithm, in float32 for half precision.
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx

from tensorgraph.codegen_mlx.lowering import Lowering, _as, _binary, _compare, _dtype, _unary
from tensorgraph.ir.node import Node


def _keep_integers(fn: Lowering) -> Lowering:
    """Rounding: floats through `fn`, integers unchanged (already whole)."""
    return lambda node, args: fn(node, args) if node.dtype.is_float else args[0]


def _computation_dtype(node: Node) -> mx.Dtype:
    """float32 for half-precision nodes (the oracle's precision), else the node's."""
    if node.dtype.is_float and node.dtype.itemsize < 4:
        return mx.float32
    return _dtype(node)


def _operands(node: Node, args: Sequence[mx.array]) -> tuple[mx.array, mx.array]:
    dtype = _computation_dtype(node)
    return tuple(x if x.dtype == dtype else x.astype(dtype) for x in args)  # type: ignore[return-value]


def _float_fmod(a: mx.array, b: mx.array) -> mx.array:
    """C's fmod, exactly: MLX's remainder of non-negative operands is their fmod."""
    r = mx.remainder(mx.abs(a), mx.abs(b))
    return mx.where(a < 0, -r, r)


def _float_floor_divide(a: mx.array, b: mx.array) -> mx.array:
    """NumPy's npy_divmod quotient (Python's float `//`), step by step."""
    mod = _float_fmod(a, b)
    div = (a - mod) / b
    div = mx.where((mod != 0) & ((b < 0) != (mod < 0)), div - 1, div)
    whole = mx.floor(div)
    whole = mx.where(div - whole > 0.5, whole + 1, whole)
    whole = mx.where(div == 0, (a / b) * 0, whole)  # a signed zero, with a / b's sign
    return mx.where(b == 0, a / b, whole)


def _safe_divisor(b: mx.array) -> tuple[mx.array, mx.array]:
    """(divisor with 0 and -1 replaced by 1, mask of the -1 entries) for integers."""
    one = mx.array(1, dtype=b.dtype)
    if b.dtype in (mx.uint8, mx.uint16, mx.uint32, mx.uint64):
        return mx.where(b == 0, one, b), mx.zeros(b.shape, dtype=mx.bool_)
    minus_one = b == mx.array(-1, dtype=b.dtype)
    return mx.where(minus_one | (b == 0), one, b), minus_one


def _remainder(node: Node, args: Sequence[mx.array]) -> mx.array:
    a, b = _operands(node, args)
    if node.dtype.is_float:
        return _as(node, mx.remainder(a, b))
    safe, minus_one = _safe_divisor(b)
    return mx.where(minus_one, mx.zeros_like(a), mx.remainder(a, safe))


def _fmod(node: Node, args: Sequence[mx.array]) -> mx.array:
    a, b = _operands(node, args)
    if node.dtype.is_float:
        return _as(node, _float_fmod(a, b))
    safe, minus_one = _safe_divisor(b)
    r = mx.remainder(a, safe)  # the divisor's sign; fmod wants the dividend's
    r = mx.where((r != 0) & ((r < 0) != (a < 0)), r - safe, r)
    return mx.where(minus_one, mx.zeros_like(a), r)


def _floor_divide(node: Node, args: Sequence[mx.array]) -> mx.array:
    a, b = _operands(node, args)
    if node.dtype.is_float:
        return _as(node, _float_floor_divide(a, b))
    safe, minus_one = _safe_divisor(b)
    return mx.where(minus_one, mx.negative(a), mx.floor_divide(a, safe))


TABLE: dict[str, Lowering] = {
    "floor": _keep_integers(_unary(mx.floor)),
    "ceil": _keep_integers(_unary(mx.ceil)),
    "round": _keep_integers(_unary(mx.round)),  # half to even, like NumPy
    "trunc": _keep_integers(_unary(mx.trunc)),
    "sign": _unary(mx.sign),  # sign(nan) is 0, as in torch and the oracle
    "erf": _unary(mx.erf),
    "log1p": _unary(mx.log1p),
    "expm1": _unary(mx.expm1),
    "tan": _unary(mx.tan),
    "atan": _unary(mx.arctan),
    "isnan": _unary(mx.isnan),
    "isinf": _unary(mx.isinf),
    "bitwise_not": _unary(mx.bitwise_invert),
    "remainder": _remainder,
    "fmod": _fmod,
    "floor_divide": _floor_divide,
    "bitwise_and": _binary(mx.bitwise_and),
    "bitwise_or": _binary(mx.bitwise_or),
    "bitwise_xor": _binary(mx.bitwise_xor),
    "logical_xor": _compare(mx.logical_xor),
    "atan2": _binary(mx.arctan2),
}
