"""The input gradients of the max pools as IR ops (issue 27's backward ops):
`max_pool2d_backward(x, [out,] g)` and `adaptive_max_pool2d_backward(x, [out,] g)`, the
vector-Jacobian products of `max_pool2d` / `adaptive_max_pool2d` (ir/vjp_windows.py
emits them without `out`).

Semantics. `x` is the pool's NCHW input, `out` its result and `g` the cotangent of
`out` (both of the pooled shape); the result has x's shape and dtype. `out` is optional:
without it the kernels take the pool of x themselves (the forward kernel's windows and
maxima, so the same values), and the plan need not hold the pooled result until the
backward, where a rematerialised step would recompute it for this op alone (ResNet-18's
stem: 64 KiB of the least arena any recompute reaches). Each window's
cotangent g[n, c, i, j] is split evenly among the window's elements of x equal to
out[n, c, i, j] (MLX's max convention: k tied maxima get g / k each; a NaN maximum
matches nothing, so its window gives NaN, as g * 0 / 0), and every element of x gets
the sum of its shares over the windows that hold it (overlapping windows add). Padding
never holds a maximum. The attributes are the forward pool's own (max_pool2d's
kernel_size, stride, padding, dilation, ceil_mode; adaptive_max_pool2d's output_size),
so the windows are exactly the forward's (runtime/pool_grad_kernels.py states them once
for both backends).

Why an op and not a composition. Written out of take / eq / scatter_add (the rule's
previous form), one 3x3 stride-2 max pool's gradient held the windows (9x the pooled
bytes), their int32 flat positions broadcast to the same size, the hits, the shares,
the zeros and the scattered sum at once: 4.9x x's bytes, the peak of ResNet-18's
training step (2.38 MiB keep-everything at batch 8, 64x64, width 8). As one op the plan
holds its inputs and x-sized result; the kernels' temporaries live inside the op
(codegen_mlx/segments.py's SCRATCH states the MLX lowering's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from attrs import evolve

from tensorgraph.errors import DTypeError, ShapeError
from tensorgraph.ir.dtypes import DType
from tensorgraph.ir.ops import OPS, Infer, OpDef, Operand, register
from tensorgraph.ir.shapes import Shape
from tensorgraph.ir.window_inference import infer_adaptive_pool, infer_pool

if TYPE_CHECKING:
    from tensorgraph.ir.node import Node
    from tensorgraph.ir.tensor import Tensor


def _infer(pooled: Infer) -> Infer:
    """Inference of a pool's backward from the forward pool's: x's shape and dtype, with
    `out` and `g` of the shape the pool gives x and x's float dtype."""

    def infer(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
        x, *pooled_operands = xs
        shape, _ = pooled([x], attrs)
        if not x.dtype.is_float:
            raise DTypeError(f"a max pool's gradient needs a float x but {x.label} is {x.dtype}")
        for operand in pooled_operands:
            if tuple(operand.shape) != tuple(shape):
                raise ShapeError(f"{operand} must have the pooled shape {tuple(shape)} of {x}")
            if operand.dtype != x.dtype:
                raise DTypeError(f"{operand.label} is {operand.dtype}, {x.label} {x.dtype}")
        return x.shape, x.dtype

    return infer


# Each backward has its pool's attributes (the op table registers the pools before it
# imports this module).
for _pool, _rule in (("max_pool2d", infer_pool), ("adaptive_max_pool2d", infer_adaptive_pool)):
    _attrs = dict(OPS[_pool].attrs)
    register(OpDef(f"{_pool}_backward", 2, 3, _infer(_rule), _attrs, category="pool"))


def pooled_operands(node: Node, args: Sequence) -> tuple:
    """(x, out or None, g) of a backward node's operands (any sequence: Tensors, arrays),
    with or without `out`."""
    return (args[0], args[1], args[2]) if len(args) == 3 else (args[0], None, args[1])


def forward_pool(node: Node, pooled_shape: Sequence) -> Node:
    """The forward pool a backward `node` differentiates, as a node reading its x and
    giving `pooled_shape` (g's): what the kernels run where `out` is not an operand."""
    return evolve(
        node,
        op=node.op.removesuffix("_backward"),
        inputs=node.inputs[:1],
        shape=tuple(pooled_shape),
    )


def max_pool_backward(pool: Node, x: Tensor, g: Tensor) -> Tensor:
    """The cotangent of x through `pool` (a max_pool2d or adaptive_max_pool2d node whose
    input is x), for the cotangent g of its result (module docstring): without `out`,
    so the pooled result is not held for the backward."""
    # The registry core imports this module to complete `OPS`, and `ir.tensor` needs the
    # graph, which needs the registry: so the handle plumbing is imported on use.
    from tensorgraph.ir.tensor import emit

    attrs = {name: pool.attr(name) for name in OPS[pool.op].attrs}
    return emit(f"{pool.op}_backward", [x, g], **attrs)


def max_pool2d_backward(
    x: Tensor,
    out: Tensor | None,
    g: Tensor,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    ceil_mode: bool = False,
) -> Tensor:
    """The cotangent of x through `max_pool2d(x, kernel_size, ...)`, whose result is
    `out` (None: the op pools x itself), for the cotangent g of that result (module
    docstring); the pool's arguments as `tg.max_pool2d` takes them."""
    from tensorgraph.ir.conv import max_pool_attrs
    from tensorgraph.ir.tensor import emit

    attrs = max_pool_attrs(kernel_size, stride, padding, dilation, ceil_mode)
    return emit("max_pool2d_backward", [x, g] if out is None else [x, out, g], **attrs)


def adaptive_max_pool2d_backward(
    x: Tensor, out: Tensor | None, g: Tensor, output_size: int | Sequence[int | None]
) -> Tensor:
    """The cotangent of x through `adaptive_max_pool2d(x, output_size)`, whose result is
    `out` (None: the op pools x itself), for the cotangent g of that result (module
    docstring)."""
    from tensorgraph.ir.conv import _output_size
    from tensorgraph.ir.tensor import emit

    size = _output_size(x, output_size)
    operands = [x, g] if out is None else [x, out, g]
    return emit("adaptive_max_pool2d_backward", operands, output_size=size)
