"""Optimizers whose update is IR: `tg.optim.SGD`, `Adam`, `AdamW`.

Each optimizer turns one parameter, its gradient and its moments (tensors of the graph
being built) into the parameter's new value and new moments, as graph nodes, so the
update runs on every backend and the planner sees its buffers. A training step
(`tg.train_step`, tensorgraph/training.py) keeps the parameters and moments in states
(the moments start as zeros) and a step counter where the update needs one.

The formulas follow mlx.optimizers (mlx/python/mlx/optimizers/optimizers.py) exactly:
the same argument names and defaults, the same operations in the same order and the same
dtypes. Python numbers are weak scalars, as in MLX (`b1 * m` is computed in m's dtype);
the learning rate is a float32 number cast to the parameter's dtype, as MLX's
`learning_rate.astype(gradient.dtype)`; the step counter is incremented before the
update (the first update sees step 1) and enters `b ** step` as float32, as MLX's
uint64 step promoted against a Python float does.

- SGD: `g += weight_decay * p` (when nonzero); without momentum `p - lr g`; else
  `v = momentum v + (1 - dampening) g` (`+ g` when dampening is 0), the update
  `g + momentum v` (Nesterov) or `v`, and `p - lr update`.
- Adam: `m = b1 m + (1 - b1) g`, `v = b2 v + (1 - b2) g^2`, then `p - lr m / (sqrt(v) +
  eps)`, or with bias correction `p - (c1 m) / (sqrt(v) c2 + eps)` where `c1 = lr / (1 -
  b1^t)` and `c2 = rsqrt(1 - b2^t)`.
- AdamW: Adam applied to `p (1 - lr weight_decay)`.

Invariant: an optimizer is a frozen value whose hyperparameters were checked when it was
made: a learning rate that is not a positive number, betas outside [0, 1), a
non-positive eps, a negative weight decay, momentum or dampening, or Nesterov without
momentum (or with dampening) is a GraphError naming the argument and the value.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping

import numpy as np
from attrs import field, frozen

from tensorgraph.errors import GraphError
from tensorgraph.ir.api import Tensor, astype, rsqrt, sqrt, square

__all__ = ["SGD", "Adam", "AdamW", "Optimizer", "Update"]


def _number(owner: str, name: str, value: object) -> float:
    """`value` as a float, GraphError naming `owner`'s argument unless it is a finite
    real number (a schedule, a string or NaN is refused)."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating | np.integer):
        raise GraphError(f"[{owner}] {name!r} must be a number but got {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise GraphError(f"[{owner}] {name!r} must be finite but got {number}")
    return number


def _positive(owner: str, name: str, value: object) -> float:
    number = _number(owner, name, value)
    if number <= 0:
        raise GraphError(f"[{owner}] {name!r} must be positive but got {number}")
    return number


def _non_negative(owner: str, name: str, value: object) -> float:
    number = _number(owner, name, value)
    if number < 0:
        raise GraphError(f"[{owner}] {name!r} must be non-negative but got {number}")
    return number


def _betas(owner: str, value: object) -> tuple[float, float]:
    if not isinstance(value, tuple | list) or len(value) != 2:
        raise GraphError(f"[{owner}] 'betas' must be a pair of numbers but got {value!r}")
    betas = tuple(_number(owner, f"betas[{i}]", b) for i, b in enumerate(value))
    for i, beta in enumerate(betas):
        if not 0.0 <= beta < 1.0:
            raise GraphError(f"[{owner}] 'betas[{i}]' must lie in [0, 1) but got {beta}")
    return betas


@frozen
class Update:
    """What one optimizer step makes of a parameter: its new value and the new value
    of each of its moments (moment name -> tensor)."""

    param: Tensor
    moments: Mapping[str, Tensor]


class Optimizer(ABC):
    """An update rule (see the module docstring). `moment_names`: the per-parameter
    states it keeps (each the parameter's shape and dtype, zeros at first);
    `needs_step`: whether `apply` reads the step counter."""

    moment_names: tuple[str, ...] = ()

    @property
    def needs_step(self) -> bool:
        return False

    @abstractmethod
    def apply(
        self, param: Tensor, grad: Tensor, moments: Mapping[str, Tensor], step: Tensor | None
    ) -> Update:
        """The new value of `param` and of its `moments` (name -> current value) for
        gradient `grad` (of param's shape and dtype). `step`: the float32 scalar count
        of updates including this one (1 at the first), given when `needs_step`."""

    def _learning_rate(self, like: Tensor) -> Tensor:
        """The learning rate as MLX holds it: a float32 number, cast to `like`'s dtype."""
        value = np.float32(self.learning_rate).astype(like.dtype.to_numpy())
        return like.graph.constant(value, like.dtype)


@frozen
class SGD(Optimizer):
    """Stochastic gradient descent, as mlx.optimizers.SGD (see the module docstring)."""

    learning_rate: float = field(converter=lambda v: _positive("SGD", "learning_rate", v))
    momentum: float = field(default=0.0, converter=lambda v: _non_negative("SGD", "momentum", v))
    weight_decay: float = field(
        default=0.0, converter=lambda v: _non_negative("SGD", "weight_decay", v)
    )
    dampening: float = field(default=0.0, converter=lambda v: _non_negative("SGD", "dampening", v))
    nesterov: bool = False

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.nesterov, bool):
            raise GraphError(f"[SGD] 'nesterov' must be a bool but got {self.nesterov!r}")
        if self.nesterov and (self.momentum <= 0 or self.dampening != 0):
            raise GraphError(
                "[SGD] Nesterov momentum requires a momentum and zero dampening, but got "
                f"momentum={self.momentum}, dampening={self.dampening}"
            )

    @property
    def moment_names(self) -> tuple[str, ...]:
        return ("v",) if self.momentum > 0 else ()

    def apply(
        self, param: Tensor, grad: Tensor, moments: Mapping[str, Tensor], step: Tensor | None
    ) -> Update:
        if self.weight_decay != 0:
            grad = grad + self.weight_decay * param
        lr = self._learning_rate(grad)
        if self.momentum <= 0:
            return Update(param - lr * grad, {})
        v = self.momentum * moments["v"]
        v = v + (1 - self.dampening) * grad if self.dampening > 0 else v + grad
        update = grad + self.momentum * v if self.nesterov else v
        return Update(param - lr * update, {"v": v})


@frozen
class Adam(Optimizer):
    """Adam, as mlx.optimizers.Adam (see the module docstring)."""

    learning_rate: float = field(converter=lambda v: _positive("Adam", "learning_rate", v))
    betas: tuple[float, float] = field(default=(0.9, 0.999), converter=lambda v: _betas("Adam", v))
    eps: float = field(default=1e-8, converter=lambda v: _positive("Adam", "eps", v))
    bias_correction: bool = False

    moment_names = ("m", "v")

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.bias_correction, bool):
            raise GraphError(
                f"[{type(self).__name__}] 'bias_correction' must be a bool but got "
                f"{self.bias_correction!r}"
            )

    @property
    def needs_step(self) -> bool:
        return self.bias_correction

    def apply(
        self, param: Tensor, grad: Tensor, moments: Mapping[str, Tensor], step: Tensor | None
    ) -> Update:
        return self._adam(param, grad, moments, step, self._learning_rate(grad))

    def _adam(
        self,
        param: Tensor,
        grad: Tensor,
        moments: Mapping[str, Tensor],
        step: Tensor | None,
        lr: Tensor,
    ) -> Update:
        b1, b2 = self.betas
        m = b1 * moments["m"] + (1 - b1) * grad
        v = b2 * moments["v"] + (1 - b2) * square(grad)
        if not self.bias_correction:
            return Update(param - lr * m / (sqrt(v) + self.eps), {"m": m, "v": v})
        if step is None:
            raise GraphError(f"[{type(self).__name__}] bias correction needs the step count")
        c1 = _as(lr / (1 - b1**step), grad)
        c2 = _as(rsqrt(1 - b2**step), grad)
        numerator = c1 * m
        denominator = sqrt(v) * c2 + self.eps
        return Update(param - numerator / denominator, {"m": m, "v": v})


@frozen
class AdamW(Adam):
    """AdamW, as mlx.optimizers.AdamW: Adam on the decayed parameter (module docstring)."""

    learning_rate: float = field(converter=lambda v: _positive("AdamW", "learning_rate", v))
    betas: tuple[float, float] = field(default=(0.9, 0.999), converter=lambda v: _betas("AdamW", v))
    eps: float = field(default=1e-8, converter=lambda v: _positive("AdamW", "eps", v))
    weight_decay: float = field(
        default=0.01, converter=lambda v: _non_negative("AdamW", "weight_decay", v)
    )
    bias_correction: bool = False

    def apply(
        self, param: Tensor, grad: Tensor, moments: Mapping[str, Tensor], step: Tensor | None
    ) -> Update:
        lr = self._learning_rate(grad)
        return self._adam(param * (1 - lr * self.weight_decay), grad, moments, step, lr)


def _as(value: Tensor, like: Tensor) -> Tensor:
    """`value` cast to `like`'s dtype (MLX's `.astype(gradient.dtype)`); as is when equal."""
    return value if value.dtype == like.dtype else astype(value, like.dtype)
