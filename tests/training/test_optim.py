"""tg.optim: one update of SGD, Adam and AdamW, emitted as IR, equals mlx.optimizers'
and a float64 transcription of its formulas for random hyperparameters and states;
bad hyperparameters are named GraphErrors at construction."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.runtime.reference import run_reference
from tests.training.reference import U, mlx_update, reference_update
from tests.training.strategies import hyperparameters

SHAPE = (3, 4)


def arrays(draw: st.DrawFn, low: float = -2.0) -> np.ndarray:
    seed = draw(st.integers(0, 2**32 - 1))
    return np.random.default_rng(seed).uniform(low, 2.0, SHAPE).astype(np.float32)


def tg_update(
    optimizer: tg.optim.Optimizer, p: np.ndarray, g: np.ndarray, state: dict, step: int
) -> tuple[np.ndarray, dict]:
    """One update as IR (param, gradient, moments and step fed as inputs), run by the
    reference interpreter."""
    graph = tg.Graph("update")
    param, grad = graph.input("p", SHAPE), graph.input("g", SHAPE)
    moments = {name: graph.input(name, SHAPE) for name in state}
    count = graph.input("step", ()) if optimizer.needs_step else None
    update = optimizer.apply(param, grad, moments, count)
    names = sorted(update.moments)
    graph.output(update.param, *(update.moments[n] for n in names))
    feeds = {"p": p, "g": g, **state}
    if count is not None:
        feeds["step"] = np.float32(step)
    outputs = run_reference(graph, feeds)
    return outputs[0], dict(zip(names, outputs[1:], strict=True))


def moments_for(kind: str, hyper: dict, draw: st.DrawFn) -> dict:
    if kind == "SGD":
        return {"v": arrays(draw)} if hyper["momentum"] > 0 else {}
    return {"m": arrays(draw), "v": arrays(draw, low=0.0)}


@settings(max_examples=60)
@given(st.data())
def test_one_update_equals_mlx_optimizers_and_the_float64_formulas(data):
    kind, hyper = data.draw(hyperparameters())
    p, g = arrays(data.draw), arrays(data.draw)
    state = moments_for(kind, hyper, data.draw)
    step = data.draw(st.integers(1, 50))
    optimizer = getattr(tg.optim, kind)(**hyper)
    assert set(optimizer.moment_names) == set(state)
    new, moments = tg_update(optimizer, p, g, state, step)
    assert new.shape == SHAPE and new.dtype == np.float32
    mlx_new, mlx_moments = mlx_update(kind, hyper, p, g, state, step)
    ref_new, ref_moments, magnitude, moment_magnitudes = reference_update(
        kind, hyper, p, g, state, step
    )
    # About 16 float32 roundings per result, each within U of a partial result bounded
    # by the magnitude; Adam's bias correction divides by 1 - b^t computed from a float32
    # power (within U of b^t), amplifying by 1 / (1 - b^t).
    amplify = 1.0
    if kind != "SGD" and hyper["bias_correction"]:
        b1, b2 = hyper["betas"]
        amplify += 1 / (1 - np.float32(b1) ** step) + 1 / (1 - np.float32(b2) ** step)
    bound = 32 * U * amplify * magnitude
    assert np.all(np.abs(new - ref_new) <= bound + 1e-30)
    assert np.all(np.abs(new - mlx_new) <= 2 * bound + 1e-30)
    for name, value in moments.items():
        moment_bound = 8 * U * moment_magnitudes[name]
        assert np.all(np.abs(value - ref_moments[name]) <= moment_bound + 1e-30)
        assert np.all(np.abs(value - mlx_moments[name]) <= 2 * moment_bound + 1e-30)


def test_defaults_are_mlx_optimizers_defaults():
    assert tg.optim.SGD(0.1) == tg.optim.SGD(0.1, 0.0, 0.0, 0.0, False)
    assert tg.optim.Adam(0.1) == tg.optim.Adam(0.1, (0.9, 0.999), 1e-8, False)
    assert tg.optim.AdamW(0.1) == tg.optim.AdamW(0.1, (0.9, 0.999), 1e-8, 0.01, False)
    assert tg.optim.SGD(0.1).moment_names == () and tg.optim.SGD(0.1, 0.9).moment_names == ("v",)
    assert tg.optim.Adam(0.1, bias_correction=True).needs_step
    assert not tg.optim.AdamW(0.1).needs_step


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: tg.optim.SGD(0.0), r"\[SGD\] 'learning_rate' must be positive but got 0.0"),
        (lambda: tg.optim.SGD(-1e-3), r"\[SGD\] 'learning_rate' must be positive"),
        (lambda: tg.optim.Adam(float("nan")), r"\[Adam\] 'learning_rate' must be finite"),
        (lambda: tg.optim.AdamW("0.1"), r"\[AdamW\] 'learning_rate' must be a number"),
        (lambda: tg.optim.Adam(0.1, betas=(1.0, 0.9)), r"'betas\[0\]' must lie in \[0, 1\)"),
        (lambda: tg.optim.AdamW(0.1, betas=(0.9, -0.1)), r"'betas\[1\]' must lie in"),
        (lambda: tg.optim.Adam(0.1, betas=(0.9,)), r"'betas' must be a pair"),
        (lambda: tg.optim.Adam(0.1, eps=0.0), r"\[Adam\] 'eps' must be positive but got 0.0"),
        (lambda: tg.optim.AdamW(0.1, eps=-1e-8), r"\[AdamW\] 'eps' must be positive"),
        (lambda: tg.optim.AdamW(0.1, weight_decay=-0.01), r"'weight_decay' must be non-neg"),
        (lambda: tg.optim.SGD(0.1, weight_decay=-0.01), r"\[SGD\] 'weight_decay' must be non"),
        (lambda: tg.optim.SGD(0.1, momentum=-0.5), r"\[SGD\] 'momentum' must be non-negative"),
        (lambda: tg.optim.SGD(0.1, nesterov=True), r"Nesterov momentum requires a momentum"),
        (lambda: tg.optim.SGD(0.1, 0.9, dampening=0.1, nesterov=True), r"zero dampening"),
    ],
)
def test_bad_hyperparameters_are_named_graph_errors(make, match):
    with pytest.raises(tg.GraphError, match=match):
        make()
