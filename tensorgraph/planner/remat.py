"""Rematerialisation: which forward values a gradient graph keeps for its backward and
which it recomputes, and the memory model that choice is made on.

A gradient graph (`tg.value_and_grad`, a `tg.train_step`) has a forward part, the
nodes its loss (`graph.returned[0]`) depends on, and a backward part, the others. Each
non-view forward node is a storage root; a backward node reading one, directly or
through views, keeps it live from the forward to that read.

Rematerialising a root (planner/remat_rewrite.py, `rematerialize`) emits copies of it
before backward nodes, each freed after the last read it serves.

The memory model (`RematModel`) is the planner's liveness (planner/liveness.py) on the
program order with the state updates placed (`model_order`: each update chain right
after the last reader of its state's old value, as the scheduler places it, so a
gradient dies at its update and the new weights and moments sit in the state region,
costing no arena bytes): a buffer is live from its producer's step through its last
reader's step, and the peak is the most bytes live at one step. Forward roots are their own
buffers (aligned size) with views resolved to them; every other buffer is the
planner's, with its in-place writes (a backward value written over a forward root
counts from the root's death on). A kept root lives from its step through its last
reader (backward nodes and the copies reading it); a recomputed one through its last
forward reader, and each of its copies from its emission step through the last read it
serves. Copies emitted before step `t` each get a sub-step of their own, where the
bytes live across into step `t` count (not what step `t` itself makes) with the copies
live there; a copy of an elementwise op written over the copy it reads last (as the
planner reinplaces it) counts once there. The model is an estimate where in-place
writes change with the choice (tensorgraph/remat.py plans every point it takes and
keeps only those whose placed arena fits). Measured at the least memory it knows (every
candidate recomputed, a copy at each read): without those two it put GPT-2's step at
2,364,480 B and ResNet-18's at 1,245,696 B, with them 1,840,192 and 1,180,160, the
placed arenas 1,770,560 and 1,048,640.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping, Sequence

import numpy as np
from attrs import frozen

from tensorgraph.ir.graph import Graph
from tensorgraph.ir.ops import OPS
from tensorgraph.planner.aliasing import ANALYSES, Aliasing
from tensorgraph.planner.buffers import align_up
from tensorgraph.planner.flops import flops
from tensorgraph.planner.liveness import analyze
from tensorgraph.planner.remat_rewrite import (
    emission_steps,
    forward_ids,
    model_order,
    rematerialize,
    view_root,
)

__all__ = [
    "NOT_RECOMPUTED",
    "RematModel",
    "build_model",
    "checkpoint_layers",
    "model_order",
    "rematerialize",
]

# Ops never recomputed: they read or write persistent state, or are not pure.
NOT_RECOMPUTED = frozenset({"state", "slice_update", "index_update"})


@frozen
class RematModel:
    """The facts of a gradient graph the recompute choice is made on (positions are
    steps of `model_order(graph)`).

    `candidates`: forward roots that may be recomputed (pure, not an output's storage,
    read by the backward or by another candidate); for each forward root `u` in
    `roots`: `size` (aligned bytes), `cost` (FLOPs, planner/flops.py), `born` (its
    step), `forward_last` (its last forward reader's step, or `born`), `first_use` /
    `last_use` (its backward readers' steps, or None), `baseline_end` (last step it is
    live when everything is kept), `inputs` (the forward roots it reads) and
    `consumers` (the candidates reading it), `uses` (its backward readers' steps,
    ascending; empty for non-candidates). `base[t]`: bytes live at step `t` in
    buffers other than the roots' own intervals the choice changes, `born_bytes[t]`
    those of them that step `t` makes; `backward`: the
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
    born_bytes: tuple[int, ...]
    backward: tuple[int, ...]
    view_root: Mapping[int, int]
    uses: Mapping[int, tuple[int, ...]]

    @property
    def steps(self) -> int:
        return len(self.base)

    def peak(
        self,
        recompute: frozenset[int] | set[int],
        fresh: frozenset[int] | set[int] = frozenset(),
        splits: Mapping[int, Sequence[int]] | None = None,
    ) -> int:
        """The model's peak (bytes) when the roots in `recompute` are recomputed with the
        copies `emissions(recompute, fresh, splits)` places."""
        emit = self.emissions(recompute, fresh, splits)
        return int(self.profile(recompute, emit).max(initial=0))

    def emissions(
        self,
        recompute: frozenset[int] | set[int],
        fresh: frozenset[int] | set[int] = frozenset(),
        splits: Mapping[int, Sequence[int]] | None = None,
    ) -> dict[int, tuple[int, ...]]:
        """The steps before which copies of each needed recomputed root are emitted. Its
        reads are its backward readers and the emissions of the recomputed candidates
        reading it; a root in `fresh` gets a copy at each step that reads it (freed after
        that step: least memory, most FLOPs), any other one copy at the first, living
        through the last (`latest_emission`), and one more at each step of
        `splits[root]` that reads it (a copy split in two: the first dies after its last
        read before that step). A root nothing reads gets none."""
        emit: dict[int, tuple[int, ...]] = {}
        splits = splits or {}
        for u in sorted(recompute, key=lambda r: -self.born[r]):
            points = set(self.uses[u])
            for v in self.consumers[u]:
                points.update(emit.get(v, ()))
            if not points:
                continue
            if u in fresh:
                emit[u] = tuple(sorted(points))
            else:
                emit[u] = tuple(sorted({min(points), *points.intersection(splits.get(u, ()))}))
        return emit

    def reads(self, u: int, emit: Mapping[int, Sequence[int]]) -> tuple[int, ...]:
        """The steps reading root `u` under the copies `emit`: its backward readers and
        the copies of the recomputed candidates reading it, ascending."""
        points = set(self.uses[u])
        for v in self.consumers[u]:
            points.update(emission_steps(emit.get(v)))
        return tuple(sorted(points))

    def substep_steps(self, emit: Mapping[int, int | Sequence[int]]) -> np.ndarray:
        """The step of each of `profile`'s sub-steps for the copies `emit`."""
        return np.repeat(np.arange(self.steps), self._widths(emit))

    def _widths(self, emit: Mapping[int, int | Sequence[int]]) -> list[int]:
        """Sub-steps per step: one for the step's own node and one per copy emitted
        before it."""
        width = [1] * self.steps
        for e in emit.values():
            for step in emission_steps(e):
                width[step] += 1
        return width

    def latest_emission(self, recompute: frozenset[int] | set[int]) -> dict[int, int]:
        """The step before which each needed copy is emitted when each recomputed root
        is copied once: the earliest of its first backward reader and the emissions of
        the recomputed candidates reading it. A recomputed root nothing needs gets none."""
        return {u: steps[0] for u, steps in self.emissions(recompute).items()}

    def profile(
        self, recompute: frozenset[int] | set[int], emit: Mapping[int, int | Sequence[int]]
    ) -> np.ndarray:
        """Bytes live at each step for `recompute` with copies emitted at `emit` (a step
        or the ascending steps of a root's copies), the copies emitted before a step
        each at a sub-step of their own, in their roots' order, as `rematerialize` emits
        them (a copy read only by the next copy dies once that is computed); a copy's
        sub-step counts the bytes live into its step (less what the step makes,
        `born_bytes`) plus the copies live there, the step's own sub-step all its
        bytes; an elementwise copy written over an operand's copy read last there
        counts once (`_overwrites`). Precondition: each read of a recomputed root
        (`emissions`' reads) comes at or after its first copy."""
        points = {u: emission_steps(e) for u, e in emit.items()}
        cluster: dict[int, list[int]] = {}
        for u, steps in points.items():
            for step in steps:
                cluster.setdefault(step, []).append(u)
        for members in cluster.values():
            members.sort(key=self.born.__getitem__)
        width = self._widths(points)
        start = [0] * self.steps  # the first sub-step of each step
        for t in range(1, self.steps):
            start[t] = start[t - 1] + width[t - 1]
        node = [start[t] + width[t] - 1 for t in range(self.steps)]  # the step's own node
        slot = {(u, step): start[step] + k for step, m in cluster.items() for k, u in enumerate(m)}
        total = node[-1] + 1 if self.steps else 0
        delta = [0] * (total + 1)
        live = np.repeat(np.asarray(self.base, dtype=np.int64), width)
        # Before a step's own node, its result is not yet there.
        unborn = np.repeat(np.asarray(self.born_bytes, dtype=np.int64), width)
        unborn[node] = 0
        live -= unborn

        dies_at: dict[int, int] = {}  # a sub-step -> the root whose copy's last read it is
        for u in self.roots:
            size = self.size[u]
            late = [
                slot[(v, e)] for v in self.consumers[u] if v in recompute for e in points.get(v, ())
            ]
            if u not in recompute:
                delta[node[self.born[u]]] += size
                delta[max([node[self.baseline_end[u]], *late]) + 1] -= size
                continue
            delta[node[self.born[u]]] += size
            delta[node[self.forward_last[u]] + 1] -= size
            reads = sorted([node[r] for r in self.uses[u]] + late)
            copies = [slot[(u, e)] for e in points.get(u, ())]
            for k, first in enumerate(copies):
                stop = copies[k + 1] if k + 1 < len(copies) else total + 1
                # The last read before the next copy (reads after `first` only).
                j = bisect_left(reads, stop) - 1
                last = reads[j] if j >= 0 and reads[j] > first else first
                delta[first] += size
                delta[last + 1] -= size
                dies_at[last] = u
        # A copy of an elementwise op written over an operand's copy whose last read it
        # is (the planner's reinplacing): both counted once at that sub-step.
        for (u, _step), at in slot.items():
            w = dies_at.get(at)
            if w is not None and w in self.inputs[u] and self._overwrites(u, w):
                delta[at] -= self.size[u]
                delta[at + 1] += self.size[u]
        return live + np.cumsum(np.asarray(delta, dtype=np.int64))[: len(live)]

    def _overwrites(self, u: int, w: int) -> bool:
        """True when root `u`'s op may write over root `w` read directly (an elementwise
        op, the same bytes and dtype)."""
        node, operand = self.graph.node(u), self.graph.node(w)
        return (
            OPS[node.op].elementwise
            and w in node.inputs
            and node.nbytes == operand.nbytes
            and node.dtype == operand.dtype
        )

    def recompute_cost(
        self,
        recompute: frozenset[int] | set[int],
        emit: Mapping[int, int | Sequence[int]] | None = None,
    ) -> int:
        """FLOPs of the copies `rematerialize` emits for `recompute` (at `emit`, by
        default one copy per needed root, `latest_emission`)."""
        emit = self.latest_emission(recompute) if emit is None else emit
        return sum(self.cost[u] * len(emission_steps(e)) for u, e in emit.items())


def build_model(
    graph: Graph,
    alignment: int = 64,
    analyses: Sequence[str] = ANALYSES,
    order: Sequence[int] | None = None,
) -> RematModel:
    """The `RematModel` of `graph` in `order` (a topological order of its nodes; None:
    `model_order(graph)`; see the module docstring); the alias analyses `analyses`
    shape the buffers the choice does not touch."""
    nodes = [graph.node(i) for i in (model_order(graph) if order is None else order)]
    pos = {n.id: k for k, n in enumerate(nodes)}
    forward = forward_ids(graph)
    root: dict[int, int] = {}
    for n in nodes:
        root[n.id] = view_root(graph, n, root)
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
    views = analyze(graph, order, _aliasing(graph, order, ("view_alias",), alignment))
    end = {b.id: b.end - 1 for b in views.buffers if b.id in is_root}
    # Every other buffer as the planner sees it, with the in-place writes and concat
    # placements of `analyses`; a buffer holding forward roots counts from the last of
    # their (views-only) lifetimes on: the backward values written over them.
    full = analyze(graph, order, _aliasing(graph, order, analyses, alignment))
    members: dict[int, list[int]] = {}
    for u in roots:
        members.setdefault(full.storage[u].root, []).append(u)
    steps = len(nodes)
    base = np.zeros(steps + 1, dtype=np.int64)
    born_bytes = np.zeros(steps + 1, dtype=np.int64)
    for b in full.buffers:
        size = align_up(b.size, alignment)
        start = b.start
        if b.id in members:
            start = max(end.get(u, pos[u]) for u in members[b.id]) + 1
        if start < b.end:
            base[start] += size
            base[b.end] -= size
            born_bytes[start] += size
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
        born_bytes=tuple(int(x) for x in born_bytes[:steps]),
        backward=backward,
        view_root=root,
        uses={u: tuple(sorted(set(uses[u]))) if u in chosen else () for u in roots},
    )


def _aliasing(
    graph: Graph, order: tuple[int, ...], analyses: Sequence[str], alignment: int
) -> Aliasing:
    from tensorgraph.planner.aliasing import analyze_aliasing

    return analyze_aliasing(graph, order, tuple(analyses), alignment=alignment)


def checkpoint_layers(
    model: RematModel, data_ops: Sequence[str] = ("matmul", "conv2d")
) -> frozenset[int]:
    """Checkpoint-every-layer's recompute set: every candidate except the layer inputs,
    the roots a forward matmul or conv2d reads as its data operand (operand 0), as
    `torch.utils.checkpoint` around each layer saves exactly a layer's input."""
    graph = model.graph
    forward = forward_ids(graph)
    kept = {
        model.view_root[n.inputs[0]]
        for n in graph.nodes
        if n.id in forward and n.op in data_ops and n.inputs
    }
    return frozenset(u for u in model.candidates if u not in kept)
