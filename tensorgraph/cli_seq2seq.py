"""`tensorgraph generate hf:<model_type>` for transformers encoder-decoder families
(whisper, t5, bart, marian, ...): the family's default config shrunk to SEQ2SEQ_SMALL
with seeded random weights, imported by from_torch_seq2seq_generation (encode + decode
entries, one MultiProgram), run by generate_seq2seq and checked token for token against
transformers' own `generate` (greedy: the same new tokens; sampling: the same sampler
and seed on the NumPy reference interpreter).

The source: for a speech model (Whisper), a seeded synthetic waveform at 16 kHz (a sum
of three sines and noise, 0.75 s) through the model's own WhisperFeatureExtractor,
whose window is shrunk to WINDOW_SECONDS and the encoder's max_source_positions with it
(frames = 2 * max_source_positions); for a text model, --prompt-len seeded random ids,
padded to the smallest of --buckets that holds them (the encode entry's source_len).
Options this path does not take (--dtype, --quantize, --kv-bits, --prompt-cache) exit 2
naming the option, before anything is built.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from tensorgraph.cli import UsageError, compile, print_tokens
from tensorgraph.cli_generate import report_match

__all__ = ["SEQ2SEQ_SMALL", "cmd_generate_seq2seq", "is_seq2seq"]

# The sizes a family's default config is shrunk to, where the config has the field;
# token ids moved inside the small vocabulary (the defaults name ids up to 58,100).
SEQ2SEQ_SMALL = {
    "vocab_size": 128,
    "d_model": 64,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 128,
    "decoder_ffn_dim": 128,
    "d_kv": 16,
    "d_ff": 128,
    "num_layers": 2,
    "num_decoder_layers": 2,
    "num_heads": 4,
    "num_mel_bins": 80,
    "init_std": 0.3,  # wider than the default 0.02, so tokens depend on the source
    "initializer_factor": 8.0,  # T5's counterpart of init_std (default 1.0)
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "forced_eos_token_id": 2,
    "forced_bos_token_id": 1,
}
START_TOKEN = 3  # decoder_start_token_id of every family
WINDOW_SECONDS = 1  # the feature extractor's chunk_length (Whisper's is 30 s)
AUDIO_SECONDS = 0.75


def is_seq2seq(model: str) -> bool:
    """Whether MODEL is hf:<model_type> of a transformers encoder-decoder family (False
    when transformers is missing or does not know the type: the causal-LM path reports
    that)."""
    if not model.startswith("hf:"):
        return False
    try:
        from tensorgraph.importers.torch_compat import import_transformers

        config = import_transformers().AutoConfig.for_model(model.removeprefix("hf:"))
    except (ImportError, ValueError):
        return False
    return bool(getattr(config, "is_encoder_decoder", False))


def _config(transformers: object, args: argparse.Namespace, source_len: int) -> object:
    """The family's default config shrunk to SEQ2SEQ_SMALL, its positions covering
    max_seq (decoder) and source_len (encoder), its start token START_TOKEN, and a
    begin-suppressed EOS where the family begin-suppresses tokens (Whisper)."""
    config = transformers.AutoConfig.for_model(args.model.removeprefix("hf:"))
    for field, value in SEQ2SEQ_SMALL.items():
        if hasattr(config, field) and getattr(config, field) is not None:
            setattr(config, field, value)
    config.decoder_start_token_id = START_TOKEN
    positions = max(args.max_seq, source_len)
    for field in ("max_position_embeddings", "max_target_positions"):
        if hasattr(config, field):
            setattr(config, field, positions)
    if getattr(config, "begin_suppress_tokens", None) is not None:
        config.begin_suppress_tokens = [SEQ2SEQ_SMALL["eos_token_id"]]
    if hasattr(config, "max_source_positions"):
        config.max_source_positions = WINDOW_SECONDS * 100 // 2  # 100 frames a second
    return config


def _waveform(seed: int, rate: int) -> np.ndarray:
    """AUDIO_SECONDS of a seeded sum of three sines (100-2000 Hz) and noise at `rate`."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(AUDIO_SECONDS * rate)) / rate
    tones = sum(
        rng.uniform(0.1, 0.3) * np.sin(2 * np.pi * rng.uniform(100, 2000) * t) for _ in range(3)
    )
    return (tones + 0.01 * rng.standard_normal(t.shape)).astype(np.float32)


def _refuse_options(args: argparse.Namespace) -> None:
    """UsageError for an option the encoder-decoder path does not take."""
    given = [
        name
        for name, on in (
            ("--dtype", args.dtype != "float32"),
            ("--quantize", args.quantize is not None),
            ("--kv-bits", args.kv_bits is not None),
            ("--prompt-cache", args.prompt_cache is not None),
        )
        if on
    ]
    if given:
        raise UsageError(
            f"{args.model} is an encoder-decoder model: {', '.join(given)} not supported for "
            "it (float32, no prompt cache)"
        )


def cmd_generate_seq2seq(args: argparse.Namespace) -> int:
    """`generate hf:<model_type>` for an encoder-decoder family (see the module
    docstring); 0 when the tokens equal the oracle's, 1 otherwise."""
    import torch

    from tensorgraph.importers.seq2seq_generation import from_torch_seq2seq_generation
    from tensorgraph.importers.torch_compat import import_transformers
    from tensorgraph.models.sampling import Sampler
    from tensorgraph.models.seq2seq_generation import (
        audio_features,
        decoding_rules,
        generate_seq2seq,
    )
    from tensorgraph.planner.report import human

    _refuse_options(args)
    sampler = Sampler(args.temperature, args.top_k, args.top_p, args.min_p, args.sampling_seed)
    transformers = import_transformers()
    speech = hasattr(
        transformers.AutoConfig.for_model(args.model.removeprefix("hf:")), "num_mel_bins"
    )
    fitting = [b for b in args.buckets if b >= args.prompt_len]
    if not speech and not fitting:
        raise UsageError(
            f"--prompt-len {args.prompt_len} is longer than the largest source bucket "
            f"{max(args.buckets)} (--buckets)"
        )
    source_len = min(fitting) if fitting else 1
    began = time.perf_counter()
    torch.manual_seed(args.seed)
    config = _config(transformers, args, source_len)
    auto = transformers.AutoModelForSpeechSeq2Seq if speech else transformers.AutoModelForSeq2SeqLM
    model = auto.from_config(config).eval()
    rules = decoding_rules(model.generation_config)
    if len(rules.start) + args.tokens - 1 > args.max_seq:
        raise UsageError(
            f"{len(rules.start)} start token + --tokens {args.tokens} is past --max-seq "
            f"{args.max_seq}"
        )
    if speech:
        extractor = transformers.WhisperFeatureExtractor(
            feature_size=config.num_mel_bins, chunk_length=WINDOW_SECONDS
        )
        rate = extractor.sampling_rate
        source = audio_features(extractor, _waveform(args.seed, rate), rate)
        described = f"{AUDIO_SECONDS:g} s synthetic audio at {rate} Hz, features {source.shape}"
    else:
        rng = np.random.default_rng(args.seed)
        source = rng.integers(START_TOKEN + 1, config.vocab_size, args.prompt_len)
        described = f"{args.prompt_len} source tokens (seed {args.seed}), source_len {source_len}"
    entries = from_torch_seq2seq_generation(model, max_seq=args.max_seq, source_len=source_len)
    program = compile(entries)
    print(
        f"{args.model}: entries {', '.join(entries)} (max_seq {args.max_seq}) compiled in "
        f"{time.perf_counter() - began:.2f} s"
    )
    print(f"source: {described}")
    options = {"rules": rules, "backend": args.backend, "sampler": sampler}
    if args.backend == "mlx":  # the first calls trace each entry: not what tok/s measures
        generate_seq2seq(program, source, args.tokens, **options)
    result = print_tokens(
        args.stream,
        lambda stream: generate_seq2seq(program, source, args.tokens, on_token=stream, **options),
    )
    rate_text = (
        "no decode step"
        if result.decode_steps == 0
        else f"{result.decode_tokens_per_second:.1f} tokens/s"
    )
    print(
        f"encode: {result.encode_seconds * 1000:.1f} ms; decode: {rate_text} "
        f"({result.decode_steps} steps, {result.decode_seconds * 1000:.1f} ms) on {args.backend}"
    )
    print(
        "memory per entry (arena): "
        + ", ".join(f"{name} {human(size)}" for name, size in result.memory.entries.items())
    )
    print(program.memory().table())
    if sampler.is_greedy:
        with torch.no_grad():
            out = model.generate(
                torch.tensor(np.asarray(source)[None] if not speech else source),
                do_sample=False,
                max_new_tokens=args.tokens,
                min_new_tokens=args.tokens,
            )
        expected = out[:, -args.tokens :].numpy().astype(np.int32)
        oracle = "transformers generate"
    else:
        reference = generate_seq2seq(
            program, source, args.tokens, **{**options, "backend": "numpy"}
        )
        expected = reference.tokens
        oracle = f"the same sampler (seed {sampler.seed}) on the NumPy reference interpreter"
    return report_match(result.tokens, expected, oracle)
