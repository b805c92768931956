"""The dtype lattice: item sizes, NumPy round trips, promotion (symmetric, idempotent,
associative, bool < int < float, float16 + bfloat16 -> float32) and weakly typed Python
scalars, both through `scalar_dtype` and through the builder."""

import itertools

import ml_dtypes
import numpy as np
import pytest

import tensorgraph as tg
from tensorgraph.errors import DTypeError
from tensorgraph.ir.dtypes import DTYPES, as_dtype, promote_types, scalar_dtype

ALL = list(DTYPES.values())
KIND_RANK = {"bool": 0, "uint": 1, "int": 1, "float": 2}
NON_FLOAT = [d for d in ALL if not d.is_float]


def test_item_sizes_and_kinds() -> None:
    table = {d.name: (d.itemsize, d.kind) for d in ALL}
    assert table == {
        "bool": (1, "bool"),
        "uint8": (1, "uint"),
        "uint32": (4, "uint"),
        "int8": (1, "int"),
        "int16": (2, "int"),
        "int32": (4, "int"),
        "int64": (8, "int"),
        "float16": (2, "float"),
        "bfloat16": (2, "float"),
        "float32": (4, "float"),
    }


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_numpy_round_trip(dtype: tg.DType) -> None:
    assert dtype.to_numpy().itemsize == dtype.itemsize
    assert as_dtype(dtype.to_numpy()) == dtype
    assert as_dtype(dtype.name) is dtype
    assert as_dtype(dtype) is dtype


def test_bfloat16_comes_from_ml_dtypes() -> None:
    assert tg.bfloat16.to_numpy() == np.dtype(ml_dtypes.bfloat16)


@pytest.mark.parametrize("value", ["float8", "float64", np.float64, np.complex64, object])
def test_unknown_dtypes_are_named(value) -> None:
    named = value if isinstance(value, str) else np.dtype(value).name
    with pytest.raises(DTypeError, match=named):
        as_dtype(value)


@pytest.mark.parametrize(("a", "b"), list(itertools.product(ALL, ALL)), ids=str)
def test_promotion_is_symmetric_and_holds_both(a: tg.DType, b: tg.DType) -> None:
    c = promote_types(a, b)
    assert c == promote_types(b, a)
    assert KIND_RANK[c.kind] == max(KIND_RANK[a.kind], KIND_RANK[b.kind]), "bool < int < float"
    for x in (a, b):
        if KIND_RANK[x.kind] == KIND_RANK[c.kind]:
            assert c.itemsize >= x.itemsize, f"{c} is narrower than {x}"
            assert np.can_cast(x.to_numpy(), c.to_numpy(), "safe"), f"{x} does not fit {c}"


@pytest.mark.parametrize("a", ALL, ids=str)
def test_promotion_is_idempotent(a: tg.DType) -> None:
    assert promote_types(a, a) is a


def test_promotion_is_associative_over_all_triples() -> None:
    for a, b, c in itertools.product(ALL, repeat=3):
        left, right = promote_types(promote_types(a, b), c), promote_types(a, promote_types(b, c))
        assert left == right, f"({a}, {b}), {c} -> {left} but {a}, ({b}, {c}) -> {right}"


@pytest.mark.parametrize(("a", "b"), list(itertools.product(NON_FLOAT, NON_FLOAT)), ids=str)
def test_integer_promotion_agrees_with_numpy(a: tg.DType, b: tg.DType) -> None:
    assert promote_types(a, b).to_numpy() == np.promote_types(a.to_numpy(), b.to_numpy())


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (tg.float16, tg.bfloat16, tg.float32),
        (tg.bfloat16, tg.float32, tg.float32),
        (tg.uint8, tg.int8, tg.int16),
        (tg.uint8, tg.int16, tg.int16),
        (tg.int64, tg.float16, tg.float16),
        (tg.int32, tg.bfloat16, tg.bfloat16),
        (tg.bool_, tg.int8, tg.int8),
        (tg.bool_, tg.uint8, tg.uint8),
        (tg.bool_, tg.float16, tg.float16),
    ],
    ids=str,
)
def test_named_promotions(a: tg.DType, b: tg.DType, expected: tg.DType) -> None:
    assert promote_types(a, b) == expected


@pytest.mark.parametrize(
    ("value", "tensor", "expected"),
    [
        (1.5, tg.float16, tg.float16),
        (2, tg.bfloat16, tg.bfloat16),
        (2, tg.int8, tg.int8),
        (-128, tg.int8, tg.int8),
        (255, tg.uint8, tg.uint8),
        (1.5, tg.int32, tg.float32),
        (1.5, tg.bool_, tg.float32),
        (3, tg.bool_, tg.int32),
        (True, tg.float16, tg.float16),
        (True, tg.bool_, tg.bool_),
    ],
    ids=str,
)
def test_python_scalars_are_weakly_typed(value, tensor: tg.DType, expected: tg.DType) -> None:
    assert scalar_dtype(value, tensor) == expected


@pytest.mark.parametrize(("value", "tensor"), [(300, tg.int8), (-1, tg.uint8), (2**31, tg.bool_)])
def test_python_ints_that_do_not_fit_are_rejected(value: int, tensor: tg.DType) -> None:
    with pytest.raises(DTypeError, match=rf"Python int {value} does not fit"):
        scalar_dtype(value, tensor)
    g = tg.Graph()
    x = g.input("x", (2,), tensor)
    with pytest.raises(DTypeError, match=str(value)):
        _ = x < value


def test_unsupported_scalars_are_named() -> None:
    with pytest.raises(DTypeError, match=r"'1'.*str"):
        scalar_dtype("1", tg.float32)


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (lambda h, i, b: h + 1.0, tg.float16),
        (lambda h, i, b: 2 * h, tg.float16),
        (lambda h, i, b: i + 2, tg.int32),
        (lambda h, i, b: i * 0.5, tg.float32),
        (lambda h, i, b: i / 2, tg.float32),
        (lambda h, i, b: tg.maximum(b, 3), tg.int32),
        (lambda h, i, b: i < 1, tg.bool_),
        (lambda h, i, b: h + i, tg.float16),
        (lambda h, i, b: tg.where(b, h, 0), tg.float16),
        (lambda h, i, b: tg.maximum(i, 1.5), tg.float32),
    ],
    ids=[
        "f16+1.0",
        "2*f16",
        "i32+2",
        "i32*0.5",
        "i32/2",
        "maximum(bool,3)",
        "i32<1",
        "f16+i32",
        "where(b,f16,0)",
        "maximum(i32,1.5)",
    ],
)
def test_builder_applies_weak_typing(build, expected: tg.DType) -> None:
    g = tg.Graph()
    h = g.input("h", (2,), tg.float16)
    i = g.input("i", (2,), tg.int32)
    b = g.input("b", (2,), tg.bool_)
    assert build(h, i, b).dtype == expected
