"""The lowering table: every non-boundary op as a function of mlx.core arrays.

Each lowering returns an array of exactly the node's shape and dtype, with the values of
the NumPy kernels (tensorgraph.runtime.kernels, the oracle): arithmetic casts operands
to the node's dtype first, the way the registry's promotion rules define the result.
Views lower to MLX's zero-copy reshape and slicing. Layout differences are handled here:
our conv2d is NCHW input / OIHW weight, MLX's is NHWC / OHWI.

Where MLX itself misbehaves the lowering does not call it:

- A node whose result has no elements is made as zeros of its shape without running
  the op: MLX's reductions over zero-size inputs read uninitialised memory (or hang),
  argmax and logsumexp raise on them. Reductions of a zero-size input to a non-empty
  result give the identity the oracle gives (sum 0, mean nan) the same way.
- Integer matmul and conv2d, which MLX does not implement, are exact broadcast products.
- `full` converts its value with NumPy's cast (2.7 -> int32 2, 300 -> int8 44), as the
  oracle does, instead of mx.full (which keeps a float value float).
- `take`/`gather` never hand MLX an index outside the axis (its gather does no bounds
  check and crashes the process); `slice_update` refuses an update of another rank
  (MLX's segfaults). Reporting out-of-range indices as RunError is guards.py's job.

Families live in their own modules and join the table at the end of this one:
gathers.py (take, gather, slice_update), math_lowering.py (rounding, float math,
integer division, bitwise ops) and pooling.py (pools, adaptive pools, pad, resizes).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import mlx.core as mx
import numpy as np

from tensorgraph.codegen_mlx.arrays import MX_DTYPES, to_mx
from tensorgraph.ir.node import Node
from tensorgraph.ir.window_inference import conv_pads

Lowering = Callable[[Node, Sequence[mx.array]], mx.array]


def _dtype(node: Node) -> mx.Dtype:
    return MX_DTYPES[node.dtype.name]


def _as(node: Node, x: mx.array) -> mx.array:
    target = _dtype(node)
    return x if x.dtype == target else x.astype(target)


def _filled(node: Node, value: float) -> mx.array:
    """The node's result as a constant array (for results known without computing).
    The value is made an array of the node's dtype first: mx.full(shape, 0, dtype=bool)
    returns int32 (MLX 0.32 keeps a Python value's kind whatever `dtype` says)."""
    return mx.full(node.shape, mx.array(value, dtype=_dtype(node)))


def _unary(fn: Callable[[mx.array], mx.array]) -> Lowering:
    return lambda node, args: fn(args[0])


def _binary(fn: Callable[[mx.array, mx.array], mx.array]) -> Lowering:
    return lambda node, args: fn(_as(node, args[0]), _as(node, args[1]))


def _compare(fn: Callable[[mx.array, mx.array], mx.array]) -> Lowering:
    return lambda node, args: fn(args[0], args[1])


def _gelu(node: Node, args: Sequence[mx.array]) -> mx.array:
    x = args[0]
    if node.attr("approximate") == "tanh":
        inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)
        return 0.5 * x * (1 + mx.tanh(inner))
    return 0.5 * x * (1 + mx.erf(x * (1 / math.sqrt(2))))


# ---------------------------------------------------------------- reductions


def _reduce(fn: Callable[..., mx.array], empty: float) -> Lowering:
    """sum/mean/max/min/prod over the node's axes, in the node's dtype. A zero-size input is
    never handed to MLX: its reduction is `empty` (the oracle's identity) everywhere.
    max/min never get there with a non-empty result (the registry rejects a max over a
    zero-size axis), so their `empty` is unused."""

    def lower(node: Node, args: Sequence[mx.array]) -> mx.array:
        x = _as(node, args[0])
        axes = list(node.attr("axes"))
        if not axes:
            return x
        if x.size == 0:
            return _filled(node, empty)
        return _as(node, fn(x, axis=axes, keepdims=node.attr("keepdims")))

    return lower


def _truth(fn: Callable[..., mx.array], empty: bool) -> Lowering:
    """any/all over the node's axes: non-zero (nan included) is true; `empty` over a
    zero-size input, which MLX is not handed."""

    def lower(node: Node, args: Sequence[mx.array]) -> mx.array:
        x = args[0]
        if x.size == 0:
            return _filled(node, empty)
        truth = x if x.dtype == mx.bool_ else x != 0
        axes = list(node.attr("axes"))
        return fn(truth, axis=axes, keepdims=node.attr("keepdims")) if axes else truth

    return lower


def _arg_reduce(fn: Callable[..., mx.array]) -> Lowering:
    # Only reached with a non-empty input: the registry rejects a zero-size axis, and an
    # empty result is made before lowering (see LOWERINGS).
    return lambda node, args: _as(
        node, fn(args[0], axis=node.attr("axis"), keepdims=node.attr("keepdims"))
    )


def _scan(fn: Callable[..., mx.array]) -> Lowering:
    """cumsum/cumprod in the node's dtype (float32 for half precision, as the oracle
    accumulates; int32 for bool, whose running sum is then "any so far")."""

    def lower(node: Node, args: Sequence[mx.array]) -> mx.array:
        dtype = _dtype(node)
        if (node.dtype.is_float and node.dtype.itemsize < 4) or dtype == mx.bool_:
            dtype = mx.float32 if node.dtype.is_float else mx.int32
        result = fn(args[0].astype(dtype), axis=node.attr("axis"))
        return result != 0 if node.dtype.name == "bool" else _as(node, result)

    return lower


def _softmax(node: Node, args: Sequence[mx.array]) -> mx.array:
    return mx.softmax(args[0], axis=node.attr("axis"), precise=True)


def _log_softmax(node: Node, args: Sequence[mx.array]) -> mx.array:
    x = args[0]
    return x - mx.logsumexp(x, axis=node.attr("axis"), keepdims=True)


# ---------------------------------------------------------------- contractions


def _integer_matmul(a: mx.array, b: mx.array, accumulator: mx.Dtype) -> mx.array:
    """a (..., m, k) @ b (..., k, n) for integers, which MLX's matmul refuses: the
    broadcast product summed over k, in `accumulator`. Exact with the oracle's two's
    complement wraparound (the sum is computed modulo a multiple of the result's range).
    Costs a (..., m, k, n) temporary: integer matmuls are rare and small; a float GEMM
    would round any product above 2^24."""
    product = a.astype(accumulator)[..., :, :, None] * b.astype(accumulator)[..., None, :, :]
    return mx.sum(product, axis=-2)


def _accumulator(node: Node) -> mx.Dtype:
    return mx.int64 if node.dtype.name == "int64" else mx.int32


def _matmul(node: Node, args: Sequence[mx.array]) -> mx.array:
    a, b = (_as(node, x) for x in args)
    if node.dtype.is_float:
        return mx.matmul(a, b)
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    return _as(node, _integer_matmul(a2, b2, _accumulator(node)).reshape(node.shape))


def _matmul_transposed(node: Node, args: Sequence[mx.array]) -> mx.array:
    """a @ b.T as nn.Linear writes it: MLX's transpose is a strided view and its matmul
    reads a transposed operand in place (BLAS's transpose flag), so no copy is made."""
    a, b = (_as(node, x) for x in args)
    b = mx.swapaxes(b, -1, -2)
    if node.dtype.is_float:
        return mx.matmul(a, b)
    return _as(node, _integer_matmul(a, b, _accumulator(node)))


def _matmul_transposed_a(node: Node, args: Sequence[mx.array]) -> mx.array:
    """a.T @ b, the transpose a strided view read in place, as above."""
    a, b = (_as(node, x) for x in args)
    a = mx.swapaxes(a, -1, -2)
    if node.dtype.is_float:
        return mx.matmul(a, b)
    return _as(node, _integer_matmul(a, b, _accumulator(node)))


def _pad_hw(x: mx.array, pads: tuple[tuple[int, int], ...], value: object) -> mx.array:
    """x padded by `pads`, ((top, bottom), (left, right)); a negative end crops."""
    (top, bottom), (left, right) = pads
    x = x[:, :, : x.shape[2] + min(bottom, 0), : x.shape[3] + min(right, 0)]
    if not (top or left or bottom > 0 or right > 0):
        return x
    grow = [(0, 0), (0, 0), (top, max(bottom, 0)), (left, max(right, 0))]
    return mx.pad(x, grow, constant_values=value)


def _window_slices(
    x: mx.array, node: Node, kernel: tuple[int, int], dilation: tuple[int, int] = (1, 1)
) -> list[mx.array]:
    """One strided slice per kernel position of a padded NCHW `x`, each (N, C, OH, OW):
    the inputs that kernel position meets, for every output position."""
    sh, sw = node.attr("stride")
    oh, ow = node.shape[2:]
    slices = []
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            top, left = i * dilation[0], j * dilation[1]
            slices.append(
                x[:, :, top : top + sh * (oh - 1) + 1 : sh, left : left + sw * (ow - 1) + 1 : sw]
            )
    return slices


def _integer_conv2d(node: Node, x: mx.array, w: mx.array) -> mx.array:
    """conv2d for integers and bools (MLX's conv is float only): per kernel position, the
    input slice contracted with that position's weights, summed exactly in an integer
    accumulator; bool results are "any product true", as NumPy's bool matmul gives."""
    accumulator = _accumulator(node)
    n, o, oh, ow = node.shape
    groups = node.attr("groups")
    _, cg, kh, kw = w.shape
    padded = _pad_hw(x.astype(accumulator), conv_pads(dict(node.attrs)), 0)
    weights = w.astype(accumulator).reshape(groups, o // groups, cg, kh, kw)
    total = mx.zeros((n, groups, o // groups, oh, ow), dtype=accumulator)
    for k, window in enumerate(_window_slices(padded, node, (kh, kw), node.attr("dilation"))):
        i, j = divmod(k, kw)
        taps = window.reshape(n, groups, 1, cg, oh, ow)
        total = total + mx.sum(taps * weights[None, :, :, :, i, j, None, None], axis=3)
    total = total.reshape(node.shape)
    return total != 0 if node.dtype.name == "bool" else _as(node, total)


def _dilated_conv2d(node: Node, x: mx.array, w: mx.array) -> mx.array:
    """A float conv2d with a kernel dilation above 1 as one matrix product per group of
    its input patches (im2col) by the weight, the way MLX's own conv VJP computes a
    weight gradient (`conv_weight_backward_patches`): the patches are a strided view of
    the padded NCHW input, (N*OH*OW, Cg*KH*KW) per group, copied once by the matmul.

    Why: MLX's CPU backend runs a convolution with kernel dilation through its direct
    loop, not its im2col GEMM, and a training step's weight gradients are exactly such
    convolutions (the cotangent as a kernel dilated by the forward stride). Measured on
    the zoo ResNet-18 step's shapes: the stem's weight gradient 80-90 ms by mx.conv2d,
    16 ms as patches (a shared 2-core machine); the 3x3/2 ones 3-12x faster. The patch
    matrix is the im2col matrix segments.SCRATCH already budgets for conv2d."""
    n, c, h, wd = x.shape
    o, per_group, kh, kw = w.shape
    groups = node.attr("groups")
    (sh, sw), (dh, dw) = node.attr("stride"), node.attr("dilation")
    _, _, oh, ow = node.shape
    pads = conv_pads(dict(node.attrs))
    padded = mx.contiguous(_pad_hw(x, pads, 0))
    hp, wp = h + sum(pads[0]), wd + sum(pads[1])
    # element [b, i, j, g, c, u, v] = padded[b, g * Cg + c, i * sh + u * dh, j * sw + v * dw]
    shape = (n, oh, ow, groups, per_group, kh, kw)
    strides = (c * hp * wp, sh * wp, sw, per_group * hp * wp, hp * wp, dh * wp, dw)
    patches = mx.as_strided(padded, shape, strides).reshape(n * oh * ow, groups, -1)
    weights = w.reshape(groups, o // groups, per_group * kh * kw)
    out = mx.matmul(patches.transpose(1, 0, 2), weights.transpose(0, 2, 1))  # (G, N*OH*OW, Og)
    out = out.reshape(groups, n, oh, ow, o // groups).transpose(1, 0, 4, 2, 3)
    return out.reshape(node.shape)


def _conv2d(node: Node, args: Sequence[mx.array]) -> mx.array:
    x, w = (_as(node, a) for a in args)
    if not node.dtype.is_float:
        return _integer_conv2d(node, x, w)
    if max(node.attr("dilation")) > 1:
        return _dilated_conv2d(node, x, w)
    (top, bottom), (left, right) = conv_pads(dict(node.attrs))
    x = x[:, :, : x.shape[2] + min(bottom, 0), : x.shape[3] + min(right, 0)]  # a crop: a view
    bottom, right = max(bottom, 0), max(right, 0)
    out = mx.conv_general(  # mx.conv2d's own call, with the padding of each side
        mx.transpose(x, (0, 2, 3, 1)),
        mx.transpose(w, (0, 2, 3, 1)),
        stride=tuple(node.attr("stride")),
        padding=([top, left], [bottom, right]),
        kernel_dilation=tuple(node.attr("dilation")),
        groups=node.attr("groups"),
    )
    return mx.transpose(out, (0, 3, 1, 2))


# ---------------------------------------------------------------- layout and generators


def _narrow(node: Node, args: Sequence[mx.array]) -> mx.array:
    axis, start, length = node.attr("axis"), node.attr("start"), node.attr("length")
    index = [slice(None)] * args[0].ndim
    index[axis] = slice(start, start + length)
    return args[0][tuple(index)]


def _arange(node: Node, args: Sequence[mx.array]) -> mx.array:
    """start + step * i. Integer results from integer bounds are exact in MLX's integers;
    float results are computed in float32 (within a rounding of the oracle's float64);
    integer or bool results of fractional bounds are the oracle's own NumPy values (a
    float32 product can land on the other side of an integer than float64 does)."""
    (count,) = node.shape
    start, step = node.attr("start"), node.attr("step")
    if node.dtype.is_float:
        return _as(node, start + step * mx.arange(count, dtype=mx.float32))
    if node.dtype.is_integer and float(start).is_integer() and float(step).is_integer():
        positions = mx.arange(count, dtype=mx.int64)
        return _as(node, int(start) + int(step) * positions)
    values = start + step * np.arange(count, dtype=np.float64)
    with np.errstate(all="ignore"):
        return to_mx(values.astype(node.dtype.to_numpy()))


def _full(node: Node, args: Sequence[mx.array]) -> mx.array:
    # The value goes through NumPy's cast, as in the oracle: mx.full(shape, 2.7, int32)
    # would give float32 2.7 and mx.full(shape, 300, int8) raises.
    with np.errstate(all="ignore"):
        value = np.asarray(node.attr("value")).astype(node.dtype.to_numpy())
    return mx.full(node.shape, to_mx(value))


def _relu(node: Node, args: Sequence[mx.array]) -> mx.array:
    return mx.maximum(args[0], mx.array(0, dtype=args[0].dtype))


_TABLE: dict[str, Lowering] = {
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
    "sigmoid": _unary(mx.sigmoid),
    "relu": _relu,
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
    "where": lambda node, args: mx.where(args[0], _as(node, args[1]), _as(node, args[2])),
    "matmul": _matmul,
    "matmul_transposed": _matmul_transposed,
    "matmul_transposed_a": _matmul_transposed_a,
    "sum": _reduce(mx.sum, 0),
    "mean": _reduce(mx.mean, math.nan),
    "max": _reduce(mx.max, 0),
    "min": _reduce(mx.min, 0),
    "prod": _reduce(mx.prod, 1),
    "any": _truth(mx.any, False),
    "all": _truth(mx.all, True),
    "argmax": _arg_reduce(mx.argmax),
    "argmin": _arg_reduce(mx.argmin),
    "cumsum": _scan(mx.cumsum),
    "cumprod": _scan(mx.cumprod),
    "softmax": _softmax,
    "log_softmax": _log_softmax,
    "transpose": lambda node, args: mx.transpose(args[0], node.attr("axes")),
    "reshape": lambda node, args: mx.reshape(args[0], node.shape),
    "cast": lambda node, args: _as(node, args[0]),
    "narrow": _narrow,
    "broadcast_to": lambda node, args: mx.broadcast_to(args[0], node.shape),
    "concat": lambda node, args: mx.concatenate(list(args), axis=node.attr("axis")),
    "arange": _arange,
    "full": _full,
    "conv2d": _conv2d,
}


def _lowered(op: str, lower: Lowering) -> Lowering:
    """`lower`, except that a result with no elements is made as zeros without running
    the op, and a contraction (matmul, conv2d) over an empty axis gives zeros: MLX's
    kernels are not trusted with zero-size arrays (see the module docstring)."""

    def run(node: Node, args: Sequence[mx.array]) -> mx.array:
        if math.prod(node.shape) == 0:
            return _filled(node, 0)
        contracts = op in (
            "matmul",
            "matmul_transposed",
            "matmul_transposed_a",
            "conv2d",
            "conv_transpose2d",
            "conv2d_weight_backward",
        )
        if contracts and any(a.size == 0 for a in args):
            return _filled(node, 0)
        return lower(node, args)

    run.__name__ = run.__qualname__ = f"lower_{op}"
    run.__doc__ = lower.__doc__
    return run


# Op families kept in their own modules join the table here, once the helpers above
# exist (they import them from this module).
from tensorgraph.codegen_mlx import gathers, math_lowering, pooling  # noqa: E402

_TABLE.update(gathers.TABLE)
_TABLE.update(math_lowering.TABLE)
_TABLE.update(pooling.TABLE)
LOWERINGS: dict[str, Lowering] = {op: _lowered(op, fn) for op, fn in _TABLE.items()}
# For nodes whose indices the executor checked on the host (gathers.IN_RANGE).
IN_RANGE_LOWERINGS: dict[str, Lowering] = {
    op: _lowered(op, fn) for op, fn in gathers.IN_RANGE.items()
}


def lowering_of(node: Node, in_range: frozenset[int] = frozenset()) -> Lowering:
    """The lowering of `node`: its op's, or, when `node` is in `in_range` (nodes whose
    indices the executor proves in range on the host before every run), the one
    without the index replacement pass where the op has one."""
    if node.id in in_range and node.op in IN_RANGE_LOWERINGS:
        return IN_RANGE_LOWERINGS[node.op]
    return LOWERINGS[node.op]


from tensorgraph.codegen_mlx import (  # noqa: E402, F401  (they add to LOWERINGS)
    conv_grad_lowering,
    elementwise_lowering,
    expert_lowering,
    fused,
    pool_grad_lowering,
    quant_lowering,
    scatter_lowering,
    sort_lowering,
    update_lowering,
)
