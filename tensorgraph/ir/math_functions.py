"""Elementwise math that imported models need beyond the core set of `ir.functions`:
rounding (floor, ceil, round, trunc, sign), float functions (erf, log1p, expm1, tan, atan,
atan2), the IEEE predicates (isnan, isinf), the integer-division family (remainder,
fmod, floor_divide) and bitwise logic.

Names and semantics are PyTorch's, which every one of these follows elementwise with
broadcasting and dtype promotion: `round` rounds half to even, `remainder` takes the
divisor's sign (Python's `%`), `fmod` the dividend's (C's), `floor_divide` rounds the
quotient down; an integer divisor of zero is a RunError at run time on every backend. The
MLX spellings (`arctan`, `arctan2`, `bitwise_invert`) are aliases. Each function appends
one node; Python scalars become constants as in `ir.functions`.
"""

from __future__ import annotations

from tensorgraph.ir.tensor import Tensor, TensorLike, emit, to_operands


def _unary(op: str, x: Tensor) -> Tensor:
    return emit(op, [x])


def _binary(op: str, a: TensorLike, b: TensorLike) -> Tensor:
    return emit(op, to_operands(a, b))


def floor(x: Tensor) -> Tensor:
    """Round down; integers are returned unchanged (same dtype)."""
    return _unary("floor", x)


def ceil(x: Tensor) -> Tensor:
    """Round up; integers are returned unchanged."""
    return _unary("ceil", x)


def round(x: Tensor) -> Tensor:
    """Round to the nearest integer, halves to even (torch.round, np.round)."""
    return _unary("round", x)


def trunc(x: Tensor) -> Tensor:
    """Round toward zero; integers are returned unchanged."""
    return _unary("trunc", x)


def sign(x: Tensor) -> Tensor:
    """-1, 0 or 1 in x's dtype; sign(nan) is 0, as in torch and MLX."""
    return _unary("sign", x)


def erf(x: Tensor) -> Tensor:
    return _unary("erf", x)


def log1p(x: Tensor) -> Tensor:
    return _unary("log1p", x)


def expm1(x: Tensor) -> Tensor:
    return _unary("expm1", x)


def tan(x: Tensor) -> Tensor:
    return _unary("tan", x)


def atan(x: Tensor) -> Tensor:
    return _unary("atan", x)


def isnan(x: Tensor) -> Tensor:
    """A bool tensor: True where x is nan (never for integers or bools)."""
    return _unary("isnan", x)


def isinf(x: Tensor) -> Tensor:
    """A bool tensor: True where x is +inf or -inf (never for integers or bools)."""
    return _unary("isinf", x)


def bitwise_not(x: Tensor) -> Tensor:
    """Bitwise complement of an integer tensor; logical not of a bool tensor."""
    return _unary("bitwise_not", x)


def remainder(a: TensorLike, b: TensorLike) -> Tensor:
    """a - floor(a / b) * b: the result takes the divisor's sign (Python's `%`)."""
    return _binary("remainder", a, b)


def fmod(a: TensorLike, b: TensorLike) -> Tensor:
    """C's fmod: a - trunc(a / b) * b, the result takes the dividend's sign."""
    return _binary("fmod", a, b)


def floor_divide(a: TensorLike, b: TensorLike) -> Tensor:
    """floor(a / b) in the promoted dtype (Python's `//`, float results too)."""
    return _binary("floor_divide", a, b)


def bitwise_and(a: TensorLike, b: TensorLike) -> Tensor:
    return _binary("bitwise_and", a, b)


def bitwise_or(a: TensorLike, b: TensorLike) -> Tensor:
    return _binary("bitwise_or", a, b)


def bitwise_xor(a: TensorLike, b: TensorLike) -> Tensor:
    return _binary("bitwise_xor", a, b)


def logical_xor(a: TensorLike, b: TensorLike) -> Tensor:
    """Exclusive or of two bool tensors."""
    return _binary("logical_xor", a, b)


def atan2(a: TensorLike, b: TensorLike) -> Tensor:
    """The angle of the point (b, a) in (-pi, pi]; the promoted dtype must be float."""
    return _binary("atan2", a, b)


arctan, arctan2, bitwise_invert = atan, atan2, bitwise_not  # mlx.core's names
