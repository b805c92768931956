"""Generation on the zoo Llama: the multi-entry program (prefill buckets + decode over
KV-cache state) gives the token ids of the independent NumPy reference loop, on every
backend; its state rows equal the reference's growing cache after every step; bad
lengths and positions are RunErrors naming both numbers that leave the state as it was.

The oracle itself is checked first against the zoo `llama` prefill graph (a different
code path: tensorgraph, full causal attention over the whole sequence, no cache)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.errors import GraphError, RunError
from tensorgraph.models.generation import (
    choose_bucket,
    generate,
    generation_layout,
    llama_generation,
    llama_weights,
    reference_generate,
)
from tensorgraph.models.llama import LlamaConfig, llama

# Cache rows: the program computes in float32, the reference in float64; k/v after
# a layer or two of float32 rounding agree to ~1e-6 of their magnitude (about 1).
CACHE_TOLERANCE = 1e-4


@st.composite
def configs(draw: st.DrawFn) -> LlamaConfig:
    """Small Llamas: 1-2 layers, 1-4 heads of even size 4-16, batch 1-2."""
    heads = draw(st.sampled_from((1, 2, 4)))
    head_dim = draw(st.sampled_from((4, 8, 16)))
    return LlamaConfig(
        batch=draw(st.integers(1, 2)),
        dim=heads * head_dim,
        heads=heads,
        hidden=draw(st.sampled_from((16, 40))),
        layers=draw(st.integers(1, 2)),
        vocab=draw(st.sampled_from((16, 37, 64))),
    )


@st.composite
def cases(draw: st.DrawFn) -> tuple:
    """(config, max_seq, buckets, prompt, new tokens, seed): the prompt fits the largest
    bucket and prompt + tokens fits max_seq."""
    config = draw(configs())
    max_seq = draw(st.integers(4, 24))
    buckets = draw(st.lists(st.integers(1, max_seq), min_size=1, max_size=3, unique=True))
    length = draw(st.integers(1, min(max(buckets), max_seq - 1)))
    tokens = draw(st.integers(1, max_seq - length))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    prompt = rng.integers(0, config.vocab, (config.batch, length)).astype(np.int32)
    return config, max_seq, tuple(buckets), prompt, tokens, draw(st.integers(0, 3))


def compiled(config: LlamaConfig, max_seq: int, buckets: tuple, seed: int) -> object:
    return tg.compile(llama_generation(config, max_seq=max_seq, buckets=buckets, seed=seed))


def assert_tokens_equal(got: np.ndarray, reference) -> None:
    """Token ids equal; on a difference the message gives the reference's top-2 margin at
    that step (a genuine near-tie would show a margin near float32 rounding)."""
    if not np.array_equal(got, reference.tokens):
        step = int(np.argmax((got != reference.tokens).any(axis=0)))
        top2 = np.sort(reference.logits[step], axis=-1)[:, -2:]
        raise AssertionError(
            f"tokens differ at step {step}: {got.tolist()} vs {reference.tokens.tolist()}; "
            f"reference top-2 margin {(top2[:, 1] - top2[:, 0]).tolist()}"
        )


def test_weights_are_the_zoo_llama_weights() -> None:
    config = LlamaConfig(dim=32, heads=2, hidden=48, vocab=40)
    weights = llama_weights(config, 0)
    zoo = llama(config).graph.param_values
    assert weights.keys() == zoo.keys()
    for name, value in weights.items():
        assert value.dtype == zoo[name].dtype and np.array_equal(value, zoo[name]), name
    other = llama_weights(config, 1)
    assert not np.array_equal(other["embed"], weights["embed"]), "the seed matters"


@settings(max_examples=10)
@given(config=configs(), data=st.data())
def test_reference_agrees_with_the_zoo_llama_prefill(config, data) -> None:
    """Teacher forcing: the zoo `llama` graph over prompt + generated tokens (but the
    last) predicts at each position the logits the reference produced step by step."""
    prompt_len = data.draw(st.integers(1, 6))
    tokens = data.draw(st.integers(1, 6))
    prompt = np.random.default_rng(prompt_len).integers(0, config.vocab, (config.batch, prompt_len))
    reference = reference_generate(config, llama_weights(config), prompt, tokens)
    assert reference.tokens.shape == (config.batch, tokens)
    assert reference.tokens.dtype == np.int32
    sequence = np.concatenate([prompt, reference.tokens[:, :-1]], axis=1).astype(np.int32)
    model = llama(config, seq=sequence.shape[1])
    (logits,) = tg.compile(model.graph).run({"tokens": sequence}, backend="numpy")
    for step in range(tokens):
        want = reference.logits[step]
        got = logits[:, prompt_len - 1 + step]
        assert np.max(np.abs(got - want)) <= 1e-4 * max(1.0, np.max(np.abs(want)))
    head_dim = config.dim // config.heads
    for keys in reference.keys:
        assert keys.shape == (config.batch, config.heads, prompt_len + tokens - 1, head_dim)


def test_entries_names_shapes_and_shared_weights() -> None:
    config = LlamaConfig(batch=2, dim=16, heads=2, hidden=24, layers=2, vocab=20)
    entries = llama_generation(config, max_seq=40, buckets=(64, 8, 32), seed=0)
    assert list(entries) == ["prefill8", "prefill32", "decode8", "decode32", "decode"], (
        "buckets past max_seq drop; the fitting ones are also decode windows"
    )
    weights = llama_weights(config)
    for graph in entries.values():
        assert graph.param_values.keys() == weights.keys()
        assert all(np.array_equal(graph.param_values[n], w) for n, w in weights.items())
        states = {node.name: node.shape for node in graph.states}
        # per layer k and v: (batch, heads, max_seq, head_dim) = (2, 2, 40, 8)
        assert states == {f"{kv}{i}": (2, 2, 40, 8) for kv in "kv" for i in range(2)}
        assert set(graph.state_updates) == set(states)
    program = tg.compile(entries)
    # weights once: embed 20x16, per layer 4 of 16x16 and 3 of 16x24, lm_head 16x20, and
    # the norm scales (2 per layer + the final one, all ones of (16,)): equal arrays,
    # stored once whatever their names; float32. Each array is aligned to 64 bytes.
    per_layer = 4 * 16 * 16 + 3 * 16 * 24
    weight_bytes = 4 * (20 * 16 + 2 * per_layer + 16 + 16 * 20)
    assert weight_bytes <= program.constant_size < weight_bytes + 64 * len(weights)
    state_bytes = 4 * 2 * 2 * 40 * 8  # one cache
    assert 4 * state_bytes <= program.state_size < 4 * state_bytes + 64 * 4
    alone = max(tg.compile(g).plan.arena_size for g in entries.values())
    assert program.arena_size <= alone


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_seq": 0}, "max_seq must be a positive int but got 0"),
        ({"buckets": ()}, r"buckets must be positive ints but got \(\)"),
        ({"buckets": (0, 4)}, "buckets must be positive ints"),
        ({"max_seq": 8, "buckets": (16, 32)}, "smallest bucket 16 is longer than the cache"),
        ({"seed": -1}, "seed must be a non-negative int but got -1"),
    ],
)
def test_bad_generation_arguments_name_the_value(kwargs, message) -> None:
    with pytest.raises(GraphError, match=message):
        llama_generation(LlamaConfig(dim=16, heads=2, hidden=16, vocab=16), **kwargs)


def test_choose_bucket_by_hand() -> None:
    assert choose_bucket((32, 128, 512), 512, 1, 1) == 32
    assert choose_bucket((32, 128, 512), 512, 32, 1) == 32
    assert choose_bucket((32, 128, 512), 512, 33, 4) == 128
    assert choose_bucket((512, 32), 600, 200, 4) == 512
    with pytest.raises(RunError, match=r"prompt length 513 .* largest prefill bucket 512"):
        choose_bucket((32, 128, 512), 1024, 513, 1)
    with pytest.raises(RunError, match=r"prompt length 500 \+ 13 new tokens = 513 .* 512"):
        choose_bucket((32, 128, 512), 512, 500, 13)
    with pytest.raises(RunError, match="empty"):
        choose_bucket((32,), 64, 0, 1)
    with pytest.raises(RunError, match="tokens 0"):
        choose_bucket((32,), 64, 3, 0)


def stepwise(program, config, prompt, tokens, backend, check_state):
    """Drive the entries by hand as `generate` does, calling check_state(state, pos)
    after every call (pos: the last row written). Returns the token ids."""
    state = program.new_state(backend)
    layout_buckets = sorted(int(n[7:]) for n in program.entries if n.startswith("prefill"))
    length = prompt.shape[1]
    bucket = min(b for b in layout_buckets if b >= length)
    padded = np.zeros((config.batch, bucket), np.int32)
    padded[:, :length] = prompt
    feeds = {"tokens": padded, "length": np.array(length, np.int32)}
    (logits,) = program.run(f"prefill{bucket}", feeds, backend=backend, state=state)
    out = [np.argmax(logits, axis=-1).astype(np.int32)]
    check_state(state, length - 1)
    for step in range(1, tokens):
        pos = length + step - 1
        feeds = {"token": out[-1][:, None], "pos": np.array(pos, np.int32)}
        (logits,) = program.run("decode", feeds, backend=backend, state=state)
        out.append(np.argmax(logits, axis=-1).astype(np.int32))
        check_state(state, pos)
    return np.stack(out, axis=1)


@settings(max_examples=12)
@given(case=cases(), backend=st.sampled_from(("numpy", "arena")))
def test_tokens_and_caches_equal_the_reference_after_every_step(case, backend) -> None:
    config, max_seq, buckets, prompt, tokens, seed = case
    program = compiled(config, max_seq, buckets, seed)
    reference = reference_generate(config, llama_weights(config, seed), prompt, tokens)

    def check_state(state, pos):
        for i in range(config.layers):
            for name, cache in ((f"k{i}", reference.keys[i]), (f"v{i}", reference.values[i])):
                rows = state[name][:, :, : pos + 1]
                want = cache[:, :, : pos + 1]
                assert rows.shape == want.shape and rows.dtype == np.float32
                scale = max(1.0, float(np.max(np.abs(want))))
                assert np.max(np.abs(rows - want)) <= CACHE_TOLERANCE * scale, (name, pos)

    assert_tokens_equal(stepwise(program, config, prompt, tokens, backend, check_state), reference)
    result = generate(program, prompt, tokens, backend=backend)
    assert_tokens_equal(result.tokens, reference)
    assert result.bucket == min(b for b in buckets if b >= prompt.shape[1])
    assert result.prompt_length == prompt.shape[1] and result.decode_steps == tokens - 1


@settings(max_examples=5)
@given(case=cases())
def test_mlx_tokens_equal_the_reference(case) -> None:
    config, max_seq, buckets, prompt, tokens, seed = case
    program = compiled(config, max_seq, buckets, seed)
    reference = reference_generate(config, llama_weights(config, seed), prompt, tokens)
    assert_tokens_equal(generate(program, prompt, tokens, backend="mlx").tokens, reference)


def test_generation_memory_and_rates() -> None:
    config = LlamaConfig(dim=16, heads=2, hidden=24, layers=1, vocab=20)
    program = compiled(config, 16, (4, 8), 0)
    result = generate(program, [1, 2, 3], 5, backend="numpy")
    assert result.tokens.shape == (1, 5) and result.bucket == 4
    memory = result.memory
    assert set(memory.entries) == {"prefill4", "prefill8", "decode4", "decode8", "decode"}
    assert memory.arena == max(memory.entries.values()) == program.arena_size
    assert memory.total == program.arena_size + program.constant_size + program.state_size
    # 3 prompt tokens in the prefill, 4 tokens from 4 decode steps
    assert math.isclose(result.prefill_tokens_per_second, 3 / result.prefill_seconds)
    assert math.isclose(result.decode_tokens_per_second, 4 / result.decode_seconds)
    single = generate(program, [1, 2, 3], 1, backend="numpy")
    assert single.decode_steps == 0 and math.isnan(single.decode_tokens_per_second)


def snapshot(state, config) -> dict[str, np.ndarray]:
    return {f"{kv}{i}": state[f"{kv}{i}"] for kv in "kv" for i in range(config.layers)}


@pytest.mark.parametrize("backend", ["numpy", "arena", "mlx"])
def test_bad_lengths_and_positions_leave_the_state_unchanged(backend) -> None:
    config = LlamaConfig(dim=16, heads=2, hidden=24, layers=2, vocab=20)
    program = compiled(config, 12, (4, 8), 0)
    state = program.new_state(backend)
    generate(program, [3, 1, 4, 1, 5], 3, backend=backend, state=state)
    before = snapshot(state, config)
    assert any(np.any(a != 0) for a in before.values()), "the prefill wrote the caches"
    with pytest.raises(
        RunError, match="prompt length 9 is longer than the largest prefill bucket 8"
    ):
        generate(program, np.arange(9), 2, backend=backend, state=state)
    with pytest.raises(RunError, match=r"prompt length 8 \+ 5 new tokens = 13 .* max_seq 12"):
        generate(program, np.arange(8), 5, backend=backend, state=state)
    # decode at pos 12 would write row 12 of a 12-row cache: helper A's slice_update check
    feeds = {"token": np.zeros((1, 1), np.int32), "pos": np.array(12, np.int32)}
    with pytest.raises(RunError, match=r"12.*12"):
        program.run("decode", feeds, backend=backend, state=state)
    # a decode window of 8 rows cannot attend to position 8: checked, never truncated
    feeds["pos"] = np.array(8, np.int32)
    with pytest.raises(RunError, match="index 8 is out of range for axis 0 of size 8"):
        program.run("decode8", feeds, backend=backend, state=state)
    after = snapshot(state, config)
    for name, value in before.items():
        assert np.array_equal(after[name], value), name


def test_prompt_shape_and_ids_are_checked() -> None:
    config = LlamaConfig(batch=2, dim=16, heads=2, hidden=24, layers=1, vocab=20)
    program = compiled(config, 12, (4,), 0)
    with pytest.raises(RunError, match=r"prompt of shape \(3, 2\): expected \(n,\) or \(2, n\)"):
        generate(program, np.zeros((3, 2), np.int32), 1, backend="numpy")
    with pytest.raises(RunError, match="must be integers"):
        generate(program, np.zeros(2, np.float32), 1, backend="numpy")


@pytest.mark.parametrize("backend", ["numpy", "arena", "mlx"])
def test_every_decode_window_gives_the_whole_cache_decodes_logits(backend) -> None:
    """decode{W} attends over the first W rows: at any pos < W its logits equal those of
    the whole-cache decode on the same state (the mask hides every row past pos)."""
    config = LlamaConfig(dim=16, heads=2, hidden=24, layers=2, vocab=20)
    program = compiled(config, 16, (4, 8), 0)
    assert generation_layout(program).windows == (4, 8)
    for pos in (0, 3, 5, 7):
        logits = {}
        for entry in ("decode", "decode8") + (("decode4",) if pos < 4 else ()):
            state = program.new_state(backend)
            generate(program, [1, 2, 3], 1, backend=backend, state=state)
            token = {"token": np.array([[pos % 20]], np.int32), "pos": np.array(pos, np.int32)}
            (logits[entry],) = program.run(entry, token, backend=backend, state=state)
        for entry, value in logits.items():
            np.testing.assert_allclose(value, logits["decode"], rtol=1e-5, atol=1e-6, err_msg=entry)
    assert generation_layout(program).decode_entry(3) == "decode4"
    assert generation_layout(program).decode_entry(4) == "decode8"
    assert generation_layout(program).decode_entry(8) == "decode"
