"""The elementwise math of ir.math_functions on the MLX backend (eager and compiled) and
the arena executor, against the NumPy reference (itself checked against Python's
arithmetic in tests/ir/test_ops_math.py): special values, every integer dtype, the
divisors MLX's own kernels crash or round on, and division by zero as a RunError."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tensorgraph as tg
from tensorgraph.ir.dtypes import as_dtype

RNG = np.random.default_rng(17)
SPECIALS = np.array([-np.inf, -2.5, -1.5, -0.5, -0.0, 0.0, 0.5, 1.5, 2.5, np.inf, np.nan], "f4")


def run_all(build, *arrays, rtol=1e-6, atol=1e-6, compiled=True):
    """Outputs of `build(*inputs)` on numpy, arena and mlx (eager, and compiled unless
    `compiled=False`: MLX's CPU JIT costs seconds per new graph, so property tests run
    eager), compared with the numpy backend's: shape, dtype, then values (exact for
    integers and bools)."""
    g = tg.Graph("math")
    inputs = [g.input(f"a{i}", a.shape, as_dtype(a.dtype)) for i, a in enumerate(arrays)]
    outs = build(*inputs)
    g.output(*(outs if isinstance(outs, tuple) else (outs,)))
    feed = {f"a{i}": a for i, a in enumerate(arrays)}
    prog = tg.compile(g)
    want = prog.run(feed, backend="numpy")
    runs = {
        "arena": prog.run(feed, backend="arena"),
        "eager": prog.run(feed, backend="mlx", mode="eager"),
    }
    if compiled:
        runs["compiled"] = prog.run(feed, backend="mlx", mode="compiled")
    for name, got in runs.items():
        for a, b in zip(got, want, strict=True):
            assert a.shape == b.shape and a.dtype == b.dtype, name
            if b.dtype.kind in "biu":
                np.testing.assert_array_equal(a, b, err_msg=name)
            else:
                np.testing.assert_allclose(
                    a.astype(np.float64),
                    b.astype(np.float64),
                    rtol=rtol,
                    atol=atol,
                    equal_nan=True,
                    err_msg=name,
                )
    return want


def test_unary_float_math_and_predicates_on_special_values() -> None:
    x = np.concatenate([SPECIALS, RNG.uniform(-1.4, 1.4, 21).astype("f4")])
    run_all(
        lambda a: (
            tg.erf(a),
            tg.log1p(tg.abs(a)),
            tg.expm1(a),
            tg.tan(a),
            tg.atan(a),
            tg.floor(a),
            tg.ceil(a),
            tg.round(a),
            tg.trunc(a),
            tg.sign(a),
            tg.isnan(a),
            tg.isinf(a),
        ),
        x,
        rtol=2e-6,
    )


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_half_precision_unary(dtype) -> None:
    x = SPECIALS.astype(dtype)
    tolerance = float(ml_dtypes.finfo(dtype).eps) * 2
    run_all(
        lambda a: (tg.erf(a), tg.atan(a), tg.round(a), tg.floor(a), tg.sign(a), tg.isinf(a)),
        x,
        rtol=tolerance,
        atol=tolerance,
    )


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.int64])
def test_integer_rounding_sign_predicates_and_bitwise(dtype) -> None:
    info = np.iinfo(dtype)
    x = np.array([info.min, info.min + 1, -3, -1, 0, 1, 7, info.max], np.int64)
    x = np.unique(np.clip(x, info.min, info.max)).astype(dtype)
    y = x[::-1].copy()
    run_all(
        lambda a, b: (
            tg.floor(a),
            tg.round(a),
            tg.sign(a),
            tg.isnan(a),
            tg.bitwise_not(a),
            tg.bitwise_and(a, b),
            tg.bitwise_or(a, b),
            tg.bitwise_xor(a, b),
        ),
        x,
        y,
    )


def test_bool_bitwise_and_xor() -> None:
    a, b = RNG.random((3, 4)) > 0.5, RNG.random((1, 4)) > 0.5
    run_all(
        lambda x, y: (
            tg.bitwise_not(x),
            tg.bitwise_and(x, y),
            tg.bitwise_or(x, y),
            tg.bitwise_xor(x, y),
            tg.logical_xor(x, y),
            tg.isinf(x),
        ),
        a,
        b,
    )


def test_atan2_quadrants_and_zeros() -> None:
    y = np.array([0.0, -0.0, 1.0, -1.0, 1.0, -1.0, np.inf, 2.0], "f4")
    x = np.array([-0.0, -1.0, 1.0, 1.0, -1.0, -1.0, np.inf, 0.0], "f4")
    run_all(tg.atan2, y, x)


def test_float_division_family_on_hard_operands() -> None:
    # 1 // 0.1f (MLX's own floor_divide says 10, the reference 9), zero divisors (inf,
    # nan), infinite and nan operands, both signs.
    a = np.array([1.0, 1.0, -1.0, 7.5, -7.5, 7.5, 0.0, np.inf, np.nan, 3.0, -0.0, 5.0], "f4")
    b = np.array([0.1, -0.1, 0.1, 2.0, 2.0, -2.0, 3.0, 2.0, 1.0, 0.0, 2.0, np.inf], "f4")
    want = run_all(lambda x, y: (tg.floor_divide(x, y), tg.remainder(x, y), tg.fmod(x, y)), a, b)
    assert want[0][0] == 9.0


def test_half_precision_division_family() -> None:
    a = RNG.uniform(-9, 9, 40).astype(np.float16)
    b = (RNG.uniform(0.3, 3, 40) * RNG.choice([-1, 1], 40)).astype(np.float16)
    run_all(
        lambda x, y: (tg.floor_divide(x, y), tg.remainder(x, y), tg.fmod(x, y)),
        a,
        b,
        rtol=2e-3,
        atol=2e-3,
    )


INT_DTYPES = [np.int8, np.uint8, np.int32, np.int64]


@settings(max_examples=30)
@given(
    st.sampled_from(INT_DTYPES)
    .flatmap(
        lambda dtype: st.tuples(
            hnp.arrays(dtype, st.integers(0, 6)),
            hnp.arrays(
                dtype,
                st.integers(0, 6),
                elements={"min_value": 1}
                if dtype == np.uint8
                else st.integers(np.iinfo(dtype).min, np.iinfo(dtype).max).filter(bool),
            ),
        )
    )
    .filter(lambda pair: pair[0].shape == pair[1].shape or 0 in (pair[0].ndim, pair[1].ndim))
)
def test_integer_division_family_matches_the_reference(pair) -> None:
    # Any non-zero divisor, -1 and the most negative value included (SIGFPE in MLX).
    a, b = pair
    a = np.concatenate([a.reshape(-1), [np.iinfo(a.dtype).min]]).astype(a.dtype)
    b = np.concatenate([b.reshape(-1), [-1 if b.dtype.kind == "i" else 1]]).astype(b.dtype)
    run_all(
        lambda x, y: (tg.floor_divide(x, y), tg.remainder(x, y), tg.fmod(x, y)),
        a,
        b,
        compiled=False,
    )


@pytest.mark.parametrize("op", ["remainder", "fmod", "floor_divide"])
@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_integer_division_by_zero_is_a_run_error_on_mlx(op, mode) -> None:
    g = tg.Graph("div")
    a, b = g.input("a", (3,), tg.int32), g.input("b", (3,), tg.int32)
    g.output(getattr(tg, op)(a, b))
    prog = tg.compile(g)
    feed = {"a": np.array([1, -2, 3], np.int32), "b": np.array([2, 0, -1], np.int32)}
    for backend, kwargs in (("numpy", {}), ("arena", {}), ("mlx", {"mode": mode})):
        with pytest.raises(tg.RunError, match=rf"%\d+ {op}: integer division by zero"):
            prog.run(feed, backend=backend, **kwargs)


def test_constant_zero_divisor_raises_and_constant_nonzero_needs_no_check() -> None:
    from tensorgraph.codegen_mlx.guards import guarded_nodes

    g = tg.Graph("const")
    x = g.input("x", (4,), tg.int32)
    g.output(tg.remainder(x, 3), tg.floor_divide(x, 2.5))
    assert guarded_nodes(g) == ()  # a constant non-zero divisor, and a float division
    bad = tg.Graph("zero")
    bad.output(tg.floor_divide(bad.input("x", (4,), tg.int32), 0))
    with pytest.raises(tg.RunError, match="integer division by zero"):
        tg.compile(bad).run({"x": np.arange(4, dtype=np.int32)}, backend="mlx")
