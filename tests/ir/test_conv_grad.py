"""A convolution's weight gradient as an op (ir.conv_grad): the op table's cases against
an independent oracle (the definition summed tap by tap in float64), a property over
random convolutions and transposed convolutions against torch's autograd on every
backend, the plan of a strided stem's weight gradient (no copy of the image), and named
inference errors."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.errors import DTypeError, ShapeError
from tensorgraph.ir.conv_grad import conv2d_weight_backward
from tensorgraph.ir.ops import workspace_bytes
from tensorgraph.runtime.kernels import KERNELS
from tests.ir.op_cases import BF16, Case, case_adder, check_case

CASES: list[Case] = []  # the op table's cases (tests/ir/test_ops.py runs them all)
case = case_adder(CASES)


def loop_weight_gradient(x, g, kernel, stride, padding, dilation, groups) -> np.ndarray:
    """dw[o, c, u, v] = sum over n, i, j of g[n, o, i, j] x[n, group's c, u * dh + i * sh -
    ph, v * dw + j * sw - pw], terms outside x left out; float64, one tap and one output
    position at a time."""
    x, g = x.astype(np.float64), g.astype(np.float64)
    _, c, h, w = x.shape
    o, oh, ow = g.shape[1:]
    cg, og = c // groups, o // groups
    out = np.zeros((o, cg, *kernel))
    for u, v, i, j in np.ndindex(*kernel, oh, ow):
        row = u * dilation[0] + i * stride[0] - padding[0]
        col = v * dilation[1] + j * stride[1] - padding[1]
        if not (0 <= row < h and 0 <= col < w):
            continue
        for k in range(groups):
            taps = g[:, k * og : (k + 1) * og, i, j].T @ x[:, k * cg : (k + 1) * cg, row, col]
            out[k * og : (k + 1) * og, :, u, v] += taps
    return out


_rng = np.random.default_rng(23)


def _case(id, xs, gs, kernel, stride, padding, dilation=(1, 1), groups=1, dtype=np.float32):
    arrays = tuple(_rng.uniform(-2, 2, s).astype(dtype) for s in (xs, gs))
    case(
        "conv2d_weight_backward",
        id,
        arrays,
        lambda x, g: conv2d_weight_backward(x, g, kernel, stride, padding, dilation, groups),
        tg.bfloat16 if dtype == BF16 else tg.float32,
        lambda x, g: loop_weight_gradient(x, g, kernel, stride, padding, dilation, groups),
        rtol=1e-5,
        atol=1e-5,
    )


_case("stem-strided", (2, 3, 9, 10), (2, 4, 5, 5), (3, 3), (2, 2), (1, 1))
# reach 2 * 1 + 2 * 2 + 1 = 7 rows of 8: the last row is read by no tap
_case("cropped", (1, 2, 8, 8), (1, 3, 3, 3), (3, 3), (2, 2), (0, 0))
# reach 3 + 3 = 6 of 4 rows: taps run past x into zeros
_case("past-x", (1, 2, 4, 4), (1, 2, 4, 4), (3, 3), (1, 1), (0, 0))
_case("groups-dilated", (2, 4, 7, 6), (2, 6, 3, 4), (2, 2), (2, 1), (1, 0), (2, 1), groups=2)
# every tap lands in the top-left padding: zeros
_case("padding-only", (1, 1, 3, 3), (1, 2, 1, 1), (1, 1), (1, 1), (2, 2))
_case("bf16", (2, 2, 5, 5), (2, 3, 5, 5), (3, 3), (1, 1), (1, 1), dtype=BF16)


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_case(c: Case) -> None:
    check_case(c)


@st.composite
def _convolutions(draw: st.DrawFn) -> tuple:
    """(transposed, x shape, w shape, stride, padding, dilation, output_padding, groups,
    seed): a random conv2d (padding as ((top, bottom), (left, right)) or symmetric) or
    conv_transpose2d whose output is not empty."""
    transposed = draw(st.booleans())
    groups = draw(st.integers(1, 2))
    c, o = groups * draw(st.integers(1, 3)), groups * draw(st.integers(1, 3))
    kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 4)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    if transposed:
        padding = tuple(
            draw(st.integers(0, (k - 1) * d // 2)) for k, d in zip(kernel, dilation, strict=True)
        )
        extra = tuple(
            draw(st.integers(0, max(s, d) - 1)) for s, d in zip(stride, dilation, strict=True)
        )
        hw = (draw(st.integers(1, 5)), draw(st.integers(1, 5)))
        w = (c, o // groups, *kernel)
    else:
        padding = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in range(2))
        extra = (0, 0)
        reach = [d * (k - 1) + 1 for k, d in zip(kernel, dilation, strict=True)]
        hw = tuple(
            draw(st.integers(max(1, r - sum(p)), r + 6))
            for r, p in zip(reach, padding, strict=True)
        )
        w = (o, c // groups, *kernel)
    x = (draw(st.integers(1, 3)), c, *hw)
    return transposed, x, w, stride, padding, dilation, extra, groups, draw(st.integers(0, 999))


def _torch_weight_gradient(conv, weights: np.ndarray, x: np.ndarray, w: np.ndarray, **kw):
    """d sum(conv(x, w) * weights) / dw by torch's autograd (float64)."""
    wt = torch.tensor(w, dtype=torch.float64, requires_grad=True)
    out = conv(torch.tensor(x, dtype=torch.float64), wt, **kw)
    (out * torch.tensor(weights, dtype=torch.float64)).sum().backward()
    return wt.grad.numpy()


@given(_convolutions())
# Regression (found by this property in CI): a top padding of 2 over a 1-row x at stride
# 3. The input gradient's transposed product has one row, and cutting x's row out of it
# cropped 2 rows of 1 (ShapeError) where the answer is zeros: no window reads x's row.
@example((False, (1, 1, 1, 1), (1, 1, 1, 1), (3, 1), ((2, 0), (0, 0)), (1, 1), (0, 0), 1, 0))
@settings(max_examples=20, deadline=None)
def test_random_weight_gradients_agree_with_torch_on_every_backend(conv) -> None:
    """value_and_grad of sum(conv(x, w) * weights) for w: one conv2d_weight_backward that
    reads x (conv2d) or the cotangent (conv_transpose2d) as stored, torch's gradient, the
    arena bit for bit the reference, MLX to float rounding."""
    transposed, xs, ws, stride, padding, dilation, extra, groups, seed = conv
    rng = np.random.default_rng(seed)
    x, w = (rng.uniform(-1, 1, s).astype(np.float32) for s in (xs, ws))
    g = tg.Graph("conv")
    xt, wt = g.input("x", xs), g.input("w", ws)
    if transposed:
        out = tg.conv_transpose2d(xt, wt, stride, padding, dilation, extra, groups)
        torch_conv, torch_x = torch.nn.functional.conv_transpose2d, x
        kw = {"stride": stride, "padding": padding, "output_padding": extra}
    else:
        out = tg.conv2d(xt, wt, stride, padding, dilation, groups)
        # torch pads both sides alike: its convolution of x padded as ours pads it
        torch_conv, torch_x = torch.nn.functional.conv2d, np.pad(x, ((0, 0), (0, 0), *padding))
        kw = {"stride": stride}
    weights = rng.uniform(-1, 1, out.shape).astype(np.float32)
    g.output((out * g.constant(weights)).sum())
    vg = tg.value_and_grad(g, "w")
    backward = [n for n in vg.nodes if n.op == "conv2d_weight_backward"]
    assert len(backward) == 1
    read = backward[0].inputs[1 if transposed else 0]
    assert vg.node(read).op == "input"  # x (or the transposed conv's x) as stored
    expected = _torch_weight_gradient(
        torch_conv, weights, torch_x, w, dilation=dilation, groups=groups, **kw
    )
    prog = tg.compile(vg)
    ref = prog.run({"x": x, "w": w}, backend="numpy")[1]
    np.testing.assert_allclose(ref, expected, rtol=1e-5, atol=1e-5)
    assert prog.run({"x": x, "w": w}, backend="arena")[1].tobytes() == ref.tobytes()
    mlx = prog.run({"x": x, "w": w}, backend="mlx")[1]
    np.testing.assert_allclose(mlx, ref, rtol=1e-5, atol=1e-5)


def test_a_strided_stem_holds_no_copy_of_the_image() -> None:
    """The weight gradient of a 7x7 stride-2 stem over an image: the plan holds the image
    x, the convolution's result y, its cotangent (y-sized), the small gradient and, at
    the gradient's step only, the patches it contracts (its declared workspace), where
    the convolution written out held x's and the cotangent's transposed copies too."""
    g = tg.Graph("stem")
    x = g.input("x", (4, 3, 32, 32))
    rng = np.random.default_rng(0)
    w = g.param("w", (8, 3, 7, 7), value=rng.uniform(-1, 1, (8, 3, 7, 7)).astype(np.float32))
    y = tg.conv2d(x, w, 2, 3)
    g.output((y * y).sum())
    prog = tg.compile(tg.value_and_grad(g, "w"))
    x_bytes, y_bytes, w_bytes = 4 * 3 * 32 * 32 * 4, 4 * 8 * 16 * 16 * 4, 8 * 3 * 7 * 7 * 4
    # The taps of 16 output rows at stride 2 reach 6 + 15 * 2 + 1 = 37 padded rows; the
    # patch matrix is (4 * 16 * 16) positions x (3 * 7 * 7) taps; the cotangent y-sized.
    patches = (4 * 3 * 37 * 37 + 4 * 16 * 16 * 3 * 7 * 7 + 4 * 8 * 16 * 16) * 4
    (node,) = [n for n in prog.graph.nodes if n.op == "conv2d_weight_backward"]
    workspace = prog.plan.liveness.workspace[node.id]
    assert workspace.size == patches
    step = prog.plan.liveness.step_of[node.id]
    assert (workspace.start, workspace.end) == (step, step + 1)
    assert {n.op for n in prog.graph.nodes}.isdisjoint({"transpose", "pad"})
    assert prog.plan.arena_size <= x_bytes + 2 * y_bytes + w_bytes + patches + 5 * 64
    feeds = {"x": rng.uniform(-1, 1, (4, 3, 32, 32)).astype(np.float32)}
    ref = prog.run(feeds, backend="numpy")[1]
    assert prog.run(feeds, backend="arena")[1].tobytes() == ref.tobytes()  # bytes reserved


def kernel_temporaries(node, args) -> int:
    """The most bytes Python held at once while the oracle's kernel ran `node` on `args`,
    its result aside: tracemalloc sees every NumPy data buffer, and the Python objects
    made beside them (views, shape tuples: a few KiB, `OBJECTS`)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        out = KERNELS[node.op](node, args)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak - out.nbytes


OBJECTS = 8192  # bytes of Python objects, against a workspace of 600 KB below


@pytest.mark.parametrize("dtype", [tg.float32, tg.bfloat16, tg.float16])
def test_the_workspace_bounds_what_the_kernel_holds(dtype) -> None:
    """A 5x5 stride-2 dilated, grouped weight gradient in each float type: the workspace
    is the patches' size derived by hand, and the NumPy kernel's temporaries (the half
    types' float32 copies included) fit in it."""
    g = tg.Graph("wb")
    x = g.input("x", (4, 8, 29, 27), dtype)
    cot = g.input("g", (4, 12, 12, 12), dtype)
    out = conv2d_weight_backward(x, cot, 5, stride=2, padding=(1, 2), dilation=2, groups=2)
    g.output(out)
    node = g.node(out.id)
    # 12 output rows reach (5 - 1) * 2 + (12 - 1) * 2 + 1 = 31 padded rows (and columns);
    # the patch matrix is (4 * 12 * 12) positions x (8 * 5 * 5) taps; the cotangent g's
    elements = 4 * 8 * 31 * 31 + 4 * 12 * 12 * 8 * 5 * 5 + 4 * 12 * 12 * 12
    if dtype != tg.float32:  # float32 x, g and product beside the half ones
        elements += 4 * 8 * 29 * 27 + 4 * 12 * 12 * 12 + 12 * 4 * 5 * 5
    assert workspace_bytes(node, g) == elements * 4
    rng = np.random.default_rng(5)
    args = [rng.uniform(-1, 1, s).astype(dtype.to_numpy()) for s in ((4, 8, 29, 27), cot.shape)]
    assert kernel_temporaries(node, args) <= workspace_bytes(node, g) + OBJECTS


def test_equal_nodes_over_other_operands_have_their_own_workspace() -> None:
    """Two weight-gradient nodes equal as nodes (same id, inputs, attributes, output
    shape and dtype) whose images hold 4 and 2 images: workspaces are cached per node and
    operand shapes, so the second's is its own, half the first's (every term of the
    patches above counts images)."""
    nodes, graphs = [], []
    for batch in (4, 2):
        g = tg.Graph("wb")
        x = g.input("x", (batch, 8, 29, 27))
        cot = g.input("g", (batch, 12, 12, 12))
        out = conv2d_weight_backward(x, cot, 5, stride=2, padding=(1, 2), dilation=2, groups=2)
        g.output(out)
        nodes.append(g.node(out.id))
        graphs.append(g)
    assert nodes[0] == nodes[1]
    full = (4 * 8 * 31 * 31 + 4 * 12 * 12 * 8 * 5 * 5 + 4 * 12 * 12 * 12) * 4
    assert [workspace_bytes(n, g) for n, g in zip(nodes, graphs, strict=True)] == [full, full // 2]


def test_disagreements_are_named() -> None:
    g = tg.Graph("g")
    x = g.input("x", (2, 4, 6, 6))
    with pytest.raises(DTypeError, match="one float dtype but x is float32, c float16"):
        conv2d_weight_backward(x, g.input("c", (2, 3, 4, 4), tg.float16), 3)
    with pytest.raises(ShapeError, match=r"batch of x \(2, 4, 6, 6\)"):
        conv2d_weight_backward(x, g.input("b", (3, 4, 4, 4)), 3)
    with pytest.raises(ShapeError, match="groups=3 must divide"):
        conv2d_weight_backward(x, g.input("d", (2, 3, 4, 4)), 3, groups=3)
    with pytest.raises(ShapeError, match=r"bad kernel_size \(0, 3\)"):
        conv2d_weight_backward(x, g.input("e", (2, 3, 4, 4)), (0, 3))
    ints = g.input("i", (2, 4, 6, 6), tg.int32)
    with pytest.raises(DTypeError, match="i is int32"):
        conv2d_weight_backward(ints, ints, 3)
