"""NumPy kernels of the max pools' input gradients (`ir.pool_grad`), added to
`runtime.kernels.KERNELS` on import, and the window geometry both backends share.

The windows are the forward kernels' (runtime.window_kernels): a regular pool's are the
strided (KH, KW) windows of x padded by `pad_widths` (the node's padding plus
ceil_mode's overhang), an adaptive pool's are torch's bands. Half precision is computed
in float32 and rounded once (the kernels' contract). Each window's share is
`hits * (g / count)`: g divided once by the window's count of maxima, then taken (x 1)
or not (x 0) per element, so a share is exactly that quotient or a zero. Without an
`out` operand a window's maximum is taken over those same windows (max is exact, so it
equals the forward kernel's result bit for bit, NaN included).

Accumulation order, which fixes the bits of an element several windows hold: a regular
pool adds its shares tap by tap (kernel row, then column) into a zeroed padded buffer;
an adaptive pool window by window (row-major). The oracle and the arena executor run
these same kernels, so they agree bit for bit; MLX's lowering adds in the same order.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tensorgraph.ir.node import Node
from tensorgraph.ir.pool_grad import pooled_operands
from tensorgraph.runtime.kernels import KERNELS, _wide, _windows
from tensorgraph.runtime.window_kernels import adaptive_windows, pad_widths


def pool_geometry(node: Node, x_shape: tuple, pooled: tuple) -> tuple[list, np.ndarray]:
    """(`pad_widths` of a regular max pool's backward `node` for an input of `x_shape`
    pooled to `pooled`, the (OH, OW, KH, KW) bool array of which window elements lie
    in x rather than in its padding)."""
    dilation = node.attr("dilation")
    widths = pad_widths(x_shape, node, dilation, pooled)
    real = np.pad(np.ones(x_shape[2:], bool), widths[2:])
    inside = _windows(
        real[None, None], node.attr("kernel_size"), node.attr("stride"), dilation, pooled[2:]
    )
    return widths, inside[0, 0]


def _max_pool2d_backward(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    x, out, g = (None if a is None else _wide(a) for a in pooled_operands(node, args))
    (kh, kw), (sh, sw) = node.attr("kernel_size"), node.attr("stride")
    dh, dw = node.attr("dilation")
    oh, ow = g.shape[2:]
    widths, inside = pool_geometry(node, x.shape, g.shape)
    padded = np.pad(x, widths, constant_values=-np.inf)
    windows = _windows(padded, (kh, kw), (sh, sw), (dh, dw), (oh, ow))
    if out is None:  # the forward kernel's own maxima: its padding, windows and max
        out = windows.max(axis=(4, 5))
    hits = ((windows == out[..., None, None]) & inside).astype(x.dtype)
    with np.errstate(divide="ignore", invalid="ignore"):  # a NaN maximum's window: NaN
        quotient = g / hits.sum(axis=(4, 5))
    total = np.zeros(padded.shape, x.dtype)
    for i in range(kh):
        for j in range(kw):
            top, left = i * dh, j * dw
            rows = slice(top, top + sh * (oh - 1) + 1, sh)
            cols = slice(left, left + sw * (ow - 1) + 1, sw)
            total[:, :, rows, cols] += hits[..., i, j] * quotient
    (top, _), (left, _) = widths[2:]
    return total[:, :, top : top + x.shape[2], left : left + x.shape[3]]


def _adaptive_max_pool2d_backward(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    x, out, g = (None if a is None else _wide(a) for a in pooled_operands(node, args))
    total = np.zeros(x.shape, x.dtype)
    rows = adaptive_windows(x.shape[2], g.shape[2])
    cols = adaptive_windows(x.shape[3], g.shape[3])
    for i, (r0, r1) in enumerate(rows):
        for j, (c0, c1) in enumerate(cols):
            band = x[:, :, r0:r1, c0:c1]
            # without `out`, the band's maximum, as the forward kernel takes it
            peak = (
                band.max((2, 3), keepdims=True) if out is None else out[:, :, i : i + 1, j : j + 1]
            )
            hits = (band == peak).astype(x.dtype)
            with np.errstate(divide="ignore", invalid="ignore"):
                quotient = g[:, :, i : i + 1, j : j + 1] / hits.sum(axis=(2, 3), keepdims=True)
            total[:, :, r0:r1, c0:c1] += hits * quotient
    return total


KERNELS["max_pool2d_backward"] = _max_pool2d_backward
KERNELS["adaptive_max_pool2d_backward"] = _adaptive_max_pool2d_backward
