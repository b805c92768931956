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

Then the same columns for the suite's GPT-2 and BERT (tests/models_suite/catalog.py)
imported once with a dynamic sequence, `torch.export.Dim("seq", min=1, max=256)` (their
position tables hold 256), against a static import and compile at each of 16 lengths
over [1, 256]; compile time symbolic / static is the compile of the dynamic import
against the compile of the static import at 256 (the exports themselves not counted).
Arena outputs equal the static import's bit for bit at every length there.

    PYTHONPATH=. python benches/bench_symbolic.py [--repeat 5] [--layers 2] [--no-imported]
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
    parser.add_argument("--no-imported", action="store_true", help="skip GPT-2 and BERT")
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
    if not args.no_imported:
        for name in ("gpt2", "bert"):
            imported(name, args.repeat)


def imported(name: str, repeat: int, max_seq: int = 256) -> None:
    """The parametric arena of `name` imported with a dynamic sequence against a static
    import at each of 16 lengths, and the compile times (see the module docstring)."""
    import torch

    from tests.models_suite.catalog import build

    module, (tokens,) = build(name)
    seq = torch.export.Dim("seq", min=1, max=max_seq)
    graph = tg.from_torch(module, (tokens,), dynamic_shapes=(({1: seq},),))
    prog = tg.compile(graph)
    verify_parametric(prog.plan)
    lengths = sorted({int(n) for n in np.round(np.geomspace(1, max_seq, 16))})
    statics = {}
    for length in lengths:
        ids = torch.randint(0, 1000, (1, length), generator=torch.Generator().manual_seed(length))
        statics[length] = (tg.from_torch(module, (ids,)), ids.numpy())
    upper = prog.plan.upper.arena_size
    print(f"\nimported {name} (dynamic seq in [1, {max_seq}]):")
    print(
        f"{'seq':>5} {'parametric':>11} {'import':>11} {'ratio':>6} {'same graph':>11} "
        f"{'ratio':>6} {'lower bound':>11} {'of upper':>8} {'+const':>6}"
    )
    worst = worst_same = 0.0
    for length in lengths:
        static_graph, ids = statics[length]
        static = tg.compile(static_graph)
        same = tg.compile(graph.specialize(seq=length))
        at = prog.plan.at(seq=length)
        ratio = at.arena_size / static.plan.arena_size
        ratio_same = at.arena_size / same.plan.arena_size
        total = (at.arena_size + at.constant_size) / (
            static.plan.arena_size + static.plan.constant_size
        )
        worst, worst_same = max(worst, ratio), max(worst_same, ratio_same)
        assert at.lower_bound <= at.arena_size <= upper
        feeds = {"args_0": ids}
        got, expected = prog.run(feeds, backend="arena"), static.run(feeds, backend="arena")
        assert all(np.array_equal(a, b) for a, b in zip(got, expected, strict=True))
        print(
            f"{length:>5} {at.arena_size:>11,} {static.plan.arena_size:>11,} {ratio:>6.3f} "
            f"{same.plan.arena_size:>11,} {ratio_same:>6.3f} {at.lower_bound:>11,} "
            f"{at.arena_size / upper:>8.4f} {total:>6.3f}"
        )
    print(
        f"worst parametric / static import: {worst:.3f}, / same graph static: "
        f"{worst_same:.3f} (upper-bound plan {upper:,} B)"
    )
    symbolic = cpu_seconds(lambda: tg.compile(graph), repeat)
    static = cpu_seconds(lambda: tg.compile(statics[max_seq][0]), repeat)
    print(
        f"compile: symbolic {symbolic * 1e3:.1f} ms, static at {max_seq} "
        f"{static * 1e3:.1f} ms, ratio {symbolic / static:.2f}"
    )


if __name__ == "__main__":
    main()
