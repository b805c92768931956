"""Rematerialisation: which forward values a gradient graph keeps for its backward and
which it recomputes, the memory model that choice is made on, and the rewrite.

A gradient graph (`tg.value_and_grad`, a `tg.train_step`) has a forward part, the
nodes its loss (`graph.returned[0]`) depends on, and a backward part, the others. Each
non-view forward node is a storage root; a backward node reading one, directly or
through views, keeps it live from the forward to that read.

Rematerialising root `u` (`rematerialize`): a copy of `u`'s node is emitted right
before a backward node (its emission point, at the latest `u`'s first backward
reader), reading the copies of its inputs that are recomputed too (emitted before it)
and the original of the others; every backward read of `u`, and of a forward view of
`u` (the view is copied onto `u`'s copy), reads the copy. The original then dies after
its last forward reader. A copy computes the same op on the same values, so every
output is bit for bit what the graph computed without it.

The memory model (`RematModel`) is the planner's liveness (planner/liveness.py) on the
program order: a buffer is live from its producer's step through its last reader's
step, and the peak is the most bytes live at one step. Forward roots are their own
buffers (aligned size) with views resolved to them; every other buffer is the
planner's, with its in-place writes (a backward value written over a forward root
counts from the root's death on). Copies emitted before step `t`
count as live at `t`, with their inputs. The model is an estimate where in-place writes
change with the choice (tensorgraph/remat.py plans every point it takes and keeps only
those whose placed arena fits).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from attrs import evolve, frozen

from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node
from tensorgraph.ir.ops import OPS
from tensorgraph.planner.aliasing import ANALYSES, Aliasing, view_of
from tensorgraph.planner.buffers import align_up
from tensorgraph.planner.flops import flops
from tensorgraph.planner.liveness import analyze

# Ops never recomputed: they read or write persistent state, or are not pure.
NOT_RECOMPUTED = frozenset({"state", "slice_update", "index_update"})


@frozen
class RematModel:
    """The facts of a gradient graph the recompute choice is made on (positions are
    steps of the graph's node order).

    `candidates`: forward roots that may be recomputed (pure, not an output's storage,
    read by the backward or by another candidate); for each forward root `u` in
    `roots`: `size` (aligned bytes), `cost` (FLOPs, planner/flops.py), `born` (its
    step), `forward_last` (its last forward reader's step, or `born`), `first_use` /
    `last_use` (its backward readers' steps, or None), `baseline_end` (last step it is
    live when everything is kept), `inputs` (the forward roots it reads) and
    `consumers` (the candidates reading it). `base[t]`: bytes live at step `t` in
    buffers other than the roots' own intervals the choice changes; `backward`: the
    steps of backward nodes (where copies may be emitted)."""

    graph: Graph
    roots: tuple[int, ...]
    candidates: tuple[int, ...]
    size: Mapping[int, int]
    cost: Mapping[int, int]
    born: Mapping[int, int]
    forward_last: Mapping[int, int]
    first_use: Mapping[int, int | None]
    last_use: Mapping[int, int | None]
    baseline_end: Mapping[int, int]
    inputs: Mapping[int, tuple[int, ...]]
    consumers: Mapping[int, tuple[int, ...]]
    base: tuple[int, ...]
    backward: tuple[int, ...]
    view_root: Mapping[int, int]

    @property
    def steps(self) -> int:
        return len(self.base)

    def peak(self, recompute: frozenset[int] | set[int]) -> int:
        """The model's peak (bytes) when the roots in `recompute` are recomputed, each
        copy emitted as late as possible (`latest_emission`)."""
        return int(self.profile(recompute, self.latest_emission(recompute)).max(initial=0))

    def latest_emission(self, recompute: frozenset[int] | set[int]) -> dict[int, int]:
        """The step before which each needed copy is emitted: the earliest of its first
        backward reader and the emissions of the recomputed candidates reading it. A
        recomputed root nothing in the backward needs gets none."""
        emit: dict[int, int] = {}
        for u in sorted(recompute, key=lambda r: -self.born[r]):
            points = [emit[v] for v in self.consumers[u] if v in emit]
            if self.first_use[u] is not None:
                points.append(self.first_use[u])
            if points:
                emit[u] = min(points)
        return emit

    def profile(self, recompute: frozenset[int] | set[int], emit: Mapping[int, int]) -> np.ndarray:
        """Bytes live at each step for `recompute` with copies emitted at `emit`."""
        delta = np.zeros(self.steps + 1, dtype=np.int64)
        live = np.array(self.base, dtype=np.int64)

        def add(start: int, last: int, size: int) -> None:
            if last >= start:
                delta[start] += size
                delta[last + 1] -= size

        for u in self.roots:
            kept = u not in recompute
            end = self.baseline_end[u] if kept else self.forward_last[u]
            for v in self.consumers[u]:
                if v in recompute and v in emit and kept:
                    end = max(end, emit[v])
            add(self.born[u], end, self.size[u])
            if u in emit:
                last = self.last_use[u] if self.last_use[u] is not None else emit[u]
                for v in self.consumers[u]:
                    if v in emit:
                        last = max(last, emit[v])
                add(emit[u], last, self.size[u])
        return live + np.cumsum(delta)[: self.steps]

    def recompute_cost(self, recompute: frozenset[int] | set[int]) -> int:
        """FLOPs of the copies `rematerialize` emits for `recompute`."""
        return sum(self.cost[u] for u in self.latest_emission(recompute))


def _root(graph: Graph, node: Node, root: dict[int, int]) -> int:
    alias = view_of(graph, node)
    return node.id if alias is None else root[alias.source]


def build_model(
    graph: Graph, alignment: int = 64, analyses: Sequence[str] = ANALYSES
) -> RematModel:
    """The `RematModel` of `graph` in its node order (see the module docstring); the
    alias analyses `analyses` shape the buffers the choice does not touch."""
    nodes = list(graph.nodes)
    pos = {n.id: k for k, n in enumerate(nodes)}
    forward = _forward_ids(graph)
    root: dict[int, int] = {}
    for n in nodes:
        root[n.id] = _root(graph, n, root)
    roots = [
        n.id for n in nodes if n.id in forward and root[n.id] == n.id and not OPS[n.op].boundary
    ]
    is_root = set(roots)
    readers: dict[int, list[int]] = {u: [] for u in roots}
    inputs: dict[int, tuple[int, ...]] = {}
    for n in nodes:
        read = tuple(dict.fromkeys(root[i] for i in n.inputs if root[i] in is_root))
        if n.id in is_root:
            inputs[n.id] = read
        for u in read:
            readers[u].append(pos[n.id])
    pinned = {root[o] for o in graph.outputs}
    backward = tuple(pos[n.id] for n in nodes if n.id not in forward and not OPS[n.op].boundary)
    backward_set = set(backward)
    # Liveness with views only: each root one buffer, as the model counts it.
    order = tuple(pos)
    views = analyze(graph, order, _aliasing(graph, ("view_alias",), alignment))
    end = {b.id: b.end - 1 for b in views.buffers if b.id in is_root}
    # Every other buffer as the planner sees it, with the in-place writes and concat
    # placements of `analyses`; a buffer holding forward roots counts from the last of
    # their (views-only) lifetimes on: the backward values written over them.
    full = analyze(graph, order, _aliasing(graph, analyses, alignment))
    members: dict[int, list[int]] = {}
    for u in roots:
        members.setdefault(full.storage[u].root, []).append(u)
    steps = len(nodes)
    base = np.zeros(steps + 1, dtype=np.int64)
    for b in full.buffers:
        size = align_up(b.size, alignment)
        start = b.start
        if b.id in members:
            start = max(end.get(u, pos[u]) for u in members[b.id]) + 1
        if start < b.end:
            base[start] += size
            base[b.end] -= size
    fwd_last = {
        u: max([r for r in readers[u] if r not in backward_set], default=pos[u]) for u in roots
    }
    uses = {u: [r for r in readers[u] if r in backward_set] for u in roots}
    # Candidates: pure roots live past the forward, then (closing the set) the forward
    # roots they read, so that a chain of them can be recomputed together.
    recomputable = {
        u
        for u in roots
        if u not in pinned and OPS[graph.node(u).op].pure and graph.node(u).op not in NOT_RECOMPUTED
    }
    chosen = {u for u in recomputable if end.get(u, pos[u]) > fwd_last[u]}
    for u in reversed(roots):
        if u in chosen:
            chosen.update(i for i in inputs[u] if i in recomputable)
    candidates = tuple(u for u in roots if u in chosen)
    consumers = {u: tuple(v for v in candidates if u in inputs[v]) for u in roots}
    return RematModel(
        graph=graph,
        roots=tuple(roots),
        candidates=candidates,
        size={u: align_up(graph.node(u).nbytes, alignment) for u in roots},
        cost={u: flops(graph, graph.node(u)) for u in roots},
        born={u: pos[u] for u in roots},
        forward_last=fwd_last,
        first_use={u: min(uses[u]) if uses[u] and u in chosen else None for u in roots},
        last_use={u: max(uses[u]) if uses[u] and u in chosen else None for u in roots},
        baseline_end={u: end.get(u, pos[u]) for u in roots},
        inputs=inputs,
        consumers=consumers,
        base=tuple(int(x) for x in np.cumsum(base)[:steps]),
        backward=backward,
        view_root=root,
    )


def _aliasing(graph: Graph, analyses: Sequence[str], alignment: int) -> Aliasing:
    from tensorgraph.planner.aliasing import analyze_aliasing

    order = tuple(n.id for n in graph.nodes)
    return analyze_aliasing(graph, order, tuple(analyses), alignment=alignment)


def rematerialize(graph: Graph, emit: Mapping[int, int]) -> Graph:
    """`graph` with a copy of each root `u` in `emit` emitted right before the node at
    step `emit[u]` (a backward node), copies at one step in their roots' order; every
    backward read of `u` or of a forward view of `u` reads the copy (views are copied
    onto it), and a copy reads the copies of its recomputed inputs. Preserves every
    output bit for bit (a copy is the same op on the same values); precondition: each
    copy's emission is no later than its first backward reader and than the emission
    of every copy reading it (`RematModel.latest_emission` gives such points)."""
    if not emit:
        return graph
    nodes = list(graph.nodes)
    pos = {n.id: k for k, n in enumerate(nodes)}
    at: dict[int, list[int]] = {}
    for u, step in emit.items():
        at.setdefault(step, []).append(u)
    next_id = max(pos) + 1
    copy: dict[int, int] = {}
    forward_view: dict[int, int] = {}  # a forward view of a recomputed root -> its copy
    out: list[Node] = []
    root: dict[int, int] = {}
    for n in nodes:
        root[n.id] = _root(graph, n, root)
    forward = _forward_ids(graph)
    first_backward = min(emit.values())

    def resolve(i: int) -> int:
        nonlocal next_id
        if i in copy:
            return copy[i]
        if i in forward_view:
            return forward_view[i]
        if i in forward and root[i] != i and root[i] in copy:
            node = graph.node(i)
            source = resolve(node.inputs[0])
            out.append(evolve(node, id=next_id, inputs=(source, *node.inputs[1:])))
            forward_view[i] = next_id
            next_id += 1
            return forward_view[i]
        return i

    for k, n in enumerate(nodes):
        for u in sorted(at.get(k, ()), key=pos.__getitem__):
            node = graph.node(u)
            inputs = tuple(resolve(i) for i in node.inputs)  # may emit view copies first
            out.append(evolve(node, id=next_id, inputs=inputs))
            copy[u] = next_id
            next_id += 1
        if k >= first_backward and n.id not in forward and n.inputs:
            n = evolve(n, inputs=tuple(resolve(i) for i in n.inputs))
        out.append(n)
    outputs = [o if o in forward else resolve(o) for o in graph.outputs]
    return graph.rebuilt(out, outputs)


def _forward_ids(graph: Graph) -> frozenset[int]:
    forward: set[int] = set()
    stack = [graph.returned[0]] if graph.returned else []
    while stack:
        i = stack.pop()
        if i not in forward:
            forward.add(i)
            stack.extend(graph.node(i).inputs)
    return frozenset(forward)


def checkpoint_layers(
    model: RematModel, data_ops: Sequence[str] = ("matmul", "conv2d")
) -> frozenset[int]:
    """Checkpoint-every-layer's recompute set: every candidate except the layer inputs,
    the roots a forward matmul or conv2d reads as its data operand (operand 0), as
    `torch.utils.checkpoint` around each layer saves exactly a layer's input."""
    graph = model.graph
    forward = _forward_ids(graph)
    kept = {
        model.view_root[n.inputs[0]]
        for n in graph.nodes
        if n.id in forward and n.op in data_ops and n.inputs
    }
    return frozenset(u for u in model.candidates if u not in kept)
