"""Quantized weights in the IR: `quantize`, `dequantize` and `quantized_matmul`, MLX's ops.

A quantized weight is three tensors laid out as `mx.quantize` lays them out (see
`runtime.quant_kernels`): `w`, uint32 codes packed along the last axis (K values take
K * bits / 32 words); `scales`, one per group of `group_size` values along that axis
(the weight's float dtype in "affine" mode, uint8 exponents or E4M3 bytes in the
floating modes "mxfp4", "nvfp4", "mxfp8"); and, in affine mode only, `biases` like the
scales. A value is `code * scale + bias` (affine).

- `quantize(x, part=...)`: one part ("codes", "scales" or "biases") of `mx.quantize(x)`,
  computed at run time (a quantized KV cache quantizes each new row); the IR is SSA, so
  the three parts are three nodes of the same attributes but `part`, which
  `quantize_rows` emits together. x has at least two axes (as MLX requires), a float
  dtype, and a last axis the group divides (nvfp4: and 32); the scales and biases come
  in x's dtype (affine) and the codes as uint32;
- `dequantize(w, scales, biases)`: the float weight, of w's leading shape and K on the
  last axis, in the scales' dtype (affine) or `dtype` (floating modes);
- `quantized_matmul(x, w, scales, biases, transpose=True)`: `x @ W.T` where W is the
  dequantized (N, K) weight (MLX's convention, `nn.QuantizedLinear`'s layout), or
  `x @ W` for a (K, N) weight with `transpose=False`; x's dtype out. A packed weight
  with leading batch axes (..., N, K_packed) is a stack of such weights: x then has at
  least two axes and the batch axes broadcast as in `np.matmul` (attention over a
  quantized (batch, heads, seq, head_dim) cache);
- `quantized_take(w, scales, biases, indices)`: the rows `indices` of the dequantized
  table (an embedding lookup): takes the packed rows, then dequantizes only those, so
  the float table never exists.

Reference semantics (runtime.quant_kernels): W is dequantized exactly as MLX does it;
the product is computed in float32 and rounded once to x's dtype. Inference checks
every operand against the others and names the one that disagrees.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from tensorgraph.errors import DTypeError, ShapeError
from tensorgraph.ir.dtypes import DType, as_dtype, float32, uint8, uint32
from tensorgraph.ir.ops import AttrSpec, OpDef, Operand, register
from tensorgraph.ir.shapes import Shape, broadcast_shapes

if TYPE_CHECKING:
    from tensorgraph.ir.tensor import Tensor

# mode -> (the bits it takes, the group sizes it takes), as MLX accepts them
MODES = {
    "affine": ((2, 3, 4, 5, 6, 8), (32, 64, 128)),
    "mxfp4": ((4,), (32,)),
    "nvfp4": ((4,), (16,)),
    "mxfp8": ((8,), (32,)),
}
_QUANT = {
    "mode": AttrSpec("str", "affine"),
    "bits": AttrSpec("int", 4),
    "group_size": AttrSpec("int", 64),
    "dtype": AttrSpec("dtype", "float32"),
}


def check_quantization(mode: object, bits: object, group_size: object) -> None:
    """ShapeError naming the value unless MLX accepts (`mode`, `bits`, `group_size`)."""
    if mode not in MODES:
        raise ShapeError(f"unknown quantization mode {mode!r}; choose one of {', '.join(MODES)}")
    widths, groups = MODES[mode]
    if bits not in widths:
        raise ShapeError(f"{mode} quantization takes bits {widths}, not {bits!r}")
    if group_size not in groups:
        raise ShapeError(f"{mode} quantization takes group sizes {groups}, not {group_size!r}")


def _weight(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    """The dequantized weight's (shape, dtype) of operands (w, scales[, biases])."""
    mode, bits, group = attrs["mode"], attrs["bits"], attrs["group_size"]
    check_quantization(mode, bits, group)
    w, scales, *rest = xs
    affine = mode == "affine"
    if affine != bool(rest):
        need = "affine mode takes biases" if affine else f"{mode} has no biases"
        raise ShapeError(f"{need}: got {len(xs)} operands")
    if w.dtype.name != "uint32":
        raise DTypeError(f"packed weight {w.label} must be uint32 but is {w.dtype}")
    if not w.shape:
        raise ShapeError(f"packed weight {w} must have at least one axis")
    count = w.shape[-1] * 32 // bits
    expected = (*w.shape[:-1], count // group)
    for part in (scales, *rest):
        if part.shape != expected:
            raise ShapeError(
                f"{part.label} {part.shape} must have shape {expected} for packed weight {w} "
                f"({count} values in groups of {group})"
            )
    if affine:
        if not scales.dtype.is_float or scales.dtype != rest[0].dtype:
            raise DTypeError(
                f"affine scales and biases must share a float dtype: {scales.label} is "
                f"{scales.dtype}, {rest[0].label} {rest[0].dtype}"
            )
        out = scales.dtype
    else:
        if scales.dtype != uint8:
            raise DTypeError(f"{mode} scales {scales.label} must be uint8 but are {scales.dtype}")
        out = as_dtype(attrs["dtype"])
        if not out.is_float:
            raise DTypeError(f"dequantize gives a float dtype, not {out}")
    return (*w.shape[:-1], count), out


def infer_dequantize(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    return _weight(xs, attrs)


def infer_quantized_matmul(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    """x (..., K) with a 2-D weight: (..., N); x (..., M, K) with a stacked weight
    (..., N, K_packed): (broadcast batch, M, N); x's dtype (see the module docstring)."""
    x, *weight = xs
    if len(weight[0].shape) < 2:
        raise ShapeError(
            f"quantized_matmul takes a packed weight of 2 or more axes, not {weight[0]}"
        )
    (*batch, rows, cols), _ = _weight(weight, attrs)
    if not x.dtype.is_float:
        raise DTypeError(f"quantized_matmul needs a float x but {x.label} is {x.dtype}")
    if not x.shape or (batch and len(x.shape) < 2):
        need = "two axes with a stacked weight" if batch else "one axis"
        raise ShapeError(f"quantized_matmul needs x with at least {need}, not {x}")
    inner, outer = (cols, rows) if attrs["transpose"] else (rows, cols)
    if x.shape[-1] != inner:
        layout = f"{(*batch, rows, cols)}{'.T' if attrs['transpose'] else ''}"
        raise ShapeError(f"inner dims differ: {x} @ dequantized weight {layout}")
    if not batch:
        return (*x.shape[:-1], outer), x.dtype
    labels = (x.label, weight[0].label)
    lead = broadcast_shapes(x.shape[:-2], tuple(batch), labels=labels)
    return (*lead, x.shape[-2], outer), x.dtype


QUANTIZE_PARTS = ("codes", "scales", "biases")


def infer_quantize(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    """One part of x (..., K) quantized along its last axis (see the module docstring)."""
    (x,) = xs
    mode, bits, group, part = attrs["mode"], attrs["bits"], attrs["group_size"], attrs["part"]
    check_quantization(mode, bits, group)
    if part not in QUANTIZE_PARTS:
        raise ShapeError(f"quantize gives the part codes, scales or biases, not {part!r}")
    if part == "biases" and mode != "affine":
        raise ShapeError(f"{mode} quantization has no biases (only affine has)")
    if not x.dtype.is_float:
        raise DTypeError(f"quantize needs a float x but {x.label} is {x.dtype}")
    if len(x.shape) < 2:
        raise ShapeError(f"quantize needs x with at least two axes (as MLX does), not {x}")
    unit = 32 if mode == "nvfp4" else group  # nvfp4 packs 32 codes at a time
    if x.shape[-1] % unit:
        raise ShapeError(
            f"quantize: the last axis of {x} is not a multiple of {unit} ({mode}, group {group})"
        )
    if part == "codes":
        return (*x.shape[:-1], x.shape[-1] * bits // 32), uint32
    return (*x.shape[:-1], x.shape[-1] // group), x.dtype if mode == "affine" else uint8


register(OpDef("dequantize", 2, 3, infer_dequantize, _QUANT))
register(
    OpDef(
        "quantized_matmul",
        3,
        4,
        infer_quantized_matmul,
        {**_QUANT, "transpose": AttrSpec("bool", True)},
        category="matmul",
    )
)
register(
    OpDef(
        "quantize",
        1,
        1,
        infer_quantize,
        {
            "mode": AttrSpec("str", "affine"),
            "bits": AttrSpec("int", 4),
            "group_size": AttrSpec("int", 64),
            "part": AttrSpec("str"),
        },
    )
)


def _emit(op: str, operands: list, **attrs: object) -> Tensor:
    # The registry core imports this module to complete `OPS`, and `ir.tensor` needs the
    # graph, which needs the registry: so the handle plumbing is imported on use.
    from tensorgraph.ir.tensor import emit

    return emit(op, [t for t in operands if t is not None], **attrs)


def quantize_rows(
    x: Tensor, group_size: int = 64, bits: int = 4, mode: str = "affine"
) -> tuple[Tensor, ...]:
    """(codes, scales, biases) of x quantized along its last axis at run time, as
    `mx.quantize(x, group_size, bits, mode)` gives them ((codes, scales) in the floating
    modes): one `quantize` node per part (`tg.quantize` is the pass that quantizes
    weights)."""
    parts = QUANTIZE_PARTS if mode == "affine" else QUANTIZE_PARTS[:2]
    options = {"group_size": group_size, "bits": bits, "mode": mode}
    return tuple(_emit("quantize", [x], part=part, **options) for part in parts)


def dequantize(
    w: Tensor,
    scales: Tensor,
    biases: Tensor | None = None,
    group_size: int = 64,
    bits: int = 4,
    mode: str = "affine",
    dtype: object = float32,
) -> Tensor:
    """The float weight (`mx.dequantize`'s arguments; `dtype` is the result's for the
    floating modes, affine gives the scales' dtype)."""
    return _emit(
        "dequantize",
        [w, scales, biases],
        group_size=group_size,
        bits=bits,
        mode=mode,
        dtype=as_dtype(dtype).name,
    )


def quantized_matmul(
    x: Tensor,
    w: Tensor,
    scales: Tensor,
    biases: Tensor | None = None,
    transpose: bool = True,
    group_size: int = 64,
    bits: int = 4,
    mode: str = "affine",
) -> Tensor:
    """`x @ dequantize(w).T` (`transpose=True`, MLX's default) or `x @ dequantize(w)`,
    in x's dtype (`mx.quantized_matmul`'s arguments; the floating modes dequantize to
    x's dtype, the node's `dtype` attribute)."""
    return _emit(
        "quantized_matmul",
        [x, w, scales, biases],
        transpose=bool(transpose),
        group_size=group_size,
        bits=bits,
        mode=mode,
        dtype=x.dtype.name,
    )


def quantized_take(
    w: Tensor,
    scales: Tensor,
    biases: Tensor | None,
    indices: Tensor,
    group_size: int = 64,
    bits: int = 4,
    mode: str = "affine",
    dtype: object = float32,
) -> Tensor:
    """Rows `indices` (any shape, integers) of the dequantized table: the packed rows,
    scales and biases are taken first, so only the rows read are dequantized."""
    from tensorgraph.ir.builder import take

    parts = [None if t is None else take(t, indices, axis=0) for t in (w, scales, biases)]
    return dequantize(*parts, group_size=group_size, bits=bits, mode=mode, dtype=dtype)
