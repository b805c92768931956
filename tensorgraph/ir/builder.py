"""Tensor handles and the module-level op functions, named after `mlx.core`.

Every function appends one or more primitive nodes to the graph its tensor arguments
belong to. Python scalars become constants of the dtype a scalar takes next to the
tensor (`scalar_dtype`); operands of different dtypes are promoted with explicit casts
only where an op needs equal dtypes (concatenate). Axes accept negative values and are
stored normalised, so `x.sum(-1)` and `x.sum(1)` build the same node.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Union

import numpy as np

from tensorgraph.errors import GraphError
from tensorgraph.ir.dtypes import DType, as_dtype, promote_types, scalar_dtype
from tensorgraph.ir.graph import Graph, current_graph
from tensorgraph.ir.node import Node
from tensorgraph.ir.shapes import normalize_axes, normalize_axis, resolve_reshape

Scalar = int | float | bool
TensorLike = Union["Tensor", Scalar]


class Tensor:
    """A handle on one node of one graph; operators build new nodes in that graph."""

    __slots__ = ("graph", "id")

    def __init__(self, graph: Graph, node_id: int) -> None:
        self.graph = graph
        self.id = node_id

    @property
    def node(self) -> Node:
        return self.graph.node(self.id)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.node.shape

    @property
    def dtype(self) -> DType:
        return self.node.dtype

    @property
    def ndim(self) -> int:
        return len(self.node.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.node.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.node.nbytes

    def __repr__(self) -> str:
        node = self.node
        return f"Tensor(%{node.id} {node.op}, shape={node.shape}, dtype={node.dtype})"

    def __bool__(self) -> bool:
        raise GraphError(f"{self!r} has no truth value while the graph is being built")

    __hash__ = object.__hash__

    # arithmetic
    def __add__(self, other: TensorLike) -> Tensor:
        return add(self, other)

    def __radd__(self, other: TensorLike) -> Tensor:
        return add(other, self)

    def __sub__(self, other: TensorLike) -> Tensor:
        return subtract(self, other)

    def __rsub__(self, other: TensorLike) -> Tensor:
        return subtract(other, self)

    def __mul__(self, other: TensorLike) -> Tensor:
        return multiply(self, other)

    def __rmul__(self, other: TensorLike) -> Tensor:
        return multiply(other, self)

    def __truediv__(self, other: TensorLike) -> Tensor:
        return divide(self, other)

    def __rtruediv__(self, other: TensorLike) -> Tensor:
        return divide(other, self)

    def __pow__(self, other: TensorLike) -> Tensor:
        return power(self, other)

    def __rpow__(self, other: TensorLike) -> Tensor:
        return power(other, self)

    def __matmul__(self, other: Tensor) -> Tensor:
        return matmul(self, other)

    def __rmatmul__(self, other: Tensor) -> Tensor:
        return matmul(other, self)

    def __neg__(self) -> Tensor:
        return negative(self)

    def __abs__(self) -> Tensor:
        return abs(self)

    # comparisons build bool tensors, as in NumPy and MLX
    def __lt__(self, other: TensorLike) -> Tensor:
        return less(self, other)

    def __le__(self, other: TensorLike) -> Tensor:
        return less_equal(self, other)

    def __gt__(self, other: TensorLike) -> Tensor:
        return greater(self, other)

    def __ge__(self, other: TensorLike) -> Tensor:
        return greater_equal(self, other)

    def __eq__(self, other: TensorLike) -> Tensor:  # type: ignore[override]
        return equal(self, other)

    def __ne__(self, other: TensorLike) -> Tensor:  # type: ignore[override]
        return not_equal(self, other)

    def __invert__(self) -> Tensor:
        return logical_not(self)

    def __and__(self, other: TensorLike) -> Tensor:
        return logical_and(self, other)

    def __or__(self, other: TensorLike) -> Tensor:
        return logical_or(self, other)

    # methods mirroring the functions
    def reshape(self, *shape: int | Sequence[int]) -> Tensor:
        if len(shape) == 1 and not isinstance(shape[0], int):
            shape = tuple(shape[0])
        return reshape(self, shape)

    def transpose(self, *axes: int | Sequence[int]) -> Tensor:
        if len(axes) == 1 and not isinstance(axes[0], int):
            axes = tuple(axes[0])
        return transpose(self, axes or None)

    @property
    def T(self) -> Tensor:
        return transpose(self)

    def astype(self, dtype: DType | str) -> Tensor:
        return astype(self, dtype)

    def sum(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        return sum(self, axis, keepdims)

    def mean(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        return mean(self, axis, keepdims)

    def max(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        return max(self, axis, keepdims)

    def min(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        return min(self, axis, keepdims)

    def argmax(self, axis: int | None = None, keepdims: bool = False) -> Tensor:
        return argmax(self, axis, keepdims)

    def exp(self) -> Tensor:
        return exp(self)

    def log(self) -> Tensor:
        return log(self)

    def sqrt(self) -> Tensor:
        return sqrt(self)

    def square(self) -> Tensor:
        return square(self)

    def flatten(self, start_axis: int = 0, end_axis: int = -1) -> Tensor:
        return flatten(self, start_axis, end_axis)

    def swapaxes(self, axis1: int, axis2: int) -> Tensor:
        return swapaxes(self, axis1, axis2)

    def __getitem__(self, index: object) -> Tensor:
        return _index(self, index)


# ---------------------------------------------------------------- plumbing


def _graph_of(*values: object) -> Graph:
    graphs = {id(v.graph): v.graph for v in values if isinstance(v, Tensor)}
    if not graphs:
        raise GraphError("an op needs at least one Tensor argument to know its graph")
    if len(graphs) > 1:
        names = sorted(g.name for g in graphs.values())
        raise GraphError(f"tensors from different graphs {names} cannot be combined")
    return next(iter(graphs.values()))


def _emit(op: str, inputs: Sequence[Tensor], graph: Graph | None = None, **attrs: object) -> Tensor:
    graph = graph if graph is not None else _graph_of(*inputs)
    for t in inputs:
        if not isinstance(t, Tensor):
            raise GraphError(f"{op}: expected a Tensor but got {t!r}")
        if t.graph is not graph:
            raise GraphError(f"{op}: {t!r} belongs to graph {t.graph.name!r}, not {graph.name!r}")
    node = graph.add(op, [t.id for t in inputs], attrs)
    return Tensor(graph, node.id)


def _operands(*values: TensorLike) -> list[Tensor]:
    """Tensors for `values`, turning Python scalars into constants of the weak dtype."""
    graph = _graph_of(*values)
    tensors = [v for v in values if isinstance(v, Tensor)]
    anchor = tensors[0].dtype
    for t in tensors[1:]:
        anchor = promote_types(anchor, t.dtype)
    result = []
    for v in values:
        if isinstance(v, Tensor):
            result.append(v)
        elif isinstance(v, bool | int | float):
            result.append(graph.constant(v, scalar_dtype(v, anchor)))
        else:
            raise GraphError(f"cannot use {v!r} of type {type(v).__name__} as a tensor operand")
    return result


def _unary(op: str, x: Tensor, **attrs: object) -> Tensor:
    return _emit(op, [x], **attrs)


def _binary(op: str, a: TensorLike, b: TensorLike) -> Tensor:
    return _emit(op, _operands(a, b))


# ---------------------------------------------------------------- elementwise


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
    cond, a, b = _operands(condition, x, y)
    return _emit("where", [cond, a, b])


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
    return _emit("matmul", [a, b])


# ---------------------------------------------------------------- reductions


def _reduce(op: str, x: Tensor, axis: int | Sequence[int] | None, keepdims: bool) -> Tensor:
    axes = normalize_axes(axis, x.ndim)
    return _emit(op, [x], axes=axes, keepdims=bool(keepdims))


def sum(x: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
    return _reduce("sum", x, axis, keepdims)


def mean(x: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
    return _reduce("mean", x, axis, keepdims)


def max(x: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
    return _reduce("max", x, axis, keepdims)


def min(x: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
    return _reduce("min", x, axis, keepdims)


def argmax(x: Tensor, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """Index of the largest element along `axis` (int32); axis None flattens first."""
    if axis is None:
        flat = reshape(x, (-1,))
        result = _emit("argmax", [flat], axis=0, keepdims=False)
        return reshape(result, (1,) * x.ndim) if keepdims else result
    return _emit("argmax", [x], axis=normalize_axis(axis, x.ndim), keepdims=bool(keepdims))


def softmax(x: Tensor, axis: int = -1) -> Tensor:
    return _emit("softmax", [x], axis=normalize_axis(axis, x.ndim))


def log_softmax(x: Tensor, axis: int = -1) -> Tensor:
    return _emit("log_softmax", [x], axis=normalize_axis(axis, x.ndim))


# ---------------------------------------------------------------- layout and views


def reshape(x: Tensor, shape: Sequence[int]) -> Tensor:
    """A view of `x` with `shape` (one -1 allowed); no copy, storage is contiguous."""
    return _emit("reshape", [x], shape=resolve_reshape(x.shape, tuple(shape)))


def transpose(x: Tensor, axes: Sequence[int] | None = None) -> Tensor:
    """Permute dims (reverse them when `axes` is None); makes a new contiguous buffer."""
    perm = (
        tuple(range(x.ndim))[::-1]
        if axes is None
        else tuple(normalize_axis(a, x.ndim) for a in axes)
    )
    return _emit("transpose", [x], axes=perm)


def permute(x: Tensor, axes: Sequence[int]) -> Tensor:
    return transpose(x, axes)


def swapaxes(x: Tensor, axis1: int, axis2: int) -> Tensor:
    perm = list(range(x.ndim))
    a, b = normalize_axis(axis1, x.ndim), normalize_axis(axis2, x.ndim)
    perm[a], perm[b] = perm[b], perm[a]
    return transpose(x, perm)


def astype(x: Tensor, dtype: DType | str) -> Tensor:
    """Convert to `dtype`; to the same dtype it is a free view."""
    return _emit("cast", [x], dtype=as_dtype(dtype).name)


def narrow(x: Tensor, axis: int, start: int, length: int) -> Tensor:
    """`length` entries from `start` along `axis` (a free view along axis 0)."""
    axis = normalize_axis(axis, x.ndim)
    if start < 0:
        start += x.shape[axis]
    return _emit("narrow", [x], axis=axis, start=int(start), length=int(length))


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
    inner = int(np.prod(x.shape[start : end + 1], dtype=np.int64))
    return reshape(x, (*x.shape[:start], inner, *x.shape[end + 1 :]))


def broadcast_to(x: TensorLike, shape: Sequence[int]) -> Tensor:
    return _emit("broadcast_to", _operands(x), shape=tuple(int(d) for d in shape))


def concatenate(xs: Sequence[Tensor], axis: int = 0) -> Tensor:
    """Join along `axis`; mixed dtypes are promoted by casts first."""
    xs = list(xs)
    if not xs:
        raise GraphError("concatenate needs at least one tensor")
    dtype = xs[0].dtype
    for t in xs[1:]:
        dtype = promote_types(dtype, t.dtype)
    xs = [t if t.dtype == dtype else astype(t, dtype) for t in xs]
    return _emit("concat", xs, axis=normalize_axis(axis, xs[0].ndim))


def stack(xs: Sequence[Tensor], axis: int = 0) -> Tensor:
    xs = list(xs)
    if not xs:
        raise GraphError("stack needs at least one tensor")
    axis = normalize_axis(axis, xs[0].ndim + 1)
    return concatenate([expand_dims(t, axis) for t in xs], axis)


def take(x: Tensor, indices: Tensor, axis: int = 0) -> Tensor:
    """Gather along `axis` (an embedding lookup when x is (vocab, dim) and axis is 0)."""
    return _emit("take", [x, indices], axis=normalize_axis(axis, x.ndim))


def slice_update(target: Tensor, update: Tensor, axis: int, start: int) -> Tensor:
    """A copy of `target` with `update` written at `start` along `axis` (functional; the
    reinplace pass makes it write into `target` when that buffer dies here)."""
    return _emit(
        "slice_update", [target, update], axis=normalize_axis(axis, target.ndim), start=int(start)
    )


# ---------------------------------------------------------------- generators


def _generator_args(args: tuple, graph: Graph | None, op: str) -> tuple[Graph, tuple]:
    """Generators have no tensor operand to name their graph: take it from a leading
    Graph argument, the `graph=` keyword, or the innermost `with graph:` block."""
    if args and isinstance(args[0], Graph):
        graph, args = args[0], args[1:]
    graph = graph if graph is not None else current_graph()
    if graph is None:
        raise GraphError(
            f"{op} needs a graph: pass it first, as graph=, or build inside `with graph:`"
        )
    return graph, args


def arange(*args: float, dtype: DType | str | None = None, graph: Graph | None = None) -> Tensor:
    """`arange([graph,] start, stop=None, step=1, dtype=None)`: [start, stop) in `step`s
    (one number means [0, start)), as mlx.core.arange; int32 when all are ints."""
    graph, numbers = _generator_args(args, graph, "arange")
    if not 1 <= len(numbers) <= 3:
        raise GraphError(f"arange takes 1 to 3 numbers but got {len(numbers)}")
    start, stop, step = (0, numbers[0], 1) if len(numbers) == 1 else (*numbers, 1)[:3]
    if dtype is None:
        is_int = all(isinstance(v, int) for v in (start, stop, step))
        dtype = "int32" if is_int else "float32"
    return _emit("arange", [], graph, start=start, stop=stop, step=step, dtype=as_dtype(dtype).name)


def full(*args: object, dtype: DType | str | None = None, graph: Graph | None = None) -> Tensor:
    """`full([graph,] shape, value, dtype=None)`, as mlx.core.full: the dtype defaults to
    the value's (bool, int32 or float32)."""
    graph, rest = _generator_args(args, graph, "full")
    if len(rest) == 3 and dtype is None:
        *rest, dtype = rest
    if len(rest) != 2:
        raise GraphError("full takes a shape and a value")
    shape, value = rest
    if dtype is None:
        dtype = (
            "bool"
            if isinstance(value, bool)
            else "int32"
            if isinstance(value, int)
            else ("float32")
        )
    return _emit(
        "full",
        [],
        graph,
        shape=tuple(int(d) for d in shape),
        value=value,
        dtype=as_dtype(dtype).name,
    )


def zeros(*args: object, dtype: DType | str = "float32", graph: Graph | None = None) -> Tensor:
    """`zeros([graph,] shape, dtype=float32)`, as mlx.core.zeros."""
    graph, rest = _generator_args(args, graph, "zeros")
    if len(rest) == 2:
        rest, dtype = rest[:1], rest[1]
    return full(graph, rest[0], 0, dtype=dtype)


def ones(*args: object, dtype: DType | str = "float32", graph: Graph | None = None) -> Tensor:
    """`ones([graph,] shape, dtype=float32)`, as mlx.core.ones."""
    graph, rest = _generator_args(args, graph, "ones")
    if len(rest) == 2:
        rest, dtype = rest[:1], rest[1]
    return full(graph, rest[0], 1, dtype=dtype)


# ---------------------------------------------------------------- convolution and pooling


def _pair(value: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(value, int):
        return (value, value)
    a, b = value
    return (int(a), int(b))


def conv2d(
    input: Tensor,
    weight: Tensor,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    groups: int = 1,
) -> Tensor:
    """2-D convolution, NCHW input and OIHW weight (PyTorch's layout), MLX's arg names."""
    return _emit(
        "conv2d",
        [input, weight],
        stride=_pair(stride),
        padding=_pair(padding),
        dilation=_pair(dilation),
        groups=int(groups),
    )


def max_pool2d(
    x: Tensor,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: int | Sequence[int] = 0,
) -> Tensor:
    kernel = _pair(kernel_size)
    return _emit(
        "max_pool2d",
        [x],
        kernel_size=kernel,
        stride=_pair(stride) if stride is not None else kernel,
        padding=_pair(padding),
    )


def avg_pool2d(
    x: Tensor,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: int | Sequence[int] = 0,
    count_include_pad: bool = True,
) -> Tensor:
    kernel = _pair(kernel_size)
    return _emit(
        "avg_pool2d",
        [x],
        kernel_size=kernel,
        stride=_pair(stride) if stride is not None else kernel,
        padding=_pair(padding),
        count_include_pad=count_include_pad,
    )


# ---------------------------------------------------------------- indexing


def _index(x: Tensor, index: object) -> Tensor:
    """Basic indexing: ints, slices (any step), None and Ellipsis. Unit-step slices map to
    narrow (a view on axis 0); other steps gather with take; ints narrow then drop the axis."""
    items = list(index) if isinstance(index, tuple) else [index]
    if any(isinstance(i, Tensor) for i in items):
        raise GraphError("tensor indices are not basic indexing; use tg.take(x, indices, axis)")
    if items.count(Ellipsis) > 1:
        raise GraphError("an index can only have one ellipsis")
    explicit = len([i for i in items if i is not None and i is not Ellipsis])
    if explicit > x.ndim:
        raise GraphError(f"too many indices ({explicit}) for {x!r}")
    if Ellipsis in items:
        at = items.index(Ellipsis)
        items[at : at + 1] = [slice(None)] * (x.ndim - explicit)
    items += [slice(None)] * (x.ndim - len([i for i in items if i is not None]))
    result, axis, final_shape = x, 0, []
    for item in items:
        if item is None:
            final_shape.append(1)
            continue
        dim = x.shape[axis]
        if isinstance(item, int | np.integer):
            i = int(item) + dim if item < 0 else int(item)
            if not 0 <= i < dim:
                raise GraphError(f"index {item} is out of range for axis {axis} of {x!r}")
            result = narrow(result, axis, i, 1)
        elif isinstance(item, slice):
            start, stop, step = item.indices(dim)
            count = len(range(start, stop, step))
            if step == 1:
                if count != dim:
                    result = narrow(result, axis, start, count)
            else:
                positions = result.graph.constant(np.arange(start, stop, step, dtype=np.int32))
                result = take(result, positions, axis)
            final_shape.append(count)
        else:
            raise GraphError(f"unsupported index {item!r} of type {type(item).__name__}")
        axis += 1
    if tuple(final_shape) != result.shape:
        result = reshape(result, final_shape)
    return result
