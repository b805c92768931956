"""A failed call leaves every state exactly as it was, on every backend (issue 23, item
2), whichever way its cache position comes: fed as a small input (checked on the host),
kept in a state (read and checked on the host), or read out of an input too large for
the host checks (checked on the device only).

The reference is a plain NumPy loop written here: a cache of LENGTH rows, a position
counter, and the rule that a write of `rows` rows at `start` is valid when
0 <= start <= LENGTH - rows."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.runtime.state import HOST_LIMIT

BACKENDS = ("numpy", "arena", "mlx")
LENGTH, WIDTH = 8, 2
ROWS = {"input": 2, "state": 1, "large": 3}  # rows each path's entry writes per call


def position_of(g: tg.Graph, path: str, rows: int) -> tg.Tensor:
    """A write position added to `g`: "input": input pos; "state": state "pos",
    advanced by `rows` each call; "large": element 0 of an input of HOST_LIMIT + 1
    elements (too large for the host checks, so the device guards it)."""
    if path == "input":
        return g.input("pos", (), tg.int32)
    if path == "state":
        pos = g.state("pos", (), tg.int32)
        g.update_state(pos, pos + g.constant(np.int32(rows)))
        return pos
    big = g.input("big", (HOST_LIMIT + 1,), tg.int32)
    return tg.take(big, g.constant(np.int32(0)), 0)


def _kv(path: str) -> tg.Graph:
    """Writes ROWS[path] rows of input x into state "cache" at a position taken from
    `path` ("input": input pos; "state": state "pos", advanced by the rows written;
    "large": element 0 of an input of HOST_LIMIT + 1 elements); returns the new cache's
    column sums."""
    rows = ROWS[path]
    g = tg.Graph(path)
    cache = g.state("cache", (LENGTH, WIDTH), tg.float32)
    x = g.input("x", (rows, WIDTH), tg.float32)
    pos = position_of(g, path, rows)
    new = tg.slice_update(cache, x, 0, pos)
    g.update_state(cache, new)
    g.output(tg.sum(new, axis=0))
    return g


def _seek() -> tg.Graph:
    """Sets state "pos" to input `to` (any value: the next "state" call checks it)."""
    g = tg.Graph("seek")
    pos = g.state("pos", (), tg.int32)
    g.update_state(pos, g.input("to", (), tg.int32))
    g.output(pos + g.constant(np.int32(0)))
    return g


@functools.cache
def _program() -> tg.MultiProgram:
    return tg.compile({**{p: _kv(p) for p in ROWS}, "seek": _seek()})


def _feeds(path: str, value: int, x: np.ndarray) -> dict[str, np.ndarray]:
    feeds = {"x": x}
    if path == "input":
        feeds["pos"] = np.int32(value)
    elif path == "large":
        feeds["big"] = np.full(HOST_LIMIT + 1, value, np.int32)
    return feeds


@pytest.mark.parametrize("path", sorted(ROWS))
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_position_past_the_cache_fails_and_changes_no_state(path, backend) -> None:
    program = tg.compile(_kv(path))
    state = program.new_state(backend)
    rows = ROWS[path]
    first = np.full((rows, WIDTH), 5, np.float32)
    program.run(_feeds(path, 4, first), backend=backend, state=state)
    if path == "state":  # advance the counter until the next write would not fit
        while int(state["pos"]) + rows <= LENGTH:
            program.run(_feeds(path, 0, first), backend=backend, state=state)
    before = {name: state[name] for name in state.names}
    start = int(before["pos"]) if path == "state" else LENGTH - rows + 1
    x = np.full((rows, WIDTH), 7, np.float32)
    for _ in range(2):  # the second call fails alike: no silent restart at position 0
        with pytest.raises(
            tg.RunError, match=f"start {start} \\+ {rows} rows is past the length 8"
        ):
            program.run(_feeds(path, start, x), backend=backend, state=state)
        for name, value in before.items():
            np.testing.assert_array_equal(state[name], value)
    if path != "state":  # the state is still usable: a valid call writes where it says
        program.run(_feeds(path, 0, x), backend=backend, state=state)
        want = before["cache"].copy()
        want[:rows] = 7
        np.testing.assert_array_equal(state["cache"], want)


@st.composite
def _calls(draw: st.DrawFn) -> list[tuple[str, int, int]]:
    """(entry, position or seek target, seed of x): valid and invalid positions mixed."""
    entry = st.sampled_from([*sorted(ROWS), "seek"])
    value = st.integers(-3, LENGTH + 2)
    seed = st.integers(0, 2**31 - 1)
    return draw(st.lists(st.tuples(entry, value, seed), min_size=1, max_size=8))


@given(_calls(), st.sampled_from(["auto", "eager", "compiled"]))
def test_interleaved_valid_and_failed_calls_keep_every_state_equal_to_a_reference(
    calls, mode
) -> None:
    multi = _program()
    states = {be: multi.new_state(be) for be in BACKENDS}
    cache, counter = np.zeros((LENGTH, WIDTH), np.float32), 0
    for entry, value, seed in calls:
        if entry == "seek":
            counter = value
            for be in BACKENDS:
                multi.run("seek", {"to": np.int32(value)}, backend=be, state=states[be])
        else:
            rows = ROWS[entry]
            start = counter if entry == "state" else value
            x = np.random.default_rng(seed).standard_normal((rows, WIDTH)).astype(np.float32)
            feeds = _feeds(entry, value, x)
            options = {be: {"mode": mode} if be == "mlx" else {} for be in BACKENDS}
            if 0 <= start <= LENGTH - rows:
                cache[start : start + rows] = x
                counter += rows if entry == "state" else 0
                for be in BACKENDS:
                    out = multi.run(entry, feeds, backend=be, state=states[be], **options[be])
                    np.testing.assert_allclose(out[0], cache.sum(axis=0), rtol=1e-6, atol=1e-6)
            else:
                for be in BACKENDS:
                    with pytest.raises(tg.RunError, match=f"start {start} "):
                        multi.run(entry, feeds, backend=be, state=states[be], **options[be])
        for be in BACKENDS:
            np.testing.assert_array_equal(states[be]["cache"], cache)
            np.testing.assert_array_equal(states[be]["pos"], np.int32(counter))
