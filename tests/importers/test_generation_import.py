"""from_torch_generation (importers.generation): a transformers Llama (random weights from a
tiny config) imported as prefill buckets + decode over one static KV cache held as
state, compiled as one MultiProgram, against transformers itself: the greedy tokens of
`model.generate` (token for token), the logits of the model's own forward, and the
tensors of its own StaticCache after the same prompt. The model is exported once per
session (strict export: about 4 s per entry)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch", reason="the models extra is not installed")
pytest.importorskip("transformers", reason="the models extra is not installed")

import tensorgraph as tg  # noqa: E402
from tensorgraph.importers.generation import from_torch_generation  # noqa: E402
from tests.models_suite.catalog import _transformers  # noqa: E402

BACKENDS = ("numpy", "arena", "mlx")
MAX_SEQ, BUCKETS, VOCAB, LAYERS = 64, (8, 16), 128, 2


@pytest.fixture(scope="module")
def llama() -> tuple[torch.nn.Module, tg.MultiProgram]:
    transformers = _transformers()
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=MAX_SEQ,
    )
    model = transformers.LlamaForCausalLM(config).eval()
    entries = from_torch_generation(model, max_seq=MAX_SEQ, prompt_buckets=BUCKETS)
    return model, tg.compile(entries)


def prefill(multi, state, backend: str, prompt: list[int], position: int = 0) -> np.ndarray:
    """The smallest bucket that holds the prompt, run on it padded with token 0."""
    bucket = min(b for b in BUCKETS if b >= len(prompt))
    ids = np.zeros((1, bucket), np.int64)
    ids[0, : len(prompt)] = prompt
    feeds = {"input_ids": ids, "position": np.int64(position), "length": np.int64(len(prompt))}
    (logits,) = multi.run(f"prefill{bucket}", feeds, backend=backend, state=state)
    return logits


def greedy(multi, backend: str, prompt: list[int], steps: int) -> list[int]:
    state = multi.new_state(backend)
    tokens = [int(np.argmax(prefill(multi, state, backend, prompt)[0, -1]))]
    for k in range(steps - 1):
        feeds = {
            "input_ids": np.array([[tokens[-1]]], np.int64),
            "position": np.int64(len(prompt) + k),
        }
        (logits,) = multi.run("decode", feeds, backend=backend, state=state)
        tokens.append(int(np.argmax(logits[0, -1])))
    return tokens


def transformers_greedy(model, prompt: list[int], steps: int) -> list[int]:
    """`model.generate`'s new tokens; it stops early after the EOS token (id 2 in a
    default LlamaConfig), so this may be shorter than `steps`."""
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=steps, do_sample=False)
    return out[0, len(prompt) :].tolist()


def assert_same_tokens(got: list[int], want: list[int], eos: int) -> None:
    """Token for token; where generate stopped early, at its EOS, ours must have it too."""
    assert got[: len(want)] == want
    assert len(want) == len(got) or want[-1] == eos


def test_entries_and_their_inputs(llama) -> None:
    _, multi = llama
    assert sorted(multi.entries) == ["decode", "prefill16", "prefill8"]
    decode = multi.entries["decode"].graph
    assert {(n.name, n.shape, n.dtype) for n in decode.boundary("input")} == {
        ("input_ids", (1, 1), tg.int64),
        ("position", (), tg.int64),
    }
    # only the caches: the write-only cumulative_length counters are dropped
    assert {(s.name, s.shape) for s in decode.states} == {
        (f"{kind}_cache_{i}", (1, 2, MAX_SEQ, 16)) for kind in ("key", "value") for i in range(2)
    }


@pytest.mark.parametrize("backend", BACKENDS)
def test_greedy_tokens_equal_transformers_generate(llama, backend: str) -> None:
    model, multi = llama
    prompt = torch.randint(0, VOCAB, (5,), generator=torch.Generator().manual_seed(1)).tolist()
    want = transformers_greedy(model, prompt, 8)
    assert len(want) == 8  # this prompt's continuation has no EOS: all 8 are compared
    assert greedy(multi, backend, prompt, 8) == want


@settings(max_examples=8)
@given(st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=BUCKETS[-1]))
def test_any_prompt_length_generates_like_transformers(llama, prompt: list[int]) -> None:
    model, multi = llama
    want = transformers_greedy(model, prompt, 3)
    assert_same_tokens(greedy(multi, "numpy", prompt, 3), want, model.config.eos_token_id)


def transformers_cache(model, prompt: list[int]) -> tuple[np.ndarray, object]:
    """The model's logits over `prompt` and its StaticCache after them."""
    from transformers.cache_utils import StaticCache

    cache = StaticCache(max_cache_len=MAX_SEQ, config=model.config)
    with torch.no_grad():
        out = model(torch.tensor([prompt]), past_key_values=cache, use_cache=True)
    return out.logits.numpy(), cache


@pytest.mark.parametrize("length", [5, 8])
@pytest.mark.parametrize("backend", BACKENDS)
def test_prefill_state_equals_transformers_cache(llama, backend: str, length: int) -> None:
    # A prompt of 5 fills bucket 8 with 3 padding rows (positions 5-7, never attended to
    # before decode overwrites them); a prompt of 8 fills it exactly.
    model, multi = llama
    prompt = list(range(3, 3 + 2 * length, 2))
    logits, cache = transformers_cache(model, prompt)
    state = multi.new_state(backend)
    got = prefill(multi, state, backend, prompt)
    assert got.shape == (1, 1, VOCAB)
    np.testing.assert_allclose(got[0, 0], logits[0, -1], rtol=1e-4, atol=1e-5)
    for i, layer in enumerate(cache.layers):
        for kind, want in (("key", layer.keys), ("value", layer.values)):
            mine = state[f"{kind}_cache_{i}"]
            np.testing.assert_allclose(mine[:, :, :length], want[:, :, :length], atol=1e-5)
            np.testing.assert_array_equal(mine[:, :, 8:], 0)  # beyond the bucket: untouched


def test_a_prompt_in_two_chunks_generates_like_the_whole(llama) -> None:
    # Chunked prefill: 8 tokens at position 0, then 6 more at position 8 (the `position`
    # input), then decode from 14: the same tokens as generate over all 14.
    model, multi = llama
    prompt = [(7 * k + 3) % VOCAB for k in range(14)]
    state = multi.new_state("arena")
    prefill(multi, state, "arena", prompt[:8])
    tokens = [int(np.argmax(prefill(multi, state, "arena", prompt[8:], position=8)[0, -1]))]
    for k in range(3):
        feeds = {"input_ids": np.array([[tokens[-1]]], np.int64), "position": np.int64(14 + k)}
        tokens.append(int(np.argmax(multi.run("decode", feeds, backend="arena", state=state)[0])))
    assert_same_tokens(tokens, transformers_greedy(model, prompt, 4), model.config.eos_token_id)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_write_past_the_cache_is_a_run_error_and_leaves_the_state(llama, backend) -> None:
    _, multi = llama
    state = multi.new_state(backend)
    prefill(multi, state, backend, [1, 2, 3])
    before = state["key_cache_0"]
    feeds = {"input_ids": np.array([[4]], np.int64), "position": np.int64(MAX_SEQ)}
    # the cache write is a slice_update at `position` (one row): its start check refuses it
    message = rf"slice_update: start {MAX_SEQ} \+ 1 rows is past the length {MAX_SEQ} of axis 2"
    with pytest.raises(tg.RunError, match=message):
        multi.run("decode", feeds, backend=backend, state=state)
    np.testing.assert_array_equal(state["key_cache_0"], before)


def test_buckets_must_fit_the_cache(llama) -> None:
    model, _ = llama
    with pytest.raises(tg.GraphError, match=r"prompt buckets \[8, 128\] .* max_seq=64"):
        from_torch_generation(model, max_seq=MAX_SEQ, prompt_buckets=(8, 128))


def test_the_saved_program_generates_the_same_tokens(llama, tmp_path) -> None:
    _, multi = llama
    multi.save(tmp_path / "llama.tgp")
    loaded = tg.load(tmp_path / "llama.tgp")
    prompt = [5, 9, 11]
    assert greedy(loaded, "mlx", prompt, 6) == greedy(multi, "mlx", prompt, 6)


def test_cache_writes_are_planned_in_place(llama) -> None:
    """The cache writes (slice_updates) are in-place updates: no entry copies a state."""
    from tensorgraph.planner.report import copied_states

    _, multi = llama
    for program in multi.entries.values():
        assert copied_states(program.plan, program.graph) == []
        assert len(program.graph.state_updates) == 2 * LAYERS


def test_cache_writes_are_slice_updates_and_attention_reads_kv_heads(llama) -> None:
    """Every entry writes each cache with one slice_update at a run-time start (no
    index_update scatter) and attends over the 2 kv heads as stored (no repeat_kv
    broadcast to the 4 query heads)."""
    _, multi = llama
    for name, program in multi.entries.items():
        graph = program.graph
        ops = [node.op for node in graph.nodes]
        assert "index_update" not in ops and "broadcast_to" not in ops, name
        writes = [graph.node(i) for i in graph.state_updates.values()]
        assert [node.op for node in writes] == ["slice_update"] * 2 * LAYERS, name
        assert all(len(node.inputs) == 3 for node in writes), name  # a run-time start
        attention = [n for n in graph.nodes if n.op == "scaled_dot_product_attention"]
        assert len(attention) == LAYERS, name
        for node in attention:
            q, k, v = (graph.node(i).shape for i in node.inputs[:3])
            assert q[1] == 4 and k == v == (1, 2, MAX_SEQ, 16), name


def test_a_state_that_no_entry_reads_is_dropped() -> None:
    """_without_unread_states on hand-built entries: "count" is written by both and read
    by neither (dropped with its update), "seen" is read by one only (kept in both),
    "echo" is read as an output (kept)."""
    from tensorgraph.importers.generation import _without_unread_states

    def entry(reads_seen: bool) -> tg.Graph:
        g = tg.Graph("reads" if reads_seen else "writes")
        x = g.input("x", (2,), tg.float32)
        count, seen = g.state("count", (), tg.int64), g.state("seen", (2,), tg.float32)
        echo = g.state("echo", (2,), tg.float32)
        g.output((x + seen) if reads_seen else x * 2)
        g.output(echo)
        g.update_state(count, g.constant(7, tg.int64))
        g.update_state(seen, x)
        g.update_state(echo, x)
        return g

    entries = _without_unread_states({"a": entry(True), "b": entry(False)})
    multi = tg.compile(entries)
    for name, graph in entries.items():
        assert [s.name for s in graph.states] == ["seen", "echo"], name
        assert set(graph.state_updates) == {"seen", "echo"}, name
    # b then a: a returns x + seen = [1, 2] + [3, 4] (b's x) = [4, 6], and echo = b's x
    state = multi.new_state("numpy")
    multi.run("b", {"x": np.array([3, 4], np.float32)}, backend="numpy", state=state)
    summed, echoed = multi.run(
        "a", {"x": np.array([1, 2], np.float32)}, backend="numpy", state=state
    )
    np.testing.assert_array_equal(summed, [4, 6])
    np.testing.assert_array_equal(echoed, [3, 4])


# every decoder family whose static cache imports (see the CLI's hf:<type>); mistral,
# gemma2, gemma3_text and cohere2 slide (HF_SMALL's window 8: the rings wrap at 32)
FAMILIES = (
    "llama",
    "qwen2",
    "qwen3",
    "gemma",
    "phi",
    "gpt2",
    "gpt_neox",
    "stablelm",
    "olmo",
    "olmo2",
    "starcoder2",
    "cohere",
    "granite",
    "mixtral",
    "olmoe",
    "mistral",
    "gemma2",
    "gemma3_text",
    "cohere2",
    "opt",
    "falcon",
    "qwen2_moe",
    "phi3",
    "bloom",
    "gptj",
    "codegen",
)


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_generates_transformers_tokens(family: str) -> None:
    """Each family's default config shrunk as `tensorgraph generate hf:<family>` shrinks
    it; greedy tokens on every backend equal transformers' own generate."""
    import argparse

    from tensorgraph.cli import _hf_config
    from tensorgraph.models.generation import generate

    transformers = _transformers()
    torch.manual_seed(0)
    args = argparse.Namespace(model=f"hf:{family}", max_seq=32)
    model = transformers.AutoModelForCausalLM.from_config(_hf_config(transformers, args))
    multi = tg.compile(from_torch_generation(model.eval(), max_seq=32, prompt_buckets=(8,)))
    prompt = [3, 4, 5, 6, 7, 8]
    want = transformers_greedy(model, prompt, 6)
    for backend in BACKENDS:
        got = generate(multi, np.array(prompt), 6, backend=backend).tokens[0].tolist()
        assert_same_tokens(got, want, eos=model.config.eos_token_id)
