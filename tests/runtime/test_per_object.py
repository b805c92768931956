"""PerObject: facts per live object by identity, dropped when the object is collected."""

import gc

from tensorgraph.runtime.per_object import PerObject


class Owner:
    """A weak-referenceable stand-in for a Program."""


def test_facts_are_per_object_and_dropped_with_it() -> None:
    kept = PerObject()
    a, b = Owner(), Owner()
    kept.of(a)["x"] = 1
    assert kept.of(a) == {"x": 1}
    assert kept.of(b) == {}
    assert len(kept) == 2
    del a
    gc.collect()
    assert len(kept) == 1
    fresh = [Owner() for _ in range(50)]  # ids of collected owners may be reused
    assert all(kept.of(o) == {} for o in fresh)
    assert kept.of(b) == {}
