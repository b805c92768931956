"""A view of a read-only state is a read: verify_plan's state-region check (check 4)
must not count a view's bytes, which are its state's, as a write into the region.

The case: a seq2seq decode entry reads its cross-attention cache (a state only the encode
entry writes) through `reshape` before a matmul (Switch Transformers' eager attention).
The view lies at the state's bytes; the check refused it as a write "outside every state
this graph updates", so the program did not compile. The oracle is a NumPy expression."""

from __future__ import annotations

import numpy as np
import pytest

import tensorgraph as tg

HEADS, ROWS, WIDTH = 4, 12, 16


def _reader() -> tg.Graph:
    """Output: x (HEADS, 1, ROWS) @ cache viewed as (HEADS, ROWS, WIDTH); the state
    `cache` (1, HEADS, ROWS, WIDTH) is only read, the state `step` is updated."""
    g = tg.Graph("reader")
    x = g.input("x", (HEADS, 1, ROWS), tg.float32)
    cache = g.state("cache", (1, HEADS, ROWS, WIDTH), tg.float32)
    step = g.state("step", (1,), tg.float32)
    g.update_state(step, step + 1.0)
    g.output(tg.matmul(x, tg.reshape(cache, (HEADS, ROWS, WIDTH))))
    return g


def _writer() -> tg.Graph:
    """Writes `cache` whole from the input `c` (the encode entry's part)."""
    g = tg.Graph("writer")
    c = g.input("c", (1, HEADS, ROWS, WIDTH), tg.float32)
    cache = g.state("cache", (1, HEADS, ROWS, WIDTH), tg.float32)
    g.update_state(cache, c * 2.0)
    g.output(tg.sum(c))
    return g


@pytest.mark.parametrize("backend", ["numpy", "arena", "mlx"])
def test_a_view_of_a_read_only_state_compiles_and_reads_the_state(backend) -> None:
    program = tg.compile({"write": _writer(), "read": _reader()})
    rng = np.random.default_rng(0)
    c = rng.standard_normal((1, HEADS, ROWS, WIDTH)).astype(np.float32)
    x = rng.standard_normal((HEADS, 1, ROWS)).astype(np.float32)
    state = program.new_state(backend)
    program.run("write", {"c": c}, backend=backend, state=state)
    (out,) = program.run("read", {"x": x}, backend=backend, state=state)
    out = np.asarray(out)
    assert out.shape == (HEADS, 1, WIDTH) and out.dtype == np.float32
    np.testing.assert_allclose(out, x @ (2.0 * c[0]), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(state["cache"]), 2.0 * c)  # read, not written
