"""MLX updates a state in place: the cache's buffer is donated to its slice_update, so
a call allocates no second cache (the issue's "an update never copies the cache"),
whether the position is a constant, a small input or a small state (both checked on
the host before the call). A call that could fail on the device keeps the old cache
instead, and a donating call that fails anyway marks the state lost, never zeros."""

from __future__ import annotations

import numpy as np
import pytest

import tensorgraph as tg
from tensorgraph.codegen_mlx import executor, last_run, prepared_call

SHAPE = (1, 4, 1024, 128)  # 2 MiB of float32
CACHE_BYTES = 4 * 1024 * 128 * 4


def _decode(position: str) -> tg.Graph:
    """One row written at position 7: a constant, input "pos", or state "pos"
    (advanced by one per call)."""
    g = tg.Graph("decode")
    cache = g.state("cache", SHAPE, tg.float32)
    row = g.input("row", (1, 4, 1, 128), tg.float32)
    if position == "constant":
        pos = 7
    elif position == "input":
        pos = g.input("pos", (), tg.int32)
    else:
        pos = g.state("pos", (), tg.int32)
        g.update_state(pos, pos + g.constant(np.int32(1)))
    new = tg.slice_update(cache, row, 2, pos)
    g.update_state(cache, new)
    g.output(tg.sum(tg.narrow(new, 2, 0, 8)))
    return g


@pytest.mark.parametrize("position", ["constant", "input", "state"])
@pytest.mark.parametrize("mode", ["auto", "eager", "compiled"])
def test_a_state_update_allocates_no_second_cache(mode, position) -> None:
    program = tg.compile(_decode(position))
    state = program.new_state("mlx")
    for step in range(5, 8):
        feeds = {"row": np.full((1, 4, 1, 128), step, np.float32)}
        if position == "input":
            feeds["pos"] = np.int32(step)
        program.run(feeds, backend="mlx", state=state, mode=mode, stats=True)
    stats = last_run(program)
    # resident: the cache itself (handed to the call); a copy would add CACHE_BYTES more
    assert stats.resident >= CACHE_BYTES
    assert stats.peak - stats.resident < CACHE_BYTES // 4
    row = 7 if position != "state" else 2  # the state's counter wrote rows 0, 1, 2
    np.testing.assert_array_equal(state["cache"][0, :, row], np.full((4, 128), 7, np.float32))


@pytest.mark.parametrize("path", ["prepared", "generic"])
def test_a_donating_call_that_fails_inside_mlx_marks_the_state_lost(monkeypatch, path) -> None:
    program = tg.compile(_decode("input"))
    state = program.new_state("mlx")
    feeds = {"row": np.ones((1, 4, 1, 128), np.float32), "pos": np.int32(3)}
    program.run(feeds, backend="mlx", state=state)

    def failing(*args: object, **kwargs: object) -> None:
        raise MemoryError("MLX ran out of memory")

    # the repeated call's path (codegen_mlx/prepared_call.py), or run_mlx's
    if path == "prepared":
        monkeypatch.setattr(prepared_call, "dispatch", failing)
    else:
        monkeypatch.setattr(prepared_call, "run_prepared", lambda *args: None)
        monkeypatch.setattr(executor, "_execute", failing)
    with pytest.raises(MemoryError):
        program.run(feeds, backend="mlx", state=state)
    monkeypatch.undo()
    with pytest.raises(tg.RunError, match="state 'cache' was lost when a call failed"):
        state["cache"]
    with pytest.raises(tg.RunError, match="call reset\\(\\)"):
        program.run(feeds, backend="mlx", state=state)
    state.reset()
    program.run(feeds, backend="mlx", state=state)
    np.testing.assert_array_equal(state["cache"][0, :, 3], np.ones((4, 128), np.float32))
    assert not state["cache"][0, :, :3].any()


def _gathered_step() -> tg.Graph:
    """An AdamW step of bias -> a gather of 1,024 of each image's 4,096 values at
    constant positions -> linear -> mean square: the weight (1024 x 512) and its two
    moments, 2 MiB each, outweigh the activations (a 2 x 64 x 8 x 8 input). The bias's
    gradient goes through the gather's, which scatters by its constant positions
    broadcast over the batch: 2,048 indices seen through layout ops, and the (2, 4096)
    update more than the host checks evaluate (HOST_LIMIT)."""
    g = tg.Graph("gathered")
    x = g.input("x", (2, 64, 8, 8))
    b = g.param("b", (1, 64, 8, 8), value=np.zeros((1, 64, 8, 8), np.float32))
    w = g.param("w", (1024, 512), value=np.full((1024, 512), 0.01, np.float32))
    positions = np.random.default_rng(1).permutation(4096)[:1024].astype(np.int32)
    picked = tg.take(tg.reshape(x + b, (2, 4096)), g.constant(positions), axis=1)
    y = picked @ w
    g.output(tg.mean(y * y))
    return tg.train_step(g, optimizer=tg.optim.AdamW(learning_rate=1e-3))


@pytest.mark.parametrize("mode", ["auto", "eager"])
def test_a_gather_training_step_donates_its_weights_and_moments(mode) -> None:
    # The scatter's index is a compile-time constant seen through layout ops, proven in
    # range before the run (guards.py, tier 2): nothing is left to the device, so the
    # states are donated to their in-place updates. Kept instead, the old weight and
    # moments would sit beside the three new ones at the last update: at least STATES
    # bytes above what the call was handed (the three new arrays), while donated, what
    # it allocates is the arena (the gradient and an update temporary, 2 MiB each, and
    # the activations) and MLX's scratch, which this bound leaves 1 MiB for.
    program = tg.compile(_gathered_step())
    assert "scatter_add" in [n.op for n in program.graph.nodes]
    assert executor.device_guarded(program.graph) == ()
    states = 3 * 1024 * 512 * 4 + 3 * 64 * 8 * 8 * 4
    assert program.plan.arena_size + 2**20 <= states
    state, reference = program.new_state("mlx"), program.new_state("numpy")
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 64, 8, 8), np.float32)}
    for _ in range(3):
        (loss,) = program.run(feeds, backend="mlx", state=state, mode=mode, stats=True)
        (expected,) = program.run(feeds, backend="numpy", state=reference)
        np.testing.assert_allclose(loss, expected, rtol=1e-4)  # float32 sums, any order
    stats = last_run(program)
    assert stats.resident >= states
    assert stats.peak - stats.resident < states
    for name in ("w", "b"):
        np.testing.assert_allclose(state[name], reference[name], rtol=1e-4, atol=1e-6)
