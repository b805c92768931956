"""NumPy kernels: one function per non-boundary op, shared by both NumPy executors.

`evaluate(node, args)` returns a fresh, writeable, C-contiguous array of exactly
`node.shape` and `node.dtype` that aliases none of `args`. float16 and bfloat16 are
computed in float32 and rounded once at the end, the way MLX's CPU kernels accumulate;
operands of arithmetic are first converted to the node's (promoted) dtype. Kernels
never write into their arguments, so an executor may place the result over an
argument's bytes after the call (in place). IEEE specials (inf, nan) propagate silently,
as on every backend; an integer power with a negative exponent, an out-of-range
`take` or `gather` index and an integer division by zero are RunErrors naming the node.
Two families live in their own modules and join `KERNELS` at the end of this one:
math_kernels.py (rounding, float math, integer division, bitwise ops) and
window_kernels.py (pools, adaptive pools, pad, resizes).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import ml_dtypes
import numpy as np

from tensorgraph.errors import RunError
from tensorgraph.ir.dtypes import as_dtype, promote_types
from tensorgraph.ir.node import Node, describe
from tensorgraph.ir.window_inference import conv_pads

Kernel = Callable[[Node, Sequence[np.ndarray]], np.ndarray]

_HALF = frozenset({np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)})
# Exact erf, elementwise in float64: NumPy has no erf, and the oracle's GELU must not
# carry an approximation's error into every comparison made against it.
_erf = np.frompyfunc(math.erf, 1, 1)


def _wide(x: np.ndarray) -> np.ndarray:
    """float16/bfloat16 as float32 (the computation precision); other dtypes unchanged."""
    return x.astype(np.float32) if x.dtype in _HALF else x


def _operand(node: Node, x: np.ndarray) -> np.ndarray:
    """`x` converted to the node's dtype (the promoted one), then widened."""
    return _wide(x.astype(node.dtype.to_numpy(), copy=False))


# ---------------------------------------------------------------- elementwise


def _unary(fn: Callable[[np.ndarray], np.ndarray]) -> Kernel:
    return lambda node, args: fn(_wide(args[0]))


def _arith(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Kernel:
    return lambda node, args: fn(_operand(node, args[0]), _operand(node, args[1]))


def _compare(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Kernel:
    """Comparisons and logical ops: both operands in their promoted dtype, bool result."""

    def kernel(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
        a, b = args
        common = promote_types(as_dtype(a.dtype), as_dtype(b.dtype)).to_numpy()
        return fn(_wide(a.astype(common, copy=False)), _wide(b.astype(common, copy=False)))

    return kernel


def _pow(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    base, exponent = (_operand(node, x) for x in args)
    if exponent.dtype.kind in "iu" and exponent.size and exponent.min() < 0:
        raise RunError(
            f"{describe(node)}: integer power with the negative exponent {exponent.min()}"
        )
    return np.power(base, exponent)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + e^-x) without overflow: e^-|x| is never larger than 1."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _gelu(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    x = _wide(args[0])
    if node.attr("approximate") == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    wide = x.astype(np.float64)
    return 0.5 * wide * (1 + np.asarray(_erf(wide / math.sqrt(2)), np.float64))


def _where(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    cond, a, b = args
    target = node.dtype.to_numpy()
    return np.where(cond, a.astype(target, copy=False), b.astype(target, copy=False))


def _matmul(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    return np.matmul(_operand(node, args[0]), _operand(node, args[1]))


def _matmul_transposed(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    """a @ swapaxes(b, -1, -2), through a contiguous copy of the transpose: the oracle
    then gives bit for bit what matmul of a transposed buffer gives (BLAS may round a
    strided operand's sums in another order), so the rewrite keeps every output exact."""
    b = np.ascontiguousarray(np.swapaxes(_operand(node, args[1]), -1, -2))
    return np.matmul(_operand(node, args[0]), b)


def _matmul_transposed_a(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    """swapaxes(a, -1, -2) @ b through a contiguous copy of the transpose, as above."""
    a = np.ascontiguousarray(np.swapaxes(_operand(node, args[0]), -1, -2))
    return np.matmul(a, _operand(node, args[1]))


# ---------------------------------------------------------------- reductions


def _reduce(fn: Callable[..., np.ndarray]) -> Kernel:
    """sum/max/min over the node's axes; bool is counted in the node's dtype (int32)."""

    def kernel(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
        x = args[0]
        if x.dtype == np.bool_ and node.dtype.to_numpy() != np.bool_:
            x = x.astype(node.dtype.to_numpy())
        return fn(_wide(x), axis=node.attr("axes"), keepdims=node.attr("keepdims"))

    return kernel


def _mean(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    """Integers and bools average in float64 (exact sums); a zero-size axis gives nan."""
    x = _wide(args[0])
    axes = node.attr("axes")
    accumulator = np.float64 if x.dtype.kind in "biu" else None
    total = np.sum(x, axis=axes, keepdims=node.attr("keepdims"), dtype=accumulator)
    return total / math.prod(x.shape[a] for a in axes)


def _arg_reduce(fn: Callable[..., np.ndarray]) -> Kernel:
    return lambda node, args: fn(
        _wide(args[0]), axis=node.attr("axis"), keepdims=node.attr("keepdims")
    )


def _truth(fn: Callable[..., np.ndarray]) -> Kernel:
    """any/all: non-zero is true (nan included)."""
    return lambda node, args: fn(args[0], axis=node.attr("axes"), keepdims=node.attr("keepdims"))


def _scan(fn: Callable[..., np.ndarray]) -> Kernel:
    """cumsum/cumprod: x converted to the node's dtype (widened), then accumulated."""
    return lambda node, args: fn(_operand(node, args[0]), axis=node.attr("axis"))


def _shifted(node: Node, x: np.ndarray) -> np.ndarray:
    """`x` minus its max along the node's axis (softmax's overflow guard)."""
    axis = node.attr("axis")
    return x - np.max(x, axis=axis, keepdims=True) if x.shape[axis] else x


def _softmax(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    e = np.exp(_shifted(node, _wide(args[0])))
    return e / np.sum(e, axis=node.attr("axis"), keepdims=True)


def _log_softmax(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    shifted = _shifted(node, _wide(args[0]))
    return shifted - np.log(np.sum(np.exp(shifted), axis=node.attr("axis"), keepdims=True))


# ---------------------------------------------------------------- layout and gathers


def _axis_slice(ndim: int, axis: int, start: int, stop: int) -> tuple[slice, ...]:
    index = [slice(None)] * ndim
    index[axis] = slice(start, stop)
    return tuple(index)


def _narrow(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    start = node.attr("start")
    return args[0][_axis_slice(args[0].ndim, node.attr("axis"), start, start + node.attr("length"))]


def _take(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    """NumPy's gather: negative indices count from the end; others out of range raise."""
    x, indices = args
    axis = node.attr("axis")
    size = x.shape[axis]
    wide = indices.astype(np.int64)
    bad = (wide < -size) | (wide >= size)
    if bad.any():
        raise RunError(
            f"{describe(node)}: index {wide[bad].flat[0]} is out of range for axis {axis} "
            f"of size {size}"
        )
    return np.take(x, wide, axis=axis)


def _gather(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    """torch.gather: indices in [0, size) (others raise), x cut to the indices' extents
    off the axis, then take_along_axis."""
    x, indices = args
    axis = node.attr("axis")
    size = x.shape[axis]
    wide = indices.astype(np.int64)
    bad = (wide < 0) | (wide >= size)
    if bad.any():
        raise RunError(
            f"{describe(node)}: index {wide[bad].flat[0]} is out of range for axis {axis} "
            f"of size {size}"
        )
    cut = tuple(slice(None) if k == axis else slice(0, n) for k, n in enumerate(wide.shape))
    return np.take_along_axis(x[cut], wide, axis=axis)


def position_value(position: np.ndarray) -> int:
    """The int held by a run-time position operand (shape () or (1,), int32/int64)."""
    return int(np.asarray(position).reshape(-1)[0])


def slice_start_fits(start: int, rows: int, extent: int) -> bool:
    """True when `rows` rows written from `start` lie inside an axis of length `extent`."""
    return start >= 0 and start + rows <= extent


def slice_start_message(node: Node, start: int, rows: int, extent: int) -> str:
    """The RunError text for a slice_update start that does not fit, naming the start,
    the row count and the axis length (shared with the MLX guard: every backend words
    it alike)."""
    axis = node.attr("axis")
    if start < 0:
        return (
            f"{describe(node)}: start {start} is negative ({rows} rows into the length "
            f"{extent} of axis {axis})"
        )
    return (
        f"{describe(node)}: start {start} + {rows} rows is past the length {extent} of axis {axis}"
    )


def _slice_update(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    """`target` with `update` at the start along the axis: the attribute, or the value
    of the third operand (a run-time start, checked here: RunError when out of range)."""
    target, update = args[:2]
    axis = node.attr("axis")
    rows = update.shape[axis]
    start = node.attr("start")
    if len(args) == 3:
        start = position_value(args[2])
        if not slice_start_fits(start, rows, target.shape[axis]):
            raise RunError(slice_start_message(node, start, rows, target.shape[axis]))
    result = target.copy()
    result[_axis_slice(target.ndim, axis, start, start + rows)] = update
    return result


def _arange(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    """start + step * i in float64, rounded once to the node's dtype."""
    (count,) = node.shape
    return node.attr("start") + node.attr("step") * np.arange(count, dtype=np.float64)


def _full(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    # Converted by NumPy's cast, not np.full's Python-int check: 300 in int8 wraps as
    # an int8 cast does on every backend instead of raising OverflowError.
    return np.full(node.shape, np.asarray(node.attr("value")).astype(node.dtype.to_numpy()))


# ---------------------------------------------------------------- convolution and pooling


def _pad_hw(x: np.ndarray, pads: tuple[tuple[int, int], ...], value: object) -> np.ndarray:
    """x padded by `pads`, ((top, bottom), (left, right)); a negative end crops."""
    (top, bottom), (left, right) = pads
    x = x[:, :, : x.shape[2] + min(bottom, 0), : x.shape[3] + min(right, 0)]
    if not (top or left or bottom > 0 or right > 0):
        return x
    grow = ((0, 0), (0, 0), (top, max(bottom, 0)), (left, max(right, 0)))
    return np.pad(x, grow, constant_values=value)


def _windows(
    x: np.ndarray,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    dilation: tuple[int, int],
    out_hw: tuple[int, int],
) -> np.ndarray:
    """(N, C, OH, OW, KH, KW) strided windows of a padded NCHW array (a view, no copy)."""
    kh, kw = kernel
    span = ((kh - 1) * dilation[0] + 1, (kw - 1) * dilation[1] + 1)
    view = np.lib.stride_tricks.sliding_window_view(x, span, axis=(2, 3))
    view = view[:, :, :: stride[0], :: stride[1], :: dilation[0], :: dilation[1]]
    return view[:, :, : out_hw[0], : out_hw[1]]


def _conv2d(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    """Grouped im2col. Windows (N, G, Cg, OH, OW, KH, KW) contract with weights
    (G, Og, Cg, KH, KW) over Cg, KH, KW: as one batched matmul over the groups (BLAS), or,
    for depthwise convolutions (Cg = 1, where a matmul of inner size KH*KW is mostly
    overhead), as an einsum straight over the window view."""
    x, w = (_operand(node, a) for a in args)
    groups = node.attr("groups")
    n, o, oh, ow = node.shape
    _, cg, kh, kw = w.shape
    padded = _pad_hw(x, conv_pads(dict(node.attrs)), 0)
    windows = _windows(padded, (kh, kw), node.attr("stride"), node.attr("dilation"), (oh, ow))
    windows = windows.reshape(n, groups, cg, oh, ow, kh, kw)
    weights = w.reshape(groups, o // groups, cg, kh, kw)
    if cg == 1:
        out = np.einsum("ngchwij,gocij->ngohw", windows, weights, optimize=True)
        return out.reshape(n, o, oh, ow)
    columns = windows.transpose(1, 0, 3, 4, 2, 5, 6).reshape(groups, n * oh * ow, cg * kh * kw)
    matrices = weights.reshape(groups, o // groups, cg * kh * kw).transpose(0, 2, 1)
    out = np.matmul(columns, matrices).reshape(groups, n, oh, ow, o // groups)
    return out.transpose(1, 0, 4, 2, 3).reshape(n, o, oh, ow)


def _lowest(dtype: np.dtype) -> object:
    """The identity of max: -inf for floats, the minimum integer, False for bool."""
    if dtype.kind == "f":
        return -np.inf
    if dtype.kind == "b":
        return False
    return np.iinfo(dtype).min


KERNELS: dict[str, Kernel] = {
    "neg": _unary(np.negative),
    "abs": _unary(np.abs),
    "exp": _unary(np.exp),
    "log": _unary(np.log),
    "sqrt": _unary(np.sqrt),
    "rsqrt": _unary(lambda x: 1 / np.sqrt(x)),
    "reciprocal": _unary(lambda x: 1 / x),
    "square": _unary(np.square),
    "sin": _unary(np.sin),
    "cos": _unary(np.cos),
    "tanh": _unary(np.tanh),
    "sigmoid": _unary(_sigmoid),
    "relu": _unary(lambda x: np.maximum(x, np.zeros((), x.dtype))),
    "gelu": _gelu,
    "silu": _unary(lambda x: x * _sigmoid(x)),
    "logical_not": _unary(np.logical_not),
    "add": _arith(np.add),
    "sub": _arith(np.subtract),
    "mul": _arith(np.multiply),
    "div": _arith(np.true_divide),
    "pow": _pow,
    "maximum": _arith(np.maximum),
    "minimum": _arith(np.minimum),
    "eq": _compare(np.equal),
    "ne": _compare(np.not_equal),
    "lt": _compare(np.less),
    "le": _compare(np.less_equal),
    "gt": _compare(np.greater),
    "ge": _compare(np.greater_equal),
    "logical_and": _compare(np.logical_and),
    "logical_or": _compare(np.logical_or),
    "where": _where,
    "matmul": _matmul,
    "matmul_transposed": _matmul_transposed,
    "matmul_transposed_a": _matmul_transposed_a,
    "sum": _reduce(np.sum),
    "mean": _mean,
    "max": _reduce(np.max),
    "min": _reduce(np.min),
    "prod": _reduce(np.prod),
    "any": _truth(np.any),
    "all": _truth(np.all),
    "argmax": _arg_reduce(np.argmax),
    "argmin": _arg_reduce(np.argmin),
    "cumsum": _scan(np.cumsum),
    "cumprod": _scan(np.cumprod),
    "softmax": _softmax,
    "log_softmax": _log_softmax,
    "transpose": lambda node, args: np.transpose(args[0], node.attr("axes")),
    "reshape": lambda node, args: args[0].reshape(node.shape),
    "cast": lambda node, args: args[0],
    "narrow": _narrow,
    "broadcast_to": lambda node, args: np.broadcast_to(args[0], node.shape),
    "concat": lambda node, args: np.concatenate(args, axis=node.attr("axis")),
    "take": _take,
    "gather": _gather,
    "slice_update": _slice_update,
    "arange": _arange,
    "full": _full,
    "conv2d": _conv2d,
}


def constant_value(node: Node) -> np.ndarray:
    """The literal array of a `constant` node: a read-only view of its payload bytes."""
    return np.frombuffer(node.attr("value"), node.dtype.to_numpy()).reshape(node.shape)


def _is_fresh(result: np.ndarray, args: Sequence[np.ndarray]) -> bool:
    """True when `result` can be handed out as is: C-contiguous, writeable, its own bytes."""
    return (
        result.flags.c_contiguous
        and result.flags.writeable
        and not any(np.may_share_memory(result, a) for a in args)
    )


def evaluate(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    """`node`'s op on `args` (see module docstring for the result's guarantees).

    Raises RunError naming the node when no kernel exists for its op, on the run-time
    errors listed above, or if a kernel's result disagrees with the node's shape."""
    kernel = KERNELS.get(node.op)
    if kernel is None:
        raise RunError(f"{describe(node)}: no NumPy kernel for op {node.op!r}")
    target = node.dtype.to_numpy()
    with np.errstate(all="ignore"):  # inf/nan follow IEEE; float->int casts as NumPy does
        result = np.asarray(kernel(node, args))
        if result.shape != node.shape:
            raise RunError(
                f"{describe(node)}: kernel result has shape {result.shape}, the node {node.shape}"
            )
        if result.dtype != target:
            return result.astype(target, order="C")
    return result if _is_fresh(result, args) else np.array(result, order="C", copy=True)


# Op families kept in their own modules register into the one table here, once the
# helpers above exist (they import them from this module).
from tensorgraph.runtime import math_kernels, window_kernels  # noqa: E402

KERNELS.update(math_kernels.KERNELS)
KERNELS.update(window_kernels.KERNELS)
from tensorgraph.runtime import (  # noqa: E402, F401  (they add to KERNELS)
    conv_grad_kernels,
    elementwise_kernels,
    expert_kernels,
    fused_kernels,
    pool_grad_kernels,
    quant_kernels,
    scatter_kernels,
    sort_kernels,
    update_kernels,
)
