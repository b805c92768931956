"""Tensor handles: a node of a graph plus operators that build new nodes in that graph.

A `Tensor` is only (graph, node id); its shape and dtype are the node's. Operators and
methods delegate to the module-level op functions (`ir.functions`, `ir.indexing`), which
append nodes through `emit`. Python scalars next to a Tensor become constants of the dtype
a scalar takes beside it (`to_operands`, `scalar_dtype`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Union

import sympy

from tensorgraph.errors import GraphError
from tensorgraph.ir.dtypes import DType, promote_types, scalar_dtype
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node

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
    def size(self) -> int | sympy.Expr:
        """Element count: an int, or an expression of the shape's `tg.Dim`s."""
        return math.prod(self.node.shape)

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
        return _fn.add(self, other)

    def __radd__(self, other: TensorLike) -> Tensor:
        return _fn.add(other, self)

    def __sub__(self, other: TensorLike) -> Tensor:
        return _fn.subtract(self, other)

    def __rsub__(self, other: TensorLike) -> Tensor:
        return _fn.subtract(other, self)

    def __mul__(self, other: TensorLike) -> Tensor:
        return _fn.multiply(self, other)

    def __rmul__(self, other: TensorLike) -> Tensor:
        return _fn.multiply(other, self)

    def __truediv__(self, other: TensorLike) -> Tensor:
        return _fn.divide(self, other)

    def __rtruediv__(self, other: TensorLike) -> Tensor:
        return _fn.divide(other, self)

    def __pow__(self, other: TensorLike) -> Tensor:
        return _fn.power(self, other)

    def __rpow__(self, other: TensorLike) -> Tensor:
        return _fn.power(other, self)

    def __matmul__(self, other: Tensor) -> Tensor:
        return _fn.matmul(self, other)

    def __rmatmul__(self, other: Tensor) -> Tensor:
        return _fn.matmul(other, self)

    def __neg__(self) -> Tensor:
        return _fn.negative(self)

    def __abs__(self) -> Tensor:
        return _fn.abs(self)

    # comparisons build bool tensors, as in NumPy and MLX
    def __lt__(self, other: TensorLike) -> Tensor:
        return _fn.less(self, other)

    def __le__(self, other: TensorLike) -> Tensor:
        return _fn.less_equal(self, other)

    def __gt__(self, other: TensorLike) -> Tensor:
        return _fn.greater(self, other)

    def __ge__(self, other: TensorLike) -> Tensor:
        return _fn.greater_equal(self, other)

    def __eq__(self, other: TensorLike) -> Tensor:  # type: ignore[override]
        return _fn.equal(self, other)

    def __ne__(self, other: TensorLike) -> Tensor:  # type: ignore[override]
        return _fn.not_equal(self, other)

    def __invert__(self) -> Tensor:
        return _fn.logical_not(self)

    def __and__(self, other: TensorLike) -> Tensor:
        return _fn.logical_and(self, other)

    def __or__(self, other: TensorLike) -> Tensor:
        return _fn.logical_or(self, other)

    # methods mirroring the functions
    def reshape(self, *shape: int | Sequence[int]) -> Tensor:
        if len(shape) == 1 and not isinstance(shape[0], int | sympy.Basic):
            shape = tuple(shape[0])
        return _fn.reshape(self, shape)

    def transpose(self, *axes: int | Sequence[int]) -> Tensor:
        if len(axes) == 1 and not isinstance(axes[0], int):
            axes = tuple(axes[0])
        return _fn.transpose(self, axes or None)

    @property
    def T(self) -> Tensor:
        return _fn.transpose(self)

    def astype(self, dtype: DType | str) -> Tensor:
        return _fn.astype(self, dtype)

    def sum(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        return _fn.sum(self, axis, keepdims)

    def mean(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        return _fn.mean(self, axis, keepdims)

    def max(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        return _fn.max(self, axis, keepdims)

    def min(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        return _fn.min(self, axis, keepdims)

    def argmax(self, axis: int | None = None, keepdims: bool = False) -> Tensor:
        return _fn.argmax(self, axis, keepdims)

    def argmin(self, axis: int | None = None, keepdims: bool = False) -> Tensor:
        return _fn.argmin(self, axis, keepdims)

    def prod(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        return _fn.prod(self, axis, keepdims)

    def any(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        return _fn.any(self, axis, keepdims)

    def all(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        return _fn.all(self, axis, keepdims)

    def cumsum(self, axis: int, dtype: object = None) -> Tensor:
        return _fn.cumsum(self, axis, dtype)

    def cumprod(self, axis: int, dtype: object = None) -> Tensor:
        return _fn.cumprod(self, axis, dtype)

    def exp(self) -> Tensor:
        return _fn.exp(self)

    def log(self) -> Tensor:
        return _fn.log(self)

    def sqrt(self) -> Tensor:
        return _fn.sqrt(self)

    def square(self) -> Tensor:
        return _fn.square(self)

    def flatten(self, start_axis: int = 0, end_axis: int = -1) -> Tensor:
        return _fn.flatten(self, start_axis, end_axis)

    def swapaxes(self, axis1: int, axis2: int) -> Tensor:
        return _fn.swapaxes(self, axis1, axis2)

    def __getitem__(self, index: object) -> Tensor:
        return _indexing.basic_index(self, index)


# ---------------------------------------------------------------- plumbing


def graph_of(*values: object) -> Graph:
    """The one graph the Tensors among `values` belong to; GraphError when there is no
    Tensor or they come from different graphs."""
    graphs = {id(v.graph): v.graph for v in values if isinstance(v, Tensor)}
    if not graphs:
        raise GraphError("an op needs at least one Tensor argument to know its graph")
    if len(graphs) > 1:
        names = sorted(g.name for g in graphs.values())
        raise GraphError(f"tensors from different graphs {names} cannot be combined")
    return next(iter(graphs.values()))


def emit(op: str, inputs: Sequence[Tensor], graph: Graph | None = None, **attrs: object) -> Tensor:
    """Append `op(inputs, **attrs)` to `graph` (by default the inputs' graph) and return its
    handle. Every input must be a Tensor of that graph (GraphError naming the op and the
    input otherwise); the graph checks the attributes and infers shape and dtype."""
    graph = graph if graph is not None else graph_of(*inputs)
    for t in inputs:
        if not isinstance(t, Tensor):
            raise GraphError(f"{op}: expected a Tensor but got {t!r}")
        if t.graph is not graph:
            raise GraphError(f"{op}: {t!r} belongs to graph {t.graph.name!r}, not {graph.name!r}")
    node = graph.add(op, [t.id for t in inputs], attrs)
    return Tensor(graph, node.id)


def to_operands(*values: TensorLike) -> list[Tensor]:
    """Tensors for `values`, turning Python scalars into constants of the weak dtype."""
    graph = graph_of(*values)
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


# The operators and methods call the op functions, and those modules import `Tensor` and
# `emit` from here: they are imported last, once both exist, and used as modules so that
# either side may be imported first.
from tensorgraph.ir import functions as _fn  # noqa: E402
from tensorgraph.ir import indexing as _indexing  # noqa: E402
