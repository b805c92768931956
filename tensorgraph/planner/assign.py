"""Offset algorithms: give every buffer a byte offset so live buffers never share bytes.

Every algorithm but `naive` places buffers one at a time, in an order of its own, at
the lowest aligned offset where the new buffer shares no byte with any already placed
buffer whose lifetime overlaps its own. Why live buffers never overlap: a placed buffer
never moves, and the gap test sees every placed buffer that conflicts in time with the
new one (the interval index returns exactly those), so each conflicting pair is
checked once, when its second buffer is placed. Zero-size buffers own no byte: they
sit at offset 0 and are never indexed.

- `naive`: no reuse, buffers stacked in input order (arena = sum of aligned sizes,
  less the padding after the last one);
- `greedy_size`: largest first, ties to the longer lifetime, then the earlier start,
  then id order (TensorFlow Lite / ExecuTorch's greedy);
- `greedy_breadth`: by birth step, largest first within a step;
- `best`: the three above, more orderings while time remains, an improvement search
  that moves the buffers touching the arena top earlier in the order, then, above the
  lower bound, the exact search of `planner.search`; never worse than the three, and it
  stops as soon as a plan reaches the lower bound.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Hashable, Sequence

import numpy as np
from attrs import frozen

from tensorgraph.errors import PlanError
from tensorgraph.planner.buffers import Assignment, Buffer, align_up, lower_bound
from tensorgraph.planner.interval_index import IntervalIndex, Lifetimes

NUMPY_GAP_SEARCH = 48  # neighbours above which the gap search is vectorised (measured)
STALL = 8  # rounds without progress before a restart from a perturbed best order
IMPROVE_SHARE = 0.1  # of best's remaining budget for reordering; exact search gets the rest


def place_in_order(
    buffers: Sequence[Buffer],
    order: Sequence[int],
    alignment: int,
    lifetimes: Lifetimes | None = None,
) -> Assignment:
    """Place `buffers[i]` for i in `order` (a permutation of positions), each at the lowest
    multiple of `alignment` where it overlaps no placed buffer it conflicts with in time.
    `lifetimes` (`Lifetimes.of(buffers)`) may be passed to share it between calls."""
    index = IntervalIndex(Lifetimes.of(buffers) if lifetimes is None else lifetimes)
    spans = _Spans([0] * len(buffers), [0] * len(buffers), np.zeros((2, len(buffers)), np.int64))
    top = 0
    for i in order:
        size = buffers[i].size
        if not size:
            continue
        near = index.overlapping(i)
        offset = _lowest_fit(near, spans, size, alignment) if len(near) else 0
        spans.low[i], spans.high[i] = offset, offset + size
        spans.arrays[:, i] = offset, offset + size
        top = max(top, offset + size)
        index.add(i)
    return Assignment({b.id: spans.low[i] for i, b in enumerate(buffers)}, top)


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
        low, high = spans.low, spans.high
        candidate = 0
        for start, end in sorted([(low[j], high[j]) for j in near]):
            if start >= candidate + size:
                break
            if end > candidate:
                candidate = -(-end // step) * step
        return candidate
    lows, highs = spans.arrays[:, near]
    by_low = np.argsort(lows, kind="stable")
    lows, highs = lows[by_low], highs[by_low]
    reached = -(-np.maximum.accumulate(highs) // step) * step
    candidates = np.concatenate([[0], reached])
    next_lows = np.concatenate([lows, [np.iinfo(np.int64).max]])
    return int(candidates[np.argmax(next_lows >= candidates + size)])


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
    """Largest size * duration first (bytes held longest)."""
    return _sorted(-c.size * c.duration, -c.size, c.rank)


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
    """No reuse: each buffer with bytes right after the previous one (aligned)."""
    offsets: dict[Hashable, int] = {}
    cursor = top = 0
    for b in buffers:
        offsets[b.id] = cursor if b.size else 0
        if b.size:
            top = cursor + b.size
            cursor = align_up(top, alignment)
    return Assignment(offsets, top)


def greedy_size(buffers: Sequence[Buffer], alignment: int) -> Assignment:
    """Largest first at the lowest fitting offset (see `by_size` for ties)."""
    return place_in_order(buffers, by_size(Columns.of(buffers)), alignment)


def greedy_breadth(buffers: Sequence[Buffer], alignment: int) -> Assignment:
    """By birth step, largest first within a step, at the lowest fitting offset."""
    return place_in_order(buffers, by_breadth(Columns.of(buffers)), alignment)


def arena_bound(buffers: Sequence[Buffer], alignment: int) -> int:
    """A lower bound on `arena_size` (the unaligned top) of any aligned assignment.

    At the busiest step every live buffer but the topmost spans at least its aligned
    size, and the topmost's unused slack is below `alignment`, so the aligned bound less
    `alignment - 1` holds; so does the plain bound."""
    if alignment == 1:
        return lower_bound(buffers, 1)
    return max(lower_bound(buffers, 1), lower_bound(buffers, alignment) - alignment + 1)


def default_budget(count: int) -> float:
    """Seconds `best` may spend by default beyond its baselines (it stops at once when it
    reaches the bound): 0.1 s plus 40 us a buffer, at most 0.5 s."""
    return min(0.5, 0.1 + count * 4e-5)


def best(buffers: Sequence[Buffer], alignment: int, time_budget: float | None = None) -> Assignment:
    """The smallest plan found within `time_budget` seconds (see the module docstring).

    Steps: 1. naive, greedy_size and greedy_breadth always run (so `best` is never worse
    than them, whatever the budget); 2. more orderings while time remains; 3. iterated
    reordering for a share of the time left; 4. `search.minimize_arena` until the
    deadline. Any step that reaches the lower bound ends the run."""
    began = time.perf_counter()
    deadline = began + (default_budget(len(buffers)) if time_budget is None else time_budget)
    bound = arena_bound(buffers, alignment)
    stacked = naive(buffers, alignment)
    if stacked.arena_size <= bound:
        return stacked
    lifetimes, columns = Lifetimes.of(buffers), Columns.of(buffers)
    ordered: Assignment | None = None
    for make in BASELINES + MORE_ORDERS:
        if make not in BASELINES and time.perf_counter() >= deadline:
            break
        order = make(columns)
        plan = place_in_order(buffers, order, alignment, lifetimes)
        if ordered is None or plan.arena_size < ordered.arena_size:
            ordered, best_order = plan, order
            if plan.arena_size <= bound:
                return plan
    now = time.perf_counter()
    if now < deadline:
        share = now + IMPROVE_SHARE * (deadline - now)
        ordered = _improve(buffers, best_order, ordered, alignment, bound, lifetimes, share)
    incumbent = ordered if ordered.arena_size <= stacked.arena_size else stacked
    if incumbent.arena_size > bound and time.perf_counter() < deadline:
        from tensorgraph.planner.search import minimize_arena

        incumbent = minimize_arena(buffers, alignment, incumbent, deadline)
    return incumbent


def _improve(
    buffers: Sequence[Buffer],
    order: list[int],
    incumbent: Assignment,
    alignment: int,
    bound: int,
    lifetimes: Lifetimes,
    deadline: float,
) -> Assignment:
    """Iterated reordering with restarts. The buffers that end at the arena top move to the
    front of the order, so they are placed before the buffers that pushed them up; after
    `STALL` rounds without a better plan the best order so far is perturbed (a few
    buffers moved to random places, seeded: runs are reproducible) and the reordering
    continues from there. Returns the best plan seen (`incumbent` if none is better)."""
    rng = random.Random(0)
    current, stall = list(order), 0
    while time.perf_counter() < deadline and incumbent.arena_size > bound:
        placed = place_in_order(buffers, current, alignment, lifetimes)
        top = placed.arena_size
        if top < incumbent.arena_size:
            incumbent, order, stall = placed, list(current), 0
        else:
            stall += 1
        if stall >= STALL:
            current, stall = list(order), 0
            for _ in range(1 + len(current) // 50):
                item = current.pop(rng.randrange(len(current)))
                current.insert(rng.randrange(len(current) + 1), item)
            continue
        culprits = [
            i for i, b in enumerate(buffers) if b.size and placed.offsets[b.id] + b.size == top
        ]
        chosen = set(culprits)
        current = culprits + [i for i in current if i not in chosen]
    return incumbent


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
    time_budget: float | None = None,
) -> Assignment:
    """Offsets for `buffers` by `algorithm` (a name in ALGORITHMS), each a multiple of
    `alignment` bytes (zero-size buffers at 0); `arena_size` is the highest
    `offset + size` (0 without buffers), not rounded up. `time_budget` (seconds, None for
    `default_budget`) bounds `best` beyond its three baselines and is ignored by the
    others. PlanError on an unknown algorithm, a bad alignment or budget, or duplicate ids."""
    if algorithm not in ALGORITHMS:
        raise PlanError(f"unknown algorithm {algorithm!r}; known: {', '.join(ALGORITHMS)}")
    if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment < 1:
        raise PlanError(f"alignment must be a positive integer but got {alignment!r}")
    if time_budget is not None and not time_budget >= 0:
        raise PlanError(f"time_budget must be None or >= 0 seconds but got {time_budget!r}")
    buffers = list(buffers)
    seen: set[Hashable] = set()
    for b in buffers:
        if b.id in seen:
            raise PlanError(f"buffer ids must be unique, but {b.id!r} appears more than once")
        seen.add(b.id)
    if algorithm == "best":
        return best(buffers, alignment, time_budget)
    return ALGORITHMS[algorithm](buffers, alignment)
