"""What the entries of a multi-entry program share at run time, as a record backends
can read without knowing the driver: the arena (the largest entry's) and a store for
their converted weights. The driver (multi.py) registers an entry's record when it
assembles the program; a backend asks `shared_of(entry)` (None for a lone program).
Records are held weakly: one lives as long as its entries."""

from __future__ import annotations

import weakref

from attrs import field, frozen


@frozen(eq=False)
class Shared:
    """The shared arena size, and a store for backends' converted weights (key -> value,
    e.g. (device, id(array)) -> (array, mx.array); the array is kept so that an id is
    never reused while cached)."""

    arena_size: int
    converted: dict = field(factory=dict)


# entry Program -> its Shared record
_SHARED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def share(program: object, shared: Shared) -> None:
    """Record that `program` is an entry sharing `shared`."""
    _SHARED[program] = shared


def shared_of(program: object) -> Shared | None:
    """The `Shared` record of `program` when it is an entry of a MultiProgram."""
    return _SHARED.get(program)
