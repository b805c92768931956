"""Pools with dilation, ceil_mode and divisor_override, adaptive pools and pad, through
the builder, against direct loops over every output element written from torch's
definitions (see tests/ir/op_cases.py); output sizes derived by hand where a rule is at
stake. tests/codegen_mlx/test_ops_windows.py checks all backends against torch itself."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import tensorgraph as tg
from tests.ir.op_cases import F16, F64, Arrays, Case, build_and_run, case_adder, check_case

CASES: list[Case] = []
case = case_adder(CASES)
_random = Arrays(seed=19)
rand, ints, flags = _random.rand, _random.ints, _random.flags


def out_size(size, k, s, p, d, ceil_mode):
    """torch: floor or ceil of (size + 2p - d(k-1) - 1) / s, plus 1; with ceil_mode, one
    fewer if the last window would start at or past size + p."""
    exact = (size + 2 * p - d * (k - 1) - 1) / s
    out = (math.ceil(exact) if ceil_mode else math.floor(exact)) + 1
    return out - 1 if ceil_mode and (out - 1) * s >= size + p else out


def naive_pool(x, kernel, stride, padding, dilation, ceil_mode, mode, include=True, divisor=0):
    """Loops over output cells; each window's taps at i*s - p + a*d. max: over the taps
    inside the input (-inf if none); avg: their sum over the divisor torch uses."""
    n, c, h, w = x.shape
    oh, ow = (
        out_size(x.shape[2 + i], kernel[i], stride[i], padding[i], dilation[i], ceil_mode)
        for i in range(2)
    )
    out = np.zeros((n, c, oh, ow))
    for i, j in itertools.product(range(oh), range(ow)):
        h0, w0 = i * stride[0] - padding[0], j * stride[1] - padding[1]
        rows = [h0 + a * dilation[0] for a in range(kernel[0])]
        cols = [w0 + b * dilation[1] for b in range(kernel[1])]
        real = [(r, q) for r in rows for q in cols if 0 <= r < h and 0 <= q < w]
        values = [x[:, :, r, q].astype(F64) for r, q in real]
        if mode == "max":
            out[:, :, i, j] = np.max(values, axis=0) if values else -np.inf
            continue
        total = np.sum(values, axis=0) if values else 0.0
        if divisor:
            count = divisor
        elif include:  # the window clipped to the padded input (ceil_mode's overhang off)
            count = (min(h0 + kernel[0], h + padding[0]) - h0) * (
                min(w0 + kernel[1], w + padding[1]) - w0
            )
        else:
            count = len(real)
        out[:, :, i, j] = total / count
    return out


POOLS = [  # (input shape, kernel, stride, padding, dilation, ceil_mode)
    ((1, 2, 6, 6), (3, 3), (2, 2), (0, 0), (1, 1), True),  # 6 -> 3 (floor mode: 2)
    ((1, 2, 5, 5), (2, 2), (2, 2), (1, 1), (1, 1), True),  # 4th window starts at 6: 3
    ((2, 3, 13, 13), (3, 3), (2, 2), (0, 0), (1, 1), True),  # squeezenet's 3x3/2 ceil
    ((1, 2, 7, 8), (3, 2), (2, 3), (1, 1), (1, 1), True),
    ((1, 2, 9, 9), (3, 3), (1, 1), (1, 1), (2, 2), False),
    ((1, 1, 8, 7), (2, 3), (2, 2), (1, 0), (3, 2), True),
    ((1, 2, 4, 4), (2, 2), (3, 3), (0, 0), (1, 1), True),  # stride > kernel
]
for _xs, _k, _s, _p, _d, _ceil in POOLS:
    _x = rand(*_xs, low=-3, high=-1)  # negative: a zero pad would win a max
    _id = f"{_xs}-k{_k}-s{_s}-p{_p}-d{_d}-ceil={_ceil}"
    case(
        "max_pool2d",
        _id,
        [_x],
        lambda x, k=_k, s=_s, p=_p, d=_d, c=_ceil: tg.max_pool2d(x, k, s, p, d, c),
        tg.float32,
        lambda x, k=_k, s=_s, p=_p, d=_d, c=_ceil: naive_pool(x, k, s, p, d, c, "max"),
    )
    if _d == (1, 1):
        for _include, _divisor in ((True, None), (False, None), (True, 5)):
            case(
                "avg_pool2d",
                f"{_id}-include={_include}-divisor={_divisor}",
                [_x],
                lambda x, k=_k, s=_s, p=_p, c=_ceil, i=_include, v=_divisor: tg.avg_pool2d(
                    x, k, s, p, c, i, v
                ),
                tg.float32,
                lambda x, k=_k, s=_s, p=_p, c=_ceil, i=_include, v=_divisor: naive_pool(
                    x, k, s, p, (1, 1), c, "avg", i, v or 0
                ),
            )
case(
    "max_pool2d",
    "int8-ceil",
    [ints(1, 2, 5, 5, dtype=np.int8)],
    lambda x: tg.max_pool2d(x, 2, 2, 0, 1, True),
    tg.int8,
    lambda x: naive_pool(x, (2, 2), (2, 2), (0, 0), (1, 1), True, "max"),
)
case(
    "max_pool2d",
    "bool",
    [flags(1, 1, 4, 4)],
    lambda x: tg.max_pool2d(x, 2),
    tg.bool_,
    lambda x: naive_pool(x, (2, 2), (2, 2), (0, 0), (1, 1), False, "max"),
)
case(
    "avg_pool2d",
    "f16-ceil",
    [rand(1, 2, 5, 5, dtype=F16)],
    lambda x: tg.avg_pool2d(x, 2, 2, ceil_mode=True),
    tg.float16,
    lambda x: naive_pool(x, (2, 2), (2, 2), (0, 0), (1, 1), True, "avg"),
)


def test_ceil_mode_output_sizes_derived_by_hand() -> None:
    # 6 wide, 3x3 stride 2: floor((6-3)/2)+1 = 2 windows, ceil(1.5)+1 = 3 with ceil_mode
    # (the third starts at 4 < 6). 5 wide, kernel 2, stride 2, pad 1: ceil(5/2)+1 = 4, but
    # the 4th window would start at 3*2 = 6 >= 5 + 1, so 3.
    g = tg.Graph("sizes")
    x = g.input("x", (1, 1, 6, 5))
    assert tg.max_pool2d(x, 3, 2).shape == (1, 1, 2, 2)
    assert tg.max_pool2d(x, 3, 2, ceil_mode=True).shape == (1, 1, 3, 2)
    assert tg.avg_pool2d(x, 2, 2, 1, ceil_mode=True).shape == (1, 1, 4, 3)


# ---------------------------------------------------------------- adaptive pools


def naive_adaptive(x, out, mode):
    """Cell (i, j) covers rows [floor(i*H/OH), ceil((i+1)*H/OH)) and likewise columns."""
    n, c, h, w = x.shape
    result = np.zeros((n, c, *out))
    for i, j in itertools.product(range(out[0]), range(out[1])):
        r0, r1 = math.floor(i * h / out[0]), math.ceil((i + 1) * h / out[0])
        c0, c1 = math.floor(j * w / out[1]), math.ceil((j + 1) * w / out[1])
        window = x[:, :, r0:r1, c0:c1].astype(F64)
        result[:, :, i, j] = window.max(axis=(2, 3)) if mode == "max" else window.mean((2, 3))
    return result


ADAPTIVE = [  # (input shape, output size)
    ((1, 2, 7, 7), (3, 3)),  # overlapping windows
    ((2, 3, 6, 8), (2, 4)),  # divisible
    ((1, 2, 5, 3), (7, 4)),  # more cells than inputs
    ((1, 1, 9, 10), (1, 1)),
    ((1, 2, 4, 6), (4, 6)),  # identity
]
_ADAPTIVE_OPS = (
    ("adaptive_avg_pool2d", "avg", tg.adaptive_avg_pool2d),
    ("adaptive_max_pool2d", "max", tg.adaptive_max_pool2d),
)
for _xs, _out in ADAPTIVE:
    _x = rand(*_xs)
    for _op, _mode, _fn in _ADAPTIVE_OPS:
        case(
            _op,
            f"{_xs}->{_out}",
            [_x],
            lambda x, o=_out, f=_fn: f(x, o),
            tg.float32,
            lambda x, o=_out, m=_mode: naive_adaptive(x, o, m),
        )
case(
    "adaptive_avg_pool2d",
    "int-and-None",
    [ints(1, 2, 5, 4)],
    lambda x: tg.adaptive_avg_pool2d(x, (2, None)),
    tg.int32,
    lambda x: np.trunc(naive_adaptive(x, (2, 4), "avg")),
)
case(
    "adaptive_max_pool2d",
    "int8-scalar-size",
    [ints(1, 2, 5, 5, dtype=np.int8)],
    lambda x: tg.adaptive_max_pool2d(x, 2),
    tg.int8,
    lambda x: naive_adaptive(x, (2, 2), "max"),
)
case(
    "adaptive_avg_pool2d",
    "f16",
    [rand(1, 2, 5, 5, dtype=F16)],
    lambda x: tg.adaptive_avg_pool2d(x, 3),
    tg.float16,
    lambda x: naive_adaptive(x, (3, 3), "avg"),
)

# ---------------------------------------------------------------- pad


def naive_pad(x, pairs, value, mode):
    """Each output position maps to a source position (or the value) by the mode's rule:
    reflect mirrors about the edges without repeating them, replicate clamps."""
    pairs = list(pairs) + [(0, 0)] * (x.ndim - len(pairs))
    shape = [n + lo + hi for n, (lo, hi) in zip(x.shape, pairs, strict=True)]
    out = np.empty(shape, x.dtype)
    for position in itertools.product(*(range(n) for n in shape)):
        source = []
        for p, n, (lo, _) in zip(position, x.shape, pairs, strict=True):
            q = p - lo
            if mode == "reflect":
                q = -q if q < 0 else (2 * (n - 1) - q if q >= n else q)
            elif mode == "replicate":
                q = min(max(q, 0), n - 1)
            source.append(q)
        inside = all(0 <= q < n for q, n in zip(source, x.shape, strict=True))
        out[position] = x[tuple(source)] if inside else value
    return out


PADS = [  # (shape, pairs, value, mode)
    ((2, 3), [(1, 2), (0, 1)], 0.0, "constant"),
    ((2, 3), [(1, 0)], 2.5, "constant"),  # fewer pairs: later axes untouched
    ((4, 5), [(-1, 2), (1, -3)], -1.0, "constant"),  # negative amounts crop
    ((3, 4), [(0, 0), (-2, -2)], 0.0, "constant"),  # cropped to nothing
    ((0, 2), [(1, 1), (0, 0)], 7.0, "constant"),  # padding an empty axis
    ((), [], 0.0, "constant"),
    ((2, 3, 4), [(0, 0), (2, 1), (3, 3)], 0.0, "reflect"),
    ((1, 5), [(0, 0), (4, 4)], 0.0, "reflect"),
    ((2, 3, 4), [(1, 0), (2, 2), (0, 5)], 0.0, "replicate"),
    ((1, 1), [(3, 2), (2, 3)], 0.0, "replicate"),
]
for _shape, _pairs, _value, _mode in PADS:
    case(
        "pad",
        f"{_shape}-{_pairs}-{_mode}",
        [rand(*_shape)],
        lambda x, p=_pairs, v=_value, m=_mode: tg.pad(x, p, v, m),
        tg.float32,
        lambda x, p=_pairs, v=_value, m=_mode: naive_pad(x, p, v, m),
    )
case(
    "pad",
    "int8-value-cast",
    [ints(2, 2, dtype=np.int8)],
    lambda x: tg.pad(x, [(1, 1)], 300),
    tg.int8,
    lambda x: naive_pad(x, [(1, 1)], np.int8(44), "constant"),
)  # 300 = 256 + 44
case(
    "pad",
    "bool-reflect",
    [flags(3, 3)],
    lambda x: tg.pad(x, [(2, 0), (0, 1)], mode="reflect"),
    tg.bool_,
    lambda x: naive_pad(x, [(2, 0), (0, 1)], False, "reflect"),
)
case(
    "pad",
    "f16",
    [rand(2, 2, dtype=F16)],
    lambda x: tg.pad(x, [(1, 0), (0, 1)], 1.5),
    tg.float16,
    lambda x: naive_pad(x, [(1, 0), (0, 1)], 1.5, "constant"),
)


# ---------------------------------------------------------------- resizes


def naive_resize(x, out, mode, align_corners=False):
    """Loops over output cells. nearest: source floor(i * H / OH) (exact rational; the
    sizes below never meet float32's rounding); bilinear: torch's source coordinate,
    mixed from its two neighbouring rows/columns (the last repeated at the edge)."""
    n, c, h, w = x.shape

    def source(i, size, count):
        if align_corners:
            return i * (size - 1) / (count - 1) if count > 1 else 0.0
        return max((i + 0.5) * size / count - 0.5, 0.0)

    result = np.zeros((n, c, *out))
    for i, j in itertools.product(range(out[0]), range(out[1])):
        if mode == "nearest":
            result[:, :, i, j] = x[:, :, i * h // out[0], j * w // out[1]]
            continue
        r, q = source(i, h, out[0]), source(j, w, out[1])
        r0, q0 = min(math.floor(r), h - 1), min(math.floor(q), w - 1)
        r1, q1 = min(r0 + 1, h - 1), min(q0 + 1, w - 1)
        a, b = r - r0, q - q0
        result[:, :, i, j] = (
            (1 - a) * (1 - b) * x[:, :, r0, q0].astype(F64)
            + (1 - a) * b * x[:, :, r0, q1]
            + a * (1 - b) * x[:, :, r1, q0]
            + a * b * x[:, :, r1, q1]
        )
    return result


RESIZES = [
    ((1, 2, 4, 5), (8, 10)),
    ((1, 2, 3, 4), (7, 5)),
    ((2, 1, 6, 6), (4, 3)),
    ((1, 1, 1, 3), (3, 1)),
]
for _xs, _out in RESIZES:
    _x = rand(*_xs)
    case(
        "upsample_nearest2d",
        f"{_xs}->{_out}",
        [_x],
        lambda x, o=_out: tg.upsample_nearest2d(x, o),
        tg.float32,
        lambda x, o=_out: naive_resize(x, o, "nearest"),
    )
    for _align in (False, True):
        case(
            "upsample_bilinear2d",
            f"{_xs}->{_out}-align={_align}",
            [_x],
            lambda x, o=_out, a=_align: tg.upsample_bilinear2d(x, o, a),
            tg.float32,
            lambda x, o=_out, a=_align: naive_resize(x, o, "bilinear", a),
        )
case(
    "upsample_nearest2d",
    "int8-scalar-size",
    [ints(1, 2, 3, 3, dtype=np.int8)],
    lambda x: tg.upsample_nearest2d(x, 6),
    tg.int8,
    lambda x: naive_resize(x, (6, 6), "nearest"),
)
case(
    "upsample_bilinear2d",
    "f16",
    [rand(1, 1, 3, 3, dtype=F16)],
    lambda x: tg.upsample_bilinear2d(x, 5),
    tg.float16,
    lambda x: naive_resize(x, (5, 5), "bilinear"),
)


def test_nearest_rounds_its_scale_in_float32_like_torch() -> None:
    # 2 -> 82 rows: scale = float32(2 / 82) = 0.024390243068... < 1 / 41, so row 41 reads
    # floor(float32(41 * scale)) = floor(0.99999994) = row 0, as torch does, where the
    # exact 41 * 2 // 82 would be row 1. Row 42 reads row 1.
    x = np.arange(2, dtype=np.float32).reshape(1, 1, 2, 1)
    _, _, got = build_and_run(lambda a: tg.upsample_nearest2d(a, (82, 1)), (x,))
    assert got[0, 0, 40:43, 0].tolist() == [0.0, 0.0, 1.0]


def test_bilinear_needs_a_float_input() -> None:
    g = tg.Graph("bad")
    with pytest.raises(tg.DTypeError, match=r"%\d+ upsample_bilinear2d: .*floating-point"):
        tg.upsample_bilinear2d(g.input("x", (1, 1, 2, 2), tg.int32), 4)


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_inference_and_reference_numerics(c: Case) -> None:
    check_case(c)


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("shape", "pairs", "mode", "message"),
    [
        ((3,), [(3, 0)], "reflect", r"\(3, 0\) on axis 0"),
        ((3,), [(-1, 0)], "replicate", r"\(-1, 0\) on axis 0"),
        ((3,), [(-2, -2)], "constant", r"\(-2, -2\) on axis 0"),
        ((3,), [(1, 1)], "wrap", "mode must be one of"),
    ],
)
def test_bad_pads_are_shape_errors(shape, pairs, mode, message) -> None:
    g = tg.Graph("bad")
    with pytest.raises(tg.ShapeError, match=rf"%\d+ pad: .*{message}"):
        tg.pad(g.input("x", shape), pairs, mode=mode)


def test_more_pad_pairs_than_axes_is_a_shape_error() -> None:
    g = tg.Graph("bad")
    with pytest.raises(tg.ShapeError, match="at most 1"):
        tg.pad(g.input("x", (3,)), [(1, 1), (1, 1)])


def test_pool_errors_name_the_node() -> None:
    g = tg.Graph("bad")
    x = g.input("x", (1, 1, 4, 4))
    with pytest.raises(tg.ShapeError, match=r"%\d+ max_pool2d: pool: padding"):
        tg.max_pool2d(x, 2, 1, 2)
    with pytest.raises(tg.ShapeError, match=r"%\d+ max_pool2d: .*larger than padded"):
        tg.max_pool2d(x, 3, 1, 0, 2)
    with pytest.raises(tg.ShapeError, match=r"%\d+ adaptive_avg_pool2d: .*needs both"):
        tg.adaptive_avg_pool2d(g.input("e", (1, 1, 0, 4)), 2)
    with pytest.raises(tg.ShapeError, match="divisor_override must be positive"):
        tg.avg_pool2d(x, 2, divisor_override=0)
