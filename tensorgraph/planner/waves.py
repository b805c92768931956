"""Lowest-fit placement in waves: the offsets of the one-at-a-time placement loop
(`assign.place_in_order`), computed for many buffers per numpy call.

The loop places buffers in a fixed order, each at the lowest aligned offset clear of
the placed buffers whose lifetimes intersect its own. A buffer's offset is therefore a
function of its predecessors alone (the buffers before it in the order that it
conflicts with in time), and once they are all placed, it can be placed, with the very
offset the loop gives it: the loop would see exactly those spans, in its own order, and
the lowest fit does not depend on the order its spans are read in. A wave is a set of
such buffers: wave 0 holds the buffers with no predecessor (offset 0), wave k+1 those
whose last predecessor was placed in wave k (Kahn's topological sort of the conflict
graph directed along the order, a level at a time). The buffers of a wave are placed
together by a segmented gap search. Large-first orders of DNN schedules need few waves
(35 for a million `synthetic.dnn_like_buffers`), so the cost is a few dozen numpy
passes over the buffers and their conflicts.

A chain of conflicts makes waves of one buffer (each would cost a dozen numpy calls), so
once a wave has fewer than MIN_WAVE buffers the rest are placed one at a time in order,
reading their predecessors from the same conflict lists; every predecessor of a buffer
comes earlier in the order, so it is placed by then.

Conflicts are all pairs of intersecting lifetimes: in start order, a buffer meets
exactly the buffers after it that start before its end. They are stored as lists per
buffer (CSR), once by the later buffer of each pair (predecessors) and once by the
earlier (successors): memory is O(n + pairs), and callers count pairs first
(`count_conflicts`) and keep the interval index for very dense sets.

All arithmetic is int64: callers guarantee every offset stays below 2**63 (the sum of
the aligned sizes is below it, and no lowest fit exceeds the sum of the aligned sizes
placed before it).
"""

from __future__ import annotations

import numpy as np
from attrs import frozen

from tensorgraph.planner.improve import lowest_gap

MIN_WAVE = 64  # buffers below which a wave's dozen numpy calls cost more than a Python loop
SCAN_LIMIT = 48  # predecessors above which the one-at-a-time gap search uses numpy
KEY_LIMIT = 1 << 62  # segment keys (segment * stride + byte) stay below this


def count_conflicts(start: np.ndarray, end: np.ndarray) -> int:
    """The number of pairs of intersecting half-open lifetimes `[start[i], end[i])`
    (what `_conflict_pairs` lists, counted without listing them)."""
    starts = np.sort(start)
    return (
        int(np.searchsorted(starts, np.sort(end), "left").sum())
        - len(start) * (len(start) + 1) // 2
    )


def _conflict_pairs(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every intersecting pair once, as (earlier, later) arrays of positions, earlier <
    later. In start order (ties by position), position p meets the positions p+1 .. q-1,
    q the first start at or after its end: they start no earlier and before its end."""
    by_start = np.argsort(start, kind="stable")
    following = np.searchsorted(start[by_start], end[by_start], "left")
    counts = following - np.arange(1, len(start) + 1)
    first = np.repeat(np.arange(len(start)), counts)
    second = first + 1 + _ranges(counts)
    a, b = by_start[first], by_start[second]
    return np.minimum(a, b), np.maximum(a, b)


def _ranges(counts: np.ndarray) -> np.ndarray:
    """0, 1, .., counts[0]-1, 0, 1, .., counts[1]-1, ... (the index inside each run)."""
    total = int(counts.sum())
    return np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)


@frozen(eq=False)
class _Lists:
    """Integer lists per row: row r holds `items[ptr[r]:ptr[r + 1]]` (CSR)."""

    ptr: np.ndarray
    items: np.ndarray

    @classmethod
    def of(cls, rows: np.ndarray, items: np.ndarray, count: int) -> _Lists:
        ptr = np.zeros(count + 1, np.int64)
        np.cumsum(np.bincount(rows, minlength=count), out=ptr[1:])
        return cls(ptr, items[np.argsort(rows, kind="stable")])

    def counts(self, rows: np.ndarray) -> np.ndarray:
        return self.ptr[rows + 1] - self.ptr[rows]

    def gather(self, rows: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """The lists of `rows` concatenated (`counts` is `self.counts(rows)`)."""
        return self.items[np.repeat(self.ptr[rows], counts) + _ranges(counts)]


def place_in_waves(size: np.ndarray, start: np.ndarray, end: np.ndarray, step: int) -> np.ndarray:
    """Offsets of the buffers `(size[j], [start[j], end[j]))` placed in index order, each
    at the lowest multiple of `step` where it misses every earlier buffer whose lifetime
    intersects its own. Sizes are positive and the sum of the sizes rounded up to `step`
    is below 2**63. Equal to the one-at-a-time loop (see the module docstring)."""
    count = len(size)
    earlier, later = _conflict_pairs(start, end)
    predecessors = _Lists.of(later, earlier, count)
    successors = _Lists.of(earlier, later, count)
    del earlier, later
    offset = np.zeros(count, np.int64)
    high = size.copy()  # offset + size, for placed buffers
    placed = np.zeros(count, bool)
    waiting = np.diff(predecessors.ptr)  # predecessors not placed yet
    wave = np.flatnonzero(waiting == 0)  # at offset 0: nothing earlier conflicts
    placed[wave] = True
    top = int(size[wave].max()) if len(wave) else 0
    while len(wave):
        targets = successors.gather(wave, successors.counts(wave))
        np.subtract.at(waiting, targets, 1)
        wave = np.unique(targets[waiting[targets] == 0])
        if len(wave) < MIN_WAVE:
            break
        offset[wave] = _lowest_fits(wave, predecessors, offset, high, size[wave], step, top)
        high[wave] = offset[wave] + size[wave]
        placed[wave] = True
        top = max(top, int(high[wave].max()))
    _place_one_by_one(np.flatnonzero(~placed), predecessors, offset, high, size, step)
    return offset


def _lowest_fits(
    wave: np.ndarray,
    predecessors: _Lists,
    offset: np.ndarray,
    high: np.ndarray,
    sizes: np.ndarray,
    step: int,
    top: int,
) -> np.ndarray:
    """`improve.lowest_gap` for every buffer of `wave` at once (their predecessors are
    placed, all below byte `top`). Each buffer's spans form a segment; sorting by
    (segment, low) and a running maximum of the highs within segments give each
    segment's candidates (0, then just above every span read so far), and a buffer's
    offset is its first candidate that ends before the next span's low. Segments are
    keyed `segment * stride + byte` with stride > top, in chunks small enough that no
    key reaches KEY_LIMIT."""
    stride = top + 1
    chunk = max(1, KEY_LIMIT // stride - 1)
    if len(wave) > chunk:
        return np.concatenate(
            [
                _lowest_fits(
                    wave[i : i + chunk], predecessors, offset, high, sizes[i : i + chunk], step, top
                )
                for i in range(0, len(wave), chunk)
            ]
        )
    counts = predecessors.counts(wave)
    spans = predecessors.gather(wave, counts)
    segment = np.repeat(np.arange(len(wave)), counts)
    base = segment * stride
    by_low = np.argsort(base + offset[spans])
    spans, base = spans[by_low], base[by_low]
    reached = np.maximum.accumulate(base + high[spans]) - base
    # Candidates and the low of the span after each, per segment: [0, reached...] and
    # [lows..., end of memory]; segment k's candidates start at firsts[k].
    firsts = np.cumsum(counts + 1) - counts - 1
    candidate = np.zeros(len(spans) + len(wave), np.int64)
    following = np.full(len(spans) + len(wave), np.iinfo(np.int64).max, np.int64)
    after = np.arange(len(spans)) + segment + 1  # segment is sorted, so by_low kept it
    candidate[after] = -(-reached // step) * step
    following[after - 1] = offset[spans]
    fits = following >= candidate + np.repeat(sizes, counts + 1)
    fitting = np.flatnonzero(fits)
    # The first fitting candidate of each segment (the last candidate always fits).
    return candidate[fitting[np.searchsorted(fitting, firsts)]]


def _place_one_by_one(
    pending: np.ndarray,
    predecessors: _Lists,
    offset: np.ndarray,
    high: np.ndarray,
    size: np.ndarray,
    step: int,
) -> None:
    """Place `pending` (increasing: every predecessor comes first or is placed), one at a
    time, writing `offset` and `high`: a Python scan over few spans, numpy over many."""
    ptr, items = predecessors.ptr.tolist(), predecessors.items
    low_list, high_list, size_list = offset.tolist(), high.tolist(), size.tolist()
    for j in pending.tolist():
        first, last, need = ptr[j], ptr[j + 1], size_list[j]
        if last - first > SCAN_LIMIT:
            near = items[first:last]
            fit = lowest_gap(offset[near], high[near], need, step)
        else:
            fit = 0
            near_list = items[first:last].tolist()
            for low, top in sorted([(low_list[k], high_list[k]) for k in near_list]):
                if low >= fit + need:
                    break
                if top > fit:
                    fit = -(-top // step) * step
        low_list[j], high_list[j] = fit, fit + need
        offset[j], high[j] = fit, fit + need
