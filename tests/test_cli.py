"""The `tensorgraph` command through its real entry points (`python -m tensorgraph.cli`,
and the installed console script when it is on PATH), in subprocesses: output, exit
codes, and one-line errors without a traceback."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tensorgraph as tg
from tensorgraph import cli
from tensorgraph.models import build_model
from tests.planner.test_timeline import png_size

REPO = Path(__file__).resolve().parents[1]
# MiniMalloc's own example instance (id,lower,upper,size), kept in the repository
EXAMPLE_CSV = REPO / "tests" / "data" / "minimalloc_input.12.csv"
ZOO_NAMES = ("mlp", "llama", "llama_decode", "gpt2", "resnet18", "mobilenet_v2")


def tensorgraph(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tensorgraph.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd or REPO,
    )


def summary_passes(stdout: str) -> list[str]:
    """The pass names in the rows of the compile output's pass table (the indented lines
    after `passes:` and its column header)."""
    lines = stdout.splitlines()
    names = []
    for line in lines[lines.index("passes:") + 2 :]:
        if not line.startswith("  "):
            break
        names.append(line.split()[0])
    return names


def test_models_lists_the_zoo_with_parameter_counts() -> None:
    result = tensorgraph("models")
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines()[1:]}
    for name in ZOO_NAMES:
        assert name in rows
        assert int(rows[name][1].replace(",", "")) > 0, "a parameter count"
    assert "--config" in result.stdout, "each model shows its config fields"


def test_installed_console_script_runs() -> None:
    # `pip install -e .` (the README's test command) puts the script beside the interpreter
    script = shutil.which("tensorgraph", path=str(Path(sys.executable).parent))
    assert script is not None, "the tensorgraph console script is not installed"
    result = subprocess.run([script, "models"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout == tensorgraph("models").stdout
    bad = subprocess.run([script, "compile", "bert"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "unknown model 'bert'" in bad.stderr


def test_compile_prints_the_summary_and_writes_plot_and_json(tmp_path) -> None:
    plot, plan = tmp_path / "plan.png", tmp_path / "plan.json"
    result = tensorgraph(
        "compile",
        "mlp",
        "--config",
        "batch=8",
        "--report",
        "--plot",
        str(plot),
        "--json",
        str(plan),
        "--no-cse",
    )
    assert result.returncode == 0, result.stderr
    for word in (
        "buffers",
        "arena",
        "lower bound",
        "ratio",
        "naive",
        "greedy_size",
        "constant segment",
        "planning time",
        "live at the peak step",  # from --report
    ):
        assert word in result.stdout
    assert summary_passes(result.stdout) == [
        "dce", "fold", "transposed_matmul", "view_alias", "copy_elim", "reinplace"
    ]  # fmt: skip
    assert png_size(plot) == (1200, 600)
    document = json.loads(plan.read_text())
    arena_line = next(line for line in result.stdout.splitlines() if "  arena " in line)
    assert f"{document['arena_size']:,}" in arena_line
    assert "batch" not in result.stderr


def unseparated_numbers(text: str) -> list[str]:
    """Runs of four or more digits written without thousands separators, leaving out
    what is not a count: node ids (`%1234`), shapes (`(1, 4096)`) and lifetimes in
    schedule steps (`[1200, 1300)`)."""
    counts = re.sub(r"%\d+|\((\d+, )*\d*,?\)|\[\d+, \d+\)", "", text)
    return re.findall(r"(?<![\d,.])\d{4,}", counts)


@pytest.mark.parametrize("flags", [(), ("--report",)])
@pytest.mark.parametrize("model", ["llama", "mobilenet_v2"])
def test_compile_prints_each_line_once_and_every_count_one_way(model, flags) -> None:
    # Before: the summary printed the schedule stats twice and, with --report, every
    # pass and the schedule again; counts read 483328 there and 483,328 in the report.
    result = tensorgraph("compile", model, *flags)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    repeated = sorted({line for line in lines if lines.count(line) > 1})
    assert repeated == [], repeated
    assert sum(line.startswith("schedule:") for line in lines) == 1
    assert summary_passes(result.stdout) == list(tg.DEFAULT_PASSES)
    assert unseparated_numbers(result.stdout) == []
    arena = tg.compile(build_model(model).graph).plan.arena_size
    assert f"  arena            {arena:>12,} B" in result.stdout  # the summary line


def test_unseparated_numbers_finds_counts_only() -> None:
    text = "lower_bound 483328, arena 483,328 B; %1234 (1, 4096) [1200, 1300) 0.1562 12.5 ms"
    assert unseparated_numbers(text) == ["483328"]


@pytest.mark.parametrize(
    ("flags", "off"),
    [
        (["--no-view-alias"], "view_alias"),
        (["--no-view_alias"], "view_alias"),
        (["--no_view_alias"], "view_alias"),
        (["--no", "view-alias"], "view_alias"),
        (["--no-dce", "--no-reinplace"], "dce reinplace"),
    ],
)
def test_no_pass_flags_accept_both_spellings(flags, off) -> None:
    result = tensorgraph("compile", "mlp", "--config", "batch=2", *flags)
    assert result.returncode == 0, result.stderr
    expected = [p for p in tg.DEFAULT_PASSES if p not in off.split()]
    assert summary_passes(result.stdout) == expected


def test_run_checks_against_the_reference() -> None:
    for backend in ("numpy", "arena", "mlx"):
        result = tensorgraph("run", "mlp", "--backend", backend, "--config", "batch=4")
        assert result.returncode == 0, result.stderr
        assert "OK" in result.stdout and "max abs error" in result.stdout
        assert "ms per run" in result.stdout


def test_run_in_half_precision_uses_its_tolerance() -> None:
    result = tensorgraph(
        "run", "llama", "--config", "seq=16", "dim=64", "hidden=96", "dtype=float16"
    )
    assert result.returncode == 0, result.stderr
    assert "OK" in result.stdout


def test_run_exits_one_when_the_check_fails(monkeypatch, capsys) -> None:
    import tensorgraph.runtime.reference as reference

    exact = reference.run_reference
    monkeypatch.setattr(
        reference, "run_reference", lambda *a, **k: [o + 1.0 for o in exact(*a, **k)]
    )
    assert cli.main(["run", "mlp", "--backend", "arena", "--config", "batch=2"]) == 1
    assert "MISMATCH" in capsys.readouterr().out


def test_compare_tolerances_depend_on_dtype() -> None:
    want = np.linspace(-1, 1, 64, dtype=np.float32)
    assert cli.compare([want + 1e-6], [want]).ok
    assert not cli.compare([want + 1e-3], [want]).ok
    half = want.astype(np.float16)
    assert cli.compare([half + np.float16(4e-3)], [half]).ok, "float16 keeps ~3 digits"
    assert not cli.compare([half + np.float16(0.1)], [half]).ok
    ints = np.arange(5, dtype=np.int32)
    assert cli.compare([ints], [ints]).ok
    assert not cli.compare([ints + 1], [ints]).ok, "integers must match exactly"
    assert not cli.compare([want.astype(np.float64)], [want]).ok, "dtype differs"
    assert not cli.compare([np.full(3, np.nan, np.float32)], [np.zeros(3, np.float32)]).ok
    assert not cli.compare([want], [want, want]).ok, "output count differs"


def test_plan_csv_reaches_the_example_capacity() -> None:
    result = tensorgraph("plan-csv", str(EXAMPLE_CSV))
    assert result.returncode == 0, result.stderr
    # The five buffers of input.12.csv have a peak of 12 live bytes at one step, so no
    # placement beats 12; an arena of 12 is optimal and equals the capacity in the name.
    assert "5 buffers" in result.stdout
    assert "arena 12," in result.stdout and "lower bound 12," in result.stdout
    assert "capacity 12 (from the file name): fits" in result.stdout


def test_plan_csv_without_capacity_in_the_name(tmp_path) -> None:
    path = tmp_path / "tiny.csv"
    path.write_text("id,lower,upper,size\n0,0,2,8\n1,1,3,8\n2,2,4,8\n")
    result = tensorgraph("plan-csv", str(path), "--algorithm", "greedy_size")
    assert result.returncode == 0, result.stderr
    assert "3 buffers, arena 16, lower bound 16" in result.stdout
    assert "capacity" not in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["compile", "bert"], "unknown model 'bert'"),
        (["run", "bert"], "unknown model 'bert'"),
        (["compile", "mlp", "--algorithm", "magic"], "invalid choice"),
        (["compile", "mlp", "--config", "depth=3"], "unknown config field(s) ['depth']"),
        (["compile", "mlp", "--config", "batch"], "expects key=value"),
        (["compile", "llama", "--config", "heads=3"], "dim 256 is not divisible by heads 3"),
        (["compile", "mlp", "--config", "batch=-2"], "MLPConfig.batch must be a positive"),
        (["compile", "mlp", "--no-fusion"], "unknown pass(es) ['fusion']"),
        (["compile", "mlp", "--alignment", "0"], "--alignment: expects a power of two"),
        (["compile", "mlp", "--alignment", "3"], "--alignment: expects a power of two"),
        (["compile", "llama", "--config", "heads=0"], "LlamaConfig.heads must be a positive"),
        (["compile", "mlp", "--json", "/nonexistent/dir/plan.json"], "/nonexistent/dir"),
        (["compile", "mlp", "--json", str(REPO)], "is a directory, not a file"),
        (["compile", "mlp", "--plot", "/nonexistent/dir/t.png"], "no such directory"),
        (["run", "mlp", "--seed", "-5000"], "--seed: expects a non-negative int"),
        (["run", "mlp", "--backend", "cuda"], "invalid choice"),
        (["plan-csv", "/nonexistent.csv"], "no such file"),
        (["plan-csv", str(REPO / "pyproject.toml")], "missing column"),
        (["plan-csv", str(EXAMPLE_CSV), "--budget", "-1"], "--budget: expects a positive"),
        (["frobnicate"], "invalid choice"),
        ([], "required"),
    ],
)
def test_bad_usage_is_one_line_and_exit_two(args, message) -> None:
    result = tensorgraph(*args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_help_and_version_exit_zero() -> None:
    assert tensorgraph("--help").returncode == 0
    version = tensorgraph("--version")
    assert version.returncode == 0 and version.stdout.startswith("tensorgraph ")


def test_demo_runs_end_to_end(tmp_path) -> None:
    result = tensorgraph("demo", "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    starts = [
        next(i for i, line in enumerate(lines) if line.startswith(f"[{k}/4]")) for k in (1, 2, 3, 4)
    ]
    assert starts == sorted(starts), "progress lines in order"
    assert "OK" in result.stdout and "live at the peak step" in result.stdout
    plot = tmp_path / "out" / "llama_memory_timeline.png"
    assert png_size(plot) == (1200, 600)
    assert str(plot.resolve()) in result.stdout


def test_demo_writes_into_the_current_directory_by_default(tmp_path) -> None:
    result = tensorgraph("demo", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert png_size(tmp_path / "llama_memory_timeline.png") == (1200, 600)


def test_demo_without_matplotlib_says_how_to_install_it(tmp_path) -> None:
    block = "import sys; sys.modules['matplotlib'] = None; from tensorgraph.cli import main; "
    result = subprocess.run(
        [sys.executable, "-c", block + f"sys.exit(main(['demo', '--out', {str(tmp_path)!r}]))"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    assert "pip install 'tensorgraph[plot]'" in result.stdout
    assert "[4/4]" in result.stdout and "OK" in result.stdout
    assert not list(tmp_path.iterdir()), "no plot written"


# ---------------------------------------------------------------- bad values, in process


def assert_one_line_usage_error(code: int, err: str, message: str) -> None:
    assert code == 2, err
    assert err.startswith("tensorgraph: ") and message in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err


# A few bad configs per zoo model: sizes of zero, negative, fractional or bool, bad
# dtypes and floats, and the cross-field rules (heads divide dim into even head sizes,
# a decode position inside the cache, positions enough for the sequence).
BAD_CONFIGS = [
    ("mlp", ["batch=0"], "MLPConfig.batch must be a positive int but got 0"),
    ("mlp", ["layers=1.5"], "MLPConfig.layers must be a positive int but got 1.5"),
    ("mlp", ["dtype=float64"], "MLPConfig.dtype must be one of"),
    ("llama", ["heads=0"], "LlamaConfig.heads must be a positive int but got 0"),
    ("llama", ["dim=12", "heads=4"], "head size dim / heads = 3 is odd"),
    ("llama", ["eps=-1"], "LlamaConfig.eps must be a positive number"),
    ("llama_decode", ["heads=0"], "LlamaDecodeConfig.heads must be a positive int"),
    ("llama_decode", ["pos=128"], "pos 128 must lie in [0, 128)"),
    ("llama_decode", ["max_seq=0"], "LlamaDecodeConfig.max_seq must be a positive int"),
    ("gpt2", ["heads=0"], "GPT2Config.heads must be a positive int but got 0"),
    ("gpt2", ["heads=3"], "dim 256 is not divisible by 3"),
    ("gpt2", ["seq=200"], "seq 200 exceeds max_positions 128"),
    ("resnet18", ["width=0"], "ResNetConfig.width must be a positive int but got 0"),
    ("resnet18", ["image=-1"], "ResNetConfig.image must be a positive int but got -1"),
    ("resnet18", ["classes=true"], "ResNetConfig.classes must be a positive int but got True"),
    ("mobilenet_v2", ["width=0"], "MobileNetConfig.width must be a positive number"),
    ("mobilenet_v2", ["width=nan"], "MobileNetConfig.width must be a positive number"),
    ("mobilenet_v2", ["batch=-3"], "MobileNetConfig.batch must be a positive int"),
]


def test_bad_configs_cover_every_zoo_model() -> None:
    from tensorgraph.models import ZOO

    assert {name for name, _, _ in BAD_CONFIGS} == set(ZOO) == set(ZOO_NAMES)


@pytest.mark.parametrize(("model", "pairs", "message"), BAD_CONFIGS)
def test_bad_config_is_one_line_for_compile_and_run(model, pairs, message, capsys) -> None:
    for command in ("compile", "run"):
        code = cli.main([command, model, "--config", *pairs])
        out, err = capsys.readouterr()
        assert_one_line_usage_error(code, err, message)
        assert out == "", "nothing is compiled"


def test_a_config_too_large_for_memory_is_one_line(capsys) -> None:
    # 10**12 vocabulary rows of 256 float64 weights are 2 PiB: no machine allocates that.
    code = cli.main(["compile", "gpt2", "--config", f"vocab={10**12}"])
    assert_one_line_usage_error(code, capsys.readouterr().err, "--config too large")


def test_output_paths_are_checked_before_compiling(tmp_path, capsys) -> None:
    folder = tmp_path / "plans"
    folder.mkdir()
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    cases = [
        (["--json", str(tmp_path / "missing" / "plan.json")], "no such directory"),
        (["--json", str(folder)], "is a directory, not a file"),
        (["--json", str(a_file / "plan.json")], "is not a directory"),
        (["--json", ""], "expects a file name"),
        (["--plot", str(tmp_path / "missing" / "t.png")], "no such directory"),
        (["--plot", str(folder)], "is a directory, not a file"),
    ]
    for flags, message in cases:
        code = cli.main(["compile", "mlp", "--config", "batch=2", *flags])
        out, err = capsys.readouterr()
        assert_one_line_usage_error(code, err, message)
        assert out == "", "refused before any work"
    assert not (tmp_path / "missing").exists(), "no folder is created for --plot or --json"
    assert [p.name for p in folder.iterdir()] == []


def test_demo_out_must_not_be_a_file(tmp_path, capsys) -> None:
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    for out_dir in (a_file, a_file / "below"):
        code = cli.main(["demo", "--out", str(out_dir)])
        out, err = capsys.readouterr()
        assert_one_line_usage_error(code, err, f"{str(a_file)!r} is a file, not a directory")
        assert out == ""


@pytest.mark.parametrize("text", ["-1", "-5000", "1.5", "seven", ""])
def test_seed_is_a_non_negative_int(text, capsys) -> None:
    code = cli.main(["run", "mlp", "--backend", "numpy", "--config", "batch=2", "--seed", text])
    assert_one_line_usage_error(code, capsys.readouterr().err, "--seed: expects a non-negative")


def test_large_seeds_run(capsys) -> None:
    seed = str(2**70)  # NumPy's generators take any int >= 0
    assert (
        cli.main(["run", "mlp", "--backend", "numpy", "--config", "batch=2", "--seed", seed]) == 0
    )
    assert "OK" in capsys.readouterr().out


@pytest.mark.parametrize("alignment", [1, 2, 128, 4096])
def test_power_of_two_alignments_give_aligned_plans(alignment, tmp_path, capsys) -> None:
    plan = tmp_path / "plan.json"
    flags = ["--alignment", str(alignment), "--json", str(plan)]
    assert cli.main(["compile", "mlp", "--config", "batch=2", *flags]) == 0
    offsets = json.loads(plan.read_text())["offsets"]
    assert offsets and all(int(v) % alignment == 0 for v in offsets.values())


@pytest.mark.parametrize("text", ["0", "3", "6", "96", "-64", "x"])
def test_alignment_that_is_not_a_power_of_two_is_refused(text, capsys) -> None:
    code = cli.main(["compile", "mlp", "--alignment", text])
    assert_one_line_usage_error(code, capsys.readouterr().err, "expects a power of two")


# ---------------------------------------------------------------- help and version


def help_entries(text: str) -> dict[str, str]:
    """Option -> its description, from argparse's `options:` section: an entry starts
    with two spaces and a dash; its description follows the invocation after two or
    more spaces, or on the following, more indented lines."""
    entries: dict[str, str] = {}
    lines = text.split("options:", 1)[1].splitlines()
    current = None
    for line in lines:
        if line.startswith("  -"):
            invocation, _, description = line.strip().partition("  ")
            current = [t.rstrip(",") for t in invocation.split() if t.startswith("-")][-1]
            entries[current] = description.strip()
        elif line.startswith("   ") and current is not None:
            entries[current] = (entries[current] + " " + line.strip()).strip()
        elif line.strip():
            current = None
    return entries


def subcommand_parsers() -> dict[str, object]:
    top = cli.parser()
    (commands,) = [a for a in top._actions if a.dest == "command"]
    return dict(commands.choices)


# plan-csv's options are being rewritten with their own help texts elsewhere; every
# other sub-command is checked here.
HELP_CHECKED = ("models", "compile", "run", "generate", "demo", "train")


def test_help_checked_covers_every_other_subcommand() -> None:
    assert set(subcommand_parsers()) == {*HELP_CHECKED, "plan-csv"}


@pytest.mark.parametrize("command", HELP_CHECKED)
def test_help_describes_every_option_with_its_default(command, capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    assert cli.main([command, "--help"]) == 0
    entries = help_entries(capsys.readouterr().out)
    declared = {
        action.option_strings[-1]
        for action in subcommand_parsers()[command]._actions
        if action.option_strings
    }
    assert set(entries) == declared, "the help text lists every option"
    for option, description in entries.items():
        assert description, f"{command} {option} has no description"
        if option != "--help":
            assert "default" in description, f"{command} {option}: {description!r}"


def test_top_level_help_lists_every_command_and_version(capsys) -> None:
    assert cli.main(["--help"]) == 0
    text = capsys.readouterr().out
    entries = help_entries(text)
    assert set(entries) == {"--help", "--version"} and all(entries.values())
    for command in subcommand_parsers():
        assert f"    {command} " in text, command


def test_version_prints_the_package_version() -> None:
    from tensorgraph import __version__

    result = tensorgraph("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"tensorgraph {__version__}\n"


def test_compile_quantized_prints_the_footprint_and_what_stayed_float() -> None:
    result = tensorgraph("compile", "llama", "--config", "hidden=688", "--quantize", "4")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:2] == [
        "kept float: l0.w_down (reduction axis 688 is not a multiple of the group size 64)",
        "kept float: l1.w_down (reduction axis 688 is not a multiple of the group size 64)",
    ]
    assert any(line.strip().startswith("4-bit affine, group 64") for line in lines)
    assert any(line.strip().startswith("float32 ") for line in lines)  # w_down, norms
    ran = tensorgraph(
        "run", "llama", "--dtype", "bfloat16", "--quantize", "8", "--backend", "arena"
    )
    assert ran.returncode == 0, ran.stderr
    assert "max abs error 0, max rel error 0: OK" in ran.stdout  # arena = reference
