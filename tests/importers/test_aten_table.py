"""The ATen handler table against torch: every case of tests/importers/aten_cases.py is
exported as a one-op module, imported, and run on the numpy, arena and mlx backends.

Oracle: torch eager on the same inputs. Integers and bools must be equal; floats agree
to 1e-5 relative (atol 1e-6 for values near 0). MLX float32 transcendental kernels
(exp, erf, tanh, ...) are within a few float32 ulps of torch's, so MLX floats get 1e-5
relative with atol 1e-5. Shapes and dtypes are checked first, exactly. A last test
checks that the cases reach every handler function of the table.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch extra is not installed")

import tensorgraph as tg  # noqa: E402
from tensorgraph.importers.torch_export import (  # noqa: E402
    ATEN,
    decomposition_table,
    from_exported,
)
from tests.importers.aten_cases import CASES, Case  # noqa: E402

BACKENDS = ("numpy", "arena", "mlx")


class OneOp(torch.nn.Module):
    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: torch.Tensor) -> object:
        return self.fn(*args)


def flat(value: object) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    return [t for v in value for t in flat(v)]


HIT: set[str] = set()  # handler names reached by the cases, for the coverage test


def compare(got: np.ndarray, want: np.ndarray, backend: str, where: str) -> None:
    assert got.shape == want.shape, f"{where}: shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"{where}: dtype {got.dtype} != {want.dtype}"
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want, err_msg=where)
        return
    atol = 1e-5 if backend == "mlx" else 1e-6
    scale = 1e-3 if want.dtype == np.float16 else 1e-5
    np.testing.assert_allclose(
        got.astype(np.float64),
        want.astype(np.float64),
        rtol=scale,
        atol=max(atol, scale * 0.1),
        err_msg=where,
    )


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_handler_matches_torch(case: Case) -> None:
    module = OneOp(case.fn)
    with torch.no_grad():
        want = [t.numpy() for t in flat(module(*case.inputs))]
    program = torch.export.export(module, case.inputs)
    program = program.run_decompositions(decomposition_table())
    HIT.update(
        getattr(n.target, "overloadpacket", n.target).__name__
        for n in program.graph.nodes
        if n.op == "call_function" and hasattr(n.target, "overloadpacket")
    )
    graph = from_exported(program, case.id, decompose=False)
    prog = tg.compile(graph)
    feeds = {node.name: t.numpy() for node, t in zip(graph.inputs, case.inputs, strict=True)}
    for backend in BACKENDS:
        got = [np.asarray(o) for o in prog.run(feeds, backend=backend)]
        assert len(got) == len(want), f"{case.id} on {backend}: {len(got)} outputs"
        for k, (g, w) in enumerate(zip(got, want, strict=True)):
            compare(g, w, backend, f"{case.id} output {k} on {backend}")


def test_the_cases_reach_every_handler() -> None:
    if not HIT:
        pytest.fail("run with the handler cases: the coverage is collected by them")
    # The fused composites' handlers (importers/aten_fused.py) have their own tests; the
    # cases below reach the ones a decomposed export keeps (attention, rms_norm, ...).
    reached = {id(ATEN[name]) for name in HIT if name in ATEN}
    missed = sorted(
        name
        for name, fn in ATEN.items()
        if id(fn) not in reached and not fn.__module__.endswith("aten_fused")
    )
    assert not missed, f"handlers no case reaches: {missed}"
