"""Saving and loading symbolic programs (tensorgraph/program_io.py): the dims' ranges and
the parametric plan's orientations round-trip, so a loaded program gives the same
`plan.at(...)` at every length and runs bit for bit as the saved one."""

from __future__ import annotations

import json
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.planner.parametric import ParametricPlan
from tensorgraph.runtime import run_reference
from tests.planner.symbolic_models import symbolic_llama
from tests.strategies import DIMS, feeds, symbolic_graphs

SEQ, KV = DIMS


def _same_plan(a: object, b: object) -> None:
    assert a.arena_size == b.arena_size and a.lower_bound == b.lower_bound
    assert a.offsets == b.offsets and a.buffer_offsets == b.buffer_offsets
    assert a.constant_size == b.constant_size


def _same(got: list, expected: list) -> None:
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        assert np.array_equal(a, b, equal_nan=True)


def _round_trip(prog: object, folder: Path) -> object:
    prog.save(folder / "p.tgp")
    return tg.load(folder / "p.tgp")


@settings(max_examples=12)
@given(symbolic_graphs(max_ops=6), st.booleans(), st.data())
def test_a_saved_symbolic_program_plans_and_runs_every_length_as_the_original(
    built: tuple, bind: bool, data: st.DataObject
) -> None:
    graph, rebuild = built
    if bind:  # static params bound go to the weights file; the others stay feeds
        rng = np.random.default_rng(len(graph))
        for node in graph.params:
            if all(type(d) is int for d in node.shape):
                graph.bind(node.name, rng.uniform(-2, 2, node.shape).astype(np.float32))
    prog = tg.compile(graph)
    with tempfile.TemporaryDirectory() as folder:
        loaded = _round_trip(prog, Path(folder))
    if not isinstance(prog.plan, ParametricPlan):  # the rewrites removed every dim
        assert not isinstance(loaded.plan, ParametricPlan)
        return
    assert isinstance(loaded.plan, ParametricPlan)
    assert loaded.plan.dims == prog.plan.dims
    assert [d.describe() for d in loaded.plan.dims.values()] == [
        d.describe() for d in prog.plan.dims.values()
    ]
    assert [o.ranked for o in loaded.plan.orientations] == [
        o.ranked for o in prog.plan.orientations
    ]
    for _ in range(2):
        lengths = data.draw(
            st.fixed_dictionaries({n: st.integers(d.min, d.max) for n, d in graph.dims.items()})
        )
        _same_plan(loaded.plan.at(**lengths), prog.plan.at(**lengths))
        static = rebuild(lengths.get("seq", SEQ.min), lengths.get("kv", KV.min))
        inputs, params = feeds(static, seed=sum(lengths.values()))
        params = {k: v for k, v in params.items() if k not in graph.param_values}
        for name, value in graph.param_values.items():
            static.bind(name, value)
        got = loaded.run(inputs, params, backend="arena")
        _same(got, prog.run(inputs, params, backend="arena"))
        _same(got, run_reference(static, inputs, params))


def test_the_zoo_llama_saved_over_seq_loads_with_its_weights_and_every_length(
    tmp_path: Path,
) -> None:
    from tensorgraph.models.llama import LlamaConfig

    c = LlamaConfig(layers=1, dim=64, hidden=192, vocab=128)
    prog = tg.compile(symbolic_llama(c, tg.Dim("seq", min=1, max=256)))
    loaded = _round_trip(prog, tmp_path)
    assert (tmp_path / "p.safetensors").is_file()
    assert loaded.plan.dims["seq"].describe() == "seq in [1, 256]"
    for length in (1, 2, 17, 100, 255, 256):
        _same_plan(loaded.plan.at(seq=length), prog.plan.at(seq=length))
    for length in (3, 64):
        ids = np.random.default_rng(length).integers(0, c.vocab, (c.batch, length))
        feeds_ = {"tokens": ids.astype(np.int32)}
        expected = prog.run(feeds_, backend="arena")
        _same(loaded.run(feeds_, backend="arena"), expected)
        (on_mlx,) = loaded.run(feeds_, backend="mlx")
        np.testing.assert_allclose(on_mlx, expected[0], rtol=1e-4, atol=1e-4)
    with pytest.raises(tg.RunError, match=r"length 257.*seq.*\[1, 256\]"):
        loaded.run({"tokens": np.zeros((c.batch, 257), np.int32)}, backend="arena")


def _rewrite(path: Path, change: object) -> None:
    with zipfile.ZipFile(path) as archive:
        document = json.loads(archive.read("program.json"))
    change(document)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("program.json", json.dumps(document))


def _two_rates() -> tg.Graph:
    seq = tg.Dim("seq", min=1, max=12)
    g = tg.Graph("rates")
    x = g.input("x", (seq, 1), tg.float32)
    square = tg.exp(x @ tg.reshape(x, (1, seq)))
    g.output(tg.sum(tg.narrow(tg.reshape(square, (seq * seq,)), 0, seq, seq * seq - seq)))
    return g


def test_a_ranking_missing_a_buffer_is_a_load_error_naming_the_orientation(
    tmp_path: Path,
) -> None:
    tg.compile(_two_rates()).save(tmp_path / "p.tgp")
    _rewrite(tmp_path / "p.tgp", lambda d: d["plan"]["orientations"][0]["ranked"].pop())
    with pytest.raises(tg.LoadError, match=r"p\.tgp.*orientation 0 ranks other buffers"):
        tg.load(tmp_path / "p.tgp")


def test_a_reversed_ranking_is_still_proven_safe_at_every_length(tmp_path: Path) -> None:
    # Any ranking orients every conflicting pair acyclically: a tampered one may plan
    # worse, never unsafely (verify_parametric proves it, plan.at verifies each length).
    prog = tg.compile(_two_rates())
    prog.save(tmp_path / "p.tgp")
    _rewrite(tmp_path / "p.tgp", lambda d: d["plan"]["orientations"][0]["ranked"].reverse())
    loaded = tg.load(tmp_path / "p.tgp")
    for length in range(1, 13):
        at = loaded.plan.at(seq=length)
        assert at.lower_bound <= at.arena_size
        x = np.linspace(-1, 1, length, dtype=np.float32).reshape(length, 1)
        _same(loaded.run({"x": x}, backend="arena"), prog.run({"x": x}, backend="arena"))


def test_a_dim_range_changed_in_the_file_is_a_load_error(tmp_path: Path) -> None:
    # The stored offsets are the static plan at the max: another max moves the sizes,
    # and the file no longer matches (never a plan for the wrong range).
    tg.compile(_two_rates()).save(tmp_path / "p.tgp")

    def widen(document: dict) -> None:
        assert document["graph"]["dims"] == [{"name": "seq", "min": 1, "max": 12}]
        document["graph"]["dims"][0]["max"] = 40

    _rewrite(tmp_path / "p.tgp", widen)
    with pytest.raises(tg.LoadError, match=r"p\.tgp"):
        tg.load(tmp_path / "p.tgp")


def test_a_symbolic_program_with_a_static_state_resumes_from_the_saved_state(
    tmp_path: Path,
) -> None:
    seq = tg.Dim("seq", min=1, max=16)
    g = tg.Graph("running")
    total = g.state("total", (4,), tg.float32)
    x = g.input("x", (seq, 4), tg.float32)
    g.update_state(total, total + tg.sum(x, axis=0))
    g.output(total * 2.0)
    prog = tg.compile(g)
    state = prog.new_state("arena")
    for length in (3, 9):
        prog.run({"x": np.ones((length, 4), np.float32)}, backend="arena", state=state)
    prog.save(tmp_path / "p.tgp", state=state)
    loaded = tg.load(tmp_path / "p.tgp")
    np.testing.assert_array_equal(loaded.new_state("arena")["total"], np.full(4, 12.0))
    (doubled,) = loaded.run({"x": np.ones((5, 4), np.float32)}, backend="arena")
    np.testing.assert_array_equal(doubled, np.full(4, 24.0))  # read before the update
    np.testing.assert_array_equal(loaded.state("arena")["total"], np.full(4, 17.0))
    with pytest.raises(tg.SaveError, match=r"state must be a State"):
        prog.save(tmp_path / "bad.tgp", state={"total": np.zeros(4, np.float32)})
