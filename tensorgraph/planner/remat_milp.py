"""The recompute choice under a memory budget: an integer program solved by HiGHS
(`scipy.optimize.milp`), and a greedy heuristic for graphs it cannot finish (its
single-copy restriction, which HiGHS finishes on larger graphs, is
planner/remat_single.py; tensorgraph/remat.py takes the cheapest of the three).

The program is Checkmate's with multiple recomputation (planner/remat_program.py builds
its columns and rows, and defines the answers, `RematChoice` and `Certificate`); the
heuristic is planner/remat_greedy.py's.

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

import math
import warnings
from collections.abc import Mapping

import numpy as np
from scipy.optimize import LinearConstraint, milp
from scipy.sparse import coo_array

from tensorgraph.planner.remat import RematModel
from tensorgraph.planner.remat_greedy import DEFAULT_GREEDY_WORK, solve_greedy
from tensorgraph.planner.remat_program import Certificate, Columns, RematChoice, _build, _Program

# The module's own names, and those it defined before the program's formulation and the
# heuristic moved to remat_program.py and remat_greedy.py (re-exported: remat.py,
# remat_single.py and tests import them from here).
__all__ = [
    "CERTIFY_MAX_VARIABLES",
    "CERTIFY_WORK",
    "DEFAULT_GREEDY_WORK",
    "DEFAULT_NODE_LIMIT",
    "FULL_OPTIONS",
    "MAX_VARIABLES",
    "Certificate",
    "Columns",
    "RematChoice",
    "_Program",
    "_build",
    "certify",
    "proven_gap",
    "run_program",
    "solve_greedy",
    "solve_milp",
]

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
