"""FLOP estimates per op family: the cost model of rematerialisation (planner/remat_milp.py).

`flops(node)` counts the floating-point operations one evaluation of `node` performs,
from its shape and its inputs' shapes, by op family:

- matmul (and matmul_transposed(_a), gather_mm, quantized_matmul): 2 * M * N * K per batch
  element;
- conv2d / conv_transpose2d: 2 * output elements * C_in / groups * kh * kw (the
  transposed convolution: 2 * input elements * C_out / groups * kh * kw; the weight
  gradient: 2 * cotangent elements * C_in / groups * kh * kw, the forward's count);
- scaled_dot_product_attention: its two matmuls, 2 * 2 * B * H * L * S * D, plus the
  softmax over the scores (5 per score);
- normalisations (layer_norm, rms_norm, group_norm), softmax, log_softmax: 5 per element;
- reductions, cumulative ops, pools, sort: 1 per input element (sort: log2 n more);
- elementwise ops and other computing ops: 1 per output element (a fused `elementwise`
  node: 1 per element of each of its steps);
- boundary nodes, layout and view ops (reshape, transpose, narrow, broadcast_to, cast,
  concat, pad, take, gather, slice and index updates): 0. They move bytes but compute
  nothing, as AOTAutograd's partitioner counts them ("fusible", free to recompute).

Estimates, not measurements: they rank recompute choices, and every figure the
rematerialisation reports is in these units.
"""

from __future__ import annotations

import math

from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node
from tensorgraph.ir.ops import OPS

LAYOUT_OPS = frozenset(
    {
        "reshape",
        "transpose",
        "narrow",
        "broadcast_to",
        "cast",
        "concat",
        "pad",
        "take",
        "gather",
        "slice_update",
        "index_update",
        "arange",
        "full",
        "state",
    }
)
PER_ELEMENT_5 = frozenset({"layer_norm", "rms_norm", "group_norm", "softmax", "log_softmax"})
PER_INPUT_ELEMENT = frozenset(
    {
        "sum",
        "mean",
        "max",
        "min",
        "prod",
        "all",
        "any",
        "argmax",
        "argmin",
        "cumsum",
        "cumprod",
        "max_pool2d",
        "avg_pool2d",
        "adaptive_max_pool2d",
        "adaptive_avg_pool2d",
        "scatter_add",
    }
)


def _elements(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


def flops(graph: Graph, node: Node) -> int:
    """The estimated FLOPs of one evaluation of `node` (a node of `graph`), >= 0, by
    the op families of the module docstring."""
    op = node.op
    if OPS[op].boundary or op in LAYOUT_OPS:
        return 0
    shapes = [graph.node(i).shape for i in node.inputs]
    out = _elements(node.shape)
    if op == "elementwise":  # one per element of each step (ir/elementwise_fused.py)
        return out * (node.attr("program").count(";") + 1)
    if op in (
        "matmul",
        "matmul_transposed",
        "matmul_transposed_a",
        "gather_mm",
        "quantized_matmul",
    ):
        a = shapes[0]
        inner = (a[-2] if op == "matmul_transposed_a" else a[-1]) if a else 1
        return 2 * out * inner
    if op == "conv2d":
        weight = shapes[1]  # (C_out, C_in / groups, kh, kw)
        return 2 * out * _elements(weight[1:])
    if op == "conv2d_weight_backward":  # (O, Cg, kh, kw) from g (N, O, OH, OW)
        return 2 * _elements(shapes[1]) * _elements(node.shape[1:])
    if op == "conv_transpose2d":
        weight = shapes[1]  # (C_in, C_out / groups, kh, kw)
        return 2 * _elements(shapes[0]) * _elements(weight[1:])
    if op == "scaled_dot_product_attention":
        q, k = shapes[0], shapes[1]
        scores = _elements(q[:-1]) * k[-2]
        return 2 * 2 * scores * q[-1] + 5 * scores
    if op in PER_ELEMENT_5:
        return 5 * out
    if op in PER_INPUT_ELEMENT:
        return _elements(shapes[0]) if shapes else out
    if op in ("sort", "argsort"):
        n = _elements(shapes[0])
        return n * max(1, math.ceil(math.log2(max(2, n))))
    return out
