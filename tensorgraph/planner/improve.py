"""Local repair of a packing around its top: large-neighbourhood searches that scale to
thousands of buffers, because each step re-places a few dozen buffers, not all of them.
`repair` tries fixed neighbourhoods until each culprit has failed at its widest; `shake`
then draws random ones (seeded) while its work lasts.

A step takes a *culprit* (a buffer that ends at the arena top) and a *band*: the
culprit and every buffer that overlaps it in time and ends above `top - band`. It lifts
them out and places them again, in a few fixed orders (culprit first, then largest
first; largest first; earliest start first), each at the lowest aligned offset where it
misses every buffer still placed that it overlaps in time. The first order whose
result is better is kept: better means a lower arena, or the same arena with fewer
buffers ending at it (so a top held up by several buffers comes down one at a time).
A step that finds nothing better doubles its band (up to the arena), then moves on to
the next culprit; the search ends when every culprit fails at the widest band, or the
work runs out.

Why live buffers never overlap: the buffers that stay never move, and each re-placed
buffer is put where it misses every placed buffer it overlaps in time (those that stay
and those re-placed before it), so every conflicting pair is checked when its second
buffer is placed, as in `assign.place_in_order`. A step that is not kept restores the
old offsets. Deterministic: work is counted, not timed, and `shake`'s random choices come
from a seeded generator.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from tensorgraph.planner.buffers import INT64_END, Assignment, Buffer

# Work units (fixed counts of operations, 0.6-1 us each on a quiet 2-core machine and
# up to 5.3 us measured under load; see planner.search and benches/README.md):
PLACE_UNITS = 25  # per buffer re-placed (a dozen numpy calls), plus a unit per SCAN
SCAN = 128  # buffers of its vectorised neighbour scan (those around the band);
STEP_UNITS = 40  # per step (finding the band), plus three units per SCAN buffers
SHUFFLES = 2  # seeded random orders tried per step, after the three fixed ones
RINGS = 2  # times a stuck culprit's time window widens to its neighbours' lifetimes
BAND_MIN = 20  # `shake`: a band move lifts the buffers above top - top * f, f >= 1/BAND_MIN
SWAPS = 10  # its largest-first orders get one random swap per SWAPS buffers
NUDGE = 3  # its by-offset orders get one or two swaps of buffers up to NUDGE places apart


def intervals(buffers: Sequence[Buffer]) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(size, start, end) of `buffers` as int64 arrays in their order, or None when sums
    of their sizes could overflow int64 (the vectorised searches then leave the packing
    as it is)."""
    n = len(buffers)
    size = np.fromiter((b.size for b in buffers), np.int64, n)
    if 2 * sum(b.size for b in buffers) >= INT64_END:
        return None
    start = np.fromiter((b.start for b in buffers), np.int64, n)
    end = np.fromiter((b.end for b in buffers), np.int64, n)
    return size, start, end


def packing_columns(buffers: Sequence[Buffer], plan: Assignment) -> tuple[np.ndarray, ...] | None:
    """`intervals(buffers)` and the plan's offsets (int64, same order), or None when
    `intervals` is, or when `plan`'s arena is not the top of these buffers' packing."""
    columns = intervals(buffers)
    if columns is None:
        return None
    size = columns[0]
    offset = np.fromiter((plan.offsets[b.id] for b in buffers), np.int64, len(buffers))
    if int((offset + size).max()) != plan.arena_size:
        return None
    return (*columns, offset)


def repair(
    buffers: Sequence[Buffer],
    plan: Assignment,
    alignment: int,
    afford: Callable[[int], bool],
    charge: Callable[[int], None],
    say: Callable[[str], None] | None = None,
) -> Assignment:
    """A packing no worse than `plan` (a valid aligned packing of `buffers`), found by
    repair steps while `afford(units)` allows; each step's cost goes to `charge`.
    Returns `plan` itself when no step helped."""
    n = len(buffers)
    if n < 2:
        return plan
    columns = packing_columns(buffers, plan)
    if columns is None:
        return plan
    size, start, end, offset = columns
    orders = (_culprit_first, _largest_first, _earliest_first)
    rng = np.random.default_rng(0)  # seeded: the shuffled orders repeat run to run
    improved = False
    tried: set[int] = set()
    step_units = STEP_UNITS + 3 * n // SCAN
    while True:
        high = offset + size
        top = int(high.max())
        culprits = [int(c) for c in np.flatnonzero(high == top) if int(c) not in tried]
        if not culprits:
            break
        c = culprits[0]
        band, ring = int(size[c]), 0
        low, up = int(start[c]), int(end[c])  # the time window of the neighbourhood
        kept = False
        while not kept:
            if not afford(step_units):
                return _result(buffers, offset, plan, improved)
            charge(step_units)
            chosen = np.flatnonzero((start < up) & (low < end) & (high > top - band))
            sequences = [order(chosen, c, size, start) for order in orders]
            sequences += [rng.permutation(chosen).tolist() for _ in range(SHUFFLES)]
            # Every buffer that can conflict with a chosen one: it overlaps their span.
            around = np.flatnonzero((start < end[chosen].max()) & (start[chosen].min() < end))
            for sequence in sequences:
                cost = len(sequence) * (PLACE_UNITS + len(around) // SCAN)
                if not afford(cost):
                    return _result(buffers, offset, plan, improved)
                charge(cost)
                saved = offset[chosen].copy()
                _replace(sequence, around, offset, size, start, end, alignment)
                new_high = offset + size
                new_top = int(new_high.max())
                count = int((new_high == new_top).sum())
                if new_top < top or (new_top == top and count < int((high == top).sum())):
                    kept = improved = True
                    if new_top < top:
                        tried.clear()
                        if say is not None:
                            say(f"repair: arena {new_top:,} B")
                    break
                offset[chosen] = saved
            if kept:
                break
            if band < top:
                band = min(2 * band, top)
            elif ring < RINGS:  # widen the window to the lifetimes of the whole band
                ring, band = ring + 1, int(size[c])
                low, up = int(start[chosen].min()), int(end[chosen].max())
            else:
                tried.add(c)
                break
    return _result(buffers, offset, plan, improved)


def shake(
    buffers: Sequence[Buffer],
    plan: Assignment,
    alignment: int,
    afford: Callable[[int], bool],
    charge: Callable[[int], None],
    say: Callable[[str], None] | None = None,
) -> Assignment:
    """A packing no worse than `plan` (a valid aligned packing of `buffers`), found by
    random repair steps (seeded: the same arguments give the same packing) while
    `afford(units)` allows; each step's cost goes to `charge`. Returns `plan` itself
    unless the arena came down.

    Each step takes a culprit at random among the buffers that end at the top, and
    makes one of three moves, a third of the time each:

    - band: lift every buffer that overlaps the culprit's lifetime (widened on each side
      by up to a mean lifetime) and ends above `top - f * top` (f drawn from
      [1/BAND_MIN, 1)), and place them again, largest first with a few random swaps or
      in a random order;
    - nudge: the same band, placed again by offset with one or two near pairs swapped;
    - drop: put the culprit at a lower offset where it rests on a neighbour in time (or
      at 0), lift the neighbours whose bytes it now meets, and place them again, largest
      first or in a random order (an ejection: the move `repair` cannot make, since it
      never moves a buffer that stays below the band).

    A step is kept when the arena is no higher and no more buffers end at its top (so
    the search walks across plateaus of equal arenas), and undone otherwise. Why live
    buffers never overlap: as in `repair`, every re-placed buffer misses every placed
    buffer it overlaps in time, and a dropped culprit misses every buffer that stays
    (those it would meet are lifted)."""
    n = len(buffers)
    if n < 2:
        return plan
    columns = packing_columns(buffers, plan)
    if columns is None:
        return plan
    size, start, end, offset = columns
    rng = np.random.default_rng(0)
    span = max(1, int((end - start).sum()) // n)  # the mean lifetime, in steps
    step_units = STEP_UNITS + 3 * n // SCAN
    high = offset + size
    top, count = int(high.max()), int((high == high.max()).sum())
    first = top
    while afford(step_units):
        charge(step_units)
        culprits = np.flatnonzero(high == top)
        c = int(culprits[rng.integers(len(culprits))])
        to, move = None, int(rng.integers(3))
        if move == 0:
            chosen, to, sequence = _drop(c, rng, offset, size, start, end, top, alignment)
        if to is None:  # a band move (also when the culprit has nowhere to drop to)
            low = int(start[c]) - int(rng.integers(span + 1))
            up = int(end[c]) + int(rng.integers(span + 1))
            floor = top - max(1, int(top * rng.uniform(1 / BAND_MIN, 1.0)))  # c is above
            chosen = np.flatnonzero((start < up) & (low < end) & (high > floor))
            sequence = _nudged(chosen, rng, offset) if move == 2 else _shuffled(chosen, rng, size)
        saved = offset[chosen].copy()
        if to is not None:
            offset[c] = to
        around = np.flatnonzero((start < end[chosen].max()) & (start[chosen].min() < end))
        cost = len(sequence) * (PLACE_UNITS + len(around) // SCAN)
        if not afford(cost):
            offset[chosen] = saved
            break
        charge(cost)
        _replace(sequence, around, offset, size, start, end, alignment)
        new_high = offset + size
        new_top = int(new_high.max())
        new_count = int((new_high == new_top).sum())
        if new_top < top or (new_top == top and new_count <= count):
            if new_top < top and say is not None:
                say(f"shake: arena {new_top:,} B")
            high, top, count = new_high, new_top, new_count
        else:
            offset[chosen] = saved
    return _result(buffers, offset, plan, top < first)


def _shuffled(chosen: np.ndarray, rng: np.random.Generator, size: np.ndarray) -> list:
    """`chosen` largest first with one random swap per SWAPS buffers, or in a random
    order (half the time each)."""
    if len(chosen) < 2 or rng.random() < 0.5:
        return rng.permutation(chosen).tolist()
    sequence = chosen[np.lexsort((chosen, -size[chosen]))]
    for _ in range(max(1, len(sequence) // SWAPS)):
        i, j = rng.integers(len(sequence), size=2)
        sequence[[i, j]] = sequence[[j, i]]
    return sequence.tolist()


def _nudged(chosen: np.ndarray, rng: np.random.Generator, offset: np.ndarray) -> list:
    """`chosen` by offset (the order that places them again where they are, or lower)
    with one or two pairs up to NUDGE places apart swapped: a small step away from the
    packing, where a shuffle would lose its structure (skyline packings come back to
    within a fraction of a percent this way, and no shuffle does)."""
    sequence = chosen[np.lexsort((chosen, offset[chosen]))]
    for _ in range(int(rng.integers(1, 3))):
        i = int(rng.integers(len(sequence)))
        j = min(len(sequence) - 1, i + int(rng.integers(1, NUDGE + 1)))
        sequence[[i, j]] = sequence[[j, i]]
    return sequence.tolist()


def _drop(
    c: int,
    rng: np.random.Generator,
    offset: np.ndarray,
    size: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    top: int,
    alignment: int,
) -> tuple[np.ndarray, int | None, list]:
    """A random aligned offset for `c` where it rests on a neighbour in time (or at 0)
    and ends below `top` (None when there is none), the buffers whose offsets the drop
    may change (`c` and the neighbours whose bytes it would meet there, sorted), and the
    order to place those neighbours in again. Moves nothing."""
    near = np.flatnonzero((start < end[c]) & (start[c] < end))
    near = near[near != c]
    rests = -(-(offset[near] + size[near]) // alignment) * alignment
    places = np.unique(np.concatenate([[0], rests]))
    places = places[places + size[c] < top]
    if not len(places):
        return near, None, []
    to = int(places[rng.integers(len(places))])
    met = near[(offset[near] < to + size[c]) & (to < offset[near] + size[near])]
    chosen = np.sort(np.concatenate([[c], met]))
    return chosen, to, _shuffled(met, rng, size) if len(met) else []


def _result(
    buffers: Sequence[Buffer], offset: np.ndarray, plan: Assignment, improved: bool
) -> Assignment:
    if not improved:
        return plan
    offsets = {b.id: int(offset[i]) for i, b in enumerate(buffers)}
    top = max(int(offset[i]) + b.size for i, b in enumerate(buffers))
    return Assignment(offsets, top)


def _culprit_first(chosen: np.ndarray, c: int, size: np.ndarray, start: np.ndarray) -> list:
    rest = [int(i) for i in chosen[np.lexsort((chosen, -size[chosen]))] if i != c]
    return [c, *rest]


def _largest_first(chosen: np.ndarray, c: int, size: np.ndarray, start: np.ndarray) -> list:
    return chosen[np.lexsort((chosen, -size[chosen]))].tolist()


def _earliest_first(chosen: np.ndarray, c: int, size: np.ndarray, start: np.ndarray) -> list:
    return chosen[np.lexsort((chosen, -size[chosen], start[chosen]))].tolist()


def _replace(
    sequence: list,
    around: np.ndarray,
    offset: np.ndarray,
    size: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    alignment: int,
) -> None:
    """Lift `sequence` out of the packing, then place each, in order, at the lowest
    aligned offset where it misses every placed buffer it overlaps in time (all of
    them are in `around`, which holds the sequence too)."""
    placed = np.ones(len(around), dtype=bool)
    placed[np.searchsorted(around, sequence)] = False
    near_start, near_end, near_size = start[around], end[around], size[around]
    for i in sequence:
        mask = placed & (near_start < end[i]) & (start[i] < near_end)
        near = around[mask]
        lows = offset[near]
        offset[i] = lowest_gap(lows, lows + near_size[mask], int(size[i]), alignment)
        placed[np.searchsorted(around, i)] = True


def lowest_gap(lows: np.ndarray, highs: np.ndarray, size: int, step: int) -> int:
    """The lowest multiple of `step` at which `size` bytes miss every span
    `[lows[k], highs[k])`: scanning spans by low end, the candidate is 0 or just above
    every span seen so far, and the first that ends before the next span's low fits."""
    if not len(lows):
        return 0
    by_low = np.argsort(lows, kind="stable")
    lows, highs = lows[by_low], highs[by_low]
    reached = -(-np.maximum.accumulate(highs) // step) * step
    candidates = np.concatenate([[0], reached])
    next_lows = np.concatenate([lows, [np.iinfo(np.int64).max]])
    return int(candidates[np.argmax(next_lows >= candidates + size)])
