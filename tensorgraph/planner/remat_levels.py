"""The level search of rematerialisation, on the model of recompute-all's own schedule:
points held to a level per step, or to the least the model knows at a step where that
is more (planner/remat_tighten.py's `least_by_step`), bisected on the placed arena.
tensorgraph/remat.py runs it after its bisection of one model budget on the program
order's model, and takes what it finds where it is cheaper.

Why another model. `RematModel` counts liveness on one order, and the scheduler then
reorders every rewritten program; where heavy recompute is what a budget needs, the
program order is the wrong one to count on. The order the scheduler chose for
recompute-all (every candidate recomputed, a copy at each read), induced on the
graph's own nodes (`induced_order`), puts the backward's reductions before the values
they free, as the planner will: on ResNet-18's step the program order's model puts
that point at 1,180,160 B (its batch norm backward computes dy * gamma before the sum
that frees the recomputed input), the induced order's at 983,104 B, the placed arena
exactly. Its points are rewritten in that order (`rematerialize(graph, emit, order)`).

Why levels. The bisection of one model budget cannot go below the model's least
memory, its peak with every candidate recomputed; where that peak is a step no choice
lowers, one budget admits every step up to it. Held per step instead, the steps the
choice does move are held to the level, and the others only to their least.

Steps (at most LEVEL_ATTEMPTS levels, each costing two tightenings, a relaxation and at
most one placement):
1. the first level is the budget itself (the model of this order counts close to the
   planner where much is recomputed);
2. at a level, tighten from the heuristic's two starts (every candidate of at most a
   FLOP per byte, and checkpoint-every-layer) and relax from the least memory (every
   candidate recomputed, a copy at each read, which holds every step to its least
   and so always fits: remat_greedy's `relax`), and take the cheapest point;
3. a point at least as dear as `best_flops` cannot win: the search moves up without
   placing it; otherwise it is placed, and the level moves up where it fits (a higher
   level gives cheaper points) and down where it does not.
Measured (benches/README.md): GPT-2's step at half its keep-everything arena, 26.4M
FLOPs at 1,856,576 B, where the program order's model found 72.4M. Deterministic:
levels are integers from bisection, the tightenings count model evaluations,
placement counts the planner's work.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from tensorgraph.ir.graph import Graph
from tensorgraph.planner.remat import RematModel, checkpoint_layers
from tensorgraph.planner.remat_greedy import relax
from tensorgraph.planner.remat_program import RematChoice
from tensorgraph.planner.remat_tighten import above, least_by_step, tighten

# Levels tried: each costs at most one placement (the trial schedule budget) and two
# tightenings; the search took 24 s on GPT-2's step and 45 s on ResNet-18's at half
# their keep-everything arenas (a loaded 2-core machine).
LEVEL_ATTEMPTS = 6
# Model evaluations of each tightening (remat_greedy's TIGHTEN_WORK, the same search).
LEVEL_WORK = 1_000

Place = Callable[[Mapping[int, tuple[int, ...]]], object]


def search_levels(
    model: RematModel,
    budget: int,
    first: int,
    ceiling: int,
    place: Place,
    best_flops: float,
    alignment: int,
) -> tuple[RematChoice, object] | None:
    """The cheapest point of the level search (module docstring) whose placed arena
    (`place(emit).plan.arena_size`) is at most `budget` bytes and whose FLOPs are below
    `best_flops`, with its placed program; None where none is. `first` is the first
    level, `ceiling` a level known not to fit (the model's keep-everything peak)."""
    least = least_by_step(model)
    cheap = frozenset(u for u in model.candidates if model.cost[u] <= model.size[u])
    starts = (cheap, checkpoint_layers(model))
    low, high = 0, ceiling
    level = max(1, min(first, ceiling - alignment))
    found: tuple[RematChoice, object] | None = None
    for _ in range(LEVEL_ATTEMPTS):
        point = _cheapest(model, least, level, starts)
        bar = best_flops if found is None else found[0].flops
        if point.flops >= bar:
            low = level
        else:
            prog = place(point.emit)
            if prog.plan.arena_size <= budget:
                low, found = level, (point, prog)
            else:
                high = level
        if high - low <= alignment:
            break
        level = (low + high) // 2
    return found


def _cheapest(
    model: RematModel, least: np.ndarray, level: int, starts: tuple[frozenset[int], ...]
) -> RematChoice:
    """The cheapest of the points at `level` (module docstring, step 2): the
    tightenings' and the relaxed least-memory point's, which always fits."""
    allowance = np.maximum(least, level)
    spent = 0

    def fits(recompute: frozenset[int], fresh: frozenset[int]) -> bool:
        nonlocal spent
        spent += 1
        emit = model.emissions(recompute, fresh)
        return bool((above(model, allowance, model.profile(recompute, emit), emit) <= 0).all())

    everything = frozenset(model.candidates)
    recompute, fresh = relax(model, fits, everything, everything, lambda: spent >= LEVEL_WORK)
    found = [(recompute, model.emissions(recompute, fresh))]
    tightened = (tighten(model, allowance, start, LEVEL_WORK)[0] for start in starts)
    found += [(p.recompute, dict(p.emit)) for p in tightened if p is not None]

    def rank(point: tuple[frozenset[int], dict]) -> tuple:
        return model.recompute_cost(*point), sorted(point[0]), sorted(point[1].items())

    recompute, emit = min(found, key=rank)
    peak = int(model.profile(recompute, emit).max(initial=0))
    return RematChoice(recompute, emit, model.recompute_cost(recompute, emit), peak, "greedy", None)


def induced_order(graph: Graph, scheduled: Sequence[int]) -> tuple[int, ...]:
    """`graph`'s nodes in the order they take in `scheduled` (the schedule of a
    rematerialised copy of `graph`: its copies' ids are left out), repaired into a
    topological order of `graph` (Kahn's, the ready node earliest in `scheduled` first):
    a backward node that read only a copy may stand before the original it reads."""
    position = {i: k for k, i in enumerate(scheduled)}
    last = len(position)
    waiting = {n.id: len(set(n.inputs)) for n in graph.nodes}
    readers: dict[int, list[int]] = {n.id: [] for n in graph.nodes}
    for n in graph.nodes:
        for i in set(n.inputs):
            readers[i].append(n.id)
    ready = [(position.get(i, last), i) for i, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        _, i = heapq.heappop(ready)
        order.append(i)
        for r in readers[i]:
            waiting[r] -= 1
            if waiting[r] == 0:
                heapq.heappush(ready, (position.get(r, last), r))
    return tuple(order)
