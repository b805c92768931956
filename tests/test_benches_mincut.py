"""benches/bench_mincut.py's two measurements at tiny sizes: torch's side
(benches/mincut_torch.py) runs the partitioned graphs it records, so its loss and
gradients are eager torch's, and it prices aten ops as planner/flops.py prices the same
ops; tensorgraph's side counts as saved exactly the forward values the backward reads."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.compiler import _rewrite
from tensorgraph.planner.flops import flops

torch = pytest.importorskip("torch", reason="the models extra is not installed")

BENCHES = Path(__file__).resolve().parents[1] / "benches"
sys.path.insert(0, str(BENCHES))
import mincut_torch  # noqa: E402
from bench_mincut import held_for_backward, saved_bytes  # noqa: E402


class TwoLayers(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(8, 16)
        self.b = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.nn.functional.gelu(self.a(x), approximate="tanh"))


def _ce(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(out, target)


def test_min_cut_step_runs_the_partition_it_records():
    torch.manual_seed(0)
    module, x, target = TwoLayers(), torch.randn(5, 8), torch.tensor([0, 3, 1, 2, 3])
    step = mincut_torch.min_cut_step(module, _ce, (x,), target)
    loss = _ce(module(x), target)
    loss.backward()
    assert step.loss == pytest.approx(float(loss.detach()), rel=1e-6)
    for name, p in module.named_parameters():
        np.testing.assert_allclose(step.grads[name], p.grad, rtol=1e-5, atol=1e-7)
    # Saved: some forward values, never the inputs; at most every forward value once
    # (5x16 hidden values through gelu's 8 ops, 5x4 logits and their log-softmax).
    assert 0 < step.saved_bytes <= 4 * (5 * 16 * 9 + 5 * 4 * 2)
    assert step.recompute_flops >= 0


@given(st.integers(1, 6), st.integers(1, 6), st.integers(1, 6))
def test_torch_ops_are_priced_as_tensorgraph_prices_them(m, k, n):
    """mm, a transpose, tanh and a sum, traced by make_fx, against planner/flops.py on the
    same ops built in tensorgraph: 2*M*N*K, 0, one per element, one per input element."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(a, b):
        return torch.tanh(a @ b.t()).sum(dim=0)

    traced = make_fx(f)(torch.randn(m, k), torch.randn(n, k))
    priced = {
        str(node.target).split(".")[1]: mincut_torch.node_flops(node)
        for node in traced.graph.nodes
        if node.op == "call_function"
    }
    g = tg.Graph("f")
    a, b = g.input("a", (m, k), tg.float32), g.input("b", (n, k), tg.float32)
    t = tg.transpose(b)
    product = a @ t
    tanh = tg.tanh(product)
    total = tanh.sum(axis=0)
    built = {"t": t, "mm": product, "tanh": tanh, "sum": total}
    ours = {key: flops(g, g.node(v.id)) for key, v in built.items()}
    assert priced == ours


def test_saved_bytes_are_the_forward_values_the_backward_reads():
    """loss = sum(exp(x @ w)): exp's derivative is its own output and matmul's gradient
    for w reads x (an input), so the backward holds exactly exp's output, 3x5 float32;
    recomputing it (a budget below keeping it) saves nothing."""
    g = tg.Graph("f")
    x, w = g.input("x", (3, 4), tg.float32), g.param("w", (4, 5), tg.float32)
    g.output(tg.exp(x @ w).sum())
    vg = tg.value_and_grad(g)
    keep = tg.compile(vg)
    rewritten, _ = _rewrite(vg, keep.options, False)
    held = held_for_backward(rewritten)
    assert [rewritten.node(u).op for u in held] == ["exp"] and list(held.values()) == [60]
    assert saved_bytes(held, keep) == 60
