"""Each vector-Jacobian rule against central differences of the float64 evaluation
(tolerance derived in test_value_and_grad), at inputs away from the op's kinks; every op
with a rule has a case here. Tie conventions against MLX's own gradients; the
piecewise-constant ops give exact zeros."""

from __future__ import annotations

from collections.abc import Callable

import mlx.core as mx
import numpy as np
import pytest

import tensorgraph as tg
from tensorgraph.ir.conv_grad import conv2d_weight_backward
from tensorgraph.ir.elementwise_fused import fuse_since
from tensorgraph.ir.functions import matmul_transposed, matmul_transposed_a
from tensorgraph.ir.ops import OPS
from tensorgraph.ir.pool_grad import adaptive_max_pool2d_backward, max_pool2d_backward
from tensorgraph.ir.scatter import scatter_add
from tensorgraph.ir.vjp_support import no_gradient
from tests.autodiff.float64 import central_differences, evaluate

_rng = np.random.default_rng(11)


def _u(*shape: int, low: float = -1.5, high: float = 1.5) -> np.ndarray:
    return _rng.uniform(low, high, shape).astype(np.float32)


def _away(*shape: int) -> np.ndarray:
    """Values in [-1.5, -0.2] U [0.2, 1.5]: away from the kinks at 0."""
    return (np.sign(_u(*shape)) * _u(*shape, low=0.2, high=1.5)).astype(np.float32)


Build = Callable[..., tg.Tensor]
CASES: list[tuple[str, str, Build, list[np.ndarray]]] = []


def case(op: str, id: str, build: Build, *arrays: np.ndarray) -> None:
    CASES.append((op, f"{op}-{id}", build, list(arrays)))


_POSITIVE = {"log", "sqrt", "rsqrt"}
for _op, _fn in {
    "neg": tg.negative,
    "abs": tg.abs,
    "square": tg.square,
    "relu": tg.relu,
    "exp": tg.exp,
    "log": tg.log,
    "sqrt": tg.sqrt,
    "rsqrt": tg.rsqrt,
    "reciprocal": tg.reciprocal,
    "sin": tg.sin,
    "cos": tg.cos,
    "tanh": tg.tanh,
    "sigmoid": tg.sigmoid,
    "silu": tg.silu,
    "erf": tg.erf,
    "log1p": lambda x: tg.log1p(tg.abs(x)),
    "expm1": tg.expm1,
    "tan": lambda x: tg.tan(x * 0.5),
    "atan": tg.atan,
}.items():
    case(_op, "x", _fn, _u(3, 4, low=0.3) if _op in _POSITIVE else _away(3, 4))
case("gelu", "exact", tg.gelu, _u(3, 4))
case("gelu", "tanh", tg.gelu_approx, _u(3, 4))
case("add", "broadcast", tg.add, _u(2, 3, 4), _u(3, 1))
case("sub", "broadcast", tg.subtract, _u(3, 1), _u(2, 3, 4))
case("mul", "broadcast", tg.multiply, _u(2, 3, 4), _u(4))
case("div", "broadcast", tg.divide, _u(2, 3, 4), _u(1, 4, low=0.5))
case("pow", "broadcast", tg.power, _u(3, 4, low=0.3), _u(4))
case("maximum", "broadcast", tg.maximum, _away(3, 4), _away(4) * 0.5)
case("minimum", "broadcast", tg.minimum, _away(3, 4) * 0.5, _away(3, 1))
case("atan2", "x", tg.atan2, _u(3, 4), _u(3, 4, low=0.2))
case(
    "remainder",
    "x",
    tg.remainder,
    np.array([0.4, -3.1, 5.6], np.float32),
    np.array([1.5, 2.0, -2.5], np.float32),
)
case(
    "fmod",
    "x",
    tg.fmod,
    np.array([0.4, -3.1, 5.6], np.float32),
    np.array([1.5, 2.0, -2.5], np.float32),
)
case(
    "where",
    "broadcast",
    lambda a, b: tg.where(a > 0.3, a, b),
    _away(3, 4),
    _u(4),
)


def _fused_chain(a: tg.Tensor, b: tg.Tensor, c: tg.Tensor) -> tg.Tensor:
    """(0.9 a + 0.1 b^2) / (sqrt(c) + 1e-3) * a as one `elementwise` node: a read twice,
    c broadcast."""
    first = a.graph.next_id
    return fuse_since((0.9 * a + 0.1 * tg.square(b)) / (tg.sqrt(c) + 1e-3) * a, first)


case("elementwise", "chain-broadcast", _fused_chain, _u(3, 4), _u(3, 4), _u(4, low=0.3))

case("cast", "half", lambda x: x.astype(tg.float16).astype(tg.float32), _u(3, 4))
case("matmul", "2d", tg.matmul, _u(3, 4), _u(4, 5))
case("matmul", "batched-broadcast", tg.matmul, _u(2, 1, 3, 4), _u(3, 4, 2))
case("matmul", "vector-matrix", tg.matmul, _u(4), _u(2, 4, 3))
case("matmul", "matrix-vector", tg.matmul, _u(2, 3, 4), _u(4))
case("matmul", "dot", tg.matmul, _u(4), _u(4))
# A weight shared by every batch (2-D, or batch extents 1): its gradient is one product
# with the batch folded into the contraction.
case("matmul", "batched-weight", tg.matmul, _u(2, 3, 3, 4), _u(4, 5))
case("matmul", "batched-weight-ones", tg.matmul, _u(2, 3, 4), _u(1, 4, 5))
case("matmul_transposed", "2d", matmul_transposed, _u(3, 4), _u(5, 4))
case("matmul_transposed", "batched-broadcast", matmul_transposed, _u(2, 1, 3, 4), _u(3, 5, 4))
case("matmul_transposed", "batched-weight", matmul_transposed, _u(2, 3, 4), _u(5, 4))
case("matmul_transposed_a", "2d", matmul_transposed_a, _u(4, 3), _u(4, 5))
case("matmul_transposed_a", "batched-broadcast", matmul_transposed_a, _u(2, 1, 4, 3), _u(3, 4, 5))
case("matmul_transposed_a", "batched-weight", matmul_transposed_a, _u(2, 4, 3), _u(4, 5))
case("sum", "axes", lambda x: x.sum((0, 2)), _u(2, 3, 4))
case("sum", "keepdims", lambda x: x.sum(1, keepdims=True), _u(2, 3, 4))
case("mean", "axes", lambda x: x.mean((1,)), _u(2, 3, 4))
case("mean", "all-keepdims", lambda x: x.mean(keepdims=True), _u(2, 3))
case("max", "axis", lambda x: x.max(1), _u(2, 5, 3))
case("min", "keepdims", lambda x: x.min((0, 2), keepdims=True), _u(2, 5, 3))
case("softmax", "axis0", lambda x: tg.softmax(x, 0), _u(3, 4))
case("log_softmax", "last", tg.log_softmax, _u(3, 4))
case("cumsum", "axis1", lambda x: tg.cumsum(x, 1), _u(2, 5))
_with_zero = _u(2, 5)
_with_zero[1, 2] = 0.0
case("cumprod", "axis1-with-a-zero", lambda x: tg.cumprod(x, 1), _with_zero)
case("cumprod", "axis0", lambda x: tg.cumprod(x, 0), _u(4, 3))
case("reshape", "x", lambda x: x.reshape(4, 3), _u(3, 4))
case("transpose", "perm", lambda x: tg.transpose(x, (2, 0, 1)), _u(2, 3, 4))
case("broadcast_to", "x", lambda x: tg.broadcast_to(x, (2, 3, 4)), _u(3, 1))
case("narrow", "axis1", lambda x: tg.narrow(x, 1, 1, 2), _u(3, 4))
case("concat", "axis1", lambda a, b: tg.concatenate([a, b, a], 1), _u(2, 3), _u(2, 1))
case("pad", "pad-and-crop", lambda x: tg.pad(x, [(1, -1), (2, 0)], value=0.7), _u(3, 4))
case("pad", "reflect", lambda x: tg.pad(x, [(2, 1), (0, 3)], mode="reflect"), _u(3, 4))
case("pad", "replicate", lambda x: tg.pad(x, [(1, 0), (2, 2)], mode="replicate"), _u(2, 3))
case(
    "slice_update",
    "run-time-start",
    lambda t, u, s: tg.slice_update(t, u, 0, s),
    _u(5, 3),
    _u(2, 3),
    np.array(2, np.int32),
)
case("slice_update", "x", lambda t, u: tg.slice_update(t, u, 1, 2), _u(3, 5), _u(3, 2))
_rows = np.array([[2, 0], [-1, 2]], np.int32)
case("take", "repeats-negatives", lambda x, i: tg.take(x, i, 1), _u(2, 3, 2), _rows)
_picks = np.array([[1, 1, 0], [2, 0, 2]], np.int64)
case("gather", "axis0", lambda x, i: tg.gather(x, i, 0), _u(3, 4), _picks)
case("sort", "descending", lambda x: tg.sort(x, 0, descending=True), _u(4, 3))
case("sort", "ascending", lambda x: tg.sort(x, -1), _u(2, 5))
_with_zero = _u(2, 3, 4)
_with_zero[1, 2, 0] = 0.0
case("prod", "axes-with-a-zero", lambda x: x.prod((0, 2)), _with_zero)
case("prod", "keepdims", lambda x: x.prod(1, keepdims=True), _u(2, 3, 4))
case(
    "index_update",
    "repeated",
    lambda t, u, i: tg.ir.updates.index_update(t, u, i, 1),
    _u(2, 5, 3),
    _u(2, 4, 3),
    np.array([3, 0, 3, 1], np.int32),
)
case(
    "gather_mm",
    "experts",
    tg.gather_mm,
    _u(2, 3, 2, 4),
    _u(3, 4, 5),
    np.array([[2, 0, 2], [1, 1, 0]], np.int32),
)
_packed = [np.array(p) for p in mx.quantize(mx.array(_u(3, 64)), group_size=32, bits=4)]
_stack = [np.array(p) for p in mx.quantize(mx.array(_u(2, 3, 32)), group_size=32, bits=4)]
case(
    "quantized_matmul",
    "transposed",
    lambda x, w, s, b: tg.quantized_matmul(x, w, s, b, group_size=32, bits=4),
    _u(2, 64),
    *_packed,
)
case(
    "quantized_matmul",
    "plain-batched-x",
    lambda x, w, s, b: tg.quantized_matmul(x, w, s, b, False, group_size=32, bits=4),
    _u(2, 2, 3),
    *_packed,
)
case(
    "quantized_matmul",
    "stacked-broadcast",
    lambda x, w, s, b: tg.quantized_matmul(x, w, s, b, group_size=32, bits=4),
    _u(1, 4, 32),
    *_stack,
)
_fp4 = [np.array(p) for p in mx.quantize(mx.array(_u(3, 64)), group_size=32, bits=4, mode="mxfp4")]
case(
    "quantized_matmul",
    "mxfp4",
    lambda x, w, s: tg.quantized_matmul(x, w, s, group_size=32, bits=4, mode="mxfp4"),
    _u(2, 64),
    *_fp4,
)
case(
    "dequantize",
    "scales-biases",
    lambda w, s, b: tg.dequantize(w, s, b, group_size=32, bits=4),
    *_packed,
)
case("scatter_add", "x", lambda t, u, i: scatter_add(t, u, i, 0), _u(3, 4), _u(2, 3), _picks)

case(
    "conv2d",
    "strided",
    lambda x, w: tg.conv2d(x, w, (2, 1), 1, (1, 2)),
    _u(2, 3, 6, 5),
    _u(4, 3, 3, 2),
)
case(
    "conv2d", "groups", lambda x, w: tg.conv2d(x, w, 2, 1, groups=2), _u(1, 4, 5, 5), _u(6, 2, 3, 3)
)
# Strided convolutions whose symmetric padding would give a weight gradient wider than
# the kernel (ResNet's 3x3/2 and 1x1/2 on even inputs, a 7x7/2 stem): the input is padded
# to exactly what the taps read, cropping rows a stride skips.
case(
    "conv2d",
    "3x3-stride-2-even",
    lambda x, w: tg.conv2d(x, w, 2, 1),
    _u(2, 2, 6, 6),
    _u(3, 2, 3, 3),
)
case("conv2d", "1x1-stride-2", lambda x, w: tg.conv2d(x, w, 2, 0), _u(2, 2, 4, 5), _u(3, 2, 1, 1))
case("conv2d", "7x7-stride-2", lambda x, w: tg.conv2d(x, w, 2, 3), _u(1, 1, 8, 9), _u(2, 1, 7, 7))
case(
    "conv2d",
    "stride-3-dilated-groups",
    lambda x, w: tg.conv2d(x, w, (3, 2), (0, 2), (2, 1), groups=2),
    _u(1, 4, 9, 7),
    _u(2, 2, 2, 3),
)
case(
    "conv_transpose2d",
    "strided",
    lambda x, w: tg.conv_transpose2d(x, w, 2, 1, output_padding=1),
    _u(1, 4, 3, 3),
    _u(4, 3, 3, 3),
)
case(
    "conv_transpose2d",
    "groups-dilated",
    lambda x, w: tg.conv_transpose2d(x, w, 1, 0, dilation=2, groups=2),
    _u(2, 4, 3, 2),
    _u(4, 1, 2, 2),
)
case(
    "conv2d",
    "asymmetric-padding",
    lambda x, w: tg.conv2d(x, w, 2, ((2, 0), (1, 3)), groups=2),
    _u(2, 4, 6, 5),
    _u(2, 2, 3, 2),
)
# A top padding longer than the whole transposed product (one row): 2 rows over a 1-row
# x at stride 3, one output row, whose 1-row window reads padding only.
case(
    "conv2d",
    "padding-past-the-product",
    lambda x, w: tg.conv2d(x, w, (3, 1), ((2, 0), (0, 1))),
    _u(1, 2, 1, 3),
    _u(2, 2, 1, 2),
)
# The weight gradient is bilinear in x and g: both differentiated, over a strided,
# padded case whose taps stop short of x's last row and one grouped, dilated case whose
# reach runs past x into zeros.
case(
    "conv2d_weight_backward",
    "strided-cropped",
    lambda x, g: conv2d_weight_backward(x, g, 3, 2, 1),
    _u(2, 2, 6, 6),
    _u(2, 3, 3, 3),
)
case(
    "conv2d_weight_backward",
    "groups-dilated-past-x",
    lambda x, g: conv2d_weight_backward(x, g, (2, 3), (1, 2), (1, 0), (2, 1), groups=2),
    _u(1, 4, 5, 5),
    _u(1, 2, 5, 3),
)
case("max_pool2d", "padded", lambda x: tg.max_pool2d(x, 3, 2, 1), _u(1, 2, 6, 5))
case(
    "max_pool2d",
    "ceil-dilated",
    lambda x: tg.max_pool2d(x, 2, 2, 1, dilation=2, ceil_mode=True),
    _u(2, 1, 7, 6),
)
case("adaptive_max_pool2d", "uneven", lambda x: tg.adaptive_max_pool2d(x, (3, 2)), _u(1, 2, 7, 5))
# The pools' backward ops are linear in the cotangent g, their only differentiable
# operand: x is a constant of the case (no ties, so the hits are stable under the
# differences) and the pooled result is computed from it.
_pooled_x = _u(1, 2, 6, 5)
case(
    "max_pool2d_backward",
    "g",
    lambda g: max_pool2d_backward(
        (x := g.graph.constant(_pooled_x)), tg.max_pool2d(x, 3, 2, 1), g * g, 3, 2, 1
    ),
    _u(1, 2, 3, 3),
)
case(
    "adaptive_max_pool2d_backward",
    "g",
    lambda g: adaptive_max_pool2d_backward(
        (x := g.graph.constant(_pooled_x)), tg.adaptive_max_pool2d(x, (3, 2)), g * g, (3, 2)
    ),
    _u(1, 2, 3, 2),
)
case(
    "max_pool2d_backward",
    "g-pooled-by-the-op",
    lambda g: max_pool2d_backward(g.graph.constant(_pooled_x), None, g * g, 3, 2, 1),
    _u(1, 2, 3, 3),
)
case(
    "avg_pool2d",
    "exclude-pad-ceil",
    lambda x: tg.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
    _u(1, 2, 6, 5),
)
case("avg_pool2d", "include-pad", lambda x: tg.avg_pool2d(x, (2, 3), 1, 1), _u(1, 1, 4, 5))
case("avg_pool2d", "override", lambda x: tg.avg_pool2d(x, 2, divisor_override=3), _u(1, 2, 4, 4))
case("adaptive_avg_pool2d", "uneven", lambda x: tg.adaptive_avg_pool2d(x, (3, 4)), _u(1, 2, 7, 5))
case("upsample_nearest2d", "x", lambda x: tg.upsample_nearest2d(x, (7, 8)), _u(1, 2, 3, 4))
case("upsample_bilinear2d", "x", lambda x: tg.upsample_bilinear2d(x, (7, 5)), _u(1, 2, 3, 4))
case(
    "upsample_bilinear2d",
    "align-corners",
    lambda x: tg.upsample_bilinear2d(x, (5, 7), align_corners=True),
    _u(1, 2, 3, 4),
)
case("layer_norm", "affine", lambda x, w, b: tg.layer_norm(x, w, b), _u(2, 3, 5), _u(5), _u(5))
case("layer_norm", "plain", lambda x: tg.layer_norm(x, eps=1e-3), _u(3, 4))
case("rms_norm", "weight", lambda x, w: tg.rms_norm(x, w), _u(2, 3, 5), _u(5))
case("rms_norm", "plain", tg.rms_norm, _u(3, 4))
case("group_norm", "affine", lambda x, w, b: tg.group_norm(x, 2, w, b), _u(2, 4, 3), _u(4), _u(4))
case(
    "scaled_dot_product_attention",
    "grouped-causal",
    lambda q, k, v: tg.scaled_dot_product_attention(q, k, v, mask="causal"),
    _u(1, 4, 5, 3),
    _u(1, 2, 3, 3),
    _u(1, 2, 3, 2),
)
case(
    "scaled_dot_product_attention",
    "bool-mask-dead-row",
    lambda q, k, v, m: tg.scaled_dot_product_attention(q, k, v, mask=m),
    _u(1, 2, 3, 4),
    _u(1, 2, 4, 4),
    _u(1, 2, 4, 3),
    np.array([[True, False, True, False], [False] * 4, [True] * 4]),
)
case(
    "scaled_dot_product_attention",
    "float-mask",
    lambda q, k, v, m: tg.scaled_dot_product_attention(q, k, v, scale=0.7, mask=m),
    _u(2, 1, 3, 4),
    _u(2, 1, 5, 4),
    _u(2, 1, 5, 3),
    _u(3, 5),
)
case("rope", "half-dims", lambda x: tg.rope(x, 4, offset=3), _u(2, 5, 6))
case("rope", "traditional", lambda x: tg.rope(x, 6, traditional=True, base=100.0), _u(1, 4, 6))


def _loss_graph(build: Build, arrays: list[np.ndarray]) -> tuple[tg.Graph, list[str]]:
    """sum(build(inputs) * fixed weights): a scalar loss whose gradient is the rule's
    vector-Jacobian product with those weights; the float inputs are differentiated."""
    g = tg.Graph("rule")
    inputs = [g.input(f"a{k}", a.shape, a.dtype) for k, a in enumerate(arrays)]
    out = build(*inputs)
    weights = np.random.default_rng(1).uniform(-1, 1, out.shape).astype(np.float32)
    g.output((out * g.constant(weights)).sum())
    return g, [f"a{k}" for k, a in enumerate(arrays) if a.dtype.kind == "f"]


@pytest.mark.parametrize(
    ("op", "build", "arrays"), [c[0:1] + c[2:] for c in CASES], ids=[c[1] for c in CASES]
)
def test_rule_equals_central_differences(op: str, build: Build, arrays: list) -> None:
    g, wrt = _loss_graph(build, arrays)
    vg = tg.value_and_grad(g, wrt)
    assert op in {n.op for n in g.nodes}
    feeds = {f"a{k}": a for k, a in enumerate(arrays)}
    exact = evaluate(vg, feeds, {})
    for name, grad in zip(wrt, exact[1:], strict=True):
        numeric = central_differences(g, feeds, {}, name)
        np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-6, err_msg=name)
    # The float32 reference within float32 rounding (float16's, 2^-11, for a value
    # rounded through float16: the cast case).
    half = any(n.dtype == tg.float16 for n in vg.nodes)
    ours = tg.compile(vg).run(feeds, backend="numpy")
    for grad, mine in zip(exact, ours, strict=True):
        np.testing.assert_allclose(mine, grad, rtol=2e-3 if half else 1e-4, atol=1e-5)


# The rules whose backward uses ops the random graphs of test_value_and_grad's backend
# property never make (convolutions, pools, fused ops, gathers and scatters).
_OWN_BACKWARD = [
    c
    for c in CASES
    if c[0]
    not in {
        "neg",
        "abs",
        "square",
        "relu",
        "exp",
        "log",
        "sqrt",
        "rsqrt",
        "reciprocal",
        "sin",
        "cos",
        "tanh",
        "sigmoid",
        "silu",
        "erf",
        "log1p",
        "expm1",
        "tan",
        "atan",
        "gelu",
        "add",
        "sub",
        "mul",
        "div",
        "pow",
        "maximum",
        "minimum",
        "atan2",
        "remainder",
        "fmod",
        "where",
        "cast",
        "sum",
        "mean",
        "softmax",
        "log_softmax",
        "cumsum",
        "reshape",
        "transpose",
        "broadcast_to",
        "narrow",
        "concat",
    }
]


@pytest.mark.parametrize(
    ("op", "build", "arrays"),
    [c[0:1] + c[2:] for c in _OWN_BACKWARD],
    ids=[c[1] for c in _OWN_BACKWARD],
)
def test_backends_agree_on_gradient_graphs(op: str, build: Build, arrays: list) -> None:
    """A rule's gradient graph: the arena equals the reference bit for bit, MLX agrees
    within float32 rounding."""
    g, wrt = _loss_graph(build, arrays)
    vg = tg.value_and_grad(g, wrt)
    feeds = {f"a{k}": a for k, a in enumerate(arrays)}
    prog = tg.compile(vg)
    reference = prog.run(feeds, backend="numpy")
    for ref, got, fast in zip(
        reference, prog.run(feeds, backend="arena"), prog.run(feeds, backend="mlx"), strict=True
    ):
        np.testing.assert_array_equal(got, ref)
        np.testing.assert_allclose(fast, ref, rtol=1e-4, atol=1e-5)


def test_every_op_with_a_rule_has_a_case() -> None:
    ruled = {op for op, d in OPS.items() if d.vjp is not None and d.vjp is not no_gradient}
    assert ruled == {c[0] for c in CASES}


@pytest.mark.parametrize("op", ["floor", "ceil", "round", "trunc", "sign"])
def test_piecewise_constant_ops_give_zero_gradients(op: str) -> None:
    g = tg.Graph("steps")
    x = g.input("x", (4,), tg.float32)
    g.output(tg.sum(x * getattr(tg, op)(x * 3.0)))
    values = np.array([0.3, -1.2, 2.6, 0.9], np.float32)
    out = tg.compile(tg.value_and_grad(g, "x")).run({"x": values}, backend="numpy")
    np.testing.assert_array_equal(out[1], getattr(np, "rint" if op == "round" else op)(values * 3))


TIES = {
    "maximum": (lambda a, b: tg.maximum(a, b), lambda a, b: mx.maximum(a, b)),
    "minimum": (lambda a, b: tg.minimum(a, b), lambda a, b: mx.minimum(a, b)),
    "max": (lambda a, b: a.max(1) * b.sum(1), lambda a, b: a.max(1) * b.sum(1)),
    "min": (lambda a, b: a.min(0) * b.sum(0), lambda a, b: a.min(0) * b.sum(0)),
    "abs": (lambda a, b: tg.abs(a) * b, lambda a, b: mx.abs(a) * b),
}


@pytest.mark.parametrize("op", sorted(TIES))
def test_ties_and_kinks_follow_mlx(op: str) -> None:
    """Where the derivative is not unique (a tie, a kink at 0), the gradient is MLX's:
    mx.grad of the same expression is the oracle."""
    a = np.array([[1.0, 2.0, 2.0], [0.0, -1.0, 0.0]], np.float32)
    b = np.array([[1.0, 2.0, 0.5], [0.0, -1.0, 0.0]], np.float32)
    ours, theirs = TIES[op]
    g = tg.Graph("ties")
    g.output(tg.sum(ours(g.input("a", a.shape), g.input("b", b.shape))))
    got = tg.compile(tg.value_and_grad(g, ["a", "b"])).run({"a": a, "b": b}, backend="numpy")
    want = mx.grad(lambda x, y: mx.sum(theirs(x, y)), argnums=(0, 1))(mx.array(a), mx.array(b))
    np.testing.assert_array_equal(got[1], np.array(want[0]))
    np.testing.assert_array_equal(got[2], np.array(want[1]))


def test_relu_has_zero_derivative_at_zero() -> None:
    """relu'(0) = 0 (torch and JAX; x > 0)."""
    g = tg.Graph("relu")
    g.output(tg.sum(tg.relu(g.input("x", (3,)))))
    out = tg.compile(tg.value_and_grad(g, "x")).run(
        {"x": np.array([-1, 0, 2], np.float32)}, backend="numpy"
    )
    np.testing.assert_array_equal(out[1], np.array([0, 0, 1], np.float32))


# The ops with no rule, each for its reason: outputs that are bool or integer
# (comparisons, predicates, logic, bits, arg-reductions, argsort), generators with no
# operand, and run-time quantization (integer codes; its scales are a piecewise function
# of each group's extremes, and MLX gives mx.quantize no gradient either).
NOT_DIFFERENTIABLE = {
    *("eq", "ne", "lt", "le", "gt", "ge", "isnan", "isinf", "any", "all"),
    *("logical_and", "logical_or", "logical_xor", "logical_not"),
    *("bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not"),
    *("argmax", "argmin", "argsort", "arange", "full", "quantize"),
}


def test_every_differentiable_op_has_a_rule() -> None:
    """The registry scan of issue 27: every op that is no boundary has a rule unless it
    is one of NOT_DIFFERENTIABLE; a new op must take a side."""
    missing = {op for op, d in OPS.items() if d.vjp is None and not d.boundary}
    assert missing == NOT_DIFFERENTIABLE


@pytest.mark.parametrize("build", [tg.matmul, lambda x, w: matmul_transposed(x, tg.transpose(w))])
def test_shared_weight_gradient_is_one_folded_product(build: Build) -> None:
    """x (2, 3, 4) @ w (4, 5): w's gradient is one (4, 6) @ (6, 5) product, never a
    (2, 4, 5) batch of products summed over the batch (it writes 2x the gradient)."""
    g = tg.Graph("shared")
    x = g.input("x", (2, 3, 4), tg.float32)
    w = g.param("w", (4, 5), tg.float32)
    g.output(build(x, w).sum())
    vg = tg.value_and_grad(g, ["w"])
    shapes = [n.shape for n in vg.nodes if n.op in ("matmul", "matmul_transposed")]
    assert (4, 5) in shapes or (5, 4) in shapes
    assert not any(n.shape in ((2, 4, 5), (2, 5, 4)) for n in vg.nodes)


@pytest.mark.parametrize(
    ("stride", "padding", "kernel"), [(2, 1, 3), (2, 0, 1), (2, 3, 7), (1, 1, 3)]
)
def test_conv_weight_gradient_reads_the_input_as_stored(
    stride: int, padding: int, kernel: int
) -> None:
    """The weight gradient is one conv2d_weight_backward of the kernel's extent reading x
    itself: no transposed, padded or cropped copy of x (nor of the cotangent), and no
    product wider than the kernel."""
    g = tg.Graph("conv")
    x = g.input("x", (2, 3, 8, 8), tg.float32)
    w = g.param("w", (4, 3, kernel, kernel), tg.float32)
    g.output(tg.conv2d(x, w, stride, padding).sum())
    vg = tg.value_and_grad(g, ["w"])
    (backward,) = [n for n in vg.nodes if n.op == "conv2d_weight_backward"]
    assert backward.shape == (4, 3, kernel, kernel)
    assert vg.node(backward.inputs[0]).op == "input"
    assert not {"narrow", "pad", "transpose", "conv2d"} & {
        n.op for n in vg.nodes if n.id not in {o.id for o in g.nodes}
    }
