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
ordering that suits an instance gets to finish. Everything stops at `deadline`.
"""

from __future__ import annotations

import bisect
import itertools
import sys
import time
from collections.abc import Hashable, Mapping, Sequence

import numpy as np
from attrs import frozen

from tensorgraph.planner.buffers import Assignment, Buffer, align_up, lower_bound

HEURISTICS = ("WAT", "TAW", "TWA")
PLACED = 1 << 62  # the min offset recorded for a placed buffer: above every floor


@frozen
class SearchResult:
    """`offsets` of a packing within the capacity (None if none was found);
    `proven_infeasible` is True only when the whole space was searched in vain."""

    offsets: dict | None
    proven_infeasible: bool


class _Abort(Exception):
    """The node limit or the deadline ran out."""

    def __init__(self, timed_out: bool) -> None:
        super().__init__()
        self.timed_out = timed_out


class _Problem:
    """Buffers in section coordinates, plus the mutable search state."""

    def __init__(self, buffers: Sequence[Buffer], capacity: int, alignment: int) -> None:
        self.buffers = buffers
        self.capacity = capacity
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
        self.nodes_left = 0
        self.deadline = 0.0
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
        if self.nodes_left < 0:
            raise _Abort(timed_out=False)
        if not self.nodes_left & 255 and time.perf_counter() > self.deadline:
            raise _Abort(timed_out=True)
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
    alignment: int,
    deadline: float,
    hint: Mapping[Hashable, int] | None = None,
) -> SearchResult:
    """Place `buffers` within `capacity` bytes (offsets multiples of `alignment`), or
    prove it impossible, or give up at `deadline` (a time.perf_counter() value).

    `hint` is accepted for callers that hold a good packing; the search does not need it
    (a found packing is returned as is)."""
    buffers = list(buffers)
    if not buffers:
        return SearchResult({}, False)
    problem = _Problem(buffers, capacity, alignment)
    if any(size > capacity for size in problem.size if size):
        return SearchResult(None, True)
    if lower_bound(buffers, alignment) > capacity:
        return SearchResult(None, True)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 4 * len(buffers) + 1000))
    try:
        return _round_robin(problem, deadline)
    finally:
        sys.setrecursionlimit(limit)


def _round_robin(problem: _Problem, deadline: float) -> SearchResult:
    problem.deadline = deadline
    node_limit = len(problem.buffers)
    while True:
        node_limit *= 2
        for heuristic in HEURISTICS:
            problem.reset()
            problem.nodes_left = node_limit
            try:
                for members, lo, hi in problem.partitions():
                    if not problem.solve(members, lo, hi, heuristic):
                        return SearchResult(None, True)
            except _Abort as stop:
                if stop.timed_out:
                    return SearchResult(None, False)
                continue
            offsets = {
                b.id: problem.offset[i] if b.size else 0 for i, b in enumerate(problem.buffers)
            }
            return SearchResult(offsets, False)


def minimize_arena(
    buffers: Sequence[Buffer], alignment: int, incumbent: Assignment, deadline: float
) -> Assignment:
    """The smallest packing found before `deadline`, never larger than `incumbent`.

    First a try at the lower bound with most of the time (success there is optimal),
    then bisection between the largest capacity given up on and the best packing so far,
    each attempt with a quarter of the time left: a capacity the search cannot settle
    in its slice counts as too tight, so the bisection keeps moving and every attempt
    that succeeds shrinks the incumbent."""
    buffers = list(buffers)
    best = incumbent
    low = lower_bound(buffers, alignment)
    if best.arena_size <= low or time.perf_counter() >= deadline:
        return best
    first = True
    while time.perf_counter() < deadline and low < best.arena_size:
        remaining = deadline - time.perf_counter()
        capacity = low if first else (low + best.arena_size) // 2
        # The bound gets most of the time: reaching it proves the plan optimal, and most
        # real instances have a packing there. Bisection then gets quarter slices.
        share = 0.75 if first else 0.25
        first = False
        result = search_offsets(
            buffers, capacity, alignment, time.perf_counter() + max(remaining * share, 0.01)
        )
        if result.offsets is not None:
            top = max((result.offsets[b.id] + b.size for b in buffers), default=0)
            if top < best.arena_size:
                best = Assignment(result.offsets, top)
        else:
            low = capacity + 1
    return best
