"""Loss helpers (`tg.nn.cross_entropy`, `tg.nn.mse_loss`) against
torch.nn.functional's definitions, values and gradients (through `tg.value_and_grad`
against torch autograd).

Tolerance 1e-6 relative: both sides compute in float32 the same few operations per
element (a max-shifted log-sum-exp over at most 16 classes, a mean over at most a few
hundred terms), so values differ by a few float32 roundings (~1e-7 relative). A
gradient element can be a difference that cancels (cross-entropy's `softmax - 1` at
the target when the softmax is near 1), whose rounding is an ulp of its terms rather
than of the result: the absolute part is 2 ulps of 1 (2^-22) times the weight of one
element in the reduction (1/count for a mean), and 1e-6 of the largest gradient."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.runtime.reference import run_reference

torch = pytest.importorskip("torch")
F = torch.nn.functional


def _loss_graph(kind: str, shape: tuple[int, ...], reduction: str) -> tg.Graph:
    g = tg.Graph(kind)
    pred = g.input("pred", shape, tg.float32)
    if kind == "cross_entropy":
        target = g.input("target", shape[:-1], tg.int32)
        g.output(tg.nn.cross_entropy(pred, target, reduction=reduction))
    else:
        target = g.input("target", shape, tg.float32)
        g.output(tg.nn.mse_loss(pred, target, reduction=reduction))
    return g


def _torch_loss(kind: str, pred: object, target: np.ndarray, reduction: str) -> object:
    if kind == "cross_entropy":
        classes = pred.shape[-1]
        flat = F.cross_entropy(
            pred.reshape(-1, classes),
            torch.tensor(target, dtype=torch.int64).reshape(-1),
            reduction=reduction,
        )
        return flat.reshape(target.shape) if reduction == "none" else flat
    return F.mse_loss(pred, torch.tensor(target), reduction=reduction)


def _feeds(kind: str, shape: tuple[int, ...], seed: int, scale: float) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    pred = (rng.standard_normal(shape) * scale).astype(np.float32)
    if kind == "cross_entropy":
        target = rng.integers(0, shape[-1], shape[:-1]).astype(np.int32)
    else:
        target = rng.standard_normal(shape).astype(np.float32)
    return {"pred": pred, "target": target}


@settings(max_examples=30)
@given(
    kind=st.sampled_from(["cross_entropy", "mse_loss"]),
    shape=st.lists(st.integers(1, 6), min_size=1, max_size=3).map(tuple),
    classes=st.integers(1, 16),
    reduction=st.sampled_from(["mean", "sum", "none"]),
    scale=st.sampled_from([1.0, 30.0]),
    seed=st.integers(0, 2**16),
)
def test_loss_and_gradient_equal_torch(
    kind: str, shape: tuple[int, ...], classes: int, reduction: str, scale: float, seed: int
) -> None:
    """Value (every reduction) and, for the reduced losses, the gradient of the
    prediction; scale 30 makes logits whose naive exp would lose the small classes."""
    shape = (*shape, classes) if kind == "cross_entropy" else shape
    g = _loss_graph(kind, shape, reduction)
    feeds = _feeds(kind, shape, seed, scale)
    pred = torch.tensor(feeds["pred"], requires_grad=True)
    want = _torch_loss(kind, pred, feeds["target"], reduction)
    (value,) = run_reference(g, feeds)
    assert value.shape == tuple(want.shape)
    assert value.dtype == np.float32
    np.testing.assert_allclose(value, want.detach().numpy(), rtol=1e-6, atol=1e-6)
    # the gradient of the summed losses (for "none" too: torch's backward of the sum)
    loss_graph = g if reduction != "none" else _summed(g)
    want.sum().backward()
    loss, grad = run_reference(tg.value_and_grad(loss_graph, wrt="pred"), feeds)
    np.testing.assert_allclose(loss, want.sum().item(), rtol=1e-6, atol=1e-6)
    expected = pred.grad.numpy()
    weight = 1.0 / feeds["target"].size if reduction == "mean" else 1.0
    atol = max(2.0**-22 * weight, 1e-6 * float(np.max(np.abs(expected), initial=0)))
    np.testing.assert_allclose(grad, expected, rtol=1e-6, atol=atol)


def _summed(graph: tg.Graph) -> tg.Graph:
    """`graph` with its one output replaced by that output's sum."""
    out = graph.node(graph.outputs[0])
    g = tg.Graph.from_nodes(graph.name, graph.nodes, [], graph.param_values)
    g.output(tg.Tensor(g, out.id).sum())
    return g


@pytest.mark.parametrize("backend", ["arena", "mlx"])
def test_cross_entropy_gradient_on_every_backend(backend: str) -> None:
    """The gradient graph (gather's scatter_add backward included) runs on the arena
    (bit for bit with the reference) and MLX (float32 rounding)."""
    g = _loss_graph("cross_entropy", (4, 3, 7), "mean")
    feeds = _feeds("cross_entropy", (4, 3, 7), 3, 1.0)
    prog = tg.compile(tg.value_and_grad(g, wrt="pred"))
    want = prog.run(feeds, backend="numpy")
    got = prog.run(feeds, backend=backend)
    for mine, ref in zip(got, want, strict=True):
        if backend == "arena":
            np.testing.assert_array_equal(mine, ref)
        else:
            np.testing.assert_allclose(mine, ref, rtol=1e-5, atol=1e-7)


def test_cross_entropy_target_out_of_range_is_a_run_error() -> None:
    g = _loss_graph("cross_entropy", (2, 5), "mean")
    feeds = {"pred": np.zeros((2, 5), np.float32), "target": np.array([1, 5], np.int32)}
    with pytest.raises(tg.RunError):
        tg.compile(g).run(feeds, backend="numpy")


def test_loss_errors_name_the_culprit() -> None:
    g = tg.Graph("bad")
    logits = g.input("logits", (2, 5), tg.float32)
    with pytest.raises(tg.DTypeError, match=r"targets must be integer.*float32"):
        tg.nn.cross_entropy(logits, g.input("soft", (2,), tg.float32))
    with pytest.raises(tg.ShapeError, match=r"targets %\d+ input.*\(2, 5\)"):
        tg.nn.cross_entropy(logits, g.input("wide", (2, 5), tg.int32))
    with pytest.raises(tg.DTypeError, match=r"logits must be float"):
        tg.nn.cross_entropy(g.input("ids", (2, 5), tg.int32), g.input("t", (2,), tg.int32))
    with pytest.raises(tg.GraphError, match=r"'reduction' must be one of.*'avg'"):
        tg.nn.cross_entropy(logits, g.input("t2", (2,), tg.int32), reduction="avg")
    with pytest.raises(tg.ShapeError, match=r"differ in shape"):
        tg.nn.mse_loss(logits, g.input("row", (5,), tg.float32))
    with pytest.raises(tg.DTypeError, match=r"float16"):
        tg.nn.mse_loss(logits, g.input("half", (2, 5), tg.float16))
