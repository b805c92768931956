"""Every op lowered to MLX and checked against the reference interpreter."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings

import tensorgraph as tg
from tensorgraph.codegen_mlx import LOWERINGS
from tensorgraph.ir.ops import OPS
from tests.strategies import feeds, graphs

RNG = np.random.default_rng(3)


def test_every_op_has_a_lowering() -> None:
    missing = [op for op, d in OPS.items() if not d.boundary and op not in LOWERINGS]
    assert missing == []


def check(build, *arrays, rtol=1e-5, atol=1e-6) -> None:
    g = tg.Graph("op")
    inputs = [g.input(f"a{i}", a.shape, tg.ir.as_dtype(a.dtype)) for i, a in enumerate(arrays)]
    outs = build(g, *inputs)
    g.output(*(outs if isinstance(outs, tuple) else (outs,)))
    feed = {f"a{i}": a for i, a in enumerate(arrays)}
    prog = tg.compile(g)
    want = prog.run(feed, backend="numpy")
    for mode in ("eager", "compiled"):
        got = prog.run(feed, backend="mlx", mode=mode)
        for a, b in zip(got, want, strict=True):
            assert a.shape == b.shape and a.dtype == b.dtype
            np.testing.assert_allclose(
                a.astype(np.float64), b.astype(np.float64), rtol=rtol, atol=atol
            )


def rand(*shape, dtype=np.float32):
    return RNG.uniform(-2, 2, shape).astype(dtype)


UNARY = [
    "negative",
    "abs",
    "exp",
    "sin",
    "cos",
    "tanh",
    "sigmoid",
    "relu",
    "gelu",
    "gelu_approx",
    "silu",
    "square",
]


@pytest.mark.parametrize("name", UNARY)
def test_unary(name) -> None:
    check(lambda g, x: getattr(tg, name)(x), rand(3, 5))


def test_positive_domain_unary() -> None:
    x = np.abs(rand(4, 4)) + 0.1
    check(lambda g, a: (tg.log(a), tg.sqrt(a), tg.rsqrt(a), tg.reciprocal(a)), x)


def test_binary_compare_logical_where() -> None:
    a, b = rand(3, 1, 4), rand(2, 4) + 3
    check(
        lambda g, x, y: (
            x + y,
            x - y,
            x * y,
            x / y,
            tg.maximum(x, y),
            tg.minimum(x, y),
            tg.power(tg.abs(x) + 0.5, y),
            x < y,
            x >= y,
            x == y,
            x != y,
            tg.logical_and(x < y, x > 0),
            tg.logical_or(x < y, x > 0),
            tg.logical_not(x < 0),
            tg.where(x < y, x, y),
        ),
        a,
        b,
    )


def test_matmul_reductions_softmax_layout() -> None:
    a, b = rand(2, 3, 4), rand(4, 5)
    check(
        lambda g, x, y: (
            x @ y,
            x.sum((0, 2)),
            x.mean(-1, keepdims=True),
            x.max(1),
            x.min(),
            x.argmax(-1),
            tg.softmax(x, 1),
            tg.log_softmax(x),
            x.T,
            tg.transpose(x, (1, 0, 2)),
            x.reshape(6, 4),
            x[1:2],
            tg.narrow(x, 2, 1, 2),
            tg.broadcast_to(y[0], (3, 5)),
            tg.concatenate([x, x], 1),
            x.astype(tg.float16),
        ),
        a,
        b,
    )


def test_gather_update_generators() -> None:
    table, ids = rand(10, 4), np.array([[3, 0], [9, 9]], np.int32)
    check(
        lambda g, t, i: (
            tg.take(t, i, 0),
            tg.slice_update(t, t[:2] * 2.0, 0, 5),
            tg.arange(g, 1, 7, 2),
            tg.arange(g, 0.5, 2.0, 0.5),
            tg.full(g, (2, 2), 3.5),
        ),
        table,
        ids,
    )


@pytest.mark.parametrize("groups", [1, 2, 4])
def test_conv_and_pools(groups) -> None:
    x, w = rand(1, 4, 9, 8), rand(8, 4 // groups, 3, 3)
    check(
        lambda g, a, k: (
            tg.conv2d(a, k, 2, 1, 1, groups),
            tg.conv2d(a, k, 1, 2, 2, groups),
            tg.max_pool2d(a, 3, 2, 1),
            tg.avg_pool2d(a, 2),
            tg.avg_pool2d(a, 3, 2, 1, count_include_pad=False),
        ),
        x,
        w,
        rtol=1e-4,
        atol=1e-4,
    )


@pytest.mark.parametrize(("dtype", "tolerance"), [(np.float16, 2e-3), (ml_dtypes.bfloat16, 2e-2)])
def test_half_precision_round_trips_its_dtype(dtype, tolerance) -> None:
    x = rand(4, 8).astype(dtype)
    check(lambda g, a: (tg.exp(a), a @ a.T, tg.softmax(a)), x, rtol=tolerance, atol=tolerance)


@settings(max_examples=25)
@given(graphs())
def test_random_graphs_match_the_reference(graph) -> None:
    inputs, params = feeds(graph)
    prog = tg.compile(graph)
    want = prog.run(inputs, params, backend="numpy")
    got = prog.run(inputs, params, backend="mlx", mode="eager")
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
