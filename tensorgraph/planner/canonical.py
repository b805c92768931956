"""The canonical-solution search of MiniMalloc (Moffitt, ASPLOS 2024): one decision
problem ("do these buffers fit in `capacity` bytes?") under one preordering.

Canonical solutions lose nothing: push every buffer of any solution down until it rests
on another buffer or on 0, then list buffers by offset; placing them in that order, each
lands exactly at its *minimum offset* (the highest top among the placed buffers it
overlaps in time). So a depth-first search that, at each node, places one unplaced
buffer at its minimum offset, in non-decreasing (offset, preorder rank) order, finds a
solution whenever one exists. Pruning, each sound for canonical solutions:

1. monotonic section inference: every unplaced buffer will sit at or above the current
   offset, and buffers live in the same section (an interval between lifetime
   endpoints) stack, so for each section `max(offset, floor) + unplaced bytes` must fit;
   a section's floor is the lowest minimum offset of its unplaced buffers (minimum
   offsets only grow, so nothing sits lower; the placed buffers of the section overlap
   every unplaced one there, so their tops are at or below it);
2. dominance: a candidate whose offset is at or above some unplaced buffer's
   `min offset + size` would leave a gap that buffer fits in: skip it; and when a
   placement that raised no other buffer's minimum offset fails (the buffer is
   "hatless"), no sibling alternative is tried (MiniMalloc's hatless pruning);
3. decomposition: when no unplaced buffer crosses a section boundary any more, the two
   sides are independent subproblems, solved one after the other.

The state lives in numpy arrays so that a node costs a few vector operations over its
partition instead of Python loops: the minimum offsets (a placed buffer's is PLACED, above
every real offset, which also drops it from every "lowest unplaced" reduction), and the
members of each section as rows of one padded matrix (padding points at a sentinel entry
whose minimum offset is always PLACED), so recomputing floors is one fancy-indexed `min`.
"""

from __future__ import annotations

import bisect
import itertools
import time
from collections.abc import Sequence

import numpy as np

from tensorgraph.planner.buffers import Buffer, align_up

_MIN, _MAX, _ALL = np.minimum.reduce, np.maximum.reduce, np.logical_and.reduce
PLACED = np.iinfo(np.int64).max  # a placed buffer's min offset: above every real offset
# Work units (see planner.search.Work) the search charges:
NODE_UNITS = 25  # a search node (a dozen numpy calls), plus a unit per SCAN buffers
SCAN = 128  # of its partition it scans;
PLACE_UNITS = 12  # a placement tried, plus a unit per ROWS entries of the section rows
ROWS = 512  # whose floors it recomputes (one C-level gather and reduction);
KEY_UNITS = 3  # a partition's preorder: KEY_UNITS per member

KEYS = {
    "W": "lifetime width in steps (end - start), MiniMalloc's W",
    "S": "sections spanned (lifetime endpoints crossed)",
    "A": "area: size * lifetime width",
    "T": "the largest unplaced total of the sections the buffer spans",
    "Z": "size",
}


class Abort(Exception):
    """The node limit of one round, the work allowance, or the time limit ran out."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def setup_units(buffers: Sequence[Buffer]) -> int:
    """Work units of building a `Problem` for `buffers`, computed without building it
    (a numpy sweep): a unit per 4 entries of the section lists and per 16 cells of the
    padded section matrix (sections x the most buffers live in one section), so a
    caller can refuse a matrix its budget cannot pay for before allocating it."""
    if not buffers:
        return 1
    starts = np.fromiter((b.start for b in buffers), np.int64, len(buffers))
    ends = np.fromiter((b.end for b in buffers), np.int64, len(buffers))
    points = np.unique(np.concatenate([starts, ends]))
    lo, hi = np.searchsorted(points, starts), np.searchsorted(points, ends)
    delta = np.zeros(len(points) + 1, np.int64)
    np.add.at(delta, lo, 1)
    np.add.at(delta, hi, -1)
    load = int(np.cumsum(delta).max())
    cells = max(len(points) - 1, 1) * load
    return int((hi - lo).sum()) // 4 + cells // 16 + len(buffers) + 1


class Problem:
    """Buffers in section coordinates, plus the mutable search state. Build once per
    buffer set and alignment; `capacity`, the limits and `reset()` per decision."""

    def __init__(self, buffers: Sequence[Buffer], alignment: int) -> None:
        n = len(buffers)
        self.buffers = buffers
        self.capacity = 0
        self.alignment = alignment
        sizes = [align_up(b.size, alignment) for b in buffers]
        points = sorted({b.start for b in buffers} | {b.end for b in buffers})
        lo = [bisect.bisect_left(points, b.start) for b in buffers]
        hi = [bisect.bisect_left(points, b.end) for b in buffers]
        count = max(len(points) - 1, 1)
        self.count = count
        self.lo, self.hi = lo, hi
        self.lo_np = np.array(lo, dtype=np.int64)
        self.hi_np = np.array(hi, dtype=np.int64)
        self.size = np.array([*sizes, 0], dtype=np.int64)
        self.width = np.array([b.end - b.start for b in buffers], dtype=np.int64)
        members: list[list[int]] = [[] for _ in range(count)]
        for i in range(n):
            for s in range(lo[i], hi[i]):
                members[s].append(i)
        load = max(map(len, members), default=0)
        self.members = np.full((count, max(load, 1)), n, dtype=np.int32)  # n: sentinel
        for s, row in enumerate(members):
            self.members[s, : len(row)] = row
        self.overlaps: list[np.ndarray] = []
        for i in range(n):
            seen = set(itertools.chain.from_iterable(members[lo[i] : hi[i]]))
            seen.discard(i)
            self.overlaps.append(np.array(sorted(seen), dtype=np.int64))
        self.setup_units = setup_units(buffers)
        self.reset_units = n + count // 4 + 1
        self.nodes_left = 0  # of this round (the round-robin's node limit)
        self.units_left = 0  # of the work allowance
        self.deadline: float | None = None
        self.reset()

    def reset(self) -> None:
        """Fresh search state: nothing placed (an aborted search leaves its state dirty)."""
        n, count = len(self.buffers), self.count
        delta = np.zeros(count + 1, dtype=np.int64)
        np.add.at(delta, self.lo_np, self.size[:n])
        np.add.at(delta, self.hi_np, -self.size[:n])
        self.total = np.cumsum(delta)[:count]  # unplaced bytes per section
        crossing = np.zeros(count + 1, dtype=np.int64)
        np.add.at(crossing, self.lo_np, 1)
        np.add.at(crossing, np.maximum(self.hi_np - 1, self.lo_np), -1)
        self.cuts = np.cumsum(crossing)[:count].tolist()  # buffers crossing s | s + 1
        self.min_offset = np.zeros(n + 1, dtype=np.int64)
        self.min_offset[n] = PLACED
        self.offset = [-1] * n

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

    def preorder(self, members: list[int], heuristic: str) -> np.ndarray:
        """`members` sorted by the heuristic's keys (letters of KEYS), each descending,
        then by index."""
        index = np.array(members, dtype=np.int64)
        size = self.size[index]
        lo, hi = self.lo_np[index], self.hi_np[index]
        columns = {
            "W": lambda: self.width[index],
            "S": lambda: hi - lo,
            "A": lambda: size.astype(np.float64) * self.width[index],
            "Z": lambda: size,
            "T": lambda: np.array(
                [self.total[a:z].max() for a, z in zip(lo.tolist(), hi.tolist(), strict=True)],
                dtype=np.int64,
            ),
        }
        keys = [index] + [-columns[c]() for c in reversed(heuristic)]
        return index[np.lexsort(keys)]

    def solve(self, members: list[int], lo: int, hi: int, heuristic: str) -> bool:
        """Search one independent partition; True when every member is placed."""
        self.units_left -= KEY_UNITS * len(members)
        ranked = self.preorder(members, heuristic)
        return self._search(ranked, lo, hi, 0, -1, heuristic)

    def _tick(self, scanned: int) -> None:
        self.nodes_left -= 1
        self.units_left -= NODE_UNITS + scanned // SCAN
        if self.nodes_left < 0:
            raise Abort("nodes")
        if self.units_left < 0:
            raise Abort("work")
        if self.deadline is not None and time.perf_counter() >= self.deadline:
            raise Abort("time")  # a node costs far more than reading the clock

    def _search(
        self, ranked: np.ndarray, lo: int, hi: int, last_offset: int, last_rank: int, key: str
    ) -> bool:
        self._tick(len(ranked))
        mo = self.min_offset[ranked]
        unplaced = mo != PLACED
        if not unplaced.any():
            return True
        # Dominance: a candidate at or above some unplaced buffer's `min offset + size`
        # would leave a gap that buffer fits in. Section inference in O(1) per candidate:
        # at this node every section already has floor + unplaced bytes <= capacity (the
        # parent's check), so with the floor lifted to a candidate's offset the test is
        # `offset + unplaced bytes <= capacity` in every section, placing the candidate
        # included (its sections gain `size` of floor and lose `size` of unplaced bytes).
        min_height = int(_MIN(mo[unplaced] + self.size[ranked[unplaced]]))
        limit = min(min_height - 1, self.capacity - int(_MAX(self.total[lo:hi])))
        ok = unplaced & (mo >= last_offset) & (mo <= limit)
        ranks = ok.nonzero()[0]
        if not len(ranks):
            return False
        ranks = ranks[np.argsort(mo[ranks], kind="stable")]  # by (offset, rank)
        for r, off in zip(ranks.tolist(), mo[ranks].tolist(), strict=True):
            if off == last_offset and r < last_rank:
                continue  # canonical order: offsets never decrease, ties by rank
            found, hatless = self._place_and_search(int(ranked[r]), off, r, ranked, lo, hi, key)
            if found:
                return True
            if hatless:
                break  # b touched no other buffer: no alternative placed first can do better
        return False

    def _place_and_search(
        self, b: int, off: int, r: int, ranked: np.ndarray, lo: int, hi: int, key: str
    ) -> tuple[bool, bool]:
        """Place b at `off` and search on. Returns (found, hatless): hatless when placing
        b raises no other unplaced buffer's minimum offset (nothing sits over it yet)."""
        size = int(self.size[b])
        top = off + size
        min_offset, total, capacity = self.min_offset, self.total, self.capacity
        b_lo, b_hi = self.lo[b], self.hi[b]
        # Placed buffers have min offset PLACED, so `< top` selects unplaced ones only.
        overlaps = self.overlaps[b]
        raised = overlaps[min_offset[overlaps] < top]
        saved_raised = min_offset[raised]
        own_min = int(min_offset[b])
        min_offset[b] = PLACED
        min_offset[raised] = align_up(top, self.alignment)
        total[b_lo:b_hi] -= size
        # Section inference. A section's floor is its lowest unplaced min offset (placed
        # buffers there overlap every unplaced one, so their tops are below it), and only
        # the sections of b and of the raised buffers changed. The rest passed the
        # candidate limit (`off + unplaced bytes <= capacity`), and so do sections left
        # with no unplaced buffer (their lowest, PLACED, is clipped to the capacity).
        if len(raised):  # only the current partition's sections: solved ones are stale
            a = min(b_lo, int(_MIN(self.lo_np[raised])))
            z = max(b_hi, int(_MAX(self.hi_np[raised])))
        else:
            a, z = b_lo, b_hi
        rows = self.members[a:z]
        self.units_left -= PLACE_UNITS + rows.size // ROWS
        lowest = _MIN(min_offset[rows], axis=1)
        np.minimum(lowest, capacity, out=lowest)
        self.offset[b] = off
        found = False
        if _ALL(lowest <= capacity - total[a:z]):
            found = self._decompose(b, off, r, ranked, lo, hi, key)
        total[b_lo:b_hi] += size
        min_offset[raised] = saved_raised
        min_offset[b] = own_min
        if not found:
            self.offset[b] = -1
        return found, not len(raised)

    def _decompose(
        self, b: int, off: int, r: int, ranked: np.ndarray, lo: int, hi: int, key: str
    ) -> bool:
        cuts = self.cuts
        cutpoints = [lo]
        for s in range(self.lo[b], self.hi[b] - 1):
            cuts[s] -= 1
            if cuts[s] == 0 and lo < s + 1 < hi:
                cutpoints.append(s + 1)
        try:
            if len(cutpoints) == 1:
                return self._search(ranked, lo, hi, off, r, key)
            cutpoints.append(hi)
            open_ = ranked[self.min_offset[ranked] != PLACED]
            saved = self.min_offset[open_]
            for left, right in itertools.pairwise(cutpoints):
                members = open_[(self.lo_np[open_] < right) & (left < self.hi_np[open_])]
                if len(members) and not self.solve(members.tolist(), left, right, key):
                    # Undo the sub-partitions solved before this one.
                    for o in open_[self.min_offset[open_] == PLACED].tolist():
                        self.offset[o] = -1
                    self.min_offset[open_] = saved
                    return False
                self.min_offset[members] = PLACED  # solved: out of the later partitions
            return True
        finally:
            for s in range(self.lo[b], self.hi[b] - 1):
                cuts[s] += 1
