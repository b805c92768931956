"""The `tensorgraph` command: the top-level parser and `main`, the entry point. Each
subcommand lives in its own module and registers itself on the parser: models, compile,
run and demo (tensorgraph/cli_zoo.py), plan-csv (cli_plan_csv.py), generate
(cli_generate.py, cli_generate_models.py, cli_seq2seq.py) and train (cli_train.py); the
shared parser pieces and value types are in cli_args.py, the precision options in
cli_precision.py.

Exit codes: 0 success, 1 a failed numeric check, 2 bad usage. Bad usage is reported in
one line on stderr (`tensorgraph: error: ...`, or `tensorgraph: PlanError: ...` for a
TensorGraphError), never a traceback. Values are checked where they enter: argparse
types refuse a bad seed, alignment or output path before any work starts, model configs
refuse bad sizes by name. `main` still turns an OSError (a file that cannot be written
after all) or a MemoryError (a config too large for this machine) into one line.

Seeds are non-negative ints, as NumPy's generators take them; a negative seed is
refused rather than silently mapped onto another one.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from tensorgraph.cli_args import (
    BACKENDS,
    UsageError,
    _config,
    _HelpFormatter,
    _output_dir,
    _output_file,
    _parse_value,
    _Parser,
    _positive_int,
    _power_of_two,
    _seconds,
    _seed,
)
from tensorgraph.cli_generate import (
    GENERATE_MODELS,
    PREFILL_BUCKETS,
    _buckets,
    _check_rounding,
    _generate_model,
    _prompt_cache,
    add_generate_command,
    cmd_generate,
    print_tokens,
)
from tensorgraph.cli_generate_models import (
    HF_LLAMA,
    HF_SMALL,
    _GenerationModel,
    _hf_config,
    _hf_model,
    _zoo_llama,
)
from tensorgraph.cli_plan_csv import (
    _capacity_bytes,
    _cut_note,
    _plan_csv_capacity,
    _StderrProgress,
    _work_units,
    _write_plan,
    add_plan_csv_command,
    cmd_plan_csv,
)
from tensorgraph.cli_precision import (
    _converted,
    _group_size,
    _precision,
    _precision_name,
    _precision_options,
    _typed_inputs,
)
from tensorgraph.cli_zoo import (
    TOLERANCES,
    Comparison,
    _build,
    _compile,
    _passes,
    _progress,
    _summary,
    add_demo_command,
    add_model_commands,
    cmd_compile,
    cmd_demo,
    cmd_models,
    cmd_run,
    compare,
)
from tensorgraph.compiler import compile
from tensorgraph.errors import TensorGraphError

# The names this module defined before its subcommands moved out, re-exported: tests,
# cli_train.py and cli_seq2seq.py import them from here.
__all__ = [
    "BACKENDS",
    "GENERATE_MODELS",
    "HF_LLAMA",
    "HF_SMALL",
    "PREFILL_BUCKETS",
    "TOLERANCES",
    "Comparison",
    "UsageError",
    "_GenerationModel",
    "_HelpFormatter",
    "_Parser",
    "_StderrProgress",
    "_buckets",
    "_build",
    "_capacity_bytes",
    "_check_rounding",
    "_compile",
    "_config",
    "_converted",
    "_cut_note",
    "_generate_model",
    "_group_size",
    "_hf_config",
    "_hf_model",
    "_output_dir",
    "_output_file",
    "_parse_value",
    "_passes",
    "_plan_csv_capacity",
    "_positive_int",
    "_power_of_two",
    "_precision",
    "_precision_name",
    "_precision_options",
    "_progress",
    "_prompt_cache",
    "_seconds",
    "_seed",
    "_summary",
    "_typed_inputs",
    "_work_units",
    "_write_plan",
    "_zoo_llama",
    "cmd_compile",
    "cmd_demo",
    "cmd_generate",
    "cmd_models",
    "cmd_plan_csv",
    "cmd_run",
    "compare",
    "compile",
    "main",
    "parser",
    "print_tokens",
]


def parser() -> argparse.ArgumentParser:
    """The argument parser (subcommands carry their handler as `run`)."""
    from tensorgraph import __version__

    top = _Parser(prog="tensorgraph", description="A memory-planning tensor-graph compiler.")
    top.add_argument(
        "--version",
        action="version",
        version=f"tensorgraph {__version__}",
        help="print the version and exit",
    )
    commands = top.add_subparsers(
        dest="command", required=True, parser_class=_Parser, metavar="COMMAND"
    )
    add_model_commands(commands)
    add_plan_csv_command(commands)
    add_generate_command(commands)
    add_demo_command(commands)

    from tensorgraph.cli_train import add_train_command

    add_train_command(commands)
    return top


def _normalise(argv: list[str]) -> list[str]:
    """`--no-cse`, `--no_cse`, `--no-view-alias` become `--no cse` / `--no view-alias`."""
    result = []
    for arg in argv:
        if arg.startswith(("--no-", "--no_")):
            result += ["--no", arg[len("--no-") :]]
        else:
            result.append(arg)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command in `argv` (default: sys.argv[1:]); returns the exit code."""
    argv = _normalise(list(sys.argv[1:] if argv is None else argv))
    try:
        args = parser().parse_args(argv)
        return args.run(args)
    except SystemExit as done:  # --help and --version
        return done.code if isinstance(done.code, int) else 0
    except UsageError as err:
        print(f"tensorgraph: error: {err}", file=sys.stderr)
        return 2
    except TensorGraphError as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        print(f"tensorgraph: {type(err).__name__}: {first}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `tensorgraph models | head`: stop quietly, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as err:
        where = f": {err.filename}" if err.filename else ""
        print(f"tensorgraph: error: {err.strerror or err}{where}", file=sys.stderr)
        return 2
    except MemoryError as err:  # sizes are checked, but no check knows this machine's memory
        detail = str(err).splitlines()[0] if str(err) else "out of memory"
        print(f"tensorgraph: error: {detail} (is the --config too large?)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tensorgraph: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
