"""The NumPy kernel of a convolution's weight gradient (`ir.conv_grad`), added to
`runtime.kernels.KERNELS` on import, and the padding geometry both backends share.

Both backends contract the same patches: x padded (and cropped) to exactly the extent
the taps read (`padding_plan`), its (N, OH, OW) x (Cg, KH, KW) windows per group as a
strided view of that padded array, and the cotangent as (O / groups, N * OH * OW) per
group: one matrix product per group, (Og, N*OH*OW) @ (N*OH*OW, Cg*KH*KW), as MLX's own
convolution VJP computes a weight gradient (`conv_weight_backward_patches`). Half
precision is computed in float32 and rounded once (the kernels' contract). The oracle
and the arena executor run this same kernel, so they agree bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tensorgraph.ir.conv_grad import reach
from tensorgraph.ir.node import Node
from tensorgraph.runtime.kernels import KERNELS, _operand


def padding_plan(node: Node, x_shape: Sequence[int], g_shape: Sequence[int]) -> tuple:
    """Per spatial axis (before, kept, after): the zeros to put before x's first `kept`
    rows (or columns) and the zeros after them, so that the padded extent is exactly the
    taps' `reach` for a cotangent of `g_shape` (rows past it are never read, rows of the
    reach past x are zeros). Needs a non-empty cotangent."""
    plan = []
    for size, lo, extent in zip(
        x_shape[2:], node.attr("padding"), reach(dict(node.attrs), g_shape[2:]), strict=True
    ):
        before = min(lo, extent)
        kept = max(0, min(size, extent - lo))
        plan.append((before, kept, extent - before - kept))
    return tuple(plan)


def patch_strides(node: Node, padded_shape: Sequence[int]) -> tuple[int, ...]:
    """Element strides of the (G, N, OH, OW, Cg, KH, KW) patch view of a C-contiguous
    padded x of `padded_shape`: element [k, n, i, j, c, u, v] is padded[n, k * Cg + c,
    u * dh + i * sh, v * dw + j * sw]."""
    _, c, hp, wp = padded_shape
    cg = c // node.attr("groups")
    (sh, sw), (dh, dw) = node.attr("stride"), node.attr("dilation")
    return (cg * hp * wp, c * hp * wp, sh * wp, sw, hp * wp, dh * wp, dw)


def _conv2d_weight_backward(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    x, g = (_operand(node, a) for a in args)
    groups = node.attr("groups")
    n, c = x.shape[:2]
    _, o, oh, ow = g.shape
    if 0 in g.shape or 0 in x.shape:  # nothing to sum over, or nothing to give
        return np.zeros(node.shape, x.dtype)
    (top, rows, bottom), (left, cols, right) = padding_plan(node, x.shape, g.shape)
    padded = np.pad(x[:, :, :rows, :cols], ((0, 0), (0, 0), (top, bottom), (left, right)))
    padded = np.ascontiguousarray(padded)
    kh, kw = node.attr("kernel_size")
    cg, og = c // groups, o // groups
    shape = (groups, n, oh, ow, cg, kh, kw)
    strides = tuple(s * padded.itemsize for s in patch_strides(node, padded.shape))
    patches = np.lib.stride_tricks.as_strided(padded, shape, strides, writeable=False)
    columns = patches.reshape(groups, n * oh * ow, cg * kh * kw)
    cotangent = g.reshape(n, groups, og, oh * ow).transpose(1, 2, 0, 3)
    out = np.matmul(cotangent.reshape(groups, og, n * oh * ow), columns)
    return out.reshape(node.shape)


KERNELS["conv2d_weight_backward"] = _conv2d_weight_backward
