"""Imported models train as torch trains them (issue 27, item 5): `tg.from_torch` of a
suite CNN and a suite transformer, plus a loss helper, trained 10 steps by
`tg.train_step` with `tg.optim.AdamW(bias_correction=True)`, give the losses of the
same module trained by `torch.optim.AdamW` step by step.

Why bias_correction=True is torch's AdamW: torch (torch/optim/adamw.py, single-tensor
path) decays `p *= 1 - lr wd`, then `m = lerp(m, g, 1 - b1)`, `v = b2 v + (1 - b2) g^2`
and `p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)`; MLX's (and tg.optim's)
with bias correction is `p (1 - lr wd) - (lr / (1 - b1^t)) m / (sqrt(v) rsqrt(1 - b2^t) +
eps)`: the same real-number formula, computed with other roundings (a lerp against two
products, a division by a square root against a product with a reciprocal one, bias
corrections in float64 against float32). They differ by a few float32 ulps per update.

Tolerance 1e-4 relative on each loss (the issue's bar): both runs are float32, and the
gradients already agree within ~1e-5 relative (tests/autodiff/test_torch_gradients.py).
That bounds the losses only where the run itself is well conditioned: Adam's first
steps move every weight by about lr whatever its gradient's size, so a gradient element
near zero takes the sign its rounding gives it, and a run whose loss jumps (squeezenet
on a batch of 2 at lr 1e-3 goes 6.6, 2.7, 0.8, 6.9, ...) amplifies that into torch's
own float32 and float64 runs differing by 6e-4 at step 9. So every comparison first
checks its premise: torch's float32 losses match torch's float64 losses within
CONDITIONED (an order below the bar), and each model trains at a learning rate where
that holds (measured: squeezenet at lr 1e-4 within 1.8e-6; at 3e-4 it is 1e-3). There
ours is within 1.8e-5 of torch at step 10, drifting steadily from float64 where torch's
float32 run does not: the bias corrections MLX's formula computes in float32 are the
likely part (1 - 0.999^1 is 9.99987e-4 in float32, so the first step is 6.4e-6 longer).

The modules stay in eval mode on both sides (the importer exports eval mode: no dropout,
batch norm on its running statistics) and are imported without weight folding, which
would hide torch's parameters behind folded.<id> params."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import tensorgraph as tg
from tensorgraph.ir.tensor import Tensor

torch = pytest.importorskip("torch")
catalog = pytest.importorskip("tests.models_suite.catalog")
nn = torch.nn

STEPS = 10
LEARNING_RATE = 1e-3
CONDITIONED = 1e-5  # torch float32 against float64: the run amplifies no rounding


def _unfolded(monkeypatch: pytest.MonkeyPatch) -> None:
    from tensorgraph.importers import torch_export

    monkeypatch.setattr(torch_export, "fold_weights", lambda graph: graph)


def _with_loss(graph: tg.Graph, kind: str, target_shape: tuple[int, ...]) -> tg.Graph:
    """`graph` (one output) with its output replaced by the loss of it against a new
    input "target": cross-entropy over the last axis (int32 classes) or MSE."""
    out = graph.node(graph.outputs[0])
    g = tg.Graph.from_nodes(graph.name, graph.nodes, [], graph.param_values)
    if kind == "cross_entropy":
        target = g.input("target", target_shape, tg.int32)
        g.output(tg.nn.cross_entropy(Tensor(g, out.id), target))
    else:
        target = g.input("target", target_shape, tg.float32)
        g.output(tg.nn.mse_loss(Tensor(g, out.id), target))
    return g


def _torch_losses(
    module: object, args: tuple, kind: str, target: np.ndarray, learning_rate: float
) -> list[float]:
    """torch's AdamW losses, in the dtype of `module`'s parameters (float args cast to it)."""
    dtype = next(module.parameters()).dtype
    args = tuple(a.to(dtype) if a.is_floating_point() else a for a in args)
    optimizer = torch.optim.AdamW(module.parameters(), lr=learning_rate, foreach=False)
    losses = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        out = module(*args)
        if kind == "cross_entropy":
            classes = out.shape[-1]
            flat = torch.tensor(target, dtype=torch.int64).reshape(-1)
            loss = torch.nn.functional.cross_entropy(out.reshape(-1, classes), flat)
        else:
            loss = torch.nn.functional.mse_loss(out, torch.tensor(target).to(dtype))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def _train_both(
    name: str | object, kind: str, args: tuple, learning_rate: float = LEARNING_RATE
) -> tuple[list, list]:
    """(our 10 losses, torch's) for the suite model `name` (or a module) on `args`, after
    checking that torch's float32 run is within CONDITIONED of its float64 run."""
    torch.manual_seed(0)
    module, _ = catalog.build(name, False) if isinstance(name, str) else (name, None)
    module.eval()
    graph = tg.from_torch(module, args)
    out = graph.node(graph.outputs[0])
    rng = np.random.default_rng(1)
    if kind == "cross_entropy":
        target = rng.integers(0, out.shape[-1], out.shape[:-1]).astype(np.int32)
    else:
        target = rng.standard_normal(out.shape).astype(np.float32)
    names = [k for k, p in module.named_parameters() if p.requires_grad]
    loss_graph = _with_loss(graph, kind, target.shape)
    optimizer = tg.optim.AdamW(learning_rate=learning_rate, bias_correction=True)
    program = tg.compile(tg.train_step(loss_graph, optimizer=optimizer, wrt=names))
    feeds = {n.name: a.numpy() for n, a in zip(graph.inputs, args, strict=True)}
    feeds["target"] = target
    state = program.new_state("numpy")
    ours = [float(program.run(feeds, backend="numpy", state=state)[0]) for _ in range(STEPS)]
    exact = _torch_losses(copy.deepcopy(module).double(), args, kind, target, learning_rate)
    theirs = _torch_losses(module, args, kind, target, learning_rate)
    np.testing.assert_allclose(theirs, exact, rtol=CONDITIONED, err_msg="ill-conditioned run")
    return ours, theirs


@pytest.mark.slow
def test_suite_cnn_trains_as_torch_adamw(monkeypatch: pytest.MonkeyPatch) -> None:
    """squeezenet1_1 (the suite's CI image size, 64x64; a batch of 2) under cross-entropy
    against random classes, at lr 1e-4 (at 1e-3 its loss jumps and the run is chaotic in
    float32: see the module docstring)."""
    _unfolded(monkeypatch)
    torch.manual_seed(2)
    args = (torch.randn(2, 3, 64, 64),)
    ours, theirs = _train_both("squeezenet1_1", "cross_entropy", args, learning_rate=1e-4)
    assert theirs[-1] < theirs[0]  # the run really trains: the comparison is not vacuous
    np.testing.assert_allclose(ours, theirs, rtol=1e-4)


@pytest.mark.slow
def test_suite_transformer_trains_as_torch_adamw(monkeypatch: pytest.MonkeyPatch) -> None:
    """bert (the suite's config: 2 layers, width 64; 32 tokens) under MSE of its last
    hidden state against a random target."""
    _unfolded(monkeypatch)
    torch.manual_seed(3)
    ours, theirs = _train_both("bert", "mse_loss", (torch.randint(0, 1000, (1, 32)),))
    assert theirs[-1] < theirs[0]
    np.testing.assert_allclose(ours, theirs, rtol=1e-4)


class TinyCNN(nn.Module):
    """conv + batch norm + ReLU + max pool, conv + ReLU, global mean, linear: the
    suite CNNs' layer kinds at CI-fast sizes."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.head = nn.Linear(16, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = nn.functional.max_pool2d(torch.relu(self.bn(self.conv1(x))), 2)
        h = torch.relu(self.conv2(h))
        return self.head(h.mean(dim=(2, 3)))


class TinyTransformer(nn.Module):
    """Token embedding, one pre-norm encoder layer (torch's own multi-head attention and
    GELU MLP), a vocabulary head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, 32)
        self.layer = nn.TransformerEncoderLayer(
            32, 4, 64, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
        )
        self.head = nn.Linear(32, 50)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.layer(self.embed(tokens)))


def test_small_cnn_trains_as_torch_adamw(monkeypatch: pytest.MonkeyPatch) -> None:
    _unfolded(monkeypatch)
    torch.manual_seed(4)
    module = TinyCNN()
    ours, theirs = _train_both(module, "cross_entropy", (torch.randn(2, 3, 8, 8),))
    assert theirs[-1] < theirs[0]
    np.testing.assert_allclose(ours, theirs, rtol=1e-4)


def test_small_transformer_trains_as_torch_adamw(monkeypatch: pytest.MonkeyPatch) -> None:
    """Next-token-style cross-entropy over the vocabulary at every position."""
    _unfolded(monkeypatch)
    torch.manual_seed(5)
    module = TinyTransformer()
    ours, theirs = _train_both(module, "cross_entropy", (torch.randint(0, 50, (2, 8)),))
    assert theirs[-1] < theirs[0]
    np.testing.assert_allclose(ours, theirs, rtol=1e-4)
