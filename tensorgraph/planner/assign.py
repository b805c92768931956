"""Offset algorithms: give every buffer a byte offset so live buffers never share bytes.

All algorithms place buffers one at a time at the lowest aligned offset where the new
buffer does not overlap, in bytes, any already placed buffer whose lifetime overlaps
its own. Why that is safe: a placed buffer is never moved, and the gap test compares
the new buffer against every placed buffer it conflicts with in time (the interval index
returns all of them, and possibly more, which are filtered exactly), so no two
conflicting buffers ever share a byte. They differ only in the order of placement:

- `naive`: no reuse, buffers stacked in id order (arena = sum of aligned sizes);
- `greedy_size`: largest first (TensorFlow Lite / ExecuTorch's greedy);
- `greedy_breadth`: by birth step, largest first within a step;
- `best`: several orderings, an improvement search that moves the buffers touching the
  arena top earlier in the order, and, when time remains above the lower bound, the
  exact search of `planner.search`; never worse than any of the others.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Hashable, Sequence

from tensorgraph.errors import PlanError
from tensorgraph.planner.buffers import Assignment, Buffer, align_up, lower_bound
from tensorgraph.planner.interval_index import IntervalIndex

Order = Callable[[Sequence[Buffer]], list[int]]


def place_in_order(buffers: Sequence[Buffer], order: Sequence[int], alignment: int) -> Assignment:
    """Place `buffers[i]` for i in `order`, each at its lowest aligned fitting offset."""
    index = IntervalIndex(buffers)
    offsets: dict[Hashable, int] = {}
    placed_offset = [0] * len(buffers)
    top = 0
    for i in order:
        buffer = buffers[i]
        candidate = 0
        if buffer.size:
            spans = sorted(
                (placed_offset[j], placed_offset[j] + buffers[j].size)
                for j in index.overlapping(i)
                if buffers[j].size
            )
            for low, high in spans:
                if low >= candidate + buffer.size:
                    break
                if high > candidate:
                    candidate = align_up(high, alignment)
        index.add(i)
        placed_offset[i] = candidate
        offsets[buffer.id] = candidate
        top = max(top, candidate + buffer.size)
    return Assignment(offsets, top)


def _by_size(buffers: Sequence[Buffer]) -> list[int]:
    return sorted(
        range(len(buffers)),
        key=lambda i: (-buffers[i].size, -(buffers[i].end - buffers[i].start), buffers[i].start, i),
    )


def _by_breadth(buffers: Sequence[Buffer]) -> list[int]:
    return sorted(range(len(buffers)), key=lambda i: (buffers[i].start, -buffers[i].size, i))


def _by_area(buffers: Sequence[Buffer]) -> list[int]:
    return sorted(
        range(len(buffers)),
        key=lambda i: (-buffers[i].size * (buffers[i].end - buffers[i].start), -buffers[i].size, i),
    )


def _by_duration(buffers: Sequence[Buffer]) -> list[int]:
    return sorted(
        range(len(buffers)),
        key=lambda i: (-(buffers[i].end - buffers[i].start), -buffers[i].size, i),
    )


def naive(buffers: Sequence[Buffer], alignment: int) -> Assignment:
    """No reuse: each buffer after the previous one."""
    offsets, cursor = {}, 0
    top = 0
    for b in buffers:
        offsets[b.id] = cursor
        top = cursor + b.size if b.size else top
        cursor = align_up(cursor + b.size, alignment)
    return Assignment(offsets, max(top, 0))


def greedy_size(buffers: Sequence[Buffer], alignment: int) -> Assignment:
    return place_in_order(buffers, _by_size(buffers), alignment)


def greedy_breadth(buffers: Sequence[Buffer], alignment: int) -> Assignment:
    return place_in_order(buffers, _by_breadth(buffers), alignment)


def arena_bound(buffers: Sequence[Buffer], alignment: int) -> int:
    """A lower bound on `arena_size` (the unaligned top) of any aligned assignment.

    At the busiest step every live buffer but the topmost spans at least its aligned
    size, and the topmost's unused slack is below `alignment`, so the aligned bound less
    `alignment - 1` holds; so does the plain bound."""
    if alignment == 1:
        return lower_bound(buffers, 1)
    return max(lower_bound(buffers, 1), lower_bound(buffers, alignment) - alignment + 1)


def default_budget(count: int) -> float:
    """Seconds `best` may spend by default (it stops at once when it reaches the bound):
    0.1 s plus 40 us a buffer, at most 0.5 s, so a 10k-buffer graph stays under a second."""
    return min(0.5, 0.1 + count * 4e-5)


def best(buffers: Sequence[Buffer], alignment: int, time_budget: float | None = None) -> Assignment:
    """The strongest plan found within `time_budget` seconds (see module docstring)."""
    began = time.perf_counter()
    deadline = began + (default_budget(len(buffers)) if time_budget is None else time_budget)
    bound = arena_bound(buffers, alignment)
    candidates = [naive(buffers, alignment)]
    orders: list[list[int]] = []
    for make in (_by_size, _by_breadth, _by_area, _by_duration):
        order = make(buffers)
        orders.append(order)
        candidates.append(place_in_order(buffers, order, alignment))
        if min(c.arena_size for c in candidates) <= bound:
            break
    incumbent = min(candidates, key=lambda a: a.arena_size)
    best_order = orders[min(range(len(orders)), key=lambda k: candidates[k + 1].arena_size)]
    if incumbent.arena_size > bound:
        share = began + IMPROVE_SHARE * (deadline - began)
        incumbent, best_order = _improve(buffers, best_order, incumbent, alignment, bound, share)
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
    deadline: float,
) -> tuple[Assignment, list[int]]:
    """Iterated reordering with restarts. The buffers that end at the arena top move to the
    front of the order, so they are placed before the buffers that pushed them up; after
    `STALL` rounds without a better plan the best order so far is perturbed (a few
    buffers moved to random earlier places, seeded: runs are reproducible) and the
    reordering continues from there. Keeps the best plan seen."""
    rng = random.Random(0)
    position = {b.id: i for i, b in enumerate(buffers)}
    current, stall = list(order), 0
    while time.perf_counter() < deadline and incumbent.arena_size > bound:
        placed = place_in_order(buffers, current, alignment)
        top = placed.arena_size
        culprits = [
            position[b.id] for b in buffers if b.size and placed.offsets[b.id] + b.size == top
        ]
        if placed.arena_size < incumbent.arena_size:
            incumbent, order, stall = placed, list(current), 0
        else:
            stall += 1
        if stall >= STALL:
            current, stall = list(order), 0
            for _ in range(1 + len(current) // 50):
                item = current.pop(rng.randrange(len(current)))
                current.insert(rng.randrange(len(current) + 1), item)
            continue
        culprit_set = set(culprits)
        current = culprits + [i for i in current if i not in culprit_set]
    return incumbent, order


STALL = 8  # rounds without progress before a restart from a perturbed best order
IMPROVE_SHARE = 0.1  # of best's budget for iterated reordering; the exact search gets the rest


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
    `alignment` bytes; `arena_size` is the highest `offset + size`. `time_budget`
    (seconds) bounds `best`. PlanError on an unknown algorithm, a bad alignment or
    duplicate buffer ids."""
    if algorithm not in ALGORITHMS:
        raise PlanError(f"unknown algorithm {algorithm!r}; known: {', '.join(ALGORITHMS)}")
    if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment < 1:
        raise PlanError(f"alignment must be a positive integer but got {alignment!r}")
    buffers = list(buffers)
    if len({b.id for b in buffers}) != len(buffers):
        raise PlanError("buffer ids must be unique")
    if algorithm == "best":
        return best(buffers, alignment, time_budget)
    return ALGORITHMS[algorithm](buffers, alignment)
