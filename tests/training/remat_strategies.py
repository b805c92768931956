"""Random layered networks for the rematerialisation properties: activations dominate
the memory (a batch of rows much larger than the weights), so a memory budget below
the keep-everything arena has something to recompute. Each layer is a matmul, a bias,
a smooth activation (tests/autodiff/strategies.py's) and, drawn, a residual add or a
reshape round trip (a view the backward reads through)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

import tensorgraph as tg
from tests.autodiff.strategies import SMOOTH_UNARY


@st.composite
def layered_networks(draw: st.DrawFn, max_layers: int = 4) -> tg.Graph:
    """A scalar loss sum(h * weights) over 1-`max_layers` layers of width 4-16 on a
    batch of 16-64 rows (see the module docstring)."""
    g = tg.Graph("layered")
    batch = draw(st.integers(16, 64))
    width = draw(st.integers(4, 16))
    h = g.input("x", (batch, width), tg.float32)
    for i in range(draw(st.integers(1, max_layers))):
        w = g.param(f"w{i}", (width, width), tg.float32)
        b = g.param(f"b{i}", (width,), tg.float32)
        y = draw(st.sampled_from(SMOOTH_UNARY))(h @ w + b)
        kind = draw(st.sampled_from(("plain", "residual", "view")))
        if kind == "residual":
            y = y + h
        elif kind == "view":
            y = y.reshape(batch * width).reshape(batch, width)
        h = y
    weights = np.random.default_rng(0).uniform(-1, 1, h.shape).astype(np.float32)
    g.output((h * g.constant(weights)).sum())
    return g
