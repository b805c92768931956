"""A strided CNN's training step on MLX equals the NumPy reference step for step: its
weight gradients are conv2d_weight_backward ops (x's patches at the stride times the
cotangent), which the MLX backend lowers to patches x cotangent, and its states are
donated to their updates (max pool's gradient needs no device check)."""

import functools

import numpy as np
import pytest

import tensorgraph as tg
from tensorgraph.codegen_mlx.guards import device_guarded

STEPS = 3


@functools.cache
def _program() -> tg.Program:
    return tg.compile(tg.train_step(_strided_cnn(), optimizer=tg.optim.AdamW(1e-2)))


def _strided_cnn() -> tg.Graph:
    rng = np.random.default_rng(3)
    g = tg.Graph("strided_cnn")
    x = g.input("x", (2, 3, 12, 12))
    w1 = g.param("w1", (8, 3, 5, 5), value=rng.normal(0, 0.2, (8, 3, 5, 5)).astype(np.float32))
    w2 = g.param("w2", (8, 4, 3, 3), value=rng.normal(0, 0.2, (8, 4, 3, 3)).astype(np.float32))
    h = tg.max_pool2d(tg.relu(tg.conv2d(x, w1, stride=2, padding=2)), 3, 2, 1)
    y = tg.conv2d(h, w2, stride=2, padding=1, groups=2)
    g.output(tg.mean(y * y))
    return g


# compiled mode traces the same lowerings as the segments of "auto"; its CPU JIT would
# cost this test seconds more
@pytest.mark.parametrize("mode", ["auto", "eager"])
def test_a_strided_cnn_step_on_mlx_follows_the_reference(mode) -> None:
    program = _program()
    backward = [n for n in program.graph.nodes if n.op == "conv2d_weight_backward"]
    assert sorted(max(n.attr("stride")) for n in backward) == [2, 2]  # both weights
    assert device_guarded(program.graph) == ()
    feeds = {"x": np.random.default_rng(4).standard_normal((2, 3, 12, 12), np.float32)}
    state, reference = program.new_state("mlx"), program.new_state("numpy")
    for _ in range(STEPS):
        (loss,) = program.run(feeds, backend="mlx", state=state, mode=mode)
        (expected,) = program.run(feeds, backend="numpy", state=reference)
        np.testing.assert_allclose(loss, expected, rtol=1e-4)  # float32 sums, any order
    for name in ("w1", "w2", "w1.m", "w2.v"):
        np.testing.assert_allclose(state[name], reference[name], rtol=1e-3, atol=1e-5)
