"""The lowering table: every non-boundary op as a function of mlx.core arrays.

Each lowering returns an array of exactly the node's shape and dtype (arithmetic casts
operands to the node's dtype first, the way the registry's promotion rules define the
result). Views lower to MLX's zero-copy reshape and slicing. Layout differences are
handled here: our conv2d is NCHW input / OIHW weight, MLX's is NHWC / OHWI.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import mlx.core as mx

from tensorgraph.ir.dtypes import DType
from tensorgraph.ir.node import Node

Lowering = Callable[[Node, Sequence[mx.array]], mx.array]

MX_DTYPES = {
    "bool": mx.bool_,
    "uint8": mx.uint8,
    "int8": mx.int8,
    "int16": mx.int16,
    "int32": mx.int32,
    "int64": mx.int64,
    "float16": mx.float16,
    "bfloat16": mx.bfloat16,
    "float32": mx.float32,
}


def to_mx_dtype(dtype: DType) -> mx.Dtype:
    return MX_DTYPES[dtype.name]


def _as(node: Node, x: mx.array) -> mx.array:
    target = MX_DTYPES[node.dtype.name]
    return x if x.dtype == target else x.astype(target)


def _unary(fn: Callable[[mx.array], mx.array]) -> Lowering:
    return lambda node, args: fn(args[0])


def _binary(fn: Callable[[mx.array, mx.array], mx.array]) -> Lowering:
    return lambda node, args: fn(_as(node, args[0]), _as(node, args[1]))


def _gelu(node: Node, args: Sequence[mx.array]) -> mx.array:
    x = args[0]
    if node.attr("approximate") == "tanh":
        inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)
        return 0.5 * x * (1 + mx.tanh(inner))
    return 0.5 * x * (1 + mx.erf(x * (1 / math.sqrt(2))))


def _compare(fn: Callable[[mx.array, mx.array], mx.array]) -> Lowering:
    return lambda node, args: fn(args[0], args[1])


def _reduce(fn: Callable[..., mx.array]) -> Lowering:
    def lower(node: Node, args: Sequence[mx.array]) -> mx.array:
        axes = list(node.attr("axes"))
        if not axes:
            return _as(node, args[0])
        return _as(node, fn(args[0], axis=axes, keepdims=node.attr("keepdims")))

    return lower


def _sum(node: Node, args: Sequence[mx.array]) -> mx.array:
    return _reduce(mx.sum)(node, [_as(node, args[0])])


def _mean(node: Node, args: Sequence[mx.array]) -> mx.array:
    return _reduce(mx.mean)(node, [_as(node, args[0])])


def _narrow(node: Node, args: Sequence[mx.array]) -> mx.array:
    axis, start, length = node.attr("axis"), node.attr("start"), node.attr("length")
    index = [slice(None)] * args[0].ndim
    index[axis] = slice(start, start + length)
    return args[0][tuple(index)]


def _slice_update(node: Node, args: Sequence[mx.array]) -> mx.array:
    # Functional: a new array. (`target[...] = update` would rebind the caller's object,
    # which other readers of the same value may still hold.) MLX donates the target's
    # buffer to the result when the executor has dropped every other reference.
    target, update = args
    start = mx.array([node.attr("start")], dtype=mx.int32)
    return mx.slice_update(target, update, start_indices=start, axes=(node.attr("axis"),))


def _arange(node: Node, args: Sequence[mx.array]) -> mx.array:
    (count,) = node.shape
    start, step = node.attr("start"), node.attr("step")
    positions = mx.arange(count, dtype=mx.float32) if node.dtype.is_float else mx.arange(count)
    return _as(node, start + step * positions)


def _pad_hw(x: mx.array, padding: tuple[int, int], value: float) -> mx.array:
    ph, pw = padding
    if not ph and not pw:
        return x
    return mx.pad(x, [(0, 0), (0, 0), (ph, ph), (pw, pw)], constant_values=value)


def _window_slices(x: mx.array, node: Node) -> list[mx.array]:
    """One strided slice per kernel position: the pool's inputs, each (N, C, OH, OW)."""
    kh, kw = node.attr("kernel_size")
    sh, sw = node.attr("stride")
    oh, ow = node.shape[2:]
    return [
        x[:, :, i : i + sh * (oh - 1) + 1 : sh, j : j + sw * (ow - 1) + 1 : sw]
        for i in range(kh)
        for j in range(kw)
    ]


def _max_pool2d(node: Node, args: Sequence[mx.array]) -> mx.array:
    fill = -math.inf if node.dtype.is_float else -(2 ** (8 * node.dtype.itemsize - 1))
    windows = _window_slices(_pad_hw(args[0], node.attr("padding"), fill), node)
    result = windows[0]
    for w in windows[1:]:
        result = mx.maximum(result, w)
    return result


def _avg_pool2d(node: Node, args: Sequence[mx.array]) -> mx.array:
    x = _as(node, args[0])
    padding = node.attr("padding")
    total = sum(
        _window_slices(_pad_hw(x, padding, 0), node)[1:],
        start=_window_slices(_pad_hw(x, padding, 0), node)[0],
    )
    kh, kw = node.attr("kernel_size")
    if node.attr("count_include_pad"):
        return _as(node, total / (kh * kw))
    ones = mx.ones((1, 1, *x.shape[2:]), dtype=x.dtype)
    counts = _window_slices(_pad_hw(ones, padding, 0), node)
    return _as(node, total / sum(counts[1:], start=counts[0]))


def _conv2d(node: Node, args: Sequence[mx.array]) -> mx.array:
    x, w = (_as(node, a) for a in args)
    out = mx.conv2d(
        mx.transpose(x, (0, 2, 3, 1)),
        mx.transpose(w, (0, 2, 3, 1)),
        stride=tuple(node.attr("stride")),
        padding=tuple(node.attr("padding")),
        dilation=tuple(node.attr("dilation")),
        groups=node.attr("groups"),
    )
    return mx.transpose(out, (0, 3, 1, 2))


def _softmax(node: Node, args: Sequence[mx.array]) -> mx.array:
    return mx.softmax(args[0], axis=node.attr("axis"), precise=True)


def _log_softmax(node: Node, args: Sequence[mx.array]) -> mx.array:
    x = args[0]
    axis = node.attr("axis")
    return x - mx.logsumexp(x, axis=axis, keepdims=True)


def _sigmoid(node: Node, args: Sequence[mx.array]) -> mx.array:
    return mx.sigmoid(args[0])


def _take(node: Node, args: Sequence[mx.array]) -> mx.array:
    return mx.take(args[0], args[1], axis=node.attr("axis"))


LOWERINGS: dict[str, Lowering] = {
    "neg": _unary(mx.negative),
    "abs": _unary(mx.abs),
    "exp": _unary(mx.exp),
    "log": _unary(mx.log),
    "sqrt": _unary(mx.sqrt),
    "rsqrt": _unary(mx.rsqrt),
    "reciprocal": _unary(mx.reciprocal),
    "square": _unary(mx.square),
    "sin": _unary(mx.sin),
    "cos": _unary(mx.cos),
    "tanh": _unary(mx.tanh),
    "sigmoid": _sigmoid,
    "relu": lambda node, args: mx.maximum(args[0], mx.array(0, dtype=args[0].dtype)),
    "gelu": _gelu,
    "silu": lambda node, args: args[0] * mx.sigmoid(args[0]),
    "logical_not": _unary(mx.logical_not),
    "add": _binary(mx.add),
    "sub": _binary(mx.subtract),
    "mul": _binary(mx.multiply),
    "div": _binary(mx.divide),
    "pow": _binary(mx.power),
    "maximum": _binary(mx.maximum),
    "minimum": _binary(mx.minimum),
    "eq": _compare(mx.equal),
    "ne": _compare(mx.not_equal),
    "lt": _compare(mx.less),
    "le": _compare(mx.less_equal),
    "gt": _compare(mx.greater),
    "ge": _compare(mx.greater_equal),
    "logical_and": _compare(mx.logical_and),
    "logical_or": _compare(mx.logical_or),
    "where": lambda node, args: _as(
        node, mx.where(args[0], _as(node, args[1]), _as(node, args[2]))
    ),
    "matmul": _binary(mx.matmul),
    "sum": _sum,
    "mean": _mean,
    "max": _reduce(mx.max),
    "min": _reduce(mx.min),
    "argmax": lambda node, args: _as(
        node, mx.argmax(args[0], axis=node.attr("axis"), keepdims=node.attr("keepdims"))
    ),
    "softmax": _softmax,
    "log_softmax": _log_softmax,
    "transpose": lambda node, args: mx.transpose(args[0], node.attr("axes")),
    "reshape": lambda node, args: mx.reshape(args[0], node.shape),
    "cast": lambda node, args: _as(node, args[0]),
    "narrow": _narrow,
    "broadcast_to": lambda node, args: mx.broadcast_to(args[0], node.shape),
    "concat": lambda node, args: mx.concatenate(list(args), axis=node.attr("axis")),
    "take": _take,
    "slice_update": _slice_update,
    "arange": _arange,
    "full": lambda node, args: mx.full(
        node.shape, node.attr("value"), dtype=MX_DTYPES[node.dtype.name]
    ),
    "conv2d": _conv2d,
    "max_pool2d": _max_pool2d,
    "avg_pool2d": _avg_pool2d,
}
