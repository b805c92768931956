"""MLX lowerings of the pools (max/avg with padding, dilation, ceil_mode and
divisor_override; adaptive avg/max), of `pad`, of the 2-D resizes and of the transposed
convolution, registered in
`codegen_mlx.lowering.LOWERINGS` with the NumPy kernels' values (runtime.window_kernels).

MLX has no pooling op: a pool is one strided slice of the padded input per kernel
position, combined elementwise (max, or a sum divided by a constant divisor grid computed
on the host). ceil_mode's overhang past the right padding is padded with the pool's
identity, so it never wins a max and adds nothing to a sum. Adaptive pools reduce row
bands, then column bands (separable windows). reflect/replicate padding is one `take`
per padded axis with host-computed source positions; constant padding is a crop then
mx.pad. Resizes are takes of host-computed source rows (and a weighted mix of two for
bilinear). The window geometry (overhang, divisors, adaptive bands, pad positions,
resize sources) is the oracle's own host arithmetic, imported from runtime.window_kernels.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import mlx.core as mx
import numpy as np

from tensorgraph.codegen_mlx.arrays import to_mx
from tensorgraph.codegen_mlx.lowering import Lowering, _as, _window_slices
from tensorgraph.ir.node import Node
from tensorgraph.runtime.window_kernels import (
    adaptive_windows,
    linear_weights,
    nearest_indices,
    pad_indices,
    pad_widths,
    pool_divisors,
)


def _lowest(node: Node) -> object:
    """The identity of max in the node's dtype, the padding of max_pool2d: -inf, the
    minimum integer (0 for uint8), False for bool."""
    if node.dtype.is_float:
        return -math.inf
    if node.dtype.name == "bool":
        return False
    return int(np.iinfo(node.dtype.to_numpy()).min)


def _padded(x: mx.array, node: Node, dilation: tuple[int, int], fill: object) -> mx.array:
    """x padded by the node's padding plus ceil_mode's overhang on the right, with `fill`."""
    widths = pad_widths(tuple(x.shape), node, dilation)
    if all(w == (0, 0) for w in widths):
        return x
    return mx.pad(x, widths, constant_values=fill)


def _max_pool2d(node: Node, args: Sequence[mx.array]) -> mx.array:
    dilation = node.attr("dilation")
    padded = _padded(args[0], node, dilation, _lowest(node))
    windows = _window_slices(padded, node, node.attr("kernel_size"), dilation)
    result = windows[0]
    for w in windows[1:]:
        result = mx.maximum(result, w)
    return result


def _avg_pool2d(node: Node, args: Sequence[mx.array]) -> mx.array:
    """Window sums divided by the divisor grid. Integer and bool inputs are summed exactly
    in int64 (the oracle's float64 sums never wrap) and divided in float32, exact while
    window sums stay below 2^24."""
    x = args[0]
    x = x.astype(mx.int64) if not node.dtype.is_float else _as(node, x)
    windows = _window_slices(_padded(x, node, (1, 1), 0), node, node.attr("kernel_size"))
    total = sum(windows[1:], start=windows[0])
    if node.attr("divisor_override"):
        return _as(node, total / node.attr("divisor_override"))
    kernel, stride, padding = (node.attr(k) for k in ("kernel_size", "stride", "padding"))
    which = 0 if node.attr("count_include_pad") else 1
    rows = pool_divisors(x.shape[2], node.shape[2], kernel[0], stride[0], padding[0])[which]
    cols = pool_divisors(x.shape[3], node.shape[3], kernel[1], stride[1], padding[1])[which]
    return _as(node, total / mx.array(np.outer(rows, cols).astype(np.float32)))


def _adaptive(reduce: Callable[..., mx.array], average: bool) -> Lowering:
    def lower(node: Node, args: Sequence[mx.array]) -> mx.array:
        x = args[0]
        if average:  # exact integer sums; half precision summed in float32, as the oracle
            x = x.astype(mx.float32 if node.dtype.is_float else mx.int64)
        rows = adaptive_windows(x.shape[2], node.shape[2])
        cols = adaptive_windows(x.shape[3], node.shape[3])
        x = mx.concatenate([reduce(x[:, :, s:e], axis=2, keepdims=True) for s, e in rows], 2)
        x = mx.concatenate([reduce(x[:, :, :, s:e], axis=3, keepdims=True) for s, e in cols], 3)
        if not average:
            return x
        area = np.outer([e - s for s, e in rows], [e - s for s, e in cols]).astype(np.float32)
        return _as(node, x / mx.array(area))

    return lower


def _pad(node: Node, args: Sequence[mx.array]) -> mx.array:
    x = args[0]
    pads, mode = node.attr("pads"), node.attr("mode")
    pairs = [(pads[2 * a], pads[2 * a + 1]) for a in range(x.ndim)]
    if mode != "constant":
        for axis, (lo, hi) in enumerate(pairs):
            if lo or hi:
                positions = pad_indices(x.shape[axis], lo, hi, mode).astype(np.int32)
                x = mx.take(x, mx.array(positions), axis=axis)
        return x
    with np.errstate(all="ignore"):  # NumPy's cast of the value, as the oracle's
        value = to_mx(np.asarray(node.attr("value")).astype(node.dtype.to_numpy()))
    if x.size == 0:  # MLX is not trusted with zero-size arrays: all of it is padding
        return mx.full(node.shape, value)
    crop = tuple(
        slice(max(-lo, 0), size - max(-hi, 0))
        for (lo, hi), size in zip(pairs, x.shape, strict=True)
    )
    x = x[crop]
    widths = [(max(lo, 0), max(hi, 0)) for lo, hi in pairs]
    if x.size == 0:
        return mx.full(node.shape, value)
    return mx.pad(x, widths, constant_values=value) if any(lo or hi for lo, hi in widths) else x


def _upsample_nearest2d(node: Node, args: Sequence[mx.array]) -> mx.array:
    x = args[0]
    for axis in (2, 3):
        rows = nearest_indices(x.shape[axis], node.shape[axis]).astype(np.int32)
        x = mx.take(x, mx.array(rows), axis=axis)
    return x


def _upsample_bilinear2d(node: Node, args: Sequence[mx.array]) -> mx.array:
    """Rows then columns, each a mix of two takes; half precision mixed in float32."""
    x = args[0]
    x = x.astype(mx.float32) if node.dtype.itemsize < 4 else x
    for axis in (2, 3):
        lower, upper, weight = linear_weights(
            x.shape[axis], node.shape[axis], node.attr("align_corners")
        )
        shape = [1, 1, 1, 1]
        shape[axis] = len(weight)
        w = mx.array(weight.astype(np.float32).reshape(shape))
        low = mx.take(x, mx.array(lower.astype(np.int32)), axis=axis)
        high = mx.take(x, mx.array(upper.astype(np.int32)), axis=axis)
        x = low * (1 - w) + high * w
    return _as(node, x)


def _dilated(x: mx.array, stride: tuple[int, int]) -> mx.array:
    """NHWC `x` with stride - 1 zeros between its rows and between its columns: (N, H, W,
    C) -> (N, (H - 1) * sh + 1, (W - 1) * sw + 1, C); `x` itself at stride 1."""
    sh, sw = stride
    if (sh, sw) == (1, 1):
        return x
    n, h, w, c = x.shape
    spread = mx.pad(
        x[:, :, None, :, None, :], [(0, 0)] * 2 + [(0, sh - 1), (0, 0), (0, sw - 1), (0, 0)]
    )
    return spread.reshape(n, h * sh, w * sw, c)[:, : (h - 1) * sh + 1, : (w - 1) * sw + 1, :]


def _conv_transpose2d(node: Node, args: Sequence[mx.array]) -> mx.array:
    """The transposed convolution as the convolution it is: over the input dilated by
    the stride (`_dilated`), padded by dilation * (K - 1) - padding on each side (plus
    output_padding at the end), with the kernel flipped and its channel axes swapped.
    MLX's conv_transpose2d takes no groups; conv_general does. A padding beyond
    dilation * (K - 1) pads negatively: padded by 0, then cropped.

    The input is dilated here, not by conv_general's `input_dilation`: MLX's CPU backend
    runs an input-dilated convolution in its direct loop, not its im2col GEMM. Measured
    on the zoo ResNet-18 training step, whose strided convolutions' input gradients are
    such convolutions, interleaved in one process on the shared machine: 29.5 -> 24.0 ms
    a step (segmented), 27.1 -> 21.0 ms (compiled), same losses.

    The kernel is flipped here, by a reversed view folded into the one copy that makes
    the rearranged weight contiguous, not by conv_general's `flip`: MLX's CPU backend
    flips into a second copy of the weight (measured: a 3x3 128->128 input gradient's
    scratch 1.25 MB with `flip`, 0.66 MB without; same values bit for bit)."""
    x, w = (_as(node, a) for a in args)
    groups = node.attr("groups")
    ci, og, kh, kw = w.shape
    weight = w.reshape(groups, ci // groups, og, kh, kw).transpose(0, 2, 3, 4, 1)
    weight = weight.reshape(groups * og, kh, kw, ci // groups)[:, ::-1, ::-1, :]
    low, high, crop = [], [], []
    for axis, k in enumerate((kh, kw)):
        reach = node.attr("dilation")[axis] * (k - 1)
        pad = node.attr("padding")[axis]
        low.append(max(reach - pad, 0))
        high.append(max(reach - pad + node.attr("output_padding")[axis], 0))
        crop.append(max(pad - reach, 0))
    out = mx.conv_general(
        _dilated(mx.transpose(x, (0, 2, 3, 1)), node.attr("stride")),
        weight,
        padding=(tuple(low), tuple(high)),
        kernel_dilation=tuple(node.attr("dilation")),
        groups=groups,
    )
    oh, ow = node.shape[2:]
    out = out[:, crop[0] : crop[0] + oh, crop[1] : crop[1] + ow, :]
    return mx.transpose(out, (0, 3, 1, 2))


TABLE: dict[str, Lowering] = {
    "max_pool2d": _max_pool2d,
    "avg_pool2d": _avg_pool2d,
    "adaptive_avg_pool2d": _adaptive(mx.sum, average=True),
    "adaptive_max_pool2d": _adaptive(mx.max, average=False),
    "pad": _pad,
    "upsample_nearest2d": _upsample_nearest2d,
    "upsample_bilinear2d": _upsample_bilinear2d,
    "conv_transpose2d": _conv_transpose2d,
}
