"""Convolution, pooling and padding over NCHW tensors (PyTorch's layout) with PyTorch's
semantics and argument names (MLX's where it has the op). Kernel sizes, strides,
paddings and dilations accept an int (both axes) or an (H, W) pair and are stored as
pairs; a pool's stride defaults to its kernel size. conv1d is conv2d between reshapes,
conv_transpose1d likewise conv_transpose2d.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tensorgraph.errors import ShapeError
from tensorgraph.ir.dims import extent_or_int
from tensorgraph.ir.functions import reshape
from tensorgraph.ir.tensor import Tensor, emit


def _pair(value: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(value, int):
        return (value, value)
    a, b = value
    return (int(a), int(b))


def conv2d(
    input: Tensor,
    weight: Tensor,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] | Sequence[Sequence[int]] = 0,
    dilation: int | Sequence[int] = 1,
    groups: int = 1,
) -> Tensor:
    """2-D convolution, NCHW input and OIHW weight (PyTorch's layout), MLX's arg names.
    `padding` is an int, an (H, W) pair padding both sides, or ((top, bottom), (left,
    right)) as mx.conv_general takes it (stored as `padding` and `padding_end` only
    where the two sides differ, so a symmetric graph's attributes are torch's)."""
    attrs: dict[str, object] = {"padding": _pair(padding)} if _flat(padding) else {}
    if not attrs:
        (top, bottom), (left, right) = (_pair(p) for p in padding)
        attrs["padding"] = (top, left)
        if (bottom, right) != (top, left):
            attrs["padding_end"] = (bottom, right)
    return emit(
        "conv2d",
        [input, weight],
        stride=_pair(stride),
        dilation=_pair(dilation),
        groups=int(groups),
        **attrs,
    )


def _flat(padding: object) -> bool:
    """Whether `padding` is an int or a pair of ints (not a pair of pairs)."""
    return isinstance(padding, int) or not any(isinstance(p, tuple | list) for p in padding)


def _single(value: int | Sequence[int], name: str) -> int:
    if isinstance(value, int):
        return value
    if len(value) != 1:
        raise ShapeError(f"{name} must be an int or a 1-tuple but got {value}")
    return int(value[0])


def conv1d(
    input: Tensor,
    weight: Tensor,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    groups: int = 1,
) -> Tensor:
    """1-D convolution, NCL input and OIK weight (PyTorch's layout): a conv2d over a
    height of 1, between two free reshapes (no op of its own: the planner and both
    backends already handle conv2d's groups and dilation)."""
    per_axis = {"stride": stride, "padding": padding, "dilation": dilation}
    return _over_height_one("conv1d", conv2d, input, weight, per_axis, groups)


def _over_height_one(
    op: str,
    conv: Callable[..., Tensor],
    input: Tensor,
    weight: Tensor,
    per_axis: dict[str, int | Sequence[int]],
    groups: int,
) -> Tensor:
    """The 1-D `op` as its 2-D `conv` over a height of 1: NCL input and a 3-D weight
    reshaped (free), each per-axis argument (stride, padding, ...) an int or 1-tuple
    lifted to (neutral, value) with 1 as the neutral stride or dilation and 0 as the
    neutral padding."""
    for name, t in (("input", input), ("weight", weight)):
        if t.ndim != 3:
            raise ShapeError(f"{op}: {name} must be 3-D (N, C, L / weight with K) but is {t!r}")
    n, c, length = input.shape
    a, b, k = weight.shape
    lifted = [
        (1 if name in ("stride", "dilation") else 0, _single(value, name))
        for name, value in per_axis.items()
    ]
    y = conv(reshape(input, (n, c, 1, length)), reshape(weight, (a, b, 1, k)), *lifted, groups)
    return reshape(y, (y.shape[0], y.shape[1], y.shape[3]))


def conv_transpose2d(
    input: Tensor,
    weight: Tensor,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    output_padding: int | Sequence[int] = 0,
    groups: int = 1,
) -> Tensor:
    """2-D transposed convolution (the gradient of conv2d with respect to its input, as
    decoders and upsampling layers use it): NCHW input and weight (C_in, C_out / groups,
    KH, KW), torch's layout and output size (H - 1) * stride - 2 * padding + dilation *
    (KH - 1) + output_padding + 1; MLX's argument names and order. Float operands."""
    return emit(
        "conv_transpose2d",
        [input, weight],
        stride=_pair(stride),
        padding=_pair(padding),
        output_padding=_pair(output_padding),
        dilation=_pair(dilation),
        groups=int(groups),
    )


def conv_transpose1d(
    input: Tensor,
    weight: Tensor,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    output_padding: int | Sequence[int] = 0,
    groups: int = 1,
) -> Tensor:
    """1-D transposed convolution, NCL input and weight (C_in, C_out / groups, K): a
    conv_transpose2d over a height of 1 between two free reshapes."""
    per_axis = {
        "stride": stride,
        "padding": padding,
        "dilation": dilation,
        "output_padding": output_padding,
    }
    return _over_height_one("conv_transpose1d", conv_transpose2d, input, weight, per_axis, groups)


def max_pool2d(
    x: Tensor,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    ceil_mode: bool = False,
) -> Tensor:
    """torch.nn.functional.max_pool2d (no indices): padding counts as -inf, and with
    ceil_mode a last partial window is kept when it starts inside the input or the left
    padding (torch's output-size rule, see ir.window_inference)."""
    return emit(
        "max_pool2d", [x], **max_pool_attrs(kernel_size, stride, padding, dilation, ceil_mode)
    )


def max_pool_attrs(
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None,
    padding: int | Sequence[int],
    dilation: int | Sequence[int],
    ceil_mode: bool,
) -> dict[str, object]:
    """A max pool's canonical attributes from torch's arguments (a stride of None: the
    kernel's), shared by the pool and its backward (ir.pool_grad)."""
    kernel = _pair(kernel_size)
    return {
        "kernel_size": kernel,
        "stride": _pair(stride) if stride is not None else kernel,
        "padding": _pair(padding),
        "dilation": _pair(dilation),
        "ceil_mode": bool(ceil_mode),
    }


def avg_pool2d(
    x: Tensor,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: int | Sequence[int] = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> Tensor:
    """torch.nn.functional.avg_pool2d: window sums (padding counts as 0) divided by
    `divisor_override` if given, else by the window's extent within the padded input
    (count_include_pad) or by its number of real elements."""
    kernel = _pair(kernel_size)
    if divisor_override is not None and int(divisor_override) <= 0:
        raise ShapeError(f"avg_pool2d: divisor_override must be positive, got {divisor_override}")
    return emit(
        "avg_pool2d",
        [x],
        kernel_size=kernel,
        stride=_pair(stride) if stride is not None else kernel,
        padding=_pair(padding),
        ceil_mode=bool(ceil_mode),
        count_include_pad=bool(count_include_pad),
        divisor_override=int(divisor_override or 0),
    )


def _output_size(x: Tensor, output_size: int | Sequence[int | None]) -> tuple[int, int]:
    """An int or an (H, W) pair; None keeps that input size (torch's convention)."""
    if x.ndim != 4:
        raise ShapeError(f"resizing and adaptive pooling need an NCHW input but got {x!r}")
    pair = (output_size, output_size) if isinstance(output_size, int) else tuple(output_size)
    if len(pair) != 2:
        raise ShapeError(f"output_size {output_size} is not (H, W)")
    return tuple(x.shape[2 + i] if s is None else int(s) for i, s in enumerate(pair))


def adaptive_avg_pool2d(x: Tensor, output_size: int | Sequence[int | None]) -> Tensor:
    """Output cell (i, j) averages rows [floor(i*H/OH), ceil((i+1)*H/OH)) and likewise
    columns, for any input and output sizes (torch's windows; they may overlap)."""
    return emit("adaptive_avg_pool2d", [x], output_size=_output_size(x, output_size))


def adaptive_max_pool2d(x: Tensor, output_size: int | Sequence[int | None]) -> Tensor:
    """The maximum over adaptive_avg_pool2d's windows (values only, no indices)."""
    return emit("adaptive_max_pool2d", [x], output_size=_output_size(x, output_size))


def pad(
    x: Tensor,
    pads: Sequence[tuple[int, int]],
    value: float = 0.0,
    mode: str = "constant",
) -> Tensor:
    """Pad (lo, hi) elements on each axis, pairs given from the first axis (NumPy's order,
    the reverse of torch.nn.functional.pad's flat list); axes past the last pair are left
    alone. Modes: "constant" (`value`, converted to x's dtype; a negative amount crops,
    as torch's constant_pad_nd does), "reflect" (mirror without repeating the edge, each
    amount below the axis size) and "replicate" (repeat the edge)."""
    pairs = [tuple(extent_or_int(v, "pad amount") for v in pair) for pair in pads]
    if len(pairs) > x.ndim or any(len(pair) != 2 for pair in pairs):
        raise ShapeError(f"pad: pads {tuple(pads)} must be at most {x.ndim} (lo, hi) pairs")
    pairs += [(0, 0)] * (x.ndim - len(pairs))
    return emit("pad", [x], pads=tuple(v for pair in pairs for v in pair), value=value, mode=mode)


def upsample_nearest2d(x: Tensor, output_size: int | Sequence[int]) -> Tensor:
    """Resize H x W to `output_size` by nearest neighbour, torch's legacy "nearest" rule:
    output row i reads input row min(floor(i * float32(H / OH)), H - 1) (in float32, as
    torch computes it), likewise columns. Any dtype."""
    return emit("upsample_nearest2d", [x], output_size=_output_size(x, output_size))


def upsample_bilinear2d(
    x: Tensor, output_size: int | Sequence[int], align_corners: bool = False
) -> Tensor:
    """Resize H x W to `output_size` by bilinear interpolation (float inputs), torch's
    rule: source coordinate i * (H - 1) / (OH - 1) with align_corners, else
    (i + 0.5) * H / OH - 0.5 clamped at 0; the two nearest rows (the last repeated at the
    edge) are mixed by the coordinate's fraction, then likewise columns."""
    return emit(
        "upsample_bilinear2d",
        [x],
        output_size=_output_size(x, output_size),
        align_corners=bool(align_corners),
    )
