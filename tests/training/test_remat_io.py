"""The rematerialisation report survives save/load (issue 27): a program compiled under
a memory budget loads with the very `remat` report it was saved with, runs as the saved
one did, and a tampered report is a LoadError naming the field."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

import tensorgraph as tg
from tensorgraph.ir.tensor import Tensor
from tensorgraph.models import mlp
from tensorgraph.remat import RematReport


def small_step() -> tg.Graph:
    graph = mlp(batch=256, features=32, hidden=64, layers=4, classes=5).graph
    out = graph.node(graph.outputs[0])
    g = tg.Graph.from_nodes(graph.name, graph.nodes, [], graph.param_values)
    g.output((Tensor(g, out.id) * Tensor(g, out.id)).sum())
    return tg.train_step(g, optimizer=tg.optim.SGD(learning_rate=0.01))


def rewrite_manifest(path, change) -> None:
    with zipfile.ZipFile(path) as archive:
        document = json.loads(archive.read("program.json"))
    change(document)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("program.json", json.dumps(document))


@pytest.fixture(scope="module")
def budgeted() -> tg.Program:
    step = small_step()
    keep = tg.compile(step)
    prog = tg.compile(step, memory_budget=int(keep.plan.arena_size * 0.9))
    assert prog.remat is not None and prog.remat.method != "keep-all"
    return prog


def test_the_remat_report_survives_save_and_load(budgeted, tmp_path):
    budgeted.save(tmp_path / "step.tgp")
    loaded = tg.load(tmp_path / "step.tgp")
    assert loaded.remat == budgeted.remat
    assert isinstance(loaded.remat.recomputed, tuple) and isinstance(loaded.remat.kept, tuple)
    rng = np.random.default_rng(0)
    feeds = {n.name: rng.uniform(-1, 1, n.shape).astype(np.float32) for n in loaded.graph.inputs}
    for _ in range(2):  # the loaded step trains exactly as the saved one
        ours = loaded.run(feeds, backend="arena")
        theirs = budgeted.run(feeds, backend="arena")
        assert all(np.array_equal(a, b) for a, b in zip(ours, theirs, strict=True))


def test_a_program_without_a_budget_loads_without_a_report(tmp_path):
    prog = tg.compile(small_step())
    prog.save(tmp_path / "plain.tgp")
    assert prog.remat is None and tg.load(tmp_path / "plain.tgp").remat is None


def test_a_file_without_the_report_field_loads_as_unbudgeted(budgeted, tmp_path):
    path = tmp_path / "old.tgp"
    budgeted.save(path)
    rewrite_manifest(path, lambda d: d.pop("remat"))
    assert tg.load(path).remat is None


@pytest.mark.parametrize(
    ("field", "value"),
    [("method", "magic"), ("recompute_flops", -1), ("kept", [1.5]), ("gap", "0"), ("arena", True)],
)
def test_a_tampered_report_is_a_load_error_naming_the_field(budgeted, tmp_path, field, value):
    path = tmp_path / "bad.tgp"
    budgeted.save(path)
    rewrite_manifest(path, lambda d: d["remat"].__setitem__(field, value))
    with pytest.raises(tg.LoadError, match=rf"bad\.tgp.*remat report field {field!r}"):
        tg.load(path)


def test_the_report_round_trips_through_json():
    report = RematReport(100, "milp", 42, (3, 5), (7,), 0.0, 96, 128, 0.25)
    assert RematReport.from_dict(json.loads(json.dumps(report.to_dict()))) == report
