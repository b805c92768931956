"""The single-copy restriction of the recompute program: each recomputed forward value
gets exactly one copy, emitted before a backward step and living from there through its
last backward reader and the copies of the recomputed values reading it.

This is the special case of planner/remat_milp.py's program (Checkmate's, several
copies per value) in which every `R[u, j]` but one is 0 and the copy is carried to the
end; it is the program tensorgraph solved before multiple recomputation landed
(Moccasin's O(n) intervals per value on the fixed program order). It stays because HiGHS
finishes it where it does not finish the full program: the full program's carries
(`S`) and per-event originals give an LP relaxation whose root (cuts, sub-MIP
heuristics, which the node limit does not bound) ran for minutes on the small GPT-2,
so programs above `remat_milp.MAX_VARIABLES` are not solved; this one, though it has
more variables (8,809 against the full program's 3,753 on benches/bench_mincut.py's
GPT-2, 24,102 against 11,046 on its Llama), is monotone in `a` and solves to a
certificate under its node limit in tens of seconds there, so the driver (tensorgraph/remat.py)
takes the cheapest of the full program, this one and the heuristic, and is never worse
than this program was alone. Its proven gap bounds the single-copy restriction only:
0 means no single-copy point is cheaper, not that no multi-copy point is.

Variables, per candidate `u` and stage `j` (stages: the steps of the program order,
merged where no decision can change what is live):
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
A copy is counted at every stage from its emission through its last read, past its
horizon too (there `r[u]` stands for `a[u, j]`: a recomputed value's copy is emitted by
then). These rows bound `RematModel.profile` from above (which gives each copy a
sub-step of its own and frees a copy read only by the next one once that is computed),
so a point the program answers fits the model's budget
(tests/training/test_remat_single.py). Before the horizon fix they did not: a copy read
by several backward steps (GPT-2's residual, read by seven) went uncounted after its
first reader, and the certified 131,072-FLOPs point at GPT-2's halfway budget sat
161,925 B above its model budget, so it never fit once placed. The driver
(tensorgraph/remat.py) still plans every point it takes and keeps it only where the
placed arena fits: the model estimates the planner's liveness.

HiGHS runs deterministically under a node limit (branch-and-bound nodes, never
seconds), on programs of at most SINGLE_MAX_VARIABLES variables.
"""

from __future__ import annotations

import numpy as np

from tensorgraph.planner.remat import RematModel
from tensorgraph.planner.remat_milp import Columns, RematChoice, proven_gap, run_program

# Branch-and-bound nodes HiGHS may explore (the values the single-copy program ran
# under before multiple recomputation: they certified GPT-2, Llama and ResNet-18).
SINGLE_NODE_LIMIT = 2000
# Programs above this many variables are not solved (its work budget).
SINGLE_MAX_VARIABLES = 60_000


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


def solve_single_copy(
    model: RematModel, budget: int, node_limit: int = SINGLE_NODE_LIMIT
) -> RematChoice | None:
    """The least-FLOPs recompute set, each recomputed root copied once (see the module
    docstring), whose model peak is at most `budget` bytes; its gap bounds the
    single-copy restriction only. With no candidates, keeping everything (0 FLOPs, gap
    0) where its peak fits. None when the program is infeasible, too large
    (SINGLE_MAX_VARIABLES) or finds no point within `node_limit` nodes."""
    cands = model.candidates
    if not cands:  # keeping everything is the only point: optimal where it fits
        peak = model.peak(frozenset())
        return RematChoice(frozenset(), {}, 0, peak, "milp-single", 0.0) if peak <= budget else None
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

    var = Columns()
    names, integral = var.names, var.integral

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
            if prev is not None:
                rows.append(({prev: 1, a: -1}, -np.inf, 0))
            prev = a
        if prev is not None:  # a <= r at the chain's end bounds every earlier a
            rows.append(({prev: 1, r: -1}, -np.inf, 0))
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
            # Until u's last backward reader, keep >= 1 - r[u] bounds every reader's
            # row (r[v] - r[u] - a[v] <= 1 - r[u]): those rows are left out.
            needed = last is not None and s <= last
            if needed:
                terms.append(({ru: 1}, 1.0))  # keep + r >= 1
            for v in readers_u:
                if needed or s > horizon[v]:
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
            # Past u's horizon its copy is emitted iff u is recomputed: `r[u]` stands for
            # `a[u, j]` there (skipping these stages left a copy read after its first
            # reader, such as a residual read by several backward steps, uncounted).
            a = a_at(u, j) if s <= horizon[u] else ru
            if a is None:
                continue
            terms = []
            # Until u's last backward reader, copy >= a bounds every reader's row
            # (a[u] + r[v] - 1 - a[v] <= a[u]): those rows are left out.
            needed = last is not None and s <= last
            if needed:
                terms.append(({a: -1}, 0.0))
            for v in readers_u:
                if needed or s > horizon[v]:
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
    if n > SINGLE_MAX_VARIABLES:
        return None
    cost = np.zeros(n)
    for u in cands:
        cost[names[("r", u)]] = model.cost[u]
    result = run_program(cost, rows, integral, node_limit)
    if result.x is None:
        return None
    x = result.x
    recompute = frozenset(u for u in cands if x[names[("r", u)]] > 0.5)
    emit: dict[int, tuple[int, ...]] = {}
    latest = model.latest_emission(recompute)
    needed = set(latest)
    for u in needed:
        firsts = [starts[j] for j in back if ("a", u, j) in names and x[names[("a", u, j)]] > 0.5]
        emit[u] = (min(firsts) if firsts else latest[u],)
    flops = model.recompute_cost(recompute, emit)
    peak = int(model.profile(recompute, emit).max(initial=0))
    return RematChoice(recompute, emit, flops, peak, "milp-single", proven_gap(result))


def _reader_steps(model: RematModel) -> set[int]:
    steps: set[int] = set()
    for u in model.candidates:
        if model.first_use[u] is not None:
            steps.update((model.first_use[u], model.last_use[u]))
    return steps
