"""`tensorgraph generate MODEL`: generation with a multi-entry program (prefill buckets,
or one symbolic prefill, and a decode step sharing weights, KV-cache state and one
arena), checked token for token against an oracle (tensorgraph/cli_generate_models.py;
encoder-decoder families go to tensorgraph/cli_seq2seq.py).

Invariants: lengths, buckets and sampling parameters are checked before anything is
compiled; the exit code is 1 exactly when the tokens differ from the oracle's (or, for
reduced precision on MLX, when the first logits differ by more than the dtype's
rounding allows); tokens per second are measured after a first untimed call on MLX, so
tracing is not what they measure.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from tensorgraph.cli_args import BACKENDS, UsageError, _output_file, _positive_int, _seed
from tensorgraph.cli_generate_models import _hf_model, _zoo_llama
from tensorgraph.cli_precision import (
    _converted,
    _group_size,
    _precision_name,
    _precision_options,
)
from tensorgraph.compiler import compile

GENERATE_MODELS = ("llama", "hf-llama")


PREFILL_BUCKETS = (32, 128, 512)  # generate's default prefill buckets


def _buckets(text: str) -> tuple[int, ...]:
    """Prefill buckets: comma-separated positive ints, e.g. 32,128,512."""
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        values = ()
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(
            f"expects comma-separated positive ints (e.g. 32,128,512) but got {text!r}"
        )
    return tuple(sorted(set(values)))


def _generate_model(text: str) -> str:
    """MODEL of `generate`: llama, hf-llama or hf:<model_type>."""
    if text in GENERATE_MODELS or (text.startswith("hf:") and len(text) > 3):
        return text
    raise argparse.ArgumentTypeError(
        f"expects llama, hf-llama or hf:<model_type> (e.g. hf:qwen2) but got {text!r}"
    )


def cmd_generate(args: argparse.Namespace) -> int:
    """Generation with a multi-entry program (prefill buckets + decode sharing weights,
    KV-cache state and one arena), checked token for token against the plain NumPy
    reference loop (llama) or transformers' own greedy generate (hf-llama); with
    --dtype or --quantize, against the reference interpreter running the same converted
    program (a float32 oracle cannot give a reduced-precision model's tokens); with
    --temperature > 0, against the same sampler and seed on the reference interpreter.
    Lengths and sampling parameters are checked before anything is compiled; --stream
    prints each token as it is made."""
    from tensorgraph.cli_seq2seq import cmd_generate_seq2seq, is_seq2seq
    from tensorgraph.models.generation import choose_bucket, generate
    from tensorgraph.models.sampling import Sampler
    from tensorgraph.planner.report import human

    if is_seq2seq(args.model):  # an encoder-decoder family: encode + decode entries
        if args.prefill != "buckets":
            raise UsageError(f"--prefill {args.prefill}: {args.model} is encoder-decoder")
        return cmd_generate_seq2seq(args)
    fitting = tuple(b for b in args.buckets if b <= args.max_seq)
    if not fitting:
        raise UsageError(f"no bucket of {list(args.buckets)} fits --max-seq {args.max_seq}")
    if args.prefill == "symbolic":  # one entry at the prompt's length, 1..max_seq: no padding
        bucket = choose_bucket((args.prompt_len,), args.max_seq, args.prompt_len, args.tokens)
    else:
        bucket = choose_bucket(
            fitting, args.max_seq, args.prompt_len, args.tokens
        )  # before compiling
    _group_size(args)
    sampler = Sampler(args.temperature, args.top_k, args.top_p, args.min_p, args.sampling_seed)
    began = time.perf_counter()
    model = (_zoo_llama if args.model == "llama" else _hf_model)(args, fitting)
    program = compile(model.entries)
    named = _converted(args) or args.kv_bits is not None
    print(
        f"{args.model}{f' ({_precision_name(args)})' if named else ''}: entries "
        f"{', '.join(model.entries)} "
        f"(max_seq {args.max_seq}) compiled in {time.perf_counter() - began:.2f} s"
    )
    prompt = np.random.default_rng(args.seed).integers(0, model.vocab, args.prompt_len)
    cache = None if args.prompt_cache is None else _prompt_cache(args, program, prompt)
    options = {"backend": args.backend, "sampler": sampler, "prompt_cache": cache}
    if args.backend == "mlx":  # the first calls trace each entry: not what tok/s measures
        generate(program, prompt, args.tokens, **options)
    start = f"prefill bucket {bucket}" if cache is None else "resumed from the prompt cache"
    if cache is None and args.prefill == "symbolic":
        start = f"prefill at its length {bucket} (symbolic)"
    print(f"prompt: {args.prompt_len} tokens (seed {args.seed}), {start}")
    if not sampler.is_greedy:
        print(
            f"sampling: temperature {sampler.temperature:g}, top-k {sampler.top_k or 'all'}, "
            f"top-p {sampler.top_p:g}, min-p {sampler.min_p:g} (seed {sampler.seed})"
        )
    result = print_tokens(
        args.stream,
        lambda stream: generate(program, prompt, args.tokens, on_token=stream, **options),
    )
    decode_rate = result.decode_tokens_per_second
    decode = "no decode step" if result.decode_steps == 0 else f"{decode_rate:.1f} tokens/s"
    print(
        f"prefill: {result.prefill_tokens_per_second:.1f} tokens/s "
        f"({result.prefill_seconds * 1000:.1f} ms); decode: {decode} "
        f"({result.decode_steps} steps, {result.decode_seconds * 1000:.1f} ms) on {args.backend}"
    )
    print(
        "memory per entry (arena): "
        + ", ".join(f"{name} {human(size)}" for name, size in result.memory.entries.items())
    )
    if "prefill" in program.entries and cache is None:  # a symbolic prefill: its own length's
        arena = program.entries["prefill"].plan.at(prompt=args.prompt_len).arena_size
        print(f"prefill arena at {args.prompt_len} tokens: {human(arena)} (above: at max-seq)")
    print(program.memory().table())
    if model.expected is None or not sampler.is_greedy:  # the reference interpreter runs it
        expected = generate(program, prompt, args.tokens, backend="numpy", sampler=sampler).tokens
        oracle = f"the NumPy reference interpreter ({_precision_name(args)} program)"
        if not sampler.is_greedy:
            oracle = f"the same sampler (seed {sampler.seed}) on {oracle}"
        if args.dtype != "float32" and args.backend == "mlx":
            return _check_rounding(args, program, prompt, result.tokens, expected, oracle)
    else:
        expected, oracle = model.expected(prompt, args.tokens), model.oracle
    return report_match(result.tokens, expected, oracle)


def report_match(tokens: np.ndarray, expected: np.ndarray, oracle: str) -> int:
    """Print whether the generated `tokens` equal `expected` (`oracle` names where they
    come from), with the first differing new token where they do not; 0 or 1."""
    if not np.array_equal(tokens, expected):
        step = int(np.argmax((tokens != expected).any(axis=0)))
        print(
            f"tokens match {oracle}: NO (first difference at new token {step}: "
            f"{tokens[:, step].tolist()} vs {expected[:, step].tolist()})"
        )
        return 1
    print(f"tokens match {oracle}: yes")
    return 0


def print_tokens(stream: bool, run: Callable[[Callable | None], object]) -> object:
    """`run(on_token)`'s result (a generation result), its row 0 tokens printed on one
    "tokens:" line: each as it is made when `stream` (on_token prints and flushes it),
    else all at the end (on_token None)."""
    streamed = []

    def on_token(ids: np.ndarray) -> None:
        print(("tokens:" if not streamed else "") + f" {int(ids[0])}", end="", flush=True)
        streamed.append(int(ids[0]))

    result = run(on_token if stream else None)
    if stream:
        print()
    else:
        print("tokens: " + " ".join(str(t) for t in result.tokens[0]))
    return result


def _prompt_cache(args: argparse.Namespace, program: object, prompt: np.ndarray) -> object:
    """--prompt-cache FILE: the prompt cache saved in FILE (LoadError if another program
    made it), or, when FILE does not exist, the prompt's cache, made and saved there."""
    from tensorgraph.models.generation import cache_prompt
    from tensorgraph.models.prompt_cache import load_prompt_cache, save_prompt_cache

    if args.prompt_cache.exists():
        cache = load_prompt_cache(args.prompt_cache, program)
        print(f"prompt cache: resumed from {args.prompt_cache} ({cache.length} tokens)")
        return cache
    cache = cache_prompt(program, prompt, backend=args.backend)
    save_prompt_cache(cache, args.prompt_cache)
    print(f"prompt cache: saved to {args.prompt_cache} ({cache.length} tokens)")
    return cache


def _check_rounding(
    args: argparse.Namespace,
    program: object,
    prompt: np.ndarray,
    tokens: np.ndarray,
    expected: np.ndarray,
    oracle: str,
) -> int:
    """Reduced precision on MLX: its first logits must be within the rounding the
    program's dtype allows of the reference's (to_dtype.rounding_tolerance); greedy
    tokens after that may flip on a near tie, so their agreement is reported, not
    required."""
    from tensorgraph.models.generation import prefill_logits
    from tensorgraph.passes.to_dtype import rounding_tolerance

    ours = prefill_logits(program, prompt, "mlx").astype(np.float64)
    reference = prefill_logits(program, prompt, "numpy").astype(np.float64)
    entry = program.entries[next(n for n in program.entries if n.startswith("prefill"))]
    bound = rounding_tolerance(entry.graph, args.dtype, float(np.abs(reference).max()))
    gap = float(np.abs(ours - reference).max())
    same = int(np.cumprod(tokens[0] == expected[0]).sum())
    print(
        f"first logits vs {oracle}: max difference {gap:.4g} "
        f"(bound {bound:.4g}, {args.dtype} rounding): {'yes' if gap <= bound else 'NO'}"
    )
    print(
        f"tokens equal the reference for the first {same} of {tokens.shape[1]} (greedy "
        f"choices may flip on {args.dtype} near ties)"
    )
    return 0 if gap <= bound else 1


def add_generate_command(commands: argparse._SubParsersAction) -> None:
    """Register `generate` on the `tensorgraph` parser's subcommands."""
    gen = commands.add_parser(
        "generate",
        help="greedy generation with a KV cache, checked against NumPy",
        description="Compile prefill buckets and a decode step into one program sharing "
        "weights, KV-cache state and one arena; generate (greedily, or sampling with "
        "--temperature and the filters); check the token ids against a reference: the "
        "NumPy loop (llama), transformers' generate (hf-llama, hf:<model_type>) or the "
        "reference interpreter running the same converted or sampled program.",
    )
    gen.add_argument(
        "model",
        type=_generate_model,
        metavar="MODEL",
        help="llama (the zoo Llama, default config), hf-llama (transformers LlamaForCausalLM) "
        "or hf:<model_type> (any transformers causal LM family, e.g. hf:qwen3, from a small "
        "config with random weights)",
    )
    gen.add_argument(
        "--prompt-len",
        type=_positive_int,
        default=16,
        metavar="N",
        help="prompt length in tokens (random ids from --seed)",
    )
    gen.add_argument(
        "--tokens", type=_positive_int, default=16, metavar="M", help="new tokens to generate"
    )
    gen.add_argument("--backend", choices=BACKENDS, default="mlx", help="executor")
    gen.add_argument(
        "--buckets",
        type=_buckets,
        default=PREFILL_BUCKETS,
        metavar="L,L,...",
        help="prefill prompt-length buckets (default: 32,128,512); with --prefill symbolic, "
        "the decode windows",
    )
    gen.add_argument(
        "--prefill",
        choices=("buckets", "symbolic"),
        default="buckets",
        help="prefill the prompt padded to a bucket, or at its real length through one "
        "symbolic entry (tg.Dim 'prompt' in [1, max-seq]); default: buckets",
    )
    gen.add_argument(
        "--max-seq",
        type=_positive_int,
        default=512,
        metavar="S",
        help="KV-cache length: prompt + new tokens must fit",
    )
    gen.add_argument(
        "--seed", type=_seed, default=0, help="seed of weights and prompt, an int >= 0"
    )
    _precision_options(gen)
    gen.add_argument(
        "--kv-bits",
        type=int,
        choices=(2, 3, 4, 5, 6, 8),
        default=None,
        metavar="BITS",
        help="keep the KV cache quantized to BITS per value, as mlx-lm's QuantizedKVCache "
        "(the zoo llama attends through quantized_matmul; imported models dequantize the "
        "cache they read; default: none, a float cache)",
    )
    gen.add_argument(
        "--kv-group-size",
        type=int,
        choices=(32, 64, 128),
        default=64,
        metavar="G",
        help="values per scale in the quantized KV cache",
    )
    gen.add_argument(
        "--temperature",
        type=float,
        default=0.0,
        metavar="T",
        help="sample from softmax(logits / T) after the filters below; 0 is greedy",
    )
    gen.add_argument(
        "--top-k",
        type=int,
        default=None,
        metavar="K",
        help="sample among the K most likely (default: all)",
    )
    gen.add_argument(
        "--top-p",
        type=float,
        default=1.0,
        metavar="P",
        help="sample among the fewest most likely tokens whose probabilities sum to >= P",
    )
    gen.add_argument(
        "--min-p",
        type=float,
        default=0.0,
        metavar="P",
        help="sample among tokens of probability >= P times the most likely one's",
    )
    gen.add_argument(
        "--sampling-seed", type=int, default=0, metavar="S", help="seed of the random draws"
    )
    gen.add_argument("--stream", action="store_true", help="print each token as it is made")
    gen.add_argument(
        "--prompt-cache",
        type=_output_file,
        default=None,
        metavar="FILE",
        help="resume from the prompt's state saved in FILE, or save it there first when FILE "
        "does not exist (default: none)",
    )
    gen.set_defaults(run=cmd_generate)
