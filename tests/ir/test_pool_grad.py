"""The max pools' input gradients (ir.pool_grad): the op table's cases and a property
over random pools (ties forced by small integer values, padding, dilation, ceil_mode)
against an independent oracle (a Python loop over every window in float64, torch's
window rule written out), every backend; the gradient of a max pool through autodiff
holds no window-sized buffer; named inference errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.errors import DTypeError, ShapeError
from tensorgraph.ir.pool_grad import adaptive_max_pool2d_backward, max_pool2d_backward
from tests.ir.op_cases import BF16, Case, case_adder, check_case

CASES: list[Case] = []  # the op table's cases (tests/ir/test_ops.py runs them all)
case = case_adder(CASES)


def _extent(size: int, k: int, s: int, p: int, d: int, ceil: bool) -> int:
    """torch's pooling_output_shape, from its documentation."""
    span = size + 2 * p - d * (k - 1) - 1
    out = (span + (s - 1 if ceil else 0)) // s + 1
    if ceil and (out - 1) * s >= size + p:
        out -= 1
    return out


def pool_windows(h: int, w: int, kernel, stride, padding, dilation, ceil: bool) -> dict:
    """{(i, j): the (row, column) positions of x window (i, j) covers}: rows i * s - p +
    a * d for a < k, those inside x only (padding holds nothing)."""
    oh, ow = (
        _extent(n, kernel[a], stride[a], padding[a], dilation[a], ceil)
        for a, n in enumerate((h, w))
    )
    windows = {}
    for i in range(oh):
        for j in range(ow):
            rows = [i * stride[0] - padding[0] + a * dilation[0] for a in range(kernel[0])]
            cols = [j * stride[1] - padding[1] + b * dilation[1] for b in range(kernel[1])]
            windows[i, j] = [(r, c) for r in rows for c in cols if 0 <= r < h and 0 <= c < w]
    return windows


def adaptive_pool_windows(h: int, w: int, oh: int, ow: int) -> dict:
    """torch's adaptive windows: rows [floor(i h / oh), ceil((i + 1) h / oh))."""
    bands = [
        [(i * n // o, math.ceil((i + 1) * n / o)) for i in range(o)] for n, o in ((h, oh), (w, ow))
    ]
    return {
        (i, j): [(r, c) for r in range(*bands[0][i]) for c in range(*bands[1][j])]
        for i in range(oh)
        for j in range(ow)
    }


def loop_pool(x: np.ndarray, windows: dict) -> np.ndarray:
    """The max over each window, float64; -inf for a window of padding alone (torch
    pads with -inf), whose gradient then reaches no element of x."""
    oh, ow = (max(k[a] for k in windows) + 1 for a in range(2))
    out = np.full((*x.shape[:2], oh, ow), -np.inf)
    for (i, j), cells in windows.items():
        if cells:
            out[:, :, i, j] = np.max([x[:, :, r, c] for r, c in cells], axis=0)
    return out


def loop_gradient(x: np.ndarray, g: np.ndarray, windows: dict) -> np.ndarray:
    """Each window's g split evenly among its elements equal to its max, one window and
    one batch-channel at a time, float64."""
    x, g = x.astype(np.float64), g.astype(np.float64)
    out = loop_pool(x, windows)
    result = np.zeros(x.shape)
    for n, ch in np.ndindex(*x.shape[:2]):
        for (i, j), cells in windows.items():
            maxima = [(r, c) for r, c in cells if x[n, ch, r, c] == out[n, ch, i, j]]
            for r, c in maxima:
                result[n, ch, r, c] += g[n, ch, i, j] / len(maxima)
    return result


def _regular(x, g, kernel, stride, padding=(0, 0), dilation=(1, 1), ceil=False):
    """(x, out, g) arrays for a regular pool, and the oracle of its gradient."""
    windows = pool_windows(*x.shape[2:], kernel, stride, padding, dilation, ceil)
    out = loop_pool(x, windows).astype(x.dtype)
    return (x, out, g[:, :, : out.shape[2], : out.shape[3]]), windows


_rng = np.random.default_rng(17)
_ties = _rng.integers(-2, 3, (2, 3, 7, 6)).astype(np.float32)  # many tied maxima
for _id, _pool in {
    "padded-ties": ((3, 3), (2, 2), (1, 1), (1, 1), False),
    "dilated-ceil": ((2, 2), (2, 2), (1, 1), (2, 2), True),
    "rectangular-overlap": ((3, 2), (1, 2), (0, 1), (1, 1), False),
}.items():
    _arrays, _windows = _regular(_ties, _rng.standard_normal((2, 3, 7, 6)), *_pool)
    _arrays = (_arrays[0], _arrays[1], _arrays[2].astype(np.float32))
    case(
        "max_pool2d_backward",
        _id,
        _arrays,
        lambda x, out, g, p=_pool: max_pool2d_backward(x, out, g, *p[:4], ceil_mode=p[4]),
        tg.float32,
        lambda x, out, g, w=_windows: loop_gradient(x, g, w),
    )
# Without `out`: the op pools x itself (what autodiff emits), the same gradient.
case(
    "max_pool2d_backward",
    "pooled-by-the-op",
    (_arrays[0], _arrays[2]),
    lambda x, g, p=_pool: max_pool2d_backward(x, None, g, *p[:4], ceil_mode=p[4]),
    tg.float32,
    lambda x, g, w=_windows: loop_gradient(x, g, w),
)
_half = _rng.integers(-3, 4, (1, 2, 5, 5)).astype(BF16)
_half_arrays, _half_windows = _regular(_half, _rng.standard_normal((1, 2, 5, 5)), (2, 2), (1, 1))
case(
    "max_pool2d_backward",
    "overlapping-bf16",
    (_half_arrays[0], _half_arrays[1], _half_arrays[2].astype(BF16)),
    lambda x, out, g: max_pool2d_backward(x, out, g, 2, 1),
    tg.bfloat16,
    lambda x, out, g: loop_gradient(x, g, _half_windows),
)
_awindows = adaptive_pool_windows(7, 5, 3, 4)
case(
    "adaptive_max_pool2d_backward",
    "uneven-overlapping",
    (
        _ties[:, :, :, :5],
        loop_pool(_ties[:, :, :, :5], _awindows).astype(np.float32),
        _rng.standard_normal((2, 3, 3, 4)).astype(np.float32),
    ),
    lambda x, out, g: adaptive_max_pool2d_backward(x, out, g, (3, 4)),
    tg.float32,
    lambda x, out, g: loop_gradient(x, g, _awindows),
)
case(
    "adaptive_max_pool2d_backward",
    "pooled-by-the-op",
    (_ties[:, :, :, :5], _rng.standard_normal((2, 3, 3, 4)).astype(np.float32)),
    lambda x, g: adaptive_max_pool2d_backward(x, None, g, (3, 4)),
    tg.float32,
    lambda x, g: loop_gradient(x, g, _awindows),
)


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_case(c: Case) -> None:
    check_case(c)


@st.composite
def _pools(draw: st.DrawFn) -> tuple:
    kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    padding = tuple(draw(st.integers(0, k // 2)) for k in kernel)
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    ceil = draw(st.booleans())
    reach = [d * (k - 1) + 1 - 2 * p for k, p, d in zip(kernel, padding, dilation, strict=True)]
    h, w = (draw(st.integers(max(1, r), 7)) for r in reach)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = rng.integers(-2, 3, (2, 2, h, w)).astype(np.float32)  # ties in most windows
    return x, kernel, stride, padding, dilation, ceil, rng


@given(_pools())
@settings(max_examples=15, deadline=None)
def test_random_max_pool_gradients_agree_with_the_loop_on_every_backend(pool) -> None:
    """value_and_grad of sum(max_pool2d(x) * weights): the loop oracle's gradient, the
    arena bit for bit the reference, MLX to float rounding."""
    x, kernel, stride, padding, dilation, ceil, rng = pool
    windows = pool_windows(*x.shape[2:], kernel, stride, padding, dilation, ceil)
    oh, ow = (max(k[a] for k in windows) + 1 for a in range(2))
    weights = rng.standard_normal((*x.shape[:2], oh, ow)).astype(np.float32)
    g = tg.Graph("pool")
    pooled = tg.max_pool2d(g.input("x", x.shape), kernel, stride, padding, dilation, ceil)
    g.output((pooled * g.constant(weights)).sum())
    prog = tg.compile(tg.value_and_grad(g, "x"))
    assert "max_pool2d_backward" in {n.op for n in prog.graph.nodes}
    ref = prog.run({"x": x}, backend="numpy")[1]
    np.testing.assert_allclose(ref, loop_gradient(x, weights, windows), rtol=1e-6, atol=1e-6)
    assert prog.run({"x": x}, backend="arena")[1].tobytes() == ref.tobytes()
    np.testing.assert_allclose(prog.run({"x": x}, backend="mlx")[1], ref, rtol=1e-6, atol=1e-6)


def test_a_pool_gradient_holds_no_window_sized_buffer() -> None:
    """A 3x3 stride-2 pool's windows are 9/4 of x's elements (16 x 16 -> 8 x 8 x 9): the
    op's plan holds x, the pooled result, its cotangent and x's cotangent, each at most
    x's bytes, where the rule written out of take and scatter_add held the windows."""
    g = tg.Graph("stem")
    x = g.input("x", (2, 4, 16, 16))
    pooled = tg.max_pool2d(x, 3, 2, 1)
    g.output((pooled * pooled).sum())
    prog = tg.compile(tg.value_and_grad(g, "x"))
    x_bytes = 2 * 4 * 16 * 16 * 4
    assert max(b.size for b in prog.plan.buffers) <= x_bytes
    assert prog.plan.arena_size < 3 * x_bytes  # the windows alone were 2.25 x's bytes


def test_disagreements_are_named() -> None:
    g = tg.Graph("g")
    x = g.input("x", (1, 2, 6, 6))
    out = tg.max_pool2d(x, 2)
    with pytest.raises(ShapeError, match=r"must have the pooled shape \(1, 2, 3, 3\)"):
        max_pool2d_backward(x, out, g.input("g", (1, 2, 2, 3)), 2)
    with pytest.raises(DTypeError, match="float16, x float32"):
        max_pool2d_backward(x, out, g.input("h", (1, 2, 3, 3), tg.float16), 2)
    whole = g.input("i", (1, 2, 6, 6), tg.int32)
    small = tg.adaptive_max_pool2d(whole, 2)
    with pytest.raises(DTypeError, match="needs a float x but i is int32"):
        adaptive_max_pool2d_backward(whole, small, small, 2)


@pytest.mark.parametrize("given_out", [True, False])
@pytest.mark.parametrize(
    ("shape", "pool"),
    [((8, 8, 32, 32), (3, 2, 1, 1)), ((4, 16, 15, 15), (2, 2, 0, 2)), ((2, 4, 9, 9), (3, 1, 1, 1))],
)
def test_scratch_bounds_what_the_mlx_lowering_allocates(shape, pool, given_out) -> None:
    """SCRATCH (codegen_mlx/segments.py) is the segment cost's allowance for what the
    lowering allocates beyond its output: measured on MLX itself, the peak while the
    node's lowering runs on materialised inputs, less those inputs and its output; with
    the pooled result given, or pooled by the lowering itself."""
    import mlx.core as mx

    from tensorgraph.codegen_mlx.lowering import lowering_of
    from tensorgraph.codegen_mlx.segments import SCRATCH
    from tests.codegen_mlx.test_segments import lowering_scratch

    kernel, stride, padding, dilation = pool
    g = tg.Graph("pool")
    x = g.input("x", shape)
    out = tg.max_pool2d(x, kernel, stride, padding, dilation)
    given = out if given_out else None
    g.output(
        max_pool2d_backward(x, given, g.input("g", out.shape), kernel, stride, padding, dilation)
    )
    node = g.node(g.outputs[0])
    rng = np.random.default_rng(0)
    xs = mx.array(rng.integers(-2, 3, shape).astype(np.float32))
    pooled = [lowering_of(out.node)(out.node, [xs])] if given_out else []
    args = [xs, *pooled, mx.array(rng.standard_normal(out.shape))]
    assert lowering_scratch(node, args) <= SCRATCH[node.op](g, node)


@pytest.mark.parametrize(("size", "pooled"), [((7, 5), (3, 4)), ((4, 6), (4, 6)), ((5, 5), (1, 1))])
def test_adaptive_max_pool_gradients_agree_with_the_loop_on_every_backend(size, pooled) -> None:
    """Overlapping, one-to-one and global windows, with ties, through autodiff."""
    rng = np.random.default_rng(3)
    x = rng.integers(-2, 3, (2, 3, *size)).astype(np.float32)
    weights = rng.standard_normal((2, 3, *pooled)).astype(np.float32)
    g = tg.Graph("adaptive")
    g.output((tg.adaptive_max_pool2d(g.input("x", x.shape), pooled) * g.constant(weights)).sum())
    prog = tg.compile(tg.value_and_grad(g, "x"))
    assert "adaptive_max_pool2d_backward" in {n.op for n in prog.graph.nodes}
    want = loop_gradient(x, weights, adaptive_pool_windows(*size, *pooled))
    ref = prog.run({"x": x}, backend="numpy")[1]
    np.testing.assert_allclose(ref, want, rtol=1e-6, atol=1e-6)
    assert prog.run({"x": x}, backend="arena")[1].tobytes() == ref.tobytes()
    np.testing.assert_allclose(prog.run({"x": x}, backend="mlx")[1], ref, rtol=1e-6, atol=1e-6)
