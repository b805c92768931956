"""The recompute choice under a memory budget: an integer program solved by HiGHS
(`scipy.optimize.milp`), and a greedy heuristic for graphs it cannot finish (its
single-copy restriction, which HiGHS finishes on larger graphs, is
planner/remat_single.py; tensorgraph/remat.py takes the cheapest of the three).

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

The solver runs deterministically under a node limit (branch-and-bound nodes, not
seconds) and only on programs of at most `max_variables` variables (its work budget):
the same graph and budget give the same answer on any machine. Its proven gap
is (incumbent - dual bound) / incumbent, 0 when the point is certified optimal.
`certify` gives the dual bound itself, in FLOPs: a lower bound on every point of the
full program at that budget, against which the driver states the gap of a point another
method found (tensorgraph/remat.py).

HiGHS's sub-MIP primal heuristics (RENS, RINS) and feasibility jump are off for this
program (FULL_OPTIONS): the driver has primal points from the single-copy program and
the heuristic already, and on the small GPT-2's program those heuristics were two
thirds of the root's time (12.4 s against 4.1 s with them off, node limit 1, at its
halfway budget), while the CNN's program still closed at its root (0.7 s, gap 0).
The root itself is not bounded by the node limit, so the variable caps stay.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Mapping

import numpy as np
from attrs import frozen
from scipy.optimize import LinearConstraint, milp
from scipy.sparse import coo_array

from tensorgraph.planner.remat import RematModel

# Branch-and-bound nodes HiGHS may explore before it answers its best point and bound.
DEFAULT_NODE_LIMIT = 500
# Integer programs above this many variables are not solved at every bisection trial
# (the driver then has the single-copy program, planner/remat_single.py, and the
# heuristic): the solver's work budget. HiGHS's node limit does not bound its root
# (cuts), which took 4-12 s on the small GPT-2's 3,402 variables and 21 s on Llama's
# 3,072 with 50 nodes; the zoo MLP's program is far below this and solves in well under
# a second.
MAX_VARIABLES = 2_000
# Above MAX_VARIABLES and up to this many, the driver solves the full program once, at
# the model budget its answer was chosen at (`certify` with node_limit=None): nodes
# CERTIFY_WORK // variables**2 (a node's LP grows about so), at least 1 (the root) and
# at most DEFAULT_NODE_LIMIT. Measured: the ResNet-18 step's 9,141 variables close at the
# root (0.7-1.7 s, gap 0); the transformers' (about 3,000-3,500) get 1-2 nodes, their
# root alone 4.8-11 s (50 nodes took 21-103 s on the shared machine without closing):
# its dual bound (or, where HiGHS gives none, the LP relaxation's) is the gap they
# report; programs of a few hundred variables get the full DEFAULT_NODE_LIMIT.
CERTIFY_MAX_VARIABLES = 12_000
CERTIFY_WORK = 20_000_000
# The full program's HiGHS options (see the module docstring).
FULL_OPTIONS = {
    "mip_heuristic_run_rens": False,
    "mip_heuristic_run_rins": False,
    "mip_heuristic_run_feasibility_jump": False,
}
# Model evaluations (peak profiles) the heuristic may spend.
DEFAULT_GREEDY_WORK = 1_000


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


def solve_milp(
    model: RematModel,
    budget: int,
    node_limit: int = DEFAULT_NODE_LIMIT,
    max_variables: int | None = None,
    options: Mapping[str, object] | None = None,
) -> RematChoice | None:
    """The least-FLOPs copies (see the module docstring) whose model peak is at most
    `budget` bytes, or None when the program is infeasible, too large (`max_variables`,
    None: MAX_VARIABLES) or finds no point within `node_limit` nodes."""
    return certify(model, budget, node_limit, max_variables, options).point


def certify(
    model: RematModel,
    budget: int,
    node_limit: int | None = DEFAULT_NODE_LIMIT,
    max_variables: int | None = None,
    options: Mapping[str, object] | None = None,
) -> Certificate:
    """The full program at `budget` bytes (see the module docstring): its best point
    and its proven lower bound (`Certificate`); both None when the program has more than
    `max_variables` variables (None: MAX_VARIABLES) or no candidate is read by the
    backward. `options`: HiGHS's (None: FULL_OPTIONS); `node_limit` None: scaled to the
    program's size (CERTIFY_WORK)."""
    limit = MAX_VARIABLES if max_variables is None else max_variables
    built = _build(model, budget, model.candidates)
    if isinstance(built, Certificate):
        return built
    names, integral, rows, cands, events = (
        built.names,
        built.integral,
        built.rows,
        built.cands,
        built.events,
    )
    n = len(names)
    if n > limit:
        return Certificate(None, None)
    if node_limit is None:
        node_limit = min(DEFAULT_NODE_LIMIT, max(1, CERTIFY_WORK // n**2))
    price = float(max(1, *(model.cost[u] for u in cands)))
    cost = np.zeros(n)
    for key, k in names.items():
        if key[0] == "R":
            cost[k] = model.cost[key[1]] / price
    result = run_program(
        cost, rows, integral, node_limit, FULL_OPTIONS if options is None else options
    )
    if result.x is None:
        if result.status == 2:
            return Certificate(None, math.inf)
        return Certificate(None, _relaxation_bound(cost, rows, node_limit, options, price))
    x = result.x
    recompute = frozenset(u for u in cands if x[names[("r", u)]] > 0.5)
    emit = {
        u: steps
        for u in recompute
        if (
            steps := tuple(
                s
                for j, s in enumerate(events)
                if ("R", u, j) in names and x[names[("R", u, j)]] > 0.5
            )
        )
    }
    flops = model.recompute_cost(recompute, emit)
    peak = int(model.profile(recompute, emit).max(initial=0))
    point = RematChoice(recompute, emit, flops, peak, "milp", proven_gap(result, price))
    if result.status == 0:
        return Certificate(point, float(flops))
    bound = getattr(result, "mip_dual_bound", None)
    if bound is None:
        return Certificate(point, _relaxation_bound(cost, rows, node_limit, options, price))
    return Certificate(point, max(0.0, float(bound) * price))


def _relaxation_bound(
    cost: np.ndarray, rows: list, node_limit: int, options: object, price: float
) -> float | None:
    """The LP relaxation's optimum (FLOPs): a lower bound on every point of the program,
    for when HiGHS stops at its node limit with no bound of its own (scipy gives the
    dual bound only with a point); None if the relaxation is not solved."""
    relaxed = run_program(
        cost, rows, [0] * len(cost), node_limit, FULL_OPTIONS if options is None else options
    )
    if relaxed.status == 2:
        return math.inf
    return None if relaxed.x is None else max(0.0, float(relaxed.fun) * price)


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


def solve_greedy(
    model: RematModel, budget: int, work: int = DEFAULT_GREEDY_WORK
) -> RematChoice | None:
    """A fast deterministic point, the fewest FLOPs of the searches whose model peak
    fits `budget` (each counts model evaluations against `work`, never time):

    - adding: candidates by FLOPs per byte (cheapest first, then program order), each
      copied once, until the peak fits, then dropping each added one, the most
      expensive first, whose removal still fits;
    - segments: checkpointing every k-th layer input (`checkpoint_layers`, k = 1, 2,
      ...: the sqrt(n) family of Chen et al.), the rest copied once or at each read;
    - relaxing: from the least memory the model knows (every candidate recomputed, a
      fresh copy at each read), and then from each point above, repeatedly take the
      move saving the most FLOPs (its own copies' estimate) that still fits: copy a
      root once instead of at each read, or keep it.

    None when even the least-memory point does not fit."""
    from tensorgraph.planner.remat import checkpoint_layers

    spent = 0

    def fits(recompute: frozenset[int], fresh: frozenset[int]) -> bool:
        nonlocal spent
        spent += 1
        return model.peak(recompute, fresh) <= budget

    points: list[tuple[frozenset[int], frozenset[int]]] = []
    everything = frozenset(model.candidates)
    if not fits(everything, everything):
        return None
    # Adding, each root copied once.
    order = sorted(model.candidates, key=lambda u: (model.cost[u] / model.size[u], u))
    chosen: list[int] = []
    ok = fits(frozenset(), frozenset())
    for u in order:
        if ok or spent >= work:
            break
        chosen.append(u)
        ok = fits(frozenset(chosen), frozenset())
    if ok:
        kept = set(chosen)
        for u in sorted(chosen, key=lambda v: (-model.cost[v], v)):
            if spent >= work:
                break
            if fits(frozenset(kept - {u}), frozenset()):
                kept.discard(u)
        points.append((frozenset(kept), frozenset()))
    # Segments.
    layer_inputs = [u for u in model.candidates if u not in checkpoint_layers(model)]
    for k in range(1, len(layer_inputs) + 1):
        recompute = everything - frozenset(layer_inputs[::k])
        for fresh in (frozenset(), recompute):
            if spent < work and fits(recompute, fresh):
                points.append((recompute, fresh))

    # Relaxing, from the least-memory point first, then from each point found above.
    def relax(recompute: frozenset[int], fresh: frozenset[int]) -> tuple:
        while spent < work:
            emit = model.emissions(recompute, fresh)
            moves = []
            for u in recompute:
                copies = len(emit.get(u, ()))
                if u in fresh and copies > 1:
                    moves.append((model.cost[u] * (copies - 1), u, recompute, fresh - {u}))
                moves.append((model.cost[u] * copies, u, recompute - {u}, fresh - {u}))
            moves.sort(key=lambda m: (-m[0], m[1]))
            for _, _, r, f in moves:
                if spent >= work:
                    return recompute, fresh
                if fits(r, f):
                    recompute, fresh = r, f
                    break
            else:
                break
        return recompute, fresh

    points = [relax(everything, everything), *(relax(*p) for p in points)]

    def price(point: tuple[frozenset[int], frozenset[int]]) -> int:
        return model.recompute_cost(point[0], model.emissions(*point))

    recompute, fresh = min(points, key=lambda p: (price(p), sorted(p[0]), sorted(p[1])))
    emit = model.emissions(recompute, fresh)
    return RematChoice(
        recompute,
        emit,
        model.recompute_cost(recompute, emit),
        int(model.profile(recompute, emit).max(initial=0)),
        "greedy",
        None,
    )


def run_program(
    cost: np.ndarray,
    rows: list,
    integral: list,
    node_limit: int,
    options: Mapping[str, object] | None = None,
) -> object:
    """HiGHS's answer (scipy.optimize.milp) to: minimise `cost` @ x over x in [0, 1]^n,
    integral where `integral` says, every (row, lb, ub) of `rows` (row: column ->
    coefficient) holding lb <= row @ x <= ub; at most `node_limit` branch-and-bound
    nodes, no relative-gap stop (the same answer on any machine). `options` are further
    HiGHS options, which scipy passes to HiGHS verbatim (documented; its warning that
    it does so is silenced here)."""
    n = len(cost)
    data, ri, ci, lo, hi = [], [], [], [], []
    for k, (row, lb, ub) in enumerate(rows):
        for col, val in row.items():
            ri.append(k)
            ci.append(col)
            data.append(val)
        lo.append(lb)
        hi.append(ub)
    matrix = coo_array((data, (ri, ci)), shape=(len(rows), n)).tocsr()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Unrecognized options detected", RuntimeWarning)
        return milp(
            cost,
            integrality=np.array(integral),
            bounds=(np.zeros(n), np.ones(n)),
            constraints=LinearConstraint(matrix, lo, hi) if rows else (),
            options={
                "node_limit": node_limit,
                "mip_rel_gap": 0.0,
                "presolve": True,
                **(options or {}),
            },
        )


def proven_gap(result: object, scale: float = 1.0) -> float | None:
    """(incumbent - dual bound) / incumbent of `run_program`'s `result`, whose objective
    is in units of `scale`: 0.0 when HiGHS proved it optimal, None without a bound."""
    if result.status == 0:
        return 0.0
    bound = getattr(result, "mip_dual_bound", None)
    objective = float(result.fun) * scale
    if bound is None or objective <= 0:
        return None
    return max(0.0, (objective - float(bound) * scale) / objective)


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
