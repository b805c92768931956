"""Exact offset search in the manner of MiniMalloc (Moffitt, ASPLOS 2024), in Python.

Decision problem: place every buffer within `capacity` bytes. The search only visits
*canonical* solutions, which lose nothing: push every buffer of any solution down until
it rests on another buffer or on 0, then list buffers by offset; placing them in that
order, each lands exactly at its *minimum offset* (the highest top among the placed
buffers it overlaps in time). So a depth-first search that, at each node, places one
unplaced buffer at its minimum offset, in non-decreasing (offset, preorder rank) order,
finds a solution whenever one exists. Pruning, each sound for canonical solutions:

1. monotonic section inference: every unplaced buffer will sit at or above the current
   offset, and buffers live in the same section (an interval between lifetime
   endpoints) stack, so for each section `max(offset, floor) + unplaced bytes` must fit;
   a section's floor is the top of its placed buffers, raised to the lowest minimum
   offset of its unplaced buffers (nothing can ever sit lower);
2. dominance: a candidate whose offset is at or above some unplaced buffer's
   `min offset + size` would leave a gap that buffer fits in: skip it; and when a
   placement that raised no other buffer's minimum offset fails (the buffer is
   "hatless"), no sibling alternative is tried: putting that buffer there first loses
   nothing, so if it fails, the node fails (MiniMalloc's hatless pruning);
3. decomposition: when no unplaced buffer crosses a section boundary any more, the two
   sides are independent subproblems, solved one after the other.

Candidates are tried by a static preordering (MiniMalloc's WAT / TAW / TWA: sections
spanned, area, largest section total), round-robin with a doubling node limit, so the
ordering that suits an instance gets to finish.

Budgets count work, not seconds (`Work`): the same buffers, capacity and budget give
the same answer on any machine and under any load. A wall-clock `time_limit` may cap a
search as well; the clock is read only when one is given, and a result it stopped says
so (`cut_short`).
"""

from __future__ import annotations

import bisect
import itertools
import sys
import time
from collections.abc import Callable, Sequence

import numpy as np
from attrs import frozen

from tensorgraph.errors import PlanError
from tensorgraph.planner.buffers import INT64_END, Assignment, Buffer, align_up, lower_bound

HEURISTICS = ("WAT", "TAW", "TWA")
PLACED = INT64_END  # the min offset recorded for a placed buffer: above every real offset

# Work units. One unit is about a microsecond of this planner's work on the 2-core
# reference machine (fitted by least squares to timed searches on the MiniMalloc and
# random instances, see benches/README.md); the charges count operations, so they are
# the same on every machine and under any load. The exact search charges:
NODE_UNITS = 20  # a search node, plus a unit per 2 buffers of its partition it scans;
VISITS = 16  # placing a buffer: a unit per VISITS entries of its overlap list and of
#   the section lists whose floors it recomputes (C-level `min` scans: cheap);
KEY_UNITS = 3  # a partition's preorder: KEY_UNITS per member (a numpy slice each);
#   building the section tables: a unit per 4 entries (lifetime sections, overlaps);
#   a fresh start: 1.5 units a buffer plus a unit per VISITS lifetime sections.
CHECK_CLOCK_EVERY = 256  # nodes between reads of the clock, when a time_limit was given


def default_budget(count: int) -> int:
    """Work units `best` may spend by default on `count` buffers (it stops at once when
    it reaches the bound): 100,000 plus 40 a buffer, at most 500,000 (about 0.1 s plus
    40 us a buffer, at most 0.5 s, on the reference machine)."""
    return min(500_000, 100_000 + 40 * count)


def check_limits(budget: object, time_limit: object) -> None:
    """PlanError naming the value unless `budget` is None or an int >= 0 and
    `time_limit` is None or a number of seconds >= 0."""
    if budget is not None and (
        not isinstance(budget, int) or isinstance(budget, bool) or budget < 0
    ):
        raise PlanError(f"budget must be None or an int >= 0 (work units) but got {budget!r}")
    if time_limit is not None and (
        isinstance(time_limit, bool)
        or not isinstance(time_limit, int | float)
        or not time_limit >= 0
    ):
        raise PlanError(
            f"time_limit must be None or a number of seconds >= 0 but got {time_limit!r}"
        )


class Work:
    """Work units spent against a budget, shared by the stages of one search, plus an
    optional wall-clock cap.

    `spent` only grows. A stage takes a `share` of what is left: a ceiling on `spent`,
    and, under a time limit, the same share of the time left (so a binding clock splits
    the time between stages as the budget would have split the work). Without a time
    limit the clock is never read and every decision depends on counts alone; with one,
    `cut_short` becomes True the first time the clock stops work that the budget (or the
    stage's share of it) would still have allowed."""

    def __init__(self, budget: int, time_limit: float | None = None) -> None:
        self.budget = budget
        self.spent = 0
        self.deadline = None if time_limit is None else time.perf_counter() + time_limit
        self.stage_deadline: float | None = None  # the current stage's share of the time
        self.cut_short = False

    def left(self, ceiling: int | None = None) -> int:
        """Units that may still be spent (under `ceiling` too, when given)."""
        limit = self.budget if ceiling is None else min(self.budget, ceiling)
        return max(0, limit - self.spent)

    def share(self, numerator: int, denominator: int) -> int:
        """Start a stage with `numerator / denominator` of the units (and time) left;
        returns its ceiling on `spent`."""
        if self.deadline is not None:
            now = time.perf_counter()
            self.stage_deadline = now + (self.deadline - now) * numerator / denominator
        return self.spent + self.left() * numerator // denominator

    def end_share(self) -> None:
        """End the current stage: from now on only the whole time limit applies."""
        self.stage_deadline = None

    def afford(self, units: int, ceiling: int | None = None) -> bool:
        """True when `units` more fit under the budget (and `ceiling`) and neither the
        time limit nor the stage's share of it, if any, has passed."""
        return units <= self.left(ceiling) and not self.timed_out()

    def charge(self, units: int) -> None:
        self.spent += units

    def clock_limit(self) -> float | None:
        """The earlier of the time limit and the stage's share of it (None: no limit)."""
        if self.deadline is None or self.stage_deadline is None:
            return self.deadline
        return min(self.deadline, self.stage_deadline)

    def timed_out(self) -> bool:
        """True when the time limit or the stage's share of it has passed (sets
        `cut_short`); never reads the clock without a time limit."""
        limit = self.clock_limit()
        if limit is None or time.perf_counter() < limit:
            return False
        self.cut_short = True
        return True


@frozen
class SearchResult:
    """`offsets` of a packing within the capacity (None if none was found);
    `proven_infeasible` is True only when the whole space was searched in vain. `work`:
    units spent; `cut_short`: the time limit stopped the search before its budget."""

    offsets: dict | None
    proven_infeasible: bool
    work: int = 0
    cut_short: bool = False


class _Abort(Exception):
    """The node limit of one round, the work allowance, or the time limit ran out."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Problem:
    """Buffers in section coordinates, plus the mutable search state."""

    def __init__(self, buffers: Sequence[Buffer], alignment: int) -> None:
        self.buffers = buffers
        self.capacity = 0  # set before each decision
        self.alignment = alignment
        self.size = [align_up(b.size, alignment) for b in buffers]
        points = sorted({b.start for b in buffers} | {b.end for b in buffers})
        self.lo = [bisect.bisect_left(points, b.start) for b in buffers]
        self.hi = [bisect.bisect_left(points, b.end) for b in buffers]
        count = max(len(points) - 1, 1)
        self.in_section: list[list[int]] = [[] for _ in range(count)]
        for i in range(len(buffers)):
            for s in range(self.lo[i], self.hi[i]):
                self.in_section[s].append(i)
        self.overlaps = [self._overlapping(i) for i in range(len(buffers))]
        self.count = count
        self.section_load = [len(members) for members in self.in_section]
        widths = sum(self.hi[i] - self.lo[i] for i in range(len(buffers)))
        self.setup_units = (widths + sum(map(len, self.overlaps))) // 4 + 1
        self.reset_units = 3 * len(buffers) // 2 + widths // VISITS + 1
        self.nodes_left = 0  # of this round (the round-robin's node limit)
        self.units_left = 0  # of the work allowance
        self.deadline: float | None = None
        self.ticks = 0
        self.reset()

    def reset(self) -> None:
        """Fresh search state: nothing placed (an aborted search leaves its state dirty)."""
        count, n = self.count, len(self.buffers)
        self.total = np.zeros(count, dtype=np.int64)
        for i in range(n):
            self.total[self.lo[i] : self.hi[i]] += self.size[i]
        self.floor = np.zeros(count, dtype=np.int64)
        self.cuts = [0] * count  # buffers crossing the boundary between s and s + 1
        for i in range(n):
            for s in range(self.lo[i], self.hi[i] - 1):
                self.cuts[s] += 1
        self.min_offset = [0] * n
        self.offset = [-1] * n

    def _overlapping(self, i: int) -> list[int]:
        seen: set[int] = set()
        for s in range(self.lo[i], self.hi[i]):
            seen.update(self.in_section[s])
        seen.discard(i)
        return sorted(seen)

    def partitions(self) -> list[tuple[list[int], int, int]]:
        """Independent groups of buffers: maximal section ranges no buffer crosses."""
        order = sorted(range(len(self.buffers)), key=lambda i: self.lo[i])
        groups: list[tuple[list[int], int, int]] = []
        for i in order:
            if groups and self.lo[i] < groups[-1][2]:
                members, lo, hi = groups[-1]
                members.append(i)
                groups[-1] = (members, lo, max(hi, self.hi[i]))
            else:
                groups.append(([i], self.lo[i], self.hi[i]))
        return groups

    def preorder(self, members: list[int], heuristic: str) -> list[int]:
        """`members` sorted by the heuristic's keys, each descending, then by index."""

        def key(i: int) -> tuple:
            span = self.total[self.lo[i] : self.hi[i]]
            widest = int(span.max()) if len(span) else 0
            values = {
                "W": self.hi[i] - self.lo[i],
                "A": self.size[i] * (self.buffers[i].end - self.buffers[i].start),
                "T": widest,
            }
            return (*(-values[c] for c in heuristic), i)

        return sorted(members, key=key)

    def solve(self, members: list[int], lo: int, hi: int, heuristic: str) -> bool:
        """Search one independent partition; True when every member is placed."""
        self.units_left -= KEY_UNITS * len(members)
        ranked = self.preorder(members, heuristic)
        rank = {b: r for r, b in enumerate(ranked)}
        return self._search(ranked, rank, lo, hi, 0, -1, heuristic)

    def _search(
        self,
        ranked: list[int],
        rank: dict[int, int],
        lo: int,
        hi: int,
        last_offset: int,
        last_rank: int,
        heuristic: str,
    ) -> bool:
        self.nodes_left -= 1
        self.units_left -= NODE_UNITS + len(ranked) // 2
        if self.nodes_left < 0:
            raise _Abort("nodes")
        if self.units_left < 0:
            raise _Abort("work")
        if self.deadline is not None:
            self.ticks += 1
            if not self.ticks % CHECK_CLOCK_EVERY and time.perf_counter() >= self.deadline:
                raise _Abort("time")
        offset, size, min_offset = self.offset, self.size, self.min_offset
        unplaced = [b for b in ranked if offset[b] < 0]
        if not unplaced:
            return True
        # Dominance: a candidate at or above some unplaced buffer's `min offset + size`
        # would leave a gap that buffer fits in. Section inference in O(1) per candidate:
        # at this node every section already has floor + unplaced bytes <= capacity (the
        # parent's check), so with the floor lifted to a candidate's offset the test is
        # `offset + unplaced bytes <= capacity` in every section, placing the candidate
        # included (its sections gain `size` of floor and lose `size` of unplaced bytes).
        # Both bound the offset, so only the few candidates below both are ever sorted.
        min_height = min([min_offset[b] + size[b] for b in unplaced])
        limit = min(min_height - 1, self.capacity - int(self.total[lo:hi].max()))
        ordering = sorted(
            [(min_offset[b], rank[b], b) for b in unplaced if last_offset <= min_offset[b] <= limit]
        )
        for off, r, b in ordering:
            if off == last_offset and r < last_rank:
                continue  # canonical order: offsets never decrease, ties by rank
            found, hatless = self._place_and_search(b, off, r, ranked, rank, lo, hi, heuristic)
            if found:
                return True
            if hatless:
                break  # b touched no other buffer: no alternative placed first can do better
        return False

    def _place_and_search(
        self,
        b: int,
        off: int,
        r: int,
        ranked: list[int],
        rank: dict[int, int],
        lo: int,
        hi: int,
        heuristic: str,
    ) -> tuple[bool, bool]:
        """Place b at `off` and search on. Returns (found, hatless): hatless when placing
        b raises no other unplaced buffer's minimum offset (nothing sits over it yet)."""
        size = self.size[b]
        top = off + size
        min_offset, offset = self.min_offset, self.offset
        overlaps = self.overlaps[b]
        floor, total = self.floor, self.total
        b_lo, b_hi = self.lo[b], self.hi[b]
        saved_floor = floor[b_lo:b_hi].copy()
        floor[b_lo:b_hi] = top
        total[b_lo:b_hi] -= size
        capacity = self.capacity
        offset[b] = off
        own_min = min_offset[b]
        min_offset[b] = PLACED  # placed buffers never lower a section's floor below
        offset_changes = []
        affected: set[int] = set()
        raised = align_up(top, self.alignment)
        for o in overlaps:
            if offset[o] < 0 and min_offset[o] < top:
                offset_changes.append((o, min_offset[o]))
                min_offset[o] = raised
                affected.update(range(self.lo[o], self.hi[o]))
        floor_changes = []
        at = min_offset.__getitem__
        load = self.section_load
        self.units_left -= (len(overlaps) + sum([load[s] for s in affected])) // VISITS
        for s in affected:
            lowest = min(map(at, self.in_section[s]))
            if lowest != PLACED and floor[s] < lowest:
                floor_changes.append((s, int(floor[s])))
                floor[s] = lowest
        found = False
        # The caller checked `off + unplaced bytes` in every section; only sections whose
        # floor the inference lifted above `off` can fail now.
        if all(max(off, int(floor[s])) + int(total[s]) <= capacity for s, _ in floor_changes):
            found = self._decompose(b, off, r, ranked, rank, lo, hi, heuristic)
        for s, value in reversed(floor_changes):
            floor[s] = value
        floor[b_lo:b_hi] = saved_floor
        total[b_lo:b_hi] += size
        for o, value in reversed(offset_changes):
            min_offset[o] = value
        min_offset[b] = own_min
        if not found:
            offset[b] = -1
        return found, not offset_changes

    def _decompose(
        self,
        b: int,
        off: int,
        r: int,
        ranked: list[int],
        rank: dict[int, int],
        lo: int,
        hi: int,
        heuristic: str,
    ) -> bool:
        cuts = self.cuts
        cutpoints = [lo]
        for s in range(self.lo[b], self.hi[b] - 1):
            cuts[s] -= 1
            if cuts[s] == 0 and lo < s + 1 < hi:
                cutpoints.append(s + 1)
        try:
            if len(cutpoints) == 1:
                return self._search(ranked, rank, lo, hi, off, r, heuristic)
            cutpoints.append(hi)
            solved: list[int] = []
            for left, right in itertools.pairwise(cutpoints):
                members = [
                    o
                    for o in ranked
                    if self.offset[o] < 0 and self.lo[o] < right and left < self.hi[o]
                ]
                if members and not self.solve(members, left, right, heuristic):
                    for o in solved:  # the sub-partitions solved before this one
                        self.offset[o] = -1
                    return False
                solved += members
            return True
        finally:
            for s in range(self.lo[b], self.hi[b] - 1):
                cuts[s] += 1


def search_offsets(
    buffers: Sequence[Buffer],
    capacity: int,
    alignment: int = 1,
    budget: int | None = None,
    *,
    time_limit: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> SearchResult:
    """Place `buffers` within `capacity` bytes (offsets multiples of `alignment`), prove
    it impossible, or give up when `budget` work units (None: `default_budget`) are
    spent or `time_limit` seconds have passed (None: no limit). `progress` gets a line
    at each fresh start of the search (a preordering with a new node limit).

    Deterministic without a time limit: the same arguments give the same result
    anywhere. PlanError naming the value on a bad capacity, alignment, budget or time
    limit."""
    buffers = list(buffers)
    if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 0:
        raise PlanError(f"capacity must be an int >= 0 (bytes) but got {capacity!r}")
    if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment < 1:
        raise PlanError(f"alignment must be a positive integer but got {alignment!r}")
    check_limits(budget, time_limit)
    work = Work(default_budget(len(buffers)) if budget is None else budget, time_limit)

    def say(line: str) -> None:
        if progress is not None:
            progress(f"{line} (work {work.spent:,} of {work.budget:,})")

    result = decide(buffers, min(capacity, INT64_END - 1), alignment, work, progress=say)
    return SearchResult(result.offsets, result.proven_infeasible, work.spent, work.cut_short)


def decide(
    buffers: Sequence[Buffer],
    capacity: int,
    alignment: int,
    work: Work,
    ceiling: int | None = None,
    problem: _Problem | None = None,
    progress: Callable[[str], None] | None = None,
) -> SearchResult:
    """`search_offsets` on a shared `Work`, spending at most up to `ceiling`; `problem`
    (built for the same buffers and alignment) saves rebuilding the section tables."""
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
        return _round_robin(problem, work, ceiling, progress)
    finally:
        sys.setrecursionlimit(limit)


def _problem(
    buffers: Sequence[Buffer], alignment: int, work: Work, ceiling: int | None
) -> _Problem | None:
    """The section tables, charged to `work`; None (the rest charged) if they cost more
    than is left or the time limit has passed."""
    if not work.afford(1, ceiling):
        return None
    problem = _Problem(buffers, alignment)
    if not work.afford(problem.setup_units, ceiling):
        work.charge(work.left(ceiling))
        return None
    work.charge(problem.setup_units)
    return problem


def _round_robin(
    problem: _Problem,
    work: Work,
    ceiling: int | None,
    progress: Callable[[str], None] | None,
) -> SearchResult:
    node_limit = len(problem.buffers)
    while True:
        node_limit *= 2
        for heuristic in HEURISTICS:
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
            except _Abort as stop:
                if stop.reason == "time":
                    work.cut_short = True
                if stop.reason != "nodes":
                    return SearchResult(None, False)
                continue
            finally:
                work.charge(min(allowance, allowance - problem.units_left))
            offsets = {
                b.id: problem.offset[i] if b.size else 0 for i, b in enumerate(problem.buffers)
            }
            return SearchResult(offsets, False)


def minimize_arena(
    buffers: Sequence[Buffer],
    alignment: int,
    incumbent: Assignment,
    budget: int | None = None,
    *,
    time_limit: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> Assignment:
    """The smallest packing found within `budget` work units (None: `default_budget`)
    and `time_limit` seconds (None: no limit), never larger than `incumbent`; its `work`
    and `cut_short` describe this search alone. `progress` gets a line per attempt."""
    buffers = list(buffers)
    check_limits(budget, time_limit)
    work = Work(default_budget(len(buffers)) if budget is None else budget, time_limit)

    def say(line: str) -> None:
        if progress is not None:
            progress(f"{line} (work {work.spent:,} of {work.budget:,})")

    best = minimize(buffers, alignment, incumbent, work, say)
    return Assignment(best.offsets, best.arena_size, work.spent, work.cut_short)


def minimize(
    buffers: Sequence[Buffer],
    alignment: int,
    incumbent: Assignment,
    work: Work,
    progress: Callable[[str], None] | None = None,
) -> Assignment:
    """`minimize_arena` on a shared `Work`.

    First a try at the lower bound with three quarters of the work left (success there
    is optimal, and most real instances have a packing there), then bisection between
    the largest capacity given up on and the best packing so far, each attempt with a
    quarter of the work left: a capacity the search cannot settle in its share counts as
    too tight, so the bisection keeps moving and every attempt that succeeds shrinks the
    incumbent. Every attempt charges at least its fresh start, so the loop ends."""
    best = incumbent
    low = lower_bound(buffers, alignment)
    if best.arena_size <= low or low >= INT64_END:
        return best
    problem = _problem(buffers, alignment, work, None)
    if problem is None:
        return best
    first = True
    while low < best.arena_size and work.afford(problem.reset_units):
        capacity = low if first else (low + best.arena_size) // 2
        ceiling = max(work.share(3 if first else 1, 4), work.spent + problem.reset_units)
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
        if progress is not None:
            progress(f"exact search at capacity {capacity:,}: {verdict}")
    return best
