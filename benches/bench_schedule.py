"""Program order vs the chosen schedule on every zoo model (imported torch models and
the ExecuTorch arena: bench_vs_executorch.py prints the same columns for them).

Also times `schedule(..., "best")` on a 10k-node residual chain.

    python benches/bench_schedule.py
"""

from __future__ import annotations

import time

import tensorgraph as tg
from tensorgraph.models import ZOO, build_model
from tensorgraph.passes import cse, dce
from tensorgraph.planner.schedule import schedule


def long_chain(blocks: int) -> tg.Graph:
    g = tg.Graph("long")
    h = g.input("x", (8, 8))
    skips = [h]
    for i in range(blocks):
        h = tg.exp(-tg.abs(tg.tanh(h * 0.5) + skips[-(i % 5) - 1]))
        skips.append(h)
    g.output(h)
    return g


def main() -> None:
    print(
        f"{'model':<14} {'LB program':>11} {'arena program':>14} {'LB chosen':>10} "
        f"{'arena chosen':>13} {'chosen/program':>15}  strategy"
    )
    for name in ZOO:
        graph = build_model(name).graph
        program = tg.compile(graph, schedule="program")
        chosen = tg.compile(graph, schedule="best")
        ratio = chosen.plan.arena_size / program.plan.arena_size
        print(
            f"{name:<14} {program.plan.lower_bound:>11,} {program.plan.arena_size:>14,} "
            f"{chosen.plan.lower_bound:>10,} {chosen.plan.arena_size:>13,} {ratio:>15.3f}  "
            f"{chosen.schedule_stats['strategy']}"
        )
    graph = long_chain(1700)
    graph = cse(dce(graph).graph).graph
    began = time.perf_counter()
    result = schedule(graph, "best")
    seconds = time.perf_counter() - began
    print(
        f"\nbest schedule of a {len(graph)}-node residual chain: {seconds:.2f} s "
        f"(peak {result.peak:,} B vs program {result.program_peak:,} B, {result.strategy}, "
        f"{result.work:,} work units)"
    )


if __name__ == "__main__":
    main()
