"""Gradients against torch autograd (the `torch` extra): the zoo MLP against the same
computation written in torch, and imported models of the real-model suite (a CNN and a
transformer, CI sizes) against autograd through the torch modules themselves. The loss
is the sum of the model's output times fixed weights.

Tolerance: relative 1e-4 per element, plus 1e-4 of the model's largest gradient:
both sides compute in float32, summing the same terms in different orders (BLAS
blocking, NumPy's pairwise sums), which moves a sum of n terms by ~n * 2^-24 of its
largest term; with n <= ~1e3 here that is below 1e-4 of the scale."""

from __future__ import annotations

import numpy as np
import pytest

import tensorgraph as tg
from tensorgraph.ir.tensor import Tensor
from tensorgraph.models import mlp

torch = pytest.importorskip("torch")
catalog = pytest.importorskip("tests.models_suite.catalog")


def _with_loss(graph: tg.Graph, seed: int = 0) -> tuple[tg.Graph, np.ndarray]:
    """`graph` (one output) with its output replaced by sum(output * weights), and the
    weights."""
    out = graph.node(graph.outputs[0])
    weights = np.random.default_rng(seed).uniform(-1, 1, out.shape).astype(np.float32)
    g = tg.Graph.from_nodes(graph.name, graph.nodes, [], graph.param_values)
    g.output((Tensor(g, out.id) * g.constant(weights)).sum())
    return g, weights


def _close(ours: list[np.ndarray], theirs: list[np.ndarray], names: list[str]) -> None:
    """Each gradient within the tolerance of the module docstring, its scale the largest
    gradient magnitude of the whole model: a gradient that is exactly 0 in real
    arithmetic (a key bias under softmax's shift invariance) is rounding noise of terms
    as large as the others on both sides."""
    scale = max(float(np.max(np.abs(t), initial=0)) for t in theirs)
    for mine, want, name in zip(ours, theirs, names, strict=True):
        assert mine.shape == want.shape, name
        np.testing.assert_allclose(mine, want, rtol=1e-4, atol=1e-4 * scale, err_msg=name)


def test_zoo_mlp_gradients_equal_torch() -> None:
    model = mlp(batch=4, features=16, hidden=32, layers=2, classes=5)
    g, weights = _with_loss(model.graph)
    feeds = model.inputs(0)
    vg = tg.value_and_grad(g)
    names = [n.name for n in g.params if n.dtype.is_float]
    ours = tg.compile(vg).run(feeds, backend="numpy")
    params = {k: torch.tensor(v, requires_grad=True) for k, v in g.param_values.items()}
    h = torch.tensor(feeds["x"])
    for i in range(2):
        h = torch.relu(h @ params[f"w{i}"] + params[f"b{i}"])
    loss = ((h @ params["head"]) * torch.tensor(weights)).sum()
    loss.backward()
    assert float(ours[0]) == pytest.approx(loss.item(), rel=1e-5)
    _close(ours[1:], [params[name].grad.numpy() for name in names], names)


# What these tests check is the gradients' values, which the reference executor computes
# node by node whatever the order and the offsets; the default schedule search is what
# made them slow (mobilenet_v3_large: ~870 liveness and alias analyses of its 2,870-node
# gradient graph, 98% of the test's time; benches/README.md, "Autodiff tests' cost").
# Plans of gradient graphs and steps are checked by the remat and training tests.
GRADIENT_ONLY = {"schedule": "program", "planner": "greedy_size"}

# Two suite models run in CI (a CNN and a transformer, ~5-10 s each). All sixteen are
# tests/models_suite/test_gradients.py's (slow), with the same loss and tolerance and a
# stricter check of tied weights; this test ran the other fourteen a second time.
_CI = ("squeezenet1_1", "bert")


@pytest.mark.parametrize("name", _CI)
def test_suite_model_gradients_equal_torch_autograd(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every parameter of the torch module is a param of the imported graph, and its
    gradient equals autograd's. The importer folds computations on weights alone into
    new params (a transposed linear weight becomes `folded.<id>`), which would hide
    torch's parameters from the gradient: the import here keeps them unfolded. A tied
    parameter (T5's shared embedding, also `encoder.embed_tokens`) may be read under
    any of its names: its gradient is the sum over them."""
    from tensorgraph.importers import torch_export

    monkeypatch.setattr(torch_export, "fold_weights", lambda graph: graph)
    module, args = catalog.build(name, False)
    module.eval()
    graph, weights = _with_loss(tg.from_torch(module, args))
    declared = {n.name for n in graph.params}
    tied: dict[int, list[str]] = {}  # one tensor -> its names the graph declares
    for key, p in module.named_parameters(remove_duplicate=False):
        if p.requires_grad:
            tied.setdefault(id(p), []).extend([key] if key in declared else [])
    assert all(tied.values())
    names = [keys[0] for keys in tied.values()]  # named_parameters' name of each tensor
    wrt = [key for keys in tied.values() for key in keys]
    vg = tg.value_and_grad(graph, wrt)
    feeds = {n.name: a.numpy() for n, a in zip(graph.inputs, args, strict=True)}
    value, *outputs = tg.compile(vg, **GRADIENT_ONLY).run(feeds, backend="numpy")
    grads = dict(zip(wrt, outputs, strict=True))
    ours = [sum(grads[key] for key in keys) for keys in tied.values()]
    module.zero_grad()
    loss = (module(*args) * torch.tensor(weights)).sum()
    loss.backward()
    assert float(value) == pytest.approx(loss.item(), rel=1e-4, abs=1e-4)
    # autograd leaves .grad None for a parameter the output does not read: its gradient is 0
    found = dict(module.named_parameters())
    theirs = [
        np.zeros(found[k].shape, np.float32) if found[k].grad is None else found[k].grad.numpy()
        for k in names
    ]
    _close(ours, theirs, names)
