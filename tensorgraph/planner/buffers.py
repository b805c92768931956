"""The interval model of memory planning.

A `Buffer` is `size` bytes live during the half-open step interval `[start, end)`.
Two buffers conflict exactly when their lifetimes intersect (`a.start < b.end` and
`b.start < a.end`); conflicting buffers must not share a byte. An `Assignment`
gives every buffer a byte offset; `arena_size` is the end of the highest buffer.

Sizes, steps, offsets and arena sizes are Python ints below `INT64_END` (2**63): plans
go to runtimes that address bytes with int64, and the planner's numpy arrays are int64.
A `Buffer` refuses anything else at construction, so no array can wrap around later.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Hashable, Iterable, Sequence
from numbers import Integral
from pathlib import Path
from typing import TextIO

import numpy as np
from attrs import field, frozen

from tensorgraph.errors import PlanError

INT64_END = 1 << 63  # every size, step, offset and arena size is below this


def _whole(value: object) -> bool:
    # A plain int first: every Buffer the liveness analysis makes has int fields, and
    # the ABC check alone cost a tenth of a symbolic compile (benches/bench_symbolic.py).
    return type(value) is int or (isinstance(value, Integral) and not isinstance(value, bool))


@frozen
class Buffer:
    """`size` bytes live during schedule steps `[start, end)`.

    Invariants (PlanError naming the buffer otherwise): `id` is hashable, `size`, `start`
    and `end` are ints (numpy integers are converted), `0 <= size < 2**63` and
    `0 <= start < end < 2**63`."""

    id: Hashable
    size: int
    start: int
    end: int

    def __attrs_post_init__(self) -> None:
        try:
            hash(self.id)
        except TypeError as err:
            raise PlanError(f"buffer id {self.id!r} is not hashable") from err
        size, start, end = self.size, self.start, self.end
        if (
            type(size) is int
            and type(start) is int
            and type(end) is int
            and 0 <= size < INT64_END
            and 0 <= start < end < INT64_END
        ):  # plain ints in range, as the liveness analysis makes them: nothing to convert
            return
        for name in ("size", "start", "end"):
            value = getattr(self, name)
            if not _whole(value):
                raise PlanError(f"buffer {self.id!r}: {name} must be an int but got {value!r}")
            object.__setattr__(self, name, int(value))  # numpy ints would wrap in sums
        if not 0 <= self.size < INT64_END:
            raise PlanError(
                f"buffer {self.id!r}: size must be >= 0 and below 2**63 but got {self.size}"
            )
        if not 0 <= self.start < INT64_END or not 0 <= self.end < INT64_END:
            raise PlanError(
                f"buffer {self.id!r}: lifetime [{self.start}, {self.end}) must lie in [0, 2**63)"
            )
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
    """Byte offsets for a set of buffers: `offsets[id]`, and `arena_size` in bytes.

    `work` is the work units the algorithm spent (see `planner.search.Work`), and
    `cut_short` is True exactly when a wall-clock `time_limit` stopped the search before
    its work budget was spent (the plan is then valid, but may differ between runs)."""

    offsets: dict = field(eq=True)
    arena_size: int
    work: int = 0
    cut_short: bool = False


def align_up(value: int, alignment: int) -> int:
    """The smallest multiple of `alignment` that is >= `value`."""
    return -(-value // alignment) * alignment


def peak(buffers: Iterable[Buffer], alignment: int = 1) -> tuple[int, int]:
    """(bytes, step): the most (aligned) bytes live at one step, and the first step where
    that many are live ((0, 0) without buffers). Exact Python ints whatever the sums:
    the sweep runs in int64 only when the sum of all aligned sizes is below 2**63, so
    no partial sum can wrap; otherwise in Python ints."""
    buffers = list(buffers)
    if not buffers:
        return 0, 0
    sizes = [align_up(b.size, alignment) for b in buffers]
    # Ends sort before starts at the same step, as lifetimes are half-open.
    if sum(sizes) < INT64_END:
        size_array = np.array(sizes, dtype=np.int64)
        starts = np.array([b.start for b in buffers], dtype=np.int64)
        ends = np.array([b.end for b in buffers], dtype=np.int64)
        times = np.concatenate([ends, starts])
        deltas = np.concatenate([-size_array, size_array])
        kinds = np.concatenate([np.zeros_like(ends), np.ones_like(starts)])
        order = np.lexsort((kinds, times))
        live = np.cumsum(deltas[order])
        at = int(np.argmax(live))
        return max(0, int(live[at])), int(times[order][at]) if live[at] > 0 else 0
    events = sorted(
        [(b.end, 0, -s) for b, s in zip(buffers, sizes, strict=True)]
        + [(b.start, 1, s) for b, s in zip(buffers, sizes, strict=True)]
    )
    live = most = step = 0
    for time, _, delta in events:
        live += delta
        if live > most:
            most, step = live, time
    return most, step


def lower_bound(buffers: Iterable[Buffer], alignment: int = 1) -> int:
    """Max over steps of the summed (aligned) sizes of the buffers live at that step.

    No assignment for the same lifetimes can use fewer bytes. Exact for any sum (a
    Python int, possibly 2**63 or more: no arena can then be represented, which
    `assign_offsets` reports as a PlanError). A sweep over lifetime endpoints,
    O(n log n)."""
    return peak(buffers, alignment)[0]


def read_minimalloc_csv(path: str | Path) -> list[Buffer]:
    """Buffers from a MiniMalloc CSV (`id,lower,upper,size`, half-open `[lower, upper)`).

    UTF-8 text (a byte-order mark is skipped); ids that are integers become ints, others
    stay strings. Raises PlanError naming the file (and row, where there is one) on text
    that is not UTF-8 or not CSV, a missing column, an empty id, a non-integer field, or
    a buffer that breaks `Buffer`'s invariants (a size of 2**63 or more, say)."""
    path = Path(path)
    data = path.read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise PlanError(
            f"{path}:{line}: not UTF-8 text (byte 0x{data[err.start]:02x} at byte offset "
            f"{err.start})"
        ) from err
    buffers = []
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        missing = {"id", "lower", "upper", "size"} - set(reader.fieldnames or ())
        if missing:
            raise PlanError(f"{path}: missing column(s) {sorted(missing)}")
        for row in reader:
            buffers.append(_row_buffer(path, reader.line_num, row))
    except csv.Error as err:
        raise PlanError(f"{path}: not a readable CSV file: {err}") from err
    return buffers


def _row_buffer(path: Path, line: int, row: dict) -> Buffer:
    raw_id = (row["id"] or "").strip()
    if not raw_id:
        raise PlanError(f"{path}:{line}: empty id in {row}")
    try:
        lower, upper, size = int(row["lower"]), int(row["upper"]), int(row["size"])
    except (TypeError, ValueError) as err:
        raise PlanError(f"{path}:{line}: non-integer field in {row}") from err
    buffer_id = int(raw_id) if raw_id.lstrip("-").isdigit() else raw_id
    try:
        return Buffer(buffer_id, size, lower, upper)
    except PlanError as err:
        raise PlanError(f"{path}:{line}: {err}") from err


def write_minimalloc_csv(
    target: str | Path | TextIO, buffers: Sequence[Buffer], assignment: Assignment
) -> None:
    """Write MiniMalloc's solution format: `id,lower,upper,size,offset`, one row per
    buffer in input order (the columns `read_minimalloc_csv` reads, plus the offsets),
    to a file path or an open text stream."""
    if isinstance(target, str | Path):
        with Path(target).open("w", newline="", encoding="utf-8") as handle:
            write_minimalloc_csv(handle, buffers, assignment)
        return
    writer = csv.writer(target, lineterminator="\n")
    writer.writerow(["id", "lower", "upper", "size", "offset"])
    for b in buffers:
        writer.writerow([b.id, b.start, b.end, b.size, assignment.offsets[b.id]])
