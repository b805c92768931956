"""from_torch_seq2seq_generation + generate_seq2seq: transformers encoder-decoder models
(Whisper, T5, BART, Marian; small configs, seeded random weights) imported as an encode
and a decode entry over one static self/cross-attention cache held as state, compiled
as one MultiProgram, against transformers itself: the tokens of `model.generate(...,
do_sample=False, max_new_tokens=N, min_new_tokens=N)` with the same generation config
(suppress, begin-suppress, bad words, forced EOS included). Each model is exported once
per module (strict export: a few seconds per entry)."""

from __future__ import annotations

import copy
import functools
import types

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch", reason="the models extra is not installed")
pytest.importorskip("transformers", reason="the models extra is not installed")

import tensorgraph as tg  # noqa: E402
from tensorgraph.errors import GraphError, RunError  # noqa: E402
from tensorgraph.importers.seq2seq_generation import (  # noqa: E402
    decoder_layer_count,
    from_torch_seq2seq_generation,
)
from tensorgraph.models import decode_pipeline  # noqa: E402
from tensorgraph.models.sampling import Sampler  # noqa: E402
from tensorgraph.models.seq2seq_generation import (  # noqa: E402
    DecodingRules,
    audio_features,
    decoding_rules,
    generate_seq2seq,
)
from tests.models_suite.catalog import _transformers  # noqa: E402

MAX_SEQ, SOURCE_LEN, TOKENS, VOCAB = 16, 12, 8, 96
LAYERS = {
    "vocab_size": VOCAB,
    "d_model": 64,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 128,
    "decoder_ffn_dim": 128,
    "init_std": 0.3,  # wide enough that greedy tokens depend on the source
}


def build(name: str) -> torch.nn.Module:
    """Model `name` in eval mode, seeded; every config sets a generation rule its family
    uses (Whisper: suppress and begin-suppress; BART and Marian: forced EOS; Marian: a
    bad word)."""
    transformers = _transformers()
    torch.manual_seed(0)
    if name == "whisper":
        config = transformers.WhisperConfig(
            num_mel_bins=80,
            max_source_positions=32,
            max_target_positions=64,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
            decoder_start_token_id=3,
            suppress_tokens=[7, 9],
            begin_suppress_tokens=[2, 5],
            **LAYERS,
        )
        return transformers.WhisperForConditionalGeneration(config).eval()
    if name == "t5":
        config = transformers.T5Config(
            vocab_size=VOCAB,
            d_model=64,
            d_kv=16,
            d_ff=128,
            num_layers=2,
            num_heads=4,
            decoder_start_token_id=0,
            initializer_factor=8.0,
        )
        return transformers.T5ForConditionalGeneration(config).eval()
    if name == "bart":
        config = transformers.BartConfig(max_position_embeddings=64, **LAYERS)
        return transformers.BartForConditionalGeneration(config).eval()
    config = transformers.MarianConfig(
        max_position_embeddings=64,
        pad_token_id=VOCAB - 1,
        decoder_start_token_id=VOCAB - 1,
        bad_words_ids=[[VOCAB - 1]],
        **{**LAYERS, "init_std": 1.0},  # at 0.3 both test sources give the same tokens
    )
    return transformers.MarianMTModel(config).eval()


# Whisper (speech) and T5 (text, relative positions) in CI; BART and Marian (learned and
# sinusoidal positions, forced EOS, a bad word) in the slow job: about 5 s of export each.
@pytest.fixture(
    scope="module",
    params=[
        "whisper",
        "t5",
        pytest.param("bart", marks=pytest.mark.slow),
        pytest.param("marian", marks=pytest.mark.slow),
    ],
)
def imported(request) -> tuple[str, torch.nn.Module, tg.MultiProgram]:
    model = build(request.param)
    entries = from_torch_seq2seq_generation(model, max_seq=MAX_SEQ, source_len=SOURCE_LEN)
    return request.param, model, tg.compile(entries)


def source(name: str, seed: int) -> np.ndarray:
    """Seeded log-mel-shaped features (Whisper) or token ids of a length below
    SOURCE_LEN (text models: the encode entry pads them)."""
    rng = np.random.default_rng(seed)
    if name == "whisper":
        return rng.standard_normal((80, 64)).astype(np.float32)
    return rng.integers(3, VOCAB - 3, SOURCE_LEN - 1 - seed % 4)


def transformers_tokens(model: torch.nn.Module, src: np.ndarray, **options: object) -> list[int]:
    """The new tokens of transformers' greedy generate, given `options` (Whisper's
    returns only those, the others start with the decoder start token)."""
    with torch.no_grad():
        out = model.generate(
            torch.tensor(src[None]),
            do_sample=False,
            max_new_tokens=TOKENS,
            min_new_tokens=TOKENS,
            **options,
        )
    return out[0, -TOKENS:].tolist()


@pytest.mark.parametrize("backend", ["numpy", "arena", "mlx"])
def test_tokens_equal_transformers_generate(imported, backend) -> None:
    name, model, program = imported
    rules = decoding_rules(model.generation_config)
    state = program.new_state(backend)
    seen = []
    for seed in (0, 1):  # the second source on the same state: nothing stale is read
        src = source(name, seed)
        result = generate_seq2seq(program, src, TOKENS, rules=rules, backend=backend, state=state)
        assert result.tokens.shape == (1, TOKENS) and result.tokens.dtype == np.int32
        assert result.tokens[0].tolist() == transformers_tokens(model, src)
        seen.append(result.tokens[0].tolist())
    assert seen[0] != seen[1]  # the sources give different tokens: the check has teeth


def test_a_forced_decoder_prompt_runs_as_decode_steps(imported) -> None:
    """Start tokens past the first (Whisper's language and task ids, say) run as decode
    steps at positions 1, 2, ...: the tokens are those of transformers' generate given
    the same decoder prompt."""
    name, model, program = imported
    rules = decoding_rules(model.generation_config, forced_ids=(10, 11))
    assert len(rules.start) == 3
    src = source(name, 0)
    result = generate_seq2seq(program, src, TOKENS, rules=rules, backend="arena")
    with torch.no_grad():
        out = model.generate(
            torch.tensor(src[None]),
            decoder_input_ids=torch.tensor([rules.start]),
            do_sample=False,
            max_new_tokens=TOKENS,
            min_new_tokens=TOKENS,
        )
    assert result.tokens[0].tolist() == out[0, -TOKENS:].tolist()


@pytest.mark.slow  # two more exports (about 15 s)
@pytest.mark.parametrize("name", ["whisper", "t5"])
def test_a_batch_of_two_sources_gives_each_its_tokens(name) -> None:
    """batch=2: each row's tokens are transformers' for that row (text rows share a
    length: one source_length)."""
    model = build(name)
    entries = from_torch_seq2seq_generation(model, max_seq=MAX_SEQ, source_len=SOURCE_LEN, batch=2)
    program = tg.compile(entries)
    rows = [source(name, 0), source(name, 1)]
    src = np.stack(rows if name == "whisper" else [row[:8] for row in rows])
    rules = decoding_rules(model.generation_config)
    result = generate_seq2seq(program, src, TOKENS, rules=rules, backend="arena")
    with torch.no_grad():
        out = model.generate(
            torch.tensor(src), do_sample=False, max_new_tokens=TOKENS, min_new_tokens=TOKENS
        )
    assert result.tokens.shape == (2, TOKENS)
    assert result.tokens.tolist() == out[:, -TOKENS:].tolist()
    assert result.tokens[0].tolist() != result.tokens[1].tolist()


def test_entries_share_weights_and_one_state_region(imported) -> None:
    name, model, program = imported
    encode, decode = (program.entries[n].graph for n in ("encode", "decode"))
    layers = decoder_layer_count(model.config)
    cross = {f"cross_{side}_{i}" for side in ("key", "value") for i in range(layers)}
    own = {f"self_{side}_{i}" for side in ("key", "value") for i in range(layers)}
    mask = set() if name == "whisper" else {"source_mask"}
    assert {n.name for n in encode.states} == cross | own | mask
    assert set(encode.state_positions) == cross | own | mask  # encode writes every state
    assert set(decode.state_positions) == own  # decode only reads the cross caches
    assert {n.name for n in decode.states} == cross | own | mask
    (self_key,) = [n for n in decode.states if n.name == "self_key_0"]
    assert self_key.shape[2] == MAX_SEQ
    weights = sum(a.nbytes for a in decode.param_values.values())
    assert (
        weights
        <= program.constant_size
        < weights + sum(a.nbytes for a in encode.param_values.values())
    )  # the decoder's weights stored once, not once per entry


def test_encode_resets_what_another_source_left(imported) -> None:
    """A long source then a short one: the short one's tokens are those of a fresh
    state (the mask and cross caches are rewritten whole by every encode)."""
    name, model, program = imported
    rules = decoding_rules(model.generation_config)
    state = program.new_state("numpy")
    generate_seq2seq(program, source(name, 3), TOKENS, rules=rules, backend="numpy", state=state)
    short = source(name, 2)
    again = generate_seq2seq(program, short, TOKENS, rules=rules, backend="numpy", state=state)
    fresh = generate_seq2seq(program, short, TOKENS, rules=rules, backend="numpy")
    np.testing.assert_array_equal(again.tokens, fresh.tokens)


def test_sampling_is_reproducible_across_backends(imported) -> None:
    name, model, program = imported
    rules = decoding_rules(model.generation_config)
    sampler = Sampler(temperature=1.0, top_p=0.9, seed=7)
    runs = [
        generate_seq2seq(program, source(name, 0), TOKENS, rules=rules, backend=b, sampler=sampler)
        for b in ("numpy", "arena")
    ]
    np.testing.assert_array_equal(runs[0].tokens, runs[1].tokens)


def test_pipelined_mlx_keeps_every_rule_the_stream_and_the_state(imported, monkeypatch) -> None:
    """Greedy on MLX is pipelined (decode_pipeline.py); `stats=True` keeps the
    synchronous loop. Rules made to bite on this source's unconstrained tokens (its
    second token begin-suppressed after a forced BOS, its third suppressed, its fourth a
    bad word, a forced EOS last): the pipelined tokens equal the synchronous MLX loop's,
    numpy's and transformers' generate with the same generation config; the stream
    gives them in order; the caches left equal the synchronous loop's."""
    name, model, program = imported
    src = source(name, 0)
    start = decoding_rules(model.generation_config).start
    free = generate_seq2seq(program, src, TOKENS, rules=DecodingRules(start), backend="numpy")
    first, second, third, fourth = (int(t) for t in free.tokens[0, :4])
    config = copy.deepcopy(model.generation_config)
    config.forced_bos_token_id = (first + 1) % VOCAB
    config.begin_suppress_tokens = [second]
    config.suppress_tokens = [third]
    config.bad_words_ids = [[fourth]]
    last = int(free.tokens[0, -1])  # ids 0-3: pad, BOS, EOS, start (Whisper strips pads)
    config.forced_eos_token_id = next(
        t for t in range(4, VOCAB) if t not in (third, last, config.forced_bos_token_id)
    )
    rules = decoding_rules(config)
    assert rules.begin_index == 1  # begin-suppression lands after the forced BOS
    streamed: list[np.ndarray] = []
    pipelined_calls = []
    original = decode_pipeline.decode_greedy
    monkeypatch.setattr(
        decode_pipeline,
        "decode_greedy",
        lambda *args: pipelined_calls.append(1) or original(*args),
    )
    piped = generate_seq2seq(
        program, src, TOKENS, rules=rules, backend="mlx", on_token=streamed.append
    )
    assert pipelined_calls == [1]  # the pipelined path ran (the others below do not)
    synchronous = generate_seq2seq(program, src, TOKENS, rules=rules, backend="mlx", stats=True)
    numpy = generate_seq2seq(program, src, TOKENS, rules=rules, backend="numpy")
    np.testing.assert_array_equal(piped.tokens, synchronous.tokens)
    np.testing.assert_array_equal(piped.tokens, numpy.tokens)
    assert pipelined_calls == [1]
    np.testing.assert_array_equal(np.concatenate(streamed)[None], piped.tokens)
    got = piped.tokens[0].tolist()
    assert got[0] == config.forced_bos_token_id and got[-1] == config.forced_eos_token_id
    assert second != got[1] and third not in got and fourth not in got[:-1]
    assert got != free.tokens[0].tolist()  # the rules changed the tokens: teeth
    assert got == transformers_tokens(model, src, generation_config=config)
    for state_name in piped.state.names:  # no step ran past the last token
        np.testing.assert_allclose(
            np.asarray(piped.state[state_name]),
            np.asarray(synchronous.state[state_name]),
            atol=1e-5,
            err_msg=state_name,
        )


def test_suppressed_tokens_are_never_sampled() -> None:
    rules = DecodingRules(start=(3,), suppress=(0, 1), eos=(2,))
    logits = np.zeros((1, 4))
    logits[0, :3] = 50.0  # the suppressed and EOS ids are by far the most likely
    processed = rules.apply(logits, 0, 4)
    samplers = [Sampler(temperature=1.0, seed=seed) for seed in range(20)]
    picked = {int(s.sample(processed, s.generator())[0]) for s in samplers}
    assert picked == {3}


def test_rules_force_bos_first_and_eos_last_and_begin_suppress_after_bos() -> None:
    rules = DecodingRules(start=(9,), begin_suppress=(4,), eos=(2,), forced_bos=0, forced_eos=2)
    logits = np.arange(8.0)[None]  # id 7 the largest, then 6, ...
    assert rules.begin_index == 1  # transformers: begin index + 1 after a forced BOS
    assert int(np.argmax(rules.apply(logits, 0, 5))) == 0  # forced BOS
    step1 = rules.apply(np.where(np.arange(8) == 4, 99.0, logits), 1, 5)
    assert step1[0, 4] == -np.inf and int(np.argmax(step1)) == 7  # begin-suppressed 4
    assert rules.apply(logits, 2, 5)[0, 2] == -np.inf  # no EOS before the last token
    assert int(np.argmax(rules.apply(logits, 4, 5))) == 2  # forced EOS last
    two = DecodingRules(start=(9, 8), forced_bos=0)  # a forced BOS applies at length 1 only
    np.testing.assert_array_equal(two.apply(logits, 0, 5), logits)


@functools.cache
def tiny_t5() -> torch.nn.Module:
    """A T5 for its generate's logits-processor factory (no forward runs)."""
    transformers = _transformers()
    config = transformers.T5Config(
        vocab_size=16, d_model=8, d_kv=4, d_ff=8, num_layers=1, num_heads=2
    )
    return transformers.T5ForConditionalGeneration(config).eval()


@settings(max_examples=30)
@given(data=st.data())
def test_rules_match_transformers_logits_processors(data) -> None:
    """DecodingRules.apply against the processors transformers' generate builds for the
    same config (GenerationMixin._get_logits_processor, after its special-token setup),
    at a random step of a generate of exactly `count` tokens after a random decoder
    prompt: the same tokens are banned (-inf) and the rest keep their logits."""
    vocab = 16
    token, tokens = st.integers(0, vocab - 1), st.lists(st.integers(0, vocab - 1), max_size=3)
    optional = st.none() | token
    fields = {
        "decoder_start_token_id": data.draw(token),
        "eos_token_id": data.draw(optional),
        "suppress_tokens": data.draw(tokens) or None,
        "begin_suppress_tokens": data.draw(tokens) or None,
        "bad_words_ids": [[t] for t in data.draw(tokens)] or None,
        "forced_bos_token_id": data.draw(optional),
        "forced_eos_token_id": data.draw(optional),
    }
    try:
        config = _transformers().GenerationConfig(**fields)
    except ValueError:  # a config transformers refuses (a forced id it also suppresses)
        config = None
    if config is None:
        with pytest.raises(GraphError, match=r"is also in suppress_tokens"):
            decoding_rules(types.SimpleNamespace(**fields))
    else:
        compare_with_processors(data, config, vocab)


def compare_with_processors(data: st.DataObject, config: object, vocab: int) -> None:
    """One random step of `config`'s rules against transformers' processors."""
    token, tokens = st.integers(0, vocab - 1), st.lists(st.integers(0, vocab - 1), max_size=3)
    forced = data.draw(tokens)
    rules = decoding_rules(config, forced_ids=forced)
    count = data.draw(st.integers(1, 5))
    step = data.draw(st.integers(0, count - 1))
    config.max_new_tokens = config.min_new_tokens = count
    config.max_length = len(rules.start) + count
    model = tiny_t5()
    model._prepare_special_tokens(config, device="cpu")
    processors = model._get_logits_processor(config, input_ids_seq_length=len(rules.start))
    history = list(rules.start) + data.draw(st.lists(token, min_size=step, max_size=step))
    scores = torch.tensor(data.draw(st.lists(st.floats(-5, 5), min_size=vocab, max_size=vocab)))
    want = processors(torch.tensor([history]), scores[None].clone()).numpy()
    got = rules.apply(scores[None].numpy(), step, count)
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    finite = ~np.isneginf(got)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-6)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("no_repeat_ngram_size", 3, r"no_repeat_ngram_size=3"),
        ("num_beams", 4, r"num_beams=4"),
        ("bad_words_ids", [[5, 6]], r"only one-token bad words"),
        ("decoder_start_token_id", None, r"names no single start token"),
        ("forced_decoder_ids", [[2, 50]], r"forced_decoder_ids \[\[2, 50\]\] must force"),
        ("forced_decoder_ids", [[1, None]], r"must force token ids at positions 1, 2"),
        ("return_timestamps", True, r"return_timestamps=True"),
        ("lang_to_id", {"<|en|>": 50}, r"lang_to_id .* give the prompt's language, task"),
        ("no_timestamps_token_id", 60, r"no_timestamps_token_id .* as forced_ids"),
    ],
)
def test_decoding_rules_refuse_what_they_do_not_mirror(field, value, message) -> None:
    config = _transformers().GenerationConfig(decoder_start_token_id=0)
    setattr(config, field, value)
    with pytest.raises(GraphError, match=message):
        decoding_rules(config)


def test_forced_decoder_ids_follow_the_start_token() -> None:
    config = _transformers().GenerationConfig(decoder_start_token_id=5)
    config.forced_decoder_ids = [[2, 30], [1, 20]]  # position 1 then 2, in any order
    assert decoding_rules(config, forced_ids=(40,)).start == (5, 20, 30, 40)
    config.no_timestamps_token_id = 60  # a Whisper checkpoint's: the caller spells it
    assert decoding_rules(config, forced_ids=(40, 60)).start == (5, 20, 30, 40, 60)


BAD_SOURCE = {
    "whisper": (np.zeros((80, 32), np.float32), r"input_features: expected float log-mel"),
    "text": (
        np.ones(SOURCE_LEN + 1, np.int64),
        r"source_ids: the source has 13 tokens; .* 1 to 12",
    ),
}


@pytest.mark.parametrize("backend", ["numpy", "mlx"])  # mlx: the pipelined greedy path
@pytest.mark.parametrize("bad", ["source", "tokens", "length"])
def test_bad_input_is_refused_before_any_call(imported, bad, backend) -> None:
    """A source the encode entry cannot take (half Whisper's frames; a text source past
    source_len), no new token, or more tokens than the cache holds: RunError, and the
    state is as it was (zeros)."""
    name, model, program = imported
    rules = decoding_rules(model.generation_config)
    src, tokens = source(name, 0), TOKENS
    message = {
        "tokens": r"tokens 0: generation makes at least 1 new token",
        "length": r"1 decoder start tokens \+ 17 new tokens need 17 cache rows, past .* 16",
    }.get(bad)
    if bad == "source":
        src, message = BAD_SOURCE["whisper" if name == "whisper" else "text"]
    tokens = {"tokens": 0, "length": MAX_SEQ + 1}.get(bad, tokens)
    state = program.new_state(backend)
    with pytest.raises(RunError, match=message):
        generate_seq2seq(program, src, tokens, rules=rules, backend=backend, state=state)
    for state_name in state.names:
        assert not np.any(np.asarray(state[state_name])), state_name


@pytest.mark.parametrize("backend", ["numpy", "arena", "mlx"])
def test_a_decode_position_past_the_cache_is_a_run_error(imported, backend) -> None:
    _, _, program = imported
    feeds = {"input_ids": np.zeros((1, 1), np.int64), "position": np.int64(MAX_SEQ)}
    with pytest.raises(RunError, match=str(MAX_SEQ)):
        program.run("decode", feeds, backend=backend, state=program.new_state(backend))


@pytest.mark.parametrize(
    ("rate", "samples", "message"),
    [
        (8000, 8000, r"sampling rate 8000 Hz, but the feature extractor takes 16000 Hz"),
        (16000, 16001, r"16001 samples .* window holds 1 to 16000"),
        (16000, 0, r"0 samples"),
    ],
)
def test_audio_of_the_wrong_rate_or_length_is_refused(rate, samples, message) -> None:
    extractor = _transformers().WhisperFeatureExtractor(feature_size=80, chunk_length=1)
    with pytest.raises(RunError, match=message):
        audio_features(extractor, np.zeros(samples, np.float32), rate)
    features = audio_features(extractor, np.zeros(12000, np.float32), 16000)
    assert features.shape == (1, 80, 100) and features.dtype == np.float32


def test_from_exported_makes_named_read_only_buffers_states() -> None:
    """A buffer the program only reads is a param bound to its value, unless `states`
    names it: then a state, whose run-time value the call reads (the decode entry's
    cross caches, written by encode)."""
    from tensorgraph.importers.torch_export import from_exported

    class Reader(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("cache", torch.zeros(2, 3), persistent=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.cache

    program = torch.export.export(Reader(), (torch.ones(2, 3),), strict=True)
    assert [n.op for n in from_exported(program, "plain").states] == []
    graph = from_exported(program, "read", states=["cache"])
    assert [(n.name, n.shape) for n in graph.states] == [("cache", (2, 3))]
    compiled = tg.compile(graph)
    state = compiled.new_state("numpy")
    state.assign({"cache": np.full((2, 3), 5.0, np.float32)})
    (out,) = compiled.run({"x": np.ones((2, 3), np.float32)}, backend="numpy", state=state)
    np.testing.assert_array_equal(out, np.full((2, 3), 6.0))
