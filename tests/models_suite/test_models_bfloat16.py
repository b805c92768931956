"""The suite's models in bfloat16, imported as torch runs them (`model.to(torch.bfloat16)`).

Each model of catalog.py (CI sizes) is cast to bfloat16 in torch, float inputs included,
and imported as it is: its graph computes in bfloat16 (each op in float32, rounded once
to bfloat16: the reference's semantics). The arena executor must equal the numpy
reference bit for bit, and the reference and MLX must each be within
`rounding_tolerance(graph, bfloat16, scale)` of torch's own bfloat16 output (scale: the
largest magnitude of torch's output), the bound derived from bfloat16's epsilon and the
graph's depth, not a constant picked to pass (measured: torch is 0 to 1.4e-2 of the
scale away, the bound 0.12 to 0.37 of it). The seven text models run in CI (about 10 s
on 2 cores); the nine vision models (about 50 s) are slow-marked.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the models extra is not installed")
pytest.importorskip("transformers", reason="the models extra is not installed")

import tensorgraph as tg  # noqa: E402
from tensorgraph.passes.to_dtype import rounding_tolerance  # noqa: E402
from tests.models_suite.catalog import MODELS, VISION, build  # noqa: E402

BACKENDS = ("numpy", "arena", "mlx")


def _numpy(x: torch.Tensor) -> np.ndarray:
    """A torch tensor as NumPy, bfloat16 kept as ml_dtypes' bfloat16 (exact)."""
    if x.dtype == torch.bfloat16:
        return x.float().numpy().astype(ml_dtypes.bfloat16)
    return x.numpy()


def check_bfloat16(name: str, module: torch.nn.Module, inputs: tuple) -> None:
    module = module.to(torch.bfloat16)
    inputs = tuple(x.to(torch.bfloat16) if x.is_floating_point() else x for x in inputs)
    with torch.no_grad():
        want = module(*inputs)
    assert want.dtype == torch.bfloat16, f"{name}: torch's output is {want.dtype}"
    want = want.float().numpy().astype(np.float64)
    scale = float(np.max(np.abs(want)))
    assert scale > 0, f"{name}: torch's output is all zeros"
    graph = tg.from_torch(module, inputs, name)
    (output,) = (graph.node(o) for o in graph.outputs)
    assert output.dtype == tg.bfloat16, f"{name}: imported output is {output.dtype}"
    prog = tg.compile(graph)
    feeds = {node.name: _numpy(x) for node, x in zip(graph.inputs, inputs, strict=True)}
    got = {backend: np.asarray(prog.run(feeds, backend=backend)[0]) for backend in BACKENDS}
    for backend, value in got.items():
        assert value.shape == want.shape, f"{name} on {backend}: shape {value.shape}"
        assert value.dtype == ml_dtypes.bfloat16, f"{name} on {backend}: dtype {value.dtype}"
    assert got["arena"].tobytes() == got["numpy"].tobytes(), f"{name}: arena != reference"
    bound = rounding_tolerance(prog.graph, tg.bfloat16, scale)
    for backend in ("numpy", "mlx"):
        gap = float(np.max(np.abs(got[backend].astype(np.float64) - want)))
        assert gap <= bound, f"{name} on {backend}: {gap:.4g} from torch's bf16 > {bound:.4g}"


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n in VISION else n for n in MODELS]
)
def test_bfloat16_model_matches_torch_bfloat16_on_every_backend(name: str) -> None:
    check_bfloat16(name, *build(name, full=False))
