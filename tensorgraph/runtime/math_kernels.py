"""NumPy kernels of the elementwise math in `ir.math_functions`, registered in
`runtime.kernels.KERNELS` (same contract: fresh result of the node's shape and dtype,
half precision computed in float32 and rounded once).

Semantics are torch's, which NumPy shares for all but two: `sign(nan)` is 0 (NumPy says
nan) and an integer division (remainder, fmod, floor_divide) by zero is a RunError naming
the node (torch raises ZeroDivisionError; NumPy returns 0 with a warning). Float
division by zero follows IEEE. The most negative integer divided by -1 wraps, as in
NumPy and torch. `erf` is evaluated exactly in float64, as the GELU kernel does.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tensorgraph.errors import RunError
from tensorgraph.ir.node import Node, describe
from tensorgraph.runtime.kernels import Kernel, _arith, _compare, _erf, _operand, _unary, _wide


def _keep_integers(fn: np.ufunc) -> Kernel:
    """Rounding of floats; integers are already whole and pass unchanged (a float64
    detour would lose int64 precision)."""

    def kernel(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
        x = _wide(args[0])
        return fn(x) if x.dtype.kind == "f" else x

    return kernel


def _sign(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    x = _wide(args[0])
    if x.dtype.kind != "f":
        return np.sign(x)
    return np.where(np.isnan(x), np.zeros((), x.dtype), np.sign(x))


def _erf_kernel(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    x = args[0].astype(np.float64)
    return np.asarray(_erf(x), np.float64).reshape(x.shape)


def _predicate(fn: np.ufunc) -> Kernel:
    """isnan/isinf: False everywhere for integers and bools (nothing to test)."""

    def kernel(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
        x = _wide(args[0])
        return fn(x) if x.dtype.kind == "f" else np.zeros(x.shape, np.bool_)

    return kernel


def _division(fn: np.ufunc) -> Kernel:
    """remainder/fmod/floor_divide in the node's dtype; an integer zero divisor (after the
    conversion to that dtype) is a RunError when the result has any element."""

    def kernel(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
        a, b = (_operand(node, x) for x in args)
        if b.dtype.kind in "iu" and np.prod(node.shape) and not b.all():
            raise RunError(f"{describe(node)}: integer division by zero")
        return fn(a, b)

    return kernel


KERNELS: dict[str, Kernel] = {
    "floor": _keep_integers(np.floor),
    "ceil": _keep_integers(np.ceil),
    "round": _keep_integers(np.round),  # half to even
    "trunc": _keep_integers(np.trunc),
    "sign": _sign,
    "erf": _erf_kernel,
    "log1p": _unary(np.log1p),
    "expm1": _unary(np.expm1),
    "tan": _unary(np.tan),
    "atan": _unary(np.arctan),
    "isnan": _predicate(np.isnan),
    "isinf": _predicate(np.isinf),
    "bitwise_not": _unary(np.invert),
    "remainder": _division(np.remainder),
    "fmod": _division(np.fmod),
    "floor_divide": _division(np.floor_divide),
    "bitwise_and": _arith(np.bitwise_and),
    "bitwise_or": _arith(np.bitwise_or),
    "bitwise_xor": _arith(np.bitwise_xor),
    "logical_xor": _compare(np.logical_xor),
    "atan2": _arith(np.arctan2),
}
