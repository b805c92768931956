"""Lowest-fit placement in waves: the offsets of the one-at-a-time placement loop
(`assign.place_in_order`), computed for many buffers per numpy call.

The loop places buffers in a fixed order, each at the lowest aligned offset clear of
the placed buffers whose lifetimes intersect its own. A buffer's offset is therefore a
function of its predecessors alone (the buffers before it in the order that it
conflicts with in time), and once they are all placed it can be placed, with the very
offset the loop gives it: the loop sees exactly those spans, and the lowest fit does not
depend on the order its spans are read in. A wave is a set of such buffers: wave 0
holds the buffers with no predecessor (offset 0), wave k+1 those whose last predecessor
was placed in wave k (Kahn's topological sort of the conflict graph directed along the
order, a level at a time). The buffers of a wave are placed together by a segmented gap
search (`_lowest_fits`). Largest-first orders of DNN schedules need few waves (30 for a
million `synthetic.dnn_like_buffers`, after which 197 buffers are left), so the cost is a
few dozen numpy passes over the buffers and their conflicts.

A chain of conflicts makes waves of one buffer (each would cost a dozen numpy calls), so
once a wave has fewer than MIN_WAVE buffers the rest are placed one at a time in order,
reading their predecessors from the same conflict lists; every predecessor of a buffer
comes earlier in the order, so it is placed by then.

Conflict lists: in start order, a buffer meets exactly the buffers after it that start
before its end (a contiguous run), and the buffers before it whose run reaches it. Both
are listed per buffer (CSR, rows in start order) with one stable sort of nearly sorted
keys. Memory is O(n + pairs): callers count the pairs first (`StartOrder.conflicts`) and
keep the interval index for very dense sets.

All arithmetic is int64: callers guarantee every offset stays below 2**63 (the sum of
the aligned sizes is below it, and no lowest fit exceeds the aligned sizes placed before
it).
"""

from __future__ import annotations

import numpy as np
from attrs import frozen

from tensorgraph.planner.improve import lowest_gap

MIN_WAVE = 64  # buffers below which a wave's dozen numpy calls cost more than a Python loop
SCAN_LIMIT = 48  # predecessors above which the one-at-a-time gap search uses numpy
KEY_LIMIT = 1 << 62  # segment keys (segment * stride + byte) stay below this


@frozen(eq=False)
class StartOrder:
    """Buffers given in placement order, sorted by start (ties in placement order):
    `rank[p]` is the placement index of the p-th buffer to start, and `runs[p]` how many
    buffers after it in start order start before its end: exactly the buffers that
    start no earlier and meet it, so every intersecting pair is counted once, by its
    earlier-starting member."""

    rank: np.ndarray
    runs: np.ndarray

    @classmethod
    def of(cls, start: np.ndarray, end: np.ndarray) -> StartOrder:
        """From the lifetimes `[start[j], end[j])` of the buffers in placement order."""
        rank = np.argsort(start, kind="stable")
        following = np.searchsorted(start[rank], end[rank], "left")
        return cls(rank, following - np.arange(1, len(rank) + 1))

    @property
    def conflicts(self) -> int:
        """The number of pairs of buffers whose lifetimes intersect."""
        return int(self.runs.sum())


def _ranges(counts: np.ndarray) -> np.ndarray:
    """0, 1, .., counts[0]-1, 0, 1, .., counts[1]-1, ... (the index inside each run)."""
    return np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)


@frozen(eq=False)
class _Lists:
    """Integer lists per row: row r holds `items[ptr[r]:ptr[r + 1]]` (CSR)."""

    ptr: np.ndarray
    items: np.ndarray

    @classmethod
    def conflicts(cls, buffers: StartOrder) -> _Lists:
        """Row p lists, increasing, the start positions whose lifetimes meet p's: first
        those before p whose run reaches p, then p's own run. The pairs (p, later) come
        out grouped by p; grouping their mirrors by the later position is a stable sort of
        increasing runs (timsort merges them: near linear, where sorting random keys costs
        ~6x more), and both halves are then scattered into place."""
        count, runs = len(buffers.runs), buffers.runs
        first = np.repeat(np.arange(count), runs)
        second = first + 1 + _ranges(runs)
        before = np.bincount(second, minlength=count)  # earlier positions meeting p
        ptr = np.zeros(count + 1, np.int64)
        np.cumsum(before + runs, out=ptr[1:])
        items = np.empty(ptr[-1], np.int64)
        items[np.repeat(ptr[:-1], before) + _ranges(before)] = first[
            np.argsort(second, kind="stable")
        ]
        items[np.repeat(ptr[:-1] + before, runs) + _ranges(runs)] = second
        return cls(ptr, items)

    def gather(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(items, owners): the lists of `rows` concatenated, and the index in `rows` of
        the row each item came from (non-decreasing)."""
        counts = self.ptr[rows + 1] - self.ptr[rows]
        owners = np.repeat(np.arange(len(rows)), counts)
        return self.items[np.repeat(self.ptr[rows], counts) + _ranges(counts)], owners


def place_in_waves(size: np.ndarray, buffers: StartOrder, step: int) -> np.ndarray:
    """Offsets of the buffers placed in index order (`size[j]` bytes, the lifetime of
    placement index j in `buffers`), each at the lowest multiple of `step` where it
    misses every earlier buffer whose lifetime intersects its own. Sizes are positive
    and the sum of the sizes rounded up to `step` is below 2**63. Equal to the
    one-at-a-time loop (see the module docstring).

    Internally buffers are numbered by start position; `rank` (the index in the order)
    tells which of two conflicting buffers comes first."""
    rank = buffers.rank
    size = size[rank]
    conflicts = _Lists.conflicts(buffers)
    rows = np.repeat(np.arange(len(size)), np.diff(conflicts.ptr))
    waiting = np.bincount(rows[rank[conflicts.items] < rank[rows]], minlength=len(size))
    del rows
    offset = np.zeros(len(size), np.int64)
    high = size.copy()  # offset + size, for placed buffers
    placed = np.zeros(len(size), bool)
    last = np.zeros(len(size), np.int64)  # scratch, to drop repeats from a wave
    wave = np.flatnonzero(waiting == 0)  # at offset 0: nothing earlier conflicts
    top = 0
    while True:
        near, owners = conflicts.gather(wave)
        earlier = rank[near] < rank[wave][owners]
        fits = _lowest_fits(near[earlier], owners[earlier], offset, high, size[wave], step, top)
        offset[wave], high[wave] = fits, fits + size[wave]
        placed[wave] = True
        top = max(top, int(high[wave].max()) if len(wave) else 0)
        targets = near[~earlier]
        np.subtract.at(waiting, targets, 1)
        ready = targets[waiting[targets] == 0]  # with repeats: one per edge into it
        # Keep one listing of each: `last` ends holding one of its indices in `ready`.
        last[ready] = np.arange(len(ready))
        wave = ready[last[ready] == np.arange(len(ready))]
        if len(wave) < MIN_WAVE:
            break
    pending = np.flatnonzero(~placed)
    _place_one_by_one(pending[np.argsort(rank[pending])], conflicts, rank, offset, high, step)
    placed_offset = np.empty_like(offset)
    placed_offset[rank] = offset
    return placed_offset


def _lowest_fits(
    spans: np.ndarray,
    owners: np.ndarray,
    offset: np.ndarray,
    high: np.ndarray,
    sizes: np.ndarray,
    step: int,
    top: int,
) -> np.ndarray:
    """`improve.lowest_gap` for every buffer k of a wave at once: its spans are
    `[offset[s], high[s])` for the `spans` s whose `owners` entry is k (owners
    non-decreasing), all below byte `top`. Sorting by (owner, low) and a running maximum
    of the highs within each owner's segment give its candidates (0, then just above
    every span read so far), and the offset is the first candidate that ends before the
    next span's low. Segments are keyed `owner * stride + byte`, stride > top, in chunks
    small enough that no key reaches KEY_LIMIT."""
    stride = top + 1
    chunk = max(1, KEY_LIMIT // stride - 1)
    if len(sizes) > chunk:
        parts = np.searchsorted(owners, np.arange(0, len(sizes), chunk))
        return np.concatenate(
            [
                _lowest_fits(
                    spans[lo:hi], owners[lo:hi] - k, offset, high, sizes[k : k + chunk], step, top
                )
                for k, lo, hi in zip(
                    range(0, len(sizes), chunk), parts, [*parts[1:], len(spans)], strict=True
                )
            ]
        )
    counts = np.bincount(owners, minlength=len(sizes))
    base = owners * stride
    # Stable: the keys come grouped by owner, and timsort merges those runs ~6x faster
    # than a quicksort of the same keys (the order of equal keys is of no consequence).
    by_low = np.argsort(base + offset[spans], kind="stable")
    spans = spans[by_low]  # owners and base stay as they were: the sort keeps segments
    reached = np.maximum.accumulate(base + high[spans]) - base
    # Candidates and the low of the span after each, per segment: [0, reached...] and
    # [lows..., end of memory]; segment k's candidates start at firsts[k].
    firsts = np.cumsum(counts + 1) - counts - 1
    candidate = np.zeros(len(spans) + len(sizes), np.int64)
    following = np.full(len(spans) + len(sizes), np.iinfo(np.int64).max, np.int64)
    after = np.arange(len(spans)) + owners + 1
    candidate[after] = -(-reached // step) * step
    following[after - 1] = offset[spans]
    fitting = np.flatnonzero(following >= candidate + np.repeat(sizes, counts + 1))
    # The first fitting candidate of each segment (its last candidate always fits).
    return candidate[fitting[np.searchsorted(fitting, firsts)]]


def _place_one_by_one(
    pending: np.ndarray,
    conflicts: _Lists,
    rank: np.ndarray,
    offset: np.ndarray,
    high: np.ndarray,
    step: int,
) -> None:
    """Place `pending` (in order: every predecessor comes first or is placed), one at a
    time, writing `offset` and `high` (the size until placed): a Python scan over few
    spans, numpy over many."""
    # Few buffers are left in practice (about 200 of a million DNN-like ones), so this
    # reads the arrays in place rather than converting them to lists (O(n) each) first.
    ptr, items = conflicts.ptr, conflicts.items
    for j in pending.tolist():
        near = items[ptr[j] : ptr[j + 1]]
        near = near[rank[near] < rank[j]]
        need = int(high[j])
        if len(near) > SCAN_LIMIT:
            fit = lowest_gap(offset[near], high[near], need, step)
        else:
            fit = 0
            for low, top in sorted(zip(offset[near].tolist(), high[near].tolist(), strict=True)):
                if low >= fit + need:
                    break
                if top > fit:
                    fit = -(-top // step) * step
        offset[j], high[j] = fit, fit + need
