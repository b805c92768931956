"""Common-subexpression elimination: merges nodes with equal op, attributes, shape, dtype
and (already merged) inputs; a commutative op compares its inputs as a multiset. Inputs
and params never merge (each is a distinct value the caller supplies); constants merge
when their bytes, shape and dtype agree and they carry no user name (a named constant
is the user's, kept as written); only pure ops merge. Preserves every output for every
input and the topological order. One pass over the nodes with a dict: O(n)."""

from __future__ import annotations

from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node
from tensorgraph.ir.ops import OPS
from tensorgraph.passes.result import PassResult


def cse_key(node: Node) -> tuple:
    """What makes two nodes the same computation (inputs already rewired)."""
    inputs = tuple(sorted(node.inputs)) if OPS[node.op].commutative else node.inputs
    return (node.op, node.attrs, node.shape, node.dtype, inputs)


def _mergeable(node: Node) -> bool:
    opdef = OPS[node.op]
    if node.op in ("input", "param"):
        return False
    if node.op == "constant":
        return not node.attr("name")
    return opdef.pure


def cse(graph: Graph) -> PassResult:
    survivor: dict[tuple, int] = {}  # cse key -> id of the node kept
    merged: dict[int, int] = {}  # dropped id -> id that replaces it
    for node in graph.nodes:
        if not _mergeable(node):
            continue
        if any(i in merged for i in node.inputs):
            node = Node(
                node.id,
                node.op,
                tuple(merged.get(i, i) for i in node.inputs),
                node.attrs,
                node.shape,
                node.dtype,
            )
        kept = survivor.setdefault(cse_key(node), node.id)
        if kept != node.id:
            merged[node.id] = kept
    if not merged:
        return PassResult(graph, {"merged": 0})
    return PassResult(graph.replace_uses(merged), {"merged": len(merged)})
