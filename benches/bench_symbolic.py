"""Symbolic dimensions (issue 26): the zoo Llama (default config) compiled once over
`seq in [1, 2048]`, against a static compile at each of 16 lengths spread geometrically
over the range (both ends included), side by side in one run.

Columns per length: the parametric plan's arena there (`prog.plan.at(seq=L)`), the
static compile's arena at L, their ratio (target <= 1.05), the lower bound at L, and the
upper-bound plan's arena (the static plan at 2048, what a planner that plans at the
bound holds for every call) with the parametric arena's share of it. Then compile
times (process CPU time, min of `--repeat` runs): symbolic / static at 2048 (target
<= 2), and the time of `plan.at` at a length not seen yet. Each length's arena output
is checked equal to the static compile's, bit for bit, at the lengths of `--check`.

    PYTHONPATH=. python benches/bench_symbolic.py [--repeat 5] [--layers 2]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import tensorgraph as tg
from tensorgraph.models.llama import LlamaConfig, llama
from tensorgraph.planner.parametric import verify_parametric
from tests.planner.symbolic_models import symbolic_llama


def cpu_seconds(run: object, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        run()
        best = min(best, time.process_time() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--layers", type=int, default=LlamaConfig().layers)
    parser.add_argument("--check", type=int, nargs="*", default=[1, 40, 300])
    args = parser.parse_args()
    config = LlamaConfig(layers=args.layers)
    seq = tg.Dim("seq", min=1, max=2048)
    graph = symbolic_llama(config, seq)
    prog = tg.compile(graph)
    verify_parametric(prog.plan)
    upper = prog.plan.upper.arena_size
    lengths = sorted({int(n) for n in np.round(np.geomspace(seq.min, seq.max, 16))})
    print(f"zoo llama ({config.layers} layers, dim {config.dim}), seq in [1, 2048]:")
    print(
        f"{'seq':>5} {'parametric':>13} {'static':>13} {'ratio':>6} {'lower bound':>13} "
        f"{'of upper':>8}"
    )
    worst = 0.0
    for length in lengths:
        static = tg.compile(llama(config, seq=length).graph)
        at = prog.plan.at(seq=length)
        ratio = at.arena_size / static.plan.arena_size
        worst = max(worst, ratio)
        assert at.lower_bound <= at.arena_size <= upper
        print(
            f"{length:>5} {at.arena_size:>13,} {static.plan.arena_size:>13,} {ratio:>6.3f} "
            f"{at.lower_bound:>13,} {at.arena_size / upper:>8.4f}"
        )
        if length in args.check:
            ids = np.random.default_rng(length).integers(0, config.vocab, (1, length))
            feeds = {"tokens": ids.astype(np.int32)}
            got, expected = prog.run(feeds, backend="arena"), static.run(feeds, backend="arena")
            assert all(np.array_equal(a, b) for a, b in zip(got, expected, strict=True))
    print(f"worst parametric / static: {worst:.3f} (upper-bound plan {upper:,} B)")
    symbolic = cpu_seconds(lambda: tg.compile(graph), args.repeat)
    at_max = graph.specialize(seq=seq.max)
    static = cpu_seconds(lambda: tg.compile(at_max), args.repeat)
    print(
        f"compile: symbolic {symbolic * 1e3:.1f} ms, static at 2048 {static * 1e3:.1f} ms, "
        f"ratio {symbolic / static:.2f}"
    )
    fresh = [tg.compile(graph) for _ in range(args.repeat)]
    first = min(cpu_seconds(lambda p=p: p.plan.at(seq=777), 1) for p in fresh)
    again = cpu_seconds(lambda: fresh[0].plan.at(seq=777), args.repeat)
    print(f"plan.at(seq=777): first {first * 1e3:.1f} ms, cached {again * 1e6:.1f} us")


if __name__ == "__main__":
    main()
