"""Synthetic DNN-like interval sets for planner benchmarks and scale tests.

A long chain of layer outputs, each read by the next layer, with skip connections that
keep some outputs alive for a few more layers (residual blocks) and occasional long
skips (U-Net style), sizes mixed over two orders of magnitude. Seeded: the same `n` and
`seed` give the same buffers."""

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
