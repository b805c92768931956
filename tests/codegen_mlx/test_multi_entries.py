"""The MLX backend on a MultiProgram: weights converted once for all entries, and the
shared arena as every entry's segment budget."""

from __future__ import annotations

import mlx.core as mx
import numpy as np

import tensorgraph as tg
from tensorgraph.codegen_mlx.executor import SLACK, _resident, segment_budget


def _entry(name: str, rows: int, weight: np.ndarray) -> tg.Graph:
    g = tg.Graph(name)
    x = g.input("x", (rows, weight.shape[0]), tg.float32)
    w = g.param("w", weight.shape, tg.float32, weight)
    h = tg.relu(x @ w)
    g.output(tg.sum(tg.tanh(h @ w), axis=0))
    return g


def test_entries_share_converted_weights() -> None:
    weight = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
    # equal contents under different array objects: still one stored, one converted
    multi = tg.compile(
        {"big": _entry("big", 64, weight), "small": _entry("small", 1, weight.copy())}
    )
    for name, rows in (("big", 64), ("small", 1)):
        multi.run(name, {"x": np.ones((rows, 256), np.float32)}, backend="mlx")
    converted = [
        next(
            v for k, v in _resident(p, mx.default_device()).items() if p.graph.node(k).op == "param"
        )
        for p in multi.entries.values()
    ]
    assert converted[0] is converted[1]
    assert multi.constant_size == 256 * 256 * 4


def test_an_entrys_segment_budget_is_the_shared_arena() -> None:
    weight = np.eye(128, dtype=np.float32)
    multi = tg.compile({"big": _entry("big", 256, weight), "small": _entry("small", 1, weight)})
    big, small = multi.entries["big"], multi.entries["small"]
    assert small.plan.arena_size < big.plan.arena_size == multi.arena_size
    assert segment_budget(small) >= multi.arena_size
    alone = tg.compile(_entry("small", 1, weight))
    assert segment_budget(alone) < alone.plan.arena_size * (1 + 4 * SLACK) + 4096
    out = multi.run("small", {"x": np.ones((1, 128), np.float32)}, backend="mlx")
    np.testing.assert_allclose(out[0], np.tanh(np.ones((1, 128))).sum(axis=0), rtol=1e-6)
