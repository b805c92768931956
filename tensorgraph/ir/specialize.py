"""Specialisation: a graph with symbolic dimensions, at given values of its dims.

`specialize(graph, seq=40)` replaces every `tg.Dim` named in the call by its value in
every shape and attribute, giving the graph the builder would have made with those ints
in place of the Dims: the bridge to everything that needs static shapes (the planner,
the backends) and the oracle of later steps ("the reference compiled at that static
length"). Inference proved each op's conditions for every value in the dims' ranges,
so a value inside the range needs no re-inference; a value outside it is refused.
Dims not named stay symbolic (a partial specialisation); naming them all gives a static
graph. Ids, names, outputs, state updates and bound params are kept.
"""

from __future__ import annotations

import operator

import sympy

from tensorgraph.errors import GraphError
from tensorgraph.ir.dims import Dim, evaluate
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node


def dim_values(graph: Graph, values: dict[str, object]) -> dict[Dim, int]:
    """`values` (dim name -> int) as Dim -> int for `graph`; GraphError naming the dim
    for a name the graph has no Dim of, a value that is not an int, or one outside the
    dim's range."""
    dims = graph.dims
    result = {}
    for name, value in values.items():
        if name not in dims:
            listed = ", ".join(sorted(dims)) or "none"
            raise GraphError(f"graph {graph.name!r} has no dim {name!r}; its dims: {listed}")
        dim = dims[name]
        try:
            if isinstance(value, bool):
                raise TypeError
            number = operator.index(value)
        except TypeError:
            raise GraphError(f"dim {name!r}: value {value!r} is not an int") from None
        if not dim.min <= number <= dim.max:
            raise GraphError(
                f"dim {name!r}: value {number} is outside its range [{dim.min}, {dim.max}]"
            )
        result[dim] = number
    return result


def specialize(graph: Graph, **values: int) -> Graph:
    """`graph` with each named Dim replaced by its value (see the module docstring).
    GraphError (from `dim_values`) for an unknown dim or a value outside its range."""
    bound = dim_values(graph, values)
    if not bound:
        return graph
    memo: dict[object, object] = {}

    def at(value: object) -> object:
        if isinstance(value, sympy.Basic):
            if value not in memo:
                memo[value] = evaluate(value, bound)
            return memo[value]
        if type(value) is tuple:
            return tuple(at(v) for v in value)
        return value

    nodes = []
    for node in graph.nodes:
        shape = tuple(d if type(d) is int else at(d) for d in node.shape)
        attrs = tuple((k, at(v)) for k, v in node.attrs)
        if shape == node.shape and attrs == node.attrs:
            nodes.append(node)
        else:
            nodes.append(Node(node.id, node.op, node.inputs, attrs, shape, node.dtype))
    return Graph.from_nodes(
        graph.name, nodes, graph.outputs, graph.param_values, graph.state_positions
    )
