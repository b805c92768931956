"""Plan verification, independent of every offset algorithm (it shares no helper).

An event sweep over lifetimes: at each step, ends (half-open) are processed before
starts; the live set is kept as a list sorted by offset, and a new buffer only needs
checking against its neighbours in that order, because live buffers never overlap each
other (checked as each was inserted). O(n log n + n * live) with bisect insertion.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from numbers import Integral

from tensorgraph.errors import PlanError
from tensorgraph.planner.buffers import INT64_END, Assignment, Buffer


def _show(b: Buffer, offset: int) -> str:
    return f"buffer {b.id!r} (bytes [{offset}, {offset + b.size}), steps [{b.start}, {b.end}))"


def verify_assignment(
    buffers: Sequence[Buffer], assignment: Assignment, alignment: int = 1
) -> None:
    """Raise PlanError naming the culprit(s) if `arena_size` is not an int in `[0, 2**63)`,
    or any buffer lacks an offset, has one that is not an int, is misaligned, lies
    outside `[0, arena_size]` (an empty buffer may sit at `arena_size` itself: it owns no
    byte), or shares a byte with a buffer live at the same time."""
    offsets, arena = assignment.offsets, assignment.arena_size
    if not isinstance(arena, int) or isinstance(arena, bool) or not 0 <= arena < INT64_END:
        raise PlanError(f"arena size must be an int in [0, 2**63) but got {arena!r}")
    for b in buffers:
        if b.id not in offsets:
            raise PlanError(f"buffer {b.id!r} has no offset")
        offset = offsets[b.id]
        if not isinstance(offset, Integral) or isinstance(offset, bool):
            raise PlanError(f"buffer {b.id!r}: offset must be an int but got {offset!r}")
        offset = int(offset)  # a numpy integer would wrap in the sums below
        if offset % alignment:
            raise PlanError(f"{_show(b, offset)} is not aligned to {alignment} bytes")
        if offset < 0 or offset + b.size > assignment.arena_size:
            raise PlanError(
                f"{_show(b, offset)} lies outside the arena of {assignment.arena_size} bytes"
            )
    events = sorted(
        [(b.end, 0, k) for k, b in enumerate(buffers) if b.size]
        + [(b.start, 1, k) for k, b in enumerate(buffers) if b.size]
    )
    live: list[tuple[int, int]] = []  # (offset, k) sorted
    for _, kind, k in events:
        b = buffers[k]
        key = (int(offsets[b.id]), k)
        if kind == 0:
            live.pop(bisect.bisect_left(live, key))
            continue
        at = bisect.bisect_left(live, key)
        for neighbour in (at - 1, at):
            if 0 <= neighbour < len(live):
                other_offset, j = live[neighbour]
                other = buffers[j]
                if other_offset < key[0] + b.size and key[0] < other_offset + other.size:
                    raise PlanError(
                        f"{_show(b, key[0])} overlaps {_show(other, other_offset)} "
                        "while both are live"
                    )
        live.insert(at, key)
