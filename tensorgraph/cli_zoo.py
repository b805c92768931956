"""The zoo-model commands of `tensorgraph`: models, compile, run and demo, and the
numeric check (`compare`) of a backend's outputs against the reference interpreter.

Invariants: `compile` and `run` build the model from the zoo by name with `--config`
overrides (UsageError naming an unknown model or a malformed pair), apply --dtype and
--quantize (tensorgraph/cli_precision.py) and the passes left on, then call the one
driver `tg.compile`; `run` and `demo` exit 1 exactly when `compare` finds an output out
of tolerance (TOLERANCES, relative to the largest expected magnitude, per dtype;
integers and bools exactly), a count, shape or dtype that differs, or a NaN where the
reference has none.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from attrs import frozen

from tensorgraph.cli_args import (
    BACKENDS,
    UsageError,
    _config,
    _output_dir,
    _output_file,
    _power_of_two,
    _seed,
)
from tensorgraph.cli_precision import _precision, _precision_options, _typed_inputs
from tensorgraph.compiler import DEFAULT_PASSES, PASS_ALIASES, Program, compile
from tensorgraph.errors import TensorGraphError

# Largest error allowed, relative to the largest magnitude of the expected output (at
# least 1), per output dtype: a few units in the last place of each float type after a
# deep model's accumulated rounding. Integer and bool outputs must match exactly.
TOLERANCES = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2}


@frozen
class Comparison:
    """Outputs against expected ones: the worst absolute and relative (to the largest
    expected magnitude) errors over all outputs, and whether each output is in tolerance."""

    max_abs: float
    max_rel: float
    ok: bool

    def __str__(self) -> str:
        verdict = "OK" if self.ok else "MISMATCH"
        return f"max abs error {self.max_abs:.3g}, max rel error {self.max_rel:.3g}: {verdict}"


def compare(outputs: Sequence[np.ndarray], expected: Sequence[np.ndarray]) -> Comparison:
    """Compare output by output; a different count, shape or dtype, or a NaN where the
    expected value is not NaN, fails the check. Tolerances come from TOLERANCES."""
    if len(outputs) != len(expected):
        return Comparison(float("inf"), float("inf"), False)
    worst_abs, worst_rel, ok = 0.0, 0.0, True
    for got, want in zip(outputs, expected, strict=True):
        if got.shape != want.shape or got.dtype != want.dtype:
            return Comparison(float("inf"), float("inf"), False)
        g, w = got.astype(np.float64), want.astype(np.float64)
        if not np.array_equal(np.isnan(g), np.isnan(w)):
            return Comparison(float("nan"), float("nan"), False)
        finite = ~np.isnan(w)
        error = float(np.max(np.abs(g - w)[finite], initial=0.0))
        scale = max(float(np.max(np.abs(w)[finite], initial=0.0)), 1.0)
        worst_abs, worst_rel = max(worst_abs, error), max(worst_rel, error / scale)
        ok = ok and error <= TOLERANCES.get(str(want.dtype), 0.0) * scale
    return Comparison(worst_abs, worst_rel, ok)


def _progress(step: int, total: int, text: str) -> None:
    print(f"[{step}/{total}] {text}", flush=True)


def _build(name: str, pairs: Sequence[str]):
    from tensorgraph.models import ZOO, build_model

    if name not in ZOO:
        raise UsageError(f"unknown model {name!r}; choose one of: {', '.join(ZOO)}")
    return build_model(name, **_config(pairs))


def _passes(args: argparse.Namespace) -> tuple[str, ...]:
    off = {p.replace("-", "_") for p in args.no or ()}
    off = {PASS_ALIASES.get(p, p) for p in off}
    unknown = off - set(DEFAULT_PASSES)
    if unknown:
        raise UsageError(f"unknown pass(es) {sorted(unknown)}; passes: {', '.join(DEFAULT_PASSES)}")
    return tuple(p for p in DEFAULT_PASSES if p not in off)


def _compile(
    args: argparse.Namespace, alignment: int = 64, notes: list | None = None
) -> tuple[object, Program]:
    model = _build(args.model, args.config)
    prog = compile(
        _precision(args, model.graph, notes),
        passes=_passes(args),
        planner=args.algorithm,
        alignment=alignment,
        schedule=args.schedule,
    )
    return model, prog


def _summary(prog: Program, alignment: int) -> str:
    """The plan against the lower bound and the baselines (naive and greedy_size planned
    on the very same buffers). Follows the program's header or full report, so it
    repeats none of their lines; byte counts carry thousands separators, as there."""
    from tensorgraph.planner.assign import assign_offsets
    from tensorgraph.planner.report import human

    plan = prog.plan
    buffers = plan.buffers
    naive = assign_offsets(buffers, "naive", alignment).arena_size
    greedy = assign_offsets(buffers, "greedy_size", alignment).arena_size
    arena = max(plan.arena_size, 1)
    lines = [
        "summary:",
        f"  buffers          {len(buffers):>12,}",
        f"  arena            {plan.arena_size:>12,} B  {human(plan.arena_size)} ({plan.algorithm})",
        f"  lower bound      {plan.lower_bound:>12,} B  ratio {plan.ratio:.3f}",
        f"  naive            {naive:>12,} B  {naive / arena:.2f}x arena",
        f"  greedy_size      {greedy:>12,} B  {greedy / arena:.3f}x arena",
        f"  constant segment {plan.constant_size:>12,} B  {human(plan.constant_size)}",
        f"  planning time    {plan.planning_seconds * 1000:>12,.1f} ms",
    ]
    return "\n".join(lines)


def cmd_models(args: argparse.Namespace) -> int:
    import textwrap

    import attrs

    from tensorgraph.models import ZOO

    print(f"{'model':<14} {'params':>12}  description")
    indent = " " * 29
    for name, entry in ZOO.items():
        print(f"{name:<14} {entry.build().param_count:>12,}  {entry.description}")
        defaults = " ".join(f"{k}={v}" for k, v in attrs.asdict(entry.config()).items())
        print(
            textwrap.fill(
                defaults,
                100,
                initial_indent=indent + "--config ",
                subsequent_indent=indent + " " * 9,
            )
        )
    return 0


def cmd_compile(args: argparse.Namespace) -> int:
    from tensorgraph.planner.report import format_program_header

    notes: list[str] = []
    _, prog = _compile(args, args.alignment, notes)
    for note in notes:
        print(note)
    # The full report starts with the header: one or the other, so no line shows twice.
    print(prog.report() if args.report else format_program_header(prog))
    if not args.report:  # the full report ends with it
        print(prog.memory().table())
    print(_summary(prog, args.alignment))
    if args.json:
        Path(args.json).write_text(prog.plan.to_json())
        print(f"plan JSON written to {args.json}")
    if args.plot:
        from tensorgraph.planner.timeline import plot_timeline

        path = plot_timeline(prog.plan, prog.graph, args.plot, show_state=args.plot_state)
        print(f"timeline plot written to {path}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from tensorgraph.runtime.reference import run_reference

    model, prog = _compile(args)
    inputs = _typed_inputs(prog.source, model.inputs(args.seed))
    expected = run_reference(prog.source, inputs)
    began = time.perf_counter()
    prog.run(inputs, backend=args.backend)  # the first run sets up the backend (MLX)
    first = time.perf_counter() - began
    began = time.perf_counter()
    outputs = prog.run(inputs, backend=args.backend)
    seconds = time.perf_counter() - began
    check = compare(outputs, expected)
    print(
        f"{args.model} on {args.backend}: {seconds * 1000:.1f} ms per run (first run "
        f"{first * 1000:.1f} ms); {check} vs the reference interpreter"
    )
    return 0 if check.ok else 1


def cmd_demo(args: argparse.Namespace) -> int:
    from tensorgraph.codegen_mlx import blas_info
    from tensorgraph.models import build_model
    from tensorgraph.runtime.reference import run_reference

    out = Path(args.out)
    began = time.perf_counter()
    _progress(1, 4, "compiling llama (passes, schedule, memory plan) ...")
    model = build_model("llama")
    prog = compile(model.graph)
    print(prog.report())
    _progress(2, 4, f"running on MLX ({blas_info()}) ...")
    inputs = model.inputs(0)
    mlx_began = time.perf_counter()
    outputs = prog.run(inputs, backend="mlx")
    mlx_seconds = time.perf_counter() - mlx_began
    _progress(3, 4, "checking against the NumPy reference interpreter ...")
    check = compare(outputs, run_reference(prog.source, inputs))
    print(f"  MLX run {mlx_seconds:.2f} s; {check}", flush=True)
    _progress(4, 4, "plotting the memory timeline ...")
    try:
        from tensorgraph.planner.timeline import plot_timeline

        path = plot_timeline(prog.plan, prog.graph, out / "llama_memory_timeline.png")
        print(f"  timeline plot: {path.resolve()}")
    except TensorGraphError as err:  # no matplotlib: say how to get it, finish the rest
        print(f"  no plot: {err}")
    print(f"done in {time.perf_counter() - began:.1f} s")
    return 0 if check.ok else 1


def add_model_commands(commands: argparse._SubParsersAction) -> None:
    """Register `models`, `compile` and `run` on the `tensorgraph` parser's subcommands."""
    from tensorgraph.planner.assign import ALGORITHMS
    from tensorgraph.planner.schedule import STRATEGIES

    commands.add_parser(
        "models", help="list the model zoo", description="List the zoo models and their configs."
    ).set_defaults(run=cmd_models)

    def model_options(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("model", help="a zoo model (see `tensorgraph models`)")
        sub.add_argument(
            "--config",
            nargs="+",
            action="extend",
            default=[],
            metavar="K=V",
            help="override config fields, e.g. batch=8 dtype=float16 (default: the "
            "model's defaults, listed by `tensorgraph models`)",
        )
        sub.add_argument(
            "--algorithm",
            choices=sorted(ALGORITHMS),
            default="best",
            help="offset algorithm of the memory planner",
        )
        sub.add_argument(
            "--schedule", choices=STRATEGIES, default="best", help="node order strategy"
        )
        sub.add_argument(
            "--no",
            action="append",
            metavar="PASS",
            help=f"switch a pass off, repeatable (also --no-dce, --no-cse, --no-view-alias, "
            f"...; default: all of {', '.join(DEFAULT_PASSES)} on)",
        )

    compile_cmd = commands.add_parser(
        "compile",
        help="compile a zoo model, print the plan",
        description="Compile a zoo model and print its passes and memory plan.",
    )
    model_options(compile_cmd)
    _precision_options(compile_cmd)
    compile_cmd.add_argument(
        "--alignment",
        type=_power_of_two,
        default=64,
        metavar="BYTES",
        help="buffer offset alignment, a power of two",
    )
    compile_cmd.add_argument("--report", action="store_true", help="print the full report")
    compile_cmd.add_argument(
        "--plot",
        type=_output_file,
        metavar="FILE",
        help="write the memory timeline as a PNG to FILE, in an existing folder (default: none)",
    )
    compile_cmd.add_argument(
        "--plot-state",
        action="store_true",
        help="draw the state region and the constant segment above the arena in --plot",
    )
    compile_cmd.add_argument(
        "--json",
        type=_output_file,
        metavar="FILE",
        help="write the plan as JSON to FILE, in an existing folder (default: none)",
    )
    compile_cmd.set_defaults(run=cmd_compile)

    run_cmd = commands.add_parser(
        "run",
        help="run a zoo model and check it",
        description="Compile and run a zoo model, checked against the reference interpreter.",
    )
    model_options(run_cmd)
    _precision_options(run_cmd)
    run_cmd.add_argument("--backend", choices=BACKENDS, default="mlx", help="executor")
    run_cmd.add_argument(
        "--seed", type=_seed, default=0, help="seed of the example inputs, an int >= 0"
    )
    run_cmd.set_defaults(run=cmd_run)


def add_demo_command(commands: argparse._SubParsersAction) -> None:
    """Register `demo` on the `tensorgraph` parser's subcommands."""
    demo = commands.add_parser(
        "demo",
        help="compile, run, check and plot the llama model",
        description="Compile, run, check and plot the llama model, step by step.",
    )
    demo.add_argument(
        "--out",
        type=_output_dir,
        default=".",
        metavar="DIR",
        help="folder for the timeline plot, created if missing (default: the current folder)",
    )
    demo.set_defaults(run=cmd_demo)
