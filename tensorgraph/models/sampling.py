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
   place to the implementation; here the lower id wins, so the set is deterministic,
   and likewise for top_p: among equal probabilities the lower id counts as more likely);
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

CANDIDATES = 256  # tokens top_p sorts first (see Sampler._kept)


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


def _descending(values: np.ndarray) -> np.ndarray:
    """The indices of 1-D `values` from the largest value to the smallest, the lower
    index first among equal values (a stable sort's order, 3-8x slower on a float
    vocabulary): a quicksort of the values, then, where some are equal, a quicksort of
    the unique integer keys (run of equal values, index) that puts each run in order."""
    order = np.argsort(-values)
    ranked = values[order]
    changes = ranked[1:] != ranked[:-1]
    if changes.all():
        return order
    runs = np.concatenate([[0], np.cumsum(changes)])
    return order[np.argsort(runs * values.shape[0] + order)]


def _best(values: np.ndarray, count: int) -> np.ndarray:
    """The first `count` indices of `_descending(values)`, sorting only the values at
    least the count-th largest (ties at that value included, so the order is exact)."""
    if count >= values.shape[0]:
        return _descending(values)
    if count <= 0:
        return np.zeros(0, np.int64)
    threshold = np.partition(values, values.shape[0] - count)[values.shape[0] - count]
    candidates = np.flatnonzero(values >= threshold)  # ascending ids: ties keep id order
    return candidates[_descending(values[candidates])][:count]


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
        out = np.full(logprobs.shape, -np.inf)
        for row, values in enumerate(logprobs):
            kept = self._kept(values)
            out[row, kept] = values[kept]
        return out

    def _kept(self, values: np.ndarray) -> np.ndarray:
        """The ids `filtered` keeps of one row of log-probabilities `values`.

        Each filter keeps a prefix of the descending ranking (`_descending`'s order), so
        their chain keeps its first n tokens, n the least of top_k, the count min_p keeps
        and the prefix top_p keeps. Only that prefix is sorted: the `count` best tokens
        (more than top_k or min_p allow are never needed), and for top_p, starting from
        CANDIDATES, four times more until the probability left outside them is <= 1 -
        top_p (then no token outside is kept: its ascending cumulative sum is at most
        that). LM distributions are peaked, so top_p's prefix is usually a few hundred
        tokens, and a vocabulary of 150k is not sorted every step."""
        vocab = values.shape[0]
        limit = vocab if self.top_k is None else min(self.top_k, vocab)
        if self.min_p > 0:
            floor = values.max() + math.log(self.min_p)
            limit = min(limit, int(np.count_nonzero(values >= floor)))
        if self.top_p >= 1:
            return np.arange(vocab) if limit >= vocab else _best(values, limit)
        count = min(vocab, max(limit if limit < vocab else 0, CANDIDATES))
        while True:
            best = _best(values, count)
            inside = np.exp(values[best])
            rest = np.ones(vocab, bool)
            rest[best] = False
            outside = float(np.sum(np.exp(values[rest])))
            if outside <= 1 - self.top_p or count >= limit:
                break
            count = min(vocab, 4 * count)
        # ascending cumulative sums, as mlx-lm's: the tokens outside come first
        cumulative = outside + np.cumsum(inside[::-1])[::-1]
        prefix = int(np.count_nonzero(cumulative > 1 - self.top_p))
        return best[: min(limit, prefix)]

    def probabilities(self, logits: object) -> np.ndarray:
        """The (rows, vocab) float64 distribution a draw follows: softmax of the filtered
        log-probabilities over the temperature (one-hot at the argmax when greedy)."""
        if self.is_greedy:
            tokens = self.sample(logits, None)
            one_hot = np.zeros((tokens.shape[0], np.shape(logits)[-1]))
            one_hot[np.arange(tokens.shape[0]), tokens] = 1.0
            return one_hot
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
