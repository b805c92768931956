"""The weight gradient of a convolution as an IR op (issue 27's backward ops):
`conv2d_weight_backward(x, g)`, the vector-Jacobian product of `conv2d` for its weight
(ir/vjp_windows.py emits it for conv2d, and for conv_transpose2d with its input and
cotangent exchanged).

Semantics. `x` (N, C, H, W) is the convolution's input and `g` (N, O, OH, OW) the
cotangent of its output, both of one float dtype; the result, of that dtype, is

    dw[o, c, u, v] = sum over n, i, j of
        g[n, o, i, j] * x[n, k * Cg + c, u * dh + i * sh - ph, v * dw + j * sw - pw]

of shape (O, Cg, KH, KW), where Cg = C / groups, k = o // (O / groups) is o's group,
and x's elements outside it (its padding) are zeros. The attributes are the forward
convolution's: kernel_size (KH, KW), stride (sh, sw), padding (ph, pw: the top and left),
dilation (dh, dw) and groups. No bottom or right padding is needed: rows past x read
zeros and rows past the taps' reach are never read, so any OH, OW (a strided
convolution's, a transposed convolution's with output_padding) has one meaning.

Why an op and not a composition. Written as a convolution (x's channels as its batch,
g's batch as its channels), the weight gradient transposed both operands first, and the
plan held a copy of x and one of g beside them: at ResNet-18's stem the image, its
transposed copy and g's (1 MiB), the least any rematerialisation of the zoo's step
could reach. As one op the plan holds x, g and the small result; the kernels contract
patches of x as stored.

Workspace. The patches are the op's own memory, on every backend: x padded to the taps'
reach, the (G, N*OH*OW, Cg*KH*KW) patch matrix (KH*KW times x where the stride is 1:
1.2 MB beside a 98 KB image at ResNet-18's 7x7 stem, batch 8) and the cotangent
rearranged per group. The op declares them (`workspace`), so the plan reserves them at
its step and the schedule sees them: left outside the plan they were what MLX held
beyond it (ResNet-18's training step: MLX peak 1.144x the plan, the stem's weight
gradient its largest step). What the MLX allocator adds on top (its buffer cache's
rounding) stays codegen_mlx/scratch.py's. It is a training op only, so no inference
arena (the ExecuTorch comparison's) changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from tensorgraph.errors import DTypeError, ShapeError
from tensorgraph.ir.dtypes import DType
from tensorgraph.ir.ops import AttrSpec, OpDef, Operand, register
from tensorgraph.ir.shapes import Shape, numel

if TYPE_CHECKING:
    from tensorgraph.ir.tensor import Tensor


def _infer(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    x, g = xs
    if len(x.shape) != 4 or len(g.shape) != 4:
        raise ShapeError(f"conv2d_weight_backward needs NCHW x and cotangent: {x}, {g}")
    if not x.dtype.is_float or g.dtype != x.dtype:
        raise DTypeError(
            f"conv2d_weight_backward needs x and g of one float dtype but {x.label} is "
            f"{x.dtype}, {g.label} {g.dtype}"
        )
    groups = attrs["groups"]
    c, o = x.shape[1], g.shape[1]
    if groups < 1 or c % groups or o % groups:
        raise ShapeError(f"conv2d_weight_backward: groups={groups} must divide {x}, {g} channels")
    if x.shape[0] != g.shape[0]:
        raise ShapeError(f"conv2d_weight_backward: batch of {x} differs from {g}")
    kernel, padding = tuple(attrs["kernel_size"]), tuple(attrs["padding"])
    stride, dilation = tuple(attrs["stride"]), tuple(attrs["dilation"])
    if any(len(v) != 2 for v in (kernel, padding, stride, dilation)):
        raise ShapeError(
            f"conv2d_weight_backward: kernel_size {kernel}, stride {stride}, padding "
            f"{padding} and dilation {dilation} must be (H, W) pairs"
        )
    if min(kernel) < 1 or min(stride) < 1 or min(dilation) < 1 or min(padding) < 0:
        raise ShapeError(
            f"conv2d_weight_backward: bad kernel_size {kernel} / stride {stride} / "
            f"padding {padding} / dilation {dilation}"
        )
    return (o, c // groups, *kernel), x.dtype


def patch_elements(x_shape: Shape, g_shape: Shape, kernel: Sequence[int]) -> int:
    """Elements of the patch matrix the op contracts for an x of `x_shape` and a
    cotangent of `g_shape`: N*OH*OW rows by C*KH*KW columns over all groups."""
    return x_shape[0] * numel(g_shape[2:]) * x_shape[1] * numel(kernel)


def workspace(xs: Sequence[Operand], attrs: Mapping, shape: Shape, dtype: DType) -> int:
    """Bytes of the patches both kernels contract (module docstring), at the widest
    precision either computes in (NumPy float32 for half types, MLX the node's dtype):
    x padded to the taps' reach (N, C, RH, RW), the patch matrix (N*OH*OW, C*KH*KW)
    over all groups, and the rearranged cotangent (as many elements as g); for a half
    type also NumPy's float32 copies of x and g and its float32 product, rounded once.
    0 for an empty cotangent (nothing is contracted)."""
    x, g = xs
    if 0 in tuple(g.shape):
        return 0
    n, c = x.shape[:2]
    rows, cols = reach(attrs, tuple(g.shape[2:]))
    patches = patch_elements(x.shape, g.shape, attrs["kernel_size"])
    elements = n * c * rows * cols + patches + numel(g.shape)
    if dtype.itemsize < 4:
        elements += numel(x.shape) + numel(g.shape) + numel(shape)
    return elements * max(dtype.itemsize, 4)


register(
    OpDef(
        "conv2d_weight_backward",
        2,
        2,
        _infer,
        {
            "kernel_size": AttrSpec("ints"),
            "stride": AttrSpec("ints", (1, 1)),
            "padding": AttrSpec("ints", (0, 0)),
            "dilation": AttrSpec("ints", (1, 1)),
            "groups": AttrSpec("int", 1),
        },
        category="conv",
        workspace=workspace,
    )
)


def conv2d_weight_backward(
    x: Tensor,
    g: Tensor,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    groups: int = 1,
) -> Tensor:
    """The cotangent of the weight of `conv2d(x, w, stride, padding, dilation, groups)`
    with a (KH, KW) = `kernel_size` kernel, for the cotangent g of its output (module
    docstring); `padding` is the top and left one (an int or an (H, W) pair)."""
    # The registry core imports this module to complete `OPS`, and `ir.tensor` needs the
    # graph, which needs the registry: so the handle plumbing is imported on use.
    from tensorgraph.ir.conv import _pair
    from tensorgraph.ir.tensor import emit

    return emit(
        "conv2d_weight_backward",
        [x, g],
        kernel_size=_pair(kernel_size),
        stride=_pair(stride),
        padding=_pair(padding),
        dilation=_pair(dilation),
        groups=int(groups),
    )


def reach(node_attrs: Mapping, positions: Sequence[int]) -> tuple[int, int]:
    """Per axis, the padded extent of x the op's taps read for a cotangent of
    `positions` (OH, OW): (K - 1) * d + (OH - 1) * s + 1, tap u of output row i reading
    padded row u * d + i * s; callers make an empty g's result without it."""
    return tuple(
        (k - 1) * d + (o - 1) * s + 1
        for k, o, s, d in zip(
            node_attrs["kernel_size"],
            positions,
            node_attrs["stride"],
            node_attrs["dilation"],
            strict=True,
        )
    )
