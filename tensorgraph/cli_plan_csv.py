"""`tensorgraph plan-csv FILE`: plans the buffers of a MiniMalloc CSV (id, lower, upper,
size; half-open lifetimes) with any offset algorithm, or, with --capacity, decides by
exact search whether they fit that capacity.

Invariants: every plan is checked by `verify_assignment` before anything is printed as
verified or written; the lower bound printed beside an arena bounds that same quantity
(`arena_bound` for the unaligned top); budgets count work units, so the same budget
gives the same plan (only --time-limit may cut a run short, and the output says so).
Progress lines go to stderr, and only once a run has lasted PROGRESS_AFTER seconds:
display only, the plan never depends on them.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from tensorgraph.cli_args import UsageError, _output_file, _power_of_two, _seconds


def cmd_plan_csv(args: argparse.Namespace) -> int:
    """Plan a MiniMalloc CSV with --algorithm, or, with --capacity, decide by exact search
    whether it fits that capacity (exit 0 when it does, 1 when it does not or the budget
    ran out first). Either way the offsets are verified before anything is written.

    The arena printed is the plan's top (offset + size, unaligned), so the lower bound
    printed beside it is `arena_bound`, a bound on that same top under the alignment
    (the aligned live-bytes sum overstates it: one 10-byte buffer at alignment 64 needs
    10 bytes, not 64)."""
    from tensorgraph.planner.assign import assign_offsets
    from tensorgraph.planner.buffers import read_minimalloc_csv
    from tensorgraph.planner.certificate import CertifiedAssignment, arena_bound
    from tensorgraph.planner.verify import verify_assignment

    path = Path(args.file)
    if path.is_dir():
        raise UsageError(f"{path} is a directory, not a MiniMalloc CSV file")
    if not path.is_file():
        raise UsageError(f"no such file: {path}")
    buffers = read_minimalloc_csv(path)
    bound = arena_bound(buffers, args.alignment)
    progress = _StderrProgress(time.perf_counter())
    if args.capacity is not None:
        return _plan_csv_capacity(args, path, buffers, progress)
    plan = assign_offsets(
        buffers,
        args.algorithm,
        args.alignment,
        args.budget,
        time_limit=args.time_limit,
        progress=progress,
    )
    seconds = time.perf_counter() - progress.began
    verify_assignment(buffers, plan, args.alignment)
    ratio = plan.arena_size / bound if bound else 1.0
    print(
        f"{path.name}: {len(buffers)} buffers, arena {plan.arena_size:,}, lower bound "
        f"{bound:,}, ratio {ratio:.4f}, {args.algorithm} in {seconds:.3f} s, "
        f"work {plan.work:,} units{_cut_note(plan.cut_short)} (verified)"
    )
    if isinstance(plan, CertifiedAssignment):
        print(f"certificate: {plan.certificate}")
    parts = path.name.split(".")
    if len(parts) >= 3 and parts[-2].isdigit():
        capacity = int(parts[-2])
        verdict = "fits" if plan.arena_size <= capacity else "does not fit"
        print(f"capacity {capacity:,} (from the file name): {verdict}")
    if args.out:
        _write_plan(args.out, buffers, plan)
    return 0


def _plan_csv_capacity(
    args: argparse.Namespace, path: Path, buffers: list, progress: _StderrProgress
) -> int:
    """The --capacity mode of plan-csv: MiniMalloc's decision problem. The capacity
    bounds every buffer's aligned extent (offset + size rounded up to the alignment), so
    above alignment 1 the bound on those (aligned sizes summed) is printed beside the
    bound on the arena, the unaligned top printed when it fits."""
    from tensorgraph.planner.buffers import Assignment, lower_bound, write_minimalloc_csv
    from tensorgraph.planner.certificate import arena_bound
    from tensorgraph.planner.search import search_offsets
    from tensorgraph.planner.verify import verify_assignment

    progress(f"exact search at capacity {args.capacity:,}")
    result = search_offsets(
        buffers,
        args.capacity,
        args.alignment,
        args.budget,
        time_limit=args.time_limit,
        progress=progress,
    )
    seconds = time.perf_counter() - progress.began
    bound = arena_bound(buffers, args.alignment)
    extents = lower_bound(buffers, args.alignment)
    aligned = f" ({extents:,} for aligned extents)" if args.alignment > 1 else ""
    head = (
        f"{path.name}: {len(buffers)} buffers, lower bound {bound:,}{aligned}, "
        f"capacity {args.capacity:,}:"
    )
    tail = f"exact search in {seconds:.3f} s, work {result.work:,} units"
    tail += _cut_note(result.cut_short)
    if result.offsets is None:
        verdict = "does not fit (proven)" if result.proven_infeasible else "undecided"
        more = "" if result.proven_infeasible or result.cut_short else " (budget spent)"
        print(f"{head} {verdict}, {tail}{more}")
        return 1
    top = max((result.offsets[b.id] + b.size for b in buffers), default=0)
    plan = Assignment(result.offsets, top, result.work, result.cut_short)
    verify_assignment(buffers, plan, args.alignment)
    print(f"{head} fits, arena {top:,}, {tail} (verified)")
    if args.out:
        _write_plan(args.out, buffers, plan)
    else:
        write_minimalloc_csv(sys.stdout, buffers, plan)
    return 0


def _write_plan(out: str, buffers: list, plan: object) -> None:
    from tensorgraph.planner.buffers import write_minimalloc_csv

    write_minimalloc_csv(out, buffers, plan)
    print(f"offsets written to {out} (id,lower,upper,size,offset)")


def _cut_note(cut_short: bool) -> str:
    return ", cut short by --time-limit" if cut_short else ""


class _StderrProgress:
    """plan-csv's progress callback: lines on stderr, once the run has lasted
    PROGRESS_AFTER seconds (short runs stay quiet). Display only: the plan never
    depends on it."""

    def __init__(self, began: float) -> None:
        self.began = began

    def __call__(self, line: str) -> None:
        elapsed = time.perf_counter() - self.began
        if elapsed >= PROGRESS_AFTER:
            print(f"tensorgraph: {elapsed:6.1f} s  {line}", file=sys.stderr, flush=True)


PROGRESS_AFTER = 1.0  # seconds before plan-csv starts printing progress


def _work_units(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(
            f"expects a positive int or 0 (work units) but got {text!r}"
        )
    return value


def _capacity_bytes(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value < 1 << 63:
        raise argparse.ArgumentTypeError(
            f"expects a number of bytes in [0, 2**63) but got {text!r}"
        )
    return value


def add_plan_csv_command(commands: argparse._SubParsersAction) -> None:
    """Register `plan-csv` on the `tensorgraph` parser's subcommands."""
    from tensorgraph.planner.assign import ALGORITHMS

    csv_cmd = commands.add_parser("plan-csv", help="plan a MiniMalloc CSV of buffers")
    csv_cmd.add_argument("file")
    csv_cmd.add_argument("--algorithm", choices=sorted(ALGORITHMS), default="best")
    csv_cmd.add_argument(
        "--alignment", type=_power_of_two, default=1, metavar="BYTES", help="a power of two"
    )
    csv_cmd.add_argument(
        "--budget",
        type=_work_units,
        default=None,
        metavar="UNITS",
        help="work units for best or the exact search (about a microsecond each; the "
        "default grows with the buffer count); the same budget gives the same plan",
    )
    csv_cmd.add_argument(
        "--time-limit",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="wall-clock cap (a plan it cuts short may differ between runs)",
    )
    csv_cmd.add_argument(
        "--capacity",
        type=_capacity_bytes,
        default=None,
        metavar="BYTES",
        help="decide by exact search whether the buffers fit, instead of --algorithm "
        "(exit 1 when they do not or the budget runs out first)",
    )
    csv_cmd.add_argument(
        "--out",
        type=_output_file,
        metavar="FILE",
        help="write id,lower,upper,size,offset to FILE, in an existing folder",
    )
    csv_cmd.set_defaults(run=cmd_plan_csv)
