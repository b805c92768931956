"""Liveness: which bytes each node's value lives in, and for which schedule steps.

Step `i` runs `graph.nodes[i]` (the node order is the schedule). Every node's data lives
in a storage root: itself, unless it is a view (`view=True`: a reshape, same-dtype cast
or axis-0 narrow, at its input's offset plus `view_offset`) or writes in place
(`inplace=k`: operand k's storage, offset included). Each root in the arena is one
`Buffer(root id, nbytes, start, end)` with a half-open lifetime:

- born at its own step; inputs, and params/constants planned in the arena, at step 0
  (they are written before the first step runs);
- alive through the last step that reads it through any alias (a view of a view, an
  in-place successor and its views, an alias's own defining step, where an in-place
  write happens): `end = last_read + 1`, so a value never read and not an output
  lives `[s, s + 1)`;
- a root that holds a graph output (directly or through an alias) lives to the end:
  `last_read = len(steps)`, `end = len(steps)`;
- params and constants planned in the arena live for the whole run (loaded once, kept
  across runs); otherwise they sit in the constant segment and get no buffer;
- `tail_guard` extra bytes on the buffers of inputs and of roots holding an output.

Invariants of the result: every node has a `Storage` whose bytes
`[offset, offset + nbytes)` lie inside its root's; views and in-place nodes own no
buffer; no node writes in place into a param or constant (the constant segment, and
params kept in the arena, are loaded once and must survive the run).

This is the one liveness analysis: the planner sizes the arena from it, reinplace asks
it whether an operand's whole root dies at an op (`last_read[root] == step`), and the
MLX executor frees values at `last_use`. O(nodes + edges).
"""

from __future__ import annotations

from collections.abc import Mapping

from attrs import frozen

from tensorgraph.errors import GraphError, PlanError
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node, describe
from tensorgraph.ir.ops import INPLACE_ATTR, OPS, VIEW_ATTR, view_offset
from tensorgraph.planner.buffers import Buffer

LOADED_ONCE = ("param", "constant")  # boundary values that persist across runs


@frozen
class Storage:
    """Where a node's data lives: `offset` bytes into the storage of node `root`."""

    root: int
    offset: int


@frozen
class Liveness:
    """The result of `analyze` (see the module docstring for the lifetime rules).

    `steps`: node ids in schedule order; `step_of`: node id -> its step; `storage`:
    every node id -> its `Storage`; `buffers`: one per arena root, in step order;
    `constants`: roots in the constant segment; `last_read`: root id -> last step reading
    it through any alias (`len(steps)` for a root holding an output); `last_use`: node id
    -> last step reading that node directly (-1 if never read, `len(steps)` if an
    output)."""

    steps: tuple[int, ...]
    step_of: Mapping[int, int]
    storage: Mapping[int, Storage]
    buffers: tuple[Buffer, ...]
    constants: tuple[int, ...]
    last_read: Mapping[int, int]
    last_use: Mapping[int, int]

    def live_at(self, step: int) -> list[Buffer]:
        """The arena buffers whose lifetime `[start, end)` contains `step`."""
        return [b for b in self.buffers if b.start <= step < b.end]

    def live_bytes(self) -> list[int]:
        """Summed sizes of the buffers live at every step (unaligned: the liveness curve)."""
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


def _alias_storage(node: Node, graph: Graph, storage: Mapping[int, Storage]) -> Storage | None:
    """Where a view or in-place node's data lives, or None when it owns its bytes."""
    if node.attr(VIEW_ATTR, False):
        source = graph.node(node.inputs[0])
        extra = view_offset(node.op, node.attr_dict, source.shape, node.dtype, source.dtype)
        if extra is None:
            raise PlanError(f"{describe(node)}: marked as a view but it must copy")
        base = storage[source.id]
        return Storage(base.root, base.offset + extra)
    slot = node.attr(INPLACE_ATTR, -1)
    if slot == -1:
        return None
    if not 0 <= slot < len(node.inputs):
        raise PlanError(f"{describe(node)}: inplace operand {slot} does not exist")
    base = storage[node.inputs[slot]]
    root = graph.node(base.root)
    if root.op in LOADED_ONCE:
        raise PlanError(
            f"{describe(node)}: writes in place into {describe(root)}, which is loaded "
            "once and must not change"
        )
    return base


def analyze(graph: Graph, *, params_in_arena: bool = False, tail_guard: int = 0) -> Liveness:
    """The liveness of `graph` in its node order (see the module docstring).

    `params_in_arena` plans params and constants in the arena (live for the whole run)
    instead of the constant segment; `tail_guard` (bytes, >= 0) is added to the buffers
    of inputs and of roots holding an output (runtimes that over-read a boundary tensor
    need the slack). The graph must be in topological order (as `verify` checks).
    Raises PlanError on a negative tail guard, a view mark on an op that copies, an
    in-place write into a param or constant, or an alias reaching past its root's bytes;
    GraphError on an input that is not defined earlier."""
    if not isinstance(tail_guard, int) or tail_guard < 0:
        raise PlanError(f"tail_guard must be an integer >= 0 but got {tail_guard!r}")
    nodes = graph.nodes
    end = len(nodes)
    steps = tuple(n.id for n in nodes)
    step_of: dict[int, int] = {}
    storage: dict[int, Storage] = {}
    last_use: dict[int, int] = {}
    for step, node in enumerate(nodes):
        for i in node.inputs:
            if i not in step_of:
                raise GraphError(f"{describe(node)}: input %{i} is not defined before it")
            last_use[i] = step
        step_of[node.id] = step
        where = _alias_storage(node, graph, storage)
        if where is None:
            where = Storage(node.id, 0)
        root = graph.node(where.root)
        if where.offset + node.nbytes > root.nbytes:
            raise PlanError(
                f"{describe(node)}: bytes [{where.offset}, {where.offset + node.nbytes}) "
                f"reach past the {root.nbytes} bytes of its root {describe(root)}"
            )
        storage[node.id] = where
    for output in graph.outputs:
        last_use[output] = end
    last_use = {n.id: last_use.get(n.id, -1) for n in nodes}

    # A root's bytes are needed until the last read of any alias; an alias's own step
    # counts too (an in-place write happens there, and a value is written even if unread).
    last_read: dict[int, int] = {}
    for node in nodes:
        root = storage[node.id].root
        seen = max(step_of[node.id], last_use[node.id])
        last_read[root] = max(last_read.get(root, -1), seen)

    holds_output = {storage[o].root for o in graph.outputs}
    buffers, constants = [], []
    for node in nodes:
        if storage[node.id].root != node.id:
            continue
        if node.op in LOADED_ONCE and not params_in_arena:
            constants.append(node.id)
            continue
        born = 0 if OPS[node.op].boundary else step_of[node.id]
        dies = end if node.op in LOADED_ONCE else min(last_read[node.id] + 1, end)
        guard = tail_guard if node.op == "input" or node.id in holds_output else 0
        buffers.append(Buffer(node.id, node.nbytes + guard, born, dies))
    return Liveness(
        steps=steps,
        step_of=step_of,
        storage=storage,
        buffers=tuple(buffers),
        constants=tuple(constants),
        last_read=last_read,
        last_use=last_use,
    )
