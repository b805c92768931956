"""Basic indexing (`x[1:3, ..., None]`) against NumPy's, on fixed and random indices, and
the ops it emits (a unit-step slice on axis 0 is a narrow view)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tensorgraph as tg
from tests.ir.op_cases import Arrays, build_and_run

rand = Arrays(seed=6).rand


BASIC_INDICES = [
    np.s_[1:3],
    np.s_[::2],
    np.s_[::-1],
    np.s_[3:0:-2],
    np.s_[1],
    np.s_[-1],
    np.s_[:, 1:],
    np.s_[..., 0],
    np.s_[1, ..., ::2],
    np.s_[None, 1:2, ::-1],
    np.s_[1:2, None, 3],
    np.s_[:, :, None],
    np.s_[..., None],
    np.s_[:0],
    np.s_[-10:10],
    np.s_[2, -1, 0],
    np.s_[()],
    np.s_[...],
]


@pytest.mark.parametrize("index", BASIC_INDICES, ids=str)
def test_basic_indexing_matches_numpy(index) -> None:
    x = rand(4, 5, 3)
    _, out, got = build_and_run(lambda a: a[index], (x,))
    assert out.shape == x[index].shape
    np.testing.assert_array_equal(got, x[index])


@st.composite
def index_cases(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple]:
    """A shape and a basic index for it: ints, slices with any step, Nones, at most one
    Ellipsis (standing for the axes between the leading and trailing explicit items)."""
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
    explicit = draw(st.integers(0, len(shape)))
    split = draw(st.none() | st.integers(0, explicit))
    leading = explicit if split is None else split
    axes = [*range(leading), *range(len(shape) - (explicit - leading), len(shape))]
    items: list[object] = []
    for axis in axes:
        dim = shape[axis]
        if draw(st.booleans()):
            items.append(draw(st.integers(-dim, dim - 1)))
        else:
            bound = st.none() | st.integers(-dim - 2, dim + 2)
            step = draw(st.sampled_from([None, 1, 2, 3, -1, -2]))
            items.append(slice(draw(bound), draw(bound), step))
    if split is not None:
        items.insert(split, Ellipsis)
    for _ in range(draw(st.integers(0, 2))):
        items.insert(draw(st.integers(0, len(items))), None)
    return shape, tuple(items)


@given(index_cases())
def test_random_basic_indexing_matches_numpy(shape_and_index) -> None:
    shape, index = shape_and_index
    x = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
    _, out, got = build_and_run(lambda a: a[index], (x,))
    assert out.shape == x[index].shape
    np.testing.assert_array_equal(got, x[index])


def test_unit_step_slice_on_axis_zero_is_a_narrow_view() -> None:
    g = tg.Graph("slice")
    x = g.input("x", (6, 4))
    y = x[2:5]
    assert y.node.op == "narrow" and y.node.attr("axis") == 0
    assert x[::2].node.op == "take"
