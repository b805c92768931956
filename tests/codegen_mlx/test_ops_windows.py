"""Convolutions (grouped, depthwise, dilated, strided; conv1d; transposed), pools (ceil_mode,
dilation, divisor_override), adaptive pools and pad on every backend (numpy, arena, MLX
eager and compiled) against torch.nn.functional itself."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch", reason="the torch extra is not installed")
F = torch.nn.functional

import tensorgraph as tg  # noqa: E402
from tensorgraph.ir.dtypes import as_dtype  # noqa: E402

RNG = np.random.default_rng(29)


def rand(*shape: int) -> np.ndarray:
    return RNG.uniform(-2, 2, shape).astype(np.float32)


def check_against_torch(build, torch_fn, *arrays, rtol=1e-5, atol=1e-5, compiled=True) -> None:
    """build(*inputs) on every backend equals torch_fn(*tensors): shape, dtype, values.
    `compiled=False` skips MLX's compiled mode, whose CPU JIT costs seconds per new graph
    (the property tests run eager; fixed cases cover compiled)."""
    g = tg.Graph("windows")
    inputs = [g.input(f"a{i}", a.shape, as_dtype(a.dtype)) for i, a in enumerate(arrays)]
    g.output(build(*inputs))
    want = torch_fn(*(torch.from_numpy(a) for a in arrays)).numpy()
    feed = {f"a{i}": a for i, a in enumerate(arrays)}
    prog = tg.compile(g)
    runs = [("numpy", {}), ("arena", {}), ("mlx", {"mode": "eager"})]
    runs += [("mlx", {"mode": "compiled"})] if compiled else []
    for backend, kwargs in runs:
        (got,) = prog.run(feed, backend=backend, **kwargs)
        assert got.shape == want.shape, (backend, got.shape, want.shape)
        assert got.dtype == want.dtype, (backend, got.dtype, want.dtype)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f"{backend} {kwargs}")


CONVS = [  # (x shape, w shape, stride, padding, dilation, groups)
    ((2, 4, 9, 8), (6, 2, 3, 3), (1, 1), (1, 1), (1, 1), 2),  # grouped
    ((1, 6, 10, 9), (6, 1, 3, 3), (2, 2), (1, 1), (1, 1), 6),  # depthwise
    ((1, 4, 8, 8), (8, 1, 5, 5), (1, 1), (2, 2), (1, 1), 4),  # depthwise, multiplier 2
    ((1, 3, 11, 12), (4, 3, 3, 3), (1, 1), (2, 2), (2, 2), 1),  # dilated
    ((1, 4, 12, 11), (4, 2, 3, 2), (2, 1), (3, 1), (3, 2), 2),  # grouped + dilated, per axis
    ((1, 8, 9, 9), (8, 1, 3, 3), (1, 1), (2, 2), (2, 2), 8),  # depthwise + dilated
]


@pytest.mark.parametrize(("xs", "ws", "stride", "padding", "dilation", "groups"), CONVS)
def test_conv2d_grouped_and_dilated_match_torch(xs, ws, stride, padding, dilation, groups) -> None:
    check_against_torch(
        lambda x, w: tg.conv2d(x, w, stride, padding, dilation, groups),
        lambda x, w: F.conv2d(x, w, None, stride, padding, dilation, groups),
        rand(*xs),
        rand(*ws),
        rtol=1e-4,
        atol=1e-4,
    )


@st.composite
def dilated_convs(draw: st.DrawFn) -> tuple:
    """Random valid conv2d arguments with a kernel dilation above 1 on at least one axis
    (MLX's lowering computes those as patches times weights): any groups, stride,
    padding, batch, and at least one output position."""
    groups = draw(st.sampled_from([1, 2, 3]))
    c, o = groups * draw(st.integers(1, 2)), groups * draw(st.integers(1, 2))
    kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilation = draw(st.tuples(st.integers(1, 3), st.integers(1, 3)).filter(lambda d: max(d) > 1))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    padding = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
    reach = [dilation[i] * (kernel[i] - 1) + 1 - 2 * padding[i] for i in range(2)]
    size = [max(reach[i], 1) + draw(st.integers(0, 4)) for i in range(2)]
    n = draw(st.integers(1, 2))
    return (n, c, *size), (o, c // groups, *kernel), stride, padding, dilation, groups


@settings(max_examples=25, deadline=None)
@given(dilated_convs())
def test_random_dilated_conv2d_matches_torch(arguments) -> None:
    xs, ws, stride, padding, dilation, groups = arguments
    check_against_torch(
        lambda x, w: tg.conv2d(x, w, stride, padding, dilation, groups),
        lambda x, w: F.conv2d(x, w, None, stride, padding, dilation, groups),
        rand(*xs),
        rand(*ws),
        rtol=1e-4,
        atol=1e-4,
        compiled=False,
    )


@st.composite
def asymmetric_convs(draw: st.DrawFn) -> tuple:
    """Random conv2d arguments with a padding of its own on each side, ((top, bottom),
    (left, right)), a negative bottom or right leaving out last rows or columns (the
    weight gradients of strided convolutions): any groups, stride, dilation."""
    groups = draw(st.sampled_from([1, 2]))
    c, o = groups * draw(st.integers(1, 2)), groups * draw(st.integers(1, 2))
    kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    pads, size = [], []
    for a in range(2):
        span = dilation[a] * (kernel[a] - 1) + 1
        extent = span + draw(st.integers(1, 5))
        top = draw(st.integers(0, 2))
        # at least one window, and at least one of x's rows kept
        bottom = draw(st.integers(max(-(extent + top - span), 1 - extent), 2))
        pads.append((top, bottom))
        size.append(extent)
    return (1, c, *size), (o, c // groups, *kernel), stride, tuple(pads), dilation, groups


@settings(max_examples=20, deadline=None)
@given(asymmetric_convs())
def test_random_asymmetric_padding_matches_torch_on_a_padded_input(arguments) -> None:
    """tg.conv2d(x, w, padding=((t, b), (l, r))) is torch's conv2d of F.pad(x, (l, r, t,
    b)) (torch crops for a negative amount) with no padding of its own."""
    xs, ws, stride, ((t, b), (left, right)), dilation, groups = arguments
    check_against_torch(
        lambda x, w: tg.conv2d(x, w, stride, ((t, b), (left, right)), dilation, groups),
        lambda x, w: F.conv2d(F.pad(x, (left, right, t, b)), w, None, stride, 0, dilation, groups),
        rand(*xs),
        rand(*ws),
        rtol=1e-4,
        atol=1e-4,
        compiled=False,
    )


@pytest.mark.parametrize(
    ("xs", "ws", "stride", "padding", "dilation", "groups"),
    [
        ((2, 4, 17), (6, 4, 3), 1, 1, 1, 1),
        ((1, 6, 20), (6, 1, 5), 2, 2, 1, 6),  # depthwise, as in Whisper-style front ends
        ((1, 4, 16), (8, 2, 3), 1, 2, 2, 2),
        ((3, 2, 7), (2, 2, 7), 1, 0, 1, 1),  # kernel as long as the input
    ],
)
def test_conv1d_matches_torch(xs, ws, stride, padding, dilation, groups) -> None:
    check_against_torch(
        lambda x, w: tg.conv1d(x, w, stride, padding, dilation, groups),
        lambda x, w: F.conv1d(x, w, None, stride, padding, dilation, groups),
        rand(*xs),
        rand(*ws),
        rtol=1e-4,
        atol=1e-4,
    )


TRANSPOSED = [  # (x shape, w shape, stride, padding, dilation, output_padding, groups)
    ((2, 4, 5, 6), (4, 3, 4, 4), (2, 2), (1, 1), (1, 1), (0, 0), 1),  # a decoder's 2x upsample
    ((1, 6, 4, 5), (6, 2, 3, 2), (2, 1), (1, 0), (1, 2), (1, 0), 3),  # grouped, per axis
    ((1, 4, 5, 5), (4, 1, 3, 3), (1, 1), (2, 2), (2, 2), (0, 0), 4),  # depthwise, dilated
    ((1, 2, 6, 6), (2, 3, 2, 2), (2, 2), (3, 3), (1, 1), (1, 1), 1),  # padding past the reach
]


@pytest.mark.parametrize(
    ("xs", "ws", "stride", "padding", "dilation", "extra", "groups"), TRANSPOSED
)
def test_conv_transpose2d_matches_torch(xs, ws, stride, padding, dilation, extra, groups) -> None:
    check_transposed(xs, ws, stride, padding, dilation, extra, groups)


def check_transposed(xs, ws, stride, padding, dilation, extra, groups, compiled=True) -> None:
    check_against_torch(
        lambda x, w: tg.conv_transpose2d(x, w, stride, padding, dilation, extra, groups),
        lambda x, w: F.conv_transpose2d(x, w, None, stride, padding, extra, groups, dilation),
        rand(*xs),
        rand(*ws),
        rtol=1e-4,
        atol=1e-4,
        compiled=compiled,
    )


@st.composite
def transposed_convs(draw: st.DrawFn) -> tuple:
    """Random valid conv_transpose2d arguments (torch's constraints: output_padding
    below the stride or the dilation, at least one output position)."""
    groups = draw(st.sampled_from([1, 2]))
    c, og = groups * draw(st.integers(1, 2)), draw(st.integers(1, 3))
    kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    extra = tuple(draw(st.integers(0, max(stride[i], dilation[i]) - 1)) for i in range(2))
    size = (draw(st.integers(1, 5)), draw(st.integers(1, 5)))
    full = [
        (size[i] - 1) * stride[i] + dilation[i] * (kernel[i] - 1) + extra[i] + 1 for i in range(2)
    ]
    padding = tuple(draw(st.integers(0, (full[i] - 1) // 2)) for i in range(2))
    return (1, c, *size), (c, og, *kernel), stride, padding, dilation, extra, groups


@settings(max_examples=25, deadline=None)
@given(transposed_convs())
def test_random_conv_transpose2d_matches_torch(arguments) -> None:
    check_transposed(*arguments, compiled=False)


@pytest.mark.parametrize(
    ("xs", "ws", "stride", "padding", "extra"),
    [((2, 4, 9), (4, 3, 4), 2, 1, 0), ((1, 2, 5), (2, 2, 3), 3, 0, 2)],
)
def test_conv_transpose1d_matches_torch(xs, ws, stride, padding, extra) -> None:
    check_against_torch(
        lambda x, w: tg.conv_transpose1d(x, w, stride, padding, 1, extra),
        lambda x, w: F.conv_transpose1d(x, w, None, stride, padding, extra),
        rand(*xs),
        rand(*ws),
        rtol=1e-4,
        atol=1e-4,
    )


@st.composite
def pools(draw: st.DrawFn) -> tuple:
    """Random valid max/avg pool arguments (torch's constraints: padding <= kernel / 2,
    at least one output), ceil_mode and dilation included."""
    kernel = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    padding = (draw(st.integers(0, kernel[0] // 2)), draw(st.integers(0, kernel[1] // 2)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    span = [dilation[i] * (kernel[i] - 1) + 1 - 2 * padding[i] for i in range(2)]
    h = draw(st.integers(max(span[0], 1), 9))
    w = draw(st.integers(max(span[1], 1), 9))
    return (h, w), kernel, stride, padding, dilation, draw(st.booleans())


@settings(max_examples=25)
@given(pools())
def test_max_pool2d_matches_torch(args) -> None:
    (h, w), kernel, stride, padding, dilation, ceil_mode = args
    check_against_torch(
        lambda x: tg.max_pool2d(x, kernel, stride, padding, dilation, ceil_mode),
        lambda x: F.max_pool2d(x, kernel, stride, padding, dilation, ceil_mode),
        rand(2, 3, h, w),
        compiled=False,
    )


@settings(max_examples=25)
@given(pools(), st.booleans(), st.sampled_from([None, 1, 3]))
def test_avg_pool2d_matches_torch(args, count_include_pad, divisor_override) -> None:
    (h, w), kernel, stride, padding, _, ceil_mode = args
    check_against_torch(
        lambda x: tg.avg_pool2d(
            x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override
        ),
        lambda x: F.avg_pool2d(
            x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override
        ),
        rand(1, 2, h, w),
        compiled=False,
    )


@settings(max_examples=20)
@given(st.integers(1, 9), st.integers(1, 9), st.integers(1, 6), st.integers(1, 6))
def test_adaptive_pools_match_torch(h, w, oh, ow) -> None:
    x = rand(2, 3, h, w)
    for ours, theirs in (
        (tg.adaptive_avg_pool2d, F.adaptive_avg_pool2d),
        (tg.adaptive_max_pool2d, F.adaptive_max_pool2d),
    ):
        check_against_torch(
            lambda a, f=ours: f(a, (oh, ow)), lambda a, f=theirs: f(a, (oh, ow)), x, compiled=False
        )


@pytest.mark.parametrize(
    ("build", "reference"),
    [
        (lambda x: tg.max_pool2d(x, 3, 2, 1, 2, True), lambda x: F.max_pool2d(x, 3, 2, 1, 2, True)),
        (
            lambda x: tg.avg_pool2d(x, 3, 2, 1, True, False),
            lambda x: F.avg_pool2d(x, 3, 2, 1, True, False),
        ),
        (
            lambda x: tg.avg_pool2d(x, 2, 2, 1, True, True, 3),
            lambda x: F.avg_pool2d(x, 2, 2, 1, True, True, 3),
        ),
        (lambda x: tg.adaptive_avg_pool2d(x, (3, 4)), lambda x: F.adaptive_avg_pool2d(x, (3, 4))),
        (lambda x: tg.adaptive_max_pool2d(x, 5), lambda x: F.adaptive_max_pool2d(x, 5)),
    ],
    ids=["max-ceil-dilated", "avg-ceil-exclude-pad", "avg-divisor", "adaptive-avg", "adaptive-max"],
)
def test_pools_in_compiled_mode(build, reference) -> None:
    check_against_torch(build, reference, rand(1, 2, 8, 7))


@pytest.mark.parametrize(
    ("shape", "pairs", "mode", "value"),
    [
        ((2, 3, 5, 6), [(0, 0), (0, 0), (2, 1), (3, 3)], "constant", 1.5),
        ((2, 3, 5, 6), [(0, 0), (0, 0), (-2, 1), (3, -4)], "constant", 0.0),
        ((2, 3, 5, 6), [(0, 0), (1, 2), (0, 3)], "constant", -1.0),
        ((2, 3, 5, 6), [(0, 0), (0, 0), (4, 1), (2, 5)], "reflect", 0.0),
        ((2, 3, 5, 6), [(0, 0), (0, 0), (7, 1), (2, 9)], "replicate", 0.0),
        ((2, 3, 7), [(0, 0), (0, 0), (6, 6)], "reflect", 0.0),
    ],
)
def test_pad_matches_torch(shape, pairs, mode, value) -> None:
    full = list(pairs) + [(0, 0)] * (len(shape) - len(pairs))
    flat = [v for pair in reversed(full) for v in pair]  # torch: last axis first
    # torch's reflect/replicate take only the padded trailing axes (2 for a 4-D input)
    flat = flat[: 2 * (len(shape) - 2)] if mode != "constant" else flat
    check_against_torch(
        lambda x: tg.pad(x, pairs, value, mode),
        lambda x: F.pad(x, flat, mode=mode, value=value if mode == "constant" else None),
        rand(*shape),
    )


@settings(max_examples=20)
@given(
    st.integers(1, 7),
    st.integers(1, 7),
    st.integers(1, 15),
    st.integers(1, 15),
    st.sampled_from(["nearest", "bilinear", "bilinear-aligned"]),
)
def test_resizes_match_torch(h, w, oh, ow, mode) -> None:
    x, aligned = rand(2, 3, h, w), mode == "bilinear-aligned"
    if mode == "nearest":
        check_against_torch(
            lambda a: tg.upsample_nearest2d(a, (oh, ow)),
            lambda a: F.interpolate(a, size=(oh, ow), mode="nearest"),
            x,
            compiled=False,
        )
    else:
        check_against_torch(
            lambda a: tg.upsample_bilinear2d(a, (oh, ow), aligned),
            lambda a: F.interpolate(a, size=(oh, ow), mode="bilinear", align_corners=aligned),
            x,
            compiled=False,
        )


@pytest.mark.parametrize(("size", "out"), [((2, 3), (82, 7)), ((5, 4), (9, 13))])
def test_resizes_in_compiled_mode(size, out) -> None:
    # 2 -> 82 is where torch's float32 scale picks a different row than exact arithmetic.
    x = rand(1, 2, *size)
    check_against_torch(
        lambda a: tg.upsample_nearest2d(a, out), lambda a: F.interpolate(a, size=out), x
    )
    check_against_torch(
        lambda a: tg.upsample_bilinear2d(a, out, True),
        lambda a: F.interpolate(a, size=out, mode="bilinear", align_corners=True),
        x,
    )
