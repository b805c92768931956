"""An index of placed lifetimes that answers "which placed buffers overlap this one".

Times are first compressed to the ranks of the distinct lifetime endpoints, so the
horizon is below `2n` whatever the raw step numbers are (MiniMalloc files use steps up
to 2**20; sparse schedules would otherwise create empty buckets by the million).

A buffer of compressed duration `d` lives on level `k`, the smallest with `FANOUT**k >= d`,
filed once, in bucket `start >> (SHIFT * k)` of that level. A query for `[s, e)` visits,
on every non-empty level `k` of width `W = FANOUT**k`, the buckets holding starts in
`[s - W + 1, e)`: a level-`k` buffer that overlaps `[s, e)` ends after `s` and lasts at
most `W`, so it starts there. Candidates are then filtered exactly.

Cost of a query: on level 0 the `e - s` buckets it visits are compressed steps inside
its own lifetime, each the endpoint of a buffer that overlaps it, so they are bounded
by its real neighbours; each higher level adds at most `(e - s) / W + 2` buckets. So a
placement costs about the number of buffers live beside it, not the number of buffers.
A query that would walk more buckets than a vectorised scan of every placed buffer
costs (`SCAN_RATIO` buckets per placed buffer) does that scan instead: a buffer alive
for most of the schedule overlaps nearly everything anyway, and numpy filters it ~30
times faster than a Python walk.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from attrs import frozen

from tensorgraph.planner.buffers import Buffer

SHIFT = 2  # FANOUT = 4: measured best of 2, 4, 8 and 16 on the DNN-like and MiniMalloc sets
FANOUT = 1 << SHIFT
SCAN_RATIO = 30  # placed buffers a numpy scan filters in the time of one bucket visited


@frozen(eq=False)
class Lifetimes:
    """Compressed lifetimes of a buffer list: `start[i] < end[i]` are ranks of distinct
    endpoints (order and overlap are those of the raw steps), `level[i]` as above.
    Built once per buffer list and shared by every index over it."""

    start: list[int]
    end: list[int]
    level: list[int]
    start_array: np.ndarray
    end_array: np.ndarray

    @classmethod
    def of(cls, buffers: Sequence[Buffer]) -> Lifetimes:
        """Compress the lifetimes of `buffers` (numpy: O(n log n))."""
        return cls.of_steps(
            np.fromiter((b.start for b in buffers), np.int64, len(buffers)),
            np.fromiter((b.end for b in buffers), np.int64, len(buffers)),
        )

    @classmethod
    def of_steps(cls, raw_start: np.ndarray, raw_end: np.ndarray) -> Lifetimes:
        """Compress the lifetimes `[raw_start[i], raw_end[i])` (int64 arrays)."""
        points = np.unique(np.concatenate([raw_start, raw_end]))
        start = np.searchsorted(points, raw_start)
        end = np.searchsorted(points, raw_end)
        # Smallest k with FANOUT**k >= d is ceil(bit_length(d - 1) / SHIFT).
        bits = np.zeros(len(raw_start), np.int64)
        span = end - start - 1
        positive = span > 0
        bits[positive] = np.floor(np.log2(span[positive])).astype(np.int64) + 1
        level = -(-bits // SHIFT)
        return cls(start.tolist(), end.tolist(), level.tolist(), start, end)


class IntervalIndex:
    """Placed buffers (by position in the list `lifetimes` was built from), queried by
    lifetime overlap. Mutable by design: a placement loop adds each buffer once."""

    def __init__(self, lifetimes: Lifetimes) -> None:
        self._lifetimes = lifetimes
        self._levels: dict[int, dict[int, list[int]]] = {}  # level -> bucket -> positions
        self._placed = np.empty(len(lifetimes.start), np.int64)  # first `_count` are placed
        self._count = 0

    def add(self, i: int) -> None:
        """File buffer `i` as placed (each buffer at most once)."""
        self._placed[self._count] = i
        self._count += 1
        level = self._lifetimes.level[i]
        table = self._levels.get(level)
        if table is None:
            table = self._levels[level] = {}
        bucket = self._lifetimes.start[i] >> (SHIFT * level)
        items = table.get(bucket)
        if items is None:
            table[bucket] = [i]
        else:
            items.append(i)

    def overlapping(self, i: int) -> list[int] | np.ndarray:
        """Every placed buffer whose lifetime intersects buffer `i`'s, each once (a list,
        or an int64 array when the vectorised scan was cheaper)."""
        starts, ends = self._lifetimes.start, self._lifetimes.end
        s, e = starts[i], ends[i]
        if (e - s) * len(self._levels) * SCAN_RATIO > self._count:
            placed = self._placed[: self._count]
            hit = (self._lifetimes.start_array[placed] < e) & (
                self._lifetimes.end_array[placed] > s
            )
            return placed[hit]
        found: list[int] = []
        for level, table in self._levels.items():
            shift = SHIFT * level
            first = max(s - (1 << shift) + 1, 0) >> shift
            for bucket in range(first, ((e - 1) >> shift) + 1):
                items = table.get(bucket)
                if items is None:
                    continue
                if level == 0:
                    found.extend(items)  # one step long and starting inside [s, e)
                else:
                    found.extend([j for j in items if ends[j] > s and starts[j] < e])
        return found
