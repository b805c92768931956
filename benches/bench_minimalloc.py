"""Every offset algorithm on the MiniMalloc benchmark instances (../shared/bench).

Prints per instance and algorithm: arena, arena / lower bound, whether it fits the
capacity in the file name, the time, and the work units spent; `best`'s certificate;
then a `search` row: the exact decision search at the file's capacity (MiniMalloc's
problem), with its search nodes. Then min / median / max ratios per algorithm. `best`
and the search get --budget work units per instance (0.6-1 us each on the quiet 2-core
reference machine, up to 5.3 us measured under load; `--budget default` for the default
budget), and optionally a wall-clock cap (--time-limit, seconds). Without a time limit
the arenas are the same on every run and machine; only the seconds vary.

    python benches/bench_minimalloc.py [--budget 60000000] [--time-limit S] [--only A,B]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from tensorgraph.planner import assign_offsets, lower_bound, read_minimalloc_csv
from tensorgraph.planner.assign import ALGORITHMS
from tensorgraph.planner.buffers import Assignment
from tensorgraph.planner.search import search_offsets
from tensorgraph.planner.verify import verify_assignment

ROOT = Path(__file__).resolve().parents[2] / "shared" / "bench" / "minimalloc"


def budget(text: str) -> int | None:
    return None if text == "default" else int(text)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget", type=budget, default=60_000_000, help="units or 'default'")
    parser.add_argument("--time-limit", type=float, default=None)
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    files = sorted(ROOT.glob("*/*.csv"))
    if args.only:
        files = [f for f in files if f.name.split(".")[0] in args.only.split(",")]
    ratios: dict[str, list[float]] = {name: [] for name in ALGORITHMS}
    seconds_of: dict[str, list[float]] = {name: [] for name in ALGORITHMS}
    search_seconds: list[float] = []
    solved = 0
    print(
        f"{'instance':<16} {'algorithm':<15} {'arena':>10} {'arena/LB':>9} {'fits':>5} "
        f"{'seconds':>8} {'work':>11}"
    )
    for path in files:
        buffers = read_minimalloc_csv(path)
        capacity = int(path.name.split(".")[1])
        bound = lower_bound(buffers)
        for name in ALGORITHMS:
            began = time.perf_counter()
            if name == "best":
                plan = assign_offsets(buffers, name, 1, args.budget, time_limit=args.time_limit)
            else:
                plan = assign_offsets(buffers, name, 1)
            seconds = time.perf_counter() - began
            verify_assignment(buffers, plan)
            ratio = plan.arena_size / bound
            ratios[name].append(ratio)
            seconds_of[name].append(seconds)
            fits = "yes" if plan.arena_size <= capacity else "no"
            cut = " (cut short)" if plan.cut_short else ""
            print(
                f"{path.name:<16} {name:<15} {plan.arena_size:>10} {ratio:>9.4f} {fits:>5} "
                f"{seconds:>8.2f} {plan.work:>11,}{cut}",
                flush=True,
            )
            if name == "best":
                print(f"{'':<16} {'':<15} certificate: {plan.certificate}")
        began = time.perf_counter()
        result = search_offsets(buffers, capacity, 1, args.budget, time_limit=args.time_limit)
        seconds = time.perf_counter() - began
        if result.offsets is not None:
            top = max(result.offsets[b.id] + b.size for b in buffers)
            verify_assignment(buffers, Assignment(result.offsets, top))
            verdict = f"{top:>10} {top / bound:>9.4f} {'yes':>5}"
        else:
            verdict = f"{'-':>10} {'-':>9} {'no' if result.proven_infeasible else '?':>5}"
        search_seconds.append(seconds)
        solved += result.offsets is not None
        print(
            f"{path.name:<16} {'search':<15} {verdict} {seconds:>8.2f} {result.work:>11,} "
            f"({result.nodes:,} nodes)",
            flush=True,
        )
    print(f"\nsearch at capacity: {solved} of {len(files)} fit, {sum(search_seconds):.1f} s in all")
    print("ratio to the lower bound over all instances (min / median / max), total seconds:")
    for name, values in ratios.items():
        print(
            f"  {name:<15} {min(values):.4f} / {statistics.median(values):.4f} / "
            f"{max(values):.4f}  {sum(seconds_of[name]):8.1f} s"
        )


if __name__ == "__main__":
    main()
