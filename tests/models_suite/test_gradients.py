"""Every parameter gradient of the 16 suite models equals torch autograd (issue 27's
target: relative 1e-4, float32), at CI sizes. Slow: the 16 backward passes through the
NumPy reference take minutes; tests/autodiff/test_torch_gradients.py runs two of these
models (squeezenet1_1, bert) in every CI run. Compiled with `GRADIENT_ONLY` (program
order, greedy offsets): the default schedule search was most of the time and does not
change what the reference computes (benches/README.md, "Autodiff tests' cost").

The loss and the tolerance are that module's (the sum of the output times fixed random
weights; 1e-4 relative plus 1e-4 of the model's largest gradient), and the import keeps
the weights unfolded, so each torch parameter is a param of the graph (a tied one too,
once: see `_aliases`)."""

from __future__ import annotations

import pytest

import tensorgraph as tg

torch = pytest.importorskip("torch")
catalog = pytest.importorskip("tests.models_suite.catalog")


@pytest.mark.slow
@pytest.mark.parametrize("name", catalog.MODELS)
def test_every_parameter_gradient_equals_torch_autograd(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tensorgraph.importers import torch_export
    from tests.autodiff.test_torch_gradients import GRADIENT_ONLY, _close, _with_loss

    monkeypatch.setattr(torch_export, "fold_weights", lambda graph: graph)
    torch.manual_seed(0)
    module, args = catalog.build(name, False)
    module.eval()
    graph, weights = _with_loss(tg.from_torch(module, args))
    aliases = _aliases(module, {n.name for n in graph.params})
    wrt = [alias for names in aliases.values() for alias in names]
    feeds = {n.name: a.numpy() for n, a in zip(graph.inputs, args, strict=True)}
    ours = tg.compile(tg.value_and_grad(graph, wrt), **GRADIENT_ONLY).run(feeds, backend="numpy")
    grads = dict(zip(wrt, ours[1:], strict=True))
    module.zero_grad()
    loss = (module(*args) * torch.tensor(weights)).sum()
    loss.backward()
    assert float(ours[0]) == pytest.approx(loss.item(), rel=1e-4, abs=1e-4)
    found = dict(module.named_parameters())
    summed = [sum(grads[alias] for alias in aliases[key]) for key in aliases]
    _close(summed, [found[key].grad.numpy() for key in aliases], list(aliases))


def _aliases(module: object, params: set[str]) -> dict[str, list[str]]:
    """Each trainable torch parameter (by its first name) -> the graph params that hold
    it. A tied weight (T5's shared embedding, also its encoder's embed_tokens) is one
    torch Parameter under several names; the importer makes it one param under its
    first name (importers.torch_export), so autograd's gradient of the Parameter is that
    param's. Every parameter must be held by exactly one graph param."""
    names: dict[int, list[str]] = {}
    first: dict[int, str] = {}
    for key, p in module.named_parameters(remove_duplicate=False):
        if p.requires_grad:
            first.setdefault(id(p), key)
            if key in params:
                names.setdefault(id(p), []).append(key)
    missing = [key for i, key in first.items() if not names.get(i)]
    assert not missing, f"torch parameters with no graph param: {missing}"
    split = {first[i]: held for i, held in names.items() if len(held) > 1}
    assert not split, f"tied torch parameters imported as several params: {split}"
    return {key: names[i] for i, key in first.items()}
