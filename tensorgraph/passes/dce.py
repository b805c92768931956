"""Dead-code elimination: keeps exactly the nodes some output depends on, plus every
input, param and state (the caller's signature: dropping one would change what `run`
accepts or what the program's state holds; a state update is an output). Preserves
every output for every input, and the node order. O(n + edges)."""

from __future__ import annotations

from tensorgraph.ir.graph import Graph
from tensorgraph.passes.result import PassResult


def dce(graph: Graph) -> PassResult:
    needed: set[int] = set()
    stack = list(graph.outputs)
    while stack:
        node_id = stack.pop()
        if node_id in needed:
            continue
        needed.add(node_id)
        stack.extend(graph.node(node_id).inputs)
    needed |= {n.id for n in graph.nodes if n.op in ("input", "param", "state")}
    removed = len(graph) - len(needed)
    if not removed:
        return PassResult(graph, {"removed": 0})
    return PassResult(graph.keep(needed), {"removed": removed})
