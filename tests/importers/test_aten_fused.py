"""Attention and normalisation modules imported through torch.export become the fused
ops and equal PyTorch eager: plain export (the composite ATen ops), the core-ATen
`native_*` forms a decomposition table produces, and the CPU flash-attention op."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch extra is not installed")
F = torch.nn.functional

import tensorgraph as tg  # noqa: E402
from tensorgraph.importers.torch_export import from_exported  # noqa: E402

FUSED = {"scaled_dot_product_attention", "layer_norm", "rms_norm", "group_norm"}


class Attention(torch.nn.Module):
    def __init__(self, causal: bool, scale: float | None = None, gqa: bool = False) -> None:
        super().__init__()
        self.causal, self.scale, self.gqa = causal, scale, gqa

    def forward(self, q, k, v, mask=None):
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=self.causal, scale=self.scale, enable_gqa=self.gqa
        )


class Norms(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln = torch.nn.LayerNorm(8)
        self.ln2 = torch.nn.LayerNorm((3, 8), elementwise_affine=False)
        self.rms = torch.nn.RMSNorm(8)
        self.gn = torch.nn.GroupNorm(2, 4)
        for p in self.parameters():  # random affine parameters, not the 1/0 defaults
            torch.nn.init.uniform_(p, -2, 2)

    def forward(self, x, image):
        return self.ln(x) + self.ln2(x) * self.rms(x), self.gn(image)


def rand(*shape: int) -> torch.Tensor:
    return torch.rand(*shape, generator=torch.Generator().manual_seed(sum(shape))) * 4 - 2


def check(graph: tg.Graph, module: torch.nn.Module, args: tuple, fused: set[str]) -> None:
    """`graph` holds the fused ops and, on the arena and MLX backends, equals eager."""
    assert fused <= {n.op for n in graph.nodes}
    prog = tg.compile(graph)
    feeds = {node.name: a.numpy() for node, a in zip(graph.inputs, args, strict=True)}
    with torch.no_grad():
        want = module(*args)
    want = [w.numpy() for w in (want if isinstance(want, tuple) else (want,))]
    for backend in ("arena", "mlx"):
        for got, expected in zip(prog.run(feeds, backend=backend), want, strict=True):
            assert got.shape == expected.shape and got.dtype == expected.dtype
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


ATTENTION_CASES = {
    "plain": (Attention(False), (rand(1, 2, 5, 8), rand(1, 2, 5, 8), rand(1, 2, 5, 8))),
    "causal-square": (Attention(True), (rand(2, 2, 4, 8), rand(2, 2, 4, 8), rand(2, 2, 4, 8))),
    # L != S: torch's causal mask is top-left aligned, passed as an explicit bool mask
    "causal-L<S": (Attention(True, 0.2), (rand(1, 2, 3, 8), rand(1, 2, 6, 8), rand(1, 2, 6, 8))),
    "gqa": (Attention(False, gqa=True), (rand(1, 4, 3, 8), rand(1, 2, 5, 8), rand(1, 2, 5, 8))),
    "bool-mask": (
        Attention(False),
        (rand(1, 2, 3, 8), rand(1, 2, 5, 8), rand(1, 2, 5, 8), rand(3, 5) > -1.0),
    ),
    "float-mask": (
        Attention(False),
        (rand(1, 2, 3, 8), rand(1, 2, 5, 8), rand(1, 2, 5, 8), rand(1, 1, 3, 5)),
    ),
    # zero-size: torch's default scale over head dim 0 averages v; zero keys give zeros
    "head-dim-0": (Attention(False), (rand(1, 2, 3, 0), rand(1, 2, 5, 0), rand(1, 2, 5, 4))),
    "zero-keys": (Attention(False), (rand(1, 2, 3, 8), rand(1, 2, 0, 8), rand(1, 2, 0, 8))),
}


@pytest.mark.parametrize("name", sorted(ATTENTION_CASES))
def test_attention_imports_as_the_fused_op(name) -> None:
    module, args = ATTENTION_CASES[name]
    check(tg.from_torch(module, args, name), module, args, {"scaled_dot_product_attention"})


def test_norm_modules_import_as_the_fused_ops() -> None:
    module, args = Norms().eval(), (rand(2, 3, 8), rand(2, 4, 3, 3))
    check(tg.from_torch(module, args), module, args, {"layer_norm", "rms_norm", "group_norm"})


def test_core_aten_native_norms_import_as_the_fused_ops() -> None:
    from torch._decomp import core_aten_decompositions

    module, args = Norms().eval(), (rand(2, 3, 8), rand(2, 4, 3, 3))
    program = torch.export.export(module, args).run_decompositions(core_aten_decompositions())
    targets = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert {"aten.native_layer_norm.default", "aten.native_group_norm.default"} <= targets
    check(from_exported(program, "norms"), module, args, {"layer_norm", "group_norm"})


class FlashCPU(torch.nn.Module):
    def forward(self, q, k, v):
        out, _ = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, is_causal=True)
        return out


def test_cpu_flash_attention_imports_as_the_fused_op() -> None:
    args = (rand(1, 2, 4, 8), rand(1, 2, 4, 8), rand(1, 2, 4, 8))
    check(tg.from_torch(FlashCPU(), args), FlashCPU(), args, {"scaled_dot_product_attention"})


class ReadsStatistics(torch.nn.Module):
    def forward(self, x):
        out, mean, _ = torch.ops.aten.native_layer_norm(x, [4], None, None, 1e-5)
        return out + mean


def test_reading_an_autograd_statistic_names_the_node() -> None:
    with pytest.raises(tg.GraphError, match=r"native_layer_norm: its mean output is for autograd"):
        tg.from_torch(ReadsStatistics(), (rand(2, 4),))


class Dropout(torch.nn.Module):
    def forward(self, q):
        return F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)


def test_attention_dropout_is_refused() -> None:
    with pytest.raises(tg.GraphError, match=r"dropout_p=0.5"):
        tg.from_torch(Dropout(), (rand(1, 1, 2, 4),))


class EfficientAttention(torch.nn.Module):
    """The memory-efficient kernel export keeps for CUDA; CPU eager cannot run it, so the
    oracle is the same attention through F.scaled_dot_product_attention."""

    def forward(self, q, k, v, bias):
        out, *_ = torch.ops.aten._scaled_dot_product_efficient_attention(
            q, k, v, bias, False, scale=0.25
        )
        return out


class ReferenceAttention(torch.nn.Module):
    def forward(self, q, k, v, bias):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=0.25)


def test_efficient_attention_imports_as_the_fused_op() -> None:
    args = (rand(1, 2, 4, 8), rand(1, 2, 6, 8), rand(1, 2, 6, 8), rand(1, 2, 4, 6))
    graph = tg.from_torch(EfficientAttention(), args)
    check(graph, ReferenceAttention(), args, {"scaled_dot_product_attention"})
