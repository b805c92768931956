"""Offset algorithms: give every buffer a byte offset so live buffers never share bytes.

Every algorithm but `naive` places buffers one at a time, in an order of its own, at
the lowest aligned offset where the new buffer shares no byte with any already placed
buffer whose lifetime overlaps its own. Why live buffers never overlap: a placed buffer
never moves, and the gap test sees every placed buffer that conflicts in time with the
new one (the interval index returns exactly those), so each conflicting pair is
checked once, when its second buffer is placed. `planner.waves` computes the same
offsets for many buffers at once: each buffer as soon as every buffer before it in the
order that it conflicts with is placed. Zero-size buffers own no byte:
`assign_offsets` plans them apart, at offset 0, so they never change the arena or any
decision about the others.

- `naive`: no reuse, buffers stacked in input order (arena = sum of aligned sizes,
  less the padding after the last one);
- `greedy_size`: largest first, ties to the longer lifetime, then the earlier start,
  then id order (TensorFlow Lite / ExecuTorch's greedy);
- `greedy_breadth`: by birth step, largest first within a step;
- `best` (`planner.portfolio`): the three above, more orderings while its work budget
  lasts, skyline packings built by the exact search's first round (`search.construct`),
  an improvement search
  that moves the buffers touching the arena top earlier in the order, a repair search
  that re-places the buffers around the top (`planner.improve`), then, above the lower
  bound, the exact search of `planner.search` on the buffers around the top
  (`planner.window`) and on all of them, and a random repair search (`shake`);
  never worse than the three, and it stops as soon as a plan reaches the lower bound.
  Its plan carries a certificate (`planner.certificate`): optimal, or the range the
  optimum lies in.

`best` is deterministic: its budget counts work units (`planner.search.Work`: a buffer
placed in a placement pass costs PLACE_UNITS plus a unit per NEAR neighbours its gap
search scans; the exact search charges per node), never seconds, and its random
restarts are seeded. The same buffers, alignment and budget give byte-identical offsets
on any machine and under any load. Only an explicit `time_limit` reads the clock, and
a plan it cut short says so.

Overflow: every offset and arena size stays below 2**63. When the sum of all aligned
sizes is below 2**63 no computation here can exceed it (a buffer placed at the lowest
fit ends at most at the aligned sizes of the buffers placed so far); otherwise the gap
search runs on Python ints and a buffer that would end at 2**63 or beyond is a
PlanError naming it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import NoReturn

import numpy as np
from attrs import frozen

from tensorgraph.errors import PlanError
from tensorgraph.planner.buffers import (
    INT64_END,
    Assignment,
    Buffer,
    align_up,
    peak,
)
from tensorgraph.planner.certificate import CertifiedAssignment, certified
from tensorgraph.planner.improve import lowest_gap
from tensorgraph.planner.interval_index import IntervalIndex, Lifetimes
from tensorgraph.planner.search import check_limits
from tensorgraph.planner.waves import StartOrder, place_in_waves

NUMPY_GAP_SEARCH = 48  # neighbours above which the gap search is vectorised (measured)
# Work units (fixed counts of operations, 0.6-1 us each on a quiet 2-core machine and
# up to 5.3 us measured under load; see planner.search and benches/README.md):
PLACE_UNITS = 8  # per buffer a placement pass places (interval index query, bookkeeping)
NEAR = 2  # plus one per NEAR placed neighbours its gap search sorts and scans
PAIR_LIMIT = 1 << 23  # conflict pairs above which placement skips `planner.waves`: its
# peak memory grows by ~70 bytes a pair (384 MB for a million DNN-like buffers, 3.9M pairs,
# as much as the interval index's lists), while the interval index stores no pair


def place_in_order(
    buffers: Sequence[Buffer],
    order: Sequence[int],
    alignment: int,
    columns: Columns | None = None,
) -> Assignment:
    """Place `buffers[i]` for i in `order` (a permutation of positions), each at the lowest
    multiple of `alignment` where it overlaps no placed buffer it conflicts with in time.
    `columns` (`Columns.of(buffers)`) may be passed to share it between calls. The
    result's `work` is the pass's cost in work units (see the module docstring).
    PlanError naming the buffer that would end at byte 2**63 or beyond."""
    plan = place_within(buffers, order, alignment, columns, None)
    assert plan is not None  # only an allowance stops a pass
    return plan


def place_within(
    buffers: Sequence[Buffer],
    order: Sequence[int],
    alignment: int,
    columns: Columns | None,
    allowance: int | None,
) -> Assignment | None:
    """`place_in_order`, abandoned (None) when its cost would exceed `allowance`. In waves
    (`planner.waves`) when no offset can reach 2**63 and the conflict pairs are at most
    PAIR_LIMIT; otherwise one buffer at a time with the interval index. Both give the
    same offsets and cost, so the choice never changes a plan."""
    columns = Columns.of(buffers) if columns is None else columns
    wide = _total(columns.size) + len(buffers) * (alignment - 1) >= INT64_END
    if not wide:
        positions = np.asarray(order, np.int64)
        positions = positions[columns.size[positions] > 0]
        starts = StartOrder.of(columns.start[positions], columns.end[positions])
        # The loop's cost, known in advance: every placed buffer scans each conflicting
        # buffer placed before it, so `scanned` ends at the number of conflicting pairs.
        conflicts = starts.conflicts
        cost = len(positions) * PLACE_UNITS + conflicts // NEAR
        if allowance is not None and cost > allowance:
            return None
        if conflicts <= PAIR_LIMIT:
            sizes = columns.size[positions]
            placed = place_in_waves(sizes, starts, alignment)
            offsets = np.zeros(len(buffers), np.int64)
            offsets[positions] = placed
            top = int((placed + sizes).max()) if len(positions) else 0
            return Assignment(
                dict(zip([b.id for b in buffers], offsets.tolist(), strict=True)), top, cost
            )
    index = IntervalIndex(Lifetimes.of_steps(columns.start, columns.end))
    spans = _Spans([0] * len(buffers), [0] * len(buffers), np.zeros((2, len(buffers)), np.int64))
    top = placed = scanned = 0
    for i in order:
        size = buffers[i].size
        if not size:
            continue
        near = index.overlapping(i)
        placed, scanned = placed + 1, scanned + len(near)
        if allowance is not None and placed * PLACE_UNITS + scanned // NEAR > allowance:
            return None
        if not len(near):
            offset = 0
        elif wide:  # int64 arrays could wrap: Python ints only
            offset = _scan_fit(list(near), spans, size, alignment)
        else:
            offset = _lowest_fit(near, spans, size, alignment)
        if offset + size >= INT64_END:
            raise PlanError(
                f"buffer {buffers[i].id!r} ({size} bytes) would end at byte {offset + size}, "
                "beyond 2**63: the arena cannot be represented"
            )
        spans.low[i], spans.high[i] = offset, offset + size
        spans.arrays[:, i] = offset, offset + size
        top = max(top, offset + size)
        index.add(i)
    offsets = {b.id: spans.low[i] for i, b in enumerate(buffers)}
    return Assignment(offsets, top, work=placed * PLACE_UNITS + scanned // NEAR)


def _total(sizes: np.ndarray) -> int:
    """The exact sum of `sizes` (int64, each in [0, 2**63)) as a Python int: summed in
    32-bit halves, neither of which can wrap for fewer than 2**31 sizes."""
    return (int((sizes >> 32).sum()) << 32) + int((sizes & 0xFFFFFFFF).sum())


@frozen
class _Spans:
    """Byte spans `[low[i], high[i])` of placed buffers, kept twice: as lists for the
    short Python scan and as rows of `arrays` (low, high) for the vectorised one."""

    low: list[int]
    high: list[int]
    arrays: np.ndarray


def _lowest_fit(near: list[int] | np.ndarray, spans: _Spans, size: int, step: int) -> int:
    """The lowest multiple of `step` at which `size` bytes miss every span of `near`.
    Scanning spans by increasing low end, the candidate is 0 or just above every span
    seen so far, and the first candidate that ends before the next span's low end fits;
    no lower aligned offset does, since each one below it meets a span already seen."""
    if isinstance(near, list) and len(near) <= NUMPY_GAP_SEARCH:
        return _scan_fit(near, spans, size, step)
    lows, highs = spans.arrays[:, near]
    return lowest_gap(lows, highs, size, step)


def _scan_fit(near: list[int], spans: _Spans, size: int, step: int) -> int:
    """`_lowest_fit` by a Python scan (exact for any int)."""
    low, high = spans.low, spans.high
    candidate = 0
    for start, end in sorted([(low[j], high[j]) for j in near]):
        if start >= candidate + size:
            break
        if end > candidate:
            candidate = -(-end // step) * step
    return candidate


@frozen(eq=False)
class Columns:
    """The buffers' fields as numpy arrays, computed once for every ordering.
    `rank` orders ids (their position when the ids are not mutually comparable)."""

    size: np.ndarray
    start: np.ndarray
    end: np.ndarray
    rank: np.ndarray

    @classmethod
    def of(cls, buffers: Sequence[Buffer]) -> Columns:
        n = len(buffers)
        ids = [b.id for b in buffers]
        # Plain ints (the common case) sort in numpy, unless too large for (u)int64.
        keys = np.array(ids) if all(type(i) is int for i in ids) else None
        if keys is not None and keys.dtype.kind in "iu":
            by_id = np.argsort(keys, kind="stable")
        else:
            try:
                by_id = sorted(range(n), key=ids.__getitem__)
            except TypeError:  # mixed id types (ints and strings from one CSV)
                by_id = list(range(n))
        rank = np.empty(n, np.int64)
        rank[by_id] = np.arange(n)
        return cls(
            np.fromiter((b.size for b in buffers), np.int64, n),
            np.fromiter((b.start for b in buffers), np.int64, n),
            np.fromiter((b.end for b in buffers), np.int64, n),
            rank,
        )

    @property
    def duration(self) -> np.ndarray:
        return self.end - self.start


def _sorted(*keys: np.ndarray) -> list[int]:
    """Positions sorted by `keys`, the first key most significant."""
    return np.lexsort(keys[::-1]).tolist()


def by_size(c: Columns) -> list[int]:
    """Largest first; ties: longer lifetime, earlier start, id order."""
    return _sorted(-c.size, -c.duration, c.start, c.rank)


def by_breadth(c: Columns) -> list[int]:
    """By birth step; within a step largest first, then longer lifetime, id order."""
    return _sorted(c.start, -c.size, -c.duration, c.rank)


def by_area(c: Columns) -> list[int]:
    """Largest size * duration first (bytes held longest). The product is a float64: an
    int64 one could wrap (sizes and steps may each approach 2**63)."""
    return _sorted(-c.size.astype(np.float64) * c.duration, -c.size, c.rank)


def by_duration(c: Columns) -> list[int]:
    """Longest lifetime first, then largest."""
    return _sorted(-c.duration, -c.size, c.rank)


def by_conflicts(c: Columns) -> list[int]:
    """Most buffers overlapping in time first, then largest. A buffer conflicts with all
    but those starting at or after its end and those ending at or before its start."""
    starts, ends = np.sort(c.start), np.sort(c.end)
    later = len(starts) - np.searchsorted(starts, c.end, side="left")
    earlier = np.searchsorted(ends, c.start, side="right")
    return _sorted(-(len(starts) - later - earlier), -c.size, c.rank)


def by_pressure(c: Columns) -> list[int]:
    """Buffers live at the busiest steps first: key is the most bytes live at any step of
    the buffer's lifetime (a range maximum over the live-bytes profile, answered per
    power-of-two length with a sparse table built one level at a time), then size."""
    points, inverse = np.unique(np.concatenate([c.start, c.end]), return_inverse=True)
    n = len(c.size)
    first, last = inverse[:n], inverse[n:]
    delta = np.zeros(len(points) + 1, np.int64)
    np.add.at(delta, first, c.size)
    np.add.at(delta, last, -c.size)
    live = np.cumsum(delta)[: len(points)]  # live[t]: bytes live in [points[t], points[t+1])
    length = last - first
    power = np.floor(np.log2(length)).astype(np.int64)
    peak = np.zeros(n, np.int64)
    table = live
    for k in range(int(power.max()) + 1 if n else 0):
        mine = power == k
        peak[mine] = np.maximum(table[first[mine]], table[last[mine] - (1 << k)])
        table = np.maximum(table[: -(1 << k)], table[1 << k :]) if len(table) > 1 << k else table
    return _sorted(-peak, -c.size, -c.duration, c.rank)


BASELINES: tuple[Callable[[Columns], list[int]], ...] = (by_size, by_breadth)
MORE_ORDERS: tuple[Callable[[Columns], list[int]], ...] = (
    by_pressure,
    by_area,
    by_conflicts,
    by_duration,
)


def naive(buffers: Sequence[Buffer], alignment: int) -> Assignment:
    """No reuse: each buffer with bytes right after the previous one (aligned); empty
    buffers at 0, so they never raise `arena_size`. PlanError naming the first buffer
    that would end at byte 2**63 or beyond. Costs a work unit per buffer."""
    offsets: dict[Hashable, int] = {}
    cursor = top = 0
    for b in buffers:
        offsets[b.id] = cursor if b.size else 0
        if b.size:
            top = cursor + b.size
            if top >= INT64_END:
                raise PlanError(
                    f"buffer {b.id!r} ({b.size} bytes) would end at byte {top} with no "
                    "reuse, beyond 2**63: the arena cannot be represented"
                )
            cursor = align_up(top, alignment)
    return Assignment(offsets, top, work=len(buffers))


def greedy_size(buffers: Sequence[Buffer], alignment: int) -> Assignment:
    """Largest first at the lowest fitting offset (see `by_size` for ties)."""
    columns = Columns.of(buffers)
    return place_in_order(buffers, by_size(columns), alignment, columns)


def greedy_breadth(buffers: Sequence[Buffer], alignment: int) -> Assignment:
    """By birth step, largest first within a step, at the lowest fitting offset."""
    columns = Columns.of(buffers)
    return place_in_order(buffers, by_breadth(columns), alignment, columns)


# `best` searches with the placement passes and orders above (planner.portfolio).
from tensorgraph.planner.portfolio import best  # noqa: E402

ALGORITHMS: dict[str, Callable[..., Assignment]] = {
    "naive": naive,
    "greedy_size": greedy_size,
    "greedy_breadth": greedy_breadth,
    "best": best,
}


def assign_offsets(
    buffers: Sequence[Buffer],
    algorithm: str = "best",
    alignment: int = 1,
    budget: int | None = None,
    *,
    time_limit: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> Assignment:
    """Offsets for `buffers` by `algorithm` (a name in ALGORITHMS), each a multiple of
    `alignment` bytes (zero-size buffers at 0: they never raise `arena_size`);
    `arena_size` is the highest `offset + size` (0 without buffers), not rounded up.

    `budget` (work units, see `planner.search.Work`; None for `default_budget` of the
    count of non-empty buffers) bounds `best`; its three baselines always run.
    `best` returns a `CertifiedAssignment` (an Assignment with `bound`,
    `proven_infeasible`, `certificate`, see `planner.certificate`).
    `time_limit` (seconds, None for none) caps `best` by the clock, and the result's
    `cut_short` says whether it did; `progress` receives `best`'s progress lines. The
    other algorithms ignore all three. Without a time limit the result depends only on
    the arguments. `work` in the result: units spent, baselines included, so
    `work <= max(budget, the baselines' work)`.

    PlanError on an unknown algorithm, a bad alignment, budget or time limit, duplicate
    ids, or lifetimes whose busiest step holds 2**63 bytes or more (no arena can be
    represented in int64; the message names the step and its largest buffer)."""
    if algorithm not in ALGORITHMS:
        raise PlanError(f"unknown algorithm {algorithm!r}; known: {', '.join(ALGORITHMS)}")
    if (
        not isinstance(alignment, int)
        or isinstance(alignment, bool)
        or not 1 <= alignment < INT64_END
    ):
        raise PlanError(f"alignment must be a positive integer below 2**63 but got {alignment!r}")
    check_limits(budget, time_limit)
    buffers = list(buffers)
    # Checked in bulk (C loops), then, only when something is wrong, one by one to name it.
    if not all(isinstance(b, Buffer) for b in buffers):
        _reject(buffers)
    if len({b.id for b in buffers}) < len(buffers):
        _reject(buffers)
    _check_representable(buffers)
    # Empty buffers own no byte: they are planned apart, at offset 0, so they change
    # neither the arena nor any decision about the others (orders, bounds, budgets).
    full = [b for b in buffers if b.size]
    if algorithm == "best":
        plan = best(full, alignment, budget, time_limit, progress)
    else:
        plan = ALGORITHMS[algorithm](full, alignment)
    if len(full) == len(buffers) and algorithm != "best":
        offsets = plan.offsets  # already one per buffer, in their order (placement passes)
    else:
        offsets = {b.id: plan.offsets[b.id] if b.size else 0 for b in buffers}
    result = Assignment(offsets, plan.arena_size, plan.work, plan.cut_short)
    if isinstance(plan, CertifiedAssignment):
        return certified(result, plan.bound, plan.proven_infeasible)
    return result


def _reject(buffers: Sequence[object]) -> NoReturn:
    """PlanError naming the first item that is not a Buffer or repeats an earlier id."""
    seen: set[Hashable] = set()
    for b in buffers:
        if not isinstance(b, Buffer):
            raise PlanError(f"assign_offsets expects Buffer objects but got {b!r}")
        if b.id in seen:
            raise PlanError(f"buffer ids must be unique, but {b.id!r} appears more than once")
        seen.add(b.id)
    raise AssertionError("_reject called on valid buffers")


def _check_representable(buffers: Sequence[Buffer]) -> None:
    """PlanError when the bytes live at one step reach 2**63 (no arena below 2**63 can
    hold them). Skipped, as it cannot happen, when all sizes sum below 2**63."""
    if sum(b.size for b in buffers) < INT64_END:
        return
    most, step = peak(buffers)
    if most >= INT64_END:
        live = [b for b in buffers if b.start <= step < b.end]
        largest = max(live, key=lambda b: b.size)
        raise PlanError(
            f"{most} bytes are live at step {step} (largest: buffer {largest.id!r} of "
            f"{largest.size} bytes): an arena of 2**63 bytes or more cannot be represented"
        )
