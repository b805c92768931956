"""2-D convolution and pooling over NCHW tensors (PyTorch's layout) with MLX's argument
names. Kernel sizes, strides, paddings and dilations accept an int (both axes) or an
(H, W) pair and are stored as pairs; a pool's stride defaults to its kernel size.
"""

from __future__ import annotations

from collections.abc import Sequence

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
    padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    groups: int = 1,
) -> Tensor:
    """2-D convolution, NCHW input and OIHW weight (PyTorch's layout), MLX's arg names."""
    return emit(
        "conv2d",
        [input, weight],
        stride=_pair(stride),
        padding=_pair(padding),
        dilation=_pair(dilation),
        groups=int(groups),
    )


def max_pool2d(
    x: Tensor,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: int | Sequence[int] = 0,
) -> Tensor:
    kernel = _pair(kernel_size)
    return emit(
        "max_pool2d",
        [x],
        kernel_size=kernel,
        stride=_pair(stride) if stride is not None else kernel,
        padding=_pair(padding),
    )


def avg_pool2d(
    x: Tensor,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: int | Sequence[int] = 0,
    count_include_pad: bool = True,
) -> Tensor:
    kernel = _pair(kernel_size)
    return emit(
        "avg_pool2d",
        [x],
        kernel_size=kernel,
        stride=_pair(stride) if stride is not None else kernel,
        padding=_pair(padding),
        count_include_pad=count_include_pad,
    )
