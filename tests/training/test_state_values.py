"""States with initial values (`Graph.state_values`): a call reads them when the State is
fresh, `reset()` goes back to them, and they survive passes, JSON and save/load."""

import numpy as np
import pytest

import tensorgraph as tg
from tensorgraph.ir.verify import verify

BACKENDS = ("numpy", "arena", "mlx")


def decaying() -> tg.Graph:
    """Each call returns sum(x * w) with the state w before the call, then leaves
    w - 0.5 x in it: from w0 = [0, 1, 2, 3] and x = 1, the losses are 6, 4, 2."""
    g = tg.Graph("decay")
    x = g.input("x", (4,), tg.float32)
    w = g.state("w", (4,), tg.float32, value=np.arange(4, dtype=np.float32))
    g.output(tg.sum(x * w))
    g.update_state(w, w - 0.5 * x)
    return g


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_fresh_state_starts_from_its_initial_value_and_reset_returns_to_it(backend):
    program = tg.compile(decaying())
    ones = {"x": np.ones(4, np.float32)}
    losses = [float(program.run(ones, backend=backend)[0]) for _ in range(3)]
    assert losses == [6.0, 4.0, 2.0]  # sum(w0 - 0.5 k) for k = 0, 1, 2
    np.testing.assert_array_equal(program.state(backend)["w"], np.arange(4) - 1.5)
    program.reset_state()
    np.testing.assert_array_equal(program.state(backend)["w"], np.arange(4, dtype=np.float32))
    fresh = program.new_state(backend)
    assert float(program.run(ones, backend=backend, state=fresh)[0]) == 6.0


def test_initial_values_round_trip_through_json_and_passes():
    g = decaying()
    back = tg.Graph.from_json(g.to_json())
    assert back == g
    np.testing.assert_array_equal(back.state_values["w"], np.arange(4, dtype=np.float32))
    program = tg.compile(g)  # dce, cse, fold, ... keep the value
    np.testing.assert_array_equal(program.graph.state_values["w"], g.state_values["w"])


def test_graphs_with_other_initial_values_differ():
    other = decaying()
    other.state_values["w"] = np.zeros(4, np.float32)
    assert other != decaying()


def test_an_initial_value_that_does_not_fit_is_named():
    g = tg.Graph("bad")
    with pytest.raises(tg.ShapeError, match=r"state 'w': value shape \(3,\)"):
        g.state("w", (4,), tg.float32, value=np.zeros(3, np.float32))
    with pytest.raises(tg.DTypeError, match=r"state 'v': value dtype int32"):
        g.state("v", (4,), tg.float32, value=np.zeros(4, np.int32))
    g = decaying()
    g.state_values["ghost"] = np.zeros(1, np.float32)
    with pytest.raises(tg.GraphError, match="initial value for unknown state 'ghost'"):
        verify(g)


def test_save_keeps_initial_values_and_a_given_states_values(tmp_path):
    program = tg.compile(decaying())
    ones = {"x": np.ones(4, np.float32)}
    program.save(tmp_path / "fresh.tgp")
    assert float(tg.load(tmp_path / "fresh.tgp").run(ones, backend="numpy")[0]) == 6.0
    state = program.new_state("arena")
    program.run(ones, backend="arena", state=state)
    program.save(tmp_path / "after1.tgp", state=state)
    loaded = tg.load(tmp_path / "after1.tgp")
    assert [float(loaded.run(ones, backend="numpy")[0]) for _ in range(2)] == [4.0, 2.0]
    with pytest.raises(tg.SaveError, match="state must be a State"):
        program.save(tmp_path / "bad.tgp", state={"w": np.zeros(4, np.float32)})
    other = tg.Graph("other")
    other.state("w", (5,), tg.float32)
    other.output(other.input("x", (1,)))
    foreign = tg.compile(other).new_state("numpy")
    with pytest.raises(tg.SaveError, match=r"state 'w' \(\(4,\) float32\) is not in the given"):
        program.save(tmp_path / "bad.tgp", state=foreign)


def test_to_dtype_converts_initial_values_with_their_states():
    g = decaying()
    g.state_values["w"] = np.array([0.1, 1.0, 2.0, 3.0], np.float32)
    half = tg.to_dtype(g, tg.bfloat16)
    value = half.state_values["w"]
    assert value.dtype == tg.bfloat16.to_numpy()
    np.testing.assert_array_equal(value, g.state_values["w"].astype(value.dtype))


def test_quantize_and_quantize_states_keep_initial_values():
    g = tg.Graph("keep")
    x = g.input("x", (2, 64), tg.float32)
    w = g.param("w", (64, 64), tg.float32, value=np.ones((64, 64), np.float32))
    h = g.state("h", (2, 64), tg.float32, value=np.full((2, 64), 3.0, np.float32))
    g.output(tg.sum(x @ w + h))
    g.update_state(h, h + x)
    quantized = tg.quantize(g, bits=4, group_size=64)
    np.testing.assert_array_equal(quantized.state_values["h"], g.state_values["h"])
    kept = tg.quantize_states(g, bits=8, group_size=64)
    assert {n.name: n.dtype for n in kept.states} == {"h": tg.float32}
    np.testing.assert_array_equal(kept.state_values["h"], g.state_values["h"])
