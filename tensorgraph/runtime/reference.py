"""The reference interpreter: the plainest possible execution, the first oracle.

Walks the nodes in order, evaluates each with its NumPy kernel, and returns fresh
copies of the outputs (never an alias of a caller's array). Values are dropped after
their last reader, so large graphs run in modest memory; that affects nothing else."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tensorgraph.ir.graph import Graph
from tensorgraph.runtime.feeds import bind_feeds
from tensorgraph.runtime.kernels import constant_value, evaluate


def run_reference(
    graph: Graph, inputs: Mapping[str, object], params: Mapping[str, object] | None = None
) -> list[np.ndarray]:
    """The outputs of `graph` for `inputs`/`params`, in output order (see module doc)."""
    values = bind_feeds(graph, inputs, params)
    last_use = {}
    for step, node in enumerate(graph.nodes):
        for i in node.inputs:
            last_use[i] = step
    keep = set(graph.outputs)
    for step, node in enumerate(graph.nodes):
        if node.op == "constant":
            values[node.id] = constant_value(node)
        elif node.id not in values:
            values[node.id] = evaluate(node, [values[i] for i in node.inputs])
        for i in dict.fromkeys(node.inputs):
            if last_use[i] == step and i not in keep:
                del values[i]
    return [np.array(values[o], copy=True) for o in graph.outputs]
