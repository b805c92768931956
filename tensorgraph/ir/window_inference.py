"""Shape and dtype inference of the windowed NCHW ops (conv2d, max/avg pools, adaptive
pools) and of `pad`, with PyTorch's output-size rules. Same contract as
`ir.inference`: pure functions of the operands and canonical attributes, raising
ShapeError/DTypeError without the node prefix.

Pool output size (torch's `pooling_output_shape`): out = floor((size + 2 * pad -
dilation * (kernel - 1) - 1 + (stride - 1 if ceil_mode)) / stride) + 1, and with ceil_mode
one fewer when the last window would start at or past the end of the input plus the left
padding: every window then starts inside the input or the left padding.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import sympy

from tensorgraph.errors import DTypeError, ShapeError
from tensorgraph.ir.dims import always, canonical, is_static, require, undecided
from tensorgraph.ir.dtypes import DType, promote_types
from tensorgraph.ir.shapes import Shape

if TYPE_CHECKING:
    from tensorgraph.ir.ops import Infer, Operand

PAD_MODES = ("constant", "reflect", "replicate")


def _pair(attrs: Mapping, name: str) -> tuple[int, int]:
    value = attrs[name]
    if len(value) != 2:
        raise ShapeError(f"{name} must have 2 entries (H, W) but got {value}")
    return value


def pool_output_size(
    size: int, kernel: int, stride: int, pad: int, dilation: int, ceil_mode: bool
) -> int:
    """torch's pooling output size along one axis (see the module docstring)."""
    span = dilation * (kernel - 1) + 1
    out = (size + 2 * pad - span + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def conv_pads(attrs: Mapping) -> tuple[tuple[int, int], tuple[int, int]]:
    """((top, bottom), (left, right)) of a conv2d's attributes (or a node's `attrs`
    dict): `padding` on both sides, or `padding_end` as the bottom and right where it
    is given (an asymmetric padding: autodiff's weight gradients of strided
    convolutions pad exactly the rows their taps read; a negative end leaves out that
    many of the input's last rows or columns, which no tap reads)."""
    attrs = dict(attrs)
    padding = _pair(attrs, "padding")
    end = tuple(attrs.get("padding_end", ())) or padding
    if len(end) != 2:
        raise ShapeError(f"padding_end must have 2 entries (H, W) or none but got {end}")
    return (padding[0], end[0]), (padding[1], end[1])


def infer_conv2d(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    x, w = xs
    if len(x.shape) != 4 or len(w.shape) != 4:
        raise ShapeError(f"conv2d needs NCHW input and OIHW weight: {x}, {w}")
    stride, dilation = _pair(attrs, "stride"), _pair(attrs, "dilation")
    pads = conv_pads(attrs)
    groups = attrs["groups"]
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    if groups < 1 or c % groups or o % groups or cg * groups != c:
        raise ShapeError(f"conv2d: {x} channels do not match weight {w} with groups={groups}")
    bad_end = any(hi < 0 and -hi >= size for (_, hi), size in zip(pads, x.shape[2:], strict=True))
    if min(stride) < 1 or min(dilation) < 1 or min(lo for lo, _ in pads) < 0 or bad_end:
        raise ShapeError(f"conv2d: bad stride {stride} / dilation {dilation} / padding {pads}")
    oh, ow = (
        (size + lo + hi - d * (k - 1) - 1) // s + 1
        for size, (lo, hi), k, s, d in zip((h, wd), pads, (kh, kw), stride, dilation, strict=True)
    )
    if oh <= 0 or ow <= 0:
        raise ShapeError(f"conv2d: kernel {w.shape[2:]} larger than padded input {x}")
    return (n, o, oh, ow), promote_types(x.dtype, w.dtype)


def transposed_extent(
    size: int, kernel: int, stride: int, padding: int, dilation: int, output_padding: int
) -> int:
    """Output extent of a transposed convolution along one axis (torch's rule)."""
    return (size - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1


def infer_conv_transpose2d(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    """NCHW input, weight (C_in, C_out / groups, KH, KW) as torch stores it; float only
    (torch has no integer transposed convolution either). torch's checks: groups divide
    both channel counts, output_padding smaller than the stride or the dilation."""
    x, w = xs
    if len(x.shape) != 4 or len(w.shape) != 4:
        raise ShapeError(f"conv_transpose2d needs NCHW input and (I, O/g, H, W) weight: {x}, {w}")
    names = ("stride", "padding", "dilation", "output_padding")
    stride, padding, dilation, extra = (_pair(attrs, n) for n in names)
    groups = attrs["groups"]
    n, c, h, wd = x.shape
    ci, og, kh, kw = w.shape
    if groups < 1 or c % groups or ci != c:
        raise ShapeError(f"{x} channels do not match weight {w} with groups={groups}")
    if min(stride) < 1 or min(dilation) < 1 or min(padding) < 0 or min(extra) < 0:
        raise ShapeError(
            f"bad stride {stride} / dilation {dilation} / padding "
            f"{padding} / output_padding {extra}"
        )
    if any(extra[i] >= max(stride[i], dilation[i]) for i in range(2)):
        raise ShapeError(
            f"output_padding {extra} must be smaller than the stride "
            f"{stride} or the dilation {dilation}"
        )
    dtype = promote_types(x.dtype, w.dtype)
    if not dtype.is_float:
        raise DTypeError(f"conv_transpose2d needs float operands but got {x}, {w}")
    oh = transposed_extent(h, kh, stride[0], padding[0], dilation[0], extra[0])
    ow = transposed_extent(wd, kw, stride[1], padding[1], dilation[1], extra[1])
    if oh <= 0 or ow <= 0:
        raise ShapeError(f"padding {padding} leaves no output of {x}")
    return (n, og * groups, oh, ow), dtype


def infer_pool(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    """max_pool2d and avg_pool2d (avg has no dilation attribute: 1). torch's checks:
    positive kernel, stride and dilation, padding at most half the kernel, at least one
    output position; avg's divisor_override is 0 (none) or positive."""
    (x,) = xs
    if len(x.shape) != 4:
        raise ShapeError(f"pooling needs an NCHW input but got {x}")
    kernel, stride, padding = (_pair(attrs, n) for n in ("kernel_size", "stride", "padding"))
    dilation = _pair(attrs, "dilation") if "dilation" in attrs else (1, 1)
    if min(kernel) < 1 or min(stride) < 1 or min(padding) < 0 or min(dilation) < 1:
        raise ShapeError(
            f"pool: bad kernel {kernel} / stride {stride} / padding {padding} / dilation {dilation}"
        )
    if padding[0] * 2 > kernel[0] or padding[1] * 2 > kernel[1]:
        raise ShapeError(f"pool: padding {padding} exceeds half the kernel {kernel}")
    if attrs.get("divisor_override", 0) < 0:
        raise ShapeError(
            f"pool: divisor_override must be positive, got {attrs['divisor_override']}"
        )
    ceil_mode = attrs["ceil_mode"]
    oh, ow = (
        pool_output_size(x.shape[2 + i], kernel[i], stride[i], padding[i], dilation[i], ceil_mode)
        for i in range(2)
    )
    if oh <= 0 or ow <= 0:
        raise ShapeError(f"pool: kernel {kernel} (dilation {dilation}) larger than padded {x}")
    return (*x.shape[:2], oh, ow), x.dtype


def infer_adaptive_pool(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    """adaptive_avg_pool2d/adaptive_max_pool2d: (N, C, OH, OW) from a non-empty H x W."""
    (x,) = xs
    if len(x.shape) != 4:
        raise ShapeError(f"adaptive pooling needs an NCHW input but got {x}")
    oh, ow = _pair(attrs, "output_size")
    if oh < 1 or ow < 1 or 0 in x.shape[2:]:
        raise ShapeError(f"adaptive pool: output size {(oh, ow)} from {x} needs both non-empty")
    return (*x.shape[:2], oh, ow), x.dtype


def infer_pad(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    """`pads` is (lo, hi) per axis, flattened, one pair per axis of x. Constant mode may
    crop (negative entries) but not past the axis; reflect needs each pad below the axis
    size, replicate a non-empty axis to pad; neither crops."""
    (x,) = xs
    pads, mode = attrs["pads"], attrs["mode"]
    if mode not in PAD_MODES:
        raise ShapeError(f"pad: mode must be one of {PAD_MODES} but got {mode!r}")
    if len(pads) != 2 * len(x.shape):
        raise ShapeError(f"pad: {len(pads) // 2} (lo, hi) pairs for {x} of rank {len(x.shape)}")
    shape = []
    for axis, size in enumerate(x.shape):
        lo, hi = pads[2 * axis], pads[2 * axis + 1]
        if not (is_static(size) and is_static(lo) and is_static(hi)):
            shape.append(_symbolic_pad(x, axis, lo, hi, mode))
            continue
        if mode == "constant":
            bad = max(-lo, 0) + max(-hi, 0) > size
        elif mode == "reflect":
            bad = lo < 0 or hi < 0 or max(lo, hi) >= max(size, 1)
        else:
            bad = lo < 0 or hi < 0 or (size == 0 and lo + hi > 0)
        if bad:
            raise ShapeError(f"pad: ({lo}, {hi}) on axis {axis} of {x} in {mode} mode")
        shape.append(size + lo + hi)
    return tuple(shape), x.dtype


def infer_upsample(op: str, float_only: bool) -> Infer:
    """upsample_nearest2d / upsample_bilinear2d: (N, C, OH, OW) from a non-empty H x W;
    bilinear interpolates, so it needs a float input (as torch's does)."""

    def infer(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
        (x,) = xs
        if len(x.shape) != 4:
            raise ShapeError(f"{op} needs an NCHW input but got {x}")
        if float_only and not x.dtype.is_float:
            raise DTypeError(f"{op} needs a floating-point input but {x.label} is {x.dtype}")
        oh, ow = _pair(attrs, "output_size")
        if oh < 1 or ow < 1 or 0 in x.shape[2:]:
            raise ShapeError(f"{op}: output size {(oh, ow)} from {x} needs both non-empty")
        return (*x.shape[:2], oh, ow), x.dtype

    return infer


def _symbolic_pad(x: Operand, axis: int, lo: object, hi: object, mode: str) -> object:
    """`infer_pad`'s rule for one axis whose extent or amounts hold a Dim: each condition
    must hold for every value of the dims (`undecided` when only for some)."""
    size = x.shape[axis]
    error = ShapeError(f"pad: ({lo}, {hi}) on axis {axis} of {x} in {mode} mode")
    if mode == "constant":
        require(sympy.Max(-lo, 0) + sympy.Max(-hi, 0), "<=", size, error)
    else:
        require(lo, ">=", 0, error)
        require(hi, ">=", 0, error)
    if mode == "reflect":
        require(sympy.Max(lo, hi), "<", sympy.Max(size, 1), error)
    if mode == "replicate":  # bad exactly when the axis is empty and padded
        nonempty, unpadded = always(size, ">", 0), always(lo + hi, "==", 0)
        if nonempty is False and unpadded is False:
            raise error
        if not (nonempty or unpadded):
            raise undecided(f"pad: axis {axis} of {x} is non-empty or unpadded", size, lo, hi)
    return canonical(size + lo + hi)
