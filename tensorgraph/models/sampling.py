"""Token sampling on the host: temperature, top-k, top-p and min-p, as mlx-lm's
`make_sampler` (mlx_lm/sample_utils.py) applies them, with every random draw made by a
seeded NumPy Generator, so that every backend given the same logits draws the same
tokens for a seed.

The logits of each row (any float dtype) become float64 log-probabilities
`logits - logsumexp(logits)`, then, as mlx-lm chains them:

1. temperature 0: the argmax (greedy; the first id on a tie, as np.argmax), no draw;
2. top_p < 1: keep the tokens whose cumulative probability, summed in ascending order
   of probability, is > 1 - top_p: the smallest set of most likely tokens whose
   probabilities sum to >= top_p;
3. min_p > 0: keep the tokens with logprob >= max logprob + log(min_p), i.e. probability
   >= min_p * the largest probability;
4. top_k: keep the k most likely tokens (mlx-lm's argpartition leaves a tie at the k-th
   place to the implementation; here the lower id wins, so the set is deterministic);
5. draw from softmax(kept logprobs / temperature) by inverse CDF: one uniform u in
   [0, 1) per row from the Generator, the token the first whose cumulative probability
   exceeds u times the total. One draw per row and step whatever the filters, so the
   stream of draws never depends on the logits.

Invariant: a `Sampler` exists only with parameters in range (a RunError naming the
parameter and its value otherwise), so a generation given one can only fail on its
lengths, which `generate` checks before any call.
"""

from __future__ import annotations

import math

import numpy as np
from attrs import field, frozen

from tensorgraph.errors import RunError

__all__ = ["Sampler", "log_probabilities"]


def _number(name: str, value: object) -> float:
    """`value` as a finite float (a RunError naming `name` otherwise)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise RunError(f"sampling: {name} must be a number but got {value!r}")
    if not math.isfinite(value):
        raise RunError(f"sampling: {name} must be finite but got {value!r}")
    return float(value)


def _temperature(value: object) -> float:
    value = _number("temperature", value)
    if value < 0:
        raise RunError(f"sampling: temperature must be >= 0 (0 is greedy) but got {value!r}")
    return value


def _top_p(value: object) -> float:
    value = _number("top_p", value)
    if not 0 < value <= 1:
        raise RunError(f"sampling: top_p must be in (0, 1] (1 keeps all) but got {value!r}")
    return value


def _min_p(value: object) -> float:
    value = _number("min_p", value)
    if not 0 <= value < 1:
        raise RunError(f"sampling: min_p must be in [0, 1) (0 keeps all) but got {value!r}")
    return value


def _top_k(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise RunError(f"sampling: top_k must be an int >= 1 or None (all) but got {value!r}")
    return int(value)


def _seed(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise RunError(f"sampling: seed must be an int >= 0 but got {value!r}")
    return int(value)


def log_probabilities(logits: object) -> np.ndarray:
    """The (rows, vocab) float64 log-probabilities of `logits` ((vocab,) or (..., vocab)):
    logits - logsumexp(logits) along the last axis."""
    values = np.asarray(logits, np.float64)
    values = values.reshape(-1, values.shape[-1])
    top = values.max(axis=-1, keepdims=True)
    return values - (top + np.log(np.exp(values - top).sum(axis=-1, keepdims=True)))


@frozen
class Sampler:
    """How `generate` picks each next token from the logits (see the module docstring):
    `temperature` >= 0 (0: greedy, the default), `top_k` >= 1 or None (all), `top_p`
    in (0, 1] (1: all), `min_p` in [0, 1) (0: all), `seed` >= 0 of the draws. RunError
    naming the parameter when one is out of range."""

    temperature: float = field(default=0.0, converter=_temperature)
    top_k: int | None = field(default=None, converter=_top_k)
    top_p: float = field(default=1.0, converter=_top_p)
    min_p: float = field(default=0.0, converter=_min_p)
    seed: int = field(default=0, converter=_seed)

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0

    def generator(self) -> np.random.Generator:
        """A fresh Generator for one generation: the draws start over at `seed`."""
        return np.random.default_rng(self.seed)

    def filtered(self, logits: object) -> np.ndarray:
        """The (rows, vocab) float64 log-probabilities of `logits` with every token that
        top_p, min_p and top_k drop set to -inf (steps 2-4 of the module docstring)."""
        logprobs = log_probabilities(logits)
        rows = np.arange(logprobs.shape[0])[:, None]
        if self.top_p < 1:
            ascending = np.argsort(logprobs, axis=-1, kind="stable")
            cumulative = np.cumsum(np.exp(logprobs[rows, ascending]), axis=-1)
            keep = np.empty_like(cumulative, dtype=bool)
            keep[rows, ascending] = cumulative > 1 - self.top_p
            logprobs = np.where(keep, logprobs, -np.inf)
        if self.min_p > 0:
            floor = logprobs.max(axis=-1, keepdims=True) + math.log(self.min_p)
            logprobs = np.where(logprobs < floor, -np.inf, logprobs)
        if self.top_k is not None and self.top_k < logprobs.shape[-1]:
            ranked = np.argsort(-logprobs, axis=-1, kind="stable")  # ties: lower id first
            logprobs = logprobs.copy()
            logprobs[rows, ranked[:, self.top_k :]] = -np.inf
        return logprobs

    def probabilities(self, logits: object) -> np.ndarray:
        """The (rows, vocab) float64 distribution a draw follows: softmax of the filtered
        log-probabilities over the temperature (one-hot at the argmax when greedy)."""
        if self.is_greedy:
            logprobs = log_probabilities(logits)
            return np.eye(logprobs.shape[-1])[np.argmax(logprobs, axis=-1)]
        scaled = self.filtered(logits) / self.temperature
        weights = np.exp(scaled - scaled.max(axis=-1, keepdims=True))
        return weights / weights.sum(axis=-1, keepdims=True)

    def sample(self, logits: object, generator: np.random.Generator | None) -> np.ndarray:
        """The (rows,) int32 next tokens for `logits` ((vocab,) or (rows, vocab)): the
        argmax when greedy (`generator` unused, may be None), else one inverse-CDF draw
        per row from `generator` (step 5 of the module docstring)."""
        if self.is_greedy:  # on the logits themselves: no rounding can make a new tie
            values = np.asarray(logits, np.float64)
            return np.argmax(values.reshape(-1, values.shape[-1]), axis=-1).astype(np.int32)
        cumulative = np.cumsum(self.probabilities(logits), axis=-1)
        targets = generator.random(cumulative.shape[0]) * cumulative[:, -1]
        chosen = (cumulative <= targets[:, None]).sum(axis=-1)  # first cumulative > target
        return np.minimum(chosen, cumulative.shape[-1] - 1).astype(np.int32)
