"""The arena executor: runs a planned graph inside one byte buffer, the physical oracle.

Every arena value is an ndarray over the arena's bytes at its planned offset; every op
reads its arguments there and writes its result there (an in-place op over its operand's
bytes, a view not at all: its bytes are its root's). The arena starts filled with a
garbage pattern and outputs are copied out only after the last step, so a plan that
lets two live values share bytes, or lets a later write clobber an output, gives wrong
numbers here instead of passing silently.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tensorgraph.errors import PlanError
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node, describe
from tensorgraph.runtime.feeds import bind_feeds
from tensorgraph.runtime.kernels import constant_value, evaluate

GARBAGE = 0xA5  # a byte pattern no correct plan ever reads: NaN-ish floats, odd ints


def _at(memory: np.ndarray, offset: int, node: Node, segment: str) -> np.ndarray:
    """`node`'s value as an ndarray over `memory[offset:]` (bounds-checked)."""
    if offset < 0 or offset + node.nbytes > memory.size:
        raise PlanError(
            f"{describe(node)}: bytes [{offset}, {offset + node.nbytes}) fall outside the "
            f"{segment} of {memory.size} bytes"
        )
    raw = memory[offset : offset + node.nbytes]
    return raw.view(node.dtype.to_numpy()).reshape(node.shape)


def run_arena(
    graph: Graph,
    plan: object,
    inputs: Mapping[str, object],
    params: Mapping[str, object] | None = None,
) -> list[np.ndarray]:
    """The outputs of `graph` run inside `plan`'s arena (see module docstring)."""
    feeds = bind_feeds(graph, inputs, params)
    arena = np.full(plan.arena_size, GARBAGE, np.uint8)
    constants = np.full(plan.constant_size, GARBAGE, np.uint8)

    def place(node: Node) -> np.ndarray:
        if node.id in plan.offsets:
            return _at(arena, plan.offsets[node.id], node, "arena")
        if node.id in plan.constant_offsets:
            return _at(constants, plan.constant_offsets[node.id], node, "constant segment")
        raise PlanError(f"{describe(node)}: the plan gives this value no offset")

    for node in graph.nodes:
        if node.op in ("input", "param"):
            place(node)[...] = feeds[node.id]
        elif node.op == "constant":
            place(node)[...] = constant_value(node)
    for node in graph.nodes:
        if node.op in ("input", "param", "constant") or node.attr("view", False):
            continue
        args = [place(graph.node(i)) for i in node.inputs]
        result = evaluate(node, args)
        place(node)[...] = result
    return [np.array(place(graph.node(o)), copy=True) for o in graph.outputs]
