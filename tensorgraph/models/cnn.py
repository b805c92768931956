"""Convolutional models: ResNet-18 and MobileNetV2, NCHW, batch norm in inference form.

Batch norm is emitted as a per-channel scale and shift (`x * s + t`, with s, t params of
shape (C, 1, 1)), which is how inference exporters fold running statistics. The two
models share that conv + batch-norm unit, so they share this module (the torch
importer's examples reuse MOBILENET_V2_STAGES from here)."""

from __future__ import annotations

from attrs import field, frozen

import tensorgraph as tg
from tensorgraph.ir.builder import Tensor
from tensorgraph.models.common import (
    Model,
    Weights,
    dtype_of,
    make_config,
    model_dtype,
    positive_float,
    positive_int,
    random_inputs,
)


def _conv_bn(
    w: Weights, x: Tensor, name: str, out_ch: int, kernel: int, stride: int = 1, groups: int = 1
) -> Tensor:
    """`kernel` x `kernel` conv ('same' padding for odd kernels, no bias) then folded BN."""
    in_ch = x.shape[1]
    weight = w.normal(
        f"{name}.w",
        (out_ch, in_ch // groups, kernel, kernel),
        fan_in=in_ch // groups * kernel * kernel,
    )
    y = tg.conv2d(x, weight, stride=stride, padding=kernel // 2, groups=groups)
    scale = w.uniform(f"{name}.bn.scale", (out_ch, 1, 1), 0.5, 1.0)
    shift = w.uniform(f"{name}.bn.shift", (out_ch, 1, 1), -0.1, 0.1)
    return y * scale + shift


@frozen
class ResNetConfig:
    """Input images are (batch, 3, image, image); stage s has width * 2**s channels."""

    batch: int = field(default=1, validator=positive_int)
    image: int = field(default=64, validator=positive_int)
    width: int = field(default=32, validator=positive_int)
    classes: int = field(default=100, validator=positive_int)
    dtype: str = field(default="float32", validator=model_dtype)


def resnet18(config: ResNetConfig | None = None, /, **overrides: object) -> Model:
    """ResNet-18: stem (7x7/2 conv, 3x3/2 max pool), four stages of two basic blocks, global
    average pool (a mean) and a linear head. Fields of `config` (default ResNetConfig())
    may be overridden by keyword."""
    c = make_config(ResNetConfig, config, overrides)
    dtype = dtype_of(c.dtype)
    g = tg.Graph("resnet18")
    w = Weights(g, dtype=dtype)
    x = g.input("image", (c.batch, 3, c.image, c.image), dtype)
    h = tg.relu(_conv_bn(w, x, "stem", c.width, 7, stride=2))
    h = tg.max_pool2d(h, 3, stride=2, padding=1)
    channels = c.width
    for stage in range(4):
        out_ch = c.width * 2**stage
        for block in range(2):
            stride = 2 if stage > 0 and block == 0 else 1
            name = f"s{stage}.b{block}"
            y = tg.relu(_conv_bn(w, h, f"{name}.c1", out_ch, 3, stride))
            y = _conv_bn(w, y, f"{name}.c2", out_ch, 3)
            skip = (
                h
                if stride == 1 and channels == out_ch
                else _conv_bn(w, h, f"{name}.down", out_ch, 1, stride)
            )
            h = tg.relu(y + skip)
            channels = out_ch
    pooled = h.mean(axis=(2, 3))
    fc = w.normal("fc.w", (channels, c.classes))
    g.output(pooled @ fc + w.constant("fc.b", (c.classes,), 0.0))
    return Model(g, lambda seed: random_inputs(g, seed))


@frozen
class MobileNetConfig:
    """Input images are (batch, 3, image, image); `width` multiplies every channel count."""

    batch: int = field(default=1, validator=positive_int)
    image: int = field(default=64, validator=positive_int)
    width: float = field(default=0.5, validator=positive_float)
    classes: int = field(default=100, validator=positive_int)
    dtype: str = field(default="float32", validator=model_dtype)


# (expansion, output channels, repeats, first stride): MobileNetV2's table.
MOBILENET_V2_STAGES = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


def _relu6(x: Tensor) -> Tensor:
    return tg.clip(x, 0.0, 6.0)


def _channels(value: float) -> int:
    """Round to a multiple of 8 (at least 8), as MobileNet's width multiplier does."""
    return max(8, int(value + 4) // 8 * 8)


def mobilenet_v2(config: MobileNetConfig | None = None, /, **overrides: object) -> Model:
    """MobileNetV2: inverted residual blocks (1x1 expand, 3x3 depthwise with groups equal
    to the channels, 1x1 project; a residual add where shapes allow), ReLU6 as a clip.
    Fields of `config` (default MobileNetConfig()) may be overridden by keyword."""
    c = make_config(MobileNetConfig, config, overrides)
    dtype = dtype_of(c.dtype)
    g = tg.Graph("mobilenet_v2")
    w = Weights(g, dtype=dtype)
    x = g.input("image", (c.batch, 3, c.image, c.image), dtype)
    h = _relu6(_conv_bn(w, x, "stem", _channels(32 * c.width), 3, stride=2))
    for s, (expand, out, repeats, first_stride) in enumerate(MOBILENET_V2_STAGES):
        out_ch = _channels(out * c.width)
        for r in range(repeats):
            stride = first_stride if r == 0 else 1
            name = f"s{s}.r{r}"
            in_ch = h.shape[1]
            y = h
            if expand != 1:
                y = _relu6(_conv_bn(w, y, f"{name}.expand", in_ch * expand, 1))
            y = _relu6(_conv_bn(w, y, f"{name}.dw", y.shape[1], 3, stride, groups=y.shape[1]))
            y = _conv_bn(w, y, f"{name}.project", out_ch, 1)
            h = h + y if stride == 1 and in_ch == out_ch else y
    h = _relu6(_conv_bn(w, h, "head", _channels(1280 * max(1.0, c.width)), 1))
    pooled = h.mean(axis=(2, 3))
    g.output(pooled @ w.normal("fc.w", (pooled.shape[1], c.classes)))
    return Model(g, lambda seed: random_inputs(g, seed))
