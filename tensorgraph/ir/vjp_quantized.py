"""Vector-Jacobian rules of the quantized ops (`ir.quantized`), registered on the ops in
`OPS` on import: what lets a float model (a LoRA adapter, any float params) train on
top of a frozen quantized base, as mlx-lm's QLoRA does.

- quantized_matmul(x, w, scales[, biases], transpose): x's cotangent is g times the
  dequantized weight the other way round, which is itself a quantized_matmul with
  `transpose` flipped (MLX's own rule: the float weight never exists), summed back over
  the batch axes x was broadcast along;
- dequantize and the weight side of quantized_matmul: W = code * scale + bias per group
  of `group_size` values along the last axis, so with dW the cotangent of the
  dequantized weight, a scale's cotangent is the sum over its group of dW * code and a
  bias's the sum of dW (affine mode, whose scales and biases are floats). The packed
  codes are integers and get none; the floating modes' uint8 scales neither.

The codes, scales and biases of a quantized *param* are frozen: `value_and_grad` never
differentiates them by default and names them as an error when `wrt` asks
(`autodiff.reverse`). The scale and bias rules serve float values computed or fed at
run time that a graph dequantizes.
"""

from __future__ import annotations

from collections.abc import Sequence

from tensorgraph.ir import functions as fn
from tensorgraph.ir.node import Node
from tensorgraph.ir.ops import register_vjp
from tensorgraph.ir.quantized import dequantize, quantized_matmul
from tensorgraph.ir.tensor import Tensor, emit
from tensorgraph.ir.vjp_support import as_operand, unbroadcast

QUANTIZED_OPS = ("dequantize", "quantized_matmul")


def _options(node: Node) -> dict[str, object]:
    return {k: node.attr(k) for k in ("group_size", "bits", "mode")}


def _weight_parts(node: Node, weight: Sequence[Tensor], dw: Tensor) -> list:
    """The cotangents of (w, scales[, biases]) given dw, the dequantized weight's."""
    w, scales, *rest = weight
    if not scales.dtype.is_float:  # floating modes: uint8 exponents, no gradient
        return [None] * len(weight)
    group = node.attr("group_size")
    groups = (*dw.shape[:-1], dw.shape[-1] // group, group)
    ones = emit("full", [], graph=w.graph, shape=scales.shape, value=1, dtype=scales.dtype.name)
    nothing = emit("full", [], graph=w.graph, shape=scales.shape, value=0, dtype=scales.dtype.name)
    codes = dequantize(w, ones, nothing, **_options(node))  # code * 1 + 0: the codes as floats
    by_group = fn.reshape(fn.astype(dw, scales.dtype), groups)
    last = len(groups) - 1
    d_scales = fn.sum(by_group * fn.reshape(codes, groups), last)
    return [None, d_scales, *([fn.sum(by_group, last)] if rest else [])]


def _dequantize(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list:
    return _weight_parts(node, inputs, g)


def _quantized_matmul(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list:
    x, *weight = inputs
    transpose = node.attr("transpose")
    w, scales, *rest = weight
    gx = quantized_matmul(g, w, scales, rest[0] if rest else None, not transpose, **_options(node))
    result = [as_operand(gx, x)]
    if not scales.dtype.is_float:
        return result + [None] * len(weight)
    # dW of out = x @ W.T is g^T x (of out = x @ W: x^T g), summed over every batch axis
    # the weight does not have: rows of x flattened when the weight is one matrix.
    (*batch, rows, cols) = (*w.shape[:-1], w.shape[-1] * 32 // node.attr("bits"))
    if not batch:
        xs, gs = fn.reshape(x, (-1, x.shape[-1])), fn.reshape(g, (-1, g.shape[-1]))
    else:
        xs, gs = x, g
    xs = fn.astype(xs, scales.dtype)
    gs = fn.astype(gs, scales.dtype)
    if transpose:
        dw = fn.matmul(fn.swapaxes(gs, -1, -2), xs)
    else:
        dw = fn.matmul(fn.swapaxes(xs, -1, -2), gs)
    dw = unbroadcast(dw, (*batch, rows, cols))
    return result + _weight_parts(node, weight, dw)


register_vjp("dequantize", _dequantize)
register_vjp("quantized_matmul", _quantized_matmul)
