"""NumPy kernels: one function per non-boundary op, shared by both NumPy executors.

`evaluate(node, args)` returns a fresh C-contiguous array of exactly `node.shape` and
`node.dtype`. float16 and bfloat16 are computed in float32 and rounded once at the end,
the way MLX's CPU kernels accumulate. Kernels never write into their arguments, so an
executor may place the result over an argument's bytes after the call (in place).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from tensorgraph.errors import RunError
from tensorgraph.ir.node import Node, describe

Kernel = Callable[[Node, Sequence[np.ndarray]], np.ndarray]

_erf = np.frompyfunc(math.erf, 1, 1)


def _compute_dtype(array: np.ndarray) -> np.ndarray:
    """float16/bfloat16 arrays as float32 (computation precision); others unchanged."""
    if (array.dtype.kind == "f" and array.dtype.itemsize < 4) or array.dtype.name == "bfloat16":
        return array.astype(np.float32)
    return array


def _unary(fn: Callable[[np.ndarray], np.ndarray]) -> Kernel:
    return lambda node, args: fn(_compute_dtype(args[0]))


def _binary(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Kernel:
    def kernel(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
        a, b = (_compute_dtype(x.astype(node_compute(node, x))) for x in args)
        return fn(a, b)

    return kernel


def node_compute(node: Node, x: np.ndarray) -> np.dtype:
    """Operands of arithmetic are first converted to the node's result dtype."""
    return node.dtype.to_numpy()


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.where(
        x >= 0, 1 / (1 + np.exp(-np.abs(x))), np.exp(-np.abs(x)) / (1 + np.exp(-np.abs(x)))
    )


def _gelu(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    x = _compute_dtype(args[0])
    if node.attr("approximate") == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    wide = x.astype(np.float64)
    return 0.5 * wide * (1 + np.asarray(_erf(wide / math.sqrt(2)), dtype=np.float64))


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, np.zeros((), x.dtype))


def _compare(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Kernel:
    def kernel(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
        a, b = args
        common = np.promote_types(a.dtype, b.dtype)
        return fn(a.astype(common), b.astype(common))

    return kernel


def _pow(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu" and np.any(b < 0):
        raise RunError("pow: integer base with a negative integer exponent")
    return np.power(a, b)


def _where(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    cond, a, b = args
    target = node.dtype.to_numpy()
    return np.where(cond, a.astype(target), b.astype(target))


def _matmul(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    target = node.dtype.to_numpy()
    a, b = (_compute_dtype(x.astype(target)) for x in args)
    return np.matmul(a, b)


def _reduce(fn: Callable[..., np.ndarray]) -> Kernel:
    def kernel(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
        x = args[0]
        if x.dtype == np.bool_:
            x = x.astype(node.dtype.to_numpy())
        return fn(_compute_dtype(x), axis=node.attr("axes"), keepdims=node.attr("keepdims"))

    return kernel


def _mean(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    count = math.prod(x.shape[a] for a in axis)
    if count == 0:
        shape = [1 if i in axis else d for i, d in enumerate(x.shape)]
        if not keepdims:
            shape = [d for i, d in enumerate(x.shape) if i not in axis]
        return np.full(shape, np.nan, np.float32)
    return (
        np.sum(x.astype(np.float64) if x.dtype.kind in "iub" else x, axis=axis, keepdims=keepdims)
        / count
    )


def _argmax(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    return np.argmax(args[0], axis=node.attr("axis"), keepdims=node.attr("keepdims"))


def _softmax(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    x = _compute_dtype(args[0])
    axis = node.attr("axis")
    shifted = x - np.max(x, axis=axis, keepdims=True) if x.shape[axis] else x
    e = np.exp(shifted)
    return e / np.sum(e, axis=axis, keepdims=True)


def _log_softmax(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    x = _compute_dtype(args[0])
    axis = node.attr("axis")
    shifted = x - np.max(x, axis=axis, keepdims=True) if x.shape[axis] else x
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def _narrow(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    axis, start, length = node.attr("axis"), node.attr("start"), node.attr("length")
    index = [slice(None)] * args[0].ndim
    index[axis] = slice(start, start + length)
    return args[0][tuple(index)]


def _take(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    x, indices = args
    axis = node.attr("axis")
    size = x.shape[axis]
    if indices.size and (indices.min() < -size or indices.max() >= size):
        bad = indices[(indices < -size) | (indices >= size)].flat[0]
        raise RunError(
            f"{describe(node)}: index {bad} is out of range for axis {axis} of size {size}"
        )
    return np.take(x, indices.astype(np.int64), axis=axis)


def _slice_update(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    target, update = args
    axis, start = node.attr("axis"), node.attr("start")
    result = target.copy()
    index = [slice(None)] * target.ndim
    index[axis] = slice(start, start + update.shape[axis])
    result[tuple(index)] = update
    return result


def _arange(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    start, step = node.attr("start"), node.attr("step")
    (count,) = node.shape
    return start + step * np.arange(count, dtype=np.float64)


def _full(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    return np.full(node.shape, node.attr("value"), node.dtype.to_numpy())


def _pad_hw(x: np.ndarray, padding: tuple[int, int], value: float) -> np.ndarray:
    ph, pw = padding
    if not ph and not pw:
        return x
    return np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=value)


def _windows(
    x: np.ndarray,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    dilation: tuple[int, int],
    out_hw: tuple[int, int],
) -> np.ndarray:
    """(N, C, OH, OW, KH, KW) strided windows of a padded NCHW array (no copy)."""
    kh, kw = kernel
    span = ((kh - 1) * dilation[0] + 1, (kw - 1) * dilation[1] + 1)
    view = np.lib.stride_tricks.sliding_window_view(x, span, axis=(2, 3))
    view = view[:, :, :: stride[0], :: stride[1], :: dilation[0], :: dilation[1]]
    return view[:, :, : out_hw[0], : out_hw[1]]


def _conv2d(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    target = node.dtype.to_numpy()
    x, w = (_compute_dtype(a.astype(target)) for a in args)
    groups = node.attr("groups")
    n, o, oh, ow = node.shape
    x = _pad_hw(x, node.attr("padding"), 0)
    windows = _windows(x, w.shape[2:], node.attr("stride"), node.attr("dilation"), (oh, ow))
    cg, og = x.shape[1] // groups, o // groups
    # (N, G, Cg, OH, OW, KH, KW) x (G, Og, Cg, KH, KW) -> (N, G, Og, OH, OW)
    grouped = windows.reshape(n, groups, cg, oh, ow, *w.shape[2:])
    weights = w.reshape(groups, og, cg, *w.shape[2:])
    out = np.einsum("ngchwij,gocij->ngohw", grouped, weights, optimize=True)
    return out.reshape(n, o, oh, ow)


def _max_pool2d(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    x = _compute_dtype(args[0])
    fill = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    padded = _pad_hw(x, node.attr("padding"), fill)
    windows = _windows(
        padded, node.attr("kernel_size"), node.attr("stride"), (1, 1), node.shape[2:]
    )
    return windows.max(axis=(4, 5))


def _avg_pool2d(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    x = (
        _compute_dtype(args[0]).astype(np.float32)
        if args[0].dtype.kind != "f"
        else (_compute_dtype(args[0]))
    )
    kernel, stride, padding = (node.attr(k) for k in ("kernel_size", "stride", "padding"))
    padded = _pad_hw(x, padding, 0)
    windows = _windows(padded, kernel, stride, (1, 1), node.shape[2:])
    total = windows.sum(axis=(4, 5))
    if node.attr("count_include_pad"):
        return total / (kernel[0] * kernel[1])
    ones = _pad_hw(np.ones((1, 1, *x.shape[2:]), x.dtype), padding, 0)
    counts = _windows(ones, kernel, stride, (1, 1), node.shape[2:]).sum(axis=(4, 5))
    return total / counts


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
    "relu": _unary(_relu),
    "gelu": _gelu,
    "silu": _unary(lambda x: x * _sigmoid(x)),
    "logical_not": _unary(np.logical_not),
    "add": _binary(np.add),
    "sub": _binary(np.subtract),
    "mul": _binary(np.multiply),
    "div": _binary(np.true_divide),
    "pow": _binary(_pow),
    "maximum": _binary(np.maximum),
    "minimum": _binary(np.minimum),
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
    "sum": _reduce(np.sum),
    "mean": _reduce(_mean),
    "max": _reduce(np.max),
    "min": _reduce(np.min),
    "argmax": _argmax,
    "softmax": _softmax,
    "log_softmax": _log_softmax,
    "transpose": lambda node, args: np.transpose(args[0], node.attr("axes")),
    "reshape": lambda node, args: args[0].reshape(node.shape),
    "cast": lambda node, args: args[0],
    "narrow": _narrow,
    "broadcast_to": lambda node, args: np.broadcast_to(args[0], node.shape),
    "concat": lambda node, args: np.concatenate(args, axis=node.attr("axis")),
    "take": _take,
    "slice_update": _slice_update,
    "arange": _arange,
    "full": _full,
    "conv2d": _conv2d,
    "max_pool2d": _max_pool2d,
    "avg_pool2d": _avg_pool2d,
}


def constant_value(node: Node) -> np.ndarray:
    """The literal array of a `constant` node (read-only view of its bytes)."""
    return np.frombuffer(node.attr("value"), node.dtype.to_numpy()).reshape(node.shape)


def evaluate(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    """`node`'s op on `args`: a fresh C-contiguous array of node.shape and node.dtype."""
    kernel = KERNELS.get(node.op)
    if kernel is None:
        raise RunError(f"{describe(node)}: no NumPy kernel for op {node.op!r}")
    with np.errstate(all="ignore"):  # inf/nan follow IEEE, as on every backend
        result = kernel(node, args)
    target = node.dtype.to_numpy()
    out = np.empty(node.shape, target)
    out[...] = np.asarray(result).astype(target, copy=False).reshape(node.shape)
    return out
