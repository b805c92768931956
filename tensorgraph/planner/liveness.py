"""Liveness: which bytes each node's value lives in, and for which schedule steps.

Step `i` runs `graph.nodes[i]` (the node order is the schedule). Every node's data lives
in a storage root: itself, unless it is a view (`view=True`: a reshape, same-dtype cast
or axis-0 narrow, at the input's offset plus `view_offset`) or writes in place
(`inplace=k`: operand k's storage). Each root in the arena is one `Buffer`:

- born at its own step (inputs, and params/constants planned in the arena, at 0);
- alive through the last step that reads it through any alias (a view of a view, an
  in-place successor and its views), so its lifetime is `[born, last_read + 1)`;
- a root that holds a graph output lives to the end: `last_read = len(steps)`;
- params and constants planned in the arena live for the whole run (loaded once).

This is the one liveness analysis: the planner sizes the arena from it, reinplace asks
it whether an operand's whole root dies at an op, and the MLX executor frees values at
`last_use`. O(number of nodes + edges).
"""

from __future__ import annotations

from collections.abc import Mapping

from attrs import frozen

from tensorgraph.errors import PlanError
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import describe
from tensorgraph.ir.ops import INPLACE_ATTR, OPS, VIEW_ATTR, view_offset
from tensorgraph.planner.buffers import Buffer


@frozen
class Storage:
    """Where a node's data lives: `offset` bytes into the storage of node `root`."""

    root: int
    offset: int


@frozen
class Liveness:
    """The result of `analyze` (see the module docstring for the lifetime rules)."""

    steps: tuple[int, ...]
    storage: Mapping[int, Storage]
    buffers: tuple[Buffer, ...]
    constants: tuple[int, ...]
    last_read: Mapping[int, int]
    last_use: Mapping[int, int]

    def step_of(self, node_id: int) -> int:
        return self.steps.index(node_id)

    def live_at(self, step: int) -> list[Buffer]:
        """The arena buffers whose lifetime contains `step`."""
        return [b for b in self.buffers if b.start <= step < b.end]

    def live_bytes(self) -> list[int]:
        """Summed sizes of live buffers at every step (the lower-bound curve)."""
        delta = [0] * (len(self.steps) + 1)
        for b in self.buffers:
            delta[b.start] += b.size
            delta[b.end] -= b.size
        curve, total = [], 0
        for step in range(len(self.steps)):
            total += delta[step]
            curve.append(total)
        return curve

    def peak_step(self) -> int:
        """The first step where live bytes are largest (0 for an empty schedule)."""
        curve = self.live_bytes()
        return max(range(len(curve)), key=curve.__getitem__) if curve else 0


def analyze(graph: Graph, *, params_in_arena: bool = False, tail_guard: int = 0) -> Liveness:
    """The liveness of `graph` in its node order (see module docstring).

    `params_in_arena` plans params and constants in the arena (live for the whole run)
    instead of the constant segment; `tail_guard` adds that many bytes to the buffers of
    inputs and outputs (runtimes that over-read a boundary tensor need the slack)."""
    if tail_guard < 0:
        raise PlanError(f"tail_guard must be >= 0 but got {tail_guard}")
    nodes = graph.nodes
    end = len(nodes)
    steps = tuple(n.id for n in nodes)
    storage: dict[int, Storage] = {}
    step_of: dict[int, int] = {}
    last_use: dict[int, int] = {}
    for step, node in enumerate(nodes):
        step_of[node.id] = step
        for i in node.inputs:
            last_use[i] = step
        if node.attr(VIEW_ATTR, False):
            source = graph.node(node.inputs[0])
            extra = view_offset(node.op, node.attr_dict, source.shape, node.dtype, source.dtype)
            if extra is None:
                raise PlanError(f"{describe(node)}: marked as a view but it must copy")
            base = storage[source.id]
            storage[node.id] = Storage(base.root, base.offset + extra)
        elif node.attr(INPLACE_ATTR, -1) != -1:
            storage[node.id] = storage[node.inputs[node.attr(INPLACE_ATTR)]]
        else:
            storage[node.id] = Storage(node.id, 0)
    for output in graph.outputs:
        last_use[output] = end
    last_read: dict[int, int] = {}
    for node in nodes:
        root = storage[node.id].root
        # A node's own step counts as a use of its root: an in-place write happens there.
        seen = max(step_of[node.id], last_use.get(node.id, -1))
        last_read[root] = max(last_read.get(root, -1), seen)
    boundary_outputs = {storage[o].root for o in graph.outputs}
    buffers, constants = [], []
    for node in nodes:
        if storage[node.id].root != node.id:
            continue
        in_constant_segment = node.op in ("param", "constant") and not params_in_arena
        if in_constant_segment:
            constants.append(node.id)
            continue
        born = 0 if OPS[node.op].boundary else step_of[node.id]
        # Params and constants in the arena are loaded once and kept for every run.
        dies = end if node.op in ("param", "constant") else min(last_read[node.id] + 1, end)
        guard = tail_guard if node.op == "input" or node.id in boundary_outputs else 0
        buffers.append(Buffer(node.id, node.nbytes + guard, born, dies))
    last_use = {n.id: last_use.get(n.id, -1) for n in nodes}
    return Liveness(steps, storage, tuple(buffers), tuple(constants), last_read, last_use)
