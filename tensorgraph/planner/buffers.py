"""The interval model of memory planning.

A `Buffer` is `size` bytes live during the half-open step interval `[start, end)`.
Two buffers conflict exactly when their lifetimes intersect (`a.start < b.end` and
`b.start < a.end`); conflicting buffers must not share a byte. An `Assignment`
gives every buffer a byte offset; `arena_size` is the end of the highest buffer.
"""

from __future__ import annotations

import csv
from collections.abc import Hashable, Iterable
from pathlib import Path

import numpy as np
from attrs import field, frozen

from tensorgraph.errors import PlanError


@frozen
class Buffer:
    """`size` bytes live during schedule steps `[start, end)`; `end > start`, `size >= 0`."""

    id: Hashable
    size: int
    start: int
    end: int

    def __attrs_post_init__(self) -> None:
        if self.size < 0:
            raise PlanError(f"buffer {self.id!r}: size must be >= 0 but got {self.size}")
        if self.end <= self.start:
            raise PlanError(
                f"buffer {self.id!r}: lifetime [{self.start}, {self.end}) is empty; "
                "end must exceed start"
            )

    def overlaps(self, other: Buffer) -> bool:
        """True when the two lifetimes intersect (half-open, so touching ends do not)."""
        return self.start < other.end and other.start < self.end


@frozen
class Assignment:
    """Byte offsets for a set of buffers: `offsets[id]`, and `arena_size` in bytes."""

    offsets: dict = field(eq=True)
    arena_size: int


def align_up(value: int, alignment: int) -> int:
    """The smallest multiple of `alignment` that is >= `value`."""
    return -(-value // alignment) * alignment


def lower_bound(buffers: Iterable[Buffer], alignment: int = 1) -> int:
    """Max over steps of the summed (aligned) sizes of the buffers live at that step.

    No assignment for the same lifetimes can use fewer bytes. Computed with a sweep over
    lifetime endpoints (ends sort before starts at the same step, as lifetimes are
    half-open), O(n log n)."""
    buffers = list(buffers)
    if not buffers:
        return 0
    sizes = np.array([align_up(b.size, alignment) for b in buffers], dtype=np.int64)
    starts = np.array([b.start for b in buffers], dtype=np.int64)
    ends = np.array([b.end for b in buffers], dtype=np.int64)
    times = np.concatenate([ends, starts])
    deltas = np.concatenate([-sizes, sizes])
    kinds = np.concatenate([np.zeros_like(ends), np.ones_like(starts)])  # ends first
    order = np.lexsort((kinds, times))
    return int(max(0, np.cumsum(deltas[order]).max()))


def read_minimalloc_csv(path: str | Path) -> list[Buffer]:
    """Buffers from a MiniMalloc CSV (`id,lower,upper,size`, half-open `[lower, upper)`).

    Ids that are integers become ints, others stay strings. Raises PlanError naming the
    file and row on a missing column or a non-integer field."""
    path = Path(path)
    buffers = []
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        missing = {"id", "lower", "upper", "size"} - set(reader.fieldnames or ())
        if missing:
            raise PlanError(f"{path}: missing column(s) {sorted(missing)}")
        for line, row in enumerate(reader, start=2):
            try:
                lower, upper, size = int(row["lower"]), int(row["upper"]), int(row["size"])
            except (TypeError, ValueError) as err:
                raise PlanError(f"{path}:{line}: non-integer field in {row}") from err
            raw_id = row["id"].strip()
            buffer_id = int(raw_id) if raw_id.lstrip("-").isdigit() else raw_id
            buffers.append(Buffer(buffer_id, size, lower, upper))
    return buffers
