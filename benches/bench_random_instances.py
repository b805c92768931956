"""`best` against greedy_size and the lower bound on 20 dense random interval sets of
200-2,000 buffers (`planner.synthetic.random_buffers`, where greedy stays above the
bound), plus omnimalloc's allocators when it is importable ("not installed"
otherwise): its greedy portfolio `omni` and its tabu search (3 s each by its default).

`best` runs with its default budget (`--budget default`) or --budget work units; the
arenas are the same on every run and machine, only the seconds vary. `--others` also
runs the comparison allocators: omnimalloc 1.0.0 (installs from PyPI) and Google's
MiniMalloc C++ solver when its binary is found ($MINIMALLOC_BIN or `minimalloc` on the
PATH; how to build it offline: benches/minimalloc_cli.py), minimised by bisecting its
capacity within --minimalloc-seconds per instance (4 s: more than `best` takes at
5M units; 20 s gave the same arenas).

    python benches/bench_random_instances.py [--budget default] [--count 20] [--others]
"""

from __future__ import annotations

import argparse
import importlib.util
import time

from minimalloc_cli import DEFAULT_BINARY, minimalloc_arena

from tensorgraph.planner import assign_offsets, lower_bound, verify_assignment
from tensorgraph.planner.synthetic import random_buffers


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
    parser.add_argument("--others", action="store_true", help="run omnimalloc and MiniMalloc")
    parser.add_argument("--minimalloc-seconds", type=float, default=4.0)
    args = parser.parse_args()
    omni = importlib.util.find_spec("omnimalloc") is not None
    print(f"omnimalloc: {'installed' if omni else 'not installed'}")
    print(f"minimalloc: {DEFAULT_BINARY or 'no binary (see benches/minimalloc_cli.py)'}")
    others = args.others and (omni or DEFAULT_BINARY is not None)
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
            rows = omnimalloc_arenas(buffers) if omni else []
            if DEFAULT_BINARY is not None:
                top, spent = minimalloc_arena(buffers, args.minimalloc_seconds, DEFAULT_BINARY)
                rows.append(("minimalloc", top, spent))
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
        print(f"best <= every other allocator run on {wins} of {args.count}")


if __name__ == "__main__":
    main()
