"""The prepared per-call path (codegen_mlx/prepared_call.py) against the generic one
(`run_mlx`): for random programs, options and call sequences, both give the same
outputs, commit the same states and raise the same errors (type and message), and a
failed call changes no state on either. The generic path is the prepared one switched
off (`run_prepared` answering None), so both go through `Program.run`'s checks."""

from __future__ import annotations

import contextlib

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.codegen_mlx import prepared_call
from tensorgraph.errors import TensorGraphError
from tensorgraph.runtime.state import HOST_LIMIT
from tests.runtime.test_failed_calls import position_of
from tests.strategies import feeds as random_feeds
from tests.strategies import graphs

LENGTH, WIDTH, TABLE = 8, 3, 5
EXACT: list[bool] = []  # per fed value: of exactly the declared dtype and shape


def _decode(rows: int, position: str, lookup: bool) -> tg.Graph:
    """Writes `rows` rows of input x into state "cache" (LENGTH x WIDTH) at a position
    from `position` ("input": input pos; "state": state "pos", advanced by `rows`;
    "large": element 0 of an input too large for the host checks: a device guard, so
    the state is kept, not donated); with `lookup`, also adds rows `idx` (input, host
    checked) of a constant table; returns the cache's column sums and a scaled copy."""
    g = tg.Graph(f"decode-{position}")
    cache = g.state("cache", (LENGTH, WIDTH), tg.float32)
    x = g.input("x", (rows, WIDTH), tg.float32)
    pos = position_of(g, position, rows)
    if lookup:
        table = g.constant(np.arange(TABLE * WIDTH, dtype=np.float32).reshape(TABLE, WIDTH))
        x = x + tg.take(table, g.input("idx", (rows,), tg.int32), 0)
    new = tg.slice_update(cache, x, 0, pos)
    g.update_state(cache, new)
    g.output(tg.sum(new, axis=0))
    g.output(tg.tanh(x) * 0.5)
    return g


@contextlib.contextmanager
def _generic():
    """The generic path only: `run_prepared` takes no call."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(prepared_call, "run_prepared", lambda *args: None)
        yield


def _outcome(program: object, feeds: dict, state: object, options: dict) -> object:
    """The outputs as NumPy arrays, or (error type, message)."""
    try:
        outputs = program.run(feeds, backend="mlx", state=state, **options)
    except TensorGraphError as err:
        return type(err), str(err)
    return [np.array(o) for o in outputs]


def _same(a: object, b: object) -> None:
    if isinstance(a, tuple) or isinstance(b, tuple):
        assert a == b
        return
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x, y)


def _value(draw: st.DrawFn, array: np.ndarray) -> object:
    """`array` as the caller may feed it: ndarray, mx.array, NumPy scalar (0-d), Python
    data, or (rarely) another dtype or shape: each path's feed rules decide."""
    kind = draw(st.sampled_from(["numpy", "numpy", "numpy", "mx", "python", "float64", "shape"]))
    EXACT.append(kind in ("numpy", "mx"))
    if kind == "mx":
        return mx.array(array)
    if kind == "python":
        return array.tolist()
    if kind == "float64":
        return array.astype(np.float64)
    if kind == "shape":
        return array.reshape(-1)[:1] if array.size > 1 else array.reshape(1, 1)
    return array[()] if array.ndim == 0 else array


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_the_prepared_path_gives_the_generic_paths_outputs_states_and_errors(data) -> None:
    draw = data.draw
    rows = draw(st.integers(1, 3))
    position = draw(st.sampled_from(["input", "state", "large"]))
    lookup = draw(st.booleans())
    program = tg.compile(_decode(rows, position, lookup))
    options = draw(st.sampled_from([{}, {"wait": False}, {"mode": "eager"}, {"device": "cpu"}]))
    prepared, generic = program.new_state("mlx"), program.new_state("mlx")
    taken = []
    original = prepared_call.PreparedCall.__call__

    def counted(self, inputs, state):
        result = original(self, inputs, state)
        taken.append(result is not None)
        return result

    for call in range(draw(st.integers(1, 6))):
        at = draw(st.integers(-2, LENGTH))
        feeds = {"x": np.full((rows, WIDTH), call + 1, np.float32)}
        if position == "input":
            feeds["pos"] = np.array(at, np.int32)
        elif position == "large":
            feeds["big"] = np.full(HOST_LIMIT + 1, at, np.int32)
        if lookup:
            feeds["idx"] = np.array(
                draw(st.lists(st.integers(-1, TABLE), min_size=rows, max_size=rows)), np.int32
            )
        EXACT.clear()
        feeds = {name: _value(draw, value) for name, value in feeds.items()}
        exact = all(EXACT)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(prepared_call.PreparedCall, "__call__", counted)
            taken.clear()
            got = _outcome(program, dict(feeds), prepared, options)
        if exact and options.get("mode") != "eager":  # the prepared path took this call
            assert taken == [True] or (isinstance(got, tuple) and taken == [])
        with _generic():
            want = _outcome(program, dict(feeds), generic, options)
        _same(got, want)
        for name in program.graph.states:
            np.testing.assert_array_equal(prepared[name.name], generic[name.name])
        if options.get("mode") == "eager":
            assert taken == []  # only the default mode is prepared


def test_the_prepared_path_takes_repeated_calls_and_refuses_what_it_must() -> None:
    program = tg.compile(_decode(1, "input", lookup=True))
    state = program.new_state("mlx")
    good = {
        "x": np.ones((1, WIDTH), np.float32),
        "pos": np.array(2, np.int32),
        "idx": np.array([1], np.int32),
    }
    prepared = prepared_call.prepared_call(program, {})
    assert prepared is not None
    assert prepared(good, state) is not None  # the repeated decode call is taken
    assert prepared({**good, "pos": 2}, state) is None  # Python data: bind_feeds' rules
    assert prepared({**good, "idx": np.array([1], np.int64)}, state) is None
    assert prepared({"x": good["x"], "pos": good["pos"]}, state) is None  # missing idx
    assert prepared_call.prepared_call(program, {"stats": True}) is None
    assert prepared_call.prepared_call(program, {"mode": "compiled"}) is None
    # a bad index is the named RunError before anything runs; the state is unchanged
    before = state["cache"].copy()
    with pytest.raises(tg.RunError, match="out of range"):
        prepared({**good, "idx": np.array([TABLE], np.int32)}, state)
    np.testing.assert_array_equal(state["cache"], before)


@settings(max_examples=20, deadline=None)
@given(graph=graphs(max_ops=6), seed=st.integers(0, 3), native=st.booleans())
def test_stateless_random_programs_give_the_same_outputs_both_ways(graph, seed, native) -> None:
    program = tg.compile(graph)
    inputs, params = random_feeds(graph, seed)
    if native:
        inputs = {name: mx.array(value) for name, value in inputs.items()}
    prepared = prepared_call.prepared_call(program, {})
    assert prepared is not None
    if not params:  # given params go the generic way
        assert prepared(inputs, None) is not None
    got = [np.array(o) for o in program.run(inputs, params, backend="mlx")]
    with _generic():
        want = [np.array(o) for o in program.run(inputs, params, backend="mlx")]
    _same(got, want)


def test_a_prepared_call_does_not_keep_its_program_alive() -> None:
    import gc
    import weakref

    program = tg.compile(_decode(1, "input", lookup=False))
    feeds = {"x": np.ones((1, WIDTH), np.float32), "pos": np.array(0, np.int32)}
    program.run(feeds, backend="mlx")
    assert prepared_call.prepared_call(program, {}) is not None
    gone = weakref.ref(program)
    del program
    gc.collect()
    assert gone() is None
