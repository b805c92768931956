"""ATen handlers for elementwise math, comparisons, logic, activations and reductions.

Dtypes follow torch, not tensorgraph's weak typing: each handler computes in the dtype
torch gives the node (`ctx.out_dtype`, or `ctx.promoted` for comparisons), casting
tensor operands to it first, so an int tensor divided by an int is float32 as in torch
and `sum(dtype=...)` reduces in the requested dtype. Python scalar operands then take
that dtype. Logic on non-bool tensors means "nonzero", as in torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import sympy

from tensorgraph.importers.aten import (
    ATEN,
    Context,
    Handler,
    axes_of,
    cast,
    handles,
    require,
    to_dtype,
)
from tensorgraph.importers.sym_sizes import as_operand
from tensorgraph.ir import api as tg
from tensorgraph.ir.tensor import Tensor

# ---------------------------------------------------------------- unary


def _unary(fn: Callable[[Tensor], Tensor]) -> Handler:
    def handler(ctx: Context, x: Tensor) -> Tensor:
        return fn(cast(x, ctx.out_dtype))

    return handler


UNARY: dict[str, Callable[[Tensor], Tensor]] = {
    "neg": tg.negative,
    "abs": tg.abs,
    "exp": tg.exp,
    "log": tg.log,
    "sqrt": tg.sqrt,
    "rsqrt": tg.rsqrt,
    "reciprocal": tg.reciprocal,
    "sin": tg.sin,
    "cos": tg.cos,
    "tanh": tg.tanh,
    "sigmoid": tg.sigmoid,
    "relu": tg.relu,
    "floor": lambda x: tg.floor(x),
    "ceil": lambda x: tg.ceil(x),
    "round": lambda x: tg.round(x),
    "trunc": lambda x: tg.trunc(x),
    "sign": lambda x: tg.sign(x),
    "erf": lambda x: tg.erf(x),
    "log1p": lambda x: tg.log1p(x),
    "expm1": lambda x: tg.expm1(x),
    "tan": lambda x: tg.tan(x),
    "atan": lambda x: tg.atan(x),
    # log2/log10/exp2 by a constant factor: one float32 rounding more than torch's.
    "log2": lambda x: tg.log(x) * (1 / math.log(2)),
    "log10": lambda x: tg.log(x) * (1 / math.log(10)),
    "exp2": lambda x: tg.exp(x * math.log(2)),
}
for _name, _fn in UNARY.items():
    ATEN[_name] = _unary(_fn)


@handles("isnan", "isinf", "isfinite")
def _predicate(ctx: Context, x: Tensor) -> Tensor:
    if not x.dtype.is_float:
        return tg.full(ctx.graph, x.shape, ctx.op == "isfinite", dtype=tg.bool_)
    if ctx.op == "isfinite":
        return tg.logical_not(tg.logical_or(tg.isnan(x), tg.isinf(x)))
    return tg.isnan(x) if ctx.op == "isnan" else tg.isinf(x)


@handles("gelu")
def _gelu(ctx: Context, x: Tensor, approximate: str = "none") -> Tensor:
    require(approximate in ("none", "tanh"), f"gelu approximate={approximate!r}")
    return tg.gelu(x, approximate)


@handles("hardtanh", "clamp")
def _clamp(ctx: Context, x: Tensor, low: object = None, high: object = None) -> Tensor:
    # clamp.Tensor takes tensor bounds; torch computes in the promoted dtype.
    low, high = (cast(v, ctx.out_dtype) for v in (low, high))
    if ctx.op == "hardtanh":
        low = -1.0 if low is None else low
        high = 1.0 if high is None else high
    return tg.clip(cast(x, ctx.out_dtype), low, high)


@handles("leaky_relu")
def _leaky_relu(ctx: Context, x: Tensor, slope: float = 0.01) -> Tensor:
    return tg.where(x > 0, x, x * slope)


@handles("elu")
def _elu(
    ctx: Context, x: Tensor, alpha: float = 1.0, scale: float = 1.0, input_scale: float = 1.0
) -> Tensor:
    negative = tg.expm1(x * input_scale) * alpha
    return tg.where(x > 0, x, negative) * scale if scale != 1 else tg.where(x > 0, x, negative)


# ---------------------------------------------------------------- binary arithmetic


def _arith(
    fn: Callable[[object, object], Tensor], on_bool: Callable[..., Tensor] | None = None
) -> Handler:
    """Arithmetic in torch's result dtype; on bools (torch allows add/mul/max/min there,
    e.g. isfinite's decomposition) the logical op `on_bool`."""

    def handler(ctx: Context, a: object, b: object, alpha: float = 1) -> Tensor:
        dtype = ctx.out_dtype
        if dtype == tg.bool_:
            require(on_bool is not None, f"aten.{ctx.op} on bool tensors")
            return on_bool(_truth(a), _truth(b))
        a, b = _size_operand(a, b), _size_operand(b, a)
        a, b = cast(a, dtype), cast(b, dtype)
        return fn(a, b * alpha if alpha != 1 else b)

    return handler


def _size_operand(x: object, other: object) -> object:
    """`x`, or when it is a symbolic size (a SymInt of a dynamic export: an expression
    of Dims) beside the tensor `other`, its value at run time as an int64 scalar tensor
    (a cache's `cumulative_length.add_(kv_length)` at the prompt's length)."""
    if isinstance(x, sympy.Expr) and isinstance(other, Tensor):
        return as_operand(other, x)
    return x


ATEN["add"] = _arith(tg.add, tg.logical_or)
ATEN["sub"] = _arith(tg.subtract)
ATEN["mul"] = _arith(tg.multiply, tg.logical_and)
ATEN["maximum"] = ATEN["fmax"] = _arith(tg.maximum, tg.logical_or)
ATEN["minimum"] = ATEN["fmin"] = _arith(tg.minimum, tg.logical_and)
ATEN["remainder"] = _arith(lambda a, b: tg.remainder(a, b))
ATEN["fmod"] = _arith(lambda a, b: tg.fmod(a, b))
ATEN["atan2"] = _arith(lambda a, b: tg.atan2(a, b))


@handles("div")
def _div(ctx: Context, a: object, b: object, rounding_mode: str | None = None) -> Tensor:
    require(rounding_mode in (None, "trunc", "floor"), f"div rounding_mode={rounding_mode!r}")
    a, b = cast(a, ctx.out_dtype), cast(b, ctx.out_dtype)
    if rounding_mode is None:
        return tg.divide(a, b)
    if rounding_mode == "floor":
        return tg.floor_divide(a, b)
    if ctx.out_dtype.is_float:
        return tg.trunc(tg.divide(a, b))
    # Integer truncation: a - fmod(a, b) is an exact multiple of b, so flooring is exact.
    return tg.floor_divide(tg.subtract(a, tg.fmod(a, b)), b)


@handles("pow")
def _pow(ctx: Context, a: object, b: object) -> Tensor:
    a, b = cast(a, ctx.out_dtype), cast(b, ctx.out_dtype)
    if isinstance(a, Tensor) and not isinstance(b, Tensor) and b == 2:
        return tg.square(a)
    if isinstance(a, Tensor) and not isinstance(b, Tensor) and b == 0.5:
        return tg.sqrt(a)
    return tg.power(a, b)


# ---------------------------------------------------------------- comparisons and logic

COMPARE = {
    "eq": tg.equal,
    "ne": tg.not_equal,
    "lt": tg.less,
    "le": tg.less_equal,
    "gt": tg.greater,
    "ge": tg.greater_equal,
}


def _compare(fn: Callable[[object, object], Tensor]) -> Handler:
    def handler(ctx: Context, a: object, b: object) -> Tensor:
        dtype = ctx.promoted(0, 1)
        return fn(cast(a, dtype), cast(b, dtype))

    return handler


for _name, _fn in COMPARE.items():
    ATEN[_name] = _compare(_fn)


def _truth(x: object) -> object:
    """A bool tensor (nonzero) for any tensor; Python scalars as Python bools."""
    if isinstance(x, Tensor):
        return x if x.dtype == tg.bool_ else tg.not_equal(x, 0)
    return bool(x)


LOGICAL = {"logical_and": tg.logical_and, "logical_or": tg.logical_or}


@handles("logical_and", "logical_or", "logical_xor")
def _logical(ctx: Context, a: object, b: object) -> Tensor:
    a, b = _truth(a), _truth(b)
    if ctx.op == "logical_xor":
        return tg.not_equal(a, b) if isinstance(a, Tensor) else tg.not_equal(b, a)
    return LOGICAL[ctx.op](a, b)


@handles("logical_not")
def _logical_not(ctx: Context, x: Tensor) -> Tensor:
    return tg.logical_not(_truth(x))


@handles("bitwise_and", "bitwise_or", "bitwise_xor", "__and__", "__or__", "__xor__")
def _bitwise(ctx: Context, a: object, b: object) -> Tensor:
    kind = ctx.op.strip("_").replace("bitwise_", "")
    dtype = ctx.out_dtype
    require(dtype == tg.bool_ or dtype.is_integer, f"{ctx.op} on {dtype}")
    a, b = cast(a, dtype), cast(b, dtype)
    if dtype == tg.bool_:  # on bools (masks) the bitwise ops are the logical ones
        return {"and": tg.logical_and, "or": tg.logical_or, "xor": tg.not_equal}[kind](a, b)
    return {"and": tg.bitwise_and, "or": tg.bitwise_or, "xor": tg.bitwise_xor}[kind](a, b)


@handles("__lshift__", "__rshift__", "bitwise_left_shift", "bitwise_right_shift")
def _shift(ctx: Context, x: Tensor, bits: object) -> Tensor:
    """Shifts by a constant count as arithmetic: x << k is x * 2**k (wrapping as the
    shift does in two's complement) and x >> k is floor(x / 2**k) (the arithmetic
    shift of signed integers, the logical one of unsigned). Counts from 0 to the
    width - 1 only: torch leaves wider shifts to the platform."""
    dtype = ctx.out_dtype
    require(dtype.is_integer, f"{ctx.op} on {dtype}")
    require(isinstance(x, Tensor), f"{ctx.op} of a scalar by a tensor")
    require(isinstance(bits, int), f"{ctx.op} by a tensor of counts")
    left = ctx.op in ("__lshift__", "bitwise_left_shift")
    # 2**k must be positive in the dtype for the division (int8 >> 7 would divide by -128)
    width = 8 * dtype.itemsize - (0 if left or dtype.name.startswith("u") else 1)
    require(0 <= bits < width, f"{ctx.op} by {bits} bits of {dtype}")
    scale = ctx.graph.constant(np.array(1 << bits).astype(dtype.to_numpy()))
    x = cast(x, dtype)
    return x * scale if left else tg.floor_divide(x, scale)


@handles("bitwise_not")
def _bitwise_not(ctx: Context, x: Tensor) -> Tensor:
    return tg.logical_not(x) if x.dtype == tg.bool_ else tg.bitwise_not(x)


@handles("where")
def _where(ctx: Context, cond: Tensor, a: object = None, b: object = None) -> Tensor:
    require(a is not None, "where with only a condition (nonzero)")
    return tg.where(_truth(cond), cast(a, ctx.out_dtype), cast(b, ctx.out_dtype))


# ---------------------------------------------------------------- reductions


def _reduction_input(ctx: Context, x: Tensor, dtype: object) -> Tensor:
    """`x` in the dtype the reduction computes in: the `dtype` keyword, else torch's."""
    return cast(x, to_dtype(dtype, ctx.out_dtype))


@handles("sum", "mean", "prod")
def _reduce(
    ctx: Context,
    x: Tensor,
    dims: object = None,
    keepdim: bool = False,
    dtype: object = None,
) -> Tensor:
    if ctx.overload == "default" and dims is not None:  # sum(x, dtype) positionally
        dims, dtype = None, dims
    x = _reduction_input(ctx, x, dtype)
    axes = axes_of(x, dims)
    if ctx.op == "prod":
        return tg.prod(x, axes, keepdim)
    return (tg.mean if ctx.op == "mean" else tg.sum)(x, axes, keepdim)


@handles("amax", "amin")
def _amax(ctx: Context, x: Tensor, dims: object = (), keepdim: bool = False) -> Tensor:
    return (tg.max if ctx.op == "amax" else tg.min)(x, axes_of(x, dims), keepdim)


@handles("max", "min")
def _max(ctx: Context, x: Tensor, dim: object = None, keepdim: bool = False) -> object:
    if isinstance(dim, Tensor):  # max.other: the elementwise maximum
        return _arith(tg.maximum if ctx.op == "max" else tg.minimum)(ctx, x, dim)
    if dim is None:
        return (tg.max if ctx.op == "max" else tg.min)(x)
    values = (tg.max if ctx.op == "max" else tg.min)(x, dim, keepdim)
    indices = (tg.argmax if ctx.op == "max" else tg.argmin)(x, dim, keepdim)
    return (values, indices.astype(tg.int64))


@handles("argmax", "argmin")
def _argmax(ctx: Context, x: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    fn = tg.argmax if ctx.op == "argmax" else tg.argmin
    result = fn(x, dim, keepdim)
    if dim is None and keepdim:
        result = result.reshape(ctx.out_shape)
    return result.astype(tg.int64)


@handles("any", "all")
def _any(ctx: Context, x: Tensor, dims: object = None, keepdim: bool = False) -> Tensor:
    fn = tg.any if ctx.op == "any" else tg.all
    return fn(_truth(x), axes_of(x, dims), keepdim)


@handles("cumsum", "cumprod")
def _cumsum(ctx: Context, x: Tensor, dim: int, dtype: object = None) -> Tensor:
    x = _reduction_input(ctx, x, dtype)
    fn = tg.cumsum if ctx.op == "cumsum" else tg.cumprod
    return fn(x, dim % max(x.ndim, 1), dtype=ctx.out_dtype)


@handles("var", "std")
def _var(
    ctx: Context,
    x: Tensor,
    dims: object = None,
    unbiased: object = None,
    keepdim: bool = False,
    *,
    correction: float | None = None,
) -> Tensor:
    # var.correction(x, dim, *, correction, keepdim); var.dim(x, dim, unbiased, keepdim).
    if correction is None:
        correction = 1 if unbiased is None or unbiased else 0
    axes = axes_of(x, dims)
    count = math.prod(x.shape[a] for a in axes) if axes is not None else x.size
    centred = x - tg.mean(x, axes, True)
    var = tg.sum(centred * centred, axes, keepdim) / max(count - correction, 0)
    return tg.sqrt(var) if ctx.op == "std" else var


@handles("linalg_vector_norm")
def _vector_norm(
    ctx: Context,
    x: Tensor,
    ord: float = 2,
    dims: object = None,
    keepdim: bool = False,
    dtype: object = None,
) -> Tensor:
    require(ord in (1, 2, math.inf), f"vector norm ord={ord}")
    x = _reduction_input(ctx, x, dtype)
    axes = axes_of(x, dims)
    if ord == 1:
        return tg.sum(tg.abs(x), axes, keepdim)
    if ord == 2:
        return tg.sqrt(tg.sum(x * x, axes, keepdim))
    return tg.max(tg.abs(x), axes, keepdim)


@handles("_softmax", "_log_softmax")
def _softmax(ctx: Context, x: Tensor, dim: int, half_to_float: object = False) -> Tensor:
    # softmax.int's third argument is a dtype, _softmax's a half-to-float flag: both are
    # in torch's result dtype, which the input is cast to.
    x = cast(x, ctx.out_dtype)
    return (tg.softmax if "log" not in ctx.op else tg.log_softmax)(x, dim)
