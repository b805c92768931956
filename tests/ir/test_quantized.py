"""The quantized ops (ir.quantized): the op table's cases against an independent
decoder (each row's codes read from a Python integer of its bytes, bit by bit) and, for
the run-time `quantize`, against MLX's own `mx.quantize`; the shapes and dtypes out, and
every operand that disagrees named in a ShapeError or DTypeError."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

import tensorgraph as tg
from tensorgraph.errors import DTypeError, ShapeError
from tensorgraph.runtime.quant_kernels import QuantSpec, quantize
from tests.ir.op_cases import BF16, Case, case_adder, check_case

CASES: list[Case] = []  # the op table's cases (tests/ir/test_ops.py runs them all)
case = case_adder(CASES)


def decode_affine(
    packed: np.ndarray, scales: np.ndarray, biases: np.ndarray, bits: int, rounded=None
):
    """float64 values of an affine weight, decoded one code at a time; with `rounded`
    (a half-precision dtype), code * scale and then the sum with the bias are each
    rounded to it, as MLX computes a half-precision weight."""
    rows, k = packed.shape[0], packed.shape[1] * 32 // bits
    group = k // scales.shape[1]
    out = np.zeros((rows, k))
    for r in range(rows):
        stream = int.from_bytes(packed[r].astype("<u4").tobytes(), "little")
        for j in range(k):
            code = (stream >> (j * bits)) & ((1 << bits) - 1)
            scaled = code * float(scales[r, j // group])
            if rounded is not None:
                scaled = float(np.asarray(scaled).astype(rounded))
            out[r, j] = scaled + float(biases[r, j // group])
    return out if rounded is None else out.astype(rounded).astype(np.float64)


def _affine_case(bits: int, group: int, dtype: np.dtype, seed: int) -> tuple:
    spec = QuantSpec("affine", bits, group)
    rng = np.random.default_rng(seed)
    parts = quantize(rng.standard_normal((3, 2 * group)).astype(dtype), spec)
    return parts, spec


for _bits, _group in ((2, 32), (3, 64), (5, 32), (6, 128), (8, 64)):
    (_w, _s, _b), _ = _affine_case(_bits, _group, np.float32, _bits)
    case(
        "dequantize",
        f"affine{_bits}-g{_group}",
        [_w, _s, _b],
        lambda w, s, b, bits=_bits, group=_group: tg.dequantize(w, s, b, group, bits),
        tg.float32,
        lambda w, s, b, bits=_bits: decode_affine(w, s, b, bits),
    )
(_w, _s, _b), _ = _affine_case(4, 32, BF16, 11)
_x = np.random.default_rng(12).standard_normal((2, 4, 64)).astype(BF16)
case(
    "quantized_matmul",
    "affine4-bf16",
    [_x, _w, _s, _b],
    lambda x, w, s, b: tg.quantized_matmul(x, w, s, b, True, 32, 4),
    tg.bfloat16,
    lambda x, w, s, b: x.astype(np.float64) @ decode_affine(w, s, b, 4, BF16).T,
)
(_w, _s, _b), _ = _affine_case(8, 32, np.float32, 13)
_x = np.random.default_rng(14).standard_normal((5, 3)).astype(np.float32)
case(
    "quantized_matmul",
    "affine8-not-transposed",
    [_x, _w, _s, _b],
    lambda x, w, s, b: tg.quantized_matmul(x, w, s, b, False, 32, 8),
    tg.float32,
    lambda x, w, s, b: x.astype(np.float64) @ decode_affine(w, s, b, 8),
    rtol=1e-5,
    atol=1e-5,
)


_stack = [_affine_case(4, 32, np.float32, 15 + i)[0] for i in range(2)]
_w, _s, _b = (np.stack(parts) for parts in zip(*_stack, strict=True))
_x = np.random.default_rng(16).standard_normal((3, 1, 5, 64)).astype(np.float32)
case(
    "quantized_matmul",
    "affine4-stacked",
    [_x, _w, _s, _b],
    lambda x, w, s, b: tg.quantized_matmul(x, w, s, b, True, 32, 4),
    tg.float32,
    lambda x, w, s, b: (
        x.astype(np.float64) @ np.stack([decode_affine(*p, 4).T for p in zip(w, s, b, strict=True)])
    ),
)
_x = np.random.default_rng(17).standard_normal((2, 4, 3)).astype(np.float32)
case(
    "quantized_matmul",
    "affine4-stacked-not-transposed",
    [_x, _w, _s, _b],
    lambda x, w, s, b: tg.quantized_matmul(x, w, s, b, False, 32, 4),
    tg.float32,
    lambda x, w, s, b: (
        x.astype(np.float64) @ np.stack([decode_affine(*p, 4) for p in zip(w, s, b, strict=True)])
    ),
)


def _mlx_part(x: np.ndarray, part: int, group: int, bits: int, mode: str = "affine"):
    """Part `part` of MLX's own quantization of x: the oracle of the `quantize` cases."""
    return np.array(mx.quantize(mx.array(x), group_size=group, bits=bits, mode=mode)[part])


_FLOATS = {np.float32: tg.float32, np.float16: tg.float16}
for _part, _name in enumerate(("codes", "scales", "biases")):
    for _bits, _group, _dtype in ((4, 64, np.float32), (8, 32, np.float16), (3, 128, np.float32)):
        _x = np.random.default_rng(_bits + _part).standard_normal((2, 3, 128)).astype(_dtype)
        case(
            "quantize",
            f"affine{_bits}-g{_group}-{_name}",
            [_x],
            lambda x, part=_part, bits=_bits, group=_group: tg.quantize_rows(x, group, bits)[part],
            tg.uint32 if _name == "codes" else _FLOATS[_dtype],
            lambda x, part=_part, bits=_bits, group=_group: _mlx_part(x, part, group, bits),
            rtol=0,
            atol=0,
        )
_x = np.random.default_rng(18).standard_normal((4, 64)).astype(np.float32)
case(
    "quantize",
    "mxfp4-scales",
    [_x],
    lambda x: tg.quantize_rows(x, 32, 4, "mxfp4")[1],
    tg.uint8,
    lambda x: _mlx_part(x, 1, 32, 4, "mxfp4"),
)


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_case(c: Case) -> None:
    check_case(c)


def _weight(g: tg.Graph, rows: int = 8, k: int = 128, bits: int = 4, group: int = 64):
    return (
        g.param("w", (rows, k * bits // 32), tg.uint32),
        g.param("s", (rows, k // group), tg.float32),
        g.param("b", (rows, k // group), tg.float32),
    )


def test_shapes_and_dtypes_follow_mlx() -> None:
    g = tg.Graph("q")
    w, s, b = _weight(g, rows=8, k=128, bits=3, group=32)
    x = g.input("x", (2, 5, 128), tg.float32)
    y = tg.quantized_matmul(x, w, s, b, bits=3, group_size=32)
    assert (y.shape, y.dtype) == ((2, 5, 8), tg.float32)
    z = tg.quantized_matmul(g.input("x2", (3, 8), tg.float32), w, s, b, False, 32, 3)
    assert z.shape == (3, 128)
    full = tg.dequantize(w, s, b, group_size=32, bits=3)
    assert (full.shape, full.dtype) == ((8, 128), tg.float32)
    rows = tg.quantized_take(w, s, b, g.input("ids", (2, 3), tg.int32), 32, 3)
    assert rows.shape == (2, 3, 128)
    fp = g.param("fw", (4, 64 * 4 // 32), tg.uint32)
    fs = g.param("fs", (4, 2), tg.uint8)
    half = tg.dequantize(fp, fs, None, 32, 4, "mxfp4", dtype=tg.bfloat16)
    assert (half.shape, half.dtype) == ((4, 64), tg.bfloat16)


def _stacked(g: tg.Graph, *parts: tg.Tensor) -> list[tg.Tensor]:
    """Params w3, s3, b3: two of each of the weight's parts, stacked."""
    names = ("w3", "s3", "b3")
    return [g.param(n, (2, *t.shape), t.dtype) for n, t in zip(names, parts, strict=True)]


@pytest.mark.parametrize(
    ("build", "error", "match"),
    [
        (lambda g, w, s, b: tg.dequantize(w, s, b, bits=7), ShapeError, "bits .* not 7"),
        (lambda g, w, s, b: tg.dequantize(w, s, b, group_size=16), ShapeError, "not 16"),
        (lambda g, w, s, b: tg.dequantize(w, s, b, mode="int4"), ShapeError, "'int4'"),
        (lambda g, w, s, b: tg.dequantize(w, s), ShapeError, "affine mode takes biases"),
        (
            lambda g, w, s, b: tg.dequantize(w, s, b, 32, 4, "mxfp4"),
            ShapeError,
            "mxfp4 has no biases",
        ),
        (lambda g, w, s, b: tg.dequantize(w, s, b, bits=8), ShapeError, r"s \(8, 2\) must"),
        (lambda g, w, s, b: tg.dequantize(s, s, b), DTypeError, "packed weight s must be uint32"),
        (
            lambda g, w, s, b: tg.dequantize(w, s, g.param("b16", (8, 2), tg.float16)),
            DTypeError,
            "share a float dtype",
        ),
        (
            lambda g, w, s, b: tg.quantized_matmul(g.input("x", (3, 64)), w, s, b),
            ShapeError,
            r"inner dims differ: x \(3, 64\)",
        ),
        (
            lambda g, w, s, b: tg.quantized_matmul(g.input("x", (3, 128), tg.int32), w, s, b),
            DTypeError,
            "float x",
        ),
        (
            lambda g, w, s, b: tg.quantized_matmul(g.input("x", (3, 16)), w[0], s[0], b[0]),
            ShapeError,
            "packed weight of 2 or more axes",
        ),
        (
            lambda g, w, s, b: tg.quantized_matmul(g.input("x", (128,)), *_stacked(g, w, s, b)),
            ShapeError,
            r"x with at least two axes with a stacked weight, not x \(128,\)",
        ),
        (
            lambda g, w, s, b: tg.quantized_matmul(
                g.input("x", (3, 5, 128)), *_stacked(g, w, s, b)
            ),
            ShapeError,
            r"shapes do not broadcast: x \(3,\), w3 \(2,\)",
        ),
        (
            lambda g, w, s, b: tg.quantize_rows(g.input("x", (4, 96)), 64, 4),
            ShapeError,
            r"last axis of x \(4, 96\) is not a multiple of 64",
        ),
        (
            lambda g, w, s, b: tg.quantize_rows(g.input("x", (4, 96)), 32, 7),
            ShapeError,
            "bits .* not 7",
        ),
        (
            lambda g, w, s, b: tg.quantize_rows(g.input("x", (64,)), 64, 4),
            ShapeError,
            r"at least two axes \(as MLX does\), not x \(64,\)",
        ),
        (
            lambda g, w, s, b: tg.quantize_rows(g.input("x", (2, 64), tg.int32), 64, 4),
            DTypeError,
            "float x but x is int32",
        ),
    ],
)
def test_disagreements_are_named(build, error: type, match: str) -> None:
    g = tg.Graph("q")
    with pytest.raises(error, match=match):
        build(g, *_weight(g))
