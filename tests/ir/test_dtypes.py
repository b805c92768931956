"""The promotion lattice: symmetric, idempotent, associative; kinds ordered bool<int<float."""

import itertools

import pytest

import tensorgraph as tg
from tensorgraph.errors import DTypeError
from tensorgraph.ir.dtypes import DTYPES, as_dtype, promote_types, scalar_dtype

ALL = list(DTYPES.values())


def test_item_sizes() -> None:
    sizes = {d.name: d.itemsize for d in ALL}
    assert sizes == {
        "bool": 1,
        "uint8": 1,
        "int8": 1,
        "int16": 2,
        "int32": 4,
        "int64": 8,
        "float16": 2,
        "bfloat16": 2,
        "float32": 4,
    }
    assert all(d.to_numpy().itemsize == d.itemsize for d in ALL)


@pytest.mark.parametrize(("a", "b"), itertools.product(ALL, ALL))
def test_promotion_is_symmetric_and_holds_both(a, b) -> None:
    c = promote_types(a, b)
    assert c == promote_types(b, a)
    assert promote_types(a, a) == a
    kinds = {"bool": 0, "uint": 1, "int": 1, "float": 2}
    assert kinds[c.kind] == max(kinds[a.kind], kinds[b.kind])
    if a.kind == c.kind:
        assert c.itemsize >= a.itemsize


def test_promotion_is_associative() -> None:
    for a, b, c in itertools.product(ALL, repeat=3):
        assert promote_types(promote_types(a, b), c) == promote_types(a, promote_types(b, c))


def test_named_cases() -> None:
    assert promote_types(tg.float16, tg.bfloat16) == tg.float32
    assert promote_types(tg.uint8, tg.int8) == tg.int16
    assert promote_types(tg.int64, tg.float16) == tg.float16
    assert promote_types(tg.bool_, tg.int8) == tg.int8


def test_scalars_are_weakly_typed() -> None:
    assert scalar_dtype(1.5, tg.float16) == tg.float16
    assert scalar_dtype(2, tg.bfloat16) == tg.bfloat16
    assert scalar_dtype(1.5, tg.int32) == tg.float32
    assert scalar_dtype(3, tg.bool_) == tg.int32


def test_unknown_dtype_names_it() -> None:
    with pytest.raises(DTypeError, match="'float8'"):
        as_dtype("float8")
