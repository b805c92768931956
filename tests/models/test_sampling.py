"""Sampling: each filter keeps exactly the tokens mlx-lm's formulas keep (checked against
a direct NumPy computation of each rule), draws follow the filtered distribution and
restart at the seed, parameters out of range are RunErrors naming the parameter, and
`generate` with a sampler gives the same tokens on every backend for a seed, streaming
each token to `on_token` before the next step runs."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.errors import RunError
from tensorgraph.models.generation import generate, llama_generation
from tensorgraph.models.llama import LlamaConfig
from tensorgraph.models.sampling import Sampler
from tests.strategies import samplers

CONFIG = LlamaConfig(dim=16, heads=2, hidden=24, layers=1, vocab=20)


@pytest.fixture(scope="module")
def program() -> object:
    return tg.compile(llama_generation(CONFIG, max_seq=16, buckets=(4, 8)))


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def logits_from(seed: int, vocab: int = 24, scale: float = 2.0) -> np.ndarray:
    """Random logits, float32: a large flat vocabulary has ties, which a rule's set
    resolves as a stable sort does (the lower id first)."""
    return np.random.default_rng(seed).normal(0, scale, vocab).astype(np.float32)


# (vocab, scale): a small peaked row, and a large flat one whose top-p prefix is longer
# than the tokens the sampler sorts first (sampling.CANDIDATES), so it sorts more
ROWS = st.sampled_from([(24, 2.0), (3000, 0.3), (3000, 4.0)])


def descending(logits: np.ndarray) -> np.ndarray:
    return np.argsort(-logits.astype(np.float64), kind="stable")


def support(sampler: Sampler, logits: np.ndarray) -> set[int]:
    return set(np.flatnonzero(sampler.probabilities(logits)[0] > 0).tolist())


@given(seed=st.integers(0, 2**16), top_p=st.floats(0.05, 0.99), row=ROWS)
def test_top_p_keeps_the_smallest_set_reaching_p(seed, top_p, row) -> None:
    logits = logits_from(seed, *row)
    p = softmax(logits.astype(np.float64))
    order = descending(logits)
    count = int(np.searchsorted(np.cumsum(p[order]), top_p)) + 1  # first prefix sum >= p
    kept = support(Sampler(temperature=1.0, top_p=top_p), logits)
    assert kept == set(order[:count].tolist())


@given(seed=st.integers(0, 2**16), min_p=st.floats(0.0, 0.99), row=ROWS)
def test_min_p_keeps_tokens_of_at_least_min_p_times_the_top_probability(seed, min_p, row) -> None:
    logits = logits_from(seed, *row)
    p = softmax(logits.astype(np.float64))
    want = set(np.flatnonzero(p >= min_p * p.max()).tolist())
    assert support(Sampler(temperature=1.0, min_p=min_p), logits) == want


@given(seed=st.integers(0, 2**16), top_k=st.integers(1, 400), row=ROWS)
def test_top_k_keeps_the_k_most_likely(seed, top_k, row) -> None:
    logits = logits_from(seed, *row)
    want = set(descending(logits)[:top_k].tolist())
    assert support(Sampler(temperature=0.5, top_k=top_k), logits) == want


def test_top_k_breaks_ties_towards_the_lower_id() -> None:
    logits = np.array([1.0, 3.0, 2.0, 3.0, 3.0], np.float32)
    assert support(Sampler(temperature=1.0, top_k=2), logits) == {1, 3}


@given(sampler=samplers(), seed=st.integers(0, 2**16), row=ROWS)
def test_filters_chain_to_the_intersection_and_temperature_scales(sampler, seed, row) -> None:
    logits = logits_from(seed, *row)
    want = np.zeros(logits.shape)
    if sampler.is_greedy:
        want[np.argmax(logits)] = 1.0
    else:
        kept = sorted(
            set.intersection(
                support(Sampler(temperature=1.0, top_p=sampler.top_p), logits),
                support(Sampler(temperature=1.0, min_p=sampler.min_p), logits),
                support(Sampler(temperature=1.0, top_k=sampler.top_k), logits),
            )
        )
        want[kept] = softmax(logits[kept].astype(np.float64) / sampler.temperature)
    np.testing.assert_allclose(sampler.probabilities(logits)[0], want, rtol=1e-12, atol=1e-15)


def test_draws_follow_the_filtered_distribution() -> None:
    logits = logits_from(7, vocab=8)
    sampler = Sampler(temperature=0.7, top_p=0.95, seed=1)
    rows = np.broadcast_to(logits, (20000, 8))
    drawn = sampler.sample(rows, sampler.generator())
    frequency = np.bincount(drawn, minlength=8) / drawn.size
    want = sampler.probabilities(logits)[0]
    assert set(np.flatnonzero(frequency).tolist()) <= set(np.flatnonzero(want).tolist())
    assert np.max(np.abs(frequency - want)) < 0.015  # 20,000 draws: sd <= 0.0036


def test_temperature_zero_is_the_argmax_and_draws_nothing() -> None:
    logits = np.stack([logits_from(s) for s in range(5)])
    generator = np.random.default_rng(0)
    before = generator.bit_generator.state
    tokens = Sampler(temperature=0.0, top_k=3, top_p=0.5, seed=9).sample(logits, generator)
    assert tokens.dtype == np.int32 and np.array_equal(tokens, np.argmax(logits, axis=-1))
    assert generator.bit_generator.state == before


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"temperature": -0.5}, r"temperature must be >= 0 .* got -0\.5"),
        ({"temperature": float("nan")}, r"temperature must be finite but got nan"),
        ({"top_p": 0.0}, r"top_p must be in \(0, 1\] .* got 0\.0"),
        ({"top_p": 1.5}, r"top_p must be in \(0, 1\] .* got 1\.5"),
        ({"top_k": 0}, r"top_k must be an int >= 1 or None .* got 0"),
        ({"top_k": 2.5}, r"top_k must be an int >= 1 or None .* got 2\.5"),
        ({"min_p": 1.0}, r"min_p must be in \[0, 1\) .* got 1\.0"),
        ({"min_p": -0.1}, r"min_p must be in \[0, 1\) .* got -0\.1"),
        ({"seed": -1}, r"seed must be an int >= 0 but got -1"),
        ({"temperature": "hot"}, r"temperature must be a number but got 'hot'"),
    ],
)
def test_a_parameter_out_of_range_is_a_run_error_naming_it(options, message) -> None:
    with pytest.raises(RunError, match=message):
        Sampler(**options)


def test_generate_refuses_a_non_sampler_before_running(program) -> None:
    state = program.new_state("numpy")
    with pytest.raises(RunError, match="sampler must be a Sampler but got dict"):
        generate(program, [1, 2], 3, backend="numpy", state=state, sampler={"temperature": 1})
    assert all(not state[name].any() for name in state.names)


def test_greedy_sampler_is_the_default(program) -> None:
    default = generate(program, [3, 1, 4], 6, backend="numpy").tokens
    greedy = generate(program, [3, 1, 4], 6, backend="numpy", sampler=Sampler(seed=5)).tokens
    assert np.array_equal(default, greedy)


@settings(max_examples=15)
@given(
    sampler=samplers(), prompt=st.lists(st.integers(0, CONFIG.vocab - 1), min_size=1, max_size=8)
)
def test_sampled_tokens_are_the_same_on_numpy_and_arena(program, sampler, prompt) -> None:
    numpy_tokens = generate(program, prompt, 8, backend="numpy", sampler=sampler).tokens
    arena_tokens = generate(program, prompt, 8, backend="arena", sampler=sampler).tokens
    assert np.array_equal(numpy_tokens, arena_tokens)
    again = generate(program, prompt, 8, backend="numpy", sampler=sampler).tokens
    assert np.array_equal(again, numpy_tokens), "the draws restart at the seed"


def test_sampled_tokens_are_the_same_on_mlx_and_numpy_for_a_seed(program) -> None:
    """float32 logits of MLX and NumPy differ by rounding only: no draw of these seeds
    lies that close to a boundary of the cumulative distribution."""
    seen = set()
    for seed in range(4):
        sampler = Sampler(temperature=1.0, top_p=0.9, min_p=0.02, seed=seed)
        want = generate(program, [5, 6, 7], 10, backend="numpy", sampler=sampler).tokens
        got = generate(program, [5, 6, 7], 10, backend="mlx", sampler=sampler).tokens
        assert np.array_equal(got, want), seed
        seen.add(tuple(want[0]))
    assert len(seen) > 1, "different seeds draw different tokens"


def test_tokens_stream_in_order_as_they_are_made(program, monkeypatch) -> None:
    runs = []
    real = type(program).run

    def counted(self, *args, **kwargs):
        runs.append(args[0])
        return real(self, *args, **kwargs)

    monkeypatch.setattr(type(program), "run", counted)
    streamed = []

    def on_token(ids: np.ndarray) -> None:
        assert ids.shape == (CONFIG.batch,) and ids.dtype == np.int32
        streamed.append((len(runs), int(ids[0])))

    sampler = Sampler(temperature=1.0, seed=2)
    result = generate(program, [1, 2, 3], 5, backend="numpy", sampler=sampler, on_token=on_token)
    assert [token for _, token in streamed] == result.tokens[0].tolist()
    assert [count for count, _ in streamed] == [1, 2, 3, 4, 5]  # each before the next call
    assert runs == ["prefill4", "decode4", "decode8", "decode8", "decode8"]
