"""Constant folding: values that depend only on constants and bound params are computed
once at compile time and become bound params of the constant segment.

A transposed `nn.Linear` weight, a batch norm's scale and shift, a rotary table or a
causal mask built from `arange`: each becomes one constant instead of arena traffic on
every run. Outputs are unchanged bit for bit (the folded values are computed by the
same NumPy kernels the reference interpreter runs). Bound params are compile-time
constants to the compiler: a bound param that nothing reads after folding is dropped.
Unbound params and inputs are run-time values and never fold.

The trade-off: a folded value lives in the constant segment for the whole run, where a
computed one occupies the arena only while live. So a value folds only when it is no
larger than the static values it is computed from (a transpose, a scale) or is small
(`SMALL_FOLD` bytes: masks and tables of typical sequence lengths), or, for larger
values computed from small ones (T5's relative position bias, built from a few hundred
bytes of bucket weights), while the constant segment grows by at most
`GROWTH_SHARE` of the bound weights' bytes in all, first come first served in graph
order: a model's weights set the scale of what is worth keeping resident. A large
broadcast of a small value in a small model stays a run-time computation. A generator
(`full`, `arange`: no inputs) is never made a constant by itself: computing it costs
nothing, and as a run-time value its buffer can be reused in place (a KV cache built by
`zeros` and updated by `slice_update`), which a constant's bytes never can. Folding
never grows the bytes a graph holds beyond `SMALL_FOLD` per folded value plus
`GROWTH_SHARE` of its weights. O(n) plus the kernels' own work.
"""

from __future__ import annotations

from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node
from tensorgraph.ir.ops import OPS
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


def _static_values(graph: Graph) -> dict[int, object]:
    """Node id -> compile-time value, for every value that folds (see module doc)."""
    static: dict[int, object] = {}
    growth = GROWTH_SHARE * sum(v.nbytes for v in graph.param_values.values())
    for node in graph.nodes:
        if node.op == "param" and node.name in graph.param_values:
            static[node.id] = graph.param_values[node.name]
        elif node.op == "constant":
            static[node.id] = constant_value(node)
        elif (
            not OPS[node.op].boundary
            and OPS[node.op].pure
            and node.op not in NEVER_FOLDED
            and all(i in static for i in node.inputs)
        ):
            sources = sum(static[i].nbytes for i in set(node.inputs))
            grows = 0 if node.nbytes <= max(SMALL_FOLD, sources) else node.nbytes - sources
            if grows <= growth:
                growth -= grows
                static[node.id] = evaluate(node, [static[i] for i in node.inputs])
    return static


def fold_weights(graph: Graph) -> Graph:
    """`graph` with every folding value that a run-time value or an output reads replaced
    by a bound param named `folded.<id>` (see the module docstring)."""
    return fold(graph).graph


def fold(graph: Graph) -> PassResult:
    """The folding pass: counters `folded` (values now bound params) and `dropped`
    (static nodes no longer computed)."""
    static = _static_values(graph)
    needed = set(graph.outputs)
    for node in graph.nodes:
        if node.id not in static:
            needed.update(node.inputs)
    replaced: dict[int, Node] = {}
    values = dict(graph.param_values)
    taken = {n.name for n in graph.nodes if n.name} | set(values)
    for node in graph.nodes:
        if node.id in static and node.id in needed and node.inputs and not OPS[node.op].boundary:
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
        if node.id in static and node.id not in needed and node.op != "input":
            continue  # only feeds folded values: computed above, never at run time
        kept.append(node)
    if len(kept) == len(graph) and not replaced:
        return PassResult(graph, {"folded": 0, "dropped": 0})
    live_names = {n.name for n in kept if n.op == "param"}
    params = {k: v for k, v in values.items() if k in live_names}
    result = Graph.from_nodes(graph.name, kept, graph.outputs, params, graph.state_positions)
    return PassResult(result, {"folded": len(replaced), "dropped": len(graph) - len(kept)})
