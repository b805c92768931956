"""`best` against greedy_size and the lower bound on 20 dense random interval sets of
200-2,000 buffers (`planner.synthetic.random_buffers`, where greedy stays above the
bound), plus omnimalloc's allocators when it is importable ("not installed"
otherwise): its greedy portfolio `omni` and its tabu search (3 s each by its default).

`best` runs with its default budget (`--budget default`) or --budget work units; the
arenas are the same on every run and machine, only the seconds vary. `--others` also
runs the comparison allocators (omnimalloc 1.0.0 installs from PyPI; MiniMalloc's
Python package only from its git repository, so it is reported when importable).

    python benches/bench_random_instances.py [--budget default] [--count 20] [--others]
"""

from __future__ import annotations

import argparse
import importlib.util
import time

from tensorgraph.planner import assign_offsets, lower_bound, verify_assignment
from tensorgraph.planner.synthetic import random_buffers

OTHERS = ("minimalloc", "omnimalloc")


def omnimalloc_arenas(buffers: list) -> list[tuple[str, int, float]]:
    """(allocator, arena, seconds) for omnimalloc's greedy portfolio and tabu search."""
    import omnimalloc
    from omnimalloc.allocators import OmniAllocator, TabuSearchAllocator

    items = [
        omnimalloc.Allocation(id=i, size=b.size, start=b.start, end=b.end)
        for i, b in enumerate(buffers)
    ]
    results = []
    for name, allocator in (("omni", OmniAllocator()), ("tabu", TabuSearchAllocator())):
        began = time.perf_counter()
        placed = omnimalloc.allocate(items, allocator)
        seconds = time.perf_counter() - began
        results.append((name, max(a.offset + a.size for a in placed), seconds))
    return results


def budget(text: str) -> int | None:
    return None if text == "default" else int(text)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget", type=budget, default=None, help="units or 'default'")
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--others", action="store_true", help="run omnimalloc too")
    args = parser.parse_args()
    found = {name: importlib.util.find_spec(name) is not None for name in OTHERS}
    for name in OTHERS:
        print(f"{name}: {'installed' if found[name] else 'not installed'}")
    others = args.others and found["omnimalloc"]
    print(
        f"{'n':>5} {'seed':>4} {'bound':>11} {'greedy/LB':>9} {'best/LB':>8} {'best s':>7} "
        f"{'work':>9}  certificate"
    )
    better = wins = 0
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
        extra = ""
        if others:
            rows = omnimalloc_arenas(buffers)
            extra = "  " + " ".join(f"{a}/LB {top / bound:.4f} ({s:.1f}s)" for a, top, s in rows)
            wins += plan.arena_size <= min(top for _, top, _ in rows)
        print(
            f"{n:>5} {k:>4} {bound:>11,} {greedy.arena_size / bound:>9.4f} "
            f"{plan.arena_size / bound:>8.4f} {seconds:>7.2f} {plan.work:>9,}  "
            f"{plan.certificate}{extra}",
            flush=True,
        )
    print(f"best below greedy_size on {better} of {args.count}")
    if others:
        print(f"best <= every omnimalloc allocator on {wins} of {args.count}")


if __name__ == "__main__":
    main()
