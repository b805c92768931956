"""Importing torch.export programs: outputs equal PyTorch eager; every problem listed."""

from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch extra is not installed")

import tensorgraph as tg  # noqa: E402
from tensorgraph.importers.torch_export import (  # noqa: E402
    decomposition_table,
    from_exported,
    source_line,
)
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


def run(graph: tg.Graph, *args: torch.Tensor) -> list[np.ndarray]:
    feeds = {node.name: a.numpy() for node, a in zip(graph.inputs, args, strict=True)}
    return tg.compile(graph).run(feeds, backend="numpy")


class InPlace(torch.nn.Module):
    """In-place ops as users write them: export keeps them, decomposition removes them."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        y.relu_()
        y.add_(1.0)
        return torch.nn.functional.silu(y, inplace=True) * 2


def test_in_place_ops_are_functionalised() -> None:
    x = torch.randn(4, 5)
    graph = tg.from_torch(InPlace(), (x,))
    # Hand-derived: silu(relu(x) + 1) * 2, with silu(v) = v * sigmoid(v).
    v = np.maximum(x.numpy(), 0) + 1
    np.testing.assert_allclose(run(graph, x)[0], 2 * v / (1 + np.exp(-v)), rtol=1e-6)


class Problems(torch.nn.Module):
    """Three kinds of problem at once: an op without a handler (twice), an argument a
    handler cannot map, and a dtype tensorgraph lacks."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = torch.special.bessel_j0(x)
        b = torch.nn.functional.dropout(x, 0.5, training=True)
        c = x.sum(dtype=torch.float64).float()
        return a + b + c + torch.special.bessel_j0(x * 2)


def test_every_problem_is_listed_at_once_with_nodes_and_source_lines() -> None:
    with pytest.raises(tg.GraphError) as info:
        tg.from_torch(Problems(), (torch.randn(3, 4),), "problems")
    message = str(info.value)
    assert "importing 'problems' failed at step 'import': 4 problem(s)" in message
    assert "special_bessel_j0: unsupported op aten.special_bessel_j0" in message
    assert "special_bessel_j0_1: unsupported op aten.special_bessel_j0" in message
    assert "float64 has no tensorgraph equivalent" in message
    assert "training" in message
    # Each problem points at the user's line in this file, not at torch's internals.
    assert message.count("test_torch_export.py:") == 4
    assert "a = torch.special.bessel_j0(x)" in message


def test_a_failed_export_names_the_step_and_keeps_torchs_error() -> None:
    class DataDependent(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x[x > 0] if x.sum() > 0 else x

    with pytest.raises(tg.GraphError, match=r"'dd' failed at step 'export'") as info:
        tg.from_torch(DataDependent(), (torch.randn(3),), "dd")
    assert info.value.__cause__ is not None, "torch's own error is the cause"


class Casts(torch.nn.Module):
    def forward(self, x: torch.Tensor, n: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (
            x.sum(dtype=torch.float16),
            n.cumsum(0, dtype=torch.int32),
            torch.full_like(x, 7, dtype=torch.int64),
            n.new_ones((2, 2)),
            torch.arange(5, dtype=torch.float32),
            n / 2,
        )


def test_dtype_keywords_are_honoured() -> None:
    x, n = torch.randn(3, 4), torch.arange(6)
    graph = tg.from_torch(Casts(), (x, n))
    got = run(graph, x, n)
    want = [t.numpy() for t in Casts()(x, n)]
    assert [g.dtype for g in got] == [
        np.float16,
        np.int32,
        np.int64,
        np.int64,
        np.float32,
        np.float32,
    ]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-3)


class NoGrad(torch.nn.Module):
    """A no_grad region over a parameter: export wraps it in wrap_with_set_grad_enabled.
    Core ATen ops only, so the raw export imports without decompositions."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.randn(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            y = torch.relu(x * self.scale)
        return y * 2


def test_set_grad_enabled_regions_are_inlined() -> None:
    module, x = NoGrad(), torch.randn(2, 4)
    program = torch.export.export(module, (x,))
    targets = [str(n.target) for n in program.graph.nodes if n.op == "call_function"]
    assert any("wrap_with_set_grad_enabled" in t for t in targets), "export made the wrapper"
    graph = from_exported(program, "nograd", decompose=False)
    with torch.no_grad():
        np.testing.assert_allclose(run(graph, x)[0], module(x).numpy(), rtol=1e-5)


class Rotary(torch.nn.Module):
    """A rotary table from a non-persistent buffer, as transformers builds `inv_freq`."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, 8, 2) / 8), False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        angles = torch.arange(x.shape[0], dtype=torch.float32)[:, None] * self.inv_freq
        return x * torch.cos(angles)


def test_non_persistent_buffers_are_folded_into_params() -> None:
    x = torch.randn(6, 4)
    graph = tg.from_torch(Rotary(), (x,))
    # inv_freq and the arange are weights-only: the whole cos table folds into one param.
    assert {n.op for n in graph.nodes} == {"input", "param", "mul"}
    np.testing.assert_allclose(run(graph, x)[0], Rotary()(x).numpy(), rtol=1e-6)


def test_tensor_metadata_assertions_are_dropped() -> None:
    class Cast(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.to(torch.float16) + 1

    program = torch.export.export(Cast(), (torch.randn(3),))
    program = program.run_decompositions(decomposition_table())
    targets = [str(n.target) for n in program.graph.nodes]
    assert any("_assert_tensor_metadata" in t for t in targets), "export made the assertion"
    graph = from_exported(program, decompose=False)
    assert all("assert" not in n.op for n in graph.nodes)


def test_fused_composites_stay_whole_only_with_a_handler() -> None:
    table = decomposition_table()
    kept = {op.name() for op in torch.export.default_decompositions()} - {op.name() for op in table}
    from tensorgraph.importers.torch_export import ATEN, FUSED_COMPOSITES

    for name in kept:
        op = name.split("::")[-1].split(".")[0]
        assert op in FUSED_COMPOSITES and op in ATEN


def test_source_line_is_the_last_frame_outside_torch() -> None:
    node = SimpleNamespace(
        meta={
            "stack_trace": (
                'File "/home/u/model.py", line 7, in forward\n    y = self.f(x)\n'
                'File "/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py", '
                "line 125, in forward\n    return F.linear(input, self.weight)\n"
            )
        }
    )
    assert source_line(node) == "/home/u/model.py:7 in forward: y = self.f(x)"


def test_an_input_of_a_dtype_tensorgraph_lacks_is_listed_with_the_other_problems() -> None:
    class Double(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return x.float() + torch.special.bessel_j0(y)

    with pytest.raises(tg.GraphError, match=r"2 problem\(s\)") as info:
        tg.from_torch(Double(), (torch.randn(3, dtype=torch.float64), torch.randn(3)))
    assert "x: user_input of torch.float64" in str(info.value)
    assert "unsupported op aten.special_bessel_j0" in str(info.value)


def test_a_data_dependent_shape_is_a_listed_problem_not_a_crash() -> None:
    # x[x > 0] exports (its length is an unbacked symbol); the importer used to call
    # int() on that symbol and let torch's GuardOnDataDependentSymNode escape.
    class MaskIndex(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x[x > 0] * 2

    with pytest.raises(tg.GraphError, match=r"failed at step 'import'") as info:
        tg.from_torch(MaskIndex(), (torch.randn(5),), "mask")
    message = str(info.value)
    assert "index with a bool index tensor is not supported" in message
    assert "depends on the data" in message
    assert message.count("test_torch_export.py:") >= 2


def test_a_dynamic_input_dimension_without_upper_bound_is_a_listed_problem() -> None:
    # A bounded one imports as a tg.Dim (tests/importers/test_dynamic_import.py).
    class Double(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return (x * 2).relu()

    batch = torch.export.Dim("batch", min=2)
    program = torch.export.export(Double(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: batch}})
    with pytest.raises(tg.GraphError) as info:
        from_exported(program, "dynamic")
    message = str(info.value)
    assert "dynamic dim 'batch'" in message and "no upper bound" in message
    assert "x: user_input: shape (s" in message and "is dynamic" in message
