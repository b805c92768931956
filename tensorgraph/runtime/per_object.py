"""Facts kept per live object (a frozen Program), outside it, looked up by identity.

`weakref.WeakKeyDictionary` makes a new weak reference on every lookup (`get` and
`setdefault` are Python code around `ref(key)`): a few microseconds that a decode step,
which looks its program's facts up about ten times per call, pays every token. Here a
lookup is one dict access by `id(obj)`; the entry is dropped by `weakref.finalize` when
the object is collected, which happens before its id can be given to another object, so
an id never finds a dead object's facts.
"""

from __future__ import annotations

import weakref


class PerObject:
    """A dict of facts per live (weak-referenceable) object."""

    def __init__(self) -> None:
        self._facts: dict[int, dict] = {}

    def of(self, obj: object) -> dict:
        """`obj`'s facts (an empty dict at first, kept while `obj` lives)."""
        facts = self._facts.get(id(obj))
        if facts is None:
            facts = self._facts[id(obj)] = {}
            weakref.finalize(obj, self._facts.pop, id(obj), None)
        return facts

    def __len__(self) -> int:
        return len(self._facts)
