"""Prefill at the prompt's real length (issue 26 item 6): the zoo Llama's generation
program with one symbolic "prefill" entry (`llama_generation(prefill="symbolic")`)
against the bucketed program (`prefill="buckets"`, the prompt padded to the smallest
bucket of 32/128/512 that holds it), same weights, one process.

For each prompt length between buckets the two prefill calls run interleaved (A, B, A,
B, ...) after a warm-up, each the call `generate` makes (the entry `generate` picks, fed
as it feeds it, logits brought to the host); the figure is the min over runs. Beside
it: the symbolic entry's first call at a new length (its specialisation at that length
and, on MLX, the trace; what a server pays once per distinct length, up to the
MLX_CACHED_LENGTHS kept), and each entry's activation arena at that length
(`plan.at(prompt=L)` against the bucket entry's plan). Both programs must generate the
same tokens (`--tokens`, greedy) on the backend measured.

With `--model hf-llama` the contenders are a transformers LlamaForCausalLM (random
weights, grouped-query heads; dim 256, 4 layers, vocab 512) imported by
`from_torch_generation` with `prefill="symbolic"` and with the same buckets.

    python benches/bench_prefill_symbolic.py [--lengths 40 100 200] [--runs 7]
                                             [--backend mlx|numpy|arena] [--layers 2]
                                             [--model zoo|hf-llama]
"""

from __future__ import annotations

import argparse
import time

from tensorgraph.codegen_mlx import blas_info  # noqa: F401  first: OpenBLAS before mlx.core

# isort: split
import numpy as np

import tensorgraph as tg
from tensorgraph.models.generation import _feeds as entry_feeds
from tensorgraph.models.generation import generate, generation_layout, llama_generation
from tensorgraph.models.llama import LlamaConfig

MAX_SEQ, BUCKETS = 512, (32, 128, 512)


def prefill_call(program: object, prompt: np.ndarray, backend: str, state: object):
    """The prefill call `generate` makes for `prompt` ((1, n) int32), as a thunk."""
    layout = generation_layout(program)
    length = prompt.shape[1]
    bucket = layout.bucket_for(length, 1)
    entry = layout.prefill_entry(bucket)
    padded = np.zeros((layout.batch, bucket), np.int32)
    padded[:, :length] = prompt
    feeds = entry_feeds(
        program.entries[entry].graph, {"ids": padded, "position": 0, "length": length}
    )

    def call() -> np.ndarray:
        (logits,) = program.run(entry, feeds, backend=backend, state=state)
        return np.asarray(logits)

    return call, entry, bucket


def hf_llama_programs(layers: int) -> tuple[object, object, str]:
    """(symbolic, bucketed) programs of one imported transformers Llama, and its name."""
    import torch

    from tensorgraph.importers.generation import from_torch_generation
    from tensorgraph.importers.torch_compat import import_transformers

    transformers = import_transformers()
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=512,
        hidden_size=256,
        intermediate_size=704,
        num_hidden_layers=layers,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=MAX_SEQ,
    )
    model = transformers.LlamaForCausalLM(config).eval()
    programs = [
        tg.compile(
            from_torch_generation(model, max_seq=MAX_SEQ, prompt_buckets=BUCKETS, prefill=mode)
        )
        for mode in ("symbolic", "buckets")
    ]
    return *programs, f"transformers llama (dim 256, {layers} layers, vocab 512), imported"


def seconds(call) -> tuple[float, float]:
    """(wall, CPU) seconds of one call: CPU time (all threads) is the figure that stays
    meaningful on a machine shared with other jobs, where wall time is mostly waiting."""
    wall, cpu = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[40, 100, 200])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--tokens", type=int, default=8)
    parser.add_argument("--backend", default="mlx", choices=("mlx", "numpy", "arena"))
    parser.add_argument("--layers", type=int, default=None, help="default: 2 zoo, 4 hf")
    parser.add_argument("--model", default="zoo", choices=("zoo", "hf-llama"))
    args = parser.parse_args()
    vocab = 512
    if args.model == "hf-llama":
        symbolic, bucketed, name = hf_llama_programs(args.layers or 4)
    else:
        layers = args.layers or 2
        config = LlamaConfig(batch=1, dim=512, heads=8, hidden=1376, layers=layers, vocab=vocab)
        began = time.perf_counter()
        symbolic = tg.compile(
            llama_generation(config, max_seq=MAX_SEQ, buckets=BUCKETS, prefill="symbolic")
        )
        symbolic_compile = time.perf_counter() - began
        began = time.perf_counter()
        bucketed = tg.compile(llama_generation(config, max_seq=MAX_SEQ, buckets=BUCKETS))
        bucketed_compile = time.perf_counter() - began
        name = f"zoo llama (dim {config.dim}, {layers} layers, vocab {vocab})"
        print(f"compile: symbolic {symbolic_compile:.2f} s, bucketed {bucketed_compile:.2f} s")
    print(
        f"{name}, max_seq {MAX_SEQ}, buckets {BUCKETS}, backend {args.backend}, min of "
        f"{args.runs} interleaved runs"
    )
    print("ms: min over runs, wall (CPU); ratio = symbolic / bucketed of each")
    print(
        f"{'prompt':>6} {'bucket':>6} {'symbolic ms':>17} {'bucketed ms':>17} {'ratio':>11} "
        f"{'first call ms':>15} {'arena KiB':>10} {'bucket arena KiB':>17} {'tokens':>7}"
    )
    rng = np.random.default_rng(0)
    for length in args.lengths:
        prompt = rng.integers(0, vocab, (1, length)).astype(np.int32)
        sym_state, buck_state = symbolic.new_state(args.backend), bucketed.new_state(args.backend)
        sym_call, _, _ = prefill_call(symbolic, prompt, args.backend, sym_state)
        buck_call, entry, bucket = prefill_call(bucketed, prompt, args.backend, buck_state)
        first = seconds(sym_call)  # a new length: specialisation (and MLX's trace) included
        buck_call()
        np.testing.assert_allclose(sym_call(), buck_call(), rtol=1e-3, atol=1e-3)
        sym_times, buck_times = [], []
        for _ in range(args.runs):
            sym_times.append(seconds(sym_call))
            buck_times.append(seconds(buck_call))
        sym = [min(t[k] for t in sym_times) for k in (0, 1)]
        buck = [min(t[k] for t in buck_times) for k in (0, 1)]
        arena = symbolic.entries["prefill"].plan.at(prompt=length).arena_size
        bucket_arena = bucketed.entries[entry].plan.arena_size
        want = generate(bucketed, prompt, args.tokens, backend=args.backend).tokens
        got = generate(symbolic, prompt, args.tokens, backend=args.backend).tokens
        same = "same" if np.array_equal(got, want) else "DIFFER"
        print(
            f"{length:>6} {bucket:>6} {sym[0] * 1e3:>8.1f} ({sym[1] * 1e3:>6.1f}) "
            f"{buck[0] * 1e3:>8.1f} ({buck[1] * 1e3:>6.1f}) "
            f"{sym[0] / buck[0]:>4.2f} ({sym[1] / buck[1]:>4.2f}) "
            f"{first[0] * 1e3:>7.0f} ({first[1] * 1e3:>5.0f}) {arena / 1024:>10.1f} "
            f"{bucket_arena / 1024:>17.1f} {same:>7}"
        )


if __name__ == "__main__":
    main()
