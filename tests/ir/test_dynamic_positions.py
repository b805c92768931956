"""Run-time positions in the IR: slice_update's start and rope's offset given as an
integer scalar Tensor become an operand (the attribute is then 0); inference checks
only what is known statically, and refuses positions of the wrong dtype or shape."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

import tensorgraph as tg
from tests.position_cases import SliceCase, slice_cases, slice_graph


def test_a_tensor_start_is_the_third_operand_and_the_attribute_is_zero() -> None:
    g = tg.Graph("g")
    cache = g.input("cache", (2, 8, 4))
    row = g.input("row", (2, 1, 4))
    pos = g.input("pos", (), tg.int32)
    node = g.node(tg.slice_update(cache, row, -2, pos).id)
    assert node.inputs == (cache.id, row.id, pos.id)
    assert node.attr("start") == 0 and node.attr("axis") == 1
    assert (node.shape, node.dtype) == ((2, 8, 4), tg.float32)


def test_an_int_start_stays_an_attribute() -> None:
    g = tg.Graph("g")
    cache, row = g.input("cache", (8, 4)), g.input("row", (1, 4))
    node = g.node(tg.slice_update(cache, row, 0, np.int64(7)).id)
    assert node.inputs == (cache.id, row.id) and node.attr("start") == 7


@given(slice_cases())
def test_a_tensor_start_infers_what_the_int_start_infers(case: SliceCase) -> None:
    dynamic, static = slice_graph(case, True), slice_graph(case, False)
    out_dynamic, out_static = dynamic.node(dynamic.outputs[0]), static.node(static.outputs[0])
    assert (out_dynamic.shape, out_dynamic.dtype) == (out_static.shape, out_static.dtype)
    assert out_dynamic.shape == case.shape


def test_with_a_tensor_start_only_the_static_fit_is_checked() -> None:
    g = tg.Graph("g")
    cache, pos = g.input("cache", (3, 8)), g.input("pos", (1,), tg.int64)
    tg.slice_update(cache, g.input("whole", (3, 8)), 1, pos)  # 8 rows into 8: fits at 0
    with pytest.raises(tg.ShapeError, match=r"%\d+ slice_update: .*too_long \(3, 9\) does not"):
        tg.slice_update(cache, g.input("too_long", (3, 9)), 1, pos)
    with pytest.raises(tg.ShapeError, match=r"%\d+ slice_update: .*wide \(4, 2\) does not fit"):
        tg.slice_update(cache, g.input("wide", (4, 2)), 1, pos)


@pytest.mark.parametrize(
    ("dtype", "shape", "error", "pattern"),
    [
        (tg.float32, (), tg.DTypeError, r"the position p is float32; it must be int32 or int64"),
        (tg.int16, (), tg.DTypeError, r"the position p is int16; it must be int32 or int64"),
        (tg.bool_, (), tg.DTypeError, r"the position p is bool"),
        (tg.int32, (2,), tg.ShapeError, r"the position p \(2,\) must have shape \(\) or \(1,\)"),
        (tg.int32, (1, 1), tg.ShapeError, r"the position p \(1, 1\) must have shape"),
    ],
)
def test_a_position_must_be_an_int32_or_int64_scalar(dtype, shape, error, pattern) -> None:
    g = tg.Graph("g")
    x, row = g.input("x", (4, 2, 6)), g.input("row", (4, 1, 6))
    p = g.input("p", shape, dtype)
    with pytest.raises(error, match=r"%\d+ slice_update: " + pattern):
        tg.slice_update(x, row, 1, p)
    with pytest.raises(error, match=r"%\d+ rope: " + pattern):
        tg.rope(x, 4, offset=p)


def test_an_attribute_beside_a_position_operand_is_refused() -> None:
    # The invariant: with the operand, the attribute is 0, so a node has one position.
    g = tg.Graph("g")
    x, row, p = g.input("x", (4, 6)), g.input("row", (1, 6)), g.input("p", (), tg.int32)
    with pytest.raises(tg.ShapeError, match=r"%\d+ slice_update: start 2 given beside"):
        g.add("slice_update", [x.id, row.id, p.id], {"axis": 0, "start": 2})
    with pytest.raises(tg.ShapeError, match=r"%\d+ rope: offset 3 given beside"):
        g.add("rope", [x.id, p.id], {"dims": 4, "offset": 3})


def test_a_non_integer_start_or_offset_is_a_graph_error() -> None:
    g = tg.Graph("g")
    x, row = g.input("x", (4, 6)), g.input("row", (1, 6))
    with pytest.raises(tg.GraphError, match=r"slice_update: start must be an int .* got 1\.5"):
        tg.slice_update(x, row, 0, 1.5)
    with pytest.raises(tg.GraphError, match=r"rope: offset must be an int .* got 2\.0"):
        tg.rope(x, 4, offset=2.0)


def test_a_tensor_offset_is_the_second_operand_of_rope() -> None:
    g = tg.Graph("g")
    x, pos = g.input("x", (1, 2, 3, 8)), g.input("pos", (1,), tg.int32)
    node = g.node(tg.rope(x, 4, offset=pos, base=500.0).id)
    assert node.inputs == (x.id, pos.id)
    assert node.attr("offset") == 0 and node.attr("base") == 500.0
    assert (node.shape, node.dtype) == ((1, 2, 3, 8), tg.float32)
    assert g.node(tg.rope(x, 4, offset=5).id).inputs == (x.id,)


def test_graphs_with_positions_round_trip_through_json() -> None:
    g = tg.Graph("g")
    x, row, pos = g.input("x", (2, 6, 4)), g.input("row", (2, 1, 4)), g.input("pos", (), tg.int64)
    g.output(tg.rope(tg.slice_update(x, row, 1, pos), 4, offset=pos))
    again = tg.Graph.from_json(g.to_json())
    assert again.nodes == g.nodes and again.outputs == g.outputs
