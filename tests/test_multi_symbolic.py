"""Multi-entry programs with a symbolic entry (tensorgraph/multi.py): the state region and
the weights laid out once for static and symbolic entries alike, the symbolic entry's
arena parametric and taken at each call's length. Oracles: the same entries built with
ints in place of the dims (`strategies.symbolic_graphs`' rebuild, independent of
`tg.specialize`) and compiled as a static MultiProgram, run on the NumPy reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.planner.check import verify_plan
from tensorgraph.planner.sharing import shared_of
from tensorgraph.symbolic_program import concrete_program
from tests.strategies import DIMS, feeds, symbolic_graphs

ACC = 4  # length of the state both entries share
WEIGHT = np.array([0.5, -1.0, 2.0, 0.25], np.float32)


def _with_state(graph: tg.Graph) -> tg.Graph:
    """`graph` that also adds the sum of its first output into state "acc" (ACC,)."""
    acc = graph.state("acc", (ACC,), tg.float32)
    first = tg.Tensor(graph, graph.outputs[0])
    graph.update_state(acc, acc + tg.sum(first))
    return graph


def _reader() -> tg.Graph:
    """A static entry that reads "acc" through a bound weight and halves it."""
    g = tg.Graph("read")
    acc = g.state("acc", (ACC,), tg.float32)
    scale = g.input("scale", (), tg.float32)
    w = g.param("w", (ACC,), tg.float32, WEIGHT)
    g.output(acc * w * scale)
    g.update_state(acc, acc * 0.5)
    return g


def _run_both(multi: object, backend: str, inputs: dict, params: dict, state: object) -> list:
    outs = multi.run("sym", inputs, params, backend=backend, state=state)
    outs += multi.run("read", {"scale": np.float32(3.0)}, backend=backend, state=state)
    return [np.asarray(o) for o in outs]


def _check_symbolic_entry(built: tuple, data: st.DataObject, lengths: int) -> None:
    graph, rebuild = built
    multi = tg.compile({"sym": _with_state(graph), "read": _reader()})
    layout = multi.state_layout
    for program in multi.entries.values():  # one layout, the symbolic entry's included
        assert program.plan.state_layout == layout
        assert program.plan.state_size == multi.state_size
    for _ in range(lengths):
        seq = data.draw(st.integers(DIMS[0].min, DIMS[0].max), label="seq")
        kv = data.draw(st.integers(DIMS[1].min, DIMS[1].max), label="kv")
        static = tg.compile({"sym": _with_state(rebuild(seq, kv)), "read": _reader()})
        inputs, params = feeds(static.entries["sym"].graph, seed=seq * 10 + kv)
        want = _run_both(static, "numpy", inputs, params, static.new_state("numpy"))
        dims = {d: v for d, v in (("seq", seq), ("kv", kv)) if d in graph.dims}
        concrete = concrete_program(multi.entries["sym"], dims)
        verify_plan(concrete.graph, concrete.plan, concrete.aliasing)  # at this length
        assert concrete.plan.state_layout == layout
        for backend in ("numpy", "arena", "mlx"):
            got = _run_both(multi, backend, inputs, params, multi.new_state(backend))
            assert [g.shape for g in got] == [w.shape for w in want]
            for g, w in zip(got, want, strict=True):
                if backend == "mlx":
                    np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
                else:  # the arena executor computes with the reference's kernels
                    np.testing.assert_array_equal(g, w)


@settings(max_examples=3)
@given(symbolic_graphs(max_ops=6), st.data())
def test_a_symbolic_entry_runs_as_the_static_entry_built_at_its_length(built, data) -> None:
    _check_symbolic_entry(built, data, lengths=1)


@pytest.mark.slow
@settings(max_examples=30)
@given(symbolic_graphs(max_ops=8), st.data())
def test_a_symbolic_entry_runs_as_the_static_entry_built_at_its_lengths_more(built, data) -> None:
    _check_symbolic_entry(built, data, lengths=3)


def _symbolic_writer(seq: tg.Dim) -> tg.Graph:
    """Writes its rows (1, seq, ACC) into state "acc_rows" (1, 8, ACC) at row 0."""
    g = tg.Graph("sym")
    x = g.input("x", (1, seq, ACC), tg.float32)
    w = g.param("w", (ACC,), tg.float32, WEIGHT)
    rows = g.state("acc_rows", (1, 8, ACC), tg.float32)
    updated = tg.slice_update(rows, x * w, 1, 0)
    g.update_state(rows, updated)
    g.output(tg.sum(updated, axis=1))
    return g


def _row_reader() -> tg.Graph:
    g = tg.Graph("read")
    rows = g.state("acc_rows", (1, 8, ACC), tg.float32)
    w = g.param("w", (ACC,), tg.float32, WEIGHT.copy())
    g.output(tg.sum(rows * w, axis=1))
    return g


def test_each_call_takes_the_arena_at_its_length_and_shares_the_weights() -> None:
    seq = tg.Dim("seq", min=1, max=8)
    multi = tg.compile({"sym": _symbolic_writer(seq), "read": _row_reader()})
    entry = multi.entries["sym"]
    sizes = {}
    for length in (1, 5, 8):
        x = np.arange(length * ACC, dtype=np.float32).reshape(1, length, ACC)
        state = multi.new_state("mlx")
        (total,) = multi.run("sym", {"x": x}, backend="mlx", state=state)
        (read,) = multi.run("read", {}, backend="mlx", state=state)
        np.testing.assert_allclose(np.asarray(total), (x * WEIGHT).sum(axis=1), rtol=1e-6)
        np.testing.assert_allclose(np.asarray(read), (x * WEIGHT * WEIGHT).sum(axis=1), rtol=1e-6)
        concrete = concrete_program(entry, {"seq": length}, mlx=True)
        assert concrete.plan.arena_size == entry.plan.at(seq=length).arena_size
        assert shared_of(concrete) is shared_of(entry)  # one device copy of "w" for all
        sizes[length] = concrete.plan.arena_size
    # the rows the entry holds grow with the length: the arena follows, up to the max
    assert sizes[1] <= sizes[5] <= sizes[8] == entry.plan.arena_size <= multi.arena_size
    converted = shared_of(entry).converted
    assert len({id(array) for array, _ in converted.values()}) == 1  # both entries' "w"


def test_a_symbolic_state_is_refused_in_a_multi_entry_program() -> None:
    seq = tg.Dim("seq", min=1, max=8)
    g = tg.Graph("sym")
    s = g.state("rows", (1, seq), tg.float32)
    g.update_state(s, s * 2.0)
    g.output(tg.sum(s))
    with pytest.raises(tg.PlanError, match=r"state 'rows' has shape \(1, seq\)"):
        tg.compile({"sym": g, "read": _row_reader()})


def test_a_state_declared_with_two_shapes_is_refused_with_a_symbolic_entry() -> None:
    seq = tg.Dim("seq", min=1, max=8)
    other = tg.Graph("read")
    rows = other.state("acc_rows", (1, 4, ACC), tg.float32)
    other.output(tg.sum(rows))
    with pytest.raises(tg.GraphError, match=r"acc_rows"):
        tg.compile({"sym": _symbolic_writer(seq), "read": other})


def test_a_program_with_a_symbolic_entry_saves_and_loads(tmp_path) -> None:
    seq = tg.Dim("seq", min=1, max=8)
    multi = tg.compile({"sym": _symbolic_writer(seq), "read": _row_reader()})
    multi.save(tmp_path / "p.tgp")
    loaded = tg.load(tmp_path / "p.tgp")
    assert sorted(loaded.entries) == ["read", "sym"]
    assert loaded.state_layout == multi.state_layout
    assert loaded.entries["sym"].graph.dims == multi.entries["sym"].graph.dims
    for length in (1, 5, 8):
        want = multi.entries["sym"].plan.at(seq=length)
        got = loaded.entries["sym"].plan.at(seq=length)
        assert (got.arena_size, got.buffer_offsets) == (want.arena_size, want.buffer_offsets)
        x = np.random.default_rng(length).standard_normal((1, length, ACC)).astype(np.float32)
        outs = []
        for program in (multi, loaded):
            state = program.state("arena")
            out = program.run("sym", {"x": x}, backend="arena", state=state)
            out += program.run("read", {}, backend="arena", state=state)
            outs.append([np.asarray(o) for o in out])
        for a, b in zip(*outs, strict=True):
            np.testing.assert_array_equal(a, b)


def test_a_call_outside_the_range_names_the_dim() -> None:
    seq = tg.Dim("seq", min=1, max=8)
    multi = tg.compile({"sym": _symbolic_writer(seq), "read": _row_reader()})
    state = multi.new_state("arena")
    with pytest.raises(
        tg.RunError,
        match=r"input 'x': axis 1 has length 9, the dim 'seq', outside its range \[1, 8\]",
    ):
        multi.run("sym", {"x": np.zeros((1, 9, ACC), np.float32)}, backend="arena", state=state)
    np.testing.assert_array_equal(state["acc_rows"], np.zeros((1, 8, ACC), np.float32))


def test_the_report_and_footprint_take_the_symbolic_entry_at_its_max() -> None:
    seq = tg.Dim("seq", min=1, max=8)
    multi = tg.compile({"sym": _symbolic_writer(seq), "read": _row_reader()})
    assert "(symbolic: seq in [1, 8]; sizes above at the max)" in multi.report()
    at_max = multi.entries["sym"].plan.at(seq=8).arena_size
    assert multi.arena_size == max(at_max, multi.entries["read"].plan.arena_size)
    # inputs and outputs of the largest call: x (1, 8, ACC) and its sum (1, ACC), float32
    assert multi.memory().io_size == 4 * (8 * ACC + ACC)
