"""The arena executor: runs a planned graph inside one byte buffer, the physical oracle.

Memory is two NumPy byte arrays: the arena (`plan.arena_size` bytes) and the constant
segment (`plan.constant_size` bytes), both first filled with a garbage byte pattern.
Params and constants are written at their planned offsets (the segment, or the arena
when planned there) and inputs at theirs, all before the first step. Then, in schedule
order, every computing node reads its arguments as ndarrays over the bytes at their
planned offsets and writes its result over the bytes at its own offset: an in-place
node's offset is its operand's (the kernel returns a fresh array, so the op computes
first and overwrites after); a view computes nothing, its bytes are its root's.
Outputs are copied out only after the last step.

So the executor trusts the plan and nothing else: a plan that lets two live values
share bytes, lets a later write clobber an output, or misplaces a view gives wrong
numbers here (garbage is NaN-ish for floats) instead of passing silently. Every read
and write is bounds-checked: a PlanError names the node whose bytes fall outside.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from tensorgraph.errors import PlanError, RunError
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node, describe
from tensorgraph.ir.ops import OPS, VIEW_ATTR
from tensorgraph.runtime.feeds import bind_feeds
from tensorgraph.runtime.kernels import constant_value, evaluate

if TYPE_CHECKING:
    from tensorgraph.planner.plan import MemoryPlan

GARBAGE = 0xA5  # float32 0xA5A5A5A5 is about -2.9e-16, bfloat16/float16 similar: never 0


class _Memory:
    """The arena and constant segment of one run, and each node's bytes inside them."""

    def __init__(self, plan: MemoryPlan, fill: int) -> None:
        self.plan = plan
        self.arena = np.full(plan.arena_size, fill, np.uint8)
        self.constants = np.full(plan.constant_size, fill, np.uint8)

    def at(self, node: Node) -> np.ndarray:
        """`node`'s value: an ndarray of its shape and dtype over its planned bytes."""
        if node.id in self.plan.offsets:
            memory, offset, segment = self.arena, self.plan.offsets[node.id], "arena"
        elif node.id in self.plan.constant_offsets:
            memory, offset = self.constants, self.plan.constant_offsets[node.id]
            segment = "constant segment"
        else:
            raise PlanError(f"{describe(node)}: the plan gives this value no offset")
        if offset < 0 or offset + node.nbytes > memory.size:
            raise PlanError(
                f"{describe(node)}: bytes [{offset}, {offset + node.nbytes}) fall outside "
                f"the {segment} of {memory.size} bytes"
            )
        raw = memory[offset : offset + node.nbytes]
        return raw.view(node.dtype.to_numpy()).reshape(node.shape)

    def write(self, node: Node, value: np.ndarray) -> None:
        """Store `value` (exactly `node`'s shape and dtype) over `node`'s planned bytes."""
        expected = node.dtype.to_numpy()
        if value.shape != node.shape or value.dtype != expected:
            raise RunError(
                f"{describe(node)}: kernel gave {value.dtype} {value.shape}, expected "
                f"{expected} {node.shape}"
            )
        self.at(node)[...] = value


def run_arena(
    graph: Graph,
    plan: MemoryPlan,
    inputs: Mapping[str, object],
    params: Mapping[str, object] | None = None,
    *,
    fill: int = GARBAGE,
) -> list[np.ndarray]:
    """The outputs of `graph` (copies, in output order) run inside `plan`'s memory.

    `plan` is the `MemoryPlan` of exactly this graph and node order; `fill` is the byte
    the memory starts as. Raises RunError (from `bind_feeds`) on a missing, extra or
    mistyped input or param, and PlanError naming the node whose planned bytes are
    missing or outside the arena or constant segment."""
    if not isinstance(fill, int) or not 0 <= fill <= 255:
        raise RunError(f"fill must be a byte value in [0, 255] but got {fill!r}")
    feeds = bind_feeds(graph, inputs, params)
    memory = _Memory(plan, fill)
    for node in graph.nodes:
        if node.op == "constant":
            memory.write(node, constant_value(node))
        elif OPS[node.op].boundary:
            memory.write(node, np.asarray(feeds[node.id], node.dtype.to_numpy()))
    for node in graph.nodes:
        if OPS[node.op].boundary or node.attr(VIEW_ATTR, False):
            continue
        args = [memory.at(graph.node(i)) for i in node.inputs]
        memory.write(node, evaluate(node, args))
    return [np.array(memory.at(graph.node(o)), copy=True) for o in graph.outputs]
