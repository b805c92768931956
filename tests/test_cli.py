"""The `tensorgraph` command through its real entry point, in a subprocess."""

import struct
import subprocess
import sys
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared" / "bench" / "minimalloc"


def tensorgraph(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tensorgraph.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG file"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_models_lists_the_zoo() -> None:
    result = tensorgraph("models")
    assert result.returncode == 0
    for name in ("mlp", "llama", "llama_decode", "gpt2", "resnet18", "mobilenet_v2"):
        assert name in result.stdout


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
        "arena",
        "lower bound",
        "naive",
        "greedy_size",
        "constant segment",
        "planning time",
        "live at the peak step",
    ):
        assert word in result.stdout
    pass_lines = [
        line.split()[0]
        for line in result.stdout.splitlines()
        if line.startswith("  ") and not line.startswith("   ") and "bytes_saved" in line
    ]  # the summary's pass lines (the --report copy is indented deeper)
    assert pass_lines == ["dce", "view_alias", "reinplace"], "--no-cse switches cse off"
    assert png_size(plot) == (1200, 600)
    assert plan.read_text().startswith("{")


def test_run_checks_against_the_reference() -> None:
    for backend in ("numpy", "arena", "mlx"):
        result = tensorgraph("run", "mlp", "--backend", backend, "--config", "batch=4")
        assert result.returncode == 0, result.stderr
        assert "OK" in result.stdout and "max abs error" in result.stdout


def test_plan_csv_reaches_the_example_capacity() -> None:
    path = SHARED / "examples" / "input.12.csv"
    if not path.exists():
        pytest.skip(f"shared benchmark data not found at {path}")
    result = tensorgraph("plan-csv", str(path))
    assert result.returncode == 0, result.stderr
    # The example's lower bound is 12, which is also the capacity in its name.
    assert "arena 12," in result.stdout and "fits" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["compile", "bert"], "unknown model 'bert'"),
        (["compile", "mlp", "--algorithm", "magic"], "invalid choice"),
        (["compile", "mlp", "--config", "depth=3"], "depth"),
        (["compile", "mlp", "--no-fusion"], "fusion"),
        (["plan-csv", "/nonexistent.csv"], "no such file"),
        (["frobnicate"], "invalid choice"),
        ([], "required"),
    ],
)
def test_bad_usage_is_one_line_and_exit_two(args, message) -> None:
    result = tensorgraph(*args)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_demo_runs_end_to_end(tmp_path) -> None:
    result = tensorgraph("demo", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "[4/4]" in result.stdout and "OK" in result.stdout
    plot = tmp_path / "llama_memory_timeline.png"
    assert png_size(plot) == (1200, 600)
    assert str(plot.resolve()) in result.stdout
