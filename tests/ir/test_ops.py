"""Every primitive op: inferred shape and dtype, and reference numerics against an
independent NumPy expression written here (not the kernels under test)."""

import math

import ml_dtypes
import numpy as np
import pytest

import tensorgraph as tg
from tensorgraph.ir.ops import OPS
from tensorgraph.runtime.kernels import KERNELS
from tensorgraph.runtime.reference import run_reference

RNG = np.random.default_rng(0)


def run(build, *arrays: np.ndarray) -> np.ndarray:
    """Build `build(*inputs)` over inputs shaped like `arrays`, run it on the reference."""
    g = tg.Graph("op")
    inputs = [g.input(f"a{i}", a.shape, tg.ir.as_dtype(a.dtype)) for i, a in enumerate(arrays)]
    out = build(*inputs)
    g.output(out)
    (result,) = run_reference(g, {f"a{i}": a for i, a in enumerate(arrays)})
    assert result.shape == out.shape, "reference shape differs from inferred shape"
    assert result.dtype == out.dtype.to_numpy(), "reference dtype differs from inferred"
    return result


def rand(*shape: int, dtype=np.float32) -> np.ndarray:
    return RNG.uniform(-2, 2, shape).astype(dtype)


def test_every_op_has_a_reference_kernel() -> None:
    missing = [op for op, d in OPS.items() if not d.boundary and op not in KERNELS]
    assert missing == []


def _erf(x: np.ndarray) -> np.ndarray:
    return np.array([math.erf(v) for v in x.ravel()]).reshape(x.shape)


UNARY = [
    (tg.negative, lambda x: -x),
    (tg.abs, np.abs),
    (tg.exp, np.exp),
    (tg.log, lambda x: np.log(np.abs(x))),
    (tg.sqrt, lambda x: np.sqrt(np.abs(x))),
    (tg.rsqrt, lambda x: 1 / np.sqrt(np.abs(x))),
    (tg.reciprocal, lambda x: 1 / x),
    (tg.square, lambda x: x * x),
    (tg.sin, np.sin),
    (tg.cos, np.cos),
    (tg.tanh, np.tanh),
    (tg.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    (tg.relu, lambda x: np.where(x > 0, x, 0)),
    (tg.gelu, lambda x: 0.5 * x * (1 + _erf(x / np.sqrt(2)))),
    (tg.gelu_approx, lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))),
    (tg.silu, lambda x: x / (1 + np.exp(-x))),
]
NEEDS_POSITIVE = {tg.log, tg.sqrt, tg.rsqrt}


@pytest.mark.parametrize(("fn", "expected"), UNARY, ids=[f.__name__ for f, _ in UNARY])
@pytest.mark.parametrize("shape", [(3, 4), (1,), (0, 5), ()])
def test_unary(fn, expected, shape) -> None:
    x = rand(*shape)
    if fn in NEEDS_POSITIVE:
        x = np.abs(x) + 0.1
    got = run(lambda a: fn(tg.abs(a) + 0.1) if fn in NEEDS_POSITIVE else fn(a), x)
    want = expected(np.abs(x) + 0.1 if fn in NEEDS_POSITIVE else x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_half_precision_unary_rounds_once(dtype) -> None:
    x = rand(4, 5).astype(dtype)
    got = run(tg.exp, x)
    assert got.dtype == dtype
    want = np.exp(x.astype(np.float32)).astype(dtype)
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))


BINARY = [
    (tg.add, np.add),
    (tg.subtract, np.subtract),
    (tg.multiply, np.multiply),
    (tg.divide, np.divide),
    (tg.maximum, np.maximum),
    (tg.minimum, np.minimum),
]


@pytest.mark.parametrize(("fn", "expected"), BINARY, ids=[f.__name__ for f, _ in BINARY])
@pytest.mark.parametrize(
    ("a_shape", "b_shape", "out_shape"),
    [
        ((2, 3), (2, 3), (2, 3)),
        ((1, 3), (4, 3), (4, 3)),
        ((3,), (2, 1), (2, 3)),
        ((2, 1, 4), (3, 1), (2, 3, 4)),
        ((0, 3), (1, 3), (0, 3)),
        ((), (2, 2), (2, 2)),
    ],
)
def test_binary_broadcasting(fn, expected, a_shape, b_shape, out_shape) -> None:
    a, b = rand(*a_shape), rand(*b_shape) + 3.0  # keeps divisors away from zero
    got = run(fn, a, b)
    assert got.shape == out_shape
    np.testing.assert_allclose(got, expected(a, b), rtol=1e-6)


def test_pow() -> None:
    a, b = np.abs(rand(3, 4)) + 0.5, rand(3, 4)
    np.testing.assert_allclose(run(tg.power, a, b), a**b, rtol=1e-5)


def test_promotion_of_mixed_dtypes() -> None:
    a = rand(3).astype(np.float16)
    b = np.arange(3, dtype=np.int32)
    got = run(tg.add, a, b)
    assert got.dtype == np.float16
    ints = run(tg.divide, b + 1, b + 2)
    assert ints.dtype == np.float32
    np.testing.assert_allclose(ints, (b + 1) / (b + 2), rtol=1e-6)


COMPARE = [
    (tg.equal, np.equal),
    (tg.not_equal, np.not_equal),
    (tg.less, np.less),
    (tg.less_equal, np.less_equal),
    (tg.greater, np.greater),
    (tg.greater_equal, np.greater_equal),
]


@pytest.mark.parametrize(("fn", "expected"), COMPARE, ids=[f.__name__ for f, _ in COMPARE])
def test_comparisons_give_bool(fn, expected) -> None:
    a = RNG.integers(0, 3, (4, 5)).astype(np.float32)
    b = RNG.integers(0, 3, (1, 5)).astype(np.float32)
    got = run(fn, a, b)
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, expected(a, b))


def test_logical_ops() -> None:
    a, b = RNG.random((3, 4)) > 0.5, RNG.random((3, 4)) > 0.5
    np.testing.assert_array_equal(run(tg.logical_and, a, b), a & b)
    np.testing.assert_array_equal(run(tg.logical_or, a, b), a | b)
    np.testing.assert_array_equal(run(tg.logical_not, a), ~a)


def test_where_broadcasts_all_three() -> None:
    c = RNG.random((4, 1)) > 0.5
    a, b = rand(1, 5), rand(4, 5)
    np.testing.assert_array_equal(run(tg.where, c, a, b), np.where(c, a, b))


@pytest.mark.parametrize(
    ("a_shape", "b_shape"),
    [
        ((3, 4), (4, 5)),
        ((2, 3, 4), (4, 5)),
        ((2, 1, 3, 4), (5, 4, 2)),
        ((4,), (4, 3)),
        ((3, 4), (4,)),
        ((4,), (4,)),
        ((0, 4), (4, 2)),
    ],
)
def test_matmul(a_shape, b_shape) -> None:
    a, b = rand(*a_shape), rand(*b_shape)
    got = run(tg.matmul, a, b)
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


REDUCE = [(tg.sum, np.sum), (tg.mean, np.mean), (tg.max, np.max), (tg.min, np.min)]


@pytest.mark.parametrize(("fn", "expected"), REDUCE, ids=[f.__name__ for f, _ in REDUCE])
@pytest.mark.parametrize("axis", [None, 0, -1, (0, 2), (-1, -3)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions(fn, expected, axis, keepdims) -> None:
    x = rand(2, 3, 4)
    got = run(lambda a: fn(a, axis, keepdims), x)
    np.testing.assert_allclose(got, expected(x, axis=axis, keepdims=keepdims), rtol=1e-5)


def test_sum_over_a_zero_size_axis_is_zero_and_bool_sums_count() -> None:
    np.testing.assert_array_equal(run(lambda a: tg.sum(a, 0), rand(0, 3)), np.zeros(3))
    flags = RNG.random((3, 4)) > 0.5
    counted = run(lambda a: tg.sum(a, 1), flags)
    assert counted.dtype == np.int32
    np.testing.assert_array_equal(counted, flags.sum(1))


@pytest.mark.parametrize("axis", [0, 1, -1, None])
def test_argmax(axis) -> None:
    x = rand(3, 5)
    got = run(lambda a: tg.argmax(a, axis), x)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, np.argmax(x, axis=axis))


@pytest.mark.parametrize("axis", [0, -1])
def test_softmax_and_log_softmax(axis) -> None:
    x = rand(3, 4) * 10
    wide = x.astype(np.float64)
    e = np.exp(wide - wide.max(axis, keepdims=True))
    np.testing.assert_allclose(
        run(lambda a: tg.softmax(a, axis), x), e / e.sum(axis, keepdims=True), rtol=1e-5
    )
    np.testing.assert_allclose(
        run(lambda a: tg.log_softmax(a, axis), x),
        np.log(e / e.sum(axis, keepdims=True)),
        rtol=1e-5,
        atol=1e-6,
    )


def test_transpose_reshape_cast_narrow() -> None:
    x = rand(2, 3, 4)
    np.testing.assert_array_equal(
        run(lambda a: tg.transpose(a, (2, 0, 1)), x), x.transpose(2, 0, 1)
    )
    np.testing.assert_array_equal(run(lambda a: a.T, x), x.T)
    np.testing.assert_array_equal(run(lambda a: a.reshape(4, -1), x), x.reshape(4, 6))
    np.testing.assert_array_equal(run(lambda a: a.astype(tg.int32), x), x.astype(np.int32))
    np.testing.assert_array_equal(run(lambda a: tg.narrow(a, -1, 1, 2), x), x[..., 1:3])
    np.testing.assert_array_equal(run(lambda a: tg.narrow(a, 0, 1, 0), x), x[1:1])


def test_concatenate_take_slice_update_broadcast_to() -> None:
    a, b = rand(2, 3), rand(4, 3)
    np.testing.assert_array_equal(
        run(lambda x, y: tg.concatenate([x, y, x]), a, b), np.concatenate([a, b, a])
    )
    table = rand(10, 4)
    ids = np.array([[1, 9], [0, 0]], dtype=np.int32)
    np.testing.assert_array_equal(run(lambda t, i: tg.take(t, i, 0), table, ids), table[ids])
    np.testing.assert_array_equal(
        run(lambda t, i: tg.take(t, i, 1), table, ids[0] % 4), table[:, ids[0] % 4]
    )
    cache, row = rand(2, 6, 3), rand(2, 2, 3)
    want = cache.copy()
    want[:, 3:5] = row
    np.testing.assert_array_equal(run(lambda c, r: tg.slice_update(c, r, 1, 3), cache, row), want)
    np.testing.assert_array_equal(
        run(lambda x: tg.broadcast_to(x, (5, 2, 3)), a), np.broadcast_to(a, (5, 2, 3))
    )


def test_generators() -> None:
    g = tg.Graph("gen")
    g.output(
        tg.arange(g, 2, 11, 3),
        tg.arange(g, 0.5, 2.0, 0.25),
        tg.full(g, (2, 3), 7.5),
        tg.zeros(g, (0, 2)),
        tg.ones(g, (2,), tg.int32),
    )
    got = run_reference(g, {})
    want = [
        np.arange(2, 11, 3, dtype=np.int32),
        np.arange(0.5, 2.0, 0.25, dtype=np.float32),
        np.full((2, 3), 7.5, np.float32),
        np.zeros((0, 2), np.float32),
        np.ones(2, np.int32),
    ]
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


def naive_conv2d(x, w, stride, padding, dilation, groups):
    """A direct loop: the independent oracle for conv2d."""
    n, _c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    oh = (h + 2 * padding - dilation * (kh - 1) - 1) // stride + 1
    ow = (wd + 2 * padding - dilation * (kw - 1) - 1) // stride + 1
    out = np.zeros((n, o, oh, ow))
    og = o // groups
    for b in range(n):
        for oc in range(o):
            g = oc // og
            for i in range(oh):
                for j in range(ow):
                    for ic in range(cg):
                        for p in range(kh):
                            for q in range(kw):
                                out[b, oc, i, j] += (
                                    xp[
                                        b,
                                        g * cg + ic,
                                        i * stride + p * dilation,
                                        j * stride + q * dilation,
                                    ]
                                    * w[oc, ic, p, q]
                                )
    return out


@pytest.mark.parametrize(
    ("channels", "out", "groups", "stride", "padding", "dilation"),
    [(3, 4, 1, 1, 1, 1), (4, 4, 4, 2, 1, 1), (4, 6, 2, 1, 0, 2), (2, 2, 1, 2, 2, 1)],
)
def test_conv2d(channels, out, groups, stride, padding, dilation) -> None:
    x = rand(2, channels, 7, 6)
    w = rand(out, channels // groups, 3, 3)
    got = run(lambda a, b: tg.conv2d(a, b, stride, padding, dilation, groups), x, w)
    np.testing.assert_allclose(
        got, naive_conv2d(x, w, stride, padding, dilation, groups), rtol=1e-4, atol=1e-4
    )


def naive_pool(x, k, s, p, reduce, fill):
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)), constant_values=fill)
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    out = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            out[:, :, i, j] = reduce(xp[:, :, i * s : i * s + k, j * s : j * s + k], axis=(2, 3))
    return out


@pytest.mark.parametrize(("k", "s", "p"), [(2, 2, 0), (3, 2, 1), (3, 1, 1)])
def test_pools(k, s, p) -> None:
    x = rand(1, 2, 7, 7)
    np.testing.assert_allclose(
        run(lambda a: tg.max_pool2d(a, k, s, p), x),
        naive_pool(x, k, s, p, np.max, -np.inf),
        rtol=1e-6,
    )
    np.testing.assert_allclose(
        run(lambda a: tg.avg_pool2d(a, k, s, p), x),
        naive_pool(x, k, s, p, np.sum, 0) / (k * k),
        rtol=1e-5,
    )
    ones = np.pad(np.ones((7, 7)), p)
    counts = np.array(
        [
            [
                ones[i * s : i * s + k, j * s : j * s + k].sum()
                for j in range((7 + 2 * p - k) // s + 1)
            ]
            for i in range((7 + 2 * p - k) // s + 1)
        ]
    )
    np.testing.assert_allclose(
        run(lambda a: tg.avg_pool2d(a, k, s, p, count_include_pad=False), x),
        naive_pool(x, k, s, p, np.sum, 0) / counts,
        rtol=1e-5,
    )


@pytest.mark.parametrize(
    "index",
    [
        np.s_[1:3],
        np.s_[::2],
        np.s_[1],
        np.s_[-1],
        np.s_[:, 1:],
        np.s_[..., 0],
        np.s_[None, 1:2, ::-1],
        np.s_[1:2, None, 3],
        np.s_[:0],
    ],
    ids=str,
)
def test_basic_indexing_matches_numpy(index) -> None:
    x = rand(4, 5, 3)
    np.testing.assert_array_equal(run(lambda a: a[index], x), x[index])


def test_unit_step_slice_on_axis_zero_is_a_narrow_view() -> None:
    g = tg.Graph("slice")
    x = g.input("x", (6, 4))
    y = x[2:5]
    assert y.node.op == "narrow" and y.node.attr("axis") == 0
    assert x[::2].node.op == "take"
