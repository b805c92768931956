"""Liveness: buffers and lifetimes of a graph run in one order with one aliasing.

`analyze(graph, order, aliasing)` is the one liveness analysis: the scheduler's cost
model, the alias analysis (reinplace asks it whether an operand's root dies at an op),
the plan and the MLX executor's release points all read it. Step `i` runs node
`order[i]`. Every node's value lives in a storage root: itself, unless the aliasing
says it is a view or an in-place write (`Alias(source, offset)`: `source`'s storage,
plus `offset` bytes) or places it into a later concat (kind "concat": the root and its
whole class live inside the concat's bytes at `offset`). Each root in the arena is one
`Buffer(root id, nbytes, start, end)` with a half-open lifetime:

- born at the first step writing any of its bytes (its own step, or the step of the
  first value placed into it); inputs, and params/constants planned in the arena, at
  step 0 (they are written before the first step runs);
- alive through the last step that reads it through any alias (a view of a view, an
  in-place successor and its views, an alias's own defining step, where an in-place
  write happens): `end = last_read + 1`, so a value never read and not an output
  lives `[s, s + 1)`;
- a root that holds a graph output (directly or through an alias) lives to the end:
  `last_read = len(steps)`, `end = len(steps)`;
- params and constants planned in the arena live for the whole run (loaded once, kept
  across runs); otherwise they sit in the constant segment and get no buffer;
- a state (and every value written in place over it) lives in the state region, at a
  fixed offset, and gets no buffer: its bytes persist across calls. Only a state the
  graph updates may be written in place (`writable_state`), and the update value is an
  output, so it lives to the end like one;
- `tail_guard` extra bytes on the buffers of inputs and of roots holding an output;
- a node whose op declares a workspace (`ops.workspace_bytes` > 0) gets one more
  buffer of that many bytes, id `WorkspaceId(node)`, live exactly during its step
  `[s, s + 1)`: it conflicts with everything live there, the node's operands and
  result included, and with nothing else.

Invariants of the result: every node has a `Storage` whose bytes
`[offset, offset + nbytes)` lie inside its root's; views and in-place nodes own no
buffer; no alias makes a node write into a param, constant or input; a view alias is
exactly what `ops.view_offset` gives; no alias writes into a state the graph does not
update; an in-place alias names one of the node's
operands of the output's byte size and dtype; a placement names a later contiguous
concat (`copy_elim.concat_slots`) with the bytes inside it. An aliasing that breaks one is a
PlanError naming the node. O(nodes + edges).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from attrs import field, frozen

from tensorgraph.errors import GraphError, PlanError
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node, describe
from tensorgraph.ir.ops import OPS, workspace_bytes
from tensorgraph.planner.aliasing import UPDATE_OPS, Alias, Aliasing, view_of, writable_state
from tensorgraph.planner.buffers import Buffer, align_up
from tensorgraph.planner.copy_elim import concat_slots

LOADED_ONCE = ("param", "constant")  # boundary values that persist across runs
NO_ALIASING = Aliasing()


@frozen
class Storage:
    """Where a node's data lives: `offset` bytes into the storage of node `root`."""

    root: int
    offset: int


class WorkspaceId(int):
    """The buffer id of node `n`'s workspace: the int `-(n + 1)`, shown `workspace(%n)`.

    An int so that buffer ids stay ints everywhere they are sorted, saved as JSON or read
    back (`int(id)` gives an equal, equally hashed key); negative so that it never equals
    the id of a node built by a graph (ids count up from 0; `analyze` refuses a graph
    whose hand-made negative ids would collide)."""

    __slots__ = ()

    def __new__(cls, node_id: int) -> WorkspaceId:
        return super().__new__(cls, -(node_id + 1))

    @property
    def node(self) -> int:
        """The id of the node whose step uses this workspace."""
        return -int(self) - 1

    def __repr__(self) -> str:
        return f"workspace(%{self.node})"

    __str__ = __repr__


def owner(buffer_id: int) -> int:
    """The node a buffer belongs to: the root node of a value buffer, the node using a
    workspace buffer."""
    return buffer_id.node if isinstance(buffer_id, WorkspaceId) else buffer_id


@frozen
class Liveness:
    """The result of `analyze` (see the module docstring for the lifetime rules).

    `steps`: node ids in schedule order; `step_of`: node id -> its step; `storage`:
    every node id -> its `Storage`; `buffers`: one per arena root, in step order;
    `constants`: roots in the constant segment; `states`: state roots (the state
    region); `last_read`: root id -> last step reading
    it through any alias (`len(steps)` for a root holding an output); `last_use`: node id
    -> last step reading that node directly (-1 if never read, `len(steps)` if an
    output); `workspace`: node id -> its workspace buffer (also in `buffers`), for the
    nodes that declare one."""

    steps: tuple[int, ...]
    step_of: Mapping[int, int]
    storage: Mapping[int, Storage]
    buffers: tuple[Buffer, ...]
    constants: tuple[int, ...]
    last_read: Mapping[int, int]
    last_use: Mapping[int, int]
    workspace: Mapping[int, Buffer] = field(factory=dict)
    states: tuple[int, ...] = ()

    def live_at(self, step: int) -> list[Buffer]:
        """The value buffers (id: a root node) whose lifetime `[start, end)` contains
        `step`: what a schedule or a graph change can shrink. A workspace live there is
        fixed by its node's step; `workspace_at` lists it."""
        return [
            b for b in self.buffers if b.start <= step < b.end and not isinstance(b.id, WorkspaceId)
        ]

    def workspace_at(self, step: int) -> list[Buffer]:
        """The workspace buffers live at `step` (at most one: its node runs there)."""
        return [b for b in self.workspace.values() if b.start <= step < b.end]

    def live_bytes(self, alignment: int = 1) -> list[int]:
        """Summed sizes, each rounded up to `alignment`, of the buffers live at every
        step: the curve whose maximum is `lower_bound(buffers, alignment)`."""
        delta = [0] * (len(self.steps) + 1)
        for b in self.buffers:
            size = align_up(b.size, alignment)
            delta[b.start] += size
            delta[b.end] -= size
        curve, total = [], 0
        for step in range(len(self.steps)):
            total += delta[step]
            curve.append(total)
        return curve

    def peak_step(self, alignment: int = 1) -> int:
        """The first step where live bytes are largest (0 for an empty schedule)."""
        curve = self.live_bytes(alignment)
        return max(range(len(curve)), key=curve.__getitem__) if curve else 0


def _aliased_storage(
    graph: Graph, node: Node, alias: Alias, storage: Mapping[int, Storage]
) -> Storage:
    """Where an aliased node's bytes live, after checking the alias is sound."""
    if alias.source not in node.inputs:
        raise PlanError(f"{describe(node)}: aliased to %{alias.source}, which it does not read")
    if alias.kind == "view":
        if view_of(graph, node) != alias:
            raise PlanError(f"{describe(node)}: {alias} is not a view this op can be")
    else:
        source = graph.node(alias.source)
        if (
            alias.offset != 0
            or source.nbytes != node.nbytes
            or source.dtype != node.dtype
            or not (OPS[node.op].elementwise or node.op in UPDATE_OPS)
        ):
            raise PlanError(
                f"{describe(node)}: cannot write in place over {describe(source)} "
                f"({source.shape} {source.dtype} -> {node.shape} {node.dtype})"
            )
    base = storage[alias.source]
    where = Storage(base.root, base.offset + alias.offset)
    root = graph.node(where.root)
    if alias.kind == "inplace" and OPS[root.op].boundary and not writable_state(graph, root):
        raise PlanError(
            f"{describe(node)}: writes in place into {describe(root)}, whose bytes are the "
            "caller's, loaded once or a state this graph does not update, and must not change"
        )
    if where.offset + node.nbytes > root.nbytes:
        raise PlanError(
            f"{describe(node)}: bytes [{where.offset}, {where.offset + node.nbytes}) "
            f"reach past the {root.nbytes} bytes of its root {describe(root)}"
        )
    return where


def _place(
    graph: Graph,
    steps: Sequence[int],
    step_of: Mapping[int, int],
    base: Mapping[int, Storage],
    aliasing: Aliasing,
) -> dict[int, Storage]:
    """Every node's storage once concat placements are applied to `base`. A placement
    points forward, so roots are resolved last step first: a concat placed into a later
    concat is resolved before the roots placed into it."""
    final: dict[int, Storage] = {}
    for node_id in reversed(steps):
        alias = aliasing.of(node_id)
        if alias is not None and alias.kind == "concat":
            final[node_id] = _placement(graph, graph.node(node_id), alias, step_of, final)
        elif base[node_id].root == node_id:
            final[node_id] = base[node_id]
    # Storage is immutable, so equal ones are shared: an analysis makes one per node and
    # the scheduler's search runs thousands of analyses.
    storage = {}
    for node_id in steps:
        where = base[node_id]
        root = final[where.root]
        if where.offset == 0:
            storage[node_id] = root
        elif root.offset == 0 and root.root == where.root:
            storage[node_id] = where
        else:
            storage[node_id] = Storage(root.root, root.offset + where.offset)
    return storage


def _placement(
    graph: Graph, node: Node, alias: Alias, step_of: Mapping[int, int], final: Mapping
) -> Storage:
    """Where a root placed into a later concat lives, after checking the placement."""
    concat = graph.node(alias.source) if alias.source in step_of else None
    if (
        concat is None
        or concat.op != "concat"
        or step_of[concat.id] <= step_of[node.id]
        or concat_slots(graph, concat) is None
    ):
        raise PlanError(
            f"{describe(node)}: placed into %{alias.source}, which is not a later concat "
            "whose operands are contiguous byte ranges"
        )
    if OPS[node.op].boundary:
        raise PlanError(
            f"{describe(node)}: placed into {describe(concat)}, but a boundary value's "
            "bytes are the caller's or loaded once"
        )
    if alias.offset < 0 or alias.offset + node.nbytes > concat.nbytes:
        raise PlanError(
            f"{describe(node)}: bytes [{alias.offset}, {alias.offset + node.nbytes}) reach "
            f"past the {concat.nbytes} bytes of {describe(concat)}"
        )
    if concat.id not in final:
        raise PlanError(f"{describe(concat)}: a concat holding other values must own bytes")
    target = final[concat.id]
    return Storage(target.root, target.offset + alias.offset)


def analyze(
    graph: Graph,
    order: Sequence[int] | None = None,
    aliasing: Aliasing = NO_ALIASING,
    *,
    params_in_arena: bool = False,
    tail_guard: int = 0,
) -> Liveness:
    """The liveness of `graph` run in `order` (its node order when None) with
    `aliasing` (see the module docstring).

    `params_in_arena` plans params and constants in the arena (live for the whole run)
    instead of the constant segment; `tail_guard` (bytes, >= 0) is added to the buffers
    of inputs and of roots holding an output (runtimes that over-read a boundary tensor
    need the slack). Raises GraphError when `order` is not a topological order of the
    graph's nodes, PlanError on a negative tail guard or an unsound alias."""
    if isinstance(tail_guard, bool) or not isinstance(tail_guard, int) or tail_guard < 0:
        raise PlanError(f"tail_guard must be an integer >= 0 but got {tail_guard!r}")
    steps = tuple(n.id for n in graph.nodes) if order is None else tuple(order)
    if len(steps) != len(graph) or set(steps) != {n.id for n in graph.nodes}:
        raise GraphError(f"graph {graph.name!r}: an order must list every node id exactly once")
    end = len(steps)
    nodes = [graph.node(i) for i in steps]
    step_of: dict[int, int] = {}
    base: dict[int, Storage] = {}  # storage through views and in-place aliases only
    last_use: dict[int, int] = {}
    alias_of = aliasing.of
    for step, node in enumerate(nodes):
        for i in node.inputs:
            if i not in step_of:
                raise GraphError(f"{describe(node)}: input %{i} is not computed before it")
            last_use[i] = step
        node_id = node.id
        step_of[node_id] = step
        alias = alias_of(node_id)
        base[node_id] = (
            Storage(node_id, 0)
            if alias is None or alias.kind == "concat"
            else _aliased_storage(graph, node, alias, base)
        )
    storage = _place(graph, steps, step_of, base, aliasing)
    for output in graph.outputs:
        last_use[output] = end
    last_use = {i: last_use.get(i, -1) for i in steps}

    # A root's bytes are needed until the last read of any alias; an alias's own step
    # counts too (an in-place write happens there, and a value is written even if unread).
    last_read: dict[int, int] = {}
    first_write: dict[int, int] = {}  # a root -> the first step writing any of its bytes
    for step, node_id in enumerate(steps):
        root = storage[node_id].root
        used = last_use[node_id]
        seen = step if step > used else used
        if root in last_read:
            if seen > last_read[root]:
                last_read[root] = seen
        else:
            last_read[root] = seen
            first_write[root] = step

    holds_output = {storage[o].root for o in graph.outputs}
    buffers, constants, states = [], [], []
    for node in nodes:
        node_id = node.id
        if storage[node_id].root != node_id:
            continue
        if node.op == "state":
            states.append(node_id)
            continue
        if node.op in LOADED_ONCE and not params_in_arena:
            constants.append(node_id)
            continue
        born = 0 if OPS[node.op].boundary else first_write[node_id]
        dies = end if node.op in LOADED_ONCE else min(last_read[node_id] + 1, end)
        guard = tail_guard if node.op == "input" or node_id in holds_output else 0
        buffers.append(Buffer(node_id, node.nbytes + guard, born, max(dies, born + 1)))
    workspace = _workspace_buffers(graph, steps)
    return Liveness(
        steps=steps,
        step_of=step_of,
        storage=storage,
        buffers=tuple(buffers) + tuple(workspace.values()),
        constants=tuple(constants),
        last_read=last_read,
        last_use=last_use,
        workspace=workspace,
        states=tuple(states),
    )


def _workspace_buffers(graph: Graph, steps: Sequence[int]) -> dict[int, Buffer]:
    """node id -> `Buffer(WorkspaceId(node), workspace bytes, s, s + 1)` for each node at
    step `s` declaring a workspace, in step order. PlanError when a workspace id would
    equal a node id (only a graph with negative node ids can make one)."""
    result = {}
    for step, node_id in enumerate(steps):
        node = graph.node(node_id)
        size = workspace_bytes(node, graph)
        if size <= 0:
            continue
        buffer_id = WorkspaceId(node_id)
        if buffer_id in graph:
            raise PlanError(
                f"{describe(node)}: its workspace buffer id {int(buffer_id)} is also a node id; "
                "give the graph non-negative node ids"
            )
        result[node_id] = Buffer(buffer_id, size, step, step + 1)
    return result
