"""ATen handlers for matrix products, convolution, batch norm and pooling.

Convolutions are 1-D or 2-D (NCL / NCHW, grouped and dilated, never transposed); pools
are 2-D with padding, dilation and ceil_mode, plus the adaptive pools for any output
size. A linear's transposed weight stays a transpose here: folding makes it a param.
Inference only: a training-mode batch norm is Unsupported.
"""

from __future__ import annotations

from collections.abc import Sequence

from tensorgraph.importers.aten import Context, handles, require
from tensorgraph.importers.patterns import grouped_product
from tensorgraph.ir import api as tg
from tensorgraph.ir.tensor import Tensor


def _ints(value: object, n: int) -> tuple[int, ...]:
    """An int or a sequence (torch's 1-element shorthand included) as n ints."""
    values = [value] if isinstance(value, int) else list(value)
    return tuple(int(v) for v in (values * n if len(values) == 1 else values))


# ---------------------------------------------------------------- matrix products


@handles("addmm")
def _addmm(
    ctx: Context, bias: Tensor, a: Tensor, b: Tensor, *, beta: float = 1, alpha: float = 1
) -> Tensor:
    product = a @ b
    product = product * alpha if alpha != 1 else product
    if beta == 0:  # torch ignores the bias (even NaNs in it) when beta is 0
        return product
    return (bias * beta if beta != 1 else bias) + product


@handles("mm", "bmm")
def _matmul(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
    grouped = grouped_product(a, b)  # attention written out over repeated kv heads
    return a @ b if grouped is None else grouped


# ---------------------------------------------------------------- convolution


@handles("convolution", "_convolution")
def _convolution(
    ctx: Context,
    x: Tensor,
    w: Tensor,
    bias: Tensor | None = None,
    stride: object = 1,
    padding: object = 0,
    dilation: object = 1,
    transposed: bool = False,
    output_padding: object = 0,
    groups: int = 1,
    *rest: object,
) -> Tensor:
    spatial = w.ndim - 2
    require(spatial in (1, 2), f"{spatial}-D convolution")
    require(not isinstance(padding, str), f"padding={padding!r}")
    stride, dilation = _ints(stride, spatial), _ints(dilation, spatial)
    padding = _ints(padding, spatial)
    if transposed:
        extra = _ints(output_padding, spatial)
        if spatial == 1:
            y = tg.conv_transpose1d(x, w, stride[0], padding[0], dilation[0], extra[0], groups)
        else:
            y = tg.conv_transpose2d(x, w, stride, padding, dilation, extra, groups)
    elif spatial == 1:
        y = tg.conv1d(x, w, stride[0], padding[0], dilation[0], groups)
    else:
        y = tg.conv2d(x, w, stride, padding, dilation, groups)
    return y if bias is None else y + bias.reshape((1, -1) + (1,) * spatial)


# ---------------------------------------------------------------- batch norm


def _batch_norm_inference(
    x: Tensor, weight: Tensor | None, bias: Tensor | None, mean: Tensor, var: Tensor, eps: float
) -> Tensor:
    """x * scale + shift with scale = weight / sqrt(var + eps), shift = bias - mean * scale
    (per channel, axis 1): weight-only terms that folding turns into two params."""
    scale = tg.rsqrt(var + eps)
    if weight is not None:
        scale = scale * weight
    shift = -mean * scale if bias is None else bias - mean * scale
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return x * scale.reshape(shape) + shift.reshape(shape)


@handles("_native_batch_norm_legit_no_training")
def _native_batch_norm(
    ctx: Context,
    x: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    mean: Tensor,
    var: Tensor,
    momentum: float,
    eps: float,
) -> tuple:
    return (_batch_norm_inference(x, weight, bias, mean, var, eps), None, None)


@handles("_native_batch_norm_legit")
def _native_batch_norm_batch_stats(
    ctx: Context, x: Tensor, weight: Tensor | None, bias: Tensor | None, *rest: object
) -> tuple:
    """Normalisation by the batch's own statistics: what instance norm decomposes to
    (`training=True` over a (1, N*C, ...) view) and BatchNorm without running stats.
    Overloads: no_stats (training, momentum, eps) and with running stats (running_mean,
    running_var, training, momentum, eps); with running stats and training off it is
    inference normalisation. Statistics per channel (axis 1) over every other axis,
    biased variance, as torch normalises. Updating the running stats is a buffer
    mutation the importer reports on its own (states must start as zeros)."""
    if len(rest) == 5:
        mean, var, training, _, eps = rest
        if not training:
            return (_batch_norm_inference(x, weight, bias, mean, var, eps), None, None)
    else:
        _, _, eps = rest  # training (always true without stats), momentum
    axes = (0, *range(2, x.ndim))
    centred = x - tg.mean(x, axes, keepdims=True)
    y = centred * tg.rsqrt(tg.mean(centred * centred, axes, keepdims=True) + eps)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    if weight is not None:
        y = y * weight.reshape(shape)
    if bias is not None:
        y = y + bias.reshape(shape)
    return (y, None, None)


# ---------------------------------------------------------------- pooling


@handles("max_pool2d_with_indices")
def _max_pool2d_with_indices(
    ctx: Context,
    x: Tensor,
    kernel: Sequence[int],
    stride: Sequence[int] = (),
    padding: object = 0,
    dilation: object = 1,
    ceil_mode: bool = False,
) -> object:
    kernel = _ints(kernel, 2)
    y = tg.max_pool2d(
        x,
        kernel,
        _ints(stride, 2) if stride else kernel,
        _ints(padding, 2),
        _ints(dilation, 2),
        bool(ceil_mode),
    )
    # The indices are only for max_unpool / training: an unused output of the node.
    return (y, None)


@handles("avg_pool2d")
def _avg_pool2d(
    ctx: Context,
    x: Tensor,
    kernel: Sequence[int],
    stride: Sequence[int] = (),
    padding: object = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> Tensor:
    kernel = _ints(kernel, 2)
    return tg.avg_pool2d(
        x,
        kernel,
        _ints(stride, 2) if stride else kernel,
        _ints(padding, 2),
        bool(ceil_mode),
        bool(count_include_pad),
        divisor_override,
    )


@handles("_adaptive_avg_pool2d")
def _adaptive_avg_pool2d(ctx: Context, x: Tensor, output_size: Sequence[int]) -> Tensor:
    size = tuple(x.shape[-2 + i] if s is None else int(s) for i, s in enumerate(output_size))
    if size == (1, 1):  # global average pooling: one reduction, no pool window
        return x.mean(axis=(-2, -1), keepdims=True)
    return tg.adaptive_avg_pool2d(x, size)


@handles("adaptive_max_pool2d")
def _adaptive_max_pool2d(ctx: Context, x: Tensor, output_size: Sequence[int]) -> tuple:
    size = tuple(x.shape[-2 + i] if s is None else int(s) for i, s in enumerate(output_size))
    return (tg.adaptive_max_pool2d(x, size), None)


def _check_scales(ctx: Context, x: Tensor, scales: Sequence[object]) -> tuple[int, int]:
    """torch's output size; explicit scale factors must agree with it (torch then maps
    output to input by 1/scale, which equals in/out only when out/in is the scale)."""
    out = ctx.out_shape[-2:]
    for given, size, out_size in zip(scales, x.shape[-2:], out, strict=False):
        if given is not None:
            require(float(given) == out_size / size, f"scale factor {given} for {size}->{out_size}")
    return out


@handles("upsample_nearest2d")
def _upsample_nearest2d(ctx: Context, x: Tensor, output_size: object, *scales: object) -> Tensor:
    # .default: (x, output_size, scales_h, scales_w); .vec: (x, output_size, scale_factors)
    flat = scales[0] if len(scales) == 1 and isinstance(scales[0], list | tuple) else scales
    return tg.upsample_nearest2d(x, _check_scales(ctx, x, flat or ()))


@handles("upsample_bilinear2d")
def _upsample_bilinear2d(
    ctx: Context, x: Tensor, output_size: object, align_corners: bool, *scales: object
) -> Tensor:
    flat = scales[0] if len(scales) == 1 and isinstance(scales[0], list | tuple) else scales
    return tg.upsample_bilinear2d(x, _check_scales(ctx, x, flat or ()), bool(align_corners))
