"""`replay`: a byte-level read/write simulation of a plan, the second, dumbest proof.

Memory is modelled as one array per segment holding, for every byte, the id of the node
whose value those bytes currently hold (-1: never written). Boundary values are written
before the first step; then each step, in order, first checks that every byte each
operand is read from holds that operand's value, then writes its own bytes. A view
writes nothing: its bytes hold the value of the node it views, so a read of a view
checks for that node. An in-place node writes its id over its operand's bytes after
reading them. A concat writes its id only over the slots it copies
(`copy_elim.written_ranges`): a slot whose operand was placed there keeps that
operand's stamp, and a read of the concat expects exactly that mix. Graph outputs are
read once more after the last step.

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
from tensorgraph.planner.copy_elim import written_ranges


def replay(graph: Graph, plan: object, aliasing: Aliasing) -> None:
    """Raise PlanError naming the reader, the value and the bytes when any read sees
    bytes its producer did not write (see the module docstring)."""
    memory = {
        "arena": np.full(plan.arena_size, -1, np.int64),
        "constants": np.full(plan.constant_size, -1, np.int64),
        "state": np.full(plan.state_size, -1, np.int64),
    }
    # node id -> the stamp its bytes must carry: one node id, or one per byte
    holder: dict[int, int | np.ndarray] = {}

    def place(node_id: int) -> tuple[np.ndarray, int, int]:
        segment, offset = plan.locate(node_id)
        return memory[segment], offset, offset + graph.node(node_id).nbytes

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
            source = holder[alias.source]
            holder[node_id] = (
                source[alias.offset : alias.offset + node.nbytes]
                if isinstance(source, np.ndarray)
                else source
            )
            continue
        for i in node.inputs:
            read(describe(node), i)
        segment, low, high = place(node_id)
        ranges = [(lo, hi) for _, lo, hi in written_ranges(graph, node, plan.locate)]
        # An operand sharing the written bytes must be read with the same element
        # mapping, or the result would depend on the kernel's element order.
        for i in node.inputs:
            other, o_low, o_high = place(i)
            for w_low, w_high in ranges:
                overlaps = other is segment and o_low < w_high and w_low < o_high
                if overlaps and not same_mapping(node, graph.node(i), o_low - w_low):
                    raise PlanError(
                        f"{describe(node)} writes bytes [{w_low}, {w_high}) while reading "
                        f"{describe(graph.node(i))} from overlapping bytes [{o_low}, {o_high})"
                    )
        if ranges == [(low, high)] or low == high:
            segment[low:high] = node_id
            holder[node_id] = node_id
            continue
        stamps = segment[low:high].copy()  # slots placed in advance keep their stamps
        for w_low, w_high in ranges:
            stamps[w_low - low : w_high - low] = node_id
            segment[w_low:w_high] = node_id
        holder[node_id] = stamps
    for output in graph.outputs:
        read("the caller (graph output)", output)
