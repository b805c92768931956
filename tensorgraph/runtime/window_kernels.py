"""NumPy kernels of the pools (max/avg with padding, dilation and ceil_mode; adaptive
avg/max), of `pad`, of the 2-D resizes (nearest, bilinear) and of the transposed
convolution, registered in
`runtime.kernels.KERNELS` (same contract: a fresh result of the node's shape and dtype;
half precision computed in float32).

Pools follow torch: padding counts as -inf for max and as 0 in avg's sums; with
ceil_mode the last window may run past the padded input (inference guarantees it starts
inside the input or the left padding), and the overhang is ignored. avg_pool2d divides
by `divisor_override` when set, else by the window's extent clipped to the padded input
(count_include_pad) or by its count of real elements. Adaptive windows along an axis of
`size` into `out` cells are [floor(i * size / out), ceil((i + 1) * size / out)).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from tensorgraph.ir.node import Node
from tensorgraph.ir.window_inference import transposed_extent
from tensorgraph.runtime.kernels import Kernel, _lowest, _operand, _wide, _windows


def window_extra(size: int, out: int, kernel: int, stride: int, pad: int, dilation: int) -> int:
    """Elements past the right padding that the last of `out` windows reaches (ceil_mode);
    0 when every window fits."""
    needed = (out - 1) * stride + dilation * (kernel - 1) + 1
    return max(0, needed - (size + 2 * pad))


def pad_widths(
    shape: tuple[int, ...],
    node: Node,
    dilation: tuple[int, int],
    pooled: tuple[int, ...] | None = None,
) -> list[tuple[int, int]]:
    """Per-axis (before, after) padding of a pool's NCHW input: the node's padding on
    both sides plus ceil_mode's overhang on the right (shared by both backends). The
    pooled extents are the node's own, or `pooled`'s last two (a pool's backward, whose
    node has the input's shape)."""
    kernel, stride, padding = (node.attr(k) for k in ("kernel_size", "stride", "padding"))
    out = (node.shape if pooled is None else pooled)[-2:]
    widths = [(0, 0), (0, 0)]
    for i in range(2):
        extra = window_extra(shape[2 + i], out[i], kernel[i], stride[i], padding[i], dilation[i])
        widths.append((padding[i], padding[i] + extra))
    return widths


def _padded(x: np.ndarray, node: Node, dilation: tuple[int, int], fill: object) -> np.ndarray:
    """x padded by `pad_widths`, with `fill`."""
    return np.pad(x, pad_widths(x.shape, node, dilation), constant_values=fill)


def pool_divisors(size: int, out: int, kernel: int, stride: int, pad: int) -> tuple:
    """(extent within the padded input, count of real elements) of each of `out` windows
    along one axis, as int arrays."""
    starts = np.arange(out) * stride - pad
    ends = np.minimum(starts + kernel, size + pad)
    return ends - starts, np.minimum(ends, size) - np.maximum(starts, 0)


def _max_pool2d(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    x = _wide(args[0])
    dilation = node.attr("dilation")
    padded = _padded(x, node, dilation, _lowest(x.dtype))
    kernel, stride = node.attr("kernel_size"), node.attr("stride")
    return _windows(padded, kernel, stride, dilation, node.shape[2:]).max(axis=(4, 5))


def _avg_pool2d(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    x = args[0]
    x = x.astype(np.float64) if x.dtype.kind in "biu" else _wide(x)
    kernel, stride, padding = (node.attr(k) for k in ("kernel_size", "stride", "padding"))
    oh, ow = node.shape[2:]
    padded = _padded(x, node, (1, 1), 0)
    total = _windows(padded, kernel, stride, (1, 1), (oh, ow)).sum(axis=(4, 5))
    if node.attr("divisor_override"):
        return total / node.attr("divisor_override")
    rows = pool_divisors(x.shape[2], oh, kernel[0], stride[0], padding[0])
    cols = pool_divisors(x.shape[3], ow, kernel[1], stride[1], padding[1])
    which = 0 if node.attr("count_include_pad") else 1
    return total / np.outer(rows[which], cols[which]).astype(x.dtype)


def adaptive_windows(size: int, out: int) -> list[tuple[int, int]]:
    """torch's adaptive pooling windows: [floor(i*size/out), ceil((i+1)*size/out))."""
    return [((i * size) // out, -((-(i + 1) * size) // out)) for i in range(out)]


def _adaptive(reduce: Callable[..., np.ndarray], average: bool) -> Kernel:
    """Separable: reduce row bands, then column bands (a max of maxes is the max of the
    rectangle; sums of sums its sum, divided once by the rectangle's area)."""

    def kernel(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
        x = args[0]
        x = x.astype(np.float64) if average and x.dtype.kind in "biu" else _wide(x)
        rows = adaptive_windows(x.shape[2], node.shape[2])
        cols = adaptive_windows(x.shape[3], node.shape[3])
        x = np.stack([reduce(x[:, :, s:e], axis=2) for s, e in rows], axis=2)
        x = np.stack([reduce(x[:, :, :, s:e], axis=3) for s, e in cols], axis=3)
        if not average:
            return x
        area = np.outer([e - s for s, e in rows], [e - s for s, e in cols])
        return x / area.astype(x.dtype)

    return kernel


def pad_indices(size: int, lo: int, hi: int, mode: str) -> np.ndarray:
    """For reflect/replicate: the source position of each output position along an axis
    (the padded positions -lo .. size + hi - 1 mirrored or clamped into [0, size))."""
    positions = np.arange(-lo, size + hi)
    if mode == "reflect":
        positions = np.abs(positions)
        return np.where(positions >= size, 2 * (size - 1) - positions, positions)
    return np.clip(positions, 0, size - 1)


def _pad(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    x = args[0]
    pads, mode = node.attr("pads"), node.attr("mode")
    pairs = [(pads[2 * a], pads[2 * a + 1]) for a in range(x.ndim)]
    if mode != "constant":
        for axis, (lo, hi) in enumerate(pairs):
            if lo or hi:
                x = np.take(x, pad_indices(x.shape[axis], lo, hi, mode), axis=axis)
        return x
    if x.ndim == 0:
        return x
    crop = tuple(
        slice(max(-lo, 0), size - max(-hi, 0))
        for (lo, hi), size in zip(pairs, x.shape, strict=True)
    )
    value = np.asarray(node.attr("value")).astype(x.dtype)  # NumPy's cast, as full's
    return np.pad(x[crop], [(max(lo, 0), max(hi, 0)) for lo, hi in pairs], constant_values=value)


def nearest_indices(size: int, out: int) -> np.ndarray:
    """torch's legacy nearest source rows: identity, halving, or min(floor(i * scale),
    size - 1) with scale = size / out and the product both in float32 (torch's CPU code;
    exact integer arithmetic differs, e.g. 14 -> 40 at row 20 gives 6, not 7)."""
    if out == size:
        return np.arange(out)
    if out == 2 * size:
        return np.arange(out) >> 1
    scale = np.float32(size) / np.float32(out)
    products = np.arange(out, dtype=np.float32) * scale
    return np.minimum(np.floor(products).astype(np.int64), size - 1)


def linear_weights(size: int, out: int, align_corners: bool) -> tuple:
    """(lower source row, upper source row, weight of the upper) for each of `out` rows,
    torch's bilinear source coordinates (see ir.conv.upsample_bilinear2d)."""
    positions = np.arange(out, dtype=np.float64)
    if align_corners:
        source = positions * ((size - 1) / (out - 1) if out > 1 else 0.0)
    else:
        source = np.maximum((positions + 0.5) * (size / out) - 0.5, 0.0)
    lower = np.minimum(np.floor(source).astype(np.int64), size - 1)
    upper = np.minimum(lower + 1, size - 1)
    return lower, upper, source - lower


def _upsample_nearest2d(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    x = args[0]
    x = np.take(x, nearest_indices(x.shape[2], node.shape[2]), axis=2)
    return np.take(x, nearest_indices(x.shape[3], node.shape[3]), axis=3)


def _upsample_bilinear2d(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    x = _wide(args[0])
    align = node.attr("align_corners")
    lower, upper, weight = linear_weights(x.shape[2], node.shape[2], align)
    weight = weight.astype(x.dtype)[:, None]
    x = x[:, :, lower] * (1 - weight) + x[:, :, upper] * weight
    lower, upper, weight = linear_weights(x.shape[3], node.shape[3], align)
    weight = weight.astype(x.dtype)
    return x[..., lower] * (1 - weight) + x[..., upper] * weight


def _conv_transpose2d(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    """Scatter form: every input pixel adds its weight-scaled kernel into the output at
    stride spacing. Per kernel tap (i, j), the grouped channel contraction of the whole
    input (one batched matmul) lands on rows i * dilation + stride * h of a full-size
    canvas; the canvas is then cropped by the padding (output_padding extends the end).
    Taps are added in a fixed order, so the result is the same on every run."""
    x, w = (_operand(node, a) for a in args)
    n, _, oh, ow = node.shape
    groups = node.attr("groups")
    (sh, sw), (dh, dw) = node.attr("stride"), node.attr("dilation")
    (ph, pw) = node.attr("padding")
    _, c, h, wd = x.shape
    _, og, kh, kw = w.shape
    cg = c // groups
    # every tap lands inside the unpadded extent; output_padding may reach past it
    rows_needed = max(oh + ph, transposed_extent(h, kh, sh, 0, dh, 0))
    cols_needed = max(ow + pw, transposed_extent(wd, kw, sw, 0, dw, 0))
    canvas = np.zeros((n, groups, og, rows_needed, cols_needed), dtype=x.dtype)
    grouped = x.reshape(n, groups, cg, h * wd)
    weights = w.reshape(groups, cg, og, kh, kw)
    for i in range(kh):
        for j in range(kw):
            # (groups, og, cg) @ (n, groups, cg, h*w) -> (n, groups, og, h*w)
            tap = np.matmul(weights[:, :, :, i, j].transpose(0, 2, 1), grouped)
            rows = slice(i * dh, i * dh + sh * (h - 1) + 1, sh)
            cols = slice(j * dw, j * dw + sw * (wd - 1) + 1, sw)
            canvas[:, :, :, rows, cols] += tap.reshape(n, groups, og, h, wd)
    out = canvas[:, :, :, ph : ph + oh, pw : pw + ow]
    return out.reshape(n, groups * og, oh, ow)


KERNELS: dict[str, Kernel] = {
    "max_pool2d": _max_pool2d,
    "avg_pool2d": _avg_pool2d,
    "adaptive_avg_pool2d": _adaptive(np.sum, average=True),
    "adaptive_max_pool2d": _adaptive(np.max, average=False),
    "pad": _pad,
    "upsample_nearest2d": _upsample_nearest2d,
    "upsample_bilinear2d": _upsample_bilinear2d,
    "conv_transpose2d": _conv_transpose2d,
}
