"""Tightening a recompute choice at its peak: the heuristic's move between "one copy"
and "a copy at every read" (planner/remat_greedy.py calls it).

A root copied once lives from its first backward read to its last; copied at every
read it costs its FLOPs once per read. Between the two, a copy split in two (a second
copy emitted at a later read, the first freed after its last read before it) is what a
budget often needs: ResNet's stem convolution output is read by the first layer's
recomputed activations before the max pool's backward and by the batch norm's backward
after it; one copy holds it across the max pool's backward, two copies do not, at one
more convolution.

`tighten` starts from a point (a recompute set and its extra copies) and repeats, at
the model's peak sub-step, the move that removes the most overflow (bytes above the
budget, summed over every sub-step of `RematModel.profile`) per FLOP it adds: keep a
kept candidate no longer (recompute it, one copy), or split the copy of a recomputed
root live there at its first read after the peak's step, alone or with its recomputed
chain (the recomputed roots its copy reads, directly or through each other: split
alone, a relu copy's new copy reads the batch norm's and the convolution's first ones,
which then live across the peak in its stead). Once the peak fits, every
split and every recomputed root is dropped again, the most expensive first, where the
peak still fits without it; then exchanges: a recomputed root whose copies force
others' (dropping it saves more than its own FLOPs) is kept, the point tightened and
dropped again, and taken where that costs fewer FLOPs. ResNet-18's max pool output,
recomputed for the first layer's backward, needs the stem convolution's copy there
(19.3 MFLOPs, held to the stem's backward or copied once more); kept, it costs 64 KiB
that a first-layer convolution's recompute (2.4 MFLOPs) pays for: at half the
keep-everything arena, 69.4M -> 52.2M FLOPs in the model of recompute-all's order
(remat_levels). The budget is bytes, or bytes per step (an allowance: each sub-step is
held to its step's; the peak is then the sub-step furthest above its own).
Invariants: a point it answers fits the budget in the model's profile (tested by
evaluating it); it counts model evaluations against a work budget, never time
(deterministic); of equal moves the earlier candidate's wins.

`least_by_step` gives the least the model knows at each step; the level search
(planner/remat_levels.py) holds every step to a level, or to that least where it is
more: the budget of the points a level alone cannot describe. The
model counts on its own order, and where no choice lowers a step below the level in the
model (every candidate recomputed, a copy at each read), the planner's schedule, not
the choice, decides what that step holds: ResNet-18's stem, whose batch norm backward
the model puts at 1,180,160 B under any choice, placed at 983,104 B once recomputed
entirely. A single budget there admits no point below the model's least memory, while
the steps the choice does move (the last layers' weight updates beside the kept
activations) are what stands between a budget and a cheap point.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from attrs import frozen

from tensorgraph.planner.remat import RematModel

Splits = Mapping[int, tuple[int, ...]]


@frozen
class Point:
    """A recompute choice: `recompute` (roots recomputed), `splits` (extra copy steps
    per root, `RematModel.emissions`' splits), the copies they give (`emit`), their
    FLOPs (`flops`) and the model's profile (`profile`, bytes per sub-step)."""

    recompute: frozenset[int]
    splits: Splits
    emit: Mapping[int, tuple[int, ...]]
    flops: int
    profile: np.ndarray

    @property
    def peak(self) -> int:
        return int(self.profile.max(initial=0))


class _Search:
    """Model evaluations counted against `work` (`spent`), under `allowance`: bytes per
    step of the model."""

    def __init__(self, model: RematModel, allowance: np.ndarray, work: int) -> None:
        self.model, self.allowance, self.work, self.spent = model, allowance, work, 0

    def point(self, recompute: frozenset[int], splits: Splits) -> Point:
        self.spent += 1
        emit = self.model.emissions(recompute, frozenset(), splits)
        profile = self.model.profile(recompute, emit)
        return Point(recompute, splits, emit, self.model.recompute_cost(recompute, emit), profile)

    def above(self, point: Point) -> np.ndarray:
        """Bytes above the allowance at each of `point`'s sub-steps (negative: room)."""
        return above(self.model, self.allowance, point.profile, point.emit)

    def fits(self, point: Point) -> bool:
        return bool((self.above(point) <= 0).all())

    def overflow(self, point: Point) -> int:
        return int(np.maximum(self.above(point), 0).sum())

    def moves(self, point: Point) -> list[tuple[frozenset[int], Splits]]:
        """The moves at `point`'s peak sub-step (see the module docstring)."""
        model = self.model
        step = int(model.substep_steps(point.emit)[int(self.above(point).argmax())])
        out: list[tuple[frozenset[int], Splits]] = []
        for u in model.candidates:
            if u not in point.recompute:
                # Kept, it lives through its last read, a copy reading it included.
                end = max((model.baseline_end[u], *model.reads(u, point.emit)))
                if model.born[u] <= step <= end:
                    out.append((point.recompute | {u}, point.splits))
                continue
            copies = point.emit.get(u, ())
            if not any(e <= step for e in copies):
                continue  # no copy of it is live at the peak yet
            following = [e for e in copies if e > step]
            stop = following[0] if following else model.steps
            later = [r for r in model.reads(u, point.emit) if step < r < stop]
            if later:
                splits = dict(point.splits)
                splits[u] = tuple(sorted({*splits.get(u, ()), later[0]}))
                out.append((point.recompute, splits))
                chain = self._ancestors(u, point.recompute)
                if chain:  # the copies it reads split there too, or they live across
                    splits = dict(splits)
                    for w in chain:
                        splits[w] = tuple(sorted({*splits.get(w, ()), later[0]}))
                    out.append((point.recompute, splits))
        return out

    def _ancestors(self, u: int, recompute: frozenset[int]) -> list[int]:
        """The recomputed roots `u`'s copy reads, directly or through recomputed roots
        (its recomputed chain), in program order."""
        seen: set[int] = set()
        stack = [u]
        while stack:
            for w in self.model.inputs[stack.pop()]:
                if w in recompute and w not in seen:
                    seen.add(w)
                    stack.append(w)
        return sorted(seen, key=self.model.born.__getitem__)

    def drop(self, point: Point) -> Point:
        """`point` without each split and each recomputed root, the most expensive
        first, whose removal keeps the peak within the budget."""
        model = self.model

        def price(v: int) -> tuple[int, int]:
            return -model.cost[v] * len(point.emit.get(v, ())), v

        for u in sorted(point.recompute, key=price):
            if self.spent >= self.work:
                break
            for step in reversed(point.splits.get(u, ())):
                if self.spent >= self.work:
                    return point
                rest = tuple(s for s in point.splits[u] if s != step)
                trial = self.point(point.recompute, {**point.splits, u: rest})
                if self.fits(trial):
                    point = trial
            splits = {k: v for k, v in point.splits.items() if k != u}
            trial = self.point(point.recompute - {u}, splits)
            if self.fits(trial):
                point = trial
        return point

    def tightened(self, point: Point) -> Point | None:
        """From `point`, the moves of the module docstring until it fits (None where no
        move removes overflow, or the work runs out first)."""
        while not self.fits(point) and self.spent < self.work:
            over = self.overflow(point)
            best: tuple[float, Point] | None = None  # the earlier of equal moves
            for r, splits in self.moves(point):
                trial = self.point(r, splits)
                gained = over - self.overflow(trial)
                if gained > 0:
                    score = (trial.flops - point.flops) / gained
                    if best is None or score < best[0]:
                        best = (score, trial)
            if best is None:
                return None
            point = best[1]
        return point if self.fits(point) else None

    def exchanged(self, point: Point) -> Point:
        """`point` improved by exchanges: keep a recomputed root whose copies force
        others' (dropping it saves more FLOPs than its own copies: a pooled value whose
        recompute needs a convolution's copy early), tighten again and drop, taken
        where that fits at fewer FLOPs; the largest saving first, until none improves."""
        model = self.model
        improved = True
        while improved and self.spent < self.work:
            improved = False
            ranked = []
            for u in sorted(point.recompute):
                splits = {k: v for k, v in point.splits.items() if k != u}
                rest = point.recompute - {u}
                saving = point.flops - model.recompute_cost(
                    rest, model.emissions(rest, frozenset(), splits)
                )
                own = model.cost[u] * len(point.emit.get(u, ()))
                if saving > own:
                    ranked.append((-saving, u, rest, splits))
            for _, _, rest, splits in sorted(ranked, key=lambda r: r[:2]):
                if self.spent >= self.work:
                    break
                trial = self.tightened(self.point(rest, splits))
                if trial is not None:
                    trial = self.drop(trial)
                    if trial.flops < point.flops:
                        point, improved = trial, True
                        break
        return point


def tighten(
    model: RematModel, budget: int | np.ndarray, recompute: frozenset[int], work: int
) -> tuple[Point | None, int]:
    """The point `tighten` reaches from recomputing `recompute` (one copy each) under
    `budget` (bytes, or bytes per step: see the module docstring), None where it stops
    above it; and the model evaluations it spent (at most `work`, plus the moves of one
    step, two per candidate, and one more)."""
    allowance = np.broadcast_to(np.asarray(budget, dtype=np.int64), (model.steps,))
    search = _Search(model, allowance, work)
    point = search.tightened(search.point(recompute, {}))
    if point is None:
        return None, search.spent
    return search.exchanged(search.drop(point)), search.spent


def least_by_step(model: RematModel) -> np.ndarray:
    """Per step of the model, the most bytes any of its sub-steps holds with every
    candidate recomputed and a copy at each read: the least the model knows there."""
    everything = frozenset(model.candidates)
    emit = model.emissions(everything, everything)
    least = np.zeros(model.steps, dtype=np.int64)
    np.maximum.at(least, model.substep_steps(emit), model.profile(everything, emit))
    return least


def above(
    model: RematModel, allowance: np.ndarray, profile: np.ndarray, emit: Mapping
) -> np.ndarray:
    """Bytes of `profile` (`model.profile` of a point whose copies are `emit`) above
    `allowance` (bytes per step) at each sub-step (negative: room)."""
    return profile - allowance[model.substep_steps(emit)]
