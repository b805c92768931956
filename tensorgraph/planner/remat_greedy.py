"""The greedy recompute choice under a memory budget: a fast deterministic point for
graphs whose integer program (planner/remat_milp.py) is too large to finish, and a
primal point beside it for the graphs it does finish (tensorgraph/remat.py takes the
cheapest).

Invariants: every point it answers fits the budget in `RematModel`'s peak profile (each
is tested by `model.peak` before it is kept); the searches count model evaluations
against a work budget, never time, so the same model and budget give the same point on
any machine; None exactly when even the least-memory point (every candidate recomputed,
a fresh copy at each read) does not fit.
"""

from __future__ import annotations

from collections.abc import Callable

from tensorgraph.planner.remat import RematModel
from tensorgraph.planner.remat_program import RematChoice
from tensorgraph.planner.remat_tighten import tighten

# Model evaluations (peak profiles) the heuristic may spend.
DEFAULT_GREEDY_WORK = 1_000
# Model evaluations each tightening (planner/remat_tighten.py) may spend, from each of
# its two starts (a step evaluates every move at the peak: tens on the zoo's steps).
# Measured on bench_remat's zoo steps at model budgets from 0.15 to 0.9 of the way
# from the least memory to keeping everything: each ends within 6-252 evaluations
# (0.2 s at most). From keeping everything (tried, dropped for the cheap start) it
# spent all 1,000 on ResNet-18 without fitting, and the cheap start's points cost
# fewer FLOPs (Llama at 0.5: 4.6M against 6.6M, and the other heuristics' 7.0M).
TIGHTEN_WORK = 1_000


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
      root once instead of at each read, or keep it;
    - tightening (planner/remat_tighten.py), from recomputing every candidate of at
      most a FLOP per byte and from checkpoint-every-layer: at the peak, recompute a
      kept value or split a copy in two (with the copies it reads), the most overflow
      removed per FLOP first, then exchanges (TIGHTEN_WORK evaluations each).

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
    def spent_all() -> bool:
        return spent >= work

    points = [relax(model, fits, r, f, spent_all) for r, f in [(everything, everything), *points]]
    found = [(r, model.emissions(r, f)) for r, f in points]
    # Tightening, from recomputing every value costing at most a FLOP per byte (layout
    # and elementwise ops) and from checkpoint-every-layer.
    cheap = frozenset(u for u in model.candidates if model.cost[u] <= model.size[u])
    for start in (cheap, everything - frozenset(layer_inputs)):
        tight, _ = tighten(model, budget, start, TIGHTEN_WORK)
        if tight is not None:
            found.append((tight.recompute, dict(tight.emit)))

    def rank(point: tuple[frozenset[int], dict[int, tuple[int, ...]]]) -> tuple:
        recompute, emit = point
        return model.recompute_cost(recompute, emit), sorted(recompute), sorted(emit.items())

    recompute, emit = min(found, key=rank)
    return RematChoice(
        recompute,
        emit,
        model.recompute_cost(recompute, emit),
        int(model.profile(recompute, emit).max(initial=0)),
        "greedy",
        None,
    )


def relax(
    model: RematModel,
    fits: Callable[[frozenset[int], frozenset[int]], bool],
    recompute: frozenset[int],
    fresh: frozenset[int],
    spent_all: Callable[[], bool],
) -> tuple[frozenset[int], frozenset[int]]:
    """From a point that `fits`, repeatedly the move saving the most FLOPs (its own
    copies' estimate) that still fits: copy a root once instead of at each read
    (leave `fresh`), or keep it; until no move fits or `spent_all()` (the caller's work
    budget, `fits` counting its evaluations)."""
    while not spent_all():
        emit = model.emissions(recompute, fresh)
        moves = []
        for u in recompute:
            copies = len(emit.get(u, ()))
            if u in fresh and copies > 1:
                moves.append((model.cost[u] * (copies - 1), u, recompute, fresh - {u}))
            moves.append((model.cost[u] * copies, u, recompute - {u}, fresh - {u}))
        moves.sort(key=lambda m: (-m[0], m[1]))
        for _, _, r, f in moves:
            if spent_all():
                return recompute, fresh
            if fits(r, f):
                recompute, fresh = r, f
                break
        else:
            break
    return recompute, fresh
