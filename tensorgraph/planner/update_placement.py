"""Update placement: each state's update chain moved to right after the last reader of
the state's old value, so that it writes the new value over the state's bytes and frees
the values it consumes (a training step's gradient) there instead of at the end.

A graph that updates states (`Graph.update_state`: a training step's weights and
optimizer moments, a KV cache) computes each new value from the old one. The alias
analysis writes a new value over its state's bytes (planner/aliasing.py, rule 3,
`writable_state`) only when the write is the state's last read in the order, and a
new value held anywhere else is an output, live in the arena to the end. So the order
decides what an update costs: run too early (before another reader of the old value),
its result holds arena bytes to the end; run late (the builder appends updates after the
whole backward), the gradient it consumes is held to the end. Neither is the scheduler's
fault in the usual sense: its heuristics score an update as allocating a new buffer
(they do not know the bytes are the state's), and its local search moves one node at a
time, never a whole chain. `place_updates` makes the order the alias analysis needs:

1. Movable nodes: not a boundary node, and not needed by any returned output (a state
   update needs them; the loss does not).
2. The chain of state `s`, updated to `u_s`: the movable pointwise ancestors of `u_s`
   (itself included; reached through pointwise nodes only: elementwise ops, functional
   updates, views) whose every reader is in the chain, the largest such set (found by
   removing, until none is left, a node one of whose readers is outside). So the chain
   is the optimizer's arithmetic that only `s`'s update needs, the moments' updates
   that the weight's update reads included; a value several updates share (Adam's
   step count), one the backward goes on to read (a data gradient) and the gradient's
   own computation (a matmul, a reduction, a transpose) are not in it: where the
   gradient is computed is the scheduler's choice (measured on the zoo MLP: moving the
   weight-gradient matmuls with their chains to the earliest point put their
   transposed activations at the backward's peak, 5.53 MB against 5.13 MB).
3. Shared prologue: movable pointwise nodes in no chain whose inputs are all boundary nodes or
   prologue nodes and whose readers are all chain or prologue nodes (the step counter's
   increment and its cast): emitted just before the first chain that reads them.
4. A chain (with the prologue nodes it still needs) is emitted, in the base order's
   relative order, right after the base order has placed every node it reads from
   outside and every other reader of a state it reads (through views): so its writes
   over those states are their last reads. Every other node keeps its base order, the
   boundary nodes first (their position never changes a peak).

The result is a topological order (a chain's outside inputs are placed before it; a
chain node's readers are chain nodes, placed with it or in a later chain), and it
differs from the base order only in where chain and prologue nodes sit. It is a
candidate: the scheduler costs it exactly (`schedule.CostModel`) and keeps it only when
its peak is lower, so no graph's peak rises. O((nodes + edges) * chains) at worst.
"""

from __future__ import annotations

from collections.abc import Sequence

from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node
from tensorgraph.ir.ops import OPS
from tensorgraph.planner.aliasing import UPDATE_OPS, view_of

__all__ = ["place_updates", "update_chains"]


def _movable(graph: Graph) -> set[int]:
    """Step 1: non-boundary nodes no returned output depends on."""
    needed: set[int] = set()
    stack = list(graph.returned)
    while stack:
        i = stack.pop()
        if i not in needed:
            needed.add(i)
            stack.extend(graph.node(i).inputs)
    return {n.id for n in graph.nodes if n.id not in needed and not OPS[n.op].boundary}


def _pointwise(graph: Graph, node: Node) -> bool:
    """True for the ops an update chain is made of: elementwise ops (broadcasts and
    casts included), functional updates and views."""
    return OPS[node.op].elementwise or node.op in UPDATE_OPS or view_of(graph, node) is not None


def update_chains(graph: Graph) -> dict[str, frozenset[int]]:
    """State name -> its update chain (step 2 of the module docstring), for every state
    `graph` updates whose chain is not empty."""
    movable = _movable(graph)
    users = graph.users()
    chains: dict[str, frozenset[int]] = {}
    for name, update in graph.state_updates.items():
        chain: set[int] = set()
        stack = [update]
        while stack:
            i = stack.pop()
            if i in movable and i not in chain and _pointwise(graph, graph.node(i)):
                chain.add(i)
                stack.extend(graph.node(i).inputs)
        changed = True
        while changed:
            outside = {i for i in chain if any(u not in chain for u in users[i])}
            changed = bool(outside)
            chain -= outside
        if chain:
            chains[name] = frozenset(chain)
    return chains


def _prologue(graph: Graph, chained: set[int], movable: set[int]) -> set[int]:
    """Step 3: movable pointwise nodes in no chain computed from boundary nodes only and
    read only by chain or prologue nodes (largest such set)."""
    users = graph.users()
    candidates: set[int] = set()
    for node in graph.nodes:  # topological: inputs are decided first
        if (
            node.id in movable
            and node.id not in chained
            and _pointwise(graph, node)
            and all(OPS[graph.node(i).op].boundary or i in candidates for i in node.inputs)
        ):
            candidates.add(node.id)
    changed = True
    while changed:
        bad = {i for i in candidates if any(u not in chained | candidates for u in users[i])}
        changed = bool(bad)
        candidates -= bad
    return candidates


def _state_readers(graph: Graph) -> dict[int, set[int]]:
    """State node id -> the nodes reading its bytes: directly or through views of it."""
    root: dict[int, int] = {}
    readers: dict[int, set[int]] = {}
    for node in graph.nodes:
        if node.op == "state":
            root[node.id] = node.id
            readers[node.id] = set()
            continue
        for i in node.inputs:
            if i in root:
                readers[root[i]].add(node.id)
        view = view_of(graph, node)
        if view is not None and view.source in root:
            root[node.id] = root[view.source]
    return readers


def place_updates(graph: Graph, order: Sequence[int]) -> tuple[int, ...]:
    """`order` (a topological order of `graph`) with every state's update chain moved to
    right after the last node it waits for (see the module docstring). Returns `order`
    unchanged, as a tuple, when the graph updates no state."""
    order = tuple(order)
    chains = update_chains(graph)
    if not chains:
        return order
    movable = _movable(graph)
    chained = set().union(*chains.values())
    prologue = _prologue(graph, chained, movable)
    moved = chained | prologue
    position = {node_id: k for k, node_id in enumerate(order)}
    readers = _state_readers(graph)
    groups: list[tuple[list[int], set[int]]] = []  # (nodes in base order, still awaited)
    for chain in chains.values():
        members = set(chain)
        stack = [i for n in chain for i in graph.node(n).inputs]
        while stack:  # the prologue nodes this chain reads, transitively
            i = stack.pop()
            if i in prologue and i not in members:
                members.add(i)
                stack.extend(graph.node(i).inputs)
        awaited = {i for n in members for i in graph.node(n).inputs if i not in members}
        for n in members:
            for i in graph.node(n).inputs:
                if i in readers:
                    awaited |= readers[i] - members
        groups.append((sorted(members, key=position.__getitem__), awaited))
    placed: set[int] = set()
    result: list[int] = []
    waiting: dict[int, list[int]] = {}  # node id -> groups awaiting it
    pending = [0] * len(groups)
    ready: list[int] = []
    for g, (_, awaited) in enumerate(groups):
        pending[g] = len(awaited)
        for i in awaited:
            waiting.setdefault(i, []).append(g)
        if not awaited:
            ready.append(g)

    def emit(node_id: int) -> None:
        placed.add(node_id)
        result.append(node_id)
        for g in waiting.pop(node_id, ()):
            pending[g] -= 1
            if pending[g] == 0:
                ready.append(g)

    def flush() -> None:
        while ready:
            ready.sort(key=lambda g: position[groups[g][0][0]], reverse=True)
            members, _ = groups[ready.pop()]
            for n in members:
                if n not in placed:
                    emit(n)

    # Boundary nodes first, in their order (the scheduler's convention: their position
    # never changes a peak), so that a chain never waits on a state declared late.
    for node_id in order:
        if OPS[graph.node(node_id).op].boundary:
            emit(node_id)
    flush()
    for node_id in order:
        if node_id not in moved and node_id not in placed:
            emit(node_id)
            flush()
    flush()
    # Groups left waiting on each other (a chain reading a state another chain's node
    # reads): their nodes in the base order's relative order, after everything else.
    result.extend(n for n in order if n in moved and n not in placed)
    return tuple(result)
