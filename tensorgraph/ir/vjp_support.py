"""Helpers shared by the vector-Jacobian rules (`ir.vjp_*`): zeros, unbroadcasting and
keepdims shapes, all built with the IR's own op functions so that shape inference checks
every backward node as it checks any other.

A rule's contract (`ops.Vjp`): given the forward node, its operands and value as Tensors
of the gradient graph, and the cotangent of the value (the value's shape and dtype), it
returns one cotangent per operand, of that operand's shape and dtype, or None where no
gradient flows (integer operands, indices, piecewise-constant ops).
"""

from __future__ import annotations

from collections.abc import Sequence

from tensorgraph.ir import functions as fn
from tensorgraph.ir.dims import is_static
from tensorgraph.ir.dtypes import DType
from tensorgraph.ir.node import Node
from tensorgraph.ir.shapes import Shape
from tensorgraph.ir.tensor import Tensor, emit


def zeros(like: Tensor, shape: Shape | None = None, dtype: DType | None = None) -> Tensor:
    """A `full` of zeros in `like`'s graph, of `like`'s shape and dtype unless given."""
    shape = like.shape if shape is None else tuple(shape)
    dtype = like.dtype if dtype is None else dtype
    return emit("full", [], graph=like.graph, shape=shape, value=0, dtype=dtype.name)


def unbroadcast(cotangent: Tensor, shape: Shape) -> Tensor:
    """`cotangent` (of a broadcast result) summed back to `shape`, the operand's shape:
    over the leading axes the operand lacks and the axes where it has extent 1."""
    shape = tuple(shape)
    if cotangent.shape == shape:
        return cotangent
    lead = cotangent.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + k for k, d in enumerate(shape) if d == 1 and cotangent.shape[lead + k] != 1
    )
    summed = fn.sum(cotangent, axes, keepdims=False) if axes else cotangent
    return summed if summed.shape == shape else fn.reshape(summed, shape)


def extent_operand(like: Tensor, extent: object, dtype: DType | None = None) -> object:
    """`extent` (an int, or an expression of `tg.Dim`s) as an operand of arithmetic with
    `like`: the int itself when static, else a 0-d tensor of `dtype` (like's unless
    given) holding its value at run time (an `arange(extent, extent + 1)`). The two give
    the same value in the same dtype, so a rule using it computes bit for bit alike on a
    symbolic graph and on the static graph at any length."""
    if is_static(extent):
        return int(extent)
    dtype = like.dtype if dtype is None else dtype
    value = emit(
        "arange", [], graph=like.graph, start=extent, stop=extent + 1, step=1, dtype=dtype.name
    )
    return fn.reshape(value, ())


def positions(like: Tensor, count: object, dtype: str = "int32") -> Tensor:
    """arange(count) in `like`'s graph (count an int or an expression of Dims)."""
    return emit("arange", [], graph=like.graph, start=0, stop=count, step=1, dtype=dtype)


def kept(shape: Shape, axes: Sequence[int]) -> Shape:
    """`shape` with every axis of `axes` set to 1 (a keepdims reduction's shape)."""
    return tuple(1 if k in axes else d for k, d in enumerate(shape))


def cast_to(x: Tensor, dtype: DType) -> Tensor:
    """`x` in `dtype` (itself when it has it already: no node)."""
    return x if x.dtype == dtype else fn.astype(x, dtype)


def as_operand(cotangent: Tensor, operand: Tensor) -> Tensor:
    """`cotangent` unbroadcast to `operand`'s shape and cast to its dtype."""
    return cast_to(unbroadcast(cotangent, operand.shape), operand.dtype)


def no_gradient(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list[None]:
    """The rule of a piecewise-constant float op (floor, sign, ...): zero everywhere it is
    defined, as in JAX and MLX, so no cotangent flows through it."""
    return [None] * len(inputs)
