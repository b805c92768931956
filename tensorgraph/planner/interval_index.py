"""An index of placed lifetimes that answers "which placed buffers overlap this one".

Time is cut into buckets of a fixed width (the median lifetime, so a typical buffer
touches a few buckets); a placed buffer is filed under every bucket it touches, except
buffers that touch more than `LONG` buckets, which sit in one list every query scans
(a graph has few of them: inputs, outputs, long skip connections). A query visits the
buckets its own lifetime touches, so placement cost follows the number of real
neighbours in time instead of the number of buffers: no quadratic scan.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from tensorgraph.planner.buffers import Buffer

LONG = 64


class IntervalIndex:
    """Placed buffers (by position in `buffers`), queried by lifetime overlap."""

    def __init__(self, buffers: Sequence[Buffer]) -> None:
        self._buffers = buffers
        durations = sorted(b.end - b.start for b in buffers) or [1]
        self._width = max(1, durations[len(durations) // 2])
        self._buckets: dict[int, list[int]] = {}
        self._long: list[int] = []

    def _span(self, i: int) -> range:
        b = self._buffers[i]
        return range(b.start // self._width, (b.end - 1) // self._width + 1)

    def add(self, i: int) -> None:
        """File placed buffer `i`."""
        span = self._span(i)
        if len(span) > LONG:
            self._long.append(i)
            return
        for bucket in span:
            self._buckets.setdefault(bucket, []).append(i)

    def overlapping(self, i: int) -> Iterator[int]:
        """Every placed buffer whose lifetime intersects buffer `i`'s, each once."""
        me = self._buffers[i]
        start, end = me.start, me.end
        seen: set[int] = set()
        buffers = self._buffers
        for j in self._long:
            other = buffers[j]
            if other.start < end and start < other.end:
                yield j
        for bucket in self._span(i):
            for j in self._buckets.get(bucket, ()):
                if j in seen:
                    continue
                seen.add(j)
                other = buffers[j]
                if other.start < end and start < other.end:
                    yield j
