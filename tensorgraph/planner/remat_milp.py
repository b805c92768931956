"""The recompute choice under a memory budget: an integer program solved by HiGHS
(`scipy.optimize.milp`), and a greedy heuristic for graphs it cannot finish.

The program is Checkmate's (Jain et al., "Checkmate: Breaking the Memory Wall with
Optimal Tensor Rematerialization", MLSys 2020: R[t, i] compute, S[t, i] keep, memory
rows per stage) restricted to the fixed program order of `RematModel` (planner/remat.py),
as Moccasin (Bartan et al., ICML 2023) restricts it to O(n) intervals per value: each
forward value is computed once in the forward and at most once more, by a copy emitted
before a backward step; stages are the steps of the program order, merged where no
decision can change what is live.

Variables, per candidate `u` and stage `j`:
- `r[u]` (binary): `u` is recomputed; the objective is the sum of `cost[u] * r[u]`
  (FLOPs, planner/flops.py);
- `a[u, j]` (binary, backward stages): `u`'s copy is emitted by stage `j`; monotone in
  `j`, at most `r[u]`, 1 at `u`'s first backward reader if recomputed, and set no later
  than the copy of any recomputed candidate reading `u`;
- `keep[u, j]`, `copy[u, j]` in [0, 1]: the original, and the copy, live at stage `j`,
  bounded below by what reads them there (a kept value until its last backward reader
  and until each recomputed reader's copy is emitted; a copy from its emission through
  its last backward reader and its readers' emissions).
The memory row of each stage: the bytes live in buffers the choice does not touch (the
stage's largest), plus `size[u] * (keep[u, j] + copy[u, j])`, at most the budget.

The solver runs deterministically under a node limit (branch-and-bound nodes, not
seconds): the same graph and budget give the same answer on any machine. Its proven gap
is (incumbent - dual bound) / incumbent, 0 when the point is certified optimal.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from attrs import frozen
from scipy.optimize import LinearConstraint, milp
from scipy.sparse import coo_array

from tensorgraph.planner.remat import RematModel

# Branch-and-bound nodes HiGHS may explore before it answers its best point and bound.
DEFAULT_NODE_LIMIT = 2000
# Integer programs above this many variables go to the heuristic alone.
MAX_VARIABLES = 60_000


@frozen
class RematChoice:
    """A recompute set, the step before which each needed copy is emitted, its FLOPs,
    the model's peak, the method that found it ("milp" or "greedy") and the proven gap
    (None: no bound, as for the heuristic)."""

    recompute: frozenset[int]
    emit: Mapping[int, int]
    flops: int
    peak: int
    method: str
    gap: float | None


def _horizons(model: RematModel) -> dict[int, int]:
    """The latest step a candidate's copy can be emitted at: its first backward reader,
    or (read only by other copies) the latest of its readers' horizons."""
    horizon: dict[int, int] = {}
    for u in reversed(model.candidates):
        first = model.first_use[u]
        later = [horizon[v] for v in model.consumers[u] if v in horizon]
        if first is not None:
            horizon[u] = first
        elif later:
            horizon[u] = max(later)
    return horizon


def solve_milp(
    model: RematModel, budget: int, node_limit: int = DEFAULT_NODE_LIMIT
) -> RematChoice | None:
    """The least-FLOPs recompute set whose model peak is at most `budget` bytes, or None
    when the program is infeasible, too large (MAX_VARIABLES) or finds no point within
    `node_limit` nodes."""
    cands = model.candidates
    is_cand = set(cands)
    horizon = _horizons(model)
    backward = sorted(
        {s for u in cands for s in (model.first_use[u], model.last_use[u]) if s is not None}
        | set(horizon.values())
    )
    # Emission points: the backward steps reading a candidate.
    emission = sorted({p for p in _reader_steps(model)} | set(backward))
    if not emission:
        return None
    first_backward = emission[0]
    const_end = {
        u: model.forward_last[u] if u in is_cand else model.baseline_end[u] for u in model.roots
    }
    marks = {0, model.steps}
    for u in model.roots:
        marks.update((model.born[u], const_end[u] + 1))
        if model.last_use.get(u) is not None:
            marks.add(model.last_use[u] + 1)
    for e in emission:
        marks.update((e, e + 1))
    starts = sorted(m for m in marks if 0 <= m < model.steps)
    bounds = [*starts[1:], model.steps]
    base = np.asarray(model.base, dtype=np.int64)
    seg_base = [int(base[s:e].max()) for s, e in zip(starts, bounds, strict=True)]
    seg_of = {s: j for j, s in enumerate(starts)}
    segs = range(len(starts))
    back = [j for j in segs if starts[j] >= first_backward]

    names: dict[tuple, int] = {}
    integral: list[int] = []

    def var(key: tuple, binary: bool) -> int:
        if key not in names:
            names[key] = len(names)
            integral.append(1 if binary else 0)
        return names[key]

    rows: list[tuple[dict[int, float], float, float]] = []
    for u in cands:
        var(("r", u), True)
    for u in cands:
        r = names[("r", u)]
        if u not in horizon:
            continue
        prev = None
        for j in back:
            if starts[j] > horizon[u]:
                break
            a = var(("a", u, j), True)
            rows.append(({a: 1, r: -1}, -np.inf, 0))
            if prev is not None:
                rows.append(({prev: 1, a: -1}, -np.inf, 0))
            prev = a
        if model.first_use[u] is not None:
            rows.append(({names[("a", u, seg_of[model.first_use[u]])]: 1, r: -1}, 0, np.inf))

    # A copy is emitted no later than the copy of a recomputed candidate reading it.
    for u in cands:
        for v in model.consumers[u]:
            for j in back:
                a, b = names.get(("a", u, j)), names.get(("a", v, j))
                if a is not None and b is not None:
                    rows.append(({a: 1, b: -1, names[("r", u)]: -1}, -1, np.inf))

    def a_at(v: int, j: int) -> int | None:
        """a[v, j], or None when 0 (before the backward) or past v's horizon (then 1
        if v is recomputed: emitted by its horizon)."""
        return names.get(("a", v, j))

    memory: list[dict[int, float]] = [{} for _ in segs]
    for u in model.roots:
        size = model.size[u]
        ru = names.get(("r", u))
        readers_u = [v for v in model.consumers[u] if v in horizon]
        last = model.last_use.get(u) if u in is_cand else None
        for j in segs:
            s = starts[j]
            if s <= const_end[u] or s < model.born[u]:
                continue
            # The original.
            terms: list[tuple[dict[int, float], float]] = []
            if last is not None and s <= last:
                terms.append(({ru: 1}, 1.0))  # keep + r >= 1
            for v in readers_u:
                if s > horizon[v]:
                    continue
                row = {names[("r", v)]: -1.0}
                if ru is not None:
                    row[ru] = row.get(ru, 0) + 1.0
                prev = a_at(v, j - 1) if j > 0 else None
                if prev is not None:
                    row[prev] = 1.0
                terms.append((row, 0.0))
            if terms:
                k = var(("keep", u, j), False)
                for row, lb in terms:
                    rows.append(({k: 1, **row}, lb, np.inf))
                memory[j][k] = memory[j].get(k, 0) + size
        if u not in horizon:
            continue
        for j in back:
            s = starts[j]
            a = a_at(u, j)
            if a is None:
                continue
            terms = []
            if last is not None and s <= last:
                terms.append(({a: -1}, 0.0))
            for v in readers_u:
                if s > horizon[v]:
                    continue
                row = {a: -1.0, names[("r", v)]: -1.0}
                prev = a_at(v, j - 1)
                if prev is not None:
                    row[prev] = 1.0
                terms.append((row, -1.0))
            if terms:
                c = var(("copy", u, j), False)
                for row, lb in terms:
                    rows.append(({c: 1, **row}, lb, np.inf))
                memory[j][c] = memory[j].get(c, 0) + size
    # The forward part of each root: live from its birth through const_end.
    for j in segs:
        s = starts[j]
        fixed = sum(model.size[u] for u in model.roots if model.born[u] <= s <= const_end[u])
        cap = budget - seg_base[j] - fixed
        if cap < 0:
            return None
        if memory[j]:
            rows.append((memory[j], -np.inf, cap))
    n = len(names)
    if n > MAX_VARIABLES:
        return None
    cost = np.zeros(n)
    for u in cands:
        cost[names[("r", u)]] = model.cost[u]
    data, ri, ci, lo, hi = [], [], [], [], []
    for k, (row, lb, ub) in enumerate(rows):
        for col, val in row.items():
            ri.append(k)
            ci.append(col)
            data.append(val)
        lo.append(lb)
        hi.append(ub)
    matrix = coo_array((data, (ri, ci)), shape=(len(rows), n)).tocsr()
    result = milp(
        cost,
        integrality=np.array(integral),
        bounds=(np.zeros(n), np.ones(n)),
        constraints=LinearConstraint(matrix, lo, hi) if rows else (),
        options={"node_limit": node_limit, "mip_rel_gap": 0.0, "presolve": True},
    )
    if result.x is None:
        return None
    x = result.x
    recompute = frozenset(u for u in cands if x[names[("r", u)]] > 0.5)
    emit: dict[int, int] = {}
    needed = set(model.latest_emission(recompute))
    for u in needed:
        firsts = [starts[j] for j in back if ("a", u, j) in names and x[names[("a", u, j)]] > 0.5]
        emit[u] = min(firsts) if firsts else model.latest_emission(recompute)[u]
    flops = sum(model.cost[u] for u in emit)
    peak = int(model.profile(recompute, emit).max(initial=0))
    bound = getattr(result, "mip_dual_bound", None)
    objective = float(result.fun)
    if result.status == 0:
        gap = 0.0
    elif bound is None or objective <= 0:
        gap = None
    else:
        gap = max(0.0, (objective - float(bound)) / objective)
    return RematChoice(recompute, emit, flops, peak, "milp", gap)


def _reader_steps(model: RematModel) -> set[int]:
    steps: set[int] = set()
    for u in model.candidates:
        if model.first_use[u] is not None:
            steps.update((model.first_use[u], model.last_use[u]))
    return steps


def solve_greedy(model: RematModel, budget: int) -> RematChoice | None:
    """A fast deterministic point: add candidates by FLOPs per byte (cheapest first,
    then program order) until the model peak fits `budget`, then drop each added one,
    the most expensive first, whose removal still fits. None when recomputing every
    candidate does not fit."""
    order = sorted(model.candidates, key=lambda u: (model.cost[u] / model.size[u], u))
    chosen: list[int] = []
    peak = model.peak(frozenset())
    for u in order:
        if peak <= budget:
            break
        chosen.append(u)
        peak = model.peak(frozenset(chosen))
    if peak > budget:
        return None
    kept = set(chosen)
    for u in sorted(chosen, key=lambda v: (-model.cost[v], v)):
        trial = frozenset(kept - {u})
        if model.peak(trial) <= budget:
            kept = set(trial)
    recompute = frozenset(kept)
    emit = model.latest_emission(recompute)
    return RematChoice(
        recompute,
        emit,
        model.recompute_cost(recompute),
        int(model.profile(recompute, emit).max(initial=0)),
        "greedy",
        None,
    )
