"""The exact search as MiniMalloc runs it: a decision problem at the capacity in each
challenging instance's file name (1048576). Each solution is checked independently.

Each search gets --budget work units (0.6-1 us each on the quiet 2-core reference
machine, up to 5.3 us measured under load), so the verdicts and node counts are the same
on every run; only the seconds vary ("cpu s" is the process's CPU time, steadier than
wall time on a shared machine).

    python benches/bench_search.py [--budget 60000000]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from tensorgraph.planner import lower_bound, read_minimalloc_csv, verify_assignment
from tensorgraph.planner.buffers import Assignment
from tensorgraph.planner.search import search_offsets

ROOT = Path(__file__).resolve().parents[2] / "shared" / "bench" / "minimalloc"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget", type=int, default=60_000_000, help="work units")
    args = parser.parse_args()
    print(
        f"{'instance':<16} {'buffers':>7} {'lower bound':>11} {'result':>18} {'seconds':>8} "
        f"{'cpu s':>7} {'nodes':>8} {'work':>11}"
    )
    solved, total, cpu_total = 0, 0.0, 0.0
    for path in sorted((ROOT / "challenging").glob("*.csv")):
        buffers = read_minimalloc_csv(path)
        capacity = int(path.name.split(".")[1])
        began, cpu_began = time.perf_counter(), time.process_time()
        result = search_offsets(buffers, capacity, 1, args.budget)
        seconds, cpu = time.perf_counter() - began, time.process_time() - cpu_began
        total, cpu_total = total + seconds, cpu_total + cpu
        if result.offsets is not None:
            top = max(result.offsets[b.id] + b.size for b in buffers)
            verify_assignment(buffers, Assignment(result.offsets, top))
            assert top <= capacity
            verdict, solved = f"fits ({top})", solved + 1
        else:
            verdict = "infeasible" if result.proven_infeasible else "budget spent"
        print(
            f"{path.name:<16} {len(buffers):>7} {lower_bound(buffers):>11} {verdict:>18} "
            f"{seconds:>8.1f} {cpu:>7.1f} {result.nodes:>8,} {result.work:>11,}",
            flush=True,
        )
    print(
        f"{solved} of 11 fit within capacity in {args.budget:,} work units each; "
        f"{total:.1f} s in all ({cpu_total:.1f} s of CPU)"
    )


if __name__ == "__main__":
    main()
