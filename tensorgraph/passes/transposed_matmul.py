"""Transposed-operand matmul: `matmul(a, transpose(w))`, where the transpose swaps w's
last two axes (and keeps the others), becomes `matmul_transposed(a, w)`, which reads w
as it is stored. Also through a reshape of the transpose that regroups only the batch
axes: `matmul(a, reshape(transpose(w)))` reads a reshape of w (a view) instead. A
matmul whose b is not so rewritten and whose a is such a transpose, `matmul(transpose(x),
dy)` (every weight gradient autodiff writes: x^T @ dy, the activation's transposed copy
held beside dy in the backward), becomes `matmul_transposed_a(x, dy)`.

Why. Every tensor of the IR is dense and row-major, so a transpose is a copy with a
buffer of its own; MLX's `x @ w.T` makes none (its transpose is a strided view, and its
matmul hands the transpose flag to BLAS). Such a transpose costs its bytes in the plan
(and in the segment cost model, where a tied embedding's 1 MiB transpose cut a decode
step in two) and, on the NumPy executors, a copy per run. The rewrite removes it from
the plan wherever the matmul was its only reader (dce then drops it; a transpose still
read elsewhere stays for that reader).

It runs after fold: a transpose of a bound weight that fold turns into a constant (an
nn.Linear weight nothing else reads) is left to fold, so the NumPy executors keep
multiplying by a stored transposed copy (their `matmul_transposed` kernel copies the
transpose on every run, to stay bit for bit equal to matmul of the copy); what is left
is run-time transposes: a tied embedding's (held for the lookup too), attention's k^T
in written-out attention, the transposes of states and inputs.

Invariants: every output keeps its value bit for bit on the NumPy executors (see the
kernel); the order stays topological (a reshape added for the regrouped case is placed
right before its matmul, and reads a node defined earlier); node ids are kept and new
ones are above every existing id. O(n).
"""

from __future__ import annotations

from attrs import evolve

from tensorgraph.ir.dims import is_static
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node
from tensorgraph.passes.result import PassResult


def _swaps_last_two(node: Node) -> bool:
    """`node` is a transpose whose axes are (0, 1, ..., n-3, n-1, n-2), n >= 2."""
    if node.op != "transpose":
        return False
    rank = len(node.shape)
    axes = tuple(node.attr("axes"))
    return rank >= 2 and axes == (*range(rank - 2), rank - 1, rank - 2)


def _untransposed(graph: Graph, b: Node) -> tuple[int, tuple | None] | None:
    """(id of w, shape of the reshape of w to read, or None for w itself) when `b` is a
    transpose of w swapping its last two axes, or a reshape of one that keeps the last
    two axes (regrouping only the batch axes, static shapes); else None."""
    if _swaps_last_two(b):
        return b.inputs[0], None
    if b.op != "reshape" or len(b.shape) < 2:
        return None
    source = graph.node(b.inputs[0])
    if not _swaps_last_two(source) or tuple(b.shape[-2:]) != tuple(source.shape[-2:]):
        return None
    if not all(is_static(d) for d in (*b.shape, *source.shape)):
        return None
    w = graph.node(source.inputs[0])
    # b[i, k, n] = transpose[j, k, n] = w[j, n, k], with i and j the same row-major
    # position among the batch axes: so b = swap(reshape(w, batch of b + (n, k)))
    return w.id, (*b.shape[:-2], b.shape[-1], b.shape[-2])


def transposed_matmul(graph: Graph) -> PassResult:
    """`graph` with each matmul of a transposed operand b (module docstring) rewritten
    to `matmul_transposed`, when a has two or more axes, and else each matmul of a
    transposed operand a (swapping its last two axes) and a b of two or more axes to
    `matmul_transposed_a` (stats: `absorbed`, the matmuls rewritten); `graph` itself
    when there is none."""
    nodes: list[Node] = []
    next_id = max((n.id for n in graph.nodes), default=-1) + 1
    absorbed = 0
    bypassed: list[int] = []  # the operands b replaced, then the transposes under them
    for node in graph.nodes:
        if node.op == "matmul" and len(graph.node(node.inputs[0]).shape) >= 2:
            b = graph.node(node.inputs[1])
            found = _untransposed(graph, b)
            a = graph.node(node.inputs[0])
            if found is None and len(b.shape) >= 2 and _swaps_last_two(a):
                # a^T @ b (a weight gradient's x^T @ dy): a read as stored
                bypassed.append(a.id)
                node = evolve(node, op="matmul_transposed_a", inputs=(a.inputs[0], b.id))
                absorbed += 1
            elif found is not None:
                bypassed += [b.id] if b.op == "transpose" else [b.id, b.inputs[0]]
                w_id, regrouped = found
                if regrouped is not None:
                    w = graph.node(w_id)
                    attrs = {"shape": regrouped}
                    nodes.append(Node(next_id, "reshape", (w_id,), attrs, regrouped, w.dtype))
                    w_id, next_id = next_id, next_id + 1
                node = evolve(node, op="matmul_transposed", inputs=(node.inputs[0], w_id))
                absorbed += 1
        nodes.append(node)
    if not absorbed:
        return PassResult(graph, {"absorbed": 0})
    kept = _without_unread(nodes, bypassed, graph)
    return PassResult(graph.rebuilt(kept), {"absorbed": absorbed})


def _without_unread(nodes: list[Node], bypassed: list[int], graph: Graph) -> list[Node]:
    """`nodes` less the bypassed transposes and reshapes no node and no output reads any
    more (a reshape first, then the transpose it read): the rewrite's own dead code, so
    that the plan loses their buffers even where dce does not run after this pass."""
    readers: dict[int, int] = {}
    for node in nodes:
        for i in node.inputs:
            readers[i] = readers.get(i, 0) + 1
    kept_ids = set(graph.outputs)
    dropped: set[int] = set()
    for node_id in dict.fromkeys(bypassed):  # reshapes come before the transposes they read
        if readers.get(node_id, 0) == 0 and node_id not in kept_ids:
            dropped.add(node_id)
            for i in graph.node(node_id).inputs:
                readers[i] -= 1
    return [n for n in nodes if n.id not in dropped]
