"""The weight gradient in chunks (ir/conv_grad_chunks.py): random convolutions whose
patches outgrow their operands, the chunks' split derived from the rule (batch chunks
where there are enough images, row chunks otherwise), every chunk's patches within the
limit, the gradient torch's on every backend (the arena bit for bit the reference), and
the chunked step's plan below the unchunked one's where the patches set its floor."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.ir import conv_grad_chunks
from tensorgraph.ir.ops import workspace_bytes


@st.composite
def _strided_convs(draw: st.DrawFn) -> tuple:
    """(x shape, w shape, stride, padding, dilation, groups, seed): a conv2d whose output
    is not empty; batch 1-6 so that both splits occur."""
    groups = draw(st.integers(1, 2))
    c, o = groups * draw(st.integers(1, 3)), groups * draw(st.integers(1, 3))
    kernel = (draw(st.integers(1, 4)), draw(st.integers(1, 3)))
    stride = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    padding = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
    reach = [d * (k - 1) + 1 for k, d in zip(kernel, dilation, strict=True)]
    hw = tuple(
        draw(st.integers(max(1, r - 2 * p), r + 7)) for r, p in zip(reach, padding, strict=True)
    )
    x = (draw(st.sampled_from((1, 1, 2, 4, 6))), c, *hw)  # batch 1: row chunks
    w = (o, c // groups, *kernel)
    return x, w, stride, padding, dilation, groups, draw(st.integers(0, 999))


@given(_strided_convs())
@settings(max_examples=25, deadline=None)
def test_chunked_weight_gradients_equal_torch_on_every_backend(conv) -> None:
    xs, ws, stride, padding, dilation, groups, seed = conv
    rng = np.random.default_rng(seed)
    x, w = (rng.uniform(-1, 1, s).astype(np.float32) for s in (xs, ws))
    g = tg.Graph("conv")
    xt, wt = g.input("x", xs), g.input("w", ws)
    out = tg.conv2d(xt, wt, stride, padding, dilation, groups)
    weights = rng.uniform(-1, 1, out.shape).astype(np.float32)
    g.output((out * g.constant(weights)).sum())
    sizes = tg.Graph("sizes")  # x and a cotangent of the output's shape, for the rule
    xc, cot = sizes.input("x", xs), sizes.input("c", out.shape)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(conv_grad_chunks, "CHUNK_FLOOR", 0)  # the limit: x's and g's bytes
        pieces = conv_grad_chunks.chunk_count(xc, cot, ws[2:])
        vg = tg.value_and_grad(g, "w")
    limit = xc.nbytes + cot.nbytes
    chunks = [n for n in vg.nodes if n.op == "conv2d_weight_backward"]
    n, oh = xs[0], out.shape[2]
    if pieces == 1:
        assert len(chunks) == 1
    elif n >= pieces:  # batch chunks of n // pieces images: views of x and g
        sizes = [vg.node(c.inputs[0]).shape[0] for c in chunks]
        per = n // pieces
        assert sizes == [min(per, n - a) for a in range(0, n, per)]
        assert all(vg.node(c.inputs[0]).op == "narrow" for c in chunks)
    else:  # row chunks of oh // pieces output rows (those whose taps reach x)
        rows = [vg.node(c.inputs[1]).shape[2] for c in chunks]
        per = max(1, oh // pieces)
        assert len(rows) <= -(-oh // per) and all(r <= per for r in rows)
    for c in chunks:  # each within the limit, but where one output row exceeds it
        row = workspace_bytes(c, vg) // max(1, vg.node(c.inputs[1]).shape[2])
        assert pieces == 1 or conv_patch(vg, c) <= max(limit, row)
    wt_torch = torch.tensor(w, dtype=torch.float64, requires_grad=True)
    xp = np.pad(x, ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2))
    y = torch.nn.functional.conv2d(
        torch.tensor(xp, dtype=torch.float64), wt_torch, None, stride, 0, dilation, groups
    )
    (y * torch.tensor(weights, dtype=torch.float64)).sum().backward()
    prog = tg.compile(vg)
    feeds = {"x": x, "w": w}
    ref = prog.run(feeds, backend="numpy")[1]
    np.testing.assert_allclose(ref, wt_torch.grad.numpy(), rtol=1e-5, atol=1e-5)
    assert prog.run(feeds, backend="arena")[1].tobytes() == ref.tobytes()
    np.testing.assert_allclose(prog.run(feeds, backend="mlx")[1], ref, rtol=1e-5, atol=1e-5)


def conv_patch(graph: tg.Graph, node) -> int:
    """Bytes of the patch matrix `node` (a conv2d_weight_backward) contracts."""
    x, g = (graph.node(i) for i in node.inputs)
    kernel = node.attr("kernel_size")
    return x.shape[0] * g.shape[2] * g.shape[3] * x.shape[1] * kernel[0] * kernel[1] * 4


def _stem_step(batch: int) -> tg.Graph:
    """value_and_grad of a 7x7 stride-2 stem over 64x64 images (the zoo CNN's)."""
    g = tg.Graph("stem")
    x = g.input("x", (batch, 3, 64, 64))
    w = g.param("w", (8, 3, 7, 7), value=np.full((8, 3, 7, 7), 0.01, np.float32))
    y = tg.conv2d(x, w, 2, 3)
    g.output((y * y).sum())
    return tg.value_and_grad(g, "w")


@pytest.mark.parametrize("batch", [8, 1])
def test_the_stems_patches_no_longer_set_its_floor(batch) -> None:
    """The stem's patches are 8 * 32 * 32 * 3 * 49 * 4 = 4.8 MB at batch 8 beside x (393 KB)
    and g (262 KB): split into 4.8 MB / 1 MiB -> 5 pieces, chunks of 8 // 5 = 1 image
    (0.6 MB each); at batch 1 (602 KB of patches, under the floor) one op. The arena of
    the chunked step holds at most one chunk's patches beside x, y, g and the result."""
    vg = _stem_step(batch)
    chunks = [n for n in vg.nodes if n.op == "conv2d_weight_backward"]
    assert len(chunks) == (8 if batch == 8 else 1)
    patches = batch * 32 * 32 * 3 * 49 * 4 // len(chunks)
    assert all(conv_patch(vg, c) == patches for c in chunks)
    prog = tg.compile(vg)
    x_bytes, y_bytes = batch * 3 * 64 * 64 * 4, batch * 8 * 32 * 32 * 4
    # one chunk's workspace: its image padded to the taps' reach (69 x 69), its patches
    # and its cotangent, beside x, y, the cotangent and two weight-sized partial sums
    workspace = (batch // len(chunks)) * (3 * 69 * 69 * 4 + 8 * 32 * 32 * 4) + patches
    assert prog.plan.arena_size <= x_bytes + 2 * y_bytes + workspace + 2 * 4704 + 8 * 64
    feeds = {"x": np.random.default_rng(1).uniform(-1, 1, (batch, 3, 64, 64)).astype(np.float32)}
    ref = prog.run(feeds, backend="numpy")[1]
    assert prog.run(feeds, backend="arena")[1].tobytes() == ref.tobytes()


@given(_strided_convs(), st.integers(1, 4096))
@settings(max_examples=15, deadline=None)
def test_splitting_a_gradient_graph_keeps_its_values(conv, limit) -> None:
    """split_weight_gradients at a random limit: every weight gradient left contracts at
    most the limit (or one output row's patches, the least a chunk holds), the count is
    the nodes split, and the split graph gives the unsplit one's gradient on the numpy
    executor (to float reassociation) and its own plan's arena bit for bit."""
    xs, ws, stride, padding, dilation, groups, seed = conv
    rng = np.random.default_rng(seed)
    x, w = (rng.uniform(-1, 1, s).astype(np.float32) for s in (xs, ws))
    g = tg.Graph("conv")
    out = tg.conv2d(g.input("x", xs), g.input("w", ws), stride, padding, dilation, groups)
    g.output((out * g.constant(rng.uniform(-1, 1, out.shape).astype(np.float32))).sum())
    vg = tg.value_and_grad(g, "w")
    before = [n for n in vg.nodes if n.op == "conv2d_weight_backward"]
    split, count = conv_grad_chunks.split_weight_gradients(vg, limit)
    assert count == sum(conv_patch(vg, n) > limit for n in before)
    assert (split is vg) == (count == 0)
    for node in (n for n in split.nodes if n.op == "conv2d_weight_backward"):
        row = conv_patch(split, node) // split.node(node.inputs[1]).shape[2]
        assert conv_patch(split, node) <= max(limit, row)
    feeds = {"x": x, "w": w}
    ref = tg.compile(vg).run(feeds, backend="numpy")[1]
    prog = tg.compile(split)
    got = prog.run(feeds, backend="numpy")[1]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    assert prog.run(feeds, backend="arena")[1].tobytes() == got.tobytes()


def test_a_budget_splits_before_it_recomputes() -> None:
    """The stem's gradient at batch 8 holds eight one-image chunks of 32 * 32 * 3 * 49 * 4
    = 602,112 B of patches each. A budget of 1,200,000 B, below the keep-everything
    arena, splits each above 1,200,000 // SPLIT_SHARE = 300,000 B (all eight) into
    ceil(602,112 / 300,000) = 3 pieces: row chunks of 32 // 3 = 10 output rows (the last
    of 2), and then keeping every value fits: no recompute, the split reported, the
    arena the reference's bit for bit."""
    from tensorgraph.remat import SPLIT_SHARE

    vg = _stem_step(8)
    keep = tg.compile(vg)
    budget = 1_200_000
    assert SPLIT_SHARE == 4 and keep.plan.arena_size > budget
    prog = tg.compile(vg, memory_budget=budget)
    assert (prog.remat.method, prog.remat.split, prog.remat.recompute_flops) == ("keep-all", 8, 0)
    assert prog.plan.arena_size <= budget
    chunks = [n for n in prog.graph.nodes if n.op == "conv2d_weight_backward"]
    row = 602_112 // 32  # one output row's patches
    assert sorted(conv_patch(prog.graph, c) for c in chunks) == [2 * row] * 8 + [10 * row] * 24
    feeds = {"x": np.random.default_rng(2).uniform(-1, 1, (8, 3, 64, 64)).astype(np.float32)}
    ref = prog.run(feeds, backend="numpy")
    assert [a.tobytes() for a in prog.run(feeds, backend="arena")] == [a.tobytes() for a in ref]
    np.testing.assert_allclose(ref[1], keep.run(feeds, backend="numpy")[1], rtol=1e-5, atol=1e-6)
