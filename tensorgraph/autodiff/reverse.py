"""Reverse-mode autodiff: `value_and_grad(graph, wrt)` appends the backward of a scalar
loss to a copy of its graph, so forward and backward are one graph that the usual
rewrites (CSE merges what they share, DCE drops what no gradient reads) and the planner
see whole.

Steps:
1. check the loss (the graph's one output: a float scalar, no state updates) and `wrt`
   (names of float inputs or params; the float params in graph order by default);
2. mark the active values: the wrt nodes and every float value computed from one
   (integer and bool values never carry a gradient: indices, masks, comparisons); with
   `expand` (the default), active fused nodes whose backward would recompute an
   intermediate of their forward are first decomposed (autodiff/expand.py: tanh gelu,
   short attention), and the active values marked again;
3. walk the forward nodes in reverse order from the loss, whose cotangent is 1: each
   node holding a cotangent with an active operand calls its op's vector-Jacobian rule
   (`OpDef.vjp`), which emits backward nodes through the IR builder (shape inference
   checks every one), and each active operand's cotangent is added to what it already
   holds (a value with several readers sums their contributions; zero-padded slices of
   it are written in instead, autodiff/accumulate.py);
4. the outputs are the loss, then each wrt value's cotangent (zeros where the loss does
   not depend on it), and nodes no output reads are dropped.

A cotangent has its value's shape and dtype. Invariant of the result: the forward nodes
keep their ids, attributes and order (the loss is computed exactly as before) but for
expanded ones, whose decompositions take their places (the loss then equal up to
float32 rounding); params and their bound values are the same, and every backward node
comes after the forward.
"""

from __future__ import annotations

from collections.abc import Sequence

from tensorgraph.autodiff.accumulate import accumulate
from tensorgraph.autodiff.expand import expand as expand_fused
from tensorgraph.errors import GraphError
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node, describe
from tensorgraph.ir.ops import get_op
from tensorgraph.ir.tensor import Tensor
from tensorgraph.ir.vjp_support import zeros
from tensorgraph.passes.dce import dce


def value_and_grad(
    graph: Graph, wrt: Sequence[str] | str | None = None, *, expand: bool = True
) -> Graph:
    """A graph whose outputs are `graph`'s loss, then the gradient of the loss with
    respect to each name in `wrt`, in `wrt`'s order (mx.value_and_grad's vocabulary).

    `graph` must have exactly one output, a float scalar (shape ()), and no state
    updates; `wrt` names float inputs or params of `graph` (a single name, a sequence,
    or None for every float param in graph order: an integer or bool param, such as a
    folded mask, is a constant of the model, not a weight, and the codes, scales and
    biases of a quantized weight are frozen). The result takes the same
    feeds, has the same params and bound values, and each gradient has its value's
    shape and dtype. `expand=False` keeps every fused forward node (each differentiated
    by its own rule) instead of decomposing those it pays to (autodiff/expand.py).
    GraphError naming the culprit for a loss that is not a float scalar, a `wrt` that
    names nothing, an unknown or non-float name, a part of a quantized weight, and a
    gradient that would flow through an op with no vector-Jacobian rule (naming that node
    and its op)."""
    _loss(graph)
    targets = _targets(graph, wrt)
    sources = {node.id for node in targets}
    if expand:
        graph = expand_fused(graph, _active(graph, sources))
    loss = _loss(graph)
    active = _active(graph, sources)
    result = Graph.from_nodes(graph.name, graph.nodes, [loss.id], graph.param_values)
    cotangents = {loss.id: Tensor(result, result.constant(1.0, loss.dtype).id)}
    for node in reversed(graph.nodes):
        g = cotangents.get(node.id)
        if g is None or get_op(node.op).boundary:
            continue
        if any(i in active for i in node.inputs):
            _pull_back(node, result, g, active, cotangents, targets)
    for target in targets:
        found = cotangents.get(target.id)
        result.output(found if found is not None else zeros(Tensor(result, target.id)))
    return dce(result).graph


def _loss(graph: Graph) -> Node:
    if graph.state_updates:
        raise GraphError(
            f"value_and_grad: graph {graph.name!r} updates states {sorted(graph.state_updates)}; "
            "it takes a graph with one output, the loss, and no state updates"
        )
    if len(graph.outputs) != 1:
        raise GraphError(
            f"value_and_grad: graph {graph.name!r} has {len(graph.outputs)} outputs; the loss "
            "must be its only output"
        )
    loss = graph.node(graph.outputs[0])
    if loss.shape != () or not loss.dtype.is_float:
        raise GraphError(
            f"value_and_grad: the loss {describe(loss)} of graph {graph.name!r} must be a float "
            f"scalar (shape ()) but is {loss.dtype} {loss.shape}"
        )
    return loss


# Ops that read a quantized weight (packed codes, scales[, biases]) after operand `k`.
_QUANTIZED_READERS = {"dequantize": 0, "quantized_matmul": 1}
# Ops through which a quantized weight's parts are read unchanged in kind (the rows of
# `quantized_take`, a view): their first operand is the part.
_PART_VIEWS = ("take", "reshape", "narrow", "transpose", "broadcast_to")


def _frozen(graph: Graph) -> set[int]:
    """Ids of the params that are parts of a quantized weight: read as the codes, scales
    or biases of a quantized op, directly or through a row take or a view."""
    parts: set[int] = set()
    for node in graph.nodes:
        start = _QUANTIZED_READERS.get(node.op)
        if start is None:
            continue
        for source in node.inputs[start:]:
            part = graph.node(source)
            while part.op in _PART_VIEWS:
                part = graph.node(part.inputs[0])
            if part.op == "param":
                parts.add(part.id)
    return parts


def trainable_params(graph: Graph) -> list[str]:
    """The names `wrt=None` differentiates: every float param in graph order but the
    parts of a quantized weight (frozen)."""
    frozen = _frozen(graph)
    return [n.name for n in graph.params if n.dtype.is_float and n.id not in frozen]


def _targets(graph: Graph, wrt: Sequence[str] | str | None) -> list[Node]:
    """The wrt nodes. A quantized weight's params are frozen (QLoRA trains float params
    on top of a quantized base): skipped by default, a GraphError when named."""
    by_name = {n.name: n for n in graph.nodes if n.op in ("input", "param")}
    frozen = _frozen(graph)
    if isinstance(wrt, str):
        wrt = [wrt]
    names = trainable_params(graph) if wrt is None else list(wrt)
    if not names:
        what = "graph has no float params" if wrt is None else "wrt is empty"
        raise GraphError(
            f"value_and_grad: {what}: graph {graph.name!r} has nothing to differentiate"
        )
    targets = []
    for name in names:
        node = by_name.get(name)
        if node is None:
            raise GraphError(
                f"value_and_grad: wrt names {name!r}, which is no input or param of graph "
                f"{graph.name!r} (it has {sorted(by_name)})"
            )
        if node.id in frozen:
            raise GraphError(
                f"value_and_grad: wrt names {describe(node)}, a part of a quantized weight, "
                "which is frozen (its codes are integers); differentiate float params "
                "instead, such as a LoRA adapter on top of it"
            )
        if not node.dtype.is_float:
            raise GraphError(
                f"value_and_grad: wrt names {describe(node)} of dtype {node.dtype}; only float "
                "values have gradients"
            )
        targets.append(node)
    return targets


def _active(graph: Graph, sources: set[int]) -> set[int]:
    """Ids of the values a gradient can reach: `sources` and every float value computed
    from an active one."""
    active = set(sources)
    for node in graph.nodes:
        if node.dtype.is_float and any(i in active for i in node.inputs):
            active.add(node.id)
    return active


def _pull_back(
    node: Node,
    result: Graph,
    g: Tensor,
    active: set[int],
    cotangents: dict[int, Tensor],
    targets: Sequence[Node],
) -> None:
    """Add `node`'s contribution to the cotangent of each active operand (step 3)."""
    rule = get_op(node.op).vjp
    if rule is None:
        names = ", ".join(repr(t.name) for t in targets)
        raise GraphError(
            f"value_and_grad: {describe(node)} has no gradient rule, and the gradient of "
            f"the loss with respect to {names} would flow through it"
        )
    inputs = [Tensor(result, i) for i in node.inputs]
    parts = rule(node, inputs, Tensor(result, node.id), g)
    if len(parts) != len(inputs):
        raise GraphError(
            f"value_and_grad: the rule of {describe(node)} gave {len(parts)} cotangents for "
            f"{len(inputs)} operands"
        )
    for source, part in zip(node.inputs, parts, strict=True):
        if part is None or source not in active:
            continue
        operand = result.node(source)
        if part.shape != operand.shape or part.dtype != operand.dtype:
            raise GraphError(
                f"value_and_grad: the rule of {describe(node)} gave a {part.dtype} "
                f"{part.shape} cotangent for operand {describe(operand)} of "
                f"{operand.dtype} {operand.shape}"
            )
        held = cotangents.get(source)
        cotangents[source] = part if held is None else accumulate(held, part)
