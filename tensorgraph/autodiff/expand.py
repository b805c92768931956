"""Expansion before differentiation: a fused forward node whose backward needs an
intermediate of its own forward is replaced, where that pays, by its decomposition into
IR ops, so the backward reads the intermediate the forward computed instead of
recomputing it. Only the graph `value_and_grad` differentiates is expanded; an
inference graph keeps its fused ops.

- gelu with the tanh approximation: 0.5 (x + x t), t = tanh(c x + c k x^3) (the NumPy
  kernel's formula, rearranged); the backward reads t (tanh's rule uses its output)
  instead of computing a second tanh. tanh is the costly part of gelu on MLX's CPU
  (two layers' tanh took 5.3 ms of GPT-2's 64 ms op-by-op step in benches/bench_train.py;
  sharing it took the step from 1.09x to 0.93x of hand-written MLX, interleaved), and
  the hand-written step (nn.gelu_approx under autodiff) computes it once. The cost: t
  and x^2 are kept from forward to backward, two buffers of x's size (GPT-2 small's
  keep-everything arena: +2.1 MB of 6.0 MB).
- scaled_dot_product_attention: scores = scale q k^T (masked), p = softmax(scores),
  out = p v (key/value heads repeated for grouped queries), so the backward reads p
  instead of recomputing q k^T and the softmax. This is what MLX itself runs on its CPU
  backend (mx.fast.scaled_dot_product_attention has no CPU kernel: it is its fallback
  decomposition there, and mx.grad keeps p). The trade-off is memory: p, B*H*L*S
  elements, lives from forward to backward. It is taken only when p is no larger than
  q, k, v and the output together (L*S <= (2L + 2S) * D per head roughly: short
  sequences); a longer one keeps the fused op and its rule (vjp_fused.py), which keeps
  only q, k, v and recomputes p, as a flash-attention backward does. Under a memory
  budget the remat planner may still recompute an expanded p (an ordinary forward
  value).

Both expansions apply to float32 only: a 16-bit fused kernel computes in float32
inside, and a decomposition would round the intermediates to 16 bits. A shape holding a
`tg.Dim` is judged at the Dims' maxima, so a symbolic step expands what it may hold at
its longest; a static step at a length where the two judgements differ (a short one
under a long max) rounds differently from the symbolic step at that length.

Invariant: every output keeps its value for every input up to float32 rounding (each
decomposition is its op's definition); nodes that are not expanded keep their ids,
attributes and relative order; an expansion's nodes take the expanded node's place in
the order (they read only its operands and their own constants), and new ids are above
every existing id.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from tensorgraph.ir import functions as fn
from tensorgraph.ir.dims import dims_in, evaluate
from tensorgraph.ir.dtypes import float32
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node
from tensorgraph.ir.tensor import Tensor
from tensorgraph.ir.vjp_fused import attention_probabilities, repeated_heads

Expansion = Callable[[Node, Sequence[Tensor]], Tensor]


def _gelu_tanh(node: Node, inputs: Sequence[Tensor]) -> Tensor:
    # Written so that the backward reads x, t and x^2 only (the products' operands):
    # 0.5 x (1 + t) as 0.5 (x + x t) keeps no (1 + t) or 0.5 x beside t.
    (x,) = inputs
    c = math.sqrt(2 / math.pi)
    t = fn.tanh(c * x + (c * 0.044715) * (x * (x * x)))
    return 0.5 * (x + x * t)


def _attention(node: Node, inputs: Sequence[Tensor]) -> Tensor:
    q, k, v = inputs[:3]
    times = q.shape[1] // k.shape[1]
    p = attention_probabilities(node, inputs, q, repeated_heads(k, times))
    return fn.matmul(p, repeated_heads(v, times))


def _pays_gelu(node: Node, graph: Graph) -> bool:
    return node.attr("approximate") == "tanh"


def _pays_attention(node: Node, graph: Graph) -> bool:
    """p (B, H, L, S) is no larger than q, k, v and the output together, at the largest
    extents the shapes may take (each Dim at its max: the ratio grows with L and S, so
    it then holds at every length)."""
    q, k, v = (graph.node(i) for i in node.inputs[:3])
    shapes = (q.shape, k.shape, v.shape, node.shape, (*q.shape[:-1], k.shape[-2]))
    largest = {d: d.max for d in dims_in(*(e for s in shapes for e in s))}
    *operands, probabilities = (math.prod(evaluate(s, largest)) for s in shapes)
    return probabilities <= sum(operands)


EXPANSIONS: dict[str, tuple[Callable[[Node, Graph], bool], Expansion]] = {
    "gelu": (_pays_gelu, _gelu_tanh),
    "scaled_dot_product_attention": (_pays_attention, _attention),
}


def _expands(node: Node, graph: Graph, active: set[int]) -> bool:
    entry = EXPANSIONS.get(node.op)
    if entry is None or node.id not in active or node.dtype != float32:
        return False
    operands = [graph.node(i) for i in node.inputs]
    if any(n.dtype.is_float and n.dtype != float32 for n in operands):
        return False
    return entry[0](node, graph)


def expand(graph: Graph, active: set[int]) -> Graph:
    """`graph` with each `active` node of an op in `EXPANSIONS` whose test passes (module
    docstring) replaced by its decomposition; `graph` itself when none is. `active`: ids
    of the values a gradient reaches (an inactive node's backward never runs)."""
    chosen = [n for n in graph.nodes if _expands(n, graph, active)]
    if not chosen:
        return graph
    work = graph.rebuilt(graph.nodes)
    placed: dict[int, list[Node]] = {}
    mapping: dict[int, int] = {}
    for node in chosen:
        before = {n.id for n in work.nodes}
        inputs = [Tensor(work, i) for i in node.inputs]
        mapping[node.id] = EXPANSIONS[node.op][1](node, inputs).id
        placed[node.id] = [n for n in work.nodes if n.id not in before]
    order = []
    added = {n.id for nodes in placed.values() for n in nodes}
    for node in work.nodes:
        if node.id in added:
            continue
        order.extend(placed.get(node.id, ()))
        order.append(node)
    return work.rebuilt(order).replace_uses(mapping)
