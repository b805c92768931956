"""Google's MiniMalloc solver (C++ CLI) as an arena minimiser, for side-by-side runs with
tensorgraph's `best` on the dense random interval sets of `bench_random_instances.py`.

MiniMalloc (github.com/google/minimalloc) is a decision solver: given a capacity it finds
offsets that fit, proves that none exist (NOT_FOUND), or runs out of time
(DEADLINE_EXCEEDED). `minimalloc_arena` turns it into a minimiser: it writes the buffers
as MiniMalloc CSV (`id,lower,upper,size`, lifetimes half-open `[lower, upper)` exactly
as `Buffer.start`/`Buffer.end` and `read_minimalloc_csv`), starts from the
`greedy_size` arena (known feasible) and bisects the capacity down towards
`lower_bound(buffers)`, each call under MiniMalloc's own `--timeout` (a share of what
is left of the total), with a subprocess timeout as a backstop. A solved call moves the
feasible end to the height MiniMalloc reached (at most the capacity asked); NOT_FOUND
or a timeout moves the other end up (a timeout proves nothing, so the result is an
upper bound, as with MiniMalloc's own `--minimize_capacity`). Every solution is checked
before it counts: its rows against the input, its offsets by tensorgraph's
`verify_assignment` at the capacity asked.

Building the binary (offline; the submodules at the commits MiniMalloc pins):

    git --git-dir=<google/minimalloc mirror> archive HEAD | tar -x -C /work/minimalloc-src
    git --git-dir=<abseil/abseil-cpp mirror> archive b75a3ff4afda9654649328e25555181759d7ad69 \\
        | tar -x -C /work/minimalloc-src/external/abseil-cpp
    git --git-dir=<google/googletest mirror> archive 391ce627def20c1e8a54d10b12949b15086473dd \\
        | tar -x -C /work/minimalloc-src/external/googletest
    cmake -S /work/minimalloc-src -B /work/minimalloc-build -DCMAKE_BUILD_TYPE=Release
    cmake --build /work/minimalloc-build --target minimalloc -j2   # -O3 -DNDEBUG

Run (the table: per instance n, seed, bound, greedy/LB, then per budget MiniMalloc/LB, its
seconds, its calls, and proof/LB: the smallest capacity not proven infeasible, over LB):

    MINIMALLOC_BIN=/work/minimalloc-build/minimalloc python benches/minimalloc_cli.py \\
        [--seconds 4 20] [--count 20]

`bench_random_instances.py --others` runs it beside `best` when the binary is found.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tensorgraph.planner import lower_bound
from tensorgraph.planner.assign import greedy_size
from tensorgraph.planner.buffers import Assignment, Buffer
from tensorgraph.planner.synthetic import random_buffers
from tensorgraph.planner.verify import verify_assignment

# The binary: $MINIMALLOC_BIN, else `minimalloc` on the PATH (None: not built here).
DEFAULT_BINARY = os.environ.get("MINIMALLOC_BIN") or shutil.which("minimalloc")
MIN_CALL = 0.01  # seconds: no call is started with less time than this left
GRACE = 1.0  # seconds past MiniMalloc's own timeout before the process is killed


@dataclass
class Search:
    """What one minimisation did: `arena` is the smallest capacity MiniMalloc solved
    with a validated solution (None when no call succeeded), `infeasible` the largest
    capacity it proved infeasible (bound - 1 when none), `calls` one
    (capacity, outcome, seconds) per MiniMalloc run."""

    bound: int
    greedy: int
    arena: int | None = None
    infeasible: int = -1
    seconds: float = 0.0
    calls: list[tuple[int, str, float]] = field(default_factory=list)


def write_csv(path: Path, buffers: Sequence[Buffer]) -> None:
    """MiniMalloc input: one row per buffer, id = its index in `buffers`."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["id", "lower", "upper", "size"])
        for i, b in enumerate(buffers):
            writer.writerow([i, b.start, b.end, b.size])


def read_offsets(path: Path, buffers: Sequence[Buffer]) -> list[int]:
    """Offsets from MiniMalloc's output CSV, each row checked against its input buffer."""
    offsets: list[int | None] = [None] * len(buffers)
    with path.open(newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            i = int(row["id"])
            b = buffers[i]
            got = (int(row["lower"]), int(row["upper"]), int(row["size"]))
            if got != (b.start, b.end, b.size) or offsets[i] is not None:
                raise ValueError(f"row {row} does not match buffer {i} {b}")
            offsets[i] = int(row["offset"])
    if any(o is None for o in offsets):
        raise ValueError("MiniMalloc output misses buffers")
    return [int(o) for o in offsets if o is not None]


def validate(buffers: Sequence[Buffer], offsets: Sequence[int], capacity: int) -> int:
    """The height of MiniMalloc's solution (max offset + size), checked by tensorgraph's
    own verifier (offsets in [0, capacity], no two buffers live together share a byte):
    PlanError otherwise."""
    height = max((o + b.size for o, b in zip(offsets, buffers, strict=True)), default=0)
    placed = Assignment({b.id: o for b, o in zip(buffers, offsets, strict=True)}, capacity)
    verify_assignment(buffers, placed)
    return height


def run_minimalloc(
    binary: str, source: Path, target: Path, capacity: int, timeout: float
) -> tuple[str, float]:
    """One decision call: ('ok' | 'infeasible' | 'timeout', seconds)."""
    target.unlink(missing_ok=True)
    command = [
        binary,
        f"--capacity={capacity}",
        f"--input={source}",
        f"--output={target}",
        f"--timeout={timeout:.3f}s",
    ]
    began = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout + GRACE)
    except subprocess.TimeoutExpired:
        return "timeout", time.perf_counter() - began
    seconds = time.perf_counter() - began
    if done.returncode == 0:
        return "ok", seconds
    if "NOT_FOUND" in done.stderr:
        return "infeasible", seconds
    if "DEADLINE_EXCEEDED" in done.stderr:
        return "timeout", seconds
    raise RuntimeError(f"MiniMalloc failed ({done.returncode}): {done.stderr[-500:]}")


def minimalloc_search(buffers: Sequence[Buffer], seconds: float, binary: str) -> Search:
    """Bisect the capacity between lower_bound - 1 (infeasible) and the greedy_size
    arena (feasible) with MiniMalloc, within `seconds` in all (see the module doc).

    The low end is the largest capacity proven infeasible or timed out below the
    feasible end (a solution can come out lower than a capacity that timed out: the
    search is not monotone). Each call gets what is left divided by the bisection steps
    still needed to close the gap to 1e-4 of the bound, so the last steps get the most
    time. When greedy_size already meets the bound, MiniMalloc is run once at it."""
    began = time.perf_counter()
    result = Search(lower_bound(buffers), greedy_size(buffers, 1).arena_size)
    result.infeasible = result.bound - 1
    resolution = max(1, result.bound // 10_000)
    high, timed_out = result.greedy, []  # high: known feasible
    with tempfile.TemporaryDirectory(prefix="minimalloc-") as folder:
        source, target = Path(folder, "in.csv"), Path(folder, "out.csv")
        write_csv(source, buffers)
        while True:
            left = seconds - (time.perf_counter() - began)
            low = max([result.infeasible, *(t for t in timed_out if t < high)])
            if left < MIN_CALL:
                break
            if high - low > 1:
                capacity = (low + high) // 2
            elif result.arena is None and high not in timed_out:
                capacity = high  # greedy meets the bound: MiniMalloc's own solution
            else:
                break
            steps = max(1, math.ceil(math.log2(max(1, (high - low) / resolution))))
            outcome, spent = run_minimalloc(
                binary, source, target, capacity, max(MIN_CALL, left / steps)
            )
            result.calls.append((capacity, outcome, spent))
            if outcome == "ok":
                height = validate(buffers, read_offsets(target, buffers), capacity)
                result.arena = height if result.arena is None else min(result.arena, height)
                high = min(high, height)
            elif outcome == "infeasible":
                result.infeasible = max(result.infeasible, capacity)
            else:
                timed_out.append(capacity)
    if result.arena is not None and result.infeasible >= result.arena:
        raise RuntimeError(f"MiniMalloc proved {result.infeasible} infeasible but solved less")
    result.seconds = time.perf_counter() - began
    return result


def minimalloc_arena(buffers: Sequence[Buffer], seconds: float, binary: str) -> tuple[int, float]:
    """(smallest arena MiniMalloc solved with a validated solution, total seconds).

    When no MiniMalloc call succeeded in time, the arena is the greedy_size start
    (`minimalloc_search` tells the two apart)."""
    result = minimalloc_search(buffers, seconds, binary)
    arena = result.greedy if result.arena is None else result.arena
    return arena, result.seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default=DEFAULT_BINARY, help="default: $MINIMALLOC_BIN")
    parser.add_argument("--seconds", type=float, nargs="+", default=[4.0, 20.0])
    parser.add_argument("--count", type=int, default=20)
    args = parser.parse_args()
    if args.binary is None:
        parser.error("no MiniMalloc binary: build it (module docstring), pass --binary")
    heads = " ".join(
        f"{f'mm/LB {s:g}s':>12} {'s':>5} {'calls':>5} {'proof/LB':>8}" for s in args.seconds
    )
    print(f"{'n':>5} {'seed':>4} {'bound':>11} {'greedy/LB':>9} {heads}")
    for k in range(args.count):
        n = 200 + (1800 * k) // max(args.count - 1, 1)  # as bench_random_instances.py
        buffers = random_buffers(n, k)
        bound, greedy = lower_bound(buffers), greedy_size(buffers, 1).arena_size
        cells = []
        for budget in args.seconds:
            result = minimalloc_search(buffers, budget, args.binary)
            ratio = "none" if result.arena is None else f"{result.arena / result.bound:.4f}"
            proof = (result.infeasible + 1) / bound  # no smaller capacity is feasible
            cells.append(f"{ratio:>12} {result.seconds:>5.1f} {len(result.calls):>5} {proof:>8.4f}")
        print(f"{n:>5} {k:>4} {bound:>11,} {greedy / bound:>9.4f} {' '.join(cells)}", flush=True)


if __name__ == "__main__":
    main()
