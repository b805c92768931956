"""2-D convolution and pooling against direct loops over every output element (the
naive_conv2d and naive_pool oracles), through the builder (see tests/ir/op_cases.py)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorgraph as tg
from tensorgraph.ir.dtypes import as_dtype
from tests.ir.op_cases import (
    BF16,
    F16,
    F64,
    Arrays,
    Case,
    case_adder,
    check_case,
    naive_conv2d,
    naive_conv_transpose2d,
)

CASES: list[Case] = []
case = case_adder(CASES)
_random = Arrays(seed=5)
rand, ints = _random.rand, _random.ints

# ---------------------------------------------------------------- convolution and pooling

CONVS = [  # (x shape, weight shape, stride, padding, dilation, groups, dtype)
    ((2, 3, 7, 6), (4, 3, 3, 3), (1, 1), (1, 1), (1, 1), 1, np.float32),
    ((1, 4, 7, 6), (4, 1, 3, 3), (2, 2), (1, 1), (1, 1), 4, np.float32),  # depthwise
    ((1, 4, 6, 6), (8, 1, 3, 3), (1, 1), (1, 1), (1, 1), 4, np.float32),  # depthwise x2
    ((1, 4, 7, 7), (6, 2, 3, 3), (1, 1), (0, 0), (2, 2), 2, np.float32),
    ((1, 2, 5, 5), (2, 2, 3, 3), (2, 2), (2, 2), (1, 1), 1, np.float32),
    ((2, 3, 4, 5), (5, 3, 1, 1), (1, 1), (0, 0), (1, 1), 1, np.float32),  # 1x1
    ((1, 3, 8, 7), (2, 3, 3, 2), (2, 1), (1, 0), (1, 2), 1, np.float32),  # per-axis pairs
    ((1, 6, 5, 5), (6, 2, 2, 2), (1, 2), (0, 1), (1, 1), 3, np.float32),
    ((1, 2, 3, 3), (2, 2, 3, 3), (1, 1), (0, 0), (1, 1), 1, np.float32),  # 1x1 output
    ((1, 2, 6, 6), (3, 2, 3, 3), (1, 1), (1, 1), (1, 1), 1, F16),
    ((1, 2, 5, 5), (2, 1, 3, 3), (1, 1), (1, 1), (1, 1), 2, np.int32),
    # ((top, bottom), (left, right)): the weight gradients of strided convolutions
    ((2, 3, 9, 8), (4, 3, 3, 3), (2, 2), ((3, 0), (1, 2)), (1, 1), 1, np.float32),
    ((1, 4, 7, 6), (4, 2, 2, 3), (1, 2), ((0, 2), (2, 0)), (2, 1), 2, np.float32),
    ((1, 2, 5, 5), (2, 1, 3, 3), (1, 1), ((1, 0), (0, 1)), (1, 1), 2, np.int32),
    ((2, 2, 8, 7), (3, 2, 2, 2), (3, 2), ((0, -2), (1, -1)), (1, 1), 1, np.float32),
]
for _xs, _ws, _stride, _pad, _dil, _groups, _dtype in CONVS:
    _make = ints if np.dtype(_dtype).kind == "i" else rand
    case(
        "conv2d",
        f"{_xs}*{_ws}-s{_stride}-p{_pad}-d{_dil}-g{_groups}-{np.dtype(_dtype)}",
        (_make(*_xs, dtype=_dtype), _make(*_ws, dtype=_dtype)),
        lambda x, w, s=_stride, p=_pad, d=_dil, k=_groups: tg.conv2d(x, w, s, p, d, k),
        as_dtype(_dtype),
        lambda x, w, s=_stride, p=_pad, d=_dil, k=_groups: naive_conv2d(x, w, s, p, d, k),
        rtol=1e-4,
        atol=1e-4,
    )
case(
    "conv2d",
    "scalar-arguments",
    [rand(1, 2, 5, 5), rand(4, 1, 3, 3)],
    lambda x, w: tg.conv2d(x, w, stride=2, padding=1, dilation=1, groups=2),
    tg.float32,
    lambda x, w: naive_conv2d(x, w, (2, 2), (1, 1), (1, 1), 2),
    rtol=1e-4,
    atol=1e-4,
)

TRANSPOSED = [  # (x shape, weight shape, stride, padding, dilation, output_padding, groups, dtype)
    ((2, 3, 4, 5), (3, 2, 3, 3), (2, 2), (1, 1), (1, 1), (1, 1), 1, np.float32),
    ((1, 4, 3, 3), (4, 1, 2, 2), (2, 2), (0, 0), (1, 1), (0, 0), 4, np.float32),  # depthwise
    ((1, 4, 4, 3), (4, 3, 3, 2), (2, 1), (1, 0), (2, 1), (1, 0), 2, np.float32),  # per axis
    ((1, 2, 3, 3), (2, 2, 1, 1), (3, 3), (0, 0), (1, 1), (2, 2), 1, np.float32),  # 1x1, pad
    ((1, 2, 5, 5), (2, 3, 2, 2), (2, 2), (3, 3), (1, 1), (1, 1), 1, np.float32),  # crop
    ((1, 2, 3, 4), (2, 2, 3, 3), (1, 1), (1, 1), (1, 1), (0, 0), 1, F16),
    ((1, 2, 3, 3), (2, 2, 2, 2), (2, 2), (0, 0), (1, 1), (0, 0), 1, BF16),
]
for _xs, _ws, _stride, _pad, _dil, _extra, _groups, _dtype in TRANSPOSED:
    case(
        "conv_transpose2d",
        f"{_xs}*{_ws}-s{_stride}-p{_pad}-d{_dil}-o{_extra}-g{_groups}-{np.dtype(_dtype)}",
        (rand(*_xs, dtype=_dtype), rand(*_ws, dtype=_dtype)),
        lambda x, w, s=_stride, p=_pad, d=_dil, e=_extra, k=_groups: tg.conv_transpose2d(
            x, w, s, p, d, e, k
        ),
        as_dtype(_dtype),
        lambda x, w, s=_stride, p=_pad, d=_dil, e=_extra, k=_groups: naive_conv_transpose2d(
            x, w, s, p, d, e, k
        ),
        rtol=1e-2 if np.dtype(_dtype).itemsize == 2 else 1e-4,
        atol=1e-2 if np.dtype(_dtype).itemsize == 2 else 1e-4,
    )


def naive_pool(x, kernel, stride, padding, reduce, fill):
    """A direct loop over output positions; `fill` pads (-inf for max, 0 for sums)."""
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    xp = np.pad(x.astype(F64), ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=fill)
    oh, ow = (x.shape[2] + 2 * ph - kh) // sh + 1, (x.shape[3] + 2 * pw - kw) // sw + 1
    out = np.zeros((*x.shape[:2], oh, ow))
    for i in range(oh):
        for j in range(ow):
            out[:, :, i, j] = reduce(xp[:, :, i * sh : i * sh + kh, j * sw : j * sw + kw], (2, 3))
    return out


def naive_avg(x, kernel, stride, padding, count_include_pad=True):
    """Window sums over the zero-padded input, divided by the window area or by the
    number of real (unpadded) elements in each window."""
    sums = naive_pool(x, kernel, stride, padding, np.sum, 0)
    if count_include_pad:
        return sums / (kernel[0] * kernel[1])
    ones = np.ones((1, 1, *x.shape[2:]))
    return sums / naive_pool(ones, kernel, stride, padding, np.sum, 0)


POOLS = [  # (kernel, stride, padding); stride None means the kernel size
    ((2, 2), None, (0, 0)),
    ((3, 3), (2, 2), (1, 1)),
    ((3, 3), (1, 1), (1, 1)),
    ((3, 2), (2, 1), (1, 1)),
    ((1, 1), (1, 1), (0, 0)),
    ((4, 4), (3, 3), (2, 2)),
]
_NEGATIVE = rand(2, 3, 7, 6, low=-3, high=-1)  # zero padding would win a max here
for _k, _s, _p in POOLS:
    _stride = _s or _k
    case(
        "max_pool2d",
        f"k{_k}-s{_s}-p{_p}",
        [_NEGATIVE],
        lambda x, k=_k, s=_s, p=_p: tg.max_pool2d(x, k, s, p),
        tg.float32,
        lambda x, k=_k, s=_stride, p=_p: naive_pool(x, k, s, p, np.max, -np.inf),
    )
    for _include in (True, False):
        case(
            "avg_pool2d",
            f"k{_k}-s{_s}-p{_p}-count_include_pad={_include}",
            [_NEGATIVE],
            lambda x, k=_k, s=_s, p=_p, c=_include: tg.avg_pool2d(x, k, s, p, count_include_pad=c),
            tg.float32,
            lambda x, k=_k, s=_stride, p=_p, c=_include: naive_avg(x, k, s, p, c),
        )
case(
    "max_pool2d",
    "int32",
    [ints(1, 2, 5, 5, low=-9, high=-1)],
    lambda x: tg.max_pool2d(x, 3, 2, 1),
    tg.int32,
    lambda x: naive_pool(x, (3, 3), (2, 2), (1, 1), np.max, -np.inf),
)
case(
    "max_pool2d",
    "f16",
    [rand(1, 2, 4, 4, dtype=F16)],
    lambda x: tg.max_pool2d(x, 2),
    tg.float16,
    lambda x: naive_pool(x, (2, 2), (2, 2), (0, 0), np.max, -np.inf),
)
case(
    "avg_pool2d",
    "bf16",
    [rand(1, 2, 4, 4, dtype=BF16)],
    lambda x: tg.avg_pool2d(x, 2, 1, 1),
    tg.bfloat16,
    lambda x: naive_avg(x, (2, 2), (1, 1), (1, 1)),
)


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_inference_and_reference_numerics(c: Case) -> None:
    check_case(c)
