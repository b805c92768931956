"""Exact offset search: MiniMalloc's canonical-solution search (`planner.canonical`) run
as a portfolio of preorderings, and arena minimisation by bisection over capacities.

Portfolio: no one preordering wins everywhere (MiniMalloc's lifetime-width key "W"
fits instances G, I, J, K of its challenging set in a few thousand nodes, where the
sections-spanned key "S" needs hundreds of thousands; "S" fits F and H in a few hundred
where "W" needs thousands). So `decide` runs the preorderings of HEURISTICS round-robin,
each from a fresh start, with a node limit that starts at the buffer count and doubles
every round (MiniMalloc's round-robin): the ordering that suits an instance finishes
within about twice its own node count per member of the portfolio.

Budgets count work, not seconds (`Work`, work.py): nodes and the entries they scan, so the same
buffers, capacity and budget give the same answer on any machine and under any load. A
wall-clock `time_limit` may cap a search as well; the clock is read only when one is
given (then at every node, which costs far less than a node), and a result it stopped
says so (`cut_short`).
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Sequence

from attrs import frozen

from tensorgraph.errors import PlanError
from tensorgraph.planner.buffers import INT64_END, Assignment, Buffer, align_up, lower_bound
from tensorgraph.planner.canonical import (
    NODE_UNITS,
    PLACE_UNITS,
    SCAN,
    Abort,
    Problem,
    setup_units,
)
from tensorgraph.planner.certificate import CertifiedAssignment, arena_bound, certified
from tensorgraph.planner.work import Work, check_heuristics, check_limits, default_budget

# The budgets (work.py) lived here: the planner's modules, the benches and the tests
# import them from this module.
__all__ = [
    "SearchResult",
    "Work",
    "check_heuristics",
    "check_limits",
    "construct",
    "decide",
    "default_budget",
    "minimize",
    "minimize_arena",
    "search_offsets",
]

# Preorderings (letters of planner.canonical.KEYS, most significant first): MiniMalloc's
# three (its default), TAW first: it settles the slowest instance, B, where it alone fits.
HEURISTICS = ("TAW", "TWA", "WAT")
# Preorderings `construct` builds a packing with: the skyline packings of dense random
# sets (`planner.synthetic.random_buffers`) come out best under one of these (measured).
CONSTRUCTIONS = ("TZA", "TZ", "TSA", "TAW")
AT_BOUND = ("WAT",)  # and at the bound, first (MiniMalloc's width-first key)
PROBE_NODES = 3  # halves of the buffer count: a probe's node limit (a little backtracking)
# Where `construct` probes between its low end and the best arena, in 1/SPLIT_SCALE: a
# bisection first, then, each time it converges, a pass that samples other capacities.
SPLIT_SCALE = 16
SPLITS = (8, 4, 12, 6, 10, 3, 13)
FIRST_SHARE = 2  # quarters of its work `minimize` spends on its first try, at the bound


@frozen
class SearchResult:
    """`offsets` of a packing within the capacity (None if none was found);
    `proven_infeasible` is True only when the whole space was searched in vain. `work`:
    units spent; `cut_short`: the time limit stopped the search before its budget;
    `nodes`: search nodes visited, over every round of the portfolio."""

    offsets: dict | None
    proven_infeasible: bool
    work: int = 0
    cut_short: bool = False
    nodes: int = 0


def search_offsets(
    buffers: Sequence[Buffer],
    capacity: int,
    alignment: int = 1,
    budget: int | None = None,
    *,
    time_limit: float | None = None,
    progress: Callable[[str], None] | None = None,
    heuristics: Sequence[str] = HEURISTICS,
) -> SearchResult:
    """Place `buffers` within `capacity` bytes (offsets multiples of `alignment`), prove
    it impossible, or give up when `budget` work units (None: `default_budget`) are
    spent or `time_limit` seconds have passed (None: no limit). `progress` gets a line
    at each fresh start of the search (a preordering with a new node limit).
    `heuristics`: the portfolio of preorderings, run round-robin (strings of the letters
    of `planner.canonical.KEYS`); any portfolio gives a correct verdict, only the work
    it takes differs.

    Deterministic without a time limit: the same arguments give the same result
    anywhere. PlanError naming the value on a bad capacity, alignment, budget, time
    limit or portfolio."""
    buffers = list(buffers)
    if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 0:
        raise PlanError(f"capacity must be an int >= 0 (bytes) but got {capacity!r}")
    if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment < 1:
        raise PlanError(f"alignment must be a positive integer but got {alignment!r}")
    check_limits(budget, time_limit)
    heuristics = check_heuristics(heuristics)
    work = Work(default_budget(len(buffers)) if budget is None else budget, time_limit)

    def say(line: str) -> None:
        if progress is not None:
            progress(f"{line} (work {work.spent:,} of {work.budget:,})")

    capacity = min(capacity, INT64_END - 1)
    result = decide(buffers, capacity, alignment, work, progress=say, heuristics=heuristics)
    return SearchResult(
        result.offsets, result.proven_infeasible, work.spent, work.cut_short, work.nodes
    )


def decide(
    buffers: Sequence[Buffer],
    capacity: int,
    alignment: int,
    work: Work,
    ceiling: int | None = None,
    problem: Problem | None = None,
    progress: Callable[[str], None] | None = None,
    heuristics: Sequence[str] = HEURISTICS,
    rounds: int | None = None,
    first_limit: int | None = None,
) -> SearchResult:
    """`search_offsets` on a shared `Work`, spending at most up to `ceiling`; `problem`
    (built for the same buffers and alignment) saves rebuilding the section tables.
    The round-robin's node limit starts at `first_limit` (None: twice the buffer count)
    and doubles every round; `rounds` (None: no limit) caps the rounds, past which the
    search gives up, not settled."""
    if not buffers:
        return SearchResult({}, False)
    if any(align_up(b.size, alignment) > capacity for b in buffers if b.size):
        return SearchResult(None, True)
    if lower_bound(buffers, alignment) > capacity:
        return SearchResult(None, True)
    if problem is None:
        problem = _problem(buffers, alignment, work, ceiling)
        if problem is None:
            return SearchResult(None, False)
    problem.capacity = capacity
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 4 * len(buffers) + 1000))
    try:
        return _round_robin(problem, work, ceiling, progress, heuristics, rounds, first_limit)
    finally:
        sys.setrecursionlimit(limit)


def _problem(
    buffers: Sequence[Buffer], alignment: int, work: Work, ceiling: int | None
) -> Problem | None:
    """The section tables, charged to `work`; None (the rest charged) if they cost more
    than is left or the time limit has passed."""
    if not work.afford(1, ceiling):
        return None
    units = setup_units(buffers)  # before building: the tables may be large
    if not work.afford(units, ceiling):
        work.charge(work.left(ceiling))
        return None
    work.charge(units)
    return Problem(buffers, alignment)


def _round_robin(
    problem: Problem,
    work: Work,
    ceiling: int | None,
    progress: Callable[[str], None] | None,
    heuristics: Sequence[str],
    rounds: int | None = None,
    first_limit: int | None = None,
) -> SearchResult:
    node_limit = len(problem.buffers) if first_limit is None else first_limit // 2
    for _ in itertools.count() if rounds is None else range(rounds):
        node_limit *= 2
        for heuristic in heuristics:
            if not work.afford(problem.reset_units, ceiling):
                return SearchResult(None, False)
            if progress is not None:
                progress(f"exact search: {heuristic} preorder, up to {node_limit:,} nodes")
            work.charge(problem.reset_units)
            problem.reset()
            problem.nodes_left = node_limit
            allowance = problem.units_left = work.left(ceiling)
            problem.deadline = work.clock_limit()
            try:
                for members, lo, hi in problem.partitions():
                    if not problem.solve(members, lo, hi, heuristic):
                        return SearchResult(None, True)
            except Abort as stop:
                if stop.reason == "time":
                    work.cut_short = True
                if stop.reason != "nodes":
                    return SearchResult(None, False)
                continue
            finally:
                work.charge(min(allowance, allowance - problem.units_left))
                work.nodes += node_limit - max(problem.nodes_left, 0)
            offsets = {
                b.id: problem.offset[i] if b.size else 0 for i, b in enumerate(problem.buffers)
            }
            return SearchResult(offsets, False)
    return SearchResult(None, False)


def construct(
    buffers: Sequence[Buffer],
    alignment: int,
    incumbent: Assignment,
    work: Work,
    ceiling: int,
    progress: Callable[[str], None] | None = None,
) -> Assignment:
    """The exact search as a construction heuristic, spending at most up to `ceiling`
    (nothing unless one greedy round fits): first a probe of each preordering of
    AT_BOUND at the lower bound (a fit there is optimal), then probes, each one round
    (PROBE_NODES / 2 nodes a buffer) of one preordering of CONSTRUCTIONS at one
    capacity, bisecting capacities between the lower bound and the smallest arena so
    far (the first probe one byte below it; then passes that split
    the range elsewhere, SPLITS, each time the bisection converges). A round seldom
    backtracks: it builds a packing bottom up, each buffer at the lowest offset an
    unplaced buffer can take, ties by the preordering (a skyline packing), and the
    capacity steers it, because section inference rules out any buffer whose
    placement would leave a section's unplaced bytes no room below the capacity. A
    capacity where every preordering fails raises the low end (it is not proven
    infeasible: only this round gave up). Returns the smallest packing found
    (`incumbent` itself if none is smaller); it is a packing because the search's
    solutions are (see `planner.canonical`)."""
    best = incumbent
    low = lower_bound(buffers, alignment) if buffers else 0
    if best.arena_size <= low:
        return best
    # Unless a greedy round (a node and a placement a buffer) fits, the work is better
    # left to the next steps: a round cut short builds nothing.
    n = len(buffers)
    if not work.afford(setup_units(buffers) + n * (NODE_UNITS + PLACE_UNITS + n // SCAN), ceiling):
        return best
    problem = _problem(buffers, alignment, work, ceiling)
    capacity, bottom = best.arena_size - 1, low
    limit = max(1, PROBE_NODES * len(buffers) // 2)
    for heuristic in AT_BOUND if problem is not None else ():
        if not work.afford(problem.reset_units, ceiling):
            return best
        found = decide(
            buffers, low, alignment, work, ceiling, problem, None, (heuristic,), 1, limit
        )
        if found.offsets is not None:
            if progress is not None:
                progress(f"construction {heuristic} at the bound {low:,}")
            return Assignment(found.offsets, max(found.offsets[b.id] + b.size for b in buffers))
    for split in itertools.cycle(SPLITS) if problem is not None else ():
        while low <= capacity < best.arena_size:
            for heuristic in CONSTRUCTIONS:
                if not work.afford(problem.reset_units, ceiling):
                    return best
                found = decide(
                    buffers,
                    capacity,
                    alignment,
                    work,
                    ceiling,
                    problem,
                    None,
                    (heuristic,),
                    1,
                    limit,
                )
                if found.offsets is not None:
                    top = max(found.offsets[b.id] + b.size for b in buffers)
                    if top < best.arena_size:
                        best = Assignment(found.offsets, top)
                        if progress is not None:
                            progress(f"construction {heuristic} at {capacity:,}: arena {top:,} B")
                    break
            else:
                low = capacity + 1
            capacity = low + (best.arena_size - low) * split // SPLIT_SCALE
        # Converged: the capacities a round gave up on may still fit; sample others.
        if best.arena_size <= bottom:
            break
        low = bottom
        capacity = low + (best.arena_size - low) * split // SPLIT_SCALE
    return best


def minimize_arena(
    buffers: Sequence[Buffer],
    alignment: int,
    incumbent: Assignment,
    budget: int | None = None,
    *,
    time_limit: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> CertifiedAssignment:
    """The smallest packing found within `budget` work units (None: `default_budget`)
    and `time_limit` seconds (None: no limit), never larger than `incumbent`, with its
    certificate (`planner.certificate`); its `work` and `cut_short` describe this search
    alone. `progress` gets a line per attempt."""
    buffers = list(buffers)
    check_limits(budget, time_limit)
    work = Work(default_budget(len(buffers)) if budget is None else budget, time_limit)

    def say(line: str) -> None:
        if progress is not None:
            progress(f"{line} (work {work.spent:,} of {work.budget:,})")

    best = minimize(buffers, alignment, incumbent, work, say)
    plan = Assignment(best.offsets, best.arena_size, work.spent, work.cut_short)
    return certified(plan, best.bound, best.proven_infeasible)


def minimize(
    buffers: Sequence[Buffer],
    alignment: int,
    incumbent: Assignment,
    work: Work,
    progress: Callable[[str], None] | None = None,
    first_share: int = FIRST_SHARE,
    resolution: int = 0,
) -> CertifiedAssignment:
    """`minimize_arena` on a shared `Work`. `first_share` quarters of the work left go to
    the first try; with `resolution` > 0 the bisection stops once its capacities are
    within 1/`resolution` of the starting gap (incumbent minus bound) of the best
    packing, leaving the rest of the work to the caller.

    First a try at the lower bound with `first_share` quarters of the work left (success
    there is optimal, and most real instances have a packing there; half, not more, so
    that an instance whose optimum is above the bound, as MiniMalloc's D, keeps enough
    for the bisection to reach its capacity; `best` gives it one quarter, as on dense
    sets far above the bound that try rarely settles), then bisection between
    the largest capacity given up on and the best packing so far, each attempt with a
    quarter of the work left: a capacity the search cannot settle in its share counts as
    too tight, so the bisection keeps moving and every attempt that succeeds shrinks the
    incumbent. Every attempt charges at least its fresh start, so the loop ends.

    Certificate: the largest capacity an attempt proved infeasible, C, bounds the arena
    of any plan. The search packs aligned sizes; in a plan with arena T every buffer's
    aligned extent ends at `offset + align_up(size) = align_up(offset + size) <=
    align_up(T)` (offsets are multiples of the alignment), so the plan fits capacity
    `align_up(T)`. Hence every plan has `align_up(T) > C`, that is `T > C` rounded down
    to a multiple of the alignment: the `proven_infeasible` reported."""
    best = incumbent
    bound = arena_bound(buffers, alignment)
    low = lower_bound(buffers, alignment)
    proven: int | None = None

    def answer() -> CertifiedAssignment:
        top = None if proven is None else proven // alignment * alignment
        return certified(best, bound, top)

    if best.arena_size <= low or low >= INT64_END:
        return answer()
    problem = _problem(buffers, alignment, work, None)
    if problem is None:
        return answer()
    first = True
    slack = (best.arena_size - low) // resolution if resolution else 0
    while low < best.arena_size - slack and work.afford(problem.reset_units):
        capacity = low if first else (low + best.arena_size) // 2
        share = first_share if first else 1
        ceiling = max(work.share(share, 4), work.spent + problem.reset_units)
        first = False
        result = decide(buffers, capacity, alignment, work, ceiling, problem)
        work.end_share()
        if result.offsets is not None:
            top = max((result.offsets[b.id] + b.size for b in buffers), default=0)
            verdict = f"fits, arena {top:,}"
            if top < best.arena_size:
                best = Assignment(result.offsets, top)
        else:
            low = capacity + 1
            verdict = "infeasible" if result.proven_infeasible else "not settled"
            if result.proven_infeasible:
                proven = capacity if proven is None else max(proven, capacity)
        if progress is not None:
            progress(f"exact search at capacity {capacity:,}: {verdict}")
    return answer()
