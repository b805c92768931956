"""Planner cost at scale: DNN-like instances of 1k, 10k, 100k and 1M buffers.

Prints time (best of the runs) and arena / lower bound for greedy_size and best (default
budget; greedy_size only at 1M), and checks each plan with verify_assignment (not
timed). At 1M it also checks that greedy_size's offsets equal a plain one-at-a-time
placement of its order through the interval index (`PAIR_LIMIT` -1), also not timed.

    python benches/bench_planner_scale.py [--runs 3]
"""

from __future__ import annotations

import argparse
import time

from tensorgraph.planner import assign, assign_offsets, lower_bound, verify_assignment
from tensorgraph.planner.synthetic import dnn_like_buffers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="timed runs per cell (best kept)")
    args = parser.parse_args()
    print(f"{'buffers':>9} {'algorithm':<12} {'seconds':>8} {'arena/LB':>9}")
    for n in (1_000, 10_000, 100_000, 1_000_000):
        buffers = dnn_like_buffers(n, seed=1)
        bound = lower_bound(buffers)
        for name in ("greedy_size",) if n >= 1_000_000 else ("greedy_size", "best"):
            runs = []
            for _ in range(args.runs if n < 100_000 or name == "greedy_size" else 1):
                began = time.perf_counter()
                plan = assign_offsets(buffers, name)
                runs.append(time.perf_counter() - began)
            verify_assignment(buffers, plan)
            print(
                f"{n:>9,} {name:<12} {min(runs):>8.3f} {plan.arena_size / bound:>9.4f}", flush=True
            )
        if n >= 1_000_000:
            _check_against_the_interval_index(buffers, plan.offsets)


def _check_against_the_interval_index(buffers: list, offsets: dict) -> None:
    limit = assign.PAIR_LIMIT
    assign.PAIR_LIMIT = -1  # every pass one buffer at a time through the interval index
    try:
        began = time.perf_counter()
        plain = assign_offsets(buffers, "greedy_size")
        seconds = time.perf_counter() - began
    finally:
        assign.PAIR_LIMIT = limit
    same = "same offsets" if plain.offsets == offsets else "OFFSETS DIFFER"
    print(f"{len(buffers):>9,} {'(index)':<12} {seconds:>8.3f} {same}", flush=True)


if __name__ == "__main__":
    main()
