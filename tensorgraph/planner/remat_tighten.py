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
root live there at its first read after the peak's step. Once the peak fits, every
split and every recomputed root is dropped again, the most expensive first, where the
peak still fits without it. Invariants: a point it answers fits the budget in the
model's profile (tested by evaluating it); it counts model evaluations against a work
budget, never time (deterministic); of equal moves the earlier candidate's wins.
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
    """Model evaluations counted against `work` (`spent`)."""

    def __init__(self, model: RematModel, budget: int, work: int) -> None:
        self.model, self.budget, self.work, self.spent = model, budget, work, 0

    def point(self, recompute: frozenset[int], splits: Splits) -> Point:
        self.spent += 1
        emit = self.model.emissions(recompute, frozenset(), splits)
        profile = self.model.profile(recompute, emit)
        return Point(recompute, splits, emit, self.model.recompute_cost(recompute, emit), profile)

    def overflow(self, point: Point) -> int:
        return int(np.maximum(point.profile - self.budget, 0).sum())

    def moves(self, point: Point) -> list[tuple[frozenset[int], Splits]]:
        """The moves at `point`'s peak sub-step (see the module docstring)."""
        model = self.model
        step = int(model.substep_steps(point.emit)[int(point.profile.argmax())])
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
        return out

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
                rest = tuple(s for s in point.splits[u] if s != step)
                trial = self.point(point.recompute, {**point.splits, u: rest})
                if trial.peak <= self.budget:
                    point = trial
            splits = {k: v for k, v in point.splits.items() if k != u}
            trial = self.point(point.recompute - {u}, splits)
            if trial.peak <= self.budget:
                point = trial
        return point


def tighten(
    model: RematModel, budget: int, recompute: frozenset[int], work: int
) -> tuple[Point | None, int]:
    """The point `tighten` reaches from recomputing `recompute` (one copy each) under
    `budget` (see the module docstring), None where it stops above the budget; and the
    model evaluations it spent (at most `work`, plus the moves of one step)."""
    search = _Search(model, budget, work)
    point = search.point(recompute, {})
    while point.peak > budget and search.spent < work:
        over = search.overflow(point)
        best: tuple[float, Point] | None = None  # the earlier of equal moves
        for r, splits in search.moves(point):
            trial = search.point(r, splits)
            gained = over - search.overflow(trial)
            if gained > 0:
                score = (trial.flops - point.flops) / gained
                if best is None or score < best[0]:
                    best = (score, trial)
        if best is None:
            return None, search.spent
        point = best[1]
    if point.peak > budget:
        return None, search.spent
    return search.drop(point), search.spent
