"""Exact search on a time window: the arena top of a dense packing is usually held up by
a few busy steps, and the exact search settles the few hundred buffers live around them
at capacities it cannot settle for all the buffers at once.

A step takes the steps where the packing reaches its top, widens them by a margin on
each side (MARGINS mean lifetimes), and lifts every buffer that overlaps that window.
`search.minimize` packs those buffers alone, from their current offsets (a packing of
them), as tight as its share of the work allows. Their new offsets go back into the
packing; the buffers outside the window that now meet one of them in bytes and time are
lifted and placed again, largest first, each at the lowest aligned offset where it
misses every placed buffer it overlaps in time; `improve.shake` then repairs the top
with a small allowance. The result is kept when its arena is lower. Margins widen
while the work lasts.

Why live buffers never overlap: the window's buffers form a packing among themselves
(the exact search's solutions are packings), the buffers outside the window that meet
none of them stayed where they were, in a packing, and every other buffer is placed
again missing every placed buffer it overlaps in time (as in `improve`). Deterministic:
work is counted, and shake's randomness is seeded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from tensorgraph.planner.buffers import Assignment, Buffer
from tensorgraph.planner.improve import SCAN, _replace, intervals, shake
from tensorgraph.planner.search import Work, minimize

MARGINS = (2, 1, 3)  # mean lifetimes added on each side of the top steps, in turn
SEARCH_SHARE = 2  # of a margin's work: 1/SEARCH_SHARE to the exact search, the rest shake
PLACE_UNITS = 25  # per buffer placed again after the merge, plus a unit per SCAN
RESOLUTION = 64  # the window's exact search stops its bisection as `best`'s does


def resolve_window(
    buffers: Sequence[Buffer],
    plan: Assignment,
    alignment: int,
    work: Work,
    ceiling: int,
    say: Callable[[str], None] | None = None,
) -> Assignment:
    """A packing no worse than `plan` (a valid aligned packing of `buffers`), spending
    `work` up to `ceiling` (each margin an equal part of it). Returns `plan` itself
    unless the arena came down."""
    n = len(buffers)
    if n < 2:
        return plan
    columns = intervals(buffers)
    if columns is None:
        return plan
    size, start, end = columns
    span = max(1, int((end - start).sum()) // n)  # the mean lifetime, in steps
    best = plan
    for k, margin in enumerate(MARGINS):
        part = (ceiling - work.spent) // (len(MARGINS) - k)
        if part <= 0 or not work.afford(1, ceiling):
            break
        offset = np.fromiter((best.offsets[b.id] for b in buffers), np.int64, n)
        high = offset + size
        top = int(high.max())
        at_top = np.flatnonzero(high == top)
        low, up = int(start[at_top].min()) - margin * span, int(end[at_top].max()) + margin * span
        inside = (start < up) & (low < end)
        chosen = np.flatnonzero(inside)
        if len(chosen) == n:
            break  # the window holds everything: the exact search's own job
        sub = Work(part // SEARCH_SHARE)
        sub.deadline = work.clock_limit()
        window = [buffers[i] for i in chosen]
        current = Assignment({b.id: best.offsets[b.id] for b in window}, int(high[chosen].max()))
        packed = minimize(window, alignment, current, sub, None, 1, RESOLUTION)
        work.charge(sub.spent)
        work.cut_short = work.cut_short or sub.cut_short
        offset[chosen] = [packed.offsets[b.id] for b in window]
        nearby = np.flatnonzero(~inside & (start < end[chosen].max()) & (start[chosen].min() < end))
        cost = len(chosen) * (1 + len(nearby) // SCAN)
        if not work.afford(cost, ceiling):
            break
        work.charge(cost)
        lifted = _met(chosen, nearby, offset, size, start, end)
        if len(lifted):
            around = np.flatnonzero((start < end[lifted].max()) & (start[lifted].min() < end))
            cost = len(lifted) * (PLACE_UNITS + len(around) // SCAN)
            if not work.afford(cost, ceiling):
                break
            work.charge(cost)
            sequence = lifted[np.lexsort((lifted, -size[lifted]))].tolist()
            _replace(sequence, around, offset, size, start, end, alignment)
        merged = Assignment(
            {b.id: int(offset[i]) for i, b in enumerate(buffers)}, int((offset + size).max())
        )
        limit = min(ceiling, work.spent + part - sub.spent)
        merged = shake(
            buffers, merged, alignment, lambda u, limit=limit: work.afford(u, limit), work.charge
        )
        if merged.arena_size < best.arena_size:
            best = merged
            if say is not None:
                say(f"window of {len(chosen)} buffers: arena {best.arena_size:,} B")
    return best


def _met(
    chosen: np.ndarray,
    outside: np.ndarray,
    offset: np.ndarray,
    size: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
) -> np.ndarray:
    """The buffers of `outside` (those outside the window that overlap its buffers' span
    of steps) that share bytes and steps with a chosen one."""
    met = np.zeros(len(size), dtype=bool)
    for i in chosen.tolist():
        meets = (
            (start[outside] < end[i])
            & (start[i] < end[outside])
            & (offset[outside] < offset[i] + size[i])
            & (offset[i] < offset[outside] + size[outside])
        )
        met[outside[meets]] = True
    return np.flatnonzero(met)
