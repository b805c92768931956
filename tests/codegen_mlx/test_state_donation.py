"""MLX updates a state in place: the cache's buffer is donated to its slice_update, so
a call allocates no second cache (the issue's "an update never copies the cache")."""

from __future__ import annotations

import numpy as np
import pytest

import tensorgraph as tg
from tensorgraph.codegen_mlx import last_run


@pytest.mark.parametrize("mode", ["auto", "eager", "compiled"])
def test_a_state_update_allocates_no_second_cache(mode) -> None:
    shape = (1, 4, 1024, 128)  # 2 MiB of float32
    g = tg.Graph("decode")
    cache = g.state("cache", shape, tg.float32)
    row = g.input("row", (1, 4, 1, 128), tg.float32)
    new = tg.slice_update(cache, row, 2, 7)
    g.update_state(cache, new)
    g.output(tg.sum(tg.narrow(new, 2, 0, 8)))
    program = tg.compile(g)
    state = program.new_state("mlx")
    for step in range(3):
        program.run(
            {"row": np.full((1, 4, 1, 128), step, np.float32)},
            backend="mlx",
            state=state,
            mode=mode,
            stats=True,
        )
    stats = last_run(program)
    cache_bytes = 4 * 1024 * 128 * 4
    # resident: the cache itself (handed to the call); a copy would add cache_bytes more
    assert stats.resident >= cache_bytes
    assert stats.peak - stats.resident < cache_bytes // 4
    np.testing.assert_array_equal(state["cache"][0, :, 7], np.full((4, 128), 2, np.float32))
