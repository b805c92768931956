"""An index of placed lifetimes that answers "which placed buffers overlap this one".

Time is cut into fine buckets of a fixed width (the median lifetime, so a typical buffer
touches a few) and coarse buckets of `FANOUT` fine ones. A placed buffer is filed under
every fine bucket it touches, or, if it would touch more than `FANOUT` of them, under
every coarse bucket it touches instead (so even a buffer alive for the whole schedule is
filed a bounded number of times). A query visits the fine and coarse buckets its own
lifetime touches and filters by exact overlap, so a placement costs about the number of
real neighbours in time, not the number of buffers: no quadratic scan.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from tensorgraph.planner.buffers import Buffer

FANOUT = 64


class IntervalIndex:
    """Placed buffers (by position in `buffers`), queried by lifetime overlap."""

    def __init__(self, buffers: Sequence[Buffer]) -> None:
        self._buffers = buffers
        durations = sorted(b.end - b.start for b in buffers) or [1]
        self._width = max(1, durations[len(durations) // 2])
        self._coarse_width = self._width * FANOUT
        self._fine: dict[int, list[int]] = {}
        self._coarse: dict[int, list[int]] = {}

    def add(self, i: int) -> None:
        """File placed buffer `i`."""
        b = self._buffers[i]
        first, last = b.start // self._width, (b.end - 1) // self._width
        if last - first < FANOUT:
            table, span = self._fine, range(first, last + 1)
        else:
            width = self._coarse_width
            table, span = self._coarse, range(b.start // width, (b.end - 1) // width + 1)
        for bucket in span:
            table.setdefault(bucket, []).append(i)

    def overlapping(self, i: int) -> Iterator[int]:
        """Every placed buffer whose lifetime intersects buffer `i`'s, each once."""
        me = self._buffers[i]
        start, end = me.start, me.end
        buffers = self._buffers
        seen: set[int] = set()
        fine = range(start // self._width, (end - 1) // self._width + 1)
        coarse = range(start // self._coarse_width, (end - 1) // self._coarse_width + 1)
        for table, span in ((self._fine, fine), (self._coarse, coarse)):
            for bucket in span:
                for j in table.get(bucket, ()):
                    if j in seen:
                        continue
                    seen.add(j)
                    other = buffers[j]
                    if other.start < end and start < other.end:
                        yield j
