"""State: persistent buffers read and updated in place across calls, on every backend.

The reference for every property is a plain NumPy cache kept by the test itself: a
call writing rows [p, p + L) of the cache with `update` leaves cache[..., p:p+L, :] =
update, and its output is computed from the new cache with NumPy directly."""

from __future__ import annotations

import numpy as np
import pytest
import safetensors.numpy
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.planner.report import copied_states
from tensorgraph.runtime.state import HOST_LIMIT

BACKENDS = ("numpy", "arena", "mlx")


def _writer(name: str, shape: tuple[int, ...], rows: int, start: int) -> tg.Graph:
    """An entry writing `rows` rows of the input (times a bound weight) at `start` of
    state "cache" along axis 2, returning the sum over axis 2 of the new cache and the
    row sums of the old one's first row (a read of the old value before the update)."""
    b, h, _, d = shape
    g = tg.Graph(name)
    cache = g.state("cache", shape, tg.float32)
    x = g.input("x", (b, h, rows, d), tg.float32)
    w = g.param("w", (d, d), tg.float32, np.arange(d * d, dtype=np.float32).reshape(d, d) / 8)
    new = tg.slice_update(cache, x @ w, 2, start)
    g.update_state(cache, new)
    g.output(tg.sum(new, axis=2))
    return g


def _expected(cache: np.ndarray, x: np.ndarray, start: int, d: int) -> np.ndarray:
    w = np.arange(d * d, dtype=np.float32).reshape(d, d) / 8
    cache[:, :, start : start + x.shape[2]] = x @ w
    return cache.sum(axis=2)


@st.composite
def _scenario(draw: st.DrawFn) -> tuple:
    b, h = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    length, d = draw(st.integers(2, 12)), draw(st.sampled_from([2, 4, 8]))
    entries = {}
    for k in range(draw(st.integers(1, 4))):
        rows = draw(st.integers(1, length))
        start = draw(st.integers(0, length - rows))
        entries[f"e{k}"] = (rows, start)
    calls = draw(st.lists(st.sampled_from(sorted(entries)), min_size=1, max_size=6))
    return (b, h, length, d), entries, calls


@settings(max_examples=25, deadline=None)
@given(_scenario(), st.integers(0, 2**31 - 1))
def test_state_after_every_call_equals_a_reference_cache(scenario, seed) -> None:
    shape, entries, calls = scenario
    b, h, _, d = shape
    graphs = {n: _writer(n, shape, rows, start) for n, (rows, start) in entries.items()}
    multi = tg.compile(graphs)
    for program in multi.entries.values():  # the default passes update in place
        assert copied_states(program.plan, program.graph) == []
        assert program.plan.state_layout == multi.state_layout
    rng = np.random.default_rng(seed)
    feeds = [rng.standard_normal((b, h, entries[n][0], d)).astype(np.float32) for n in calls]
    states = {be: multi.new_state(be) for be in BACKENDS}
    cache = np.zeros(shape, np.float32)
    for name, x in zip(calls, feeds, strict=True):
        want = _expected(cache, x, entries[name][1], d)
        got = {be: multi.run(name, {"x": x}, backend=be, state=states[be]) for be in BACKENDS}
        np.testing.assert_array_equal(got["arena"][0], got["numpy"][0])
        np.testing.assert_array_equal(states["arena"]["cache"], states["numpy"]["cache"])
        np.testing.assert_allclose(got["numpy"][0], want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got["mlx"][0], want, rtol=1e-5, atol=1e-5)
        for be in BACKENDS:
            np.testing.assert_allclose(states[be]["cache"], cache, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_without_reinplace_the_update_is_copied_and_still_correct(backend) -> None:
    shape = (1, 2, 6, 4)
    program = tg.compile(_writer("w", shape, 2, 3), passes=("dce", "cse"))
    assert copied_states(program.plan, program.graph) == ["cache"]
    assert "1 copied" in program.report()
    cache = np.zeros(shape, np.float32)
    for step in range(3):
        x = np.full((1, 2, 2, 4), step + 1, np.float32)
        got = program.run({"x": x}, backend=backend)
        np.testing.assert_allclose(got[0], _expected(cache, x, 3, 4), rtol=1e-6)
    np.testing.assert_allclose(program.state(backend)["cache"], cache, rtol=1e-6)
    program.reset_state()
    assert not program.state(backend)["cache"].any()


def test_read_only_state_is_never_written() -> None:
    """A graph that reads a state without updating it may not write its bytes, even
    where the state's last reader is elementwise (reinplace refuses the state)."""
    g = tg.Graph("reader")
    cache = g.state("cache", (8,), tg.float32)
    g.output(tg.exp(cache) + 1.0)
    program = tg.compile(g)
    assert not any(a.source == cache.id for a in program.aliasing.aliases.values())
    state = program.new_state("arena")
    state.view("cache")[...] = np.arange(8, dtype=np.float32)
    out = program.run({}, backend="arena", state=state)
    np.testing.assert_allclose(out[0], np.exp(np.arange(8, dtype=np.float32)) + 1.0, rtol=1e-6)
    np.testing.assert_array_equal(state["cache"], np.arange(8, dtype=np.float32))


def test_old_value_read_after_the_update_is_kept_intact() -> None:
    """`new = old + x` while `old * 2` is also returned: whatever the order, the output
    reads the old value (2 * old), never the new one."""
    g = tg.Graph("both")
    s = g.state("s", (4,), tg.float32)
    x = g.input("x", (4,), tg.float32)
    g.update_state(s, s + x)
    g.output(s * 2.0)
    program = tg.compile(g)
    ones = np.ones(4, np.float32)
    for backend in BACKENDS:
        state = program.new_state(backend)
        outs = [program.run({"x": ones}, backend=backend, state=state)[0] for _ in range(3)]
        np.testing.assert_allclose(np.stack(outs)[:, 0], [0.0, 2.0, 4.0])
        np.testing.assert_allclose(state["s"], 3 * ones)


def test_bad_state_use_is_a_clear_error() -> None:
    g = tg.Graph("g")
    s = g.state("s", (2, 3), tg.float32)
    x = g.input("x", (2, 3), tg.float32)
    with pytest.raises(tg.ShapeError, match="state 's' is \\(2, 3\\)"):
        g.update_state(s, tg.sum(x, axis=0))
    with pytest.raises(tg.DTypeError, match="state 's'"):
        g.update_state(s, x.astype(tg.int32))
    with pytest.raises(tg.GraphError, match="not a state"):
        g.update_state("x", x)
    g.update_state(s, x)
    with pytest.raises(tg.GraphError, match="already updated"):
        g.update_state(s, x + 1.0)
    program = tg.compile(g)
    with pytest.raises(tg.RunError, match="made for backend 'numpy'"):
        program.run(
            {"x": np.ones((2, 3), np.float32)}, backend="arena", state=program.new_state("numpy")
        )
    plain = tg.Graph("plain")
    plain.output(plain.input("y", (2,), tg.float32) + 1.0)
    with pytest.raises(tg.RunError, match="has no states"):
        tg.compile(plain).run(
            {"y": np.ones(2, np.float32)}, backend="numpy", state=program.new_state("numpy")
        )
    other = tg.Graph("other")
    other.update_state(other.state("s", (3, 2), tg.float32), other.input("z", (3, 2), tg.float32))
    with pytest.raises(tg.GraphError, match="state 's' is \\(2, 3\\) float32 in graph 'g'"):
        tg.compile({"a": g, "b": other})
    with pytest.raises(tg.RunError, match="no entry 'c'"):
        tg.compile({"a": g}).run("c", {})


def _failing(rows: int) -> tg.Graph:
    """Updates the state, then takes from it at an index computed from a large input
    (too large to check on the host): an out-of-range index fails after the update."""
    g = tg.Graph("failing")
    s = g.state("s", (4, 2), tg.float32)
    big = g.input("big", (HOST_LIMIT + 1,), tg.int32)
    new = tg.slice_update(s, g.input("x", (rows, 2), tg.float32), 0, 0)
    g.update_state(s, new)
    index = tg.take(big, g.constant(np.int32(0)), 0)
    g.output(tg.take(new, index, 0))
    return g


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_failed_call_leaves_the_state_as_it_was(backend) -> None:
    """The failing index is checked on the device only, after the update: MLX keeps
    the old array (no donation) and commits nothing (it reset the state to zeros)."""
    program = tg.compile(_failing(1))
    state = program.new_state(backend)
    ok = np.zeros(HOST_LIMIT + 1, np.int32)
    program.run({"big": ok, "x": np.full((1, 2), 5, np.float32)}, backend=backend, state=state)
    bad = np.full(HOST_LIMIT + 1, 9, np.int32)
    with pytest.raises(tg.RunError, match="index 9 is out of range for axis 0 of size 4"):
        program.run({"big": bad, "x": np.full((1, 2), 7, np.float32)}, backend=backend, state=state)
    np.testing.assert_array_equal(state["s"][0], [5.0, 5.0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_index_from_inputs_is_checked_before_anything_is_written(backend) -> None:
    g = tg.Graph("tokens")
    s = g.state("s", (3, 2), tg.float32)
    table = g.param("table", (5, 2), tg.float32, np.arange(10, dtype=np.float32).reshape(5, 2))
    token = g.input("token", (1,), tg.int32)
    new = tg.slice_update(s, tg.take(table, token, 0), 0, 1)
    g.update_state(s, new)
    g.output(tg.sum(new))
    program = tg.compile(g)
    state = program.new_state(backend)
    program.run({"token": np.array([4], np.int32)}, backend=backend, state=state)
    with pytest.raises(tg.RunError, match="index 7 is out of range for axis 0 of size 5"):
        program.run({"token": np.array([7], np.int32)}, backend=backend, state=state)
    np.testing.assert_array_equal(state["s"], [[0, 0], [8, 9], [0, 0]])


def test_save_and_load_keep_every_entry_and_store_shared_weights_once(tmp_path) -> None:
    shape = (1, 2, 8, 4)
    multi = tg.compile({"prefill": _writer("p", shape, 4, 0), "decode": _writer("d", shape, 1, 4)})
    path = tmp_path / "gen.tgp"
    multi.save(path)
    weights = safetensors.numpy.load_file(tmp_path / "gen.safetensors")
    assert list(weights) == ["w"]  # "w" is bound in both entries, stored once
    loaded = tg.load(path)
    assert isinstance(loaded, tg.MultiProgram)
    assert loaded.state_layout == multi.state_layout
    for name in multi.entries:
        assert loaded.entries[name].plan.offsets == multi.entries[name].plan.offsets
        assert loaded.entries[name].graph == multi.entries[name].graph
    a, b = multi.new_state("arena"), loaded.new_state("arena")
    for entry, rows in (("prefill", 4), ("decode", 1)):
        x = np.full((1, 2, rows, 4), rows, np.float32)
        np.testing.assert_array_equal(
            multi.run(entry, {"x": x}, backend="arena", state=a)[0],
            loaded.run(entry, {"x": x}, backend="arena", state=b)[0],
        )
    np.testing.assert_array_equal(a.region, b.region)


def test_graph_json_round_trips_state_updates() -> None:
    g = _writer("w", (1, 1, 4, 2), 1, 2)
    again = tg.Graph.from_json(g.to_json())
    assert again == g
    assert again.state_updates == g.state_updates
    assert again.returned == g.returned and len(again.outputs) == 2
    assert "state 'cache' <-" in str(again)


def test_multi_arena_is_the_largest_entrys_own() -> None:
    shape = (2, 2, 16, 8)
    graphs = {f"p{r}": _writer(f"p{r}", shape, r, 0) for r in (2, 8, 16)}
    multi = tg.compile(graphs)
    alone = {n: tg.compile(g).plan.arena_size for n, g in graphs.items()}
    assert multi.arena_size == max(alone.values())
    text = multi.report()
    assert "stored once" in text and "p16" in text
    assert multi.total_size == multi.arena_size + multi.constant_size + multi.state_size


def _positioned(name: str, shape: tuple[int, ...], rows: int) -> tg.Graph:
    """Like `_writer`, at a run-time position: input `pos` (int32 scalar)."""
    b, h, _, d = shape
    g = tg.Graph(name)
    cache = g.state("cache", shape, tg.float32)
    x = g.input("x", (b, h, rows, d), tg.float32)
    pos = g.input("pos", (), tg.int32)
    w = g.param("w", (d, d), tg.float32, np.arange(d * d, dtype=np.float32).reshape(d, d) / 8)
    new = tg.slice_update(cache, x @ w, 2, pos)
    g.update_state(cache, new)
    g.output(tg.sum(new, axis=2))
    return g


@settings(max_examples=20, deadline=None)
@given(
    st.lists(st.integers(1, 6), min_size=1, max_size=3, unique=True),
    st.lists(st.tuples(st.integers(0, 2), st.integers(-2, 12)), min_size=1, max_size=6),
    st.integers(0, 2**31 - 1),
)
def test_run_time_positions_over_buckets_match_a_reference_cache(buckets, calls, seed) -> None:
    """Entries of several row buckets writing at run-time positions: after every call
    (an out-of-range one included, which must raise and write nothing) each backend's
    state equals the reference cache; arena equals numpy bit for bit."""
    shape = (1, 2, 10, 4)
    multi = tg.compile({f"b{r}": _positioned(f"b{r}", shape, r) for r in buckets})
    states = {be: multi.new_state(be) for be in BACKENDS}
    cache = np.zeros(shape, np.float32)
    rng = np.random.default_rng(seed)
    for which, pos in calls:
        rows = buckets[which % len(buckets)]
        x = rng.standard_normal((1, 2, rows, 4)).astype(np.float32)
        feeds = {"x": x, "pos": np.int32(pos)}
        if pos < 0 or pos + rows > shape[2]:
            for be in BACKENDS:
                with pytest.raises(tg.RunError, match=f"start {pos} "):
                    multi.run(f"b{rows}", feeds, backend=be, state=states[be])
        else:
            want = _expected(cache, x, pos, 4)
            got = {
                be: multi.run(f"b{rows}", feeds, backend=be, state=states[be]) for be in BACKENDS
            }
            np.testing.assert_array_equal(got["arena"][0], got["numpy"][0])
            np.testing.assert_allclose(got["mlx"][0], want, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(states["arena"]["cache"], states["numpy"]["cache"])
        for be in BACKENDS:
            np.testing.assert_allclose(states[be]["cache"], cache, rtol=1e-5, atol=1e-5)
