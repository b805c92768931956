"""View aliasing: marks every reshape, same-dtype cast and axis-0 narrow (whatever
`ops.view_offset` accepts) with `view=True`, so it shares its input's storage at a byte
offset and owns no buffer; chains of views resolve to one root in liveness. Numerics are
unchanged (a view's bytes are exactly its input's, row-major). O(n)."""

from __future__ import annotations

from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import evolve
from tensorgraph.ir.ops import VIEW_ATTR, view_offset
from tensorgraph.passes.result import PassResult


def view_alias(graph: Graph) -> PassResult:
    nodes, aliased, freed = [], 0, 0
    for node in graph.nodes:
        if VIEW_ATTR in node.attr_dict and not node.attr(VIEW_ATTR):
            source = graph.node(node.inputs[0])
            if (
                view_offset(node.op, node.attr_dict, source.shape, node.dtype, source.dtype)
                is not None
            ):
                node = evolve(node, attrs={**node.attr_dict, VIEW_ATTR: True})
                aliased += 1
                freed += node.nbytes
        nodes.append(node)
    if not aliased:
        return PassResult(graph, {"aliased": 0})
    result = Graph.from_nodes(graph.name, nodes, graph.outputs, graph.param_values)
    return PassResult(result, {"aliased": aliased, "view_bytes": freed})
