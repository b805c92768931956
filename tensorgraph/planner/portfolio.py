"""`best`: a portfolio of offset searches under one work budget, never worse than the
greedy baselines of `planner.assign`, stopping as soon as a plan reaches the lower
bound.

Stages, each with a share of the work left (the constants below): the baselines
(naive, greedy_size, greedy_breadth) always run; more orders (`assign.MORE_ORDERS`);
skyline packings built by the exact search's first round (`search.construct`);
reordering that moves the buffers touching the arena top earlier (only when no
construction beat the best order); the repair search around the top
(`improve.repair`); the exact search on the buffers around the steps that hold the top
up (`planner.window`); seeded random repair (`improve.shake`); the exact search on all
buffers, bisecting capacities towards the bound (`search.minimize`); shake again.

Invariants: every stage starts from the incumbent and replaces it only by a valid
packing with a smaller arena, so the result is a valid aligned packing never worse
than the baselines. Deterministic: work is counted in units (`search.Work`), never
timed, and random choices are seeded, so the same buffers, alignment and budget give
byte-identical offsets on any machine (only an explicit `time_limit` reads the clock,
and a plan it cut short says so).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from tensorgraph.errors import PlanError
from tensorgraph.planner.assign import (
    BASELINES,
    MORE_ORDERS,
    NEAR,
    PLACE_UNITS,
    Columns,
    naive,
    place_within,
)
from tensorgraph.planner.buffers import Assignment, Buffer
from tensorgraph.planner.certificate import CertifiedAssignment, arena_bound, certified
from tensorgraph.planner.improve import repair, shake
from tensorgraph.planner.search import Work, construct, default_budget, minimize
from tensorgraph.planner.window import resolve_window

STALL = 8  # rounds without progress before a restart from a perturbed best order
ORDERS_SHARE = 2  # after the baselines, more orders get 1/ORDERS_SHARE of the work left,
CONSTRUCT_SHARE = 2  # skyline constructions (`search.construct`) CONSTRUCT_SHARE quarters
IMPROVE_SHARE = 10  # of the rest, reordering 1/IMPROVE_SHARE of the rest,
REPAIR_SHARE = 2  # then the repair search 1/REPAIR_SHARE of the rest, the window search
WINDOW_SHARE = 2  # (`planner.window`) 1/WINDOW_SHARE of the rest, `improve.shake`
SHAKE_SHARE = 2  # 1/SHAKE_SHARE of the rest; exact search the rest
RESOLUTION = 64  # until its bisection's step is below 1/RESOLUTION of the gap it started
# with (smaller steps rarely fit on dense sets); `improve.shake` gets whatever is left


def best(
    buffers: Sequence[Buffer],
    alignment: int,
    budget: int | None = None,
    time_limit: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> CertifiedAssignment:
    """The smallest plan found within `budget` work units (see the module docstring),
    with its certificate (`planner.certificate`): optimal when it reaches the lower bound
    or the exact search proved the arena one byte smaller infeasible, otherwise the
    range the optimum lies in.

    Steps: 1. naive, greedy_size and greedy_breadth always run (so `best` is never worse
    than them, whatever the budget); 2. more orderings with 1/ORDERS_SHARE of the work
    left (a pass starts when the last pass's cost is left, and is dropped if the budget
    runs out within it); 3. skyline constructions (`search.construct`: the exact search
    cut to one short round per capacity, capacities bisected) with CONSTRUCT_SHARE
    quarters of the work left; 4. when no construction beat the best order, iterated
    reordering of that order with 1/IMPROVE_SHARE of the work (and, under a time limit,
    of the time) left; 5. the repair search around the arena top (`planner.improve`)
    with 1/REPAIR_SHARE of the rest; 6. the exact search on the buffers around the
    steps that hold the top up (`planner.window`) with 1/WINDOW_SHARE of the rest;
    7. `improve.shake`, the random repair search, with 1/SHAKE_SHARE of the rest;
    8. `search.minimize` (exact search, bisecting capacities towards the bound) with the
    rest, until its bisection step falls below 1/RESOLUTION of the gap it started with;
    9. `shake` again with whatever is left. Each share is
    of the work (and, under a time limit, of the time) left when the step starts. Any
    step that reaches the lower bound ends the run. `progress` gets a line as each step starts and
    for each smaller arena found. An order whose placement would pass 2**63 bytes is
    dropped; PlanError (naming a buffer) only when every one would."""
    work = Work(default_budget(len(buffers)) if budget is None else budget, time_limit)
    bound = arena_bound(buffers, alignment)

    def say(line: str) -> None:
        if progress is not None:
            progress(f"{line} (work {work.spent:,} of {work.budget:,})")

    def done(plan: Assignment, proven: int | None = None) -> CertifiedAssignment:
        answer = certified(
            Assignment(plan.offsets, plan.arena_size, work.spent, work.cut_short), bound, proven
        )
        say(f"best: arena {plan.arena_size:,} B, {answer.certificate}")
        return answer

    say(f"best: {len(buffers)} buffers, bound {bound:,} B")
    overflow: PlanError | None = None
    try:
        incumbent: Assignment | None = naive(buffers, alignment)
    except PlanError as err:  # no reuse passes 2**63 bytes; some order may not
        incumbent, overflow = None, err
    work.charge(len(buffers))
    if incumbent is not None and incumbent.arena_size <= bound:
        return done(incumbent)
    columns = Columns.of(buffers)
    best_order: list[int] | None = None
    cost = 0  # of the last placement pass: what the next one is expected to cost
    orders_ceiling: int | None = None
    for make in BASELINES + MORE_ORDERS:
        if make not in BASELINES:
            if orders_ceiling is None:  # more orders may take 1/ORDERS_SHARE of what is left
                orders_ceiling = work.spent + work.left() // ORDERS_SHARE
            if not work.afford(cost, orders_ceiling):
                break  # the last pass's cost is the estimate of the next
        order = make(columns)
        baseline = make in BASELINES
        try:
            plan = place_within(
                buffers, order, alignment, columns, None if baseline else work.left()
            )
        except PlanError as err:
            overflow, cost = err, PLACE_UNITS * len(buffers)
            work.charge(cost if baseline else min(cost, work.left()))
            continue
        if plan is None:  # the budget ran out within the pass
            work.charge(work.left())
            break
        cost = plan.work
        work.charge(cost)
        if incumbent is None or plan.arena_size < incumbent.arena_size:
            incumbent, best_order = plan, order
            say(f"order {make.__name__}: arena {plan.arena_size:,} B")
            if plan.arena_size <= bound:
                return done(plan)
    if incumbent is None:
        raise overflow
    ordered = incumbent
    if incumbent.arena_size > bound and work.afford(1):
        ceiling = work.share(CONSTRUCT_SHARE, 4)
        say("skyline constructions")
        incumbent = construct(buffers, alignment, incumbent, work, ceiling, say)
        work.end_share()
        if incumbent.arena_size <= bound:
            return done(incumbent)
    ceiling = work.share(1, IMPROVE_SHARE)
    # Reordering improves the best order's packing: no use once a construction beat it.
    if best_order is not None and incumbent is ordered and work.afford(cost, ceiling):
        say("reordering the buffers at the arena top")
        incumbent = _improve(
            buffers, best_order, incumbent, alignment, bound, columns, work, ceiling, say
        )
    work.end_share()

    def by_allowance(step):  # repair and shake take afford/charge callbacks
        def run(incumbent: Assignment, ceiling: int) -> Assignment:
            afford = lambda units: work.afford(units, ceiling)  # noqa: E731
            return step(buffers, incumbent, alignment, afford, work.charge, say)

        return run

    def window(incumbent: Assignment, ceiling: int) -> Assignment:
        return resolve_window(buffers, incumbent, alignment, work, ceiling, say)

    stages = (
        (REPAIR_SHARE, "repairing the packing around its top", by_allowance(repair)),
        (WINDOW_SHARE, "exact search on the window around the top", window),
        (SHAKE_SHARE, "shaking the packing around its top", by_allowance(shake)),
    )
    for share, label, stage in stages:
        if incumbent.arena_size > bound and work.afford(1):
            ceiling = work.share(1, share)
            say(label)
            incumbent = stage(incumbent, ceiling)
            work.end_share()
    proven = None
    if incumbent.arena_size > bound and work.afford(1):
        say("exact search")
        minimal = minimize(buffers, alignment, incumbent, work, say, 1, RESOLUTION)
        incumbent, proven = minimal, minimal.proven_infeasible
    if incumbent.arena_size > bound and work.afford(1):
        say("shaking the packing around its top")
        incumbent = shake(buffers, incumbent, alignment, work.afford, work.charge, say)
    return done(incumbent, proven)


def _improve(
    buffers: Sequence[Buffer],
    order: list[int],
    incumbent: Assignment,
    alignment: int,
    bound: int,
    columns: Columns,
    work: Work,
    ceiling: int,
    say: Callable[[str], None],
) -> Assignment:
    """Iterated reordering with restarts. The buffers that end at the arena top move to the
    front of the order, so they are placed before the buffers that pushed them up; after
    `STALL` rounds without a better plan the best order so far is perturbed (a few
    buffers moved to random places, seeded: runs are reproducible) and the reordering
    continues from there. A round is charged its placement pass plus a unit per NEAR
    buffers for finding the culprits; rounds run while the last round's cost fits under
    `ceiling`. Returns the best plan seen (`incumbent` if none is better)."""
    rng = random.Random(0)
    current, stall, cost = list(order), 0, incumbent.work
    while incumbent.arena_size > bound and work.afford(cost, ceiling):
        try:
            placed = place_within(buffers, current, alignment, columns, work.left(ceiling))
        except PlanError:  # this order passes 2**63 bytes: restart from the best one
            work.charge(min(cost, work.left(ceiling)))
            current, stall = _perturbed(order, rng), 0
            continue
        if placed is None:  # the share ran out within the pass
            work.charge(work.left(ceiling))
            break
        cost = min(placed.work + len(buffers) // NEAR, work.left(ceiling))
        work.charge(cost)
        top = placed.arena_size
        if top < incumbent.arena_size:
            incumbent, order, stall = placed, list(current), 0
            say(f"reordering: arena {top:,} B")
        else:
            stall += 1
        if stall >= STALL:
            current, stall = _perturbed(order, rng), 0
            continue
        culprits = [
            i for i, b in enumerate(buffers) if b.size and placed.offsets[b.id] + b.size == top
        ]
        chosen = set(culprits)
        current = culprits + [i for i in current if i not in chosen]
    return incumbent


def _perturbed(order: list[int], rng: random.Random) -> list[int]:
    """`order` with 1 + len/50 items moved to random places."""
    current = list(order)
    for _ in range(1 + len(current) // 50):
        item = current.pop(rng.randrange(len(current)))
        current.insert(rng.randrange(len(current) + 1), item)
    return current
