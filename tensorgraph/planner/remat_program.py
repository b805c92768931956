"""The full integer program of the recompute choice under a memory budget: its columns
and rows, and the answers it gives (a `RematChoice`, a `Certificate`), which
planner/remat_milp.py solves with HiGHS.

The program is Checkmate's (Jain et al., "Checkmate: Breaking the Memory Wall with
Optimal Tensor Rematerialization", MLSys 2020: R[t, i] compute, S[t, i] keep, memory
rows per stage) on the fixed program order of `RematModel` (planner/remat.py), with
multiple recomputation: a forward value may be copied before any backward step that
reads a candidate (an event), as often as it pays, each copy freed after the last read
it serves. Stages are the events; the steps between two events are merged where no
decision changes what is live.

Variables, per tracked root `u` (the candidates and the roots they read) and event `j`
up to the last at which `u` may be read:
- `r[u]` (binary, candidates): `u` is recomputed, its original dead after its last
  forward reader;
- `R[u, j]` (binary): a copy of `u` is emitted before event `j` (at most `r[u]`); the
  objective is the sum of `cost[u] * R[u, j]` (FLOPs, planner/flops.py);
- `S[u, j]` in [0, 1]: a copy emitted before an earlier event is still live at `j`
  (at most `S[u, j-1] + R[u, j-1]`);
- `O[u, j]` in [0, 1]: the original is live at `j` (at most `1 - r[u]`, and no more
  than at `j-1`: it cannot revive).
A backward read of `u` at event `j` needs `O + S + R >= 1` there, and a copy of `v`
emitted at `j` needs each root it reads live the same way. Memory rows: at each event,
the fixed bytes (the buffers the choice does not touch and each root's interval through
its last forward reader, or for other roots through its last reader) plus
`size[u] * (O + S + R)`; between events, the fixed bytes plus `size[u] * (O + S)` of
the next event. Every copy emitted before an event counts there at once, an upper bound
on the rewrite's liveness (which frees a copy read only by the next copy once that is
computed, as `RematModel.profile` counts): a point the program answers fits the model.

Invariants: `_build` makes the same program (column order included) for the same model,
budget and candidates, so HiGHS's deterministic answer is the same on any machine; a
budget some step exceeds whatever the choice is answered as infeasible (`math.inf`)
without a solve, and a model with no candidate read by the backward as not solved.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping

import numpy as np
from attrs import frozen

from tensorgraph.planner.remat import RematModel


@frozen
class RematChoice:
    """A recompute set, the step before which each needed copy is emitted, its FLOPs,
    the model's peak, the method that found it ("milp" or "greedy") and the proven gap
    (None: no bound, as for the heuristic)."""

    recompute: frozenset[int]
    emit: Mapping[int, tuple[int, ...]]
    flops: int
    peak: int
    method: str
    gap: float | None


@frozen
class Certificate:
    """What the full program proved at one budget: its best `point` (None: none found
    within the node limit, or none exists), and `bound`, a lower bound (FLOPs) on the
    recompute of every point of the full program at that budget (HiGHS's dual bound;
    `math.inf` when the program is infeasible: no point of its model fits), or None
    when the program was not solved (too large) or gave no bound."""

    point: RematChoice | None
    bound: float | None

    def gap(self, flops: int) -> float | None:
        """The proven gap of a point of `flops` FLOPs against `bound`: (flops - bound)
        / flops, 0 when no point of the full program is cheaper, None without a bound."""
        if self.bound is None or math.isinf(self.bound):  # not solved, or infeasible:
            return None  # the point lies outside the full program's (stricter) rows
        if flops <= self.bound:
            return 0.0
        return (flops - self.bound) / flops


@frozen
class _Program:
    """The full program's columns (`names`, `integral`) and `rows` (memory in units of
    the largest root), for the candidates `cands` at the backward steps `events`."""

    names: dict[tuple, int]
    integral: list[int]
    rows: list[tuple[dict[int, float], float, float]]
    cands: tuple[int, ...]
    events: list[int]


def _build(model: RematModel, budget: int, cands: tuple[int, ...]) -> _Program | Certificate:
    """The full program for `budget` bytes with `cands` the candidates (every other
    root kept); a Certificate where it needs no solve: no candidate read by the
    backward (not solved), or some step over budget whatever the choice (infeasible)."""
    is_cand = set(cands)
    tracked = sorted(
        is_cand | {i for v in cands for i in model.inputs[v]}, key=model.born.__getitem__
    )
    events = sorted({s for u in cands for s in model.uses[u]})
    # Bytes in units of the largest root and FLOPs in units of the dearest: HiGHS's
    # numerics (ranges near 1) and cuts work far better than on raw bytes and FLOPs.
    if not events:  # nothing to recompute (no candidate, or none read by the backward)
        return Certificate(None, None)
    unit = float(max(model.size[u] for u in tracked))
    index = {s: j for j, s in enumerate(events)}
    # The last event at which a root may be read: its backward readers', and those at
    # which a recomputed candidate reading it may be copied.
    last_need: dict[int, int] = {}
    for u in reversed(tracked):
        needs = [index[s] for s in model.uses[u]]
        needs += [last_need[v] for v in model.consumers[u] if v in last_need]
        if needs:
            last_need[u] = max(needs)
    const_end = {
        u: model.forward_last[u] if u in is_cand else model.baseline_end[u] for u in model.roots
    }
    # Bytes live at each step whatever the choice: the other buffers and each root's
    # interval from its step through `const_end`.
    delta = np.zeros(model.steps + 1, dtype=np.int64)
    for u in model.roots:
        delta[model.born[u]] += model.size[u]
        delta[const_end[u] + 1] -= model.size[u]
    fixed = np.asarray(model.base, dtype=np.int64) + np.cumsum(delta)[: model.steps]

    var = Columns()
    names, integral = var.names, var.integral

    def orig(u: int, j: int) -> int | None:
        """O[u, j], or None when the original is live at event j whatever the choice."""
        if events[j] <= const_end[u]:
            return None
        return var(("O", u, j), False)

    rows: list[tuple[dict[int, float], float, float]] = []
    avail: dict[tuple[int, int], dict[int, float]] = {}  # (u, j) -> terms >= 1 when live
    for u in tracked:
        if u not in last_need:
            continue
        r = var(("r", u), True) if u in is_cand else None
        prev_o = None
        for j in range(last_need[u] + 1):
            terms: dict[int, float] = {}
            o = orig(u, j)
            if o is None:
                avail[(u, j)] = {}
                continue
            terms[o] = 1.0
            if r is not None:
                rows.append(({o: 1, r: 1}, -np.inf, 1))  # a recomputed original is dead
                c = var(("R", u, j), True)
                rows.append(({c: 1, r: -1}, -np.inf, 0))
                terms[c] = 1.0
                if j > 0 and ("R", u, j - 1) in names:
                    s = var(("S", u, j), False)
                    row = {s: 1.0, names[("R", u, j - 1)]: -1.0}
                    if ("S", u, j - 1) in names:
                        row[names[("S", u, j - 1)]] = -1.0
                    rows.append((row, -np.inf, 0))  # a carried copy was live before
                    terms[s] = 1.0
            if prev_o is not None:
                rows.append(({o: 1, prev_o: -1}, -np.inf, 0))  # the original cannot revive
            prev_o = o
            avail[(u, j)] = terms
    for u in cands:
        for s in model.uses[u]:
            terms = avail.get((u, index[s]))
            if terms:
                rows.append((dict(terms), 1, np.inf))
        for v in model.consumers[u]:
            for j in range(last_need.get(v, -1) + 1):
                terms = avail.get((u, j))
                if terms and ("R", v, j) in names:
                    rows.append(
                        ({**{k: -x for k, x in terms.items()}, names[("R", v, j)]: 1}, -np.inf, 0)
                    )
    for v in cands:  # inputs that are not candidates: their original must be live
        for u in model.inputs[v]:
            if u in is_cand:
                continue
            for j in range(last_need.get(v, -1) + 1):
                terms = avail.get((u, j))
                if terms and ("R", v, j) in names:
                    rows.append(
                        ({**{k: -x for k, x in terms.items()}, names[("R", v, j)]: 1}, -np.inf, 0)
                    )
    # Memory rows: each event step (originals, carried copies and the copies emitted
    # before it) and the stretches between events (originals and carried copies), split
    # where a root's fixed interval ends; before the first event, the kept originals.
    marks = sorted({const_end[u] + 1 for u in tracked} | set(events) | {e + 1 for e in events})
    for j, step in enumerate([*events, model.steps]):
        lo = events[j - 1] + 1 if j > 0 else 0
        cuts = [lo, *[m for m in marks if lo < m < step], step]
        for start, stop in itertools.pairwise(cuts):
            if start >= stop:
                continue
            row: dict[int, float] = {}
            for u in tracked:
                if j < len(events) and const_end[u] < start and ("O", u, j) in names:
                    k = names[("O", u, j)]
                    row[k] = row.get(k, 0) + model.size[u]
                if j < len(events) and ("S", u, j) in names:
                    k = names[("S", u, j)]
                    row[k] = row.get(k, 0) + model.size[u]
            cap = budget - int(fixed[start:stop].max())
            if cap < 0:
                return Certificate(None, math.inf)
            if row:
                rows.append(({k: x / unit for k, x in row.items()}, -np.inf, cap / unit))
        if j < len(events):
            row = {}
            for u in tracked:
                for key in (("O", u, j), ("S", u, j), ("R", u, j)):
                    if key in names:
                        row[names[key]] = row.get(names[key], 0) + model.size[u]
            cap = budget - int(fixed[step])
            if cap < 0:
                return Certificate(None, math.inf)
            if row:
                rows.append(({k: x / unit for k, x in row.items()}, -np.inf, cap / unit))
    return _Program(names, integral, rows, tuple(cands), events)


class Columns:
    """The integer programs' variables: `names` (key -> column, in the order first asked
    for) and `integral` (per column, 1 binary, 0 continuous in [0, 1]). Calling it with a
    key gives the key's column, adding it on first use."""

    def __init__(self) -> None:
        self.names: dict[tuple, int] = {}
        self.integral: list[int] = []

    def __call__(self, key: tuple, binary: bool) -> int:
        if key not in self.names:
            self.names[key] = len(self.names)
            self.integral.append(1 if binary else 0)
        return self.names[key]
