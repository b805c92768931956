"""`best` against greedy_size and the lower bound on 20 dense random interval sets of
200-2,000 buffers (`planner.synthetic.random_buffers`, where greedy stays above the
bound), plus MiniMalloc's and omnimalloc's Python packages when importable ("not
installed" otherwise).

`best` runs with its default budget (`--budget default`) or --budget work units; the
arenas are the same on every run and machine, only the seconds vary.

    python benches/bench_random_instances.py [--budget default] [--count 20]
"""

from __future__ import annotations

import argparse
import importlib.util
import time

from tensorgraph.planner import assign_offsets, lower_bound, verify_assignment
from tensorgraph.planner.synthetic import random_buffers

OTHERS = ("minimalloc", "omnimalloc")


def budget(text: str) -> int | None:
    return None if text == "default" else int(text)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget", type=budget, default=None, help="units or 'default'")
    parser.add_argument("--count", type=int, default=20)
    args = parser.parse_args()
    for name in OTHERS:
        found = importlib.util.find_spec(name) is not None
        print(f"{name}: {'installed (not run by this bench)' if found else 'not installed'}")
    print(
        f"{'n':>5} {'seed':>4} {'bound':>11} {'greedy/LB':>9} {'best/LB':>8} {'best s':>7} "
        f"{'work':>9}  certificate"
    )
    better = 0
    for k in range(args.count):
        n = 200 + (1800 * k) // max(args.count - 1, 1)
        buffers = random_buffers(n, k)
        bound = lower_bound(buffers)
        greedy = assign_offsets(buffers, "greedy_size")
        began = time.perf_counter()
        plan = assign_offsets(buffers, "best", 1, args.budget)
        seconds = time.perf_counter() - began
        verify_assignment(buffers, plan)
        better += plan.arena_size < greedy.arena_size
        print(
            f"{n:>5} {k:>4} {bound:>11,} {greedy.arena_size / bound:>9.4f} "
            f"{plan.arena_size / bound:>8.4f} {seconds:>7.2f} {plan.work:>9,}  "
            f"{plan.certificate}",
            flush=True,
        )
    print(f"best below greedy_size on {better} of {args.count}")


if __name__ == "__main__":
    main()
