"""`replay`: a byte-level read/write simulation of a plan, the second, dumbest proof.

Memory is modelled as one array per segment holding, for every byte, the id of the node
whose value those bytes currently hold (-1: never written). Boundary values are written
before the first step; then each step, in order, first checks that every byte each
operand is read from holds that operand's value, then writes its own bytes. A view
writes nothing: its bytes hold the value of the node it views, so a read of a view
checks for that node. An in-place node writes its id over its operand's bytes after
reading them. Graph outputs are read once more after the last step.

It shares no logic with `check.verify_plan` (no lifetimes, no intervals, only bytes),
so the two agreeing is evidence that neither is wrong. O(steps * bytes touched):
meant for tests and debug mode, not for gigabyte arenas.
"""

from __future__ import annotations

import numpy as np

from tensorgraph.errors import PlanError
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import describe
from tensorgraph.ir.ops import OPS
from tensorgraph.planner.aliasing import Aliasing, same_mapping


def replay(graph: Graph, plan: object, aliasing: Aliasing) -> None:
    """Raise PlanError naming the reader, the value and the bytes when any read sees
    bytes its producer did not write (see the module docstring)."""
    memory = {
        "arena": np.full(plan.arena_size, -1, np.int64),
        "constants": np.full(plan.constant_size, -1, np.int64),
    }
    holder: dict[int, int] = {}  # node id -> the node id its bytes are stamped with

    def place(node_id: int) -> tuple[np.ndarray, int, int]:
        if node_id in plan.offsets:
            segment, offset = memory["arena"], plan.offsets[node_id]
        elif node_id in plan.constant_offsets:
            segment, offset = memory["constants"], plan.constant_offsets[node_id]
        else:
            raise PlanError(f"{describe(graph.node(node_id))}: the plan gives it no bytes")
        return segment, offset, offset + graph.node(node_id).nbytes

    def read(reader: str, node_id: int) -> None:
        segment, low, high = place(node_id)
        stamp = holder[node_id]
        wrong = np.flatnonzero(segment[low:high] != stamp)
        if wrong.size:
            byte = low + int(wrong[0])
            found = int(segment[byte])
            what = "never-written bytes" if found == -1 else f"bytes of %{found}"
            raise PlanError(
                f"{reader} reads {describe(graph.node(node_id))} at byte {byte} but finds "
                f"{what} there"
            )

    order = plan.liveness.steps
    for node_id in order:
        node = graph.node(node_id)
        if OPS[node.op].boundary:
            segment, low, high = place(node_id)
            segment[low:high] = node_id
            holder[node_id] = node_id
    for node_id in order:
        node = graph.node(node_id)
        if OPS[node.op].boundary:
            continue
        alias = aliasing.of(node_id)
        if alias is not None and alias.kind == "view":
            holder[node_id] = holder[alias.source]
            continue
        for i in node.inputs:
            read(describe(node), i)
        segment, low, high = place(node_id)
        # An operand sharing the written bytes must be read with the same element
        # mapping, or the result would depend on the kernel's element order.
        for i in node.inputs:
            other, o_low, o_high = place(i)
            overlaps = other is segment and o_low < high and low < o_high
            if overlaps and not same_mapping(node, graph.node(i), o_low - low):
                raise PlanError(
                    f"{describe(node)} writes bytes [{low}, {high}) while reading "
                    f"{describe(graph.node(i))} from overlapping bytes [{o_low}, {o_high})"
                )
        segment[low:high] = node_id
        holder[node_id] = node_id
    for output in graph.outputs:
        read("the caller (graph output)", output)
