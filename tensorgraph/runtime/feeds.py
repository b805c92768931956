"""Run-time feeds: the checked value of every input and param node of a graph.

Every backend calls `bind_feeds` first, so a missing, extra, mis-shaped or mistyped
value is a RunError naming it before any op runs (never a partial result)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tensorgraph.errors import RunError
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node


def _checked(kind: str, node: Node, value: object) -> np.ndarray:
    expected = node.dtype.to_numpy()
    name = node.attr("name")
    if isinstance(value, np.ndarray):
        array = value
    else:
        try:
            array = np.asarray(value, dtype=expected)
        except (TypeError, ValueError) as err:
            raise RunError(f"{kind} {name!r}: cannot convert {type(value).__name__}") from err
    if tuple(array.shape) != node.shape:
        raise RunError(f"{kind} {name!r}: expected shape {node.shape} but got {array.shape}")
    if array.dtype != expected:
        raise RunError(f"{kind} {name!r}: expected dtype {node.dtype} but got {array.dtype}")
    return array


def bind_feeds(
    graph: Graph, inputs: Mapping[str, object], params: Mapping[str, object] | None = None
) -> dict[int, np.ndarray]:
    """node id -> checked array for every input and param node. Params come from
    `params`, else from the graph's bound values. RunError names the culprit."""
    params = dict(params or {})
    inputs = dict(inputs)
    input_nodes = {n.attr("name"): n for n in graph.nodes if n.op == "input"}
    param_nodes = {n.attr("name"): n for n in graph.nodes if n.op == "param"}
    extra = sorted(set(inputs) - set(input_nodes))
    if extra:
        known = ", ".join(sorted(input_nodes)) or "none"
        raise RunError(f"graph {graph.name!r}: unknown input(s) {extra}; its inputs: {known}")
    extra = sorted(set(params) - set(param_nodes))
    if extra:
        known = ", ".join(sorted(param_nodes)) or "none"
        raise RunError(f"graph {graph.name!r}: unknown param(s) {extra}; its params: {known}")
    missing = sorted(set(input_nodes) - set(inputs))
    if missing:
        raise RunError(f"graph {graph.name!r}: missing input(s) {missing}")
    values = {n.id: _checked("input", n, inputs[name]) for name, n in input_nodes.items()}
    for name, node in param_nodes.items():
        if name in params:
            values[node.id] = _checked("param", node, params[name])
        elif name in graph.param_values:
            values[node.id] = graph.param_values[name]
        else:
            raise RunError(f"graph {graph.name!r}: param {name!r} is neither bound nor given")
    return values
