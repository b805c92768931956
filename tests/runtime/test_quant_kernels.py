"""The NumPy quantizer against MLX's: the same packed bytes, scales and biases as
`mx.quantize`, and the same values as `mx.dequantize`, for every mode, width, group
size and float dtype MLX accepts (MLX is the independent oracle here)."""

from __future__ import annotations

import ml_dtypes
import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tensorgraph.codegen_mlx.arrays import to_mx, to_numpy
from tensorgraph.errors import ShapeError
from tensorgraph.ir.quantized import MODES
from tensorgraph.runtime.quant_kernels import (
    QuantSpec,
    _pack,
    _unpack,
    check_spec,
    dequantize,
    quantize,
    unquantizable,
)

SPECS = [
    QuantSpec(mode, bits, group)
    for mode, (widths, groups) in MODES.items()
    for bits in widths
    for group in groups
]
DTYPES = (np.float32, np.float16, ml_dtypes.bfloat16)


@st.composite
def weights(draw: st.DrawFn) -> tuple[np.ndarray, QuantSpec]:
    """A spec and a weight it can quantize: rows of random groups at random magnitudes,
    some groups constant or zero (the quantizer's edge cases)."""
    spec = draw(st.sampled_from(SPECS))
    dtype = draw(st.sampled_from(DTYPES))
    rows, groups = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    if spec.mode == "nvfp4":
        groups *= 2  # nvfp4 rows hold whole 32-code packs
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    magnitude = 10.0 ** rng.uniform(-4, 3, (rows, groups, 1))
    w = rng.standard_normal((rows, groups, spec.group_size)) * magnitude
    for row, group in draw(st.lists(st.tuples(st.integers(0, rows - 1), st.integers(0, 2)))):
        w[row, group % groups] = draw(st.sampled_from([0.0, 1.5, -3.0]))
    return w.reshape(rows, -1).astype(dtype), spec


def _bytes(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).tobytes()


@given(weights())
def test_quantize_gives_mlx_bytes_and_dequantize_its_values(case: tuple) -> None:
    w, spec = case
    packed, scales, biases = quantize(w, spec)
    theirs = mx.quantize(to_mx(w), group_size=spec.group_size, bits=spec.bits, mode=spec.mode)
    assert packed.shape == tuple(theirs[0].shape) and packed.dtype == np.uint32
    assert _bytes(packed) == _bytes(to_numpy(theirs[0]))
    assert scales.dtype == to_numpy(theirs[1]).dtype
    assert _bytes(scales) == _bytes(to_numpy(theirs[1]))
    options = {"group_size": spec.group_size, "bits": spec.bits, "mode": spec.mode}
    if spec.has_biases:
        assert _bytes(biases) == _bytes(to_numpy(theirs[2]))
        ours = dequantize(packed, scales, biases, spec)
        expected = to_numpy(mx.dequantize(*theirs, **options))
    else:
        assert biases is None and len(theirs) == 2
        ours = dequantize(packed, scales, None, spec, dtype=w.dtype)
        expected = to_numpy(mx.dequantize(*theirs, dtype=to_mx(w).dtype, **options))
    assert ours.shape == w.shape and ours.dtype == expected.dtype
    assert _bytes(ours) == _bytes(expected)


@given(st.sampled_from([2, 3, 4, 5, 6, 8]), st.integers(1, 3), st.integers(0, 2**32 - 1))
def test_unpack_inverts_pack(bits: int, words: int, seed: int) -> None:
    count = 32 * words  # a whole number of words at every width
    codes = np.random.default_rng(seed).integers(0, 1 << bits, (2, count)).astype(np.uint32)
    packed = _pack(codes, bits)
    assert packed.shape == (2, count * bits // 32)
    assert np.array_equal(_unpack(packed, bits, count), codes)


def test_affine_edge_is_exact() -> None:
    """The affine scale is adjusted so that the group's edge of larger magnitude is a
    code exactly (MLX's rule): a group of -3 and 1s dequantizes -3 to -3.0."""
    w = np.ones((1, 32), np.float32)
    w[0, 0] = -3.0
    spec = QuantSpec("affine", 4, 32)
    assert dequantize(*quantize(w, spec), spec)[0, 0] == -3.0


@pytest.mark.parametrize(
    ("mode", "bits", "group", "match"),
    [
        ("int4", 4, 64, "unknown quantization mode 'int4'"),
        ("affine", 7, 64, "bits .* not 7"),
        ("affine", 4, 48, "group sizes .* not 48"),
        ("mxfp4", 4, 64, "group sizes \\(32,\\), not 64"),
        ("nvfp4", 8, 16, "bits \\(4,\\), not 8"),
    ],
)
def test_bad_spec_is_named(mode: str, bits: int, group: int, match: str) -> None:
    with pytest.raises(ShapeError, match=match):
        check_spec(mode, bits, group)


def test_what_cannot_be_quantized_says_why() -> None:
    spec = QuantSpec("affine", 4, 64)
    assert unquantizable((8, 64), np.float32, spec) is None
    assert "not a multiple of the group size 64" in unquantizable((8, 96), np.float32, spec)
    assert "multiple of 32" in unquantizable((8, 48), np.float32, QuantSpec("nvfp4", 4, 16))
    assert "fewer than 2 axes" in unquantizable((64,), np.float32, spec)
    assert "int32 is not a float" in unquantizable((8, 64), np.int32, spec)
    with pytest.raises(ShapeError, match=r"shape \(8, 96\).*multiple of the group size"):
        quantize(np.zeros((8, 96), np.float32), spec)
