"""Every offset algorithm on the MiniMalloc benchmark instances (../shared/bench).

Prints per instance and algorithm: arena, arena / lower bound, whether it fits the
capacity in the file name, and the time; then min / median / max ratios per algorithm.
`best` gets --budget seconds per instance (its exact search stops there).

    python benches/bench_minimalloc.py [--budget 60] [--only A,B]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from tensorgraph.planner import assign_offsets, lower_bound, read_minimalloc_csv
from tensorgraph.planner.assign import ALGORITHMS
from tensorgraph.planner.verify import verify_assignment

ROOT = Path(__file__).resolve().parents[2] / "shared" / "bench" / "minimalloc"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget", type=float, default=60.0)
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    files = sorted(ROOT.glob("*/*.csv"))
    if args.only:
        files = [f for f in files if f.name.split(".")[0] in args.only.split(",")]
    ratios: dict[str, list[float]] = {name: [] for name in ALGORITHMS}
    print(
        f"{'instance':<16} {'algorithm':<15} {'arena':>10} {'arena/LB':>9} {'fits':>5} "
        f"{'seconds':>8}"
    )
    for path in files:
        buffers = read_minimalloc_csv(path)
        capacity = int(path.name.split(".")[1])
        bound = lower_bound(buffers)
        for name in ALGORITHMS:
            began = time.perf_counter()
            plan = assign_offsets(buffers, name, 1, args.budget if name == "best" else None)
            seconds = time.perf_counter() - began
            verify_assignment(buffers, plan)
            ratio = plan.arena_size / bound
            ratios[name].append(ratio)
            fits = "yes" if plan.arena_size <= capacity else "no"
            print(
                f"{path.name:<16} {name:<15} {plan.arena_size:>10} {ratio:>9.4f} {fits:>5} "
                f"{seconds:>8.2f}",
                flush=True,
            )
    print("\nratio to the lower bound over all instances (min / median / max):")
    for name, values in ratios.items():
        print(
            f"  {name:<15} {min(values):.4f} / {statistics.median(values):.4f} / {max(values):.4f}"
        )


if __name__ == "__main__":
    main()
