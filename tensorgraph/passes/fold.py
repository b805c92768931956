"""Constant folding: values that depend only on constants and bound params are computed
once at compile time and become bound params of the constant segment.

A transposed `nn.Linear` weight, a batch norm's scale and shift, a rotary table or a
causal mask built from `arange`: each becomes one constant instead of arena traffic on
every run. Outputs are unchanged bit for bit (the folded values are computed by the
same NumPy kernels the reference interpreter runs). Bound params are compile-time
constants to the compiler: a bound param that nothing reads after folding is dropped.
Unbound params and inputs are run-time values and never fold.

The trade-off: a folded value lives in the constant segment for the whole run, where a
computed one occupies the arena only while live. Only the values that run-time values
or outputs read stay resident; what they are computed from is computed once at compile
time and dropped, however large (up to `COMPILE_FOLD`, a bound on the compiler's own
memory): Swin v2's position bias comes out of a 512-wide MLP over a coordinate table,
and folding the bias keeps that MLP's activation out of the arena. A value that
would stay resident folds only when it is no larger than the bound values it is
computed from (a transpose, a scale) or is small (`SMALL_FOLD` bytes: masks and tables
of typical sequence lengths), or, for larger values computed from small ones (T5's
relative position bias, built from a few hundred bytes of bucket weights), while the
constant segment grows by at most `GROWTH_SHARE` of the bound weights' bytes in all,
first come first served from the outputs back: a model's weights set the scale of what
is worth keeping resident. A value the rule refuses is computed at run time, and the
known values it reads are weighed in its place: a large broadcast of a small value in a
small model stays a run-time computation of a folded small value. A generator
(`full`, `arange`: no inputs) is never made a constant by itself: computing it costs
nothing, and as a run-time value its buffer can be reused in place (a KV cache built by
`zeros` and updated by `slice_update`), which a constant's bytes never can. A value
computed from a bound value that stays held (read at run time elsewhere, or an output)
never stores that data a second time: it folds only if it adds no bytes, or if it is
small and smaller than the held sources (a tied embedding's transpose stays a run-time
transpose of the one table, which the transposed_matmul pass then folds into the matmul
that reads it: no copy at all); and a dropped source's
bytes offset only one folded value. Folding never grows the bytes a graph holds beyond
`SMALL_FOLD` per folded value plus `GROWTH_SHARE` of its weights, and never by a held
weight's bytes. A value whose shape or attributes hold a `tg.Dim` never folds here: its
bytes differ per length, and a constant has one value (the specialised graph folds it at
its own length, with the same kernels, so outputs agree bit for bit). On a graph with
dims, `prefix_fold` then folds those of them whose value at every length is a prefix of
the value at the max (passes/prefix_fold.py).
O(n) plus the kernels' own work (and the sets of bound values each known value is
computed from).
"""

from __future__ import annotations

from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node
from tensorgraph.ir.ops import OPS
from tensorgraph.passes.prefix_fold import prefix_fold
from tensorgraph.passes.result import PassResult
from tensorgraph.runtime.kernels import constant_value, evaluate

SMALL_FOLD = 1 << 16  # bytes: a value this small folds whatever it is computed from
# Of the bound weights' bytes: the most larger folds may add in all. An encoder's shared
# position bias or a full-size mask can be a sizable part of a small model's weights
# (T5's (4, 128, 128) bias is half of a 2-layer, 64-wide config's): folding it trades
# arena bytes for as many constant bytes and saves its computation on every run.
GROWTH_SHARE = 1 / 2
# A dequantized weight stays a run-time value: the user quantized the graph to hold the
# small form (passes/quantize.py), and folding would store the float one beside it.
NEVER_FOLDED = frozenset({"dequantize"})
# Bytes: the largest value computed only at compile time. It never becomes a constant,
# so this bounds the compiler's own memory, not the program's.
COMPILE_FOLD = 64 << 20


def _computable(graph: Graph) -> set[int]:
    """Ids of the values known at compile time: bound params, constants, and the pure
    values computed from them alone (generators included), each at most COMPILE_FOLD."""
    known: set[int] = set()
    for node in graph.nodes:
        if OPS[node.op].boundary:
            bound = node.op == "constant" or (
                node.op == "param" and node.name in graph.param_values
            )
        else:
            bound = (
                OPS[node.op].pure
                and not node.symbolic  # its size is an expression: known only per length
                and node.op not in NEVER_FOLDED
                and node.nbytes <= COMPILE_FOLD
                and all(i in known for i in node.inputs)
            )
        if bound:
            known.add(node.id)
    return known


def _folded(graph: Graph, known: set[int], held: set[int]) -> tuple[set[int], set[int]]:
    """(ids of the values that become constants, ids that run-time values or outputs read).

    Walks the graph backwards, so that every reader of a value is decided before it:
    a known value that a run-time value or an output reads folds when the size rule
    admits it; otherwise it is computed at run time, and the known values it reads are
    considered in turn. A source's bytes are credited once, to the first value that folds
    from it (a source freed for two folded values is not dropped twice); a source in `held`
    stays in the program whatever folds, so it credits nothing, and a value computed from
    one folds only if it adds no bytes (it would hold that source's data a second time:
    a transposed tied embedding beside the embedding itself), or if it is small and
    smaller than the held sources (a norm of a weight). Growth beyond the rule is
    charged to the weights' share, last value first."""
    nodes = {node.id: node for node in graph.nodes}
    sources: dict[int, frozenset[int]] = {}  # known id -> the bound values it is computed from
    for node in graph.nodes:
        if node.id in known:
            leaves = frozenset((node.id,)) if OPS[node.op].boundary else frozenset()
            sources[node.id] = leaves.union(*(sources[i] for i in node.inputs))
    credit = {i: nodes[i].nbytes for i in known if OPS[nodes[i].op].boundary and i not in held}
    growth = GROWTH_SHARE * sum(v.nbytes for v in graph.param_values.values())
    needed = set(graph.outputs)
    folded: set[int] = set()
    for node in reversed(graph.nodes):
        if node.id not in known:
            needed.update(node.inputs)
        elif node.id in needed and node.inputs:
            free = [i for i in sorted(sources[node.id]) if i in credit]
            freed = sum(credit[i] for i in free)
            held_bytes = sum(nodes[i].nbytes for i in sources[node.id] if i in held)
            if held_bytes:
                grows = max(0, node.nbytes - freed)
                admitted = grows == 0 or SMALL_FOLD >= node.nbytes < held_bytes
            else:
                grows = 0 if node.nbytes <= max(SMALL_FOLD, freed) else node.nbytes - freed
                admitted = grows <= growth
            if admitted:
                growth -= grows
                folded.add(node.id)
                spent = node.nbytes
                for i in free:  # the bytes this value now stands for
                    spent, credit[i] = max(0, spent - credit[i]), max(0, credit[i] - spent)
            else:
                needed.update(node.inputs)
    return folded, needed


def _decided(graph: Graph, known: set[int]) -> tuple[set[int], set[int]]:
    """`_folded` at a fixed point: every bound value the run-time graph reads was weighed
    as held. Starting from none, each round adds the bound values the last round's
    run-time graph reads; the held set only grows, so this ends within one round per
    bound value, at the first round that reads no value it did not hold (holding a
    value the final graph does not read only refuses a fold: never a duplicate)."""
    held: set[int] = set()
    while True:
        folded, needed = _folded(graph, known, held)
        reads = {i for i in needed if i in known and OPS[graph.node(i).op].boundary}
        if reads <= held:
            return folded, needed
        held |= reads


def _values(graph: Graph, folded: set[int]) -> dict[int, object]:
    """Node id -> compile-time value, for the folded values and what they are computed
    from (computed by the reference kernels, in graph order)."""
    wanted = set(folded)
    for node in reversed(graph.nodes):
        if node.id in wanted:
            wanted.update(node.inputs)
    values: dict[int, object] = {}
    for node in graph.nodes:
        if node.id not in wanted:
            continue
        if node.op == "param":
            values[node.id] = graph.param_values[node.name]
        elif node.op == "constant":
            values[node.id] = constant_value(node)
        else:
            values[node.id] = evaluate(node, [values[i] for i in node.inputs])
    return values


def fold_weights(graph: Graph) -> Graph:
    """`graph` with every folding value that a run-time value or an output reads replaced
    by a bound param named `folded.<id>` (see the module docstring)."""
    return fold(graph).graph


def fold(graph: Graph) -> PassResult:
    """The folding pass: counters `folded` (values now bound params) and `dropped`
    (static nodes no longer computed); on a graph with dims, then `prefix_fold`
    (passes/prefix_fold.py: values of the dims alone, a constant at the max read through
    narrows) with its counters."""
    result = _fold(graph)
    if not graph.dims:
        return result
    prefixed = prefix_fold(result.graph)
    return PassResult(prefixed.graph, {**result.stats, **prefixed.stats})


def _fold(graph: Graph) -> PassResult:
    known = _computable(graph)
    folded, needed = _decided(graph, known)
    static = _values(graph, folded)
    replaced: dict[int, Node] = {}
    values = dict(graph.param_values)
    taken = {n.name for n in graph.nodes if n.name} | set(values)
    for node in graph.nodes:
        if node.id in folded:
            name = f"folded.{node.id}"
            while name in taken:
                name += "_"
            taken.add(name)
            attrs = {"name": name, "shape": node.shape, "dtype": node.dtype.name}
            replaced[node.id] = Node(node.id, "param", (), attrs, node.shape, node.dtype)
            values[name] = static[node.id]
    kept = []
    for node in graph.nodes:
        node = replaced.get(node.id, node)
        if node.id in known and node.id not in needed:
            continue  # only feeds folded values: computed above, never at run time
        kept.append(node)
    if len(kept) == len(graph) and not replaced:
        return PassResult(graph, {"folded": 0, "dropped": 0})
    live_names = {n.name for n in kept if n.op == "param"}
    params = {k: v for k, v in values.items() if k in live_names}
    result = Graph.from_nodes(
        graph.name, kept, graph.outputs, params, graph.state_positions, graph.state_values
    )
    return PassResult(result, {"folded": len(replaced), "dropped": len(graph) - len(kept)})
