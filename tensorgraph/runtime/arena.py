"""The arena executor: runs a planned graph inside one byte buffer, the physical oracle.

Memory is three NumPy byte arrays: the arena (`plan.arena_size` bytes) and the constant
segment (`plan.constant_size` bytes), both first filled with `fill` (0xFF by default:
NaN in every float type, -1 or the maximum in integers), and the state region
(`plan.state_size` bytes: the caller's, kept across calls, or zeros). States are read
where they lie in the region, in-place updates write straight into it, and after the
last step every state update not already in place is copied in (all read first, then
all written, so one update can never clobber another's source). Params and constants are
written at their planned offsets (the segment, or the arena when planned there) and
inputs at theirs, all before the first step. Then, in the plan's order, every
computing node reads its arguments as ndarrays over the bytes at their planned offsets
and writes its result over the bytes at its own offset: an in-place node's offset is
its operand's; a view computes nothing, its bytes are its root's. A concat copies only
the operands not already at their slot (`copy_elim.written_ranges`): an operand placed
into it was written there by its own producer, so the concat step writes no byte of
it, and any mistake in that placement reads as garbage. After each step, the
buffers whose lifetime ended there are poisoned (`POISON`: NaN for floats, an unlikely
pattern for integers), so a plan that lets a value be read after its bytes were
released gives wrong numbers too. Outputs are copied out only after the last step.

A node that declares a workspace has its workspace bytes (its own buffer, live only at
its step) overwritten with the float poison just before it reads its operands, as an
unfused kernel would scribble its scratch there: a plan that let the workspace share
bytes with an operand, the result or any other value live at that step gives NaN or
wrong numbers, so the oracle proves the bytes were reserved.

The kernels return fresh arrays, so an in-place op computes before it overwrites. That
equals a kernel writing element by element only when every operand sharing the written
bytes is read with the same element mapping; any other overlap between a node's
written bytes and its operands' bytes is a PlanError naming both, so the oracle never
hides an order-dependent in-place write.

So the executor trusts the plan and nothing else: a plan that lets two live values
share bytes, lets a later write clobber an output, or misplaces a view gives wrong
numbers here instead of passing silently. Every read and write is bounds-checked: a
PlanError names the node whose bytes fall outside.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from tensorgraph.errors import PlanError, RunError
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node, describe
from tensorgraph.ir.ops import OPS
from tensorgraph.planner.aliasing import Aliasing, same_mapping
from tensorgraph.planner.copy_elim import written_ranges
from tensorgraph.planner.liveness import WorkspaceId
from tensorgraph.runtime.feeds import bind_feeds
from tensorgraph.runtime.kernels import constant_value, evaluate

if TYPE_CHECKING:
    from tensorgraph.planner.plan import MemoryPlan

GARBAGE = 0xFF  # every byte 0xFF: NaN in float16, bfloat16, float32; -1 in signed ints
POISON_FLOAT = 0xFF  # released float bytes read as NaN
POISON_INT = 0xA5  # released integer bytes: int32 -1515870811, int8 -91, bool 0xA5


class _Memory:
    """The arena, constant segment and state region of one run, and each node's bytes."""

    def __init__(self, plan: MemoryPlan, fill: int) -> None:
        self.plan = plan
        self.arena = np.full(plan.arena_size, fill, np.uint8)
        self.constants = np.full(plan.constant_size, fill, np.uint8)
        self.state = np.zeros(plan.state_size, np.uint8)
        self.segments = {"arena": self.arena, "constants": self.constants, "state": self.state}

    def at(self, node: Node) -> np.ndarray:
        """`node`'s value: an ndarray of its shape and dtype over its planned bytes."""
        try:
            segment, offset = self.plan.locate(node.id)
        except PlanError:
            raise PlanError(f"{describe(node)}: the plan gives this value no offset") from None
        memory = self.segments[segment]
        if offset < 0 or offset + node.nbytes > memory.size:
            raise PlanError(
                f"{describe(node)}: bytes [{offset}, {offset + node.nbytes}) fall outside "
                f"the {segment} of {memory.size} bytes"
            )
        raw = memory[offset : offset + node.nbytes]
        return raw.view(node.dtype.to_numpy()).reshape(node.shape)

    def write(
        self, node: Node, value: np.ndarray, ranges: list[tuple[str, int, int]] | None = None
    ) -> None:
        """Store `value` (exactly `node`'s shape and dtype) over `node`'s planned bytes,
        or over only the byte `ranges` of them given (a concat's copied slots)."""
        expected = node.dtype.to_numpy()
        if value.shape != node.shape or value.dtype != expected:
            raise RunError(
                f"{describe(node)}: kernel gave {value.dtype} {value.shape}, expected "
                f"{expected} {node.shape}"
            )
        target = self.at(node)
        if ranges is None:
            target[...] = value
            return
        raw = target.reshape(-1).view(np.uint8)
        flat = np.ascontiguousarray(value).reshape(-1).view(np.uint8)
        start = self.plan.locate(node.id)[1]
        for _, low, high in ranges:
            raw[low - start : high - start] = flat[low - start : high - start]


def _check_overlaps(
    graph: Graph, plan: MemoryPlan, node: Node, ranges: list[tuple[str, int, int]]
) -> None:
    """PlanError when `node` writes bytes (`ranges`) that an operand is read from with
    another element mapping (see the module docstring)."""
    for segment, low, high in ranges:
        for i in dict.fromkeys(node.inputs):
            o_segment, o_low = plan.locate(i)
            operand = graph.node(i)
            overlaps = o_segment == segment and o_low < high and low < o_low + operand.nbytes
            if overlaps and operand.nbytes and not same_mapping(node, operand, o_low - low):
                raise PlanError(
                    f"{describe(node)} writes {segment} bytes [{low}, {high}) while reading "
                    f"{describe(operand)} from overlapping bytes "
                    f"[{o_low}, {o_low + operand.nbytes}): the result would depend on the "
                    "kernel's element order"
                )


def _poison(graph: Graph, plan: MemoryPlan, memory: _Memory, buffer_id: int) -> None:
    """Overwrite a released buffer with the poison of its root's dtype (a workspace, raw
    scratch, with the float poison)."""
    low = plan.buffer_offsets[buffer_id]
    if isinstance(buffer_id, WorkspaceId):
        size, byte = plan.liveness.workspace[buffer_id.node].size, POISON_FLOAT
    else:
        root = graph.node(buffer_id)
        size, byte = root.nbytes, POISON_FLOAT if root.dtype.is_float else POISON_INT
    if low < 0 or low + size > memory.arena.size:
        raise PlanError(
            f"buffer {buffer_id!r}: bytes [{low}, {low + size}) fall outside the arena of "
            f"{memory.arena.size} bytes"
        )
    memory.arena[low : low + size] = byte


def run_arena(
    graph: Graph,
    plan: MemoryPlan,
    inputs: Mapping[str, object],
    params: Mapping[str, object] | None = None,
    *,
    aliasing: Aliasing | None = None,
    fill: int = GARBAGE,
    state: np.ndarray | None = None,
) -> list[np.ndarray]:
    """The outputs of `graph` (copies, in output order) run inside `plan`'s memory.

    `plan` is the `MemoryPlan` of exactly this graph, made with `aliasing` (None: the
    aliasing the plan records); steps run in the plan's order; `fill` is the byte the
    memory starts as. `state` is the state region (a uint8 array of `plan.state_size`
    bytes, updated in place and committed; None: a zero region, discarded). Outputs
    include the state updates' values. Raises RunError (from
    `bind_feeds`) on a missing, extra or mistyped input or param, and PlanError naming
    the node whose planned bytes are missing, outside the arena or constant segment, or
    overlap its operands' bytes with another element mapping."""
    if isinstance(fill, bool) or not isinstance(fill, int) or not 0 <= fill <= 255:
        raise RunError(f"fill must be a byte value in [0, 255] but got {fill!r}")
    feeds = bind_feeds(graph, inputs, params)
    aliasing = plan.aliasing if aliasing is None else aliasing
    memory = _Memory(plan, fill)
    if state is not None:
        if state.dtype != np.uint8 or state.shape != (plan.state_size,):
            raise RunError(
                f"the state region must be {plan.state_size} uint8 bytes but got "
                f"{state.dtype} {state.shape}"
            )
        memory.state = memory.segments["state"] = state
    steps = plan.liveness.steps
    for node_id in steps:
        node = graph.node(node_id)
        if node.op == "constant":
            memory.write(node, constant_value(node))
        elif node.op == "state":
            continue  # already in the region
        elif OPS[node.op].boundary:
            memory.write(node, np.asarray(feeds[node.id], node.dtype.to_numpy()))
    released: dict[int, list[int]] = {}
    for b in plan.buffers:
        if b.end < len(steps):
            released.setdefault(b.end - 1, []).append(b.id)
    for step, node_id in enumerate(steps):
        node = graph.node(node_id)
        alias = aliasing.of(node_id)
        if not OPS[node.op].boundary and (alias is None or alias.kind != "view"):
            memory.at(node)  # bounds first: the clearer message for a misplaced value
            ranges = written_ranges(graph, node, plan.locate)
            _check_overlaps(graph, plan, node, ranges)
            if node_id in plan.liveness.workspace:
                _poison(graph, plan, memory, WorkspaceId(node_id))
            args = [memory.at(graph.node(i)) for i in node.inputs]
            memory.write(node, evaluate(node, args), ranges if node.op == "concat" else None)
        for buffer_id in released.get(step, ()):
            _poison(graph, plan, memory, buffer_id)
    outputs = [np.array(memory.at(graph.node(o)), copy=True) for o in graph.outputs]
    _commit(graph, plan, memory)
    return outputs


def _commit(graph: Graph, plan: MemoryPlan, memory: _Memory) -> None:
    """Copy every state update not already in its state's bytes into them: all values
    are read before any is written."""
    pending = []
    for name, value_id in graph.state_updates.items():
        offset = plan.state_layout[name]
        if plan.locate(value_id) != ("state", offset):
            pending.append((offset, np.array(memory.at(graph.node(value_id)), copy=True)))
    for offset, value in pending:
        raw = value.reshape(-1).view(np.uint8)
        memory.state[offset : offset + raw.size] = raw
