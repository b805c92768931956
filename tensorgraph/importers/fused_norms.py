"""Written-out RMS norms of an imported graph as one `rms_norm` op.

transformers writes RMSNorm out (LlamaRMSNorm and its copies: Mistral, Qwen2/3, Gemma,
OLMo-2, Phi-3, Granite, the q/k norms of Qwen3 and OLMo-2, T5LayerNorm ...):

    x32 = x.to(float32)                          # absent when x is float32
    y = x32 * rsqrt(mean(x32 ** 2, -1, keepdim=True) + eps)
    out = weight * y.to(x.dtype)                 # Gemma: y * (1 + weight), folded at import

which torch.export gives as cast?, square, mean (last axis, keepdims), add of a scalar
constant, rsqrt, mul, cast?, mul by a (D,) weight, in either operand order.

Why. The IR's `rms_norm` lowers to `mx.fast.rms_norm` on a GPU (codegen_mlx/fused.py):
one kernel and one pass over x, where the written-out chain launches a square, a
reduction and a fused multiply chain and holds x^2 as a buffer; mlx-lm's models call
the fast kernel. On MLX's CPU backend the lowering writes the op out again, as before,
and the plan loses the x^2 buffer. A training step differentiates the op by its fused
rule (ir/vjp_fused.py).

Numerics. The `rms_norm` kernels compute in float32 (MLX) or float64 (the NumPy oracle)
and round once to x's dtype, weight included. A bfloat16 import rounded y to bfloat16
before its weight multiply, so there a norm's output may move by one unit in the last
place; a float32 import stays within float32 rounding of the written-out form.

Invariant: a chain is replaced only when every value inside it (x^2, the mean, the sum,
the rsqrt, y and the cast of y) is read by the chain alone and is no output; eps is a
constant of one element; the mean is over the last axis with keepdims; the weight is a
(D,) value of the output's dtype (D = x's last axis) and the output has x's shape and
dtype. The fused node keeps the final multiply's id and place in the order (it reads x
and the weight, both defined earlier); the replaced nodes are dropped; every other node
is kept as it is. Anything else stays written out. O(nodes + edges).
"""

from __future__ import annotations

import math

import numpy as np
from attrs import evolve

from tensorgraph.ir.dtypes import float32
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node


def fuse_rms_norms(graph: Graph) -> Graph:
    """`graph` with each written-out RMS norm (module docstring) replaced by one
    `rms_norm` node; `graph` itself when it has none."""
    readers: dict[int, list[int]] = {}
    for node in graph.nodes:
        for i in node.inputs:
            readers.setdefault(i, []).append(node.id)
    outputs = set(graph.outputs)
    fused: dict[int, Node] = {}
    dropped: set[int] = set()
    for node in graph.nodes:
        if node.op != "mul" or node.inputs[0] == node.inputs[1]:
            continue
        for weight, normed in (node.inputs, node.inputs[::-1]):
            found = _chain(graph, readers, outputs, node, graph.node(weight), normed)
            if found is not None:
                x, eps, chain = found
                fused[node.id] = evolve(node, op="rms_norm", inputs=(x, weight), attrs={"eps": eps})
                dropped |= chain
                break
    if not fused:
        return graph
    return graph.rebuilt(fused.get(n.id, n) for n in graph.nodes if n.id not in dropped)


def _chain(
    graph: Graph,
    readers: dict[int, list[int]],
    outputs: set[int],
    final: Node,
    weight: Node,
    normed: int,
) -> tuple[int, float, set[int]] | None:
    """(id of x, eps, ids of the chain's inner nodes) when `final` = weight * `normed` is
    the end of a written-out RMS norm of x (module docstring), else None."""

    def inner(node_id: int, reader: int) -> Node | None:
        """The node `node_id` if `reader` is its only reader and it is no output."""
        if node_id in outputs or readers.get(node_id) != [reader]:
            return None
        return graph.node(node_id)

    cast_y = inner(normed, final.id)
    if cast_y is None:
        return None
    y = inner(cast_y.inputs[0], cast_y.id) if cast_y.op == "cast" else cast_y
    if y is None or y.op != "mul" or y.inputs[0] == y.inputs[1]:
        return None
    for x32, r_id in (y.inputs, y.inputs[::-1]):
        r = inner(r_id, y.id)
        if r is None or r.op != "rsqrt":
            continue
        found = _mean_of_squares(graph, inner, r, x32)
        if found is None:
            continue
        eps, square, chain = found
        x = _source(graph, x32, cast_y is not y)
        if x is None or not _fits(x, weight, final):
            continue
        casts = {cast_y.id} if cast_y is not y else set()
        if x.id != x32 and x32 not in outputs and set(readers[x32]) == {square, y.id}:
            casts.add(x32)  # the float32 copy of x only the chain read
        return x.id, eps, chain | casts | {y.id, r.id}
    return None


def _mean_of_squares(graph: Graph, inner, r: Node, x32: int) -> tuple[float, int, set[int]] | None:
    """(eps, id of the square, ids of the square, mean and add) when
    r = rsqrt(mean(x32^2, last axis, keepdims) + eps), eps a one-element constant."""
    total = inner(r.inputs[0], r.id)
    if total is None or total.op != "add":
        return None
    for mean_id, eps_id in (total.inputs, total.inputs[::-1]):
        eps_node, mean = graph.node(eps_id), inner(mean_id, total.id)
        if mean is None or mean.op != "mean" or eps_node.op != "constant":
            continue
        if math.prod(eps_node.shape) != 1 or not mean.attr("keepdims"):
            continue
        rank = len(mean.shape)
        if tuple(mean.attr("axes")) not in ((rank - 1,), (-1,)):
            continue
        square = inner(mean.inputs[0], mean.id)
        if square is None or square.op != "square" or square.inputs[0] != x32:
            continue
        # a constant's payload: its bytes in its dtype (the importers do not import the
        # runtime's constant_value, tests/test_layers.py)
        eps = float(np.frombuffer(eps_node.attr("value"), eps_node.dtype.to_numpy())[0])
        return eps, square.id, {square.id, mean.id, total.id}
    return None


def _source(graph: Graph, x32: int, cast_back: bool) -> Node | None:
    """The normalised x: x32 itself, or, when x32 is a cast to float32 and y is cast back
    (`cast_back`), what x32 casts."""
    node = graph.node(x32)
    if not cast_back:
        return node
    if node.op != "cast" or node.dtype != float32:
        return None
    return graph.node(node.inputs[0])


def _fits(x: Node, weight: Node, final: Node) -> bool:
    """The op's contract: a floating x of the output's shape and dtype, a (D,) weight of
    that dtype."""
    return (
        x.dtype.is_float
        and x.dtype == final.dtype == weight.dtype
        and tuple(x.shape) == tuple(final.shape)
        and len(x.shape) >= 1
        and tuple(weight.shape) == (x.shape[-1],)
    )
