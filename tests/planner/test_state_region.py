"""verify_plan covers the state region: every state inside it, aligned, no two sharing a
byte, planned where the layout puts it, on compile and on load (issue 23, item 1).

The oracle of the property test is the layout rule written here in plain Python, and
the NumPy reference backend, which keeps each state in its own array whatever the
layout says: a layout the verifier accepts must give the arena backend the same
states, bit for bit."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.planner.check import verify_state_layout

NAMES = ("a", "b", "c")


def _states_graph(lengths: tuple[int, ...]) -> tg.Graph:
    """States a, b, ... of float32 lengths `lengths`, each updated to itself plus its
    own multiple of the input's first elements, and an output reading every state."""
    g = tg.Graph("states")
    x = g.input("x", (max(lengths, default=1),), tg.float32)
    total = None
    for k, (name, length) in enumerate(zip(NAMES, lengths, strict=False)):
        s = g.state(name, (length,), tg.float32)
        g.update_state(s, s + tg.narrow(x, 0, 0, length) * float(k + 1))
        part = tg.sum(s)
        total = part if total is None else total + part
    g.output(total)
    return g


def test_overlapping_states_with_copied_updates_are_refused() -> None:
    """The fuzzer's case: without reinplace each update is copied over its state at the
    end of the call, and with a and b at one offset the arena wrote b's value over a's
    while numpy and MLX kept both."""
    g = _states_graph((4, 4))
    with pytest.raises(tg.PlanError, match=r"states 'a' \(bytes \[0, 16\)\) and 'b'.*overlap"):
        tg.compile(g, passes=(), states=({"a": 0, "b": 0}, 64))
    with pytest.raises(tg.PlanError, match=r"'a'.*'b'.*overlap"):
        tg.compile(g, passes=(), states=({"a": 0, "b": 8}, 64), alignment=8)


def test_misaligned_or_outside_states_and_a_bad_region_are_refused() -> None:
    g = _states_graph((4, 4))
    with pytest.raises(tg.PlanError, match=r"state 'b' \(bytes \[80, 96\)\) is not aligned to 64"):
        tg.compile(g, states=({"a": 0, "b": 80}, 128))
    with pytest.raises(tg.PlanError, match=r"state 'b' .*outside the state region of 64"):
        tg.compile(g, states=({"a": 0, "b": 64}, 64))
    with pytest.raises(tg.PlanError, match="state region's size must be an int >= 0"):
        tg.compile(g, states=({"a": 0, "b": 64}, -1))
    with pytest.raises(tg.PlanError, match="states must be a \\(layout"):
        tg.compile(g, states=({"a": "0", "b": 64}, 128))
    with pytest.raises(tg.PlanError, match="state layout has no 'b'"):
        tg.compile(g, states=({"a": 0}, 128))


@st.composite
def _layouts(draw: st.DrawFn) -> tuple:
    lengths = tuple(draw(st.lists(st.integers(0, 6), min_size=1, max_size=3)))
    alignment = draw(st.sampled_from([1, 4, 8, 16]))
    offsets = {n: draw(st.integers(0, 64)) for n in NAMES[: len(lengths)]}
    size = draw(st.integers(0, 96))
    passes = draw(st.sampled_from([(), ("view_alias",), tg.compiler.DEFAULT_PASSES]))
    return lengths, alignment, offsets, size, passes


def _sound(lengths: tuple[int, ...], alignment: int, offsets: dict, size: int) -> bool:
    """The layout rule, restated: aligned, inside, and byte sets pairwise disjoint."""
    taken: set[int] = set()
    for name, length in zip(NAMES, lengths, strict=False):
        low, high = offsets[name], offsets[name] + 4 * length
        if low % alignment or high > size or taken & set(range(low, high)):
            return False
        taken |= set(range(low, high))
    return True


@settings(max_examples=60, deadline=None)
@given(_layouts(), st.integers(0, 2**31 - 1))
def test_a_layout_is_accepted_exactly_when_sound_and_then_arena_equals_numpy(case, seed) -> None:
    lengths, alignment, offsets, size, passes = case
    g = _states_graph(lengths)
    sound = _sound(lengths, alignment, offsets, size)
    if not sound:
        with pytest.raises(tg.PlanError, match="state"):
            tg.compile(g, passes=passes, alignment=alignment, states=(offsets, size))
        return
    program = tg.compile(g, passes=passes, alignment=alignment, states=(offsets, size))
    rng = np.random.default_rng(seed)
    states = {be: program.new_state(be) for be in ("numpy", "arena")}
    for _ in range(2):
        x = rng.standard_normal(max(lengths)).astype(np.float32)
        got = {be: program.run({"x": x}, backend=be, state=states[be]) for be in states}
        assert got["arena"][0].tobytes() == got["numpy"][0].tobytes()
        for name in NAMES[: len(lengths)]:
            assert states["arena"][name].tobytes() == states["numpy"][name].tobytes()


def test_verify_state_layout_names_the_culprits() -> None:
    verify_state_layout({"a": 16, "b": 0, "c": 16}, {"a": 0, "b": 8, "c": 16, "z": 3}, 32, 8)
    with pytest.raises(tg.PlanError, match=r"'a'.*'c'.*overlap"):
        verify_state_layout({"a": 16, "c": 16}, {"a": 0, "c": 8}, 32)
    with pytest.raises(tg.PlanError, match=r"state 'a': offset must be an int but got 1\.0"):
        verify_state_layout({"a": 16}, {"a": 1.0}, 32)
    with pytest.raises(tg.PlanError, match="state 'a' has no offset"):
        verify_state_layout({"a": 16}, {}, 32)
    with pytest.raises(tg.PlanError, match=r"state 'a' \(bytes \[-16, 0\)\) lies outside"):
        verify_state_layout({"a": 16}, {"a": -16}, 32)


def _tampered(tmp_path, edit) -> object:
    """Save a two-state program, apply `edit` to its plan's record (given the program
    too), and return the path of the edited file."""
    path = tmp_path / "p.tgp"
    program = tg.compile(_states_graph((4, 4)), passes=())
    program.save(path)
    with zipfile.ZipFile(path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    document = json.loads(members["program.json"])
    edit(document["plan"], program)
    members["program.json"] = json.dumps(document).encode()
    bad = tmp_path / "bad.tgp"
    with zipfile.ZipFile(bad, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return bad


def _overlap(plan: dict, program: tg.Program) -> None:
    plan["state_layout"]["b"] = plan["state_layout"]["a"]


def _outside(plan: dict, program: tg.Program) -> None:
    plan["state_size"] = plan["state_layout"]["b"] + 8  # b's last 8 bytes past the end


def _misaligned(plan: dict, program: tg.Program) -> None:
    plan["state_layout"]["b"] += 16  # inside the region, clear of a, off the 64-byte grid
    plan["state_size"] += 64


def _in_the_arena(plan: dict, program: tg.Program) -> None:
    state = program.graph.states[0]  # given an arena offset: its bytes would move there
    plan["buffer_offsets"].append([state.id, 0])


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (_overlap, r"states 'a' \(bytes \[0, 16\)\) and 'b' \(bytes \[0, 16\)\) overlap"),
        (_outside, r"state 'b' \(bytes \[64, 80\)\) lies outside the state region of 72 bytes"),
        (_misaligned, r"state 'b' \(bytes \[80, 96\)\) is not aligned to 64 bytes"),
        (_in_the_arena, r"%\d+ state 'a': planned at arena\+0, not at its state layout offset 0"),
    ],
)
def test_a_tampered_state_layout_in_a_file_is_refused(tmp_path, edit, message) -> None:
    bad = _tampered(tmp_path, edit)
    with pytest.raises(tg.LoadError, match=r"bad\.tgp: the saved program is not sound") as err:
        tg.load(bad)
    assert isinstance(err.value.__cause__, tg.PlanError)
    assert err.match(message)


def test_a_multi_entry_layout_is_checked_across_entries() -> None:
    """Entry one declares only a, entry two only b: neither entry's own check sees the
    other's state, so the program's check must."""
    one, two = tg.Graph("one"), tg.Graph("two")
    for g, name in ((one, "a"), (two, "b")):
        s = g.state(name, (4,), tg.float32)
        g.update_state(s, s + g.input("x", (4,), tg.float32))
        g.output(tg.sum(s))
    entries = {
        "one": tg.compile(one, states=({"a": 0, "b": 0}, 64)),
        "two": tg.compile(two, states=({"a": 0, "b": 0}, 64)),
    }
    with pytest.raises(tg.PlanError, match=r"'a'.*'b'.*overlap"):
        tg.MultiProgram.assemble(entries)


def test_an_arena_state_laid_out_by_another_program_is_refused() -> None:
    """Same states, same region size, swapped offsets: the arena executor writes by the
    running program's plan, so the State would read a's bytes as b's."""
    g = _states_graph((4, 4))
    first = tg.compile(g, states=({"a": 0, "b": 64}, 128))
    swapped = tg.compile(g, states=({"a": 64, "b": 0}, 128))
    state = first.new_state("arena")
    x = np.arange(4, dtype=np.float32)
    with pytest.raises(tg.RunError, match=r"state 'a' lies at offset 0 .* plan puts it at 64"):
        swapped.run({"x": x}, backend="arena", state=state)
    assert not state.region.any()
    for backend in ("numpy", "mlx"):  # states by name: any program's State of them serves
        other = first.new_state(backend)
        swapped.run({"x": x}, backend=backend, state=other)
        np.testing.assert_array_equal(other["b"], 2 * x)
