"""Prompt caches: `generate` resuming from the state saved after a prompt (in memory or
through a file) gives the tokens of a run over the whole prompt on every backend; a
cache of another program, or of another prompt, is refused by name before anything is
written to the state; a file that is no prompt cache is a LoadError."""

import numpy as np
import pytest

import tensorgraph as tg
from tensorgraph.errors import LoadError, RunError, SaveError
from tensorgraph.models.generation import cache_prompt, generate, llama_generation
from tensorgraph.models.llama import LlamaConfig
from tensorgraph.models.prompt_cache import (
    load_prompt_cache,
    program_identity,
    save_prompt_cache,
)
from tensorgraph.models.sampling import Sampler

CONFIG = LlamaConfig(dim=16, heads=2, hidden=24, layers=2, vocab=20)
PROMPT = [4, 8, 15, 16, 2]


def compiled(seed: int = 0, config: LlamaConfig = CONFIG, **options: object) -> object:
    entries = llama_generation(config, max_seq=16, buckets=(4, 8), seed=seed, **options)
    return tg.compile(entries)


@pytest.fixture(scope="module")
def program() -> object:
    return compiled()


def states_of(state) -> dict[str, np.ndarray]:
    return {name: state[name] for name in state.names}


@pytest.mark.parametrize("backend", ["numpy", "arena", "mlx"])
@pytest.mark.parametrize("sampler", [Sampler(), Sampler(temperature=0.9, top_k=6, seed=4)])
def test_resuming_from_a_saved_prompt_gives_the_whole_prompts_tokens(
    program, backend, sampler, tmp_path
) -> None:
    whole = generate(program, PROMPT, 8, backend=backend, sampler=sampler)
    path = tmp_path / "prompt.npz"
    save_prompt_cache(cache_prompt(program, PROMPT, backend=backend), path)
    cache = load_prompt_cache(path, program)
    assert cache.length == len(PROMPT) and cache.identity == program_identity(program)
    resumed = generate(program, PROMPT, 8, backend=backend, sampler=sampler, prompt_cache=cache)
    assert np.array_equal(resumed.tokens, whole.tokens) and resumed.bucket == 0
    for name, value in states_of(whole.state).items():
        assert np.array_equal(resumed.state[name], value), name


def test_a_cache_from_one_backend_resumes_on_another(program) -> None:
    cache = cache_prompt(program, PROMPT, backend="numpy")
    whole = generate(program, PROMPT, 6, backend="numpy").tokens
    for backend in ("arena", "mlx"):
        resumed = generate(program, PROMPT, 6, backend=backend, prompt_cache=cache).tokens
        assert np.array_equal(resumed, whole), backend


def test_a_longer_prompt_runs_its_new_tokens_on_top_of_the_cache(program) -> None:
    """The extra prompt tokens go through decode steps instead of a prefill: the same
    computation in another order, so the tokens agree (float32, no near tie here)."""
    cache = cache_prompt(program, PROMPT[:2], backend="numpy")
    whole = generate(program, PROMPT, 7, backend="numpy").tokens
    resumed = generate(program, PROMPT, 7, backend="numpy", prompt_cache=cache)
    assert np.array_equal(resumed.tokens, whole) and resumed.prompt_length == len(PROMPT)


def test_a_prompt_longer_than_every_bucket_resumes_from_a_cache(program) -> None:
    cache = cache_prompt(program, PROMPT, backend="numpy")
    prompt = [*PROMPT, 1, 2, 3, 4, 5]  # 10 tokens: past the largest bucket, 8
    with pytest.raises(RunError, match="longer than the largest prefill bucket 8"):
        generate(program, prompt, 2, backend="numpy")
    assert generate(program, prompt, 2, backend="numpy", prompt_cache=cache).tokens.shape == (1, 2)


def test_a_quantized_cache_round_trips(tmp_path) -> None:
    config = LlamaConfig(dim=64, heads=2, hidden=24, layers=1, vocab=20)  # head size 32
    program = compiled(config=config, kv_bits=8, kv_group_size=32)
    codes = program.entries["decode"].graph.states[0]
    assert codes.dtype == tg.uint32
    path = tmp_path / "q.npz"
    save_prompt_cache(cache_prompt(program, PROMPT, backend="numpy"), path)
    cache = load_prompt_cache(path, program)
    whole = generate(program, PROMPT, 5, backend="numpy").tokens
    assert np.array_equal(
        generate(program, PROMPT, 5, backend="numpy", prompt_cache=cache).tokens, whole
    )


def fill(program, backend: str) -> object:
    """A state holding a generation's caches (not zeros), to see that nothing touches it."""
    return generate(program, [1, 2, 3], 4, backend=backend).state


@pytest.mark.parametrize("backend", ["numpy", "arena"])
def test_a_file_from_another_program_is_a_load_error(program, backend, tmp_path) -> None:
    other = compiled(seed=1)  # same layout, other weights
    path = tmp_path / "other.npz"
    save_prompt_cache(cache_prompt(other, PROMPT, backend="numpy"), path)
    with pytest.raises(LoadError, match=r"prompt cache .*other\.npz' was made by another program"):
        load_prompt_cache(path, program)
    state = fill(program, backend)
    before = states_of(state)
    cache = cache_prompt(other, PROMPT, backend="numpy")
    with pytest.raises(RunError, match="the prompt cache was made by another program"):
        generate(program, PROMPT, 3, backend=backend, state=state, prompt_cache=cache)
    for name, value in states_of(state).items():
        assert np.array_equal(value, before[name]), name


def test_another_state_layout_is_another_program(program) -> None:
    longer = tg.compile(llama_generation(CONFIG, max_seq=24, buckets=(4, 8)))
    assert program_identity(longer) != program_identity(program)
    assert program_identity(compiled()) == program_identity(program)


def test_a_prompt_that_does_not_extend_the_cached_one_is_refused(program) -> None:
    cache = cache_prompt(program, PROMPT, backend="numpy")
    state = fill(program, "numpy")
    before = states_of(state)
    with pytest.raises(RunError, match="differs from the cached prompt at position 2"):
        generate(program, [4, 8, 0, 16, 2], 3, backend="numpy", state=state, prompt_cache=cache)
    with pytest.raises(RunError, match=r"not an extension of the cached prompt \(1, 5\)"):
        generate(program, PROMPT[:3], 3, backend="numpy", state=state, prompt_cache=cache)
    with pytest.raises(RunError, match="past the cache length max_seq 16"):
        generate(program, PROMPT, 12, backend="numpy", state=state, prompt_cache=cache)
    for name, value in states_of(state).items():
        assert np.array_equal(value, before[name]), name


def test_a_file_that_is_no_prompt_cache_is_a_load_error(program, tmp_path) -> None:
    with pytest.raises(LoadError, match=r"missing\.npz': no such file"):
        load_prompt_cache(tmp_path / "missing.npz", program)
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip")
    with pytest.raises(LoadError, match=r"junk\.npz' is not a prompt cache file"):
        load_prompt_cache(junk, program)
    arrays = tmp_path / "arrays.npz"
    np.savez(arrays, x=np.zeros(3))
    with pytest.raises(LoadError, match=r"arrays\.npz' is not a prompt cache file \(no"):
        load_prompt_cache(arrays, program)


def test_saving_into_a_missing_folder_is_a_save_error(program, tmp_path) -> None:
    cache = cache_prompt(program, PROMPT, backend="numpy")
    with pytest.raises(SaveError, match=r"cannot write the prompt cache .*nowhere"):
        save_prompt_cache(cache, tmp_path / "nowhere" / "c.npz")


def test_assigning_a_value_of_another_shape_writes_nothing(program) -> None:
    state = fill(program, "arena")
    before = states_of(state)
    good = np.ones_like(before["k0"])
    with pytest.raises(RunError, match=r"state 'v0' is \(1, 2, 16, 8\) float32 but the value"):
        state.assign({"k0": good, "v0": np.ones((1, 2, 8, 8), np.float32)})
    for name, value in states_of(state).items():
        assert np.array_equal(value, before[name]), name


def test_a_state_of_another_backend_is_refused_before_the_cache_is_written(program) -> None:
    cache = cache_prompt(program, PROMPT, backend="numpy")
    state = fill(program, "numpy")
    before = states_of(state)
    with pytest.raises(RunError, match="a state made for backend 'numpy' cannot run on 'arena'"):
        generate(program, PROMPT, 3, backend="arena", state=state, prompt_cache=cache)
    for name, value in states_of(state).items():
        assert np.array_equal(value, before[name]), name
