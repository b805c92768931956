"""LoRA on a quantized base (QLoRA, issue 27 with issue 24): `tg.quantize` freezes the
base weights as 4-bit codes, a float low-rank adapter on top trains with
`tg.train_step`, and only the adapter moves. The oracle is the same training written by
hand in MLX (`mx.quantized_matmul` on `mx.quantize`'s arrays, `mx.value_and_grad` over
the adapter, plain SGD); numpy and arena agree bit for bit, MLX within float32
rounding. Asking for a quantized weight's gradient is a GraphError naming it."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

import tensorgraph as tg
from tensorgraph.ir.tensor import Tensor

BATCH, FEATURES, OUT, RANK, GROUP, LR, STEPS = 8, 64, 16, 4, 32, 0.5, 4
_rng = np.random.default_rng(5)
W = _rng.uniform(-1, 1, (OUT, FEATURES)).astype(np.float32)
A0 = _rng.uniform(-0.1, 0.1, (FEATURES, RANK)).astype(np.float32)
B0 = _rng.uniform(-0.1, 0.1, (RANK, OUT)).astype(np.float32)
X = _rng.uniform(-1, 1, (BATCH, FEATURES)).astype(np.float32)
T = _rng.uniform(-1, 1, (BATCH, OUT)).astype(np.float32)


def qlora_graph() -> tg.Graph:
    """mean((x @ Wq.T + (x @ A) @ B - t)^2): the base Linear quantized by `tg.quantize`,
    then the adapter added on the quantized graph (so it stays float)."""
    g = tg.Graph("base")
    x = g.input("x", (BATCH, FEATURES))
    g.output(x @ g.param("w", (OUT, FEATURES), value=W).T)
    quantized = tg.quantize(g, bits=4, group_size=GROUP)
    assert "quantized_matmul" in {n.op for n in quantized.nodes}
    base = quantized.node(quantized.outputs[0])
    q = tg.Graph.from_nodes("qlora", quantized.nodes, [], quantized.param_values)
    x = Tensor(q, next(n.id for n in q.inputs if n.name == "x"))
    adapter = (x @ q.param("lora_a", A0.shape, value=A0)) @ q.param("lora_b", B0.shape, value=B0)
    error = Tensor(q, base.id) + adapter - q.input("t", (BATCH, OUT))
    q.output(tg.mean(error * error))
    return q


def mlx_losses() -> list[float]:
    """The hand-written MLX training of the same adapter on mx.quantize's arrays."""
    w, scales, biases = mx.quantize(mx.array(W), group_size=GROUP, bits=4)
    x, t = mx.array(X), mx.array(T)

    def loss(a: mx.array, b: mx.array) -> mx.array:
        base = mx.quantized_matmul(x, w, scales, biases, True, GROUP, 4)
        return mx.mean(mx.square(base + (x @ a) @ b - t))

    step = mx.value_and_grad(loss, argnums=(0, 1))
    a, b, losses = mx.array(A0), mx.array(B0), []
    for _ in range(STEPS):
        value, (da, db) = step(a, b)
        losses.append(value.item())
        a, b = a - LR * da, b - LR * db
    return losses


@pytest.fixture(scope="module")
def program() -> tg.Program:
    step = tg.train_step(qlora_graph(), optimizer=tg.optim.SGD(learning_rate=LR))
    assert {n.name for n in step.states} == {"lora_a", "lora_b"}  # the base is no state
    return tg.compile(step)


def train(program: tg.Program, backend: str) -> tuple[list[np.ndarray], object]:
    state = program.new_state(backend)
    feeds = {"x": X, "t": T}
    return [
        np.asarray(program.run(feeds, backend=backend, state=state)[0]) for _ in range(STEPS)
    ], state


def test_the_adapter_trains_on_a_quantized_base_as_handwritten_mlx_does(program):
    losses, _ = train(program, "numpy")
    np.testing.assert_allclose(losses, mlx_losses(), rtol=1e-5)
    assert losses[-1] < losses[0]


def test_numpy_arena_and_mlx_agree_on_the_qlora_step(program):
    reference, ref_state = train(program, "numpy")
    arena, arena_state = train(program, "arena")
    fast, _ = train(program, "mlx")
    for ref, ours in zip(reference, arena, strict=True):
        np.testing.assert_array_equal(ours, ref)
    np.testing.assert_allclose(fast, reference, rtol=1e-5)
    for name in ("lora_a", "lora_b"):
        np.testing.assert_array_equal(np.asarray(arena_state[name]), np.asarray(ref_state[name]))


def test_by_default_only_the_float_params_are_differentiated():
    vg = tg.value_and_grad(qlora_graph())
    assert len(vg.outputs) == 3  # the loss, then lora_a's and lora_b's gradients


@pytest.mark.parametrize("name", ["w", "w.scales", "w.biases"])
def test_the_gradient_of_a_quantized_weight_is_a_named_error(name):
    with pytest.raises(tg.GraphError, match=rf"{name!r}.*quantized weight, which is frozen"):
        tg.value_and_grad(qlora_graph(), wrt=["lora_a", name])
