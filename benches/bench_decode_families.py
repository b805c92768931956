"""Decode speed per transformers family: tensorgraph's `generate` (default MLX mode) on a
`from_torch_generation` import against a hand-written MLX decode loop of the same
weights (benches/mlx_handwritten.py: a preallocated cache written by mx.slice_update,
one mx.compile'd step with the position as an mx.array, as bench_generate.py's compiled
contender; mlx-lm's uncompiled step over the rows written so far; and the compiled step
in mlx-lm's pipelined `generate_step` loop: the pick stays on the device and step t + 1
is queued before token t is read, as tensorgraph's greedy `generate` does on MLX), for
Llama, Qwen2 and Gemma 2 at one small config. `tg/best hand` is against the faster of
the two synchronous hand-written loops, `tg/pipelined` against the pipelined one.

Gemma 2 is configured with full-attention layers only (`layer_types`) and a
sliding_window of max_seq, so its attention is global on both sides (its sliding-window
cache does not import yet, issue 25 item 2); its soft-capping, pre/post norms, (1 + w)
norms, gelu-tanh and scaled embeddings are all there. Whisper's decoder (ENCODER_DECODERS)
runs `generate_seq2seq` on a `from_torch_seq2seq_generation` import against
`WhisperDecodeLoop` (preallocated self cache, cross keys and values projected once).

Every contender must produce transformers' own greedy tokens (`model.generate`, compared
up to where it stops at its EOS). Decode tokens/s is the best of `--runs` interleaved
rounds after a warm-up round, each round one greedy run of `--tokens` tokens (the
decode loop: tokens - 1 steps, each ending with the pick on the host).

    PYTHONPATH=. python benches/bench_decode_families.py [--families llama,qwen2,gemma2]
        [--tokens 64] [--prompt-len 20] [--runs 10] [--size default|tiny]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tensorgraph.codegen_mlx import blas_info  # first: loads OpenBLAS before mlx.core

# isort: split
import mlx.core as mx
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mlx_handwritten import DecoderLM, WhisperDecodeLoop, pipelined

import tensorgraph as tg
from tensorgraph.importers.generation import from_torch_generation
from tensorgraph.importers.seq2seq_generation import from_torch_seq2seq_generation
from tensorgraph.importers.torch_compat import import_transformers
from tensorgraph.models.generation import generate
from tensorgraph.models.seq2seq_generation import decoding_rules, generate_seq2seq

SIZES = {
    "default": dict(hidden_size=512, intermediate_size=1376, num_hidden_layers=2,
                    num_attention_heads=8, num_key_value_heads=2, head_dim=64, vocab_size=512),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=128),
}  # fmt: skip
CONFIGS = {"llama": "LlamaConfig", "qwen2": "Qwen2Config", "gemma2": "Gemma2Config"}
MAX_SEQ, BUCKET = 256, 32
# Whisper's init std: at its default 0.02 a random decoder repeats one token, a check
# without teeth; at 0.2 its 64 greedy tokens hold 37 distinct ids
INIT_STD = 0.2


def build_model(family: str, size: str, max_seq: int = MAX_SEQ) -> torch.nn.Module:
    """The transformers causal LM of `family` at `size`, seeded random weights, eval."""
    transformers = import_transformers()
    extra: dict[str, object] = {"max_position_embeddings": max_seq}
    if family == "gemma2":
        layers = SIZES[size]["num_hidden_layers"]
        extra |= {"sliding_window": max_seq, "layer_types": ["full_attention"] * layers}
    config = getattr(transformers, CONFIGS[family])(**SIZES[size], **extra)
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def transformers_tokens(model: torch.nn.Module, prompt: np.ndarray, tokens: int) -> np.ndarray:
    """transformers' greedy new tokens (fewer when it stops at its EOS)."""
    with torch.no_grad():
        out = model.generate(
            torch.from_numpy(prompt.astype(np.int64)), max_new_tokens=tokens, do_sample=False
        )
    return out[:, prompt.shape[1] :].numpy().astype(np.int32)


def hand_generate(
    model: DecoderLM, prompt: np.ndarray, tokens: int, compiled: bool, pipeline: bool = False
):
    """(token ids, decode seconds) of one greedy run of a hand-written loop; `pipeline`:
    mlx-lm's pipelined loop around the compiled step (`mlx_handwritten.pipelined`)."""
    model.reset()
    first = mx.argmax(model.prefill(prompt), axis=-1)
    out = [np.asarray(first).astype(np.int32)]
    if pipeline:
        picks, seconds = pipelined(
            model.decode, first, range(prompt.shape[1], prompt.shape[1] + tokens - 1)
        )
        return np.stack(out + picks, axis=1), seconds
    decode = model.decode if compiled else model.decode_eager
    began = time.perf_counter()
    for step in range(1, tokens):
        logits = decode(out[-1][:, None], prompt.shape[1] + step - 1)
        out.append(np.asarray(mx.argmax(logits, axis=-1)).astype(np.int32))
    return np.stack(out, axis=1), time.perf_counter() - began


def tg_generate(program: object, prompt: np.ndarray, tokens: int):
    """(token ids, decode seconds) of one greedy `generate` (default MLX mode)."""
    result = generate(program, prompt, tokens, backend="mlx")
    return result.tokens, result.decode_seconds


CONTENDERS = (
    "tensorgraph generate (mlx)",
    "hand-written mx.compile",
    "hand-written eager",
    "hand-written mx.compile pipelined",
)


def contenders(family: str, size: str, prompt: np.ndarray, tokens: int):
    """(transformers' tokens, {contender: run() -> (tokens, decode seconds)})."""
    model = build_model(family, size)
    program = tg.compile(from_torch_generation(model, max_seq=MAX_SEQ, prompt_buckets=(BUCKET,)))
    hand = DecoderLM(model, MAX_SEQ)
    runs = {
        CONTENDERS[0]: lambda: tg_generate(program, prompt, tokens),
        CONTENDERS[1]: lambda: hand_generate(hand, prompt, tokens, True),
        CONTENDERS[2]: lambda: hand_generate(hand, prompt, tokens, False),
        CONTENDERS[3]: lambda: hand_generate(hand, prompt, tokens, True, pipeline=True),
    }
    return transformers_tokens(model, prompt, tokens), runs


def whisper_contenders(family: str, size: str, prompt: np.ndarray, tokens: int):
    """(transformers' tokens, {contender: run}) for Whisper's decoder at `size`'s width,
    layers and vocabulary (8 heads of 64 at default), over a 128-frame log-mel input
    (64 encoder positions) seeded from the prompt: tensorgraph's `generate_seq2seq` on a
    `from_torch_seq2seq_generation` import against `WhisperDecodeLoop` (the self cache
    preallocated, the cross keys and values projected once). Each loop's first token
    comes from its encode call, so the decode steps timed are the same tokens - 1."""
    transformers = import_transformers()
    s = SIZES[size]
    width, heads, layers = s["hidden_size"], s["num_attention_heads"], s["num_hidden_layers"]
    config = transformers.WhisperConfig(
        vocab_size=s["vocab_size"], num_mel_bins=80, d_model=width,
        encoder_layers=layers, decoder_layers=layers, encoder_attention_heads=heads,
        decoder_attention_heads=heads, encoder_ffn_dim=s["intermediate_size"],
        decoder_ffn_dim=s["intermediate_size"], max_source_positions=64,
        max_target_positions=MAX_SEQ, pad_token_id=0, bos_token_id=1, eos_token_id=2,
        decoder_start_token_id=3, suppress_tokens=[], begin_suppress_tokens=[], init_std=INIT_STD,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.WhisperForConditionalGeneration(config).eval()
    rng = np.random.default_rng(int(prompt.sum()))
    mel = rng.standard_normal((1, 80, 128)).astype(np.float32)
    program = tg.compile(from_torch_seq2seq_generation(model, max_seq=MAX_SEQ))
    rules = decoding_rules(model.generation_config)
    hand = WhisperDecodeLoop(model, MAX_SEQ)

    def ours():
        result = generate_seq2seq(program, mel, tokens, rules=rules, backend="mlx")
        return result.tokens, result.decode_seconds

    def written(compiled: bool, pipeline: bool = False):
        start = np.array([[config.decoder_start_token_id]], np.int32)
        first = mx.argmax(hand.start(mel, start), axis=-1)
        out = [np.asarray(first).astype(np.int32)]
        if pipeline:
            picks, seconds = pipelined(hand.decode, first, range(1, tokens))
            return np.stack(out + picks, axis=1), seconds
        decode = hand.decode if compiled else hand.decode_eager
        began = time.perf_counter()
        for step in range(1, tokens):
            logits = decode(out[-1][:, None], step)
            out.append(np.asarray(mx.argmax(logits, axis=-1)).astype(np.int32))
        return np.stack(out, axis=1), time.perf_counter() - began

    with torch.no_grad():
        want = model.generate(torch.from_numpy(mel), do_sample=False, max_new_tokens=tokens)
    runs = {
        CONTENDERS[0]: ours,
        CONTENDERS[1]: lambda: written(True),
        CONTENDERS[2]: lambda: written(False),
        CONTENDERS[3]: lambda: written(True, pipeline=True),
    }
    return want[:, -tokens:].numpy().astype(np.int32), runs  # generate returns new tokens


# Encoder-decoder families: name -> a function with `contenders`' signature and result.
ENCODER_DECODERS: dict[str, Callable[[str, str, np.ndarray, int], tuple]] = {
    "whisper": whisper_contenders
}


def agrees(got: np.ndarray, want: np.ndarray) -> bool:
    """`got` starts with transformers' tokens `want` (which may stop early at EOS)."""
    return got.shape[1] >= want.shape[1] and np.array_equal(got[:, : want.shape[1]], want)


def best_of(runs: dict, count: int) -> dict:
    """Each contender's fastest of `count` interleaved rounds, after one warm-up round."""
    for run in runs.values():
        run()
    best: dict = {}
    for _ in range(count):
        for name, run in runs.items():
            result = run()
            if name not in best or result[1] < best[name][1]:
                best[name] = result
    return best


def compare(family: str, size: str, prompt_len: int, tokens: int, runs: int) -> dict:
    """{"reference": transformers' tokens, contender: (tokens, best decode seconds)}."""
    prompt = np.random.default_rng(0).integers(3, SIZES[size]["vocab_size"], (1, prompt_len))
    make = ENCODER_DECODERS.get(family, contenders)
    reference, calls = make(family, size, prompt.astype(np.int32), tokens)
    return {"reference": reference, **best_of(calls, runs)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--families", default=",".join((*CONFIGS, *ENCODER_DECODERS)))
    parser.add_argument("--size", choices=tuple(SIZES), default="default")
    parser.add_argument("--prompt-len", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    args = parser.parse_args()
    mx.set_default_device(mx.cpu if args.device == "cpu" else mx.gpu)
    s = SIZES[args.size]
    print(
        f"{args.size}: {s['num_hidden_layers']} layers, hidden {s['hidden_size']}, "
        f"{s['num_attention_heads']} heads / {s['num_key_value_heads']} kv heads x "
        f"{s['head_dim']}, mlp {s['intermediate_size']}, vocab {s['vocab_size']}; max_seq "
        f"{MAX_SEQ}, prompt {args.prompt_len} (bucket {BUCKET}), {args.tokens} new tokens, "
        f"best of {args.runs}; MLX {args.device}; {blas_info()}"
    )
    print(
        f"{'family':<8} {'tg tok/s':>9} {'compiled':>9} {'eager':>9} {'pipelined':>9} "
        f"{'tg/best hand':>12} {'tg/pipelined':>12} {'tokens agree':>13}"
    )
    steps = args.tokens - 1
    for family in args.families.split(","):
        result = compare(family, args.size, args.prompt_len, args.tokens, args.runs)
        ours, compiled, eager, piped = (result[n][1] for n in CONTENDERS)
        agree = all(agrees(result[n][0], result["reference"]) for n in CONTENDERS)
        print(
            f"{family:<8} {steps / ours:>9.1f} {steps / compiled:>9.1f} {steps / eager:>9.1f} "
            f"{steps / piped:>9.1f} {min(compiled, eager) / ours:>12.3f} {piped / ours:>12.3f} "
            f"{'yes' if agree else 'NO':>13}"
        )


if __name__ == "__main__":
    main()
