"""Temporaries an op's MLX lowering allocates beside its output, outside any plan:
`SCRATCH[op](graph, node)` is an upper bound in bytes on what the lowering of `node`
makes besides its result (a convolution's NHWC copies and im2col matrix, a pool's padded
copy, the pool and convolution backward ops' masks and patch matrices). The segment cost
(segments.py) adds it to the node's own allocation, so a segment's worst case bounds
MLX's memory; tests/codegen_mlx/test_segments.py measures each bound against the
lowering. An op without an entry allocates only its result. Where the op declares a
workspace (conv2d_weight_backward's patches), the plan holds that much of the bound and
the segment cost adds only the rest.
"""

from __future__ import annotations

import math
import mmap
from collections.abc import Callable

from tensorgraph.ir.conv_grad import reach
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node
from tensorgraph.ir.window_inference import conv_pads


def _conv_scratch(graph: Graph, node: Node) -> int:
    """The lowering's NHWC copies of input (or its padded copy: the dilated path pads
    the input itself, by the node's padding on each side) and weight, MLX's CPU im2col
    matrix (output positions x kernel taps x input channels) and the NHWC result before
    its transpose."""
    x, w = (graph.node(i) for i in node.inputs)
    n, c, h, width = x.shape
    (top, bottom), (left, right) = conv_pads(dict(node.attrs))
    padded = n * c * (h + top + bottom) * (width + left + right) * x.dtype.itemsize
    n, _, oh, ow = node.shape
    _, per_group, kh, kw = w.shape
    im2col = n * oh * ow * kh * kw * per_group * node.attr("groups") * node.dtype.itemsize
    return max(x.nbytes, padded) + w.nbytes + im2col + node.nbytes


def _conv_transpose_scratch(graph: Graph, node: Node) -> int:
    """The lowering's NHWC input, rearranged weight and NHWC result before the crop and
    transpose; the input dilated by the stride (zeros between rows and columns, made at
    stride above 1) and what MLX's CPU GEMM path adds: the padded input and the im2col
    matrix (output positions x kernel taps x input channels per group). Measured: a
    stride-1 3x3 16->16 transposed convolution of an 8x16x8x8 input made 0.32 MB of
    scratch, 0.29 MB of it im2col."""
    x, w = (graph.node(i) for i in node.inputs)
    n, c, h, width = x.shape
    _, _, oh, ow = node.shape
    kh, kw = w.shape[2:]
    (sh, sw), dilation = node.attr("stride"), node.attr("dilation")
    spread = 0 if (sh, sw) == (1, 1) else n * h * sh * width * sw * c
    reach = [d * (k - 1) for d, k in zip(dilation, (kh, kw), strict=True)]
    grown = [
        max(r - p, 0) * 2 + e
        for r, p, e in zip(reach, node.attr("padding"), node.attr("output_padding"), strict=True)
    ]
    padded = n * ((h - 1) * sh + 1 + grown[0]) * ((width - 1) * sw + 1 + grown[1]) * c
    im2col = n * oh * ow * kh * kw * c
    return x.nbytes + w.nbytes + node.nbytes + (spread + padded + im2col) * node.dtype.itemsize


def _conv_weight_backward_scratch(graph: Graph, node: Node) -> int:
    """codegen_mlx/conv_grad_lowering.py's arrays: x padded to the taps' reach, the patch
    matrix (output positions x kernel taps x input channels per group), the cotangent
    rearranged per group, and the product before its reshape; each may be a block of
    MLX's buffer cache up to two pages larger than asked (`BufferCache::
    reuse_from_cache` takes a cached buffer below min(2 size, size + 2 pages)), which
    matters where the arrays are small (measured: a grouped 4x8x9x9 case's four arrays
    of 119,744 B took up to 132,000)."""
    x, g = (graph.node(i) for i in node.inputs)
    n, c = x.shape[:2]
    _, _, oh, ow = g.shape
    if 0 in g.shape:
        return 0
    padded = n * c * math.prod(reach(dict(node.attrs), (oh, ow))) * x.dtype.itemsize
    kh, kw = node.attr("kernel_size")
    im2col = n * oh * ow * c * kh * kw * x.dtype.itemsize
    arrays = (padded, im2col, g.nbytes, node.nbytes)
    return sum(size + min(size, 2 * mmap.PAGESIZE) for size in arrays)


def _pool_scratch(graph: Graph, node: Node) -> int:
    """The padded input copy and the running window reduction beside the result."""
    x = graph.node(node.inputs[0])
    n, c, h, w = x.shape
    top, left = node.attr("padding")
    padded = n * c * (h + 2 * top) * (w + 2 * left) * x.dtype.itemsize
    return padded + node.nbytes


def _pool_backward_scratch(graph: Graph, node: Node) -> int:
    """codegen_mlx/pool_grad_lowering.py's regular pool, every array it makes counted
    (so a bound whatever order MLX frees them in; compiled, MLX fuses most away), float32
    elements: the padded input, its grid grown to whole stride classes, the stacks and
    their reshape (three grids); per tap its hit mask (bool), its and-ed mask, its float
    mask and the running count (10 bytes per pooled element), the quotient, the pooled
    result and quotient shifted by the taps' reach; per tap within its class the
    comparison (bool), the float mask, the share and the running sum, per class the
    zeros (13 bytes per class element per tap, 4 per class); and where the node has no
    `out` operand, the forward pool it runs for it (its result, the pooled shape)."""
    x, pooled = graph.node(node.inputs[0]), graph.node(node.inputs[-1])
    n, c = x.shape[:2]
    kernel, padding = node.attr("kernel_size"), node.attr("padding")
    stride, dilation = node.attr("stride"), node.attr("dilation")
    extents = [
        max(
            x.shape[2 + a] + 2 * padding[a], (o - 1) * stride[a] + dilation[a] * (kernel[a] - 1) + 1
        )
        for a, o in enumerate(pooled.shape[2:])
    ]
    padded = math.prod(extents)
    classes = [-(-e // s) for e, s in zip(extents, stride, strict=True)]
    cell, grid = math.prod(classes), math.prod(classes) * math.prod(stride)
    taps, out = math.prod(kernel), math.prod(pooled.shape[2:])
    reach = math.prod(
        o + -(-(k - 1) * d // s) + max(0, e - o)
        for o, k, d, s, e in zip(pooled.shape[2:], kernel, dilation, stride, classes, strict=True)
    )
    elements = 4 * (padded + 4 * grid + out + 2 * reach + cell * math.prod(stride))
    pooled_again = 0 if len(node.inputs) == 3 else 4 * (padded + out)
    return n * c * (elements + taps * (10 * out + 13 * cell)) + n * c * pooled_again


def _adaptive_pool_backward_scratch(graph: Graph, node: Node) -> int:
    """Window by window: a window's hits and shares (each at most x's size) and the
    result before and after its band's update; without an `out` operand, the pooled
    result the forward lowering makes for it."""
    pooled = 0 if len(node.inputs) == 3 else graph.node(node.inputs[-1]).nbytes
    return 3 * node.nbytes + 2 * pooled


def _elementwise_scratch(graph: Graph, node: Node) -> int:
    """An `elementwise` node's steps before the last, where mx.compile may not fuse them
    into one kernel (fusion.py: a step that is not one fusable primitive, a chain as
    deep as MLX's depth limit or reading as many arrays as its input limit, or fusion
    off); nothing where it does, as for gelu's chain."""
    from tensorgraph.codegen_mlx.fusion import (
        MAX_ARRAYS,
        MAX_DEPTH,
        fusion_enabled,
        program_chain,
    )
    from tensorgraph.ir.elementwise_fused import step_nodes

    chain = program_chain(graph, node)
    arrays = len(set(node.inputs)) + (0 if chain is None else chain[1] + chain[2])
    if fusion_enabled() and chain is not None and chain[0] < MAX_DEPTH and arrays < MAX_ARRAYS:
        return 0
    operands = [(graph.node(i).shape, graph.node(i).dtype) for i in node.inputs]
    return sum(step.nbytes for step in step_nodes(node, operands)[:-1])


# Temporaries a node's MLX lowering allocates beside its output (bytes, an upper bound).
SCRATCH: dict[str, Callable[[Graph, Node], int]] = {
    "conv2d": _conv_scratch,
    "conv_transpose2d": _conv_transpose_scratch,
    "conv2d_weight_backward": _conv_weight_backward_scratch,
    "max_pool2d": _pool_scratch,
    "avg_pool2d": _pool_scratch,
    "max_pool2d_backward": _pool_backward_scratch,
    "adaptive_max_pool2d_backward": _adaptive_pool_backward_scratch,
    "elementwise": _elementwise_scratch,
}
