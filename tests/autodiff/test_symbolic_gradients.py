"""Gradients and training steps on symbolic shapes (issue 27 with issue 26): one
gradient graph or training program over a `tg.Dim` serves every length, and at each
length it computes bit for bit what the static graph at that length computes (numpy and
arena), MLX within float32 rounding. The static graphs' gradients are checked against
finite differences by test_value_and_grad's property, so equality carries that over."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.ir.specialize import specialize
from tests.autodiff.symbolic_strategies import SEQ, symbolic_differentiable_graphs


def feeds_at(graph: tg.Graph, length: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed + length)
    return {
        n.name: rng.uniform(-1, 1, specialize_shape(n.shape, length)).astype(np.float32)
        for n in graph.inputs
    }


def specialize_shape(shape: tuple, length: int) -> tuple[int, ...]:
    return tuple(int(d.subs(SEQ, length)) if hasattr(d, "subs") else d for d in shape)


def check_gradients_at_lengths(graph: tg.Graph, lengths: list[int]) -> None:
    symbolic = tg.compile(tg.value_and_grad(graph))
    assert type(symbolic.plan).__name__ == "ParametricPlan"
    for length in lengths:
        static = tg.compile(tg.value_and_grad(specialize(graph, seq=length)))
        feeds = feeds_at(graph, length)
        expected = static.run(feeds, backend="numpy")
        for backend in ("numpy", "arena"):
            got = symbolic.run(feeds, backend=backend)
            for ours, theirs in zip(got, expected, strict=True):
                assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
                np.testing.assert_array_equal(ours, theirs, err_msg=f"{backend} at {length}")


@settings(max_examples=6)
@given(
    graph=symbolic_differentiable_graphs(),
    lengths=st.lists(st.integers(2, 6), min_size=2, max_size=3, unique=True),
)
def test_symbolic_gradients_equal_the_static_graph_at_every_length(graph, lengths):
    check_gradients_at_lengths(graph, lengths)


@pytest.mark.slow
@settings(max_examples=60)
@given(
    graph=symbolic_differentiable_graphs(max_ops=10),
    lengths=st.lists(st.integers(2, 6), min_size=3, max_size=5, unique=True),
)
def test_symbolic_gradients_of_larger_graphs(graph, lengths):
    check_gradients_at_lengths(graph, lengths)


def tiny_transformer_loss(seq: object) -> tg.Graph:
    """A causal attention block over (1, seq, 8) tokens with a layer norm, an MLP and a
    mean loss: the ops a sequence model's training step differentiates."""
    rng = np.random.default_rng(3)

    def weight(g: tg.Graph, name: str, shape: tuple) -> tg.Tensor:
        return g.param(name, shape, value=rng.uniform(-0.5, 0.5, shape).astype(np.float32))

    g = tg.Graph("block")
    x = g.input("x", (1, seq, 8))
    h = tg.layer_norm(x, weight(g, "ln", (8,)), weight(g, "ln_b", (8,)))
    q, k, v = (
        (h @ weight(g, f"w{n}", (8, 8))).reshape(1, seq, 2, 4).transpose(0, 2, 1, 3) for n in "qkv"
    )
    att = tg.scaled_dot_product_attention(q, k, v, mask="causal")
    h = x + att.transpose(0, 2, 1, 3).reshape(1, seq, 8) @ weight(g, "wo", (8, 8))
    h = h + tg.gelu(h @ weight(g, "up", (8, 16))) @ weight(g, "down", (16, 8))
    target = g.input("target", (1, seq, 8))
    g.output(tg.mean(tg.square(h - target)))
    return g


LENGTHS = [3, 7, 1, 3, 7]


@functools.cache
def symbolic_step() -> tg.Program:
    seq = tg.Dim("seq", min=1, max=12)
    step = tg.train_step(tiny_transformer_loss(seq), optimizer=tg.optim.AdamW(learning_rate=0.01))
    program = tg.compile(step)
    assert type(program.plan).__name__ == "ParametricPlan"
    return program


def train_symbolic(backend: str) -> tuple[list[np.ndarray], object]:
    program = symbolic_step()
    state = program.new_state(backend)
    losses = [program.run(batch(n), backend=backend, state=state)[0] for n in LENGTHS]
    return [np.asarray(loss) for loss in losses], state


def batch(length: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(length)
    return {k: rng.uniform(-1, 1, (1, length, 8)).astype(np.float32) for k in ("x", "target")}


def test_one_training_program_serves_every_length_as_the_static_steps_do():
    """The symbolic step trained over mixed lengths equals, bit for bit, a chain of
    static steps (one compiled per length) that hands its weights and moments on."""
    static = {
        n: tg.compile(
            tg.train_step(tiny_transformer_loss(n), optimizer=tg.optim.AdamW(learning_rate=0.01))
        )
        for n in set(LENGTHS)
    }
    carried: dict[str, np.ndarray] = {}
    expected = []
    for n in LENGTHS:
        state = static[n].new_state("numpy")
        state.assign(carried)
        expected.append(np.asarray(static[n].run(batch(n), backend="numpy", state=state)[0]))
        carried = {name: np.array(state[name]) for name in state.names}
    for backend in ("numpy", "arena"):
        losses, state = train_symbolic(backend)
        np.testing.assert_array_equal(losses, expected, err_msg=backend)
        for name, value in carried.items():
            np.testing.assert_array_equal(np.asarray(state[name]), value, err_msg=name)
    assert expected[-1] < expected[1]  # the same length later in training: it learned


def test_the_symbolic_step_on_mlx_agrees_within_float32_rounding():
    reference, _ = train_symbolic("numpy")
    fast, _ = train_symbolic("mlx")
    np.testing.assert_allclose(fast, reference, rtol=1e-4)


BATCH = tg.Dim("batch", min=1, max=4)
TOKENS = tg.Dim("tokens", min=2, max=8)


def _weight(g: tg.Graph, name: str, shape: tuple) -> tg.Tensor:
    value = np.random.default_rng(len(name)).uniform(-0.5, 0.5, shape).astype(np.float32)
    return g.param(name, shape, value=value)


def _cnn(g: tg.Graph) -> tg.Tensor:
    """A symbolic batch through convolution, pools, upsampling and a group norm."""
    h = tg.relu(tg.conv2d(g.input("x", (BATCH, 3, 8, 8)), _weight(g, "w", (4, 3, 3, 3)), 1, 1))
    h = tg.max_pool2d(h, 2, 2)
    h = tg.avg_pool2d(h, 2, 2) + tg.adaptive_avg_pool2d(h, (2, 2))
    h = tg.upsample_nearest2d(h, (4, 4))
    return tg.mean(tg.square(tg.group_norm(h, 2, _weight(g, "gw", (4,)), _weight(g, "gb", (4,)))))


def _language_model(g: tg.Graph) -> tg.Tensor:
    """Token ids of a symbolic length: embedding, rms norm, head, cross-entropy."""
    embedded = tg.take(_weight(g, "table", (10, 6)), g.input("ids", (1, TOKENS), tg.int32), 0)
    logits = tg.rms_norm(embedded, _weight(g, "norm", (6,))) @ _weight(g, "head", (6, 10))
    targets = tg.expand_dims(g.input("targets", (1, TOKENS), tg.int32), -1)
    return -tg.mean(tg.gather(tg.log_softmax(logits, -1), targets, 2))


def _reflect(g: tg.Graph) -> tg.Tensor:
    """Reflect and replicate pads along a symbolic axis."""
    x = g.input("x", (1, TOKENS, 4)) * _weight(g, "w", (4,))
    reflected = tg.pad(x, [(0, 0), (1, 1), (0, 0)], mode="reflect")
    replicated = tg.pad(x, [(0, 0), (2, 0), (0, 0)], mode="replicate")
    return tg.sum(tg.square(reflected) + replicated)


@pytest.mark.parametrize("body", [_cnn, _language_model, _reflect], ids=lambda f: f.__name__)
def test_symbolic_batches_and_tokens_equal_the_static_graph(body) -> None:
    g = tg.Graph(body.__name__)
    g.output(body(g))
    symbolic = tg.compile(tg.value_and_grad(g))
    rng = np.random.default_rng(0)
    for value in (2, 3):
        at = {name: value for name in g.dims}
        static_graph = specialize(g, **at)
        feeds = {
            n.name: rng.integers(0, 10, n.shape).astype(np.int32)
            if n.dtype == tg.int32
            else rng.uniform(-1, 1, n.shape).astype(np.float32)
            for n in static_graph.inputs
        }
        expected = tg.compile(tg.value_and_grad(static_graph)).run(feeds, backend="numpy")
        for backend in ("numpy", "arena"):
            for ours, theirs in zip(symbolic.run(feeds, backend=backend), expected, strict=True):
                np.testing.assert_array_equal(ours, theirs, err_msg=f"{backend} at {value}")
