"""Quantized weights in NumPy, laid out exactly as MLX lays them out (`mx.quantize`).

A weight `w` of shape (..., K) is quantized along its last axis in groups of
`group_size` values; the result is `(packed, scales, biases)`:

- `packed`: uint32 of shape (..., K * bits / 32), the codes as one little-endian bit
  stream per row (code j of a row at bits [j * bits, (j + 1) * bits)), which is how MLX
  packs every width: 32 / bits codes per word for 2, 4 and 8 bits, 8 codes per 3 or 5
  bytes for 3 and 5 bits, 4 codes per 3 bytes for 6 bits;
- `scales`, `biases`: w's dtype, shape (..., K / group_size) ("affine" mode): a value
  is `code * scale + bias`;
- the floating modes have no biases and uint8 scales: "mxfp4" (4-bit E2M1 codes,
  group 32, a power-of-two E8M0 scale), "nvfp4" (E2M1 codes, group 16, an E4M3 scale)
  and "mxfp8" (E4M3 codes, group 32, an E8M0 scale).

Invariant (tested bit for bit against MLX on the CPU): `quantize` gives the bytes
`mx.quantize` gives, and `dequantize` the values `mx.dequantize` gives, for every mode,
width and group size MLX accepts. Both are float32 arithmetic as MLX's CPU kernel does
it, step by step, so a reduced-precision weight's scales are rounded once at the end.
"""

from __future__ import annotations

from collections.abc import Sequence

import ml_dtypes
import numpy as np
from attrs import frozen

from tensorgraph.errors import ShapeError
from tensorgraph.ir.node import Node
from tensorgraph.ir.quantized import check_quantization
from tensorgraph.runtime.kernels import KERNELS

# the E2M1 values of the 4-bit float codes 0..15 (code 8 is -0.0)
FP4_VALUES = np.array(
    [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], np.float32
)
FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


@frozen
class QuantSpec:
    """How a weight is quantized: `mode`, `bits`, `group_size` (see the module doc)."""

    mode: str = "affine"
    bits: int = 4
    group_size: int = 64

    @property
    def has_biases(self) -> bool:
        return self.mode == "affine"

    def packed_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return (*shape[:-1], shape[-1] * self.bits // 32)

    def scales_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return (*shape[:-1], shape[-1] // self.group_size)


def check_spec(mode: str, bits: int, group_size: int) -> QuantSpec:
    """The QuantSpec of (`mode`, `bits`, `group_size`), or a ShapeError naming the value
    MLX does not accept and what it accepts."""
    check_quantization(mode, bits, group_size)
    return QuantSpec(mode, bits, group_size)


def unquantizable(shape: tuple[int, ...], dtype: np.dtype, spec: QuantSpec) -> str | None:
    """Why a weight of `shape` and `dtype` cannot be quantized under `spec` (None when
    it can): not a float, fewer than 2 axes, or a last axis the group (for nvfp4: 32)
    does not divide."""
    if np.dtype(dtype) not in FLOAT_DTYPES:
        return f"dtype {np.dtype(dtype).name} is not a float"
    if len(shape) < 2:
        return f"shape {shape} has fewer than 2 axes"
    if shape[-1] % spec.group_size:
        return f"last axis {shape[-1]} is not a multiple of the group size {spec.group_size}"
    if spec.mode == "nvfp4" and shape[-1] % 32:
        # MLX packs E2M1 codes 32 at a time (4 words of 8), whatever the group
        return f"last axis {shape[-1]} is not a multiple of 32 (nvfp4 packs 32 codes at a time)"
    return None


def quantize(w: np.ndarray, spec: QuantSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(packed, scales, biases or None) of `w` under `spec`, as `mx.quantize` gives them."""
    reason = unquantizable(w.shape, w.dtype, spec)
    if reason is not None:
        raise ShapeError(f"cannot quantize a weight of shape {w.shape}: {reason}")
    groups = np.asarray(w).reshape(-1, spec.group_size)
    if spec.mode == "affine":
        codes, scales, biases = _affine_codes(groups.astype(np.float32), spec.bits)
        scales, biases = scales.astype(w.dtype), biases.astype(w.dtype)
    else:
        codes, scales = _float_codes(groups, spec)
        biases = None
    packed = _pack(codes.reshape(w.shape), spec.bits)
    shape = spec.scales_shape(w.shape)
    return packed, scales.reshape(shape), None if biases is None else biases.reshape(shape)


def dequantize(
    packed: np.ndarray,
    scales: np.ndarray,
    biases: np.ndarray | None,
    spec: QuantSpec,
    dtype: np.dtype | None = None,
) -> np.ndarray:
    """The weight that (`packed`, `scales`, `biases`) stand for, as `mx.dequantize`
    gives it: in the scales' dtype (affine) or `dtype` (floating modes, float32 by
    default)."""
    k = packed.shape[-1] * 32 // spec.bits
    codes = _unpack(packed, spec.bits, k).reshape(-1, spec.group_size)
    if spec.mode == "affine":
        out = scales.dtype
        values = codes.astype(out) * scales.reshape(-1, 1) + biases.reshape(-1, 1)
        return values.astype(out).reshape(*packed.shape[:-1], k)
    out = np.dtype(dtype or np.float32)
    if spec.bits == 4:
        values = FP4_VALUES[codes].astype(out)
    else:
        values = codes.astype(np.uint8).view(ml_dtypes.float8_e4m3fn).astype(out)
    if spec.mode == "nvfp4":
        factors = scales.reshape(-1, 1).view(ml_dtypes.float8_e4m3fn).astype(out)
    else:
        exponents = scales.reshape(-1, 1).astype(out) - np.asarray(127, out)
        factors = np.power(np.asarray(2, out), exponents).astype(out)
    return (values * factors).astype(out).reshape(*packed.shape[:-1], k)


# ---------------------------------------------------------------- codes


def _affine_codes(groups: np.ndarray, bits: int) -> tuple[np.ndarray, ...]:
    """MLX's CPU affine quantizer (backend/cpu/quantized.cpp), in float32: the scale
    spans the group's range, signed towards the edge of larger magnitude, and adjusted
    so that the edge is exactly representable (`bias` = the edge, code 0)."""
    f32 = np.float32
    levels = f32((1 << bits) - 1)
    w_max, w_min = groups.max(axis=1), groups.min(axis=1)
    toward_min = np.abs(w_min) > np.abs(w_max)
    scale = np.maximum((w_max - w_min) / levels, f32(1e-7))
    scale = np.where(toward_min, scale, -scale)
    edge = np.where(toward_min, w_min, w_max)
    with np.errstate(divide="ignore", invalid="ignore"):
        q0 = np.rint(edge / scale)
        nonzero = q0 != 0
        scale = np.where(nonzero, edge / np.where(nonzero, q0, f32(1)), scale).astype(f32)
    bias = np.where(nonzero, edge, f32(0)).astype(f32)
    codes = np.rint((groups - bias[:, None]) / scale[:, None])
    codes = np.clip(codes, f32(0), levels).astype(np.uint32)
    return codes, scale, bias


def _float_codes(groups: np.ndarray, spec: QuantSpec) -> tuple[np.ndarray, np.ndarray]:
    """MLX's floating-mode quantizer (its op-graph fallback, which the CPU runs), in the
    weight's dtype: E2M1 codes by nearest value (the first of a tie) or E4M3 codes,
    against an E8M0 (mx: 2 ** ceil(log2(largest / max code)), as MLX 0.32 rounds it) or
    E4M3 (nv) scale of the group's largest magnitude."""
    dtype = groups.dtype
    largest = np.abs(groups).max(axis=1, keepdims=True)
    scales = (largest / np.asarray(6.0 if spec.bits == 4 else 448.0, dtype)).astype(dtype)
    if spec.mode == "nvfp4":
        scale_codes = scales.astype(np.float32).astype(ml_dtypes.float8_e4m3fn)
        factor = scale_codes.astype(dtype)
        # a scale below E4M3's smallest step is 0: the group's codes come from w / 0,
        # whose distances are inf or NaN, so every code is 0, as in MLX
        with np.errstate(divide="ignore", invalid="ignore"):
            scaled = (groups / factor).astype(dtype)
        scale_bytes = scale_codes.view(np.uint8)
    else:
        with np.errstate(divide="ignore"):
            exponent = np.where(scales == 0, 0, np.ceil(np.log2(scales.astype(np.float32))))
        exponent = exponent.astype(np.int32)
        factor = np.power(np.asarray(2.0, dtype), exponent.astype(dtype)).astype(dtype)
        scaled = (groups / factor).astype(dtype)
        scale_bytes = (exponent + 127).astype(np.uint8)
    if spec.bits == 4:
        with np.errstate(invalid="ignore"):
            distance = np.abs(scaled[..., None] - FP4_VALUES.astype(dtype))
        codes = distance.argmin(axis=-1).astype(np.uint32)
    else:
        codes = scaled.astype(np.float32).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
        codes = codes.astype(np.uint32)
    return codes, scale_bytes


# ---------------------------------------------------------------- bit streams


def _pack(codes: np.ndarray, bits: int) -> np.ndarray:
    """Each row of `codes` (< 2**bits) as one little-endian bit stream, in uint32 words."""
    rows = codes.reshape(-1, codes.shape[-1]).astype(np.uint8)
    stream = np.unpackbits(rows[..., None], axis=-1, count=bits, bitorder="little")
    packed = np.packbits(stream.reshape(rows.shape[0], -1), axis=-1, bitorder="little")
    return packed.view("<u4").astype(np.uint32).reshape(*codes.shape[:-1], -1)


def _unpack(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    """The `count` codes of each row of `packed` (the inverse of `_pack`)."""
    rows = np.ascontiguousarray(packed.reshape(-1, packed.shape[-1]).astype("<u4"))
    stream = np.unpackbits(rows.view(np.uint8), axis=-1, bitorder="little")
    weights = (1 << np.arange(bits, dtype=np.uint32)).astype(np.uint32)
    codes = (stream.reshape(rows.shape[0], count, bits) * weights).sum(axis=-1)
    return codes.astype(np.uint32).reshape(*packed.shape[:-1], count)


# ---------------------------------------------------------------- the IR's kernels


def spec_of(node: Node) -> QuantSpec:
    """The QuantSpec of a `quantize`, `dequantize` or `quantized_matmul` node's
    attributes."""
    return QuantSpec(node.attr("mode"), node.attr("bits"), node.attr("group_size"))


def _dequantize(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    w, scales, *biases = args
    return dequantize(
        w, scales, biases[0] if biases else None, spec_of(node), node.dtype.to_numpy()
    )


def _quantized_matmul(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    """x @ W.T (or x @ W) in float32, W dequantized exactly (a stacked W broadcasts as
    in np.matmul); rounded once by `evaluate`."""
    x, w, scales, *biases = args
    weight = dequantize(w, scales, biases[0] if biases else None, spec_of(node), x.dtype)
    weight = weight.astype(np.float32)
    if node.attr("transpose"):
        weight = np.swapaxes(weight, -1, -2)
    return np.matmul(x.astype(np.float32), weight)


def _quantize(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    """The node's part of `quantize(x)`: MLX's bytes, x's float dtype kept throughout
    (no element, no part: an empty x gives empty parts)."""
    if args[0].size == 0:
        return np.zeros(node.shape, node.dtype.to_numpy())
    parts = quantize(args[0], spec_of(node))
    return parts[("codes", "scales", "biases").index(node.attr("part"))]


KERNELS.update(
    {"dequantize": _dequantize, "quantized_matmul": _quantized_matmul, "quantize": _quantize}
)
