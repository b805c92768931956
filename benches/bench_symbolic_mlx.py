"""Symbolic programs on MLX (issue 26's MLX target): the zoo Llama (default config)
compiled once over `seq in [1, 2048]` and called at 20 random lengths in one process,
beside the same Llama hand-written in mlx.core (benches/bench_mlx_llama.py's, its rope
tables and mask built per length, as a user would) run over the same lengths.

Memory (each contender's loop alone, MLX's cache emptied before it, since the cache is
the process's): per call, MLX's peak (`mx.reset_peak_memory` / `mx.get_peak_memory`
around the call, through the executor's RunStats: the resident weights plus the peak
above the active bytes at the call's start) against the plan at that length + the
weights (constant segment) + inputs/outputs; target <= 1.10 at every call. After the
loop, `mx.get_cache_memory()` against the arena at the max length (target: no larger),
and the hand-written model's cache after the same loop.

Time (interleaved per length, min of `--repeat` calls each, after a warm-up call at
that length): tensorgraph with the executor's cache bound, without it (the bound's
cost), and the hand-written model; outputs checked against the hand-written logits.

    PYTHONPATH=. python benches/bench_symbolic_mlx.py [--calls 20] [--repeat 2] [--seed 0]
        [--cache-limit MIB]
"""

from __future__ import annotations

import argparse
import time

from attrs import evolve

from tensorgraph.codegen_mlx import blas_info, last_run  # first: loads BLAS before mlx.core

# isort: split
import mlx.core as mx
import numpy as np

import tensorgraph as tg
from benches.bench_mlx_llama import hand_written
from tensorgraph.codegen_mlx.symbolic import shared_traces, symbolic_traces
from tensorgraph.models.llama import LlamaConfig
from tensorgraph.symbolic_program import concrete_program
from tests.planner.symbolic_models import symbolic_llama

MIB = 2**20


def tensorgraph_call(prog: tg.Program, ids: np.ndarray) -> tuple[mx.array, object]:
    """One call at `ids`' length with stats, and its RunStats."""
    (logits,) = prog.run({"tokens": mx.array(ids)}, backend="mlx", stats=True)
    return logits, last_run(concrete_program(prog, {"seq": ids.shape[1]}, mlx=True))


def hand_call(weights: dict, config: LlamaConfig, ids: np.ndarray) -> tuple[mx.array, int]:
    """One hand-written call at `ids`' length and MLX's peak during it."""
    mx.synchronize()
    mx.reset_peak_memory()
    forward = hand_written(weights, evolve(config, seq=ids.shape[1]))
    logits = forward(mx.array(ids))
    mx.eval(logits)
    return logits, mx.get_peak_memory()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max", type=int, default=2048)
    parser.add_argument(
        "--cache-limit",
        type=int,
        default=None,
        help="MLX's cache limit in MiB for the whole run (default: MLX's own, 32 MiB on "
        "the CPU backend; Metal's default is 1.5x the GPU's working set, gigabytes)",
    )
    args = parser.parse_args()
    if args.cache_limit is not None:
        mx.set_cache_limit(args.cache_limit * MIB)
    config = LlamaConfig()
    seq = tg.Dim("seq", min=1, max=args.max)
    graph = symbolic_llama(config, seq)
    prog = tg.compile(graph)
    unbounded = tg.compile(graph)
    symbolic_traces(unbounded).cache_bound = None  # MLX's cache as MLX keeps it
    rng = np.random.default_rng(args.seed)
    lengths = [int(n) for n in rng.integers(1, args.max + 1, args.calls)]
    tokens = {n: rng.integers(0, config.vocab, (1, n)).astype(np.int32) for n in set(lengths)}
    arena_max = int(prog.plan.arena_size)
    limit = mx.set_cache_limit(0)
    mx.set_cache_limit(limit)
    print(
        f"{blas_info()}; MLX {mx.__version__} on {mx.default_device()}, cache limit "
        f"{limit / MIB:.0f} MiB"
    )
    print(
        f"zoo llama ({config.layers} layers, dim {config.dim}, vocab {config.vocab}) over "
        f"seq in [1, {args.max}], {args.calls} calls at random lengths (seed {args.seed}); "
        f"arena at the max {arena_max / MIB:.2f} MiB, weights "
        f"{prog.plan.constant_size / MIB:.2f} MiB"
    )

    mx.clear_cache()
    print(f"\n{'seq':>5} {'peak MiB':>9} {'plan+w+io':>10} {'ratio':>6} {'cache MiB':>10}")
    worst = 0.0
    for n in lengths:
        _, stats = tensorgraph_call(prog, tokens[n])
        worst = max(worst, stats.ratio)
        print(
            f"{n:>5} {stats.peak / MIB:>9.2f} {stats.bound / MIB:>10.2f} {stats.ratio:>6.3f} "
            f"{mx.get_cache_memory() / MIB:>10.2f}"
        )
    tg_cache = mx.get_cache_memory()
    segments = symbolic_traces(prog)
    print(
        f"tensorgraph: worst peak / (plan + weights + io) {worst:.3f} (target <= 1.10); "
        f"cache after the loop {tg_cache / MIB:.2f} MiB = {tg_cache / arena_max:.3f}x the "
        f"arena at the max (target <= 1); {len(segments.bounds)} segments, "
        f"{sum(segments.shapeless)} shapeless, {len(shared_traces(prog))} shared traces"
    )

    weights = {k: mx.array(v) for k, v in graph.param_values.items()}
    mx.eval(weights)
    mx.clear_cache()
    hand_peaks = []
    for n in lengths:
        _, peak = hand_call(weights, config, tokens[n])
        hand_peaks.append(peak)
    hand_cache = mx.get_cache_memory()
    print(
        f"hand-written: cache after the same loop {hand_cache / MIB:.2f} MiB = "
        f"{hand_cache / arena_max:.3f}x the arena at the max; its peak per call "
        f"{min(hand_peaks) / MIB:.2f}..{max(hand_peaks) / MIB:.2f} MiB"
    )

    print(
        f"\n{'seq':>5} {'tg ms':>8} {'no bound':>9} {'hand ms':>8} {'tg/hand':>8} "
        f"{'bound cost':>10}"
    )
    totals = {"tg": 0.0, "free": 0.0, "hand": 0.0}
    contenders = {
        "tg": lambda ids: prog.run({"tokens": mx.array(ids)}, backend="mlx")[0],
        "free": lambda ids: unbounded.run({"tokens": mx.array(ids)}, backend="mlx")[0],
        "hand": lambda ids: hand_call(weights, config, ids)[0],
    }
    for n in sorted(set(lengths)):
        best = dict.fromkeys(contenders, float("inf"))
        outs = {}
        for name, run in contenders.items():
            outs[name] = run(tokens[n])  # warm-up at this length
        for _ in range(args.repeat):
            for name, run in contenders.items():
                began = time.perf_counter()
                mx.eval(run(tokens[n]))
                best[name] = min(best[name], time.perf_counter() - began)
        for name in ("tg", "free"):
            np.testing.assert_allclose(
                np.array(outs[name]), np.array(outs["hand"]), rtol=2e-3, atol=2e-3
            )
        for name in totals:
            totals[name] += best[name]
        print(
            f"{n:>5} {best['tg'] * 1e3:>8.1f} {best['free'] * 1e3:>9.1f} "
            f"{best['hand'] * 1e3:>8.1f} {best['tg'] / best['hand']:>8.2f} "
            f"{best['tg'] / best['free']:>10.2f}"
        )
    print(
        f"sum over the lengths: tensorgraph {totals['tg']:.2f} s, without the cache bound "
        f"{totals['free']:.2f} s (bound costs {totals['tg'] / totals['free']:.2f}x), "
        f"hand-written {totals['hand']:.2f} s (tensorgraph / hand "
        f"{totals['tg'] / totals['hand']:.2f})"
    )


if __name__ == "__main__":
    main()
