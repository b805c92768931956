"""Oracles for the optimizers and training steps, written apart from tensorgraph.

- `reference_update`: mlx.optimizers' update formulas transcribed into float64 NumPy
  (from mlx/python/mlx/optimizers/optimizers.py: SGD, Adam, AdamW), with the constants
  entering as MLX holds them: the learning rate and every Python number a float32
  value, `1 - b1` computed in double and then rounded (a weak scalar), and the step count
  incremented before the update. It also returns, per result, a magnitude (the same
  formula with every difference replaced by the sum of absolute values): the error of a
  float32 evaluation of k roundings is at most about k * 2^-24 times it.
- `mlx_update` / `mlx_train`: mlx.optimizers itself, one update from a given state, or
  N steps of `mx.value_and_grad` on a loss.
- `least_squares` and `logistic`: problems whose gradient graph is hand-built with the
  IR builder from its closed form, so the tests do not depend on `tg.value_and_grad`.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.optimizers as mlx_optim
import numpy as np
from attrs import frozen

import tensorgraph as tg

U = 2.0**-24  # float32's unit roundoff


def f32(x: float) -> float:
    """`x` as MLX holds a Python number next to a float32 array (rounded to float32)."""
    return float(np.float32(x))


def reference_update(
    kind: str, hyper: dict, p: np.ndarray, g: np.ndarray, state: dict, step: int
) -> tuple[np.ndarray, dict, np.ndarray, dict]:
    """(new param, new moments, param magnitude, moment magnitudes) of one update of
    optimizer `kind` ("SGD", "Adam", "AdamW") with `hyper` (its keyword arguments) in
    float64; `step` counts this update (1 at the first)."""
    p, g = p.astype(np.float64), g.astype(np.float64)
    lr = f32(hyper["learning_rate"])
    if kind == "SGD":
        wd, mu = hyper.get("weight_decay", 0.0), hyper.get("momentum", 0.0)
        damp, nesterov = hyper.get("dampening", 0.0), hyper.get("nesterov", False)
        g_mag = np.abs(g)
        if wd != 0:
            g, g_mag = g + f32(wd) * p, g_mag + f32(wd) * np.abs(p)
        if mu <= 0:
            return p - lr * g, {}, np.abs(p) + lr * g_mag, {}
        v0 = state["v"].astype(np.float64)
        scale = f32(1 - damp) if damp > 0 else 1.0
        v = f32(mu) * v0 + scale * g
        v_mag = f32(mu) * np.abs(v0) + scale * g_mag
        update = g + f32(mu) * v if nesterov else v
        update_mag = g_mag + f32(mu) * v_mag if nesterov else v_mag
        return p - lr * update, {"v": v}, np.abs(p) + lr * update_mag, {"v": v_mag}
    b1, b2 = (f32(b) for b in hyper.get("betas", (0.9, 0.999)))
    eps = f32(hyper.get("eps", 1e-8))
    p_mag = np.abs(p)
    if kind == "AdamW":
        decay = 1 - lr * f32(hyper.get("weight_decay", 0.01))
        p, p_mag = p * decay, p_mag * (1 + lr * f32(hyper.get("weight_decay", 0.01)))
    m0, v0 = state["m"].astype(np.float64), state["v"].astype(np.float64)
    one_b1 = f32(1 - hyper.get("betas", (0.9, 0.999))[0])
    one_b2 = f32(1 - hyper.get("betas", (0.9, 0.999))[1])
    m = b1 * m0 + one_b1 * g
    v = b2 * v0 + one_b2 * g * g
    m_mag = b1 * np.abs(m0) + one_b1 * np.abs(g)
    if hyper.get("bias_correction", False):
        c1 = lr / (1 - b1**step)
        c2 = 1 / np.sqrt(1 - b2**step)
        delta = c1 * m / (np.sqrt(v) * c2 + eps)
        delta_mag = c1 * m_mag / (np.sqrt(v) * c2 + eps)
    else:
        delta = lr * m / (np.sqrt(v) + eps)
        delta_mag = lr * m_mag / (np.sqrt(v) + eps)
    return p - delta, {"m": m, "v": v}, p_mag + delta_mag, {"m": m_mag, "v": v}


def mlx_optimizer(kind: str, hyper: dict) -> mlx_optim.Optimizer:
    return getattr(mlx_optim, kind)(**hyper)


def mlx_update(
    kind: str, hyper: dict, p: np.ndarray, g: np.ndarray, state: dict, step: int
) -> tuple[np.ndarray, dict]:
    """(new param, new moments) of one update by mlx.optimizers itself, from moments
    `state` and step counter `step - 1` (it increments before updating)."""
    optimizer = mlx_optimizer(kind, hyper)
    optimizer.init({"p": mx.array(p)})
    for name, value in state.items():
        optimizer.state["p"][name] = mx.array(value)
    optimizer.state["step"] = mx.array(step - 1, mx.uint64)
    new = optimizer.apply_gradients({"p": mx.array(g)}, {"p": mx.array(p)})
    moments = {name: np.array(optimizer.state["p"][name]) for name in state}
    return np.array(new["p"]), moments


@frozen(eq=False)
class Problem:
    """A loss with a hand-built gradient graph: `graph` returns [loss, grad of each
    param in `params` order]; `feeds` its inputs; `initial` the params' values;
    `mlx_loss(params, feeds)` the same loss in mlx.core; `numpy_gradients(params,
    feeds)` (loss, grads) in float64."""

    graph: tg.Graph
    feeds: dict
    initial: dict
    mlx_loss: object
    numpy_gradients: object


def least_squares(n: int = 8, d: int = 3, k: int = 2, seed: int = 0) -> Problem:
    """loss = mean((x @ w + b - y)^2) over n x k: grads 2/(n k) x^T r and 2/(n k) sum_0 r."""
    rng = np.random.default_rng(seed)
    feeds = {
        "x": rng.standard_normal((n, d)).astype(np.float32),
        "y": rng.standard_normal((n, k)).astype(np.float32),
    }
    initial = {
        "w": rng.standard_normal((d, k)).astype(np.float32),
        "b": rng.standard_normal((k,)).astype(np.float32),
    }
    g = tg.Graph("least_squares")
    x, y = g.input("x", (n, d)), g.input("y", (n, k))
    w, b = g.param("w", (d, k), value=initial["w"]), g.param("b", (k,), value=initial["b"])
    r = x @ w + b - y
    scale = 2.0 / (n * k)
    g.output(tg.mean(tg.square(r)), tg.transpose(x) @ r * scale, tg.sum(r, axis=0) * scale)

    def mlx_loss(params: dict, data: dict) -> mx.array:
        r = mx.array(data["x"]) @ params["w"] + params["b"] - mx.array(data["y"])
        return mx.mean(mx.square(r))

    def numpy_gradients(params: dict, data: dict) -> tuple[float, dict]:
        x, y = data["x"].astype(np.float64), data["y"].astype(np.float64)
        r = x @ params["w"] + params["b"] - y
        return float(np.mean(r * r)), {"w": x.T @ r * scale, "b": r.sum(axis=0) * scale}

    return Problem(g, feeds, initial, mlx_loss, numpy_gradients)


def logistic(n: int = 16, d: int = 4, seed: int = 1) -> Problem:
    """loss = mean(log(1 + exp(z)) - y z), z = x @ w + b, labels y in {0, 1}:
    grads x^T (sigmoid(z) - y) / n and sum(sigmoid(z) - y) / n."""
    rng = np.random.default_rng(seed)
    feeds = {
        "x": rng.standard_normal((n, d)).astype(np.float32),
        "y": (rng.random(n) < 0.5).astype(np.float32),
    }
    initial = {
        "w": (0.5 * rng.standard_normal(d)).astype(np.float32),
        "b": np.float32(0.1).reshape(()),
    }
    g = tg.Graph("logistic")
    x, y = g.input("x", (n, d)), g.input("y", (n,))
    w, b = g.param("w", (d,), value=initial["w"]), g.param("b", (), value=initial["b"])
    z = x @ w + b
    loss = tg.mean(tg.log(1.0 + tg.exp(z)) - y * z)
    dz = (tg.sigmoid(z) - y) * (1.0 / n)
    g.output(loss, tg.transpose(x) @ dz, tg.sum(dz))

    def mlx_loss(params: dict, data: dict) -> mx.array:
        z = mx.array(data["x"]) @ params["w"] + params["b"]
        return mx.mean(mx.log(1.0 + mx.exp(z)) - mx.array(data["y"]) * z)

    def numpy_gradients(params: dict, data: dict) -> tuple[float, dict]:
        x, y = data["x"].astype(np.float64), data["y"].astype(np.float64)
        z = x @ params["w"] + params["b"]
        dz = (1 / (1 + np.exp(-z)) - y) / n
        return float(np.mean(np.log1p(np.exp(z)) - y * z)), {"w": x.T @ dz, "b": dz.sum()}

    return Problem(g, feeds, initial, mlx_loss, numpy_gradients)


def mlx_train(problem: Problem, kind: str, hyper: dict, steps: int) -> tuple[list, dict, dict]:
    """(losses before each update, final params, final optimizer moments by param) of
    `steps` steps of `mx.value_and_grad` and mlx.optimizers on `problem`."""
    params = {k: mx.array(v) for k, v in problem.initial.items()}
    optimizer = mlx_optimizer(kind, hyper)
    value_and_grad = mx.value_and_grad(problem.mlx_loss)
    losses = []
    for _ in range(steps):
        loss, grads = value_and_grad(params, problem.feeds)
        params = optimizer.apply_gradients(grads, params)
        losses.append(float(loss))
    moments = {k: {m: np.array(v) for m, v in optimizer.state[k].items()} for k in problem.initial}
    return losses, {k: np.array(v) for k, v in params.items()}, moments


def numpy_train(problem: Problem, kind: str, hyper: dict, steps: int) -> tuple[list, dict, dict]:
    """The same as `mlx_train` in float64: closed-form gradients, `reference_update`."""
    params = {k: v.astype(np.float64) for k, v in problem.initial.items()}
    moments = {k: _zero_moments(kind, hyper, v) for k, v in params.items()}
    losses = []
    for step in range(1, steps + 1):
        loss, grads = problem.numpy_gradients(params, problem.feeds)
        losses.append(loss)
        for k in params:
            params[k], moments[k], _, _ = reference_update(
                kind, hyper, params[k], grads[k], moments[k], step
            )
    return losses, params, moments


def _zero_moments(kind: str, hyper: dict, like: np.ndarray) -> dict:
    if kind == "SGD":
        return {"v": np.zeros_like(like)} if hyper.get("momentum", 0.0) > 0 else {}
    return {"m": np.zeros_like(like), "v": np.zeros_like(like)}
