"""Weight folding: computations whose inputs are all known at compile time (bound params,
constants, generators) are evaluated once with the NumPy kernels and become bound params.

A transposed `nn.Linear` weight, a batch norm's scale and shift, a rotary table or a
causal mask built from `arange`: each becomes one constant of the constant segment
instead of arena traffic on every run. The outputs are unchanged bit for bit (the same
kernels the reference interpreter runs compute the folded values). Bound params that
nothing reads afterwards are dropped: they are the importer's weights, not the user's
signature.
"""

from __future__ import annotations

from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node
from tensorgraph.ir.ops import OPS
from tensorgraph.runtime.kernels import constant_value, evaluate


def fold_weights(graph: Graph) -> Graph:
    """`graph` with every compile-time-known, non-boundary value that a run-time value or an
    output reads replaced by a bound param (named `folded.<id>`); see the module doc."""
    static: dict[int, object] = {}
    for node in graph.nodes:
        if node.op == "param" and node.name in graph.param_values:
            static[node.id] = graph.param_values[node.name]
        elif node.op == "constant":
            static[node.id] = constant_value(node)
        elif (
            not OPS[node.op].boundary
            and OPS[node.op].pure
            and all(i in static for i in node.inputs)
        ):
            static[node.id] = evaluate(node, [static[i] for i in node.inputs])
    needed = set(graph.outputs)
    for node in graph.nodes:
        if node.id not in static:
            needed.update(node.inputs)
    replaced: dict[int, Node] = {}
    values = dict(graph.param_values)
    for node in graph.nodes:
        if node.id in static and node.id in needed and not OPS[node.op].boundary:
            name = f"folded.{node.id}"
            attrs = {"name": name, "shape": node.shape, "dtype": node.dtype.name}
            replaced[node.id] = Node(node.id, "param", (), attrs, node.shape, node.dtype)
            values[name] = static[node.id]
    kept = []
    for node in graph.nodes:
        node = replaced.get(node.id, node)
        if node.id in static and node.id not in needed and node.op != "input":
            continue  # only feeds folded values: computed above, never at run time
        kept.append(node)
    live_names = {n.name for n in kept if n.op == "param"}
    params = {k: v for k, v in values.items() if k in live_names}
    return Graph.from_nodes(graph.name, kept, graph.outputs, params)
