"""MLX updates a state in place: the cache's buffer is donated to its slice_update, so
a call allocates no second cache (the issue's "an update never copies the cache"),
whether the position is a constant, a small input or a small state (both checked on
the host before the call). A call that could fail on the device keeps the old cache
instead, and a donating call that fails anyway marks the state lost, never zeros."""

from __future__ import annotations

import numpy as np
import pytest

import tensorgraph as tg
from tensorgraph.codegen_mlx import executor, last_run

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


def test_a_donating_call_that_fails_inside_mlx_marks_the_state_lost(monkeypatch) -> None:
    program = tg.compile(_decode("input"))
    state = program.new_state("mlx")
    feeds = {"row": np.ones((1, 4, 1, 128), np.float32), "pos": np.int32(3)}
    program.run(feeds, backend="mlx", state=state)

    def failing(*args: object) -> None:
        raise MemoryError("MLX ran out of memory")

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
