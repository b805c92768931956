"""What copy elimination buys: every zoo model, and every model of the real-model suite,
compiled with the default passes and again without `copy_elim` (alignment 16, the
default schedule and planner), side by side in one run.

Columns: arena without and with copy elimination, their ratio, operands placed into
their concat, the copy bytes eliminated (bytes the concats no longer copy), and both
compile times.

    PYTHONPATH=. python benches/bench_copy_elim.py [--zoo-only] [--small]

The suite models need the `models` extra (torch, torchvision, transformers); `--small`
builds them at CI sizes instead of the issue's (224x224 images, 128 tokens).
"""

from __future__ import annotations

import argparse
import time
import warnings

import tensorgraph as tg
from tensorgraph.models import ZOO, build_model

WITHOUT = tuple(p for p in tg.DEFAULT_PASSES if p != "copy_elim")


def measure(name: str, graph: tg.Graph) -> None:
    start = time.perf_counter()
    plain = tg.compile(graph, passes=WITHOUT, alignment=16)
    middle = time.perf_counter()
    placed = tg.compile(graph, alignment=16)
    end = time.perf_counter()
    stats = placed.stats["copy_elim"]
    print(
        f"{name:<20} {plain.plan.arena_size:>12,} {placed.plan.arena_size:>12,} "
        f"{placed.plan.arena_size / plain.plan.arena_size:>6.3f} {stats['placed']:>7} "
        f"{stats['copy_bytes_eliminated']:>14,} {middle - start:>7.2f}s {end - middle:>7.2f}s"
    )


def suite_graphs(full: bool) -> list[tuple[str, tg.Graph]]:
    from tests.models_suite.catalog import MODELS, build

    graphs = []
    for name in MODELS:
        module, args = build(name, full)
        graphs.append((name, tg.from_torch(module, args)))
    return graphs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zoo-only", action="store_true", help="skip the real-model suite")
    parser.add_argument("--small", action="store_true", help="suite models at CI sizes")
    args = parser.parse_args()
    print(
        f"{'model':<20} {'arena w/o':>12} {'arena with':>12} {'ratio':>6} {'placed':>7} "
        f"{'copy bytes gone':>14} {'t w/o':>8} {'t with':>8}"
    )
    for name in ZOO:
        model = build_model(name)
        measure(name, model.graph)
    if args.zoo_only:
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, graph in suite_graphs(not args.small):
            measure(name, graph)


if __name__ == "__main__":
    main()
