"""Every primitive op, registry-wide: one reference kernel each, every non-boundary op
exercised by the case tables of tests/ir/test_ops_*.py (inference and reference numerics
against independent NumPy expressions, never the kernels under test), and half precision
computed in float32 and rounded once, op by op."""

from __future__ import annotations

import numpy as np
import pytest

import tensorgraph as tg
from tensorgraph.ir.ops import OPS
from tensorgraph.runtime.kernels import KERNELS
from tests.ir import (
    test_conv_grad,
    test_elementwise_fused,
    test_experts,
    test_fused,
    test_ops_conv_pool,
    test_ops_elementwise,
    test_ops_generators,
    test_ops_layout,
    test_ops_math,
    test_ops_reductions,
    test_ops_scans,
    test_ops_windows,
    test_pool_grad,
    test_quantized,
    test_scatter,
    test_updates,
)
from tests.ir.op_cases import (
    BF16,
    F16,
    Arrays,
    build_and_run,
    erf_f64,
    method,
    naive_conv2d,
    softmax_f64,
)

PRIMITIVES = sorted(op for op, opdef in OPS.items() if not opdef.boundary)
TABLES = (
    test_ops_elementwise,
    test_ops_reductions,
    test_ops_layout,
    test_ops_generators,
    test_ops_conv_pool,
    test_ops_math,
    test_ops_scans,
    test_ops_windows,
    test_fused,
    test_updates,
    test_quantized,
    test_experts,
    test_scatter,
    test_pool_grad,
    test_conv_grad,
    test_elementwise_fused,
)
CASES = [c for table in TABLES for c in table.CASES]
rand = Arrays(seed=7).rand


def test_every_op_has_exactly_one_reference_kernel() -> None:
    assert sorted(KERNELS) == PRIMITIVES


def test_the_case_table_exercises_every_op() -> None:
    assert sorted({c.op for c in CASES}) == PRIMITIVES


HALF_PRECISION = {
    "exp": (tg.exp, np.exp),
    "softmax": (tg.softmax, lambda x: softmax_f64(x, -1)),
    "sum": (method("sum", 1), method("sum", 1)),
    "matmul": (lambda x: x @ x.T, lambda x: x @ x.T),
    "gelu": (tg.gelu, lambda x: 0.5 * x * (1 + erf_f64(x / np.sqrt(2)))),
    "conv2d": (
        lambda x: tg.conv2d(x.reshape(1, 4, 2, 4), x.reshape(4, 4, 2, 1)),
        lambda x: naive_conv2d(
            x.reshape(1, 4, 2, 4), x.reshape(4, 4, 2, 1), (1, 1), (0, 0), (1, 1), 1
        ),
    ),
}


@pytest.mark.parametrize("dtype", [F16, BF16], ids=str)
@pytest.mark.parametrize(("build", "expected"), HALF_PRECISION.values(), ids=list(HALF_PRECISION))
def test_half_precision_computes_in_float32_and_rounds_once(dtype, build, expected) -> None:
    x = rand(4, 8, dtype=dtype)
    _, _, got = build_and_run(build, (x,))
    want = np.asarray(expected(x.astype(np.float32))).astype(np.float32).astype(dtype)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))
