"""Nodes without operands: the generators arange and full (zeros, ones), checked against
NumPy (see tests/ir/op_cases.py), and the boundary nodes input, param and constant."""

from __future__ import annotations

import numpy as np
import pytest

import tensorgraph as tg
from tests.ir.op_cases import Case, case_adder, check_case

CASES: list[Case] = []
case = case_adder(CASES)

# ---------------------------------------------------------------- generators

ARANGES = [  # (arguments, keyword arguments, NumPy's result, inferred dtype)
    ((2, 11, 3), {}, np.arange(2, 11, 3), tg.int32),
    ((0.5, 2.0, 0.25), {}, np.arange(0.5, 2.0, 0.25), tg.float32),
    ((10, 0, -3), {}, np.arange(10, 0, -3), tg.int32),
    ((5,), {}, np.arange(5), tg.int32),
    ((3, 3), {}, np.arange(3, 3), tg.int32),
    ((1.0, 0.0, -0.25), {}, np.arange(1.0, 0.0, -0.25), tg.float32),
    ((0, 4), {"dtype": tg.float16}, np.arange(4), tg.float16),
    ((-1.0, 1.0, 0.5), {"dtype": "bfloat16"}, np.arange(-1.0, 1.0, 0.5), tg.bfloat16),
]
for _args, _kwargs, _want, _dtype in ARANGES:
    case(
        "arange",
        f"{_args}{_kwargs}",
        [],
        lambda g, a=_args, k=_kwargs: tg.arange(g, *a, **k),
        _dtype,
        lambda w=_want: w,
    )

FULLS = [  # (shape, value, dtype argument, NumPy's result, inferred dtype)
    ((2, 3), 7.5, None, np.full((2, 3), 7.5), tg.float32),
    ((4,), 3, None, np.full(4, 3), tg.int32),
    ((2, 2), True, None, np.ones((2, 2), bool), tg.bool_),
    ((3,), 1 / 3, tg.float16, np.full(3, 1 / 3), tg.float16),
    ((2,), 7.9, tg.int32, np.full(2, 7), tg.int32),
    ((0, 2), 0, tg.float32, np.zeros((0, 2)), tg.float32),
    ((), -2.5, tg.bfloat16, np.array(-2.5), tg.bfloat16),
    ((2,), 300, tg.int8, np.full(2, 300 - 256), tg.int8),  # wraps, as a cast does
]
for _shape, _value, _dtype, _want, _out in FULLS:
    case(
        "full",
        f"{_shape}-{_value}-{_dtype}",
        [],
        lambda g, s=_shape, v=_value, d=_dtype: tg.full(g, s, v, d),
        _out,
        lambda w=_want: w,
    )
case("full", "zeros", [], lambda g: tg.zeros(g, (2, 3)), tg.float32, lambda: np.zeros((2, 3)))
case("full", "ones-int32", [], lambda g: tg.ones(g, (2,), tg.int32), tg.int32, lambda: np.ones(2))


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_inference_and_reference_numerics(c: Case) -> None:
    check_case(c)


def test_boundary_nodes_declare_their_shape_and_dtype() -> None:
    g = tg.Graph()
    x = g.input("x", (2, 3), tg.bfloat16)
    assert (x.shape, x.dtype, x.node.op) == ((2, 3), tg.bfloat16, "input")
    assert g.input("y", ()).dtype == tg.float32, "float32 is the default"
    assert g.param("w", (4,), "int8").dtype == tg.int8
    assert g.constant(1.5).dtype == tg.float32, "float64 literals become float32"
    assert g.constant(2).dtype == tg.int32, "Python ints become int32"
    assert g.constant(np.zeros((2, 0), np.int64)).shape == (2, 0)
    assert g.constant([1, 2], tg.float16).dtype == tg.float16
