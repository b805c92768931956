"""Planner cost at scale: DNN-like instances of 1k, 10k and 100k buffers.

Prints time and arena / lower bound for greedy_size and best (default budget), and
checks each plan with verify_assignment (not timed).

    python benches/bench_planner_scale.py
"""

from __future__ import annotations

import time

from tensorgraph.planner import assign_offsets, lower_bound, verify_assignment
from tensorgraph.planner.synthetic import dnn_like_buffers


def main() -> None:
    print(f"{'buffers':>8} {'algorithm':<12} {'seconds':>8} {'arena/LB':>9}")
    for n in (1_000, 10_000, 100_000):
        buffers = dnn_like_buffers(n, seed=1)
        bound = lower_bound(buffers)
        for name in ("greedy_size", "best"):
            runs = []
            for _ in range(2 if n < 100_000 else 1):
                began = time.perf_counter()
                plan = assign_offsets(buffers, name)
                runs.append(time.perf_counter() - began)
            verify_assignment(buffers, plan)
            print(
                f"{n:>8} {name:<12} {min(runs):>8.3f} {plan.arena_size / bound:>9.4f}", flush=True
            )


if __name__ == "__main__":
    main()
