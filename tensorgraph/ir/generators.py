"""Generators: ops with no tensor operand (`arange`, `full`, `zeros`, `ones`), after mlx.core.

Having no operand to name their graph, they take it from a leading Graph argument, the
`graph=` keyword, or the innermost `with graph:` block, in that order; with none of these
they raise GraphError. Default dtypes follow mlx.core: int32 for all-int arguments (and
int values), float32 otherwise, bool for a bool fill value.
"""

from __future__ import annotations

import sympy

from tensorgraph.errors import GraphError
from tensorgraph.ir.dims import extent_or_int
from tensorgraph.ir.dtypes import DType, as_dtype
from tensorgraph.ir.graph import Graph, current_graph
from tensorgraph.ir.tensor import Tensor, emit


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
    (one number means [0, start)), as mlx.core.arange; int32 when all are ints. start
    and stop may be `tg.Dim` extents (then start and step are ints)."""
    graph, numbers = _generator_args(args, graph, "arange")
    if not 1 <= len(numbers) <= 3:
        raise GraphError(f"arange takes 1 to 3 numbers but got {len(numbers)}")
    start, stop, step = (0, numbers[0], 1) if len(numbers) == 1 else (*numbers, 1)[:3]
    start, stop = (v if not isinstance(v, sympy.Basic) else extent_or_int(v) for v in (start, stop))
    if dtype is None:
        is_int = all(isinstance(v, int | sympy.Expr) for v in (start, stop, step))
        dtype = "int32" if is_int else "float32"
    return emit("arange", [], graph, start=start, stop=stop, step=step, dtype=as_dtype(dtype).name)


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
    return emit(
        "full",
        [],
        graph,
        shape=tuple(extent_or_int(d, "full shape") for d in shape),
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
