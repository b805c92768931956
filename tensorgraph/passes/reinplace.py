"""Reinplacing: an op writes its output into an operand's buffer when that is safe.

Candidates are elementwise ops (any operand) and slice_update (its target, operand 0:
a KV-cache write that would otherwise copy the cache). Operand k of node n, run at step
t, is reused (`inplace=k`) when, by the ONE liveness analysis of the graph:

1. the operand's root buffer is read by nothing after step t, through any view or
   earlier in-place alias (`last_read[root] == t`), so no later reader can see the
   overwrite; a graph output's root lives to the end, so it never qualifies;
2. the operand is at offset 0 of its root, and operand, root and output have the same
   byte size and dtype (no broadcast growth, no dtype change such as a comparison into
   bool), so the output covers exactly the bytes it replaces;
3. the root is not an input, param or constant (the caller's or the constant segment's);
4. no other operand of n reads the same root at a different offset (an overlapping
   read-while-write would depend on the kernel's iteration order).

Why one analysis of the graph as given suffices for chains: when n reuses operand o's
root r, r's own readers all ran by step t (rule 1), so the merged class's last read is
n's own last read. A later op m reusing n therefore sees exactly the merged lifetime
when it asks `last_read[n's root] == step(m)`, by induction along the chain. Decisions
come from the analysis, never from a hand-kept set of readers (the bug of published
reinplace passes: a value read later as a non-mutated operand was overwritten early).
Preserves every output for every input. O(n) after the analysis.
"""

from __future__ import annotations

from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node, evolve
from tensorgraph.ir.ops import INPLACE_ATTR, OPS
from tensorgraph.passes.result import PassResult
from tensorgraph.planner.liveness import Liveness, analyze


def _slots(node: Node) -> range:
    if node.op == "slice_update":
        return range(1)
    if OPS[node.op].elementwise:
        return range(len(node.inputs))
    return range(0)


def reusable_operand(graph: Graph, node: Node, step: int, live: Liveness) -> int:
    """The operand index `node` may overwrite (rules 1-4 of the module doc), or -1."""
    if node.attr(INPLACE_ATTR, -1) != -1:
        return node.attr(INPLACE_ATTR)
    for k in _slots(node):
        operand = graph.node(node.inputs[k])
        where = live.storage[operand.id]
        root = graph.node(where.root)
        if (
            live.last_read[root.id] != step
            or where.offset != 0
            or not operand.nbytes == root.nbytes == node.nbytes
            or operand.dtype != node.dtype
            or OPS[root.op].boundary
            or root.id in live.constants
        ):
            continue
        others = (live.storage[i] for j, i in enumerate(node.inputs) if j != k)
        if any(s.root == root.id and s.offset != 0 for s in others):
            continue
        return k
    return -1


def reinplace(graph: Graph) -> PassResult:
    live = analyze(graph)
    nodes, count, reused = [], 0, 0
    for step, node in enumerate(graph.nodes):
        if node.attr(INPLACE_ATTR, -1) == -1 and _slots(node):
            k = reusable_operand(graph, node, step, live)
            if k != -1:
                node = evolve(node, attrs={**node.attr_dict, INPLACE_ATTR: k})
                count += 1
                reused += node.nbytes
        nodes.append(node)
    if not count:
        return PassResult(graph, {"reinplaced": 0})
    result = Graph.from_nodes(graph.name, nodes, graph.outputs, graph.param_values)
    return PassResult(result, {"reinplaced": count, "bytes_reused": reused})
