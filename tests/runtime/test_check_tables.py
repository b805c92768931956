"""Tabulated scalar host checks (runtime/check_tables.py): a decode position's checks
looked up in a table give exactly the verdicts and errors of the arithmetic itself, in
and out of the table's window, for int32 and int64 positions."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.errors import RunError
from tensorgraph.runtime.check_tables import scalar_table
from tensorgraph.runtime.state import HostCheckPlan, host_checks


def position_graph(size: int, rows: int, offset: int, dtype: tg.DType) -> tg.Graph:
    """A cache write at where(pos < 0, pos + size, pos) + offset (torch.export's
    normalised position, shifted), and a take of the position's row."""
    g = tg.Graph("positions")
    pos = g.input("pos", (), dtype)
    table = g.input("table", (size, 2), tg.float32)
    update = g.input("rows", (rows, 2), tg.float32)
    index = tg.where(pos < 0, pos + size, pos) + offset
    g.output(tg.slice_update(table, update, 0, index))
    g.output(tg.take(table, pos, axis=0))
    return g


@settings(max_examples=60)
@given(
    size=st.integers(1, 40),
    data=st.data(),
    offset=st.integers(-3, 3),
    dtype=st.sampled_from((tg.int32, tg.int64)),
)
def test_tabulated_checks_equal_the_arithmetic(size, data, offset, dtype) -> None:
    rows = data.draw(st.integers(1, size), label="rows")
    graph = position_graph(size, rows, offset, dtype)
    checks = host_checks(graph)
    assert all(scalar_table(c) is not None for c in checks)  # both are tabulated
    plan = HostCheckPlan(checks)
    assert all(table is not None for _, _, table in plan.rules)  # kept: the input is shared
    pos_id = next(n.id for n in graph.inputs if n.name == "pos")
    near = st.integers(-3 * size - 5, 3 * size + 5)
    far = st.integers(-(2**30), 2**30)
    for value in data.draw(st.lists(st.one_of(near, far), min_size=1, max_size=8)):
        start = (value + size if value < 0 else value) + offset
        feeds = {pos_id: np.array(value, dtype.to_numpy())}
        if not 0 <= start <= size - rows:  # graph order: the slice_update's check first
            with pytest.raises(RunError, match=rf"%\d+ slice_update: start {start} "):
                plan(feeds)
        elif not -size <= value < size:
            with pytest.raises(RunError, match=rf"index {value} is out of range .* {size}"):
                plan(feeds)
        else:
            plan(feeds)


def test_float_and_state_cones_are_not_tabulated() -> None:
    g = tg.Graph("floats")
    pos = g.input("pos", (), tg.float32)
    table = g.input("table", (4, 2), tg.float32)
    g.output(tg.take(table, (pos * 2.0).astype(tg.int32), axis=0))
    counter = g.state("counter", (), tg.int32)
    g.output(tg.take(table, counter, axis=0))
    g.update_state(counter, counter + 1)
    checks = host_checks(g)
    assert len(checks) == 2
    assert [scalar_table(c) for c in checks] == [None, None]
