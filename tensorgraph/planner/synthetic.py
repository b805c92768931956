"""Synthetic interval sets for planner benchmarks and tests. Seeded: the same `n` and
`seed` give the same buffers.

- `dnn_like_buffers`: a long chain of layer outputs, each read by the next layer, with
  skip connections that keep some outputs alive for a few more layers (residual
  blocks) and occasional long skips (U-Net style), sizes mixed over two orders of
  magnitude;
- `random_buffers`: dense random lifetimes, where greedy packings stay above the bound.
"""

from __future__ import annotations

import numpy as np

from tensorgraph.planner.buffers import Buffer


def dnn_like_buffers(n: int, seed: int = 0) -> list[Buffer]:
    """`n` buffers of a chain-with-skips schedule of about `n` steps."""
    rng = np.random.default_rng(seed)
    base = rng.choice([4096, 16384, 65536, 262144], size=n, p=[0.3, 0.3, 0.3, 0.1])
    jitter = rng.integers(1, 5, size=n)
    reach = np.where(rng.random(n) < 0.2, rng.integers(2, 8, size=n), 1)
    reach = np.where(rng.random(n) < 0.01, rng.integers(50, 400, size=n), reach)
    return [
        Buffer(i, int(base[i] * jitter[i]), i, min(i + 1 + int(reach[i]), n + 1)) for i in range(n)
    ]


def random_buffers(n: int, seed: int = 0) -> list[Buffer]:
    """`n` buffers with random lifetimes (about 6 steps long) on a horizon of `n / 4`
    steps and sizes from 1 byte to 1 MB, some repeated (4 KiB, 64 KiB): about 25 buffers
    live at each step, and greedy packings stay well above the lower bound, so `best`
    spends its whole budget (the hard case for determinism and budget tests)."""
    rng = np.random.default_rng(seed)
    horizon = max(4, n // 4)
    starts = rng.integers(0, horizon, size=n)
    lengths = 1 + np.floor(rng.exponential(6.0, size=n)).astype(np.int64)
    ends = np.minimum(starts + lengths, horizon + 1)
    sizes = np.where(
        rng.random(n) < 0.5, rng.integers(1, 1_000_000, size=n), rng.choice([4096, 65536], n)
    )
    return [Buffer(i, int(sizes[i]), int(starts[i]), int(ends[i])) for i in range(n)]
