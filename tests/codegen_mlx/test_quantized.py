"""`quantize`, `dequantize`, `quantized_matmul` and `quantized_take` (ir.quantized) on
every backend: random graphs over every mode, width, group size and float dtype, with
weights bound at compile time or fed at run time, tied tables, both orientations,
stacked weights broadcasting against x's batch axes (attention over a quantized cache)
and zero-size batches. The arena equals the reference bit for bit; MLX's quantize and
dequantize equal it bit for bit (and `mx.quantize` called directly); MLX's product is
within the error bound of a length-K sum in x's dtype."""

from __future__ import annotations

import ml_dtypes
import mlx.core as mx
import numpy as np
from attrs import frozen
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.codegen_mlx.arrays import to_mx, to_numpy
from tensorgraph.ir.quantized import MODES
from tensorgraph.runtime.quant_kernels import QuantSpec, dequantize, quantize

SPECS = [QuantSpec(m, b, g) for m, (bs, gs) in MODES.items() for b in bs for g in gs]
FLOATS = (tg.float32, tg.bfloat16, tg.float16)


@frozen
class QuantCase:
    graph: tg.Graph
    inputs: dict
    params: dict  # run-time params (empty when bound at compile time)
    weight: np.ndarray  # the dequantized weight, (stack..., rows, packed_len)
    transpose: bool


def _eps(dtype: np.dtype) -> float:
    return float(ml_dtypes.finfo(dtype).eps)


@st.composite
def quantized_graphs(draw: st.DrawFn) -> QuantCase:
    """x (batch..., K) through a quantized projection of either orientation, and maybe
    an embedding lookup of the same table (tied), or x (batch..., M, K) through a stack
    of weights (stack..., N, K) whose axes broadcast against x's batch: random mode,
    width, group size, float dtype, batch (zero-size included), bound or run-time
    weights."""
    spec = draw(st.sampled_from(SPECS))
    dtype = draw(st.sampled_from(FLOATS))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    unit = 32 if spec.mode == "nvfp4" else spec.group_size  # nvfp4 packs 32 codes at once
    rows, packed_len = draw(st.integers(1, 5)), unit * draw(st.integers(1, 2))
    stack = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    shape = (*stack, rows, packed_len)
    parts = quantize(rng.standard_normal(shape).astype(dtype.to_numpy()), spec)
    bound = draw(st.booleans())
    options = {"group_size": spec.group_size, "bits": spec.bits, "mode": spec.mode}
    g = tg.Graph("quantized")
    names = ("w", "w.scales", "w.biases")
    tensors = [
        None if part is None else g.param(name, part.shape, part.dtype, part if bound else None)
        for name, part in zip(names, parts, strict=True)
    ]
    transpose = draw(st.booleans())
    if stack:  # x's batch axes: the stack's trailing ones (each its size or 1), then
        # when all are there maybe one more in front (zero-size included)
        mine = [draw(st.sampled_from((1, d))) for d in stack][draw(st.integers(0, len(stack))) :]
        extra = draw(st.lists(st.integers(0, 2), max_size=1)) if len(mine) == len(stack) else []
        batch = (*extra, *mine, draw(st.integers(1, 3)))
    else:
        batch = tuple(draw(st.lists(st.integers(0, 3), max_size=2)))
    inner = packed_len if transpose else rows
    x = g.input("x", (*batch, inner), dtype)
    y = tg.quantized_matmul(x, *tensors, transpose=transpose, **options)
    g.output(tg.relu(y) if draw(st.booleans()) else y)
    inputs = {"x": rng.standard_normal((*batch, inner)).astype(dtype.to_numpy())}
    if not stack and draw(st.booleans()):
        count = draw(st.integers(0, 4))
        ids = g.input("ids", (count,), tg.int32)
        g.output(tg.quantized_take(*tensors, ids, dtype=dtype, **options))
        inputs["ids"] = rng.integers(0, rows, count).astype(np.int32)
    params = {} if bound else {n: p for n, p in zip(names, parts, strict=True) if p is not None}
    weight = dequantize(*parts, spec, dtype.to_numpy())
    return QuantCase(g, inputs, params, weight, transpose)


def _product_bound(case: QuantCase, ref: np.ndarray) -> np.ndarray:
    """|MLX - reference| allowed per element of x @ W(.T): each side is a length-K sum
    whose error is at most K * eps * sum_i |x_i w_i| when accumulated in x's dtype (the
    classic recursive-summation bound; the reference accumulates in float32, tighter),
    plus one rounding of the result to x's dtype on each side."""
    x = np.abs(case.inputs["x"].astype(np.float64))
    w = np.abs(case.weight.astype(np.float64))
    magnitude = x @ (np.swapaxes(w, -1, -2) if case.transpose else w)
    eps = _eps(ref.dtype)
    return 2 * x.shape[-1] * eps * magnitude + 2 * eps * np.abs(ref.astype(np.float64))


@settings(max_examples=25)  # each example compiles MLX kernels for new shapes
@given(quantized_graphs())
def test_quantized_graphs_agree_on_every_backend(case: QuantCase) -> None:
    prog = tg.compile(case.graph)
    ref = prog.run(case.inputs, params=case.params, backend="numpy")
    arena = prog.run(case.inputs, params=case.params, backend="arena")
    for got, want in zip(arena, ref, strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.tobytes() == want.tobytes()
    product, *lookup = prog.run(case.inputs, params=case.params, backend="mlx")
    assert product.dtype == ref[0].dtype and product.shape == ref[0].shape
    gap = np.abs(product.astype(np.float64) - ref[0].astype(np.float64))
    assert (gap <= _product_bound(case, ref[0])).all()
    if lookup:  # MLX's dequantize gives the reference's values bit for bit
        assert lookup[0].dtype == ref[1].dtype and lookup[0].tobytes() == ref[1].tobytes()


@st.composite
def quantized_rows(draw: st.DrawFn) -> tuple:
    """(graph, x): x (batch..., rows, K) of a random float dtype (zero-size batches
    included) quantized at run time
    under a random spec; the graph outputs its parts and their dequantized values."""
    spec = draw(st.sampled_from(SPECS))
    dtype = draw(st.sampled_from(FLOATS))
    unit = 32 if spec.mode == "nvfp4" else spec.group_size
    shape = (*draw(st.lists(st.integers(0, 3), max_size=2)), draw(st.integers(1, 4)))
    shape = (*shape, unit * draw(st.integers(1, 2)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = (rng.standard_normal(shape) * draw(st.sampled_from((1e-3, 1.0, 100.0)))).astype(
        dtype.to_numpy()
    )
    g = tg.Graph("quantize")
    options = {"group_size": spec.group_size, "bits": spec.bits, "mode": spec.mode}
    parts = tg.quantize_rows(g.input("x", shape, dtype), **options)
    for part in parts:
        g.output(part)
    g.output(tg.dequantize(*parts, dtype=dtype, **options))
    return g, x, spec


@settings(max_examples=25)
@given(quantized_rows())
def test_run_time_quantize_is_mlx_quantize_on_every_backend(case) -> None:
    graph, x, spec = case
    prog = tg.compile(graph)
    ref = prog.run({"x": x}, backend="numpy")
    if x.size:  # MLX's own quantize cannot reduce a zero-size input in the floating modes
        options = {"group_size": spec.group_size, "bits": spec.bits, "mode": spec.mode}
        direct = mx.quantize(to_mx(x), **options)
        for got, want in zip(ref, map(to_numpy, direct), strict=False):  # MLX's bytes
            assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
    for backend in ("arena", "mlx"):
        outs = prog.run({"x": x}, backend=backend)
        for got, want in zip(outs, ref, strict=True):
            assert got.shape == want.shape and got.dtype == want.dtype
            assert got.tobytes() == want.tobytes(), backend
