"""The reference interpreter: the plainest possible execution, the first oracle.

Walks `graph.nodes` in order and evaluates each node with its NumPy kernel (inputs and
params from `bind_feeds`, constants from their payload). A value is dropped right after
its last reader, unless it is an output, so large graphs run in modest memory; that
affects nothing else. The outputs are fresh copies, one per listed output (a repeated
output gives distinct arrays), never an alias of a caller's input or a bound param.
States read the arrays given in `state` (zeros when none is given); their new values
are outputs (`graph.state_positions`), so the caller commits them (Program.run does).
A graph with `tg.Dim`s runs at the dims' values read off the feeds' shapes (`bind_dims`),
as the graph specialised at those values: any length in the dims' ranges.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tensorgraph.ir.graph import Graph
from tensorgraph.ir.specialize import specialize
from tensorgraph.runtime.dim_feeds import bind_dims
from tensorgraph.runtime.feeds import bind_feeds
from tensorgraph.runtime.kernels import constant_value, evaluate


def state_feeds(graph: Graph, state: Mapping[str, object] | None) -> dict[int, object]:
    """state node id -> its value from `state` (by name), zeros for a missing one."""
    state = state or {}
    return {
        n.id: state[n.name] if n.name in state else np.zeros(n.shape, n.dtype.to_numpy())
        for n in graph.states
    }


def _last_readers(graph: Graph) -> dict[int, int]:
    """node id -> the step of its last reader, or its own step when nothing reads it."""
    last = {}
    for step, node in enumerate(graph.nodes):
        last[node.id] = step
        for source in node.inputs:
            last[source] = step
    return last


def run_reference(
    graph: Graph,
    inputs: Mapping[str, object],
    params: Mapping[str, object] | None = None,
    state: Mapping[str, np.ndarray] | None = None,
) -> list[np.ndarray]:
    """The outputs of `graph` for `inputs` and `params`, in output order (state updates
    included), states read from `state` (name -> array; zeros for a missing name).

    RunError (from `bind_feeds`) names a missing, extra or mistyped input or param before
    any op runs, and (from `bind_dims`) a dim that the feeds give two values, a value
    outside its range or a dim no feed carries; a kernel's run-time RunError names its
    node (see runtime.kernels)."""
    if graph.dims:
        graph = specialize(graph, **bind_dims(graph, inputs, params))
    feeds = bind_feeds(graph, inputs, params)
    feeds.update(state_feeds(graph, state))
    last = _last_readers(graph)
    outputs = set(graph.outputs)
    values: dict[int, np.ndarray] = {}
    for step, node in enumerate(graph.nodes):
        if node.id in feeds:
            values[node.id] = feeds[node.id]
        elif node.op == "constant":
            values[node.id] = constant_value(node)
        else:
            values[node.id] = evaluate(node, [values[i] for i in node.inputs])
        for source in (*node.inputs, node.id):
            if last[source] == step and source not in outputs:
                values.pop(source, None)
    return [np.array(values[o], order="C", copy=True) for o in graph.outputs]
