"""Generation on the zoo Llama with a symbolic prefill (`llama_generation(prefill=
"symbolic")`): one "prefill" entry at the prompt's real length, beside the decode entries,
in one MultiProgram. Its tokens equal the independent NumPy reference loop's and the
bucketed program's for any prompt length, on every backend; the prompt cache works
across both programs; a prompt outside the entry's range is a RunError naming it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.models.generation import (
    cache_prompt,
    generate,
    generation_layout,
    llama_generation,
    llama_weights,
    prefill_logits,
    reference_generate,
)
from tensorgraph.models.llama import LlamaConfig

CONFIG = LlamaConfig(layers=2, dim=32, heads=2, hidden=64, vocab=61, batch=1)
MAX_SEQ, BUCKETS = 40, (8, 32)


@pytest.fixture(scope="module")
def programs() -> tuple[object, object]:
    """(symbolic, bucketed) generation programs of the same weights."""
    symbolic = tg.compile(
        llama_generation(CONFIG, max_seq=MAX_SEQ, buckets=BUCKETS, prefill="symbolic")
    )
    bucketed = tg.compile(llama_generation(CONFIG, max_seq=MAX_SEQ, buckets=BUCKETS))
    return symbolic, bucketed


def test_one_symbolic_prefill_entry_replaces_the_buckets(programs) -> None:
    symbolic, _ = programs
    assert sorted(symbolic.entries) == ["decode", "decode32", "decode8", "prefill"]
    prefill = symbolic.entries["prefill"].graph
    (prompt,) = prefill.dims.values()
    assert (prompt.name, prompt.min, prompt.max) == ("prompt", 1, MAX_SEQ)
    assert [(n.name, n.shape) for n in prefill.inputs] == [("tokens", (1, prompt))]
    layout = generation_layout(symbolic)
    assert (layout.buckets, layout.prompt_range, layout.windows) == ((), (1, MAX_SEQ), (8, 32))


@settings(max_examples=8)
@given(st.integers(1, BUCKETS[-1]), st.integers(1, 6), st.integers(0, 2**16))
def test_tokens_equal_the_reference_and_the_bucketed_program(
    programs, length: int, tokens: int, seed: int
) -> None:
    symbolic, bucketed = programs
    prompt = np.random.default_rng(seed).integers(0, CONFIG.vocab, length)
    want = reference_generate(CONFIG, llama_weights(CONFIG), prompt, tokens).tokens
    got = generate(symbolic, prompt, tokens, backend="numpy")
    assert got.bucket == length  # no padding: the prefill ran at the prompt's length
    np.testing.assert_array_equal(got.tokens, want)
    np.testing.assert_array_equal(generate(bucketed, prompt, tokens, backend="numpy").tokens, want)


@pytest.mark.parametrize("backend", ["arena", "mlx"])
@pytest.mark.parametrize("length", [1, 9, 33])
def test_every_backend_gives_the_reference_tokens(programs, backend: str, length: int) -> None:
    symbolic, _ = programs
    prompt = np.random.default_rng(length).integers(0, CONFIG.vocab, length)
    want = reference_generate(CONFIG, llama_weights(CONFIG), prompt, 5).tokens
    np.testing.assert_array_equal(generate(symbolic, prompt, 5, backend=backend).tokens, want)


def test_the_prefill_logits_match_the_bucketed_program(programs) -> None:
    symbolic, bucketed = programs
    prompt = np.arange(11) % CONFIG.vocab  # between the buckets 8 and 32
    np.testing.assert_allclose(
        prefill_logits(symbolic, prompt, "numpy"),
        prefill_logits(bucketed, prompt, "numpy"),
        rtol=1e-5,
        atol=1e-5,
    )


def test_a_prompt_cache_carries_over_between_the_two_programs(programs) -> None:
    symbolic, bucketed = programs
    prompt = np.random.default_rng(3).integers(0, CONFIG.vocab, 14)
    want = generate(symbolic, prompt, 4, backend="numpy").tokens
    for source in (symbolic, bucketed):  # same weights and state layout: same identity
        cache = cache_prompt(source, prompt[:9], backend="numpy")
        got = generate(symbolic, prompt, 4, backend="numpy", prompt_cache=cache)
        assert got.bucket == 0
        np.testing.assert_array_equal(got.tokens, want)


def test_a_prompt_outside_the_range_is_a_run_error_that_runs_nothing(programs) -> None:
    symbolic, _ = programs
    state = symbolic.new_state("numpy")
    before = {name: state[name].copy() for name in state.names}
    too_long = np.zeros(MAX_SEQ + 1, np.int32)
    with pytest.raises(
        tg.RunError, match=r"prompt length 41 is outside the symbolic prefill's range \[1, 40\]"
    ):
        generate(symbolic, too_long, 1, backend="numpy", state=state)
    with pytest.raises(tg.RunError, match=r"prompt length 38 \+ 3 new tokens = 41 is past"):
        generate(symbolic, np.zeros(38, np.int32), 3, backend="numpy", state=state)
    with pytest.raises(tg.RunError, match=r"the prompt is empty"):
        generate(symbolic, np.zeros(0, np.int32), 1, backend="numpy", state=state)
    for name in state.names:
        np.testing.assert_array_equal(state[name], before[name])


def test_a_quantized_cache_prefills_at_the_real_length_too() -> None:
    config = LlamaConfig(layers=1, dim=64, heads=1, hidden=64, vocab=32)
    entries = llama_generation(config, max_seq=24, buckets=(16,), kv_bits=8, prefill="symbolic")
    program = tg.compile(entries)
    prompt = np.arange(10) % config.vocab
    want = reference_generate(config, llama_weights(config), prompt, 4, kv_bits=8).tokens
    np.testing.assert_array_equal(generate(program, prompt, 4, backend="numpy").tokens, want)


def test_an_unknown_prefill_mode_is_a_graph_error() -> None:
    with pytest.raises(
        tg.GraphError, match=r"prefill must be one of \('buckets', 'symbolic'\) but got 'padded'"
    ):
        llama_generation(CONFIG, max_seq=MAX_SEQ, prefill="padded")


def test_the_symbolic_program_saves_and_loads_with_its_tokens(programs, tmp_path) -> None:
    symbolic, _ = programs
    symbolic.save(tmp_path / "gen.tgp")
    loaded = tg.load(tmp_path / "gen.tgp")
    assert sorted(loaded.entries) == sorted(symbolic.entries)
    for length in (1, 17, MAX_SEQ - 6):
        prompt = np.random.default_rng(length).integers(0, CONFIG.vocab, length)
        want = generate(symbolic, prompt, 6, backend="arena").tokens
        np.testing.assert_array_equal(generate(loaded, prompt, 6, backend="arena").tokens, want)
    prompt = np.arange(9) % CONFIG.vocab
    want = generate(symbolic, prompt, 4, backend="mlx").tokens
    np.testing.assert_array_equal(generate(loaded, prompt, 4, backend="mlx").tokens, want)
