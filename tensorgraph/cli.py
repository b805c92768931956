"""The `tensorgraph` command: models, compile, run, plan-csv and demo.

Exit codes: 0 success, 1 a failed numeric check, 2 bad usage (one line on stderr, never
a traceback: argparse errors, unknown models and every TensorGraphError end here).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tensorgraph.compiler import DEFAULT_PASSES, Program, compile
from tensorgraph.errors import TensorGraphError

BACKENDS = ("mlx", "numpy", "arena")


class UsageError(Exception):
    """Bad command-line usage: reported in one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, no usage dump
        raise UsageError(message)


def _progress(step: int, total: int, text: str) -> None:
    print(f"[{step}/{total}] {text}", flush=True)


def _config(pairs: Sequence[str]) -> dict[str, object]:
    """`k=v` pairs; values parsed as int, then float, then bool, else kept as text."""
    config: dict[str, object] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--config expects key=value but got {pair!r}")
        value: object = raw
        for parse in (int, float):
            try:
                value = parse(raw)
                break
            except ValueError:
                continue
        if raw in ("true", "false"):
            value = raw == "true"
        config[key] = value
    return config


def _build(name: str, pairs: Sequence[str]):
    from tensorgraph.models import ZOO, build_model

    if name not in ZOO:
        raise UsageError(f"unknown model {name!r}; choose one of: {', '.join(ZOO)}")
    return build_model(name, **_config(pairs))


def _passes(args: argparse.Namespace) -> tuple[str, ...]:
    off = {p.replace("-", "_") for p in args.no or ()}
    unknown = off - set(DEFAULT_PASSES)
    if unknown:
        raise UsageError(f"unknown pass(es) {sorted(unknown)}; passes: {', '.join(DEFAULT_PASSES)}")
    return tuple(p for p in DEFAULT_PASSES if p not in off)


def _human(nbytes: int) -> str:
    from tensorgraph.planner.report import human

    return human(nbytes)


def _summary(prog: Program, alignment: int) -> str:
    from tensorgraph.planner.assign import assign_offsets

    plan = prog.plan
    buffers = plan.buffers
    naive = assign_offsets(buffers, "naive", alignment).arena_size
    greedy = assign_offsets(buffers, "greedy_size", alignment).arena_size
    lines = [f"model {prog.graph.name}: {len(prog.source)} nodes -> {len(prog.graph)} after passes"]
    for name, stats in prog.stats.items():
        lines.append(f"  {name:<11} " + ", ".join(f"{k} {v}" for k, v in stats.items()))
    if prog.schedule_stats:
        lines.append(
            "  schedule    " + ", ".join(f"{k} {v}" for k, v in prog.schedule_stats.items())
        )
    lines += [
        f"  buffers          {len(buffers)}",
        f"  arena            {plan.arena_size:>12,} B  {_human(plan.arena_size)} "
        f"({plan.algorithm})",
        f"  lower bound      {plan.lower_bound:>12,} B  ratio {plan.ratio:.3f}",
        f"  naive            {naive:>12,} B  {naive / max(plan.arena_size, 1):.2f}x arena",
        f"  greedy_size      {greedy:>12,} B  {greedy / max(plan.arena_size, 1):.3f}x arena",
        f"  constant segment {plan.constant_size:>12,} B",
        f"  planning time    {plan.planning_seconds * 1000:>12.1f} ms",
    ]
    return "\n".join(lines)


def _check(outputs: list[np.ndarray], expected: list[np.ndarray]) -> tuple[float, float, bool]:
    """Max absolute and relative error, and whether every output is within tolerance."""
    worst_abs, worst_rel, ok = 0.0, 0.0, True
    for got, want in zip(outputs, expected, strict=True):
        if got.shape != want.shape or got.dtype != want.dtype:
            return float("inf"), float("inf"), False
        g, w = got.astype(np.float64), want.astype(np.float64)
        error = float(np.max(np.abs(g - w))) if g.size else 0.0
        scale = float(np.max(np.abs(w))) if w.size else 0.0
        worst_abs = max(worst_abs, error)
        worst_rel = max(worst_rel, error / scale if scale else error)
        tolerance = 1e-4 if want.dtype == np.float32 else 2e-2
        ok = ok and np.allclose(g, w, rtol=tolerance, atol=tolerance * max(scale, 1.0))
    return worst_abs, worst_rel, ok


def cmd_models(args: argparse.Namespace) -> int:
    from tensorgraph.models import ZOO, build_model

    print(f"{'model':<14} {'params':>12}  description")
    for name, entry in ZOO.items():
        print(f"{name:<14} {build_model(name).param_count:>12,}  {entry.description}")
    return 0


def cmd_compile(args: argparse.Namespace) -> int:
    model = _build(args.model, args.config)
    prog = compile(
        model.graph,
        passes=_passes(args),
        planner=args.algorithm,
        alignment=args.alignment,
        schedule=args.schedule,
    )
    print(_summary(prog, args.alignment))
    if args.report:
        print(prog.report())
    if args.json:
        Path(args.json).write_text(prog.plan.to_json())
        print(f"plan JSON written to {args.json}")
    if args.plot:
        from tensorgraph.planner.timeline import plot_timeline

        print(f"timeline plot written to {plot_timeline(prog.plan, prog.graph, args.plot)}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from tensorgraph.runtime.reference import run_reference

    model = _build(args.model, args.config)
    prog = compile(
        model.graph, passes=_passes(args), planner=args.algorithm, schedule=args.schedule
    )
    inputs = model.inputs(args.seed)
    expected = run_reference(prog.source, inputs)
    prog.run(inputs, backend=args.backend)  # warm-up (MLX traces and compiles once)
    began = time.perf_counter()
    outputs = prog.run(inputs, backend=args.backend)
    seconds = time.perf_counter() - began
    worst_abs, worst_rel, ok = _check(outputs, expected)
    print(
        f"{args.model} on {args.backend}: {seconds * 1000:.1f} ms, max abs error "
        f"{worst_abs:.3g}, max rel error {worst_rel:.3g} vs the reference: "
        f"{'OK' if ok else 'MISMATCH'}"
    )
    return 0 if ok else 1


def cmd_plan_csv(args: argparse.Namespace) -> int:
    from tensorgraph.planner.assign import assign_offsets
    from tensorgraph.planner.buffers import lower_bound, read_minimalloc_csv
    from tensorgraph.planner.verify import verify_assignment

    path = Path(args.file)
    if not path.is_file():
        raise UsageError(f"no such file: {path}")
    buffers = read_minimalloc_csv(path)
    began = time.perf_counter()
    plan = assign_offsets(buffers, args.algorithm, args.alignment, args.budget)
    seconds = time.perf_counter() - began
    verify_assignment(buffers, plan, args.alignment)
    bound = lower_bound(buffers, args.alignment)
    ratio = plan.arena_size / bound if bound else 1.0
    print(
        f"{path.name}: {len(buffers)} buffers, arena {plan.arena_size:,}, lower bound "
        f"{bound:,}, ratio {ratio:.4f}, {args.algorithm} in {seconds:.3f} s"
    )
    parts = path.name.split(".")
    if len(parts) >= 3 and parts[-2].isdigit():
        capacity = int(parts[-2])
        verdict = "fits" if plan.arena_size <= capacity else "does not fit"
        print(f"capacity {capacity:,} (from the file name): {verdict}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from tensorgraph.codegen_mlx import blas_info
    from tensorgraph.models import build_model
    from tensorgraph.runtime.reference import run_reference

    out = Path(args.out)
    began = time.perf_counter()
    _progress(1, 4, "building and compiling the llama model (passes, schedule, plan) ...")
    model = build_model("llama")
    prog = compile(model.graph)
    print(prog.report())
    _progress(2, 4, f"running on MLX ({blas_info()}) ...")
    inputs = model.inputs(0)
    mlx_began = time.perf_counter()
    outputs = prog.run(inputs, backend="mlx")
    mlx_seconds = time.perf_counter() - mlx_began
    _progress(3, 4, "checking against the NumPy reference interpreter ...")
    expected = run_reference(prog.source, inputs)
    worst_abs, worst_rel, ok = _check(outputs, expected)
    print(
        f"  MLX run {mlx_seconds:.2f} s; max abs error "
        f"{worst_abs:.3g}, max rel error {worst_rel:.3g}: {'OK' if ok else 'MISMATCH'}"
    )
    _progress(4, 4, "plotting the memory timeline ...")
    try:
        from tensorgraph.planner.timeline import plot_timeline

        path = plot_timeline(prog.plan, prog.graph, out / "llama_memory_timeline.png")
        print(f"  timeline plot: {path.resolve()}")
    except TensorGraphError as err:
        print(f"  no plot: {err}")
    print(f"done in {time.perf_counter() - began:.1f} s")
    return 0 if ok else 1


def parser() -> argparse.ArgumentParser:
    from tensorgraph.planner.assign import ALGORITHMS
    from tensorgraph.planner.schedule import STRATEGIES

    top = _Parser(prog="tensorgraph", description="A memory-planning tensor-graph compiler.")
    commands = top.add_subparsers(dest="command", required=True, parser_class=_Parser)
    commands.add_parser("models", help="list the model zoo").set_defaults(run=cmd_models)

    def model_options(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("model")
        sub.add_argument("--config", nargs="*", default=[], metavar="K=V")
        sub.add_argument("--algorithm", choices=sorted(ALGORITHMS), default="best")
        sub.add_argument("--schedule", choices=STRATEGIES, default="best")
        sub.add_argument(
            "--no",
            action="append",
            metavar="PASS",
            help="switch a pass off (also --no-dce, --no-cse, ...)",
        )

    compile_cmd = commands.add_parser("compile", help="compile a zoo model, print the plan")
    model_options(compile_cmd)
    compile_cmd.add_argument("--alignment", type=int, default=64)
    compile_cmd.add_argument("--report", action="store_true")
    compile_cmd.add_argument("--plot", metavar="FILE")
    compile_cmd.add_argument("--json", metavar="FILE")
    compile_cmd.set_defaults(run=cmd_compile)

    run_cmd = commands.add_parser("run", help="run a zoo model and check it")
    model_options(run_cmd)
    run_cmd.add_argument("--backend", choices=BACKENDS, default="mlx")
    run_cmd.add_argument("--seed", type=int, default=0)
    run_cmd.set_defaults(run=cmd_run)

    csv_cmd = commands.add_parser("plan-csv", help="plan a MiniMalloc CSV of buffers")
    csv_cmd.add_argument("file")
    csv_cmd.add_argument("--algorithm", choices=sorted(ALGORITHMS), default="best")
    csv_cmd.add_argument("--alignment", type=int, default=1)
    csv_cmd.add_argument("--budget", type=float, default=None, metavar="SECONDS")
    csv_cmd.set_defaults(run=cmd_plan_csv)

    demo = commands.add_parser("demo", help="compile, run and plot the llama model")
    demo.add_argument("--out", default=".", metavar="DIR")
    demo.set_defaults(run=cmd_demo)
    return top


def _normalise(argv: list[str]) -> list[str]:
    """`--no-cse` and `--no-view-alias` become `--no cse` / `--no view_alias`."""
    result = []
    for arg in argv:
        if arg.startswith("--no-"):
            result += ["--no", arg[len("--no-") :]]
        else:
            result.append(arg)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    argv = _normalise(list(sys.argv[1:] if argv is None else argv))
    try:
        args = parser().parse_args(argv)
        return args.run(args)
    except UsageError as err:
        print(f"tensorgraph: error: {err}", file=sys.stderr)
        return 2
    except TensorGraphError as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        print(f"tensorgraph: {type(err).__name__}: {first}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
