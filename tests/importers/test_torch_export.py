"""Importing torch.export programs: outputs equal PyTorch eager; unsupported ops listed."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch extra is not installed")

import tensorgraph as tg  # noqa: E402
from tensorgraph.planner.buffers import Assignment  # noqa: E402
from tensorgraph.planner.verify import verify_assignment  # noqa: E402
from tests.importers.torch_examples import examples  # noqa: E402

MODELS = examples(small=True)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_imported_model_matches_pytorch_eager(name) -> None:
    module, args = MODELS[name]
    graph = tg.from_torch(module, args, name)
    prog = tg.compile(graph)
    plan = prog.plan
    verify_assignment(plan.buffers, Assignment(dict(plan.buffer_offsets), plan.arena_size), 64)
    feeds = {node.name: a.numpy() for node, a in zip(graph.inputs, args, strict=True)}
    (got,) = prog.run(feeds, backend="arena")
    with torch.no_grad():
        want = module(*args).numpy()
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_weight_only_computations_are_folded() -> None:
    module, args = MODELS["mlp"]
    graph = tg.from_torch(module, args)
    ops = [n.op for n in graph.nodes]
    assert "transpose" not in ops, "nn.Linear's transposed weight is folded into a param"
    assert ops.count("matmul") == 3


class Unsupported(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, 0) + torch.flip(x, [0]) + torch.cumsum(x, 1)


def test_unsupported_ops_are_all_listed_with_their_nodes() -> None:
    with pytest.raises(tg.GraphError, match=r"aten\.cumsum \(nodes cumsum, cumsum_1\).*aten\.flip"):
        tg.from_torch(Unsupported(), (torch.randn(3, 4),))
