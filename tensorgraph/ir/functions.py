"""The module-level op functions, named and typed after `mlx.core`: elementwise math,
comparisons and logic, matmul, reductions, and layout (reshape, transpose, concatenate,
take, ...).

Each appends one or more primitive nodes to the graph of its Tensor arguments. Python
scalars become constants of the dtype a scalar takes next to the tensor (`scalar_dtype`);
operands of different dtypes are promoted with explicit casts only where an op needs
equal dtypes (concatenate). Axes accept negative values and are stored normalised, so
`x.sum(-1)` and `x.sum(1)` build the same node. Some names (`abs`, `sum`, `max`, `min`,
`any`, `all`) shadow Python's builtins here, as in mlx.core; this module does not use
those builtins.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence

import sympy

from tensorgraph.errors import GraphError, ShapeError
from tensorgraph.ir.dims import extent_or_int, is_static
from tensorgraph.ir.dtypes import DType, as_dtype, int64, promote_types
from tensorgraph.ir.node import describe
from tensorgraph.ir.shapes import normalize_axes, normalize_axis, resolve_reshape
from tensorgraph.ir.tensor import Tensor, TensorLike, emit, to_operands

# ---------------------------------------------------------------- elementwise


def _unary(op: str, x: Tensor, **attrs: object) -> Tensor:
    return emit(op, [x], **attrs)


def _binary(op: str, a: TensorLike, b: TensorLike) -> Tensor:
    return emit(op, to_operands(a, b))


def negative(x: Tensor) -> Tensor:
    return _unary("neg", x)


def abs(x: Tensor) -> Tensor:
    return _unary("abs", x)


def exp(x: Tensor) -> Tensor:
    return _unary("exp", x)


def log(x: Tensor) -> Tensor:
    return _unary("log", x)


def sqrt(x: Tensor) -> Tensor:
    return _unary("sqrt", x)


def rsqrt(x: Tensor) -> Tensor:
    return _unary("rsqrt", x)


def reciprocal(x: Tensor) -> Tensor:
    return _unary("reciprocal", x)


def square(x: Tensor) -> Tensor:
    return _unary("square", x)


def sin(x: Tensor) -> Tensor:
    return _unary("sin", x)


def cos(x: Tensor) -> Tensor:
    return _unary("cos", x)


def tanh(x: Tensor) -> Tensor:
    return _unary("tanh", x)


def sigmoid(x: Tensor) -> Tensor:
    return _unary("sigmoid", x)


def relu(x: Tensor) -> Tensor:
    return _unary("relu", x)


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """GELU: exact (erf) form by default, `approximate="tanh"` for the tanh form."""
    if approximate not in ("none", "tanh"):
        raise GraphError(f"gelu: approximate must be 'none' or 'tanh' but got {approximate!r}")
    return _unary("gelu", x, approximate=approximate)


def gelu_approx(x: Tensor) -> Tensor:
    """The tanh form of GELU (mlx.nn's name)."""
    return gelu(x, "tanh")


def silu(x: Tensor) -> Tensor:
    return _unary("silu", x)


def logical_not(x: Tensor) -> Tensor:
    return _unary("logical_not", x)


def add(a: TensorLike, b: TensorLike) -> Tensor:
    return _binary("add", a, b)


def subtract(a: TensorLike, b: TensorLike) -> Tensor:
    return _binary("sub", a, b)


def multiply(a: TensorLike, b: TensorLike) -> Tensor:
    return _binary("mul", a, b)


def divide(a: TensorLike, b: TensorLike) -> Tensor:
    return _binary("div", a, b)


def power(a: TensorLike, b: TensorLike) -> Tensor:
    return _binary("pow", a, b)


def maximum(a: TensorLike, b: TensorLike) -> Tensor:
    return _binary("maximum", a, b)


def minimum(a: TensorLike, b: TensorLike) -> Tensor:
    return _binary("minimum", a, b)


def equal(a: TensorLike, b: TensorLike) -> Tensor:
    return _binary("eq", a, b)


def not_equal(a: TensorLike, b: TensorLike) -> Tensor:
    return _binary("ne", a, b)


def less(a: TensorLike, b: TensorLike) -> Tensor:
    return _binary("lt", a, b)


def less_equal(a: TensorLike, b: TensorLike) -> Tensor:
    return _binary("le", a, b)


def greater(a: TensorLike, b: TensorLike) -> Tensor:
    return _binary("gt", a, b)


def greater_equal(a: TensorLike, b: TensorLike) -> Tensor:
    return _binary("ge", a, b)


def logical_and(a: TensorLike, b: TensorLike) -> Tensor:
    return _binary("logical_and", a, b)


def logical_or(a: TensorLike, b: TensorLike) -> Tensor:
    return _binary("logical_or", a, b)


def where(condition: TensorLike, x: TensorLike, y: TensorLike) -> Tensor:
    cond, a, b = to_operands(condition, x, y)
    return emit("where", [cond, a, b])


def clip(x: Tensor, a_min: TensorLike | None, a_max: TensorLike | None) -> Tensor:
    """`x` limited to [a_min, a_max] (either may be None), as maximum/minimum nodes."""
    if a_min is not None:
        x = maximum(x, a_min)
    if a_max is not None:
        x = minimum(x, a_max)
    return x


# ---------------------------------------------------------------- linear algebra


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """NumPy matmul: 1-D operands are promoted and the added dim removed; batch dims
    broadcast."""
    return emit("matmul", [a, b])


def matmul_transposed(a: Tensor, b: Tensor) -> Tensor:
    """a (..., M, K) @ swapaxes(b, -1, -2) for b (..., N, K): (broadcast batch, M, N),
    as `x @ w.T` (nn.Linear's weight layout) reads b without a transposed copy."""
    return emit("matmul_transposed", [a, b])


def matmul_transposed_a(a: Tensor, b: Tensor) -> Tensor:
    """swapaxes(a, -1, -2) @ b for a (..., K, M) and b (..., K, N): (broadcast batch, M,
    N), as MLX's `x.T @ dy` reads a without a transposed copy."""
    return emit("matmul_transposed_a", [a, b])


# ---------------------------------------------------------------- reductions


def _reduce(op: str, x: Tensor, axis: int | Sequence[int] | None, keepdims: bool) -> Tensor:
    axes = normalize_axes(axis, x.ndim)
    return emit(op, [x], axes=axes, keepdims=bool(keepdims))


def sum(x: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
    return _reduce("sum", x, axis, keepdims)


def mean(x: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
    return _reduce("mean", x, axis, keepdims)


def max(x: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
    return _reduce("max", x, axis, keepdims)


def min(x: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
    return _reduce("min", x, axis, keepdims)


def prod(x: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
    """Product over `axis` (1 over an empty axis); bools multiply as int32, as sum counts."""
    return _reduce("prod", x, axis, keepdims)


def any(x: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
    """True where any element over `axis` is non-zero (False over an empty axis)."""
    return _reduce("any", x, axis, keepdims)


def all(x: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
    """True where every element over `axis` is non-zero (True over an empty axis)."""
    return _reduce("all", x, axis, keepdims)


def _arg_reduce(op: str, x: Tensor, axis: int | None, keepdims: bool) -> Tensor:
    if axis is None:
        flat = reshape(x, (-1,))
        result = emit(op, [flat], axis=0, keepdims=False)
        return reshape(result, (1,) * x.ndim) if keepdims else result
    return emit(op, [x], axis=normalize_axis(axis, x.ndim), keepdims=bool(keepdims))


def argmax(x: Tensor, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """Index of the largest element along `axis` (int32); axis None flattens first."""
    return _arg_reduce("argmax", x, axis, keepdims)


def argmin(x: Tensor, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """Index of the smallest element along `axis` (int32, the first on ties); axis None
    flattens first."""
    return _arg_reduce("argmin", x, axis, keepdims)


def _scan(op: str, x: Tensor, axis: int, dtype: DType | str | None) -> Tensor:
    if dtype is None:  # torch's rule: integers and bools accumulate in int64
        dtype = x.dtype if x.dtype.is_float else int64
    dtype = as_dtype(dtype).name
    if x.ndim == 0:  # torch scans a 0-d tensor along axis 0 or -1 as one element
        normalize_axis(axis, 1)
        return reshape(emit(op, [reshape(x, (1,))], axis=0, dtype=dtype), ())
    return emit(op, [x], axis=normalize_axis(axis, x.ndim), dtype=dtype)


def cumsum(x: Tensor, axis: int, dtype: DType | str | None = None) -> Tensor:
    """Running sum along `axis`, computed in `dtype` (torch's default: int64 for integer
    and bool inputs, else x's dtype); x is converted to `dtype` first."""
    return _scan("cumsum", x, axis, dtype)


def cumprod(x: Tensor, axis: int, dtype: DType | str | None = None) -> Tensor:
    """Running product along `axis`, with cumsum's dtype rule."""
    return _scan("cumprod", x, axis, dtype)


def softmax(x: Tensor, axis: int = -1) -> Tensor:
    return emit("softmax", [x], axis=normalize_axis(axis, x.ndim))


def log_softmax(x: Tensor, axis: int = -1) -> Tensor:
    return emit("log_softmax", [x], axis=normalize_axis(axis, x.ndim))


# ---------------------------------------------------------------- layout and views


def reshape(x: Tensor, shape: Sequence[int]) -> Tensor:
    """A view of `x` with `shape` (one -1 allowed); no copy, storage is contiguous.
    Errors resolving the -1 name `x` (`reshape of %3 mul: ...`)."""
    try:
        resolved = resolve_reshape(x.shape, tuple(shape))
    except (ShapeError, GraphError) as err:
        raise type(err)(f"reshape of {describe(x.node)}: {err}") from err
    return emit("reshape", [x], shape=resolved)


def transpose(x: Tensor, axes: Sequence[int] | None = None) -> Tensor:
    """Permute dims (reverse them when `axes` is None); makes a new contiguous buffer."""
    perm = (
        tuple(range(x.ndim))[::-1]
        if axes is None
        else tuple(normalize_axis(a, x.ndim) for a in axes)
    )
    return emit("transpose", [x], axes=perm)


def permute(x: Tensor, axes: Sequence[int]) -> Tensor:
    return transpose(x, axes)


def swapaxes(x: Tensor, axis1: int, axis2: int) -> Tensor:
    perm = list(range(x.ndim))
    a, b = normalize_axis(axis1, x.ndim), normalize_axis(axis2, x.ndim)
    perm[a], perm[b] = perm[b], perm[a]
    return transpose(x, perm)


def astype(x: Tensor, dtype: DType | str) -> Tensor:
    """Convert to `dtype`; to the same dtype it is a free view."""
    return emit("cast", [x], dtype=as_dtype(dtype).name)


def narrow(x: Tensor, axis: int, start: int, length: int) -> Tensor:
    """`length` entries from `start` along `axis` (a free view along axis 0). `start` and
    `length` may be `tg.Dim` extents; a negative int start counts from the axis end."""
    axis = normalize_axis(axis, x.ndim)
    start, length = extent_or_int(start, "narrow start"), extent_or_int(length, "narrow length")
    if is_static(start) and start < 0:
        start += x.shape[axis]
    return emit("narrow", [x], axis=axis, start=start, length=length)


def expand_dims(x: Tensor, axis: int | Sequence[int]) -> Tensor:
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    rank = x.ndim + len(axes)
    positions = normalize_axes(axes, rank)
    shape = list(x.shape)
    for p in positions:
        shape.insert(p, 1)
    return reshape(x, shape)


def squeeze(x: Tensor, axis: int | Sequence[int] | None = None) -> Tensor:
    if axis is None:
        axes = tuple(i for i, d in enumerate(x.shape) if d == 1)
    else:
        axes = normalize_axes(axis, x.ndim)
        bad = [a for a in axes if x.shape[a] != 1]
        if bad:
            raise GraphError(f"squeeze: axes {bad} of {x!r} are not of size 1")
    return reshape(x, [d for i, d in enumerate(x.shape) if i not in axes])


def flatten(x: Tensor, start_axis: int = 0, end_axis: int = -1) -> Tensor:
    if x.ndim == 0:
        return reshape(x, (1,))
    start, end = normalize_axis(start_axis, x.ndim), normalize_axis(end_axis, x.ndim)
    inner = math.prod(x.shape[start : end + 1])
    return reshape(x, (*x.shape[:start], inner, *x.shape[end + 1 :]))


def broadcast_to(x: TensorLike, shape: Sequence[int]) -> Tensor:
    shape = tuple(extent_or_int(d, "broadcast_to shape") for d in shape)
    return emit("broadcast_to", to_operands(x), shape=shape)


def concatenate(xs: Sequence[Tensor], axis: int = 0) -> Tensor:
    """Join along `axis`; mixed dtypes are promoted by casts first."""
    xs = list(xs)
    if not xs:
        raise GraphError("concatenate needs at least one tensor")
    dtype = xs[0].dtype
    for t in xs[1:]:
        dtype = promote_types(dtype, t.dtype)
    xs = [t if t.dtype == dtype else astype(t, dtype) for t in xs]
    return emit("concat", xs, axis=normalize_axis(axis, xs[0].ndim))


def stack(xs: Sequence[Tensor], axis: int = 0) -> Tensor:
    xs = list(xs)
    if not xs:
        raise GraphError("stack needs at least one tensor")
    axis = normalize_axis(axis, xs[0].ndim + 1)
    return concatenate([expand_dims(t, axis) for t in xs], axis)


def take(x: Tensor, indices: Tensor, axis: int = 0) -> Tensor:
    """Gather along `axis` (an embedding lookup when x is (vocab, dim) and axis is 0)."""
    return emit("take", [x, indices], axis=normalize_axis(axis, x.ndim))


def gather(x: Tensor, indices: Tensor, axis: int) -> Tensor:
    """torch.gather: out[i][j][k] = x[indices[i][j][k]][j][k] for axis 0 (likewise for
    others). `indices` has x's rank and no larger extent off `axis`; the result has its
    shape. Indices must lie in [0, x.shape[axis]): others are a RunError at run time."""
    return emit("gather", [x, indices], axis=normalize_axis(axis, x.ndim))


def slice_update(target: Tensor, update: Tensor, axis: int, start: int | Tensor) -> Tensor:
    """A copy of `target` with `update` written at `start` along `axis` (functional; the
    reinplace pass makes it write into `target` when that buffer dies here).

    `update` has `target`'s rank and extents except along `axis`. `start` is an int or
    a `tg.Dim` extent (fixed when the graph is built: start + update rows must fit, a
    ShapeError names both otherwise) or an int32/int64 scalar Tensor of shape () or (1,), a run-time
    position (a decode step's): it becomes the node's third operand and its `start`
    attribute is 0. Every backend then checks 0 <= start and start + rows <= extent
    before writing anything, a RunError naming the start, the row count and the axis
    length otherwise."""
    axis = normalize_axis(axis, target.ndim)
    if isinstance(start, Tensor):
        return emit("slice_update", [target, update, start], axis=axis, start=0)
    try:
        position = extent_or_int(start) if isinstance(start, sympy.Basic) else operator.index(start)
    except TypeError as err:
        raise GraphError(
            f"slice_update: start must be an int or an integer scalar Tensor but got {start!r}"
        ) from err
    return emit("slice_update", [target, update], axis=axis, start=position)
