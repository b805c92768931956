"""Reduced precision: a float32 graph converted to float16 or bfloat16.

`to_dtype(graph, dtype)` declares every float32 input, param (bound values rounded
once, to nearest even), constant and state in `dtype`, turns every float32 `dtype`
attribute (casts, `full`, `arange`, scans) into `dtype`, and replays the ops, whose
dtypes then follow from their operands. Every op of the IR already computes a
reduced-precision result in float32 and rounds it once (the reference's semantics,
which the arena follows bit for bit and MLX within rounding), so what the conversion
decides is which values are *stored* in reduced precision.

With `keep_float32=True` (the default) it follows torch's autocast: the ops autocast
runs in float32 keep float32 results (their reduced-precision operands are cast up
first), and the ops autocast runs in reduced precision cast float32 operands down, so
one float32 result does not drag every later op up:

- kept in float32 (`FLOAT32_OPS`): softmax, log_softmax, layer_norm, rms_norm,
  group_norm (norms' statistics), sum, mean, prod, cumsum, cumprod (reductions'
  accumulators), exp, expm1, log, log1p, power, rsqrt, reciprocal, tan;
- computed in `dtype` (`REDUCED_OPS`): matmul, quantized_matmul, conv2d,
  conv_transpose2d, conv2d_weight_backward, scaled_dot_product_attention;
- every other op takes its operands as they come (promotion: float32 with `dtype`
  gives float32).

The trade-off: float32 values take twice the arena bytes of reduced ones. With
`keep_float32=False` every float value is stored in `dtype` (how MLX users run bf16
models: each op still computes in float32 and rounds once), the smallest plan.
Invariant: the result verifies, keeps the graph's inputs, params, states and outputs
by name and position, and changes no integer or bool value's dtype.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import ml_dtypes
import numpy as np

from tensorgraph.errors import DTypeError
from tensorgraph.ir.dtypes import DType, as_dtype, float32
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node
from tensorgraph.ir.ops import OPS
from tensorgraph.passes.result import PassResult
from tensorgraph.runtime.kernels import constant_value

FLOAT32_OPS = frozenset(
    {
        "softmax",
        "log_softmax",
        "layer_norm",
        "rms_norm",
        "group_norm",
        "sum",
        "mean",
        "prod",
        "cumsum",
        "cumprod",
        "exp",
        "expm1",
        "log",
        "log1p",
        "power",
        "rsqrt",
        "reciprocal",
        "tan",
    }
)
REDUCED_OPS = frozenset(
    {
        "matmul",
        "matmul_transposed",
        "matmul_transposed_a",
        "quantized_matmul",
        "conv2d",
        "conv_transpose2d",
        "conv2d_weight_backward",
        "scaled_dot_product_attention",
    }
)
HALF = ("float16", "bfloat16")


def to_dtype(
    graph: Graph | Mapping[str, Graph], dtype: object, keep_float32: bool = True
) -> Graph | dict[str, Graph]:
    """`graph` in `dtype` (float16 or bfloat16; float32 gives `graph` itself; see the
    module docstring), or each graph of a mapping of entries, sharing the converted
    arrays of the weights they share. DTypeError for any other dtype."""
    if isinstance(graph, Graph):
        return convert(graph, dtype, keep_float32).graph
    memo: dict = {}
    return {name: convert(g, dtype, keep_float32, memo).graph for name, g in graph.items()}


def convert(
    graph: Graph, dtype: object, keep_float32: bool = True, memo: dict | None = None
) -> PassResult:
    """The conversion as a pass: counters `converted` (values whose dtype changed),
    `upcasts` and `downcasts` (casts inserted around FLOAT32_OPS and REDUCED_OPS).
    Graphs converted with one `memo` dict get the same array for a weight they share."""
    memo = {} if memo is None else memo
    target = as_dtype(dtype)
    if target == float32:
        return PassResult(graph, {"converted": 0, "upcasts": 0, "downcasts": 0})
    if target.name not in HALF:
        raise DTypeError(f"to_dtype converts to float16, bfloat16 or float32, not {target}")
    new = Graph(graph.name)
    ids: dict[int, int] = {}
    counts = {"converted": 0, "upcasts": 0, "downcasts": 0}
    for node in graph.nodes:
        attrs = _attrs(node, target)
        if node.op == "constant":
            value = constant_value(node)
            if node.dtype == float32:
                value = value.astype(target.to_numpy())
            added = new.constant(value, as_dtype(value.dtype), node.name or "")
            ids[node.id] = added.id
        else:
            inputs = [ids[i] for i in node.inputs]
            if keep_float32 and node.op in FLOAT32_OPS:
                inputs = _cast_all(new, inputs, frozenset(HALF), float32, counts, "upcasts")
            elif keep_float32 and node.op in REDUCED_OPS:
                inputs = _cast_all(new, inputs, frozenset({"float32"}), target, counts, "downcasts")
            ids[node.id] = _add(new, node, inputs, attrs, target, counts)
        if node.op == "param" and node.name in graph.param_values:
            value = graph.param_values[node.name]
            if node.dtype == float32:
                if id(value) not in memo:  # kept with its conversion: the id stays unique
                    memo[id(value)] = (value, np.asarray(value).astype(target.to_numpy()))
                value = memo[id(value)][1]
            new.param_values[node.name] = value
        counts["converted"] += new.node(ids[node.id]).dtype != node.dtype
    outputs = [ids[o] for o in graph.outputs]
    declared = {state.name: state.dtype for state in new.states}
    for name, position in graph.state_positions.items():  # an update in its state's dtype
        value = new.node(outputs[position])
        if value.dtype != declared[name]:
            outputs[position] = new.add("cast", (value.id,), {"dtype": declared[name].name}).id
            counts["downcasts"] += 1
    initial = {  # a state's initial value in the state's new dtype
        name: np.asarray(value).astype(declared[name].to_numpy())
        for name, value in graph.state_values.items()
    }
    result = Graph.from_nodes(
        graph.name, new.nodes, outputs, new.param_values, graph.state_positions, initial
    )
    return PassResult(result, counts)


def _add(new: Graph, node: Node, inputs: list[int], attrs: dict, target: DType, counts: dict):
    """The new id of `node` replayed on `inputs`. An op that takes operands of one dtype
    only (an update's target and value, say) and meets float32 beside `target` gets its
    float32 operands cast to `target`."""
    try:
        return new.add(node.op, inputs, attrs).id
    except DTypeError:
        inputs = _cast_all(new, inputs, frozenset({"float32"}), target, counts, "downcasts")
        return new.add(node.op, inputs, attrs).id


def _attrs(node: Node, target: DType) -> dict:
    """`node`'s attributes with every float32 dtype attribute turned into `target`."""
    schema = OPS[node.op].attrs
    return {
        key: target.name if schema[key].kind == "dtype" and value == "float32" else value
        for key, value in node.attr_dict.items()
    }


def _cast_all(
    new: Graph, inputs: list[int], source: frozenset, to: DType, counts: dict, counter: str
) -> list[int]:
    """`inputs` with each float operand whose dtype is in `source` cast to `to`."""
    cast = []
    for i in inputs:
        if new.node(i).dtype.name in source:
            i = new.add("cast", (i,), {"dtype": to.name}).id
            counts[counter] += 1
        cast.append(i)
    return cast


def depth(graph: Graph) -> int:
    """Compute ops on the longest path from a boundary node to an output: how many
    roundings an output can carry."""
    longest: dict[int, int] = {}
    for node in graph.nodes:
        own = 0 if OPS[node.op].boundary else 1
        longest[node.id] = own + max((longest[i] for i in node.inputs), default=0)
    return max((longest[o] for o in graph.outputs), default=0)


def rounding_tolerance(graph: Graph, dtype: object, scale: float) -> float:
    """How far two evaluations of `graph` that each round every value to `dtype` once
    (and may round a value to different neighbours: a backend's accumulation order)
    can be expected to differ at an output of magnitude `scale`: 2 sqrt(D) units of the
    dtype's epsilon, D = `depth(graph)`, as D independent roundings add like a random
    walk. The bound for comparing backends in reduced precision (tests and the CLI)."""
    eps = float(ml_dtypes.finfo(as_dtype(dtype).to_numpy()).eps)
    return 2 * math.sqrt(max(depth(graph), 1)) * eps * scale
