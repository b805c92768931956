"""The rewrite of rematerialisation: a gradient graph with copies of recomputed forward
roots emitted before backward nodes, on the steps of the order the memory model
(planner/remat.py) counts.

Rematerialising root `u` (`rematerialize`): copies of `u`'s node are emitted right
before backward nodes (its emission points, the first at the latest `u`'s first
backward reader), each reading the latest copies of its inputs that are recomputed too
(emitted before it) and the original of the others; every backward read of `u`, and of
a forward view of `u` (the view is copied onto `u`'s copy), reads the latest copy
emitted at or before it, so a copy lives from its emission through the last read it
serves and a value may be recomputed several times, freed in between (Checkmate's
multiple recomputation). The original dies after its last forward reader. A copy
computes the same op on the same values, so every output is bit for bit what the graph
computed without it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from attrs import evolve

from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node
from tensorgraph.planner.aliasing import view_of
from tensorgraph.planner.update_placement import place_updates


def emission_steps(emit: int | Sequence[int] | None) -> tuple[int, ...]:
    """A root's emission steps, ascending, from one step or several."""
    if emit is None:
        return ()
    if isinstance(emit, int):
        return (emit,)
    return tuple(sorted(emit))


def view_root(graph: Graph, node: Node, root: dict[int, int]) -> int:
    """The storage root of `node`: its own id, or (a view) its source's root in `root`."""
    alias = view_of(graph, node)
    return node.id if alias is None else root[alias.source]


def model_order(graph: Graph) -> tuple[int, ...]:
    """The order the model's steps number: `graph`'s node order with every state's
    update chain placed right after the last reader of the state's old value
    (planner/update_placement.py), as the scheduler places it, so that the model frees
    each gradient at its update and counts the new weights and moments in the state
    region, not to the end of the program (where a builder appends them)."""
    return place_updates(graph, [n.id for n in graph.nodes])


def rematerialize(
    graph: Graph,
    emit: Mapping[int, int | Sequence[int]],
    order: Sequence[int] | None = None,
) -> Graph:
    """`graph` with a copy of each root `u` in `emit` emitted right before the node at
    each of its steps `emit[u]` (steps of `order`, the model's, one or several; backward
    nodes), in `order` (None: the steps are `model_order(graph)`'s and the nodes stay
    in `graph`'s own order; the scheduler then places the update chains itself, the
    order the model assumed among its candidates), copies at one
    step in their roots' order; every backward read of `u` or of a forward view of `u`
    reads the latest copy emitted at or before it (views are copied onto it), and a copy
    reads the latest copies of its recomputed inputs. Preserves every output bit for
    bit (a copy is the same op on the same values); precondition: each root's first
    copy comes no later than its first backward reader and than the first copy of every
    recomputed root reading it (`RematModel.emissions` gives such points)."""
    if not emit:
        return graph
    nodes = list(graph.nodes) if order is None else [graph.node(i) for i in order]
    pos = {n.id: k for k, n in enumerate(nodes)}
    steps_order = model_order(graph) if order is None else tuple(order)
    at: dict[int, list[int]] = {}  # node id -> the roots copied right before it
    for u, steps in emit.items():
        for step in emission_steps(steps):
            at.setdefault(steps_order[step], []).append(u)
    next_id = max(pos) + 1
    copy: dict[int, int] = {}  # a recomputed root -> its latest copy
    forward_view: dict[tuple[int, int], int] = {}  # (forward view, root's copy) -> its copy
    out: list[Node] = []
    root: dict[int, int] = {}
    for n in nodes:
        root[n.id] = view_root(graph, n, root)
    forward = forward_ids(graph)
    copying = False  # from the first copy on, backward reads go to the latest copies

    def resolve(i: int) -> int:
        nonlocal next_id
        if i in copy:
            return copy[i]
        if i in forward and root[i] != i and root[i] in copy:
            key = (i, copy[root[i]])
            if key not in forward_view:
                node = graph.node(i)
                source = resolve(node.inputs[0])
                out.append(evolve(node, id=next_id, inputs=(source, *node.inputs[1:])))
                forward_view[key] = next_id
                next_id += 1
            return forward_view[key]
        return i

    for n in nodes:
        for u in sorted(at.get(n.id, ()), key=pos.__getitem__):
            node = graph.node(u)
            inputs = tuple(resolve(i) for i in node.inputs)  # may emit view copies first
            out.append(evolve(node, id=next_id, inputs=inputs))
            copy[u] = next_id
            next_id += 1
            copying = True
        if copying and n.id not in forward and n.inputs:
            n = evolve(n, inputs=tuple(resolve(i) for i in n.inputs))
        out.append(n)
    outputs = [o if o in forward else resolve(o) for o in graph.outputs]
    return graph.rebuilt(out, outputs)


def forward_ids(graph: Graph) -> frozenset[int]:
    """The forward part of a gradient graph: the nodes its loss (`returned[0]`) reads."""
    forward: set[int] = set()
    stack = [graph.returned[0]] if graph.returned else []
    while stack:
        i = stack.pop()
        if i not in forward:
            forward.add(i)
            stack.extend(graph.node(i).inputs)
    return frozenset(forward)
