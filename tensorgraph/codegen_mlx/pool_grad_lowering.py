"""MLX lowerings of the max pools' input gradients (`ir.pool_grad`), added to
`LOWERINGS` on import, with the NumPy kernels' windows and order (the geometry is
runtime.pool_grad_kernels' own host arithmetic).

A regular pool: one strided slice of the padded input per kernel tap, compared with the
pooled result (and with the tap's host-computed mask of real, unpadded elements), gives
each window's count of maxima, and g is divided by it once; then the shares are
gathered, not scattered (MLX has no strided slice update, and a scatter or a placement
per tap held 9-17x the input's bytes at once, measured): each residue class of the
padded grid modulo the stride adds the shares of the taps that reach it, and the classes
are interleaved back. An adaptive pool: window by window, each window's shares added
into its band of a zeroed result (`slice_update`). Half precision is computed in float32 and rounded
once, as the oracle does; the order of additions is the oracle's, so the two differ
only where MLX's own elementwise kernels round differently.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import mlx.core as mx

from tensorgraph.codegen_mlx.lowering import LOWERINGS, _as, _lowered
from tensorgraph.ir.node import Node
from tensorgraph.ir.pool_grad import forward_pool, pooled_operands
from tensorgraph.runtime.pool_grad_kernels import pool_geometry
from tensorgraph.runtime.window_kernels import adaptive_windows


def _computed(node: Node, args: Sequence[mx.array]) -> list[mx.array]:
    """(x, out, g) in the computation precision (float32 for half types); without `out`,
    the forward pool's lowering on x gives it (the oracle's windows and maxima)."""
    x, out, g = pooled_operands(node, args)
    if out is None:
        out = LOWERINGS[node.op.removesuffix("_backward")](forward_pool(node, g.shape), [x])
    wide = node.dtype.name in ("float16", "bfloat16")
    return [a.astype(mx.float32) if wide else _as(node, a) for a in (x, out, g)]


def _taps(node: Node, padded: mx.array, pooled: tuple) -> list[tuple[int, int, mx.array]]:
    """(kernel row, kernel column, the (N, C, OH, OW) strided slice of `padded` that tap
    meets in every window), row-major over the kernel."""
    (kh, kw), (sh, sw) = node.attr("kernel_size"), node.attr("stride")
    dh, dw = node.attr("dilation")
    oh, ow = pooled[2:]
    taps = []
    for i in range(kh):
        for j in range(kw):
            rows = slice(i * dh, i * dh + sh * (oh - 1) + 1, sh)
            cols = slice(j * dw, j * dw + sw * (ow - 1) + 1, sw)
            taps.append((i, j, padded[:, :, rows, cols]))
    return taps


def _max_pool2d_backward(node: Node, args: Sequence[mx.array]) -> mx.array:
    """Gathered, not scattered: padded row r = a * sh + rho is met by the taps i with
    i * dh = rho (mod sh), in window row a + (rho - i * dh) / sh. So per residue class
    (rho, sigma) of the padded grid, every element adds hit * quotient of each tap that
    reaches it (taps row-major: the oracle's order), reading the pooled result and the
    quotient shifted per tap; the classes are interleaved back by a stack and reshape.
    Every temporary but the padded input and the interleaved result has a class's
    extent (1 / (sh * sw) of the padded grid) or the pooled one."""
    x, out, g = _computed(node, args)
    (kh, kw), stride = node.attr("kernel_size"), node.attr("stride")
    dilation = node.attr("dilation")
    n, c = x.shape[:2]
    widths, inside = pool_geometry(node, tuple(x.shape), tuple(out.shape))
    padded = mx.pad(x, widths, constant_values=-float("inf"))
    count = None
    for i, j, tap in _taps(node, padded, tuple(out.shape)):
        hit = tap == out
        if not inside[:, :, i, j].all():  # padding never holds a maximum
            hit = mx.logical_and(hit, mx.array(inside[:, :, i, j]))
        count = hit.astype(x.dtype) if count is None else count + hit.astype(x.dtype)
    quotient = g / count
    # the grid: the padded input grown to whole classes; `reach` windows of pooled
    # padding before (a tap's window row a + di has di >= -reach) and enough after
    extent = [-(-padded.shape[2 + a] // stride[a]) for a in range(2)]
    reach = [-(-(k - 1) * d // s) for k, d, s in zip((kh, kw), dilation, stride, strict=True)]
    grid = mx.pad(
        padded,
        [(0, 0), (0, 0)] + [(0, extent[a] * stride[a] - padded.shape[2 + a]) for a in range(2)],
        constant_values=-float("inf"),
    )
    shifts = [(0, 0), (0, 0)] + [(reach[a], max(0, extent[a] - out.shape[2 + a])) for a in range(2)]
    out_far = mx.pad(out, shifts, constant_values=float("nan"))  # equal to nothing
    quotient_far = mx.pad(quotient, shifts)
    # per axis, each residue's reaching taps (ascending) as the window-row shift they read
    shifts_of = [
        [
            [
                reach[a] + (r - t * dilation[a]) // stride[a]
                for t in range(k)
                if (t * dilation[a] - r) % stride[a] == 0
            ]
            for r in range(stride[a])
        ]
        for a, k in enumerate((kh, kw))
    ]
    classes = []
    for rho in range(stride[0]):
        row = []
        for sigma in range(stride[1]):
            cell = grid[:, :, rho :: stride[0], sigma :: stride[1]]
            total = mx.zeros(cell.shape, x.dtype)
            for top, left in itertools.product(shifts_of[0][rho], shifts_of[1][sigma]):
                rows, cols = slice(top, top + extent[0]), slice(left, left + extent[1])
                hit = (cell == out_far[:, :, rows, cols]).astype(x.dtype)
                total = total + hit * quotient_far[:, :, rows, cols]
            row.append(total)
        classes.append(mx.stack(row, axis=-1))
    full = mx.stack(classes, axis=3).reshape(n, c, extent[0] * stride[0], extent[1] * stride[1])
    (top, _), (left, _) = widths[2:]
    return _as(node, full[:, :, top : top + x.shape[2], left : left + x.shape[3]])


def _adaptive_max_pool2d_backward(node: Node, args: Sequence[mx.array]) -> mx.array:
    x, out, g = _computed(node, args)
    total = mx.zeros(x.shape, x.dtype)
    rows = adaptive_windows(x.shape[2], out.shape[2])
    cols = adaptive_windows(x.shape[3], out.shape[3])
    for i, (r0, r1) in enumerate(rows):
        for j, (c0, c1) in enumerate(cols):
            hits = (x[:, :, r0:r1, c0:c1] == out[:, :, i : i + 1, j : j + 1]).astype(x.dtype)
            quotient = g[:, :, i : i + 1, j : j + 1] / hits.sum(axis=(2, 3), keepdims=True)
            total[:, :, r0:r1, c0:c1] = total[:, :, r0:r1, c0:c1] + hits * quotient
    return _as(node, total)


LOWERINGS["max_pool2d_backward"] = _lowered("max_pool2d_backward", _max_pool2d_backward)
LOWERINGS["adaptive_max_pool2d_backward"] = _lowered(
    "adaptive_max_pool2d_backward", _adaptive_max_pool2d_backward
)
