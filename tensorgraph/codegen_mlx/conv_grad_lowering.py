"""The MLX lowering of a convolution's weight gradient (`ir.conv_grad`), added to
`LOWERINGS` on import: the NumPy kernel's patches and product (runtime.conv_grad_kernels
states the geometry once for both), in the node's dtype as the conv2d lowering computes.

x is padded to the taps' reach, its patches are a strided view of that copy, gathered
once by the reshape into the (G, N*OH*OW, Cg*KH*KW) matrix, and the cotangent is
rearranged to (G, Og, N*OH*OW): one batched matrix product. codegen_mlx/segments.py's
SCRATCH counts those three arrays.
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx

from tensorgraph.codegen_mlx.lowering import LOWERINGS, _as, _lowered
from tensorgraph.ir.node import Node
from tensorgraph.runtime.conv_grad_kernels import padding_plan, patch_strides


def _conv2d_weight_backward(node: Node, args: Sequence[mx.array]) -> mx.array:
    x, g = (_as(node, a) for a in args)
    groups = node.attr("groups")
    n, c = x.shape[:2]
    _, o, oh, ow = g.shape
    (top, rows, bottom), (left, cols, right) = padding_plan(node, x.shape, g.shape)
    padded = mx.pad(x[:, :, :rows, :cols], [(0, 0), (0, 0), (top, bottom), (left, right)])
    padded = mx.contiguous(padded)
    kh, kw = node.attr("kernel_size")
    cg, og = c // groups, o // groups
    shape = [groups, n, oh, ow, cg, kh, kw]
    patches = mx.as_strided(padded, shape, list(patch_strides(node, padded.shape)))
    columns = patches.reshape(groups, n * oh * ow, cg * kh * kw)
    cotangent = g.reshape(n, groups, og, oh * ow).transpose(1, 2, 0, 3)
    out = mx.matmul(cotangent.reshape(groups, og, n * oh * ow), columns)
    return out.reshape(node.shape)


LOWERINGS["conv2d_weight_backward"] = _lowered("conv2d_weight_backward", _conv2d_weight_backward)
