"""Safe by construction: any graph, any options, any pass list, recompiled or reloaded,
gives a plan the verifier and the replay accept and an arena run equal to the reference
bit for bit. The issue's failures each have a regression test here."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.passes import REWRITES
from tensorgraph.planner.aliasing import ANALYSES
from tensorgraph.planner.assign import ALGORITHMS
from tensorgraph.planner.replay import replay
from tensorgraph.planner.schedule import STRATEGIES
from tensorgraph.runtime.reference import run_reference
from tests.strategies import chains, feeds, graphs

PASS_NAMES = (*REWRITES, *ANALYSES)


@st.composite
def options(draw: st.DrawFn) -> dict[str, object]:
    """Every option combination a user can pass: any pass subset in any order, every
    schedule and planner, alignment 1..4096, params in the arena, a tail guard."""
    passes = draw(st.permutations(PASS_NAMES))[: draw(st.integers(0, len(PASS_NAMES)))]
    return {
        "passes": tuple(passes),
        "schedule": draw(st.sampled_from(STRATEGIES)),
        "planner": draw(st.sampled_from(sorted(ALGORITHMS))),
        "alignment": 2 ** draw(st.integers(0, 12)),
        "params_in_arena": draw(st.booleans()),
        "tail_guard": draw(st.sampled_from((0, 4, 64))),
    }


def assert_exact(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        assert g.tobytes() == w.tobytes(), "arena and reference differ in some bit"


def check_program(prog: tg.Program, graph: tg.Graph) -> None:
    """The replay accepts the plan and the arena equals the reference bit for bit."""
    replay(prog.graph, prog.plan, prog.aliasing)
    inputs, params = feeds(graph, seed=3)
    want = run_reference(graph, inputs, params)
    assert_exact(prog.run(inputs, params, backend="arena"), want)


def safe_under_every_option(graph: tg.Graph, first: dict, second: dict, tmp_path) -> None:
    prog = tg.compile(graph, **first)
    check_program(prog, graph)
    # Recompiling the compiled graph (through JSON, as a file would) under other
    # options: nothing of the first compile's memory decisions can leak into it.
    again = tg.compile(tg.Graph.from_json(prog.graph.to_json()), **second)
    check_program(again, graph)
    path = tmp_path / "p.tgp"
    prog.save(path)
    loaded = tg.load(path)
    assert loaded.order == prog.order and loaded.aliasing == prog.aliasing
    assert dict(loaded.plan.offsets) == dict(prog.plan.offsets)
    check_program(loaded, graph)


@settings(max_examples=60)
@given(graph=st.one_of(graphs(), chains()), first=options(), second=options())
def test_any_graph_and_options_give_a_verified_exact_plan(graph, first, second, tmp_path_factory):
    safe_under_every_option(graph, first, second, tmp_path_factory.mktemp("safe"))


@pytest.mark.slow
@settings(max_examples=5000)
@given(graph=st.one_of(graphs(), chains()), first=options(), second=options())
def test_any_graph_and_options_slow(graph, first, second, tmp_path_factory):
    safe_under_every_option(graph, first, second, tmp_path_factory.mktemp("safe"))


# ---------------------------------------------------------------- regressions


def hazard_graph() -> tg.Graph:
    """A value read by a later non-mutated operand: reinplace must wait for that read."""
    g = tg.Graph("hazard")
    x, y, z = (g.input(n, (8, 8)) for n in "xyz")
    t = tg.exp(x)
    a = t + y
    b = tg.exp(z) + t
    g.output(a * b, t.reshape(64))
    return g


@pytest.mark.parametrize(
    "passes",
    [("reinplace", "view_alias"), ("reinplace", "cse"), ("dce", "reinplace", "cse", "view_alias")],
)
def test_non_default_pass_orders_are_safe(passes) -> None:
    g = hazard_graph()
    prog = tg.compile(g, passes=passes)
    check_program(prog, g)
    assert prog.aliasing == tg.compile(g, passes=tuple(sorted(passes))).aliasing


@pytest.mark.parametrize("schedule", STRATEGIES)
def test_recompiling_a_compiled_graph_in_another_order_is_safe(schedule) -> None:
    g = hazard_graph()
    prog = tg.compile(g, schedule="program")
    assert prog.aliasing.count("inplace") > 0
    again = tg.compile(tg.Graph.from_json(prog.graph.to_json()), schedule=schedule)
    check_program(again, g)


@pytest.mark.parametrize("attribute", ["inplace", "view"])
def test_a_memory_mark_in_a_json_file_is_refused(attribute) -> None:
    g = tg.Graph("marked")
    x = g.input("x", (4,))
    g.output(tg.exp(x))
    document = json.loads(g.to_json())
    exp = next(n for n in document["nodes"] if n["op"] == "exp")
    exp["attrs"].append([attribute, 0 if attribute == "inplace" else True])
    with pytest.raises(tg.GraphError, match=rf"unknown attribute\(s\) \['{attribute}'\]"):
        tg.Graph.from_json(json.dumps(document))


def test_zero_size_buffers_compile_verify_and_run() -> None:
    g = tg.Graph("empty")
    x = g.input("x", (0, 4))
    e = tg.exp(x)
    g.output(tg.tanh(e), e.sum(axis=0))
    for planner in sorted(ALGORITHMS):
        prog = tg.compile(g, planner=planner, debug=True)
        out = prog.run({"x": np.zeros((0, 4), np.float32)}, backend="arena")
        assert out[0].shape == (0, 4)
        np.testing.assert_array_equal(out[1], np.zeros(4, np.float32))


# ---------------------------------------------------------------- save / load


def test_a_corrupt_or_truncated_file_is_a_load_error(tmp_path) -> None:
    g = hazard_graph()
    path = tmp_path / "p.tgp"
    tg.compile(g).save(path)
    data = path.read_bytes()
    (tmp_path / "short.tgp").write_bytes(data[: len(data) // 2])
    with pytest.raises(tg.LoadError, match=r"short\.tgp: cannot read"):
        tg.load(tmp_path / "short.tgp")
    flipped = bytearray(data)
    flipped[40] ^= 0xFF  # inside the first member's stored bytes
    (tmp_path / "flip.tgp").write_bytes(bytes(flipped))
    with pytest.raises(tg.LoadError, match=r"flip\.tgp"):
        tg.load(tmp_path / "flip.tgp")
    with pytest.raises(tg.LoadError, match="no such program file"):
        tg.load(tmp_path / "missing.tgp")
    (tmp_path / "text.tgp").write_text("not a program")
    with pytest.raises(tg.LoadError, match=r"text\.tgp: cannot read"):
        tg.load(tmp_path / "text.tgp")


def test_a_tampered_plan_in_a_file_is_refused(tmp_path) -> None:
    import zipfile

    g = hazard_graph()
    path = tmp_path / "p.tgp"
    tg.compile(g).save(path)
    with zipfile.ZipFile(path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    document = json.loads(members["program.json"])
    offsets = document["plan"]["buffer_offsets"]
    for pair in offsets:
        pair[1] = 0  # every buffer at offset 0: live buffers now overlap
    members["program.json"] = json.dumps(document).encode()
    with zipfile.ZipFile(tmp_path / "bad.tgp", "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    with pytest.raises(tg.LoadError, match=r"bad\.tgp: .*(not sound|arena of)"):
        tg.load(tmp_path / "bad.tgp")
