"""from_torch_generation(prefill="symbolic"): the transformers model exported once with a
dynamic prompt length (`torch.export.Dim("prompt", min=1, max=max_seq)`), imported as one
"prefill" entry over `tg.Dim("prompt")` beside the decode entry. The cache write at
arange(prompt) + position and the causal mask follow the prompt's length; the greedy
tokens equal transformers' own `generate` for any prompt length. The strict export with
a dynamic dim takes about 10 s: one module fixture (tiny Llama), and the other
families (Qwen2, GPT-2, a sliding-window Mistral) slow-marked."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch", reason="the models extra is not installed")
pytest.importorskip("transformers", reason="the models extra is not installed")

import tensorgraph as tg  # noqa: E402
from tensorgraph.importers.generation import from_torch_generation  # noqa: E402
from tensorgraph.models.generation import generate, generation_layout  # noqa: E402
from tests.models_suite.catalog import _transformers  # noqa: E402

MAX_SEQ, VOCAB = 32, 64


def transformers_tokens(model: torch.nn.Module, prompt: list[int], steps: int) -> list[int]:
    """`model.generate`'s greedy new tokens, exactly `steps` of them (no EOS stop). Every
    prompt token is attended to: without an explicit mask, generate would mask the
    prompt's 0s as padding (pad_token_id 0; a prompt of [19, 0, 5] failed so)."""
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt]),
            attention_mask=torch.ones((1, len(prompt)), dtype=torch.long),
            max_new_tokens=steps,
            min_new_tokens=steps,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
        )
    return out[0, len(prompt) :].tolist()


@pytest.fixture(scope="module")
def llama() -> tuple[torch.nn.Module, tg.MultiProgram]:
    transformers = _transformers()
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=MAX_SEQ,
    )
    model = transformers.LlamaForCausalLM(config).eval()
    entries = from_torch_generation(model, max_seq=MAX_SEQ, prefill="symbolic")
    return model, tg.compile(entries)


def test_the_prefill_entry_takes_the_prompt_at_its_length(llama) -> None:
    _, multi = llama
    assert sorted(multi.entries) == ["decode", "prefill"]
    prefill = multi.entries["prefill"].graph
    (prompt,) = prefill.dims.values()
    assert (prompt.name, prompt.min, prompt.max) == ("prompt", 1, MAX_SEQ)
    assert {(n.name, n.shape) for n in prefill.inputs} == {
        ("input_ids", (1, prompt)),
        ("position", ()),
    }
    assert prefill.node(prefill.returned[0]).shape == (1, 1, VOCAB)  # the last row only
    assert {s.name for s in prefill.states} == {
        s.name for s in multi.entries["decode"].graph.states
    }
    assert generation_layout(multi).prompt_range == (1, MAX_SEQ)


@settings(max_examples=4)
@given(st.integers(1, MAX_SEQ - 3), st.integers(0, 2**16))
def test_tokens_equal_transformers_generate_at_any_prompt_length(llama, length, seed) -> None:
    model, multi = llama
    prompt = np.random.default_rng(seed).integers(0, VOCAB, length).tolist()
    want = transformers_tokens(model, prompt, 3)
    for backend in ("numpy", "mlx"):
        got = generate(multi, np.array(prompt), 3, backend=backend)
        assert got.bucket == length
        assert got.tokens[0].tolist() == want, backend


def test_a_prompt_past_the_cache_is_a_run_error(llama) -> None:
    _, multi = llama
    with pytest.raises(tg.RunError, match=r"prompt length 33 is outside the symbolic prefill's"):
        generate(multi, np.zeros(MAX_SEQ + 1, np.int64), 1, backend="numpy")


def _family(name: str) -> torch.nn.Module:
    transformers = _transformers()
    torch.manual_seed(0)
    small = {"vocab_size": VOCAB, "num_hidden_layers": 1}
    if name == "qwen2":
        config = transformers.Qwen2Config(
            hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=1,
            max_position_embeddings=MAX_SEQ, **small,
        )  # fmt: skip
        return transformers.Qwen2ForCausalLM(config)
    if name == "mistral":  # a sliding window shorter than the prompts: the ring write
        config = transformers.MistralConfig(
            hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=1,
            max_position_embeddings=MAX_SEQ, sliding_window=8, **small,
        )  # fmt: skip
        return transformers.MistralForCausalLM(config)
    config = transformers.GPT2Config(n_embd=32, n_head=2, n_positions=MAX_SEQ, **small)
    config.eos_token_id = config.bos_token_id = 0
    return transformers.GPT2LMHeadModel(config)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["qwen2", "mistral", "gpt2"])
def test_other_families_prefill_at_the_prompt_length_as_transformers(family: str) -> None:
    model = _family(family).eval()
    multi = tg.compile(from_torch_generation(model, max_seq=MAX_SEQ, prefill="symbolic"))
    for length in (1, 3, 13, 20):
        prompt = np.random.default_rng(length).integers(0, VOCAB, length).tolist()
        want = transformers_tokens(model, prompt, 4)
        for backend in ("numpy", "arena", "mlx"):
            got = generate(multi, np.array(prompt), 4, backend=backend).tokens[0].tolist()
            assert got == want, (family, length, backend)
