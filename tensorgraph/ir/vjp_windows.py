"""Vector-Jacobian rules of the windowed NCHW ops, registered on the ops in `OPS` on
import: convolutions as convolutions, pools and resizes through gathers or matrices.

- conv2d: the input's cotangent is the transposed convolution of g by the same weight
  (output_padding restoring the input's extent; with an asymmetric padding, the whole
  transposed product with x's rows cut out of it); the weight's is the op
  conv2d_weight_backward(x, g) (ir.conv_grad), which reads both as stored. conv_transpose2d
  is conv2d's adjoint: its input's cotangent is conv2d(g, w) and its weight's the same
  weight gradient with input and cotangent exchanged. The weight gradient op is bilinear:
  its rule is a convolution for g and an input gradient for x.
- max_pool2d and adaptive_max_pool2d: their own backward ops (ir.pool_grad: the
  cotangent split evenly among each window's maxima, MLX's max convention); those ops
  are linear in the cotangent, and their transpose gathers it back over the maxima
  (a constant index of the window elements, `take`).
- avg_pool2d, adaptive_avg_pool2d, upsample_nearest2d and upsample_bilinear2d are linear
  and separable, out = Lh x Lw^T per image: the cotangent is Lh^T g Lw, with the
  per-axis matrices Lh, Lw built from torch's window, divisor and source-row rules
  (those the NumPy kernels follow) as constants.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tensorgraph.ir import functions as fn
from tensorgraph.ir.conv import conv2d, conv_transpose2d, pad
from tensorgraph.ir.conv_grad import reach
from tensorgraph.ir.conv_grad_chunks import chunked_weight_gradient
from tensorgraph.ir.node import Node
from tensorgraph.ir.ops import OPS, register_vjp
from tensorgraph.ir.pool_grad import forward_pool, max_pool_backward, pooled_operands
from tensorgraph.ir.tensor import Tensor, emit
from tensorgraph.ir.vjp_support import cast_to
from tensorgraph.ir.window_inference import conv_pads, transposed_extent


def weight_gradient(x: Tensor, g: Tensor, kernel: tuple[int, int], node: Node) -> Tensor:
    """d <conv2d(x, w), g> / dw for w (O, Cg, KH, KW) at `node`'s stride, top and left
    padding, dilation and groups: `conv2d_weight_backward` ops reading x and g as stored
    (ir.conv_grad), never a transposed or padded copy of either; more than one where the
    patches they contract would outgrow what they read (ir/conv_grad_chunks.py)."""
    stride, dilation = node.attr("stride"), node.attr("dilation")
    top_left = tuple(node.attr("padding"))
    return chunked_weight_gradient(
        x, g, tuple(kernel), stride, top_left, dilation, node.attr("groups")
    )


def input_gradient(
    g: Tensor,
    w: Tensor,
    size: Sequence,
    stride: Sequence[int],
    pads: Sequence[tuple[int, int]],
    dilation: Sequence[int],
    groups: int,
) -> Tensor:
    """d <conv2d(x, w), g> / dx for an x of spatial extents `size` convolved at `stride`,
    `pads` ((top, bottom), (left, right)), `dilation` and `groups`: the transposed
    convolution of g by w, output_padding restoring x's extent; with an asymmetric
    padding, the whole transposed product with x's rows cut out of it (rows no window
    reached get zeros)."""
    if any(lo != hi for lo, hi in pads):
        full = conv_transpose2d(g, w, stride, 0, dilation, 0, groups)
        extents = zip(pads, size, full.shape[2:], strict=True)
        spans = [(-lo, lo + e - f) for (lo, _), e, f in extents]
        if all(-crop <= f for (crop, _), f in zip(spans, full.shape[2:], strict=True)):
            return pad(full, [(0, 0), (0, 0), *spans])
        # The top or left padding is longer than the whole product (a stride past x's
        # rows: no window reads them): zeros appended first, so the crop stays within it.
        grown = pad(full, [(0, 0), (0, 0), *((0, max(hi, 0)) for _, hi in spans)])
        return pad(grown, [(0, 0), (0, 0), *((crop, min(hi, 0)) for crop, hi in spans)])
    (ph, _), (pw, _) = pads
    kh, kw = w.shape[2:]
    extra = (
        size[0] - transposed_extent(g.shape[2], kh, stride[0], ph, dilation[0], 0),
        size[1] - transposed_extent(g.shape[3], kw, stride[1], pw, dilation[1], 0),
    )
    return conv_transpose2d(g, w, stride, (ph, pw), dilation, extra, groups)


def _conv2d(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list:
    x, w = (cast_to(t, out.dtype) for t in inputs)
    stride, dilation, groups = node.attr("stride"), node.attr("dilation"), node.attr("groups")
    pads = conv_pads(dict(node.attrs))
    gx = input_gradient(g, w, x.shape[2:], stride, pads, dilation, groups)
    gw = weight_gradient(x, g, w.shape[2:], node)
    return [cast_to(gx, inputs[0].dtype), cast_to(gw, inputs[1].dtype)]


def _conv2d_weight_backward(node: Node, inputs: Sequence[Tensor], out: Tensor, c: Tensor) -> list:
    """The op is bilinear, <W(x, g), c> = <conv2d(x, c), g> for the convolution whose
    output has g's extent (its bottom and right padding ending at the taps' reach, a
    negative end cropping rows no tap reads): g's cotangent is that convolution and x's
    its input gradient at cotangent g. Where the taps read only the top or left padding
    the op is zero, and no cotangent flows."""
    x, g = inputs
    stride, dilation, groups = node.attr("stride"), node.attr("dilation"), node.attr("groups")
    extents = reach(dict(node.attrs), g.shape[2:])
    if any(e <= lo for e, lo in zip(extents, node.attr("padding"), strict=True)):
        return [None, None]
    spans = zip(node.attr("padding"), extents, x.shape[2:], strict=True)
    pads = [(lo, e - size - lo) for lo, e, size in spans]
    gg = conv2d(x, c, stride, pads, dilation, groups)
    gx = input_gradient(g, c, x.shape[2:], stride, pads, dilation, groups)
    return [gx, gg]


def _conv_transpose2d(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list:
    x, w = (cast_to(t, out.dtype) for t in inputs)
    groups = node.attr("groups")
    gx = conv2d(g, w, node.attr("stride"), node.attr("padding"), node.attr("dilation"), groups)
    gx = fn.narrow(fn.narrow(gx, 2, 0, x.shape[2]), 3, 0, x.shape[3])
    gw = weight_gradient(g, x, w.shape[2:], node)
    return [cast_to(gx, inputs[0].dtype), cast_to(gw, inputs[1].dtype)]


# ---------------------------------------------------------------- max pools


def _max_pool(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list:
    """The pool's own backward op (ir.pool_grad): x-sized, never its windows, and reading
    x, not the pooled result."""
    (x,) = inputs
    return [max_pool_backward(node, x, g)]


def adaptive_windows(size: int, out: int) -> list[tuple[int, int]]:
    """torch's adaptive windows along one axis: [floor(i*size/out), ceil((i+1)*size/out))."""
    return [((i * size) // out, -((-(i + 1) * size) // out)) for i in range(out)]


def _window_table(
    node: Node, x: Tensor, pooled: tuple
) -> tuple[np.ndarray, np.ndarray, list | None]:
    """(the flat position of every window element in x padded and flattened (OH, OW,
    K), whether it lies in x rather than in the padding (OH, OW, K), the (before, after)
    padding of x's last two axes) for the pool a `*_backward` node differentiates; an
    adaptive pool's windows are padded to the largest with the position just past the
    flattened x (padding None: one element appended to the flat axis)."""
    h, w = x.shape[2:]
    oh, ow = pooled[2:]
    if node.op == "adaptive_max_pool2d_backward":
        rows, cols = adaptive_windows(h, oh), adaptive_windows(w, ow)
        kh, kw = max(e - s for s, e in rows), max(e - s for s, e in cols)
        index = np.full((oh, ow, kh * kw), h * w, np.int64)
        for i, (r0, r1) in enumerate(rows):
            for j, (c0, c1) in enumerate(cols):
                cells = (np.arange(r0, r1)[:, None] * w + np.arange(c0, c1)).reshape(-1)
                index[i, j, : cells.size] = cells
        return index, index < h * w, None
    (kh, kw), (sh, sw) = node.attr("kernel_size"), node.attr("stride")
    (ph, pw), (dh, dw) = node.attr("padding"), node.attr("dilation")
    # windows may run past the padded input under ceil_mode: pad enough for the last
    tall = max(h + 2 * ph, (oh - 1) * sh + dh * (kh - 1) + 1)
    wide = max(w + 2 * pw, (ow - 1) * sw + dw * (kw - 1) + 1)
    rows = (np.arange(oh) * sh)[:, None] + np.arange(kh) * dh  # (OH, KH)
    cols = (np.arange(ow) * sw)[:, None] + np.arange(kw) * dw  # (OW, KW)
    index = rows[:, None, :, None] * wide + cols[None, :, None, :]
    real_rows, real_cols = (rows >= ph) & (rows < ph + h), (cols >= pw) & (cols < pw + w)
    inside = real_rows[:, None, :, None] & real_cols[None, :, None, :]
    widths = [(ph, tall - h - ph), (pw, wide - w - pw)]
    return index.reshape(oh, ow, -1), inside.reshape(oh, ow, -1), widths


def _max_pool_backward(node: Node, inputs: Sequence[Tensor], out: Tensor, c: Tensor) -> list:
    """The op is linear in g, and its transpose gathers: g's cotangent at a window is
    the sum of c over the window's maxima divided by their count (the op's own hits,
    from a constant index of the window elements, `take`; where the op pools x itself,
    so does its gradient). x and the pooled result get none: the hits are piecewise
    constant in them."""
    x, pooled, _ = pooled_operands(node, inputs)
    if pooled is None:
        forward = forward_pool(node, inputs[1].shape)
        attrs = {name: node.attr(name) for name in OPS[forward.op].attrs}
        pooled = emit(forward.op, [x], **attrs)
    n, ch = x.shape[:2]
    index, inside, widths = _window_table(node, x, tuple(pooled.shape))
    oh, ow, k = index.shape
    positions = x.graph.constant(index.reshape(-1).astype(np.int32))

    def windows(t: Tensor) -> Tensor:
        if widths is None:  # adaptive: the flat input and one element past it
            padded = pad(fn.reshape(t, (n, ch, -1)), [(0, 0), (0, 0), (0, 1)])
        else:
            padded = fn.reshape(pad(t, [(0, 0), (0, 0), *widths]), (n, ch, -1))
        return fn.reshape(fn.take(padded, positions, 2), (n, ch, oh, ow, k))

    real = x.graph.constant(inside)
    hits = fn.logical_and(fn.equal(windows(x), fn.reshape(pooled, (n, ch, oh, ow, 1))), real)
    hits = fn.astype(hits, c.dtype)
    dg = fn.sum(hits * windows(c), 4) / fn.sum(hits, 4)
    return [None] * (len(inputs) - 1) + [dg]


# ---------------------------------------------------------------- linear, separable


def _avg_matrix(size: int, out: int, kernel: int, stride: int, pad_: int, node: Node) -> np.ndarray:
    """Row i: 1/divisor over window i's real elements (torch's avg_pool2d divisors)."""
    matrix = np.zeros((out, size))
    for i in range(out):
        start = i * stride - pad_
        end = min(start + kernel, size + pad_)
        first, last = max(start, 0), min(end, size)
        if node.attr("divisor_override"):
            divisor = 1.0  # the override divides once, after both axes
        elif node.attr("count_include_pad"):
            divisor = end - start
        else:
            divisor = last - first
        matrix[i, first:last] = 1.0 / divisor
    return matrix


def _nearest_matrix(size: int, out: int) -> np.ndarray:
    """One-hot rows at torch's legacy nearest source (float32 products, as its CPU code)."""
    if out == size:
        source = np.arange(out)
    elif out == 2 * size:
        source = np.arange(out) >> 1
    else:
        products = np.arange(out, dtype=np.float32) * (np.float32(size) / np.float32(out))
        source = np.minimum(np.floor(products).astype(np.int64), size - 1)
    matrix = np.zeros((out, size))
    matrix[np.arange(out), source] = 1.0
    return matrix


def _linear_matrix(size: int, out: int, align_corners: bool) -> np.ndarray:
    """torch's bilinear source coordinates: weights 1 - t and t on the two source rows."""
    positions = np.arange(out, dtype=np.float64)
    if align_corners:
        source = positions * ((size - 1) / (out - 1) if out > 1 else 0.0)
    else:
        source = np.maximum((positions + 0.5) * (size / out) - 0.5, 0.0)
    lower = np.minimum(np.floor(source).astype(np.int64), size - 1)
    upper = np.minimum(lower + 1, size - 1)
    matrix = np.zeros((out, size))
    np.add.at(matrix, (np.arange(out), lower), 1 - (source - lower))
    np.add.at(matrix, (np.arange(out), upper), source - lower)
    return matrix


def _separable(x: Tensor, g: Tensor, rows: np.ndarray, cols: np.ndarray, scale: float) -> Tensor:
    """Lh^T g Lw * scale for out = Lh x Lw^T * scale (rows Lh (OH, H), cols Lw (OW, W))."""
    dtype = x.dtype.to_numpy()
    left = x.graph.constant(rows.T.astype(dtype))
    right = x.graph.constant((cols * scale).astype(dtype))
    return fn.matmul(fn.matmul(left, g), right)


def _avg_pool2d(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list:
    (x,) = inputs
    if not x.dtype.is_float:
        return [None]
    kernel, stride, padding = (node.attr(k) for k in ("kernel_size", "stride", "padding"))
    rows, cols = (
        _avg_matrix(x.shape[2 + a], out.shape[2 + a], kernel[a], stride[a], padding[a], node)
        for a in range(2)
    )
    override = node.attr("divisor_override")
    return [_separable(x, g, rows, cols, 1.0 / override if override else 1.0)]


def _adaptive_avg_pool2d(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list:
    (x,) = inputs
    if not x.dtype.is_float:
        return [None]
    matrices = []
    for a in range(2):
        matrix = np.zeros((out.shape[2 + a], x.shape[2 + a]))
        for i, (start, end) in enumerate(adaptive_windows(x.shape[2 + a], out.shape[2 + a])):
            matrix[i, start:end] = 1.0 / (end - start)
        matrices.append(matrix)
    return [_separable(x, g, *matrices, 1.0)]


def _upsample_nearest2d(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list:
    (x,) = inputs
    if not x.dtype.is_float:
        return [None]
    rows, cols = (_nearest_matrix(x.shape[2 + a], out.shape[2 + a]) for a in range(2))
    return [_separable(x, g, rows, cols, 1.0)]


def _upsample_bilinear2d(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list:
    (x,) = inputs
    align = node.attr("align_corners")
    rows, cols = (_linear_matrix(x.shape[2 + a], out.shape[2 + a], align) for a in range(2))
    return [_separable(x, g, rows, cols, 1.0)]


register_vjp("conv2d", _conv2d)
register_vjp("conv_transpose2d", _conv_transpose2d)
register_vjp("conv2d_weight_backward", _conv2d_weight_backward)
register_vjp("max_pool2d", _max_pool)
register_vjp("adaptive_max_pool2d", _max_pool)
register_vjp("max_pool2d_backward", _max_pool_backward)
register_vjp("adaptive_max_pool2d_backward", _max_pool_backward)
register_vjp("avg_pool2d", _avg_pool2d)
register_vjp("adaptive_avg_pool2d", _adaptive_avg_pool2d)
register_vjp("upsample_nearest2d", _upsample_nearest2d)
register_vjp("upsample_bilinear2d", _upsample_bilinear2d)
