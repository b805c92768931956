"""`tensorgraph plan-csv` through its real entry point (`python -m tensorgraph.cli` in a
subprocess, or `cli.main` in-process where a setting of tensorgraph/cli_plan_csv.py must
change): budgets in work units, time limits, capacities, solution files, progress lines,
and one-line errors."""

import re
import subprocess
import time
from pathlib import Path

import pytest

from tensorgraph import cli, cli_plan_csv
from tensorgraph.planner import lower_bound, read_minimalloc_csv, verify_assignment
from tensorgraph.planner.buffers import Assignment, write_minimalloc_csv
from tensorgraph.planner.synthetic import random_buffers
from tests.test_cli import tensorgraph

# Three 8-byte buffers, [0, 2), [1, 3), [2, 4): neighbours overlap, 0 and 2 do not.
# The busiest steps hold two buffers, so the lower bound is 16 bytes.
TINY = "id,lower,upper,size\n0,0,2,8\n1,1,3,8\n2,2,4,8\n"


def fails_in_one_line(result: subprocess.CompletedProcess, message: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.fixture
def tiny(tmp_path) -> Path:
    path = tmp_path / "tiny.csv"
    path.write_text(TINY)
    return path


@pytest.fixture
def hard(tmp_path) -> Path:
    """250 dense random buffers where greedy stays above the bound (so best searches)."""
    path = tmp_path / "hard.csv"
    buffers = random_buffers(250, 1)
    write_minimalloc_csv(path, buffers, Assignment({b.id: 0 for b in buffers}, 0))
    return path


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--budget", "-1"], "--budget: expects a positive int or 0 (work units) but got '-1'"),
        (["--budget", "lots"], "--budget: expects a positive int or 0 (work units) but got 'lots'"),
        (["--budget", "1.5"], "--budget: expects a positive int or 0 (work units) but got '1.5'"),
        (["--alignment", "3"], "--alignment: expects a power of two (bytes) but got '3'"),
        (["--alignment", "0"], "--alignment: expects a power of two (bytes) but got '0'"),
        (["--time-limit", "-2"], "--time-limit: expects a positive number of seconds"),
        (["--capacity", "-5"], "--capacity: expects a number of bytes in [0, 2**63) but got '-5'"),
    ],
)
def test_bad_options_are_one_line_and_exit_two(tiny, args, message) -> None:
    fails_in_one_line(tensorgraph("plan-csv", str(tiny), *args), message)


def test_an_unwritable_out_file_is_one_line_and_exit_two(tiny) -> None:
    result = tensorgraph("plan-csv", str(tiny), "--out", "/nonexistent/dir/plan.csv")
    fails_in_one_line(result, "/nonexistent/dir/plan.csv")


def test_a_size_above_int64_is_one_line_and_exit_two(tmp_path) -> None:
    path = tmp_path / "huge.csv"
    path.write_text("id,lower,upper,size\n0,0,1,8\n1,0,1,9223372036854775808\n")
    result = tensorgraph("plan-csv", str(path))
    fails_in_one_line(result, "PlanError: ")
    assert "huge.csv:3: buffer 1: size must be >= 0 and below 2**63" in result.stderr


def test_bytes_that_are_not_utf8_are_one_line_and_exit_two(tmp_path) -> None:
    path = tmp_path / "binary.csv"
    path.write_bytes(b"id,lower,upper,size\n0,0,1,\xff\xfe\n")
    result = tensorgraph("plan-csv", str(path))
    fails_in_one_line(result, "binary.csv:2: not UTF-8 text (byte 0xff at byte offset 26)")


def test_out_writes_minimallocs_solution_format(tiny, tmp_path) -> None:
    out = tmp_path / "plan.csv"
    result = tensorgraph("plan-csv", str(tiny), "--algorithm", "greedy_size", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "3 buffers, arena 16, lower bound 16" in result.stdout
    assert f"offsets written to {out}" in result.stdout
    # greedy_size: equal sizes and lengths, so by start: 0 at 0, 1 meets 0 and goes to 8,
    # 2 meets only 1 (0 has ended at step 2) and goes back to 0.
    assert out.read_text() == ("id,lower,upper,size,offset\n0,0,2,8,0\n1,1,3,8,8\n2,2,4,8,0\n")
    assert read_minimalloc_csv(out) == read_minimalloc_csv(tiny)


def test_capacity_that_fits_prints_the_offsets(tiny) -> None:
    result = tensorgraph("plan-csv", str(tiny), "--capacity", "16")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("tiny.csv: 3 buffers, lower bound 16, capacity 16: fits, arena 16")
    assert lines[0].endswith("(verified)")
    assert lines[1] == "id,lower,upper,size,offset"
    offsets = {int(row.split(",")[0]): int(row.split(",")[4]) for row in lines[2:]}
    # Neighbours overlap in time, so 0 and 1, and 1 and 2, must take different halves.
    assert offsets[0] != offsets[1] and offsets[1] != offsets[2]
    assert set(offsets.values()) <= {0, 8}


def test_capacity_below_the_bound_is_proven_not_to_fit(tiny, tmp_path) -> None:
    out = tmp_path / "never.csv"
    result = tensorgraph("plan-csv", str(tiny), "--capacity", "15", "--out", str(out))
    assert result.returncode == 1, result.stderr
    assert "capacity 15: does not fit (proven)" in result.stdout
    assert not out.exists()


def test_capacity_with_no_budget_is_undecided(tiny) -> None:
    result = tensorgraph("plan-csv", str(tiny), "--capacity", "16", "--budget", "0")
    assert result.returncode == 1, result.stderr
    assert "capacity 16: undecided" in result.stdout and "(budget spent)" in result.stdout


def test_capacity_search_writes_a_verified_plan(hard, tmp_path) -> None:
    out = tmp_path / "fits.csv"
    buffers = read_minimalloc_csv(hard)
    # All sizes stacked with no reuse fit in their sum, so the decision is "fits".
    capacity = sum(b.size for b in buffers)
    result = tensorgraph("plan-csv", str(hard), "--capacity", str(capacity), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert f"capacity {capacity:,}: fits" in result.stdout
    rows = [line.split(",") for line in out.read_text().splitlines()[1:]]
    offsets = {int(row[0]): int(row[4]) for row in rows}
    top = max(offsets[b.id] + b.size for b in buffers)
    assert top <= capacity
    verify_assignment(buffers, Assignment(offsets, top))


def test_same_budget_same_file(hard, tmp_path) -> None:
    outs = [tmp_path / f"run{k}.csv" for k in range(2)]
    spent = []
    for out in outs:
        result = tensorgraph("plan-csv", str(hard), "--budget", "30000", "--out", str(out))
        assert result.returncode == 0, result.stderr
        spent.append(int(result.stdout.split("work ")[1].split(" units")[0].replace(",", "")))
    assert spent[0] == spent[1] <= 30_000
    assert outs[0].read_bytes() == outs[1].read_bytes()


def test_a_time_limit_that_stops_the_search_says_so(hard) -> None:
    result = tensorgraph("plan-csv", str(hard), "--time-limit", "1e-9", "--budget", "10000000")
    assert result.returncode == 0, result.stderr
    assert "cut short by --time-limit (verified)" in result.stdout


def test_progress_lines_go_to_stderr(hard, monkeypatch, capsys) -> None:
    monkeypatch.setattr(cli_plan_csv, "PROGRESS_AFTER", 0.0)  # as if the search were long
    assert cli.main(["plan-csv", str(hard), "--budget", "50000"]) == 0
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert lines[0].startswith("tensorgraph: ") and "best: 250 buffers, bound " in lines[0]
    assert any("order by_size: arena" in line for line in lines)
    assert any("exact search" in line for line in lines)
    assert all(line.endswith("of 50,000)") for line in lines)
    assert "hard.csv: 250 buffers" in captured.out and "tensorgraph:" not in captured.out


def test_runs_shorter_than_the_threshold_print_no_progress(hard, monkeypatch, capsys) -> None:
    monkeypatch.setattr(cli_plan_csv, "PROGRESS_AFTER", 1e9)  # no run lasts that long
    assert cli.main(["plan-csv", str(hard), "--budget", "50000"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and "hard.csv: 250 buffers" in captured.out


def test_capacity_search_reports_its_fresh_starts(hard, monkeypatch, capsys) -> None:
    monkeypatch.setattr(cli_plan_csv, "PROGRESS_AFTER", 0.0)
    buffers = read_minimalloc_csv(hard)
    bound = max(lower_bound(buffers), 1)
    code = cli.main(["plan-csv", str(hard), "--capacity", str(bound), "--budget", "50000"])
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert f"exact search at capacity {bound:,}" in lines[0]
    # 250 buffers: the first round allows twice as many nodes, 500, with TAW first.
    assert "exact search: TAW preorder, up to 500 nodes (work " in lines[1]
    assert code == (0 if "fits" in captured.out else 1)


def test_plan_csv_prints_an_optimal_certificate_at_the_bound(tiny) -> None:
    # TINY's busiest steps hold two 8-byte buffers (bound 16) and 0 and 2 can share
    # offset 0 with 1 at 8: a packing at the bound, so `best` proves it optimal.
    result = tensorgraph("plan-csv", str(tiny))
    assert result.returncode == 0, result.stderr
    assert "certificate: optimal (arena 16 B = lower bound)" in result.stdout


def test_plan_csv_prints_the_range_of_the_optimum_above_the_bound(hard) -> None:
    # `hard`: greedy stays above the bound and 20,000 units are far too few for the exact
    # search to settle the bound, so the certificate is the range [bound, arena].
    buffers = read_minimalloc_csv(hard)
    bound = lower_bound(buffers)
    result = tensorgraph("plan-csv", str(hard), "--budget", "20000")
    assert result.returncode == 0, result.stderr
    line = next(x for x in result.stdout.splitlines() if x.startswith("certificate: "))
    arena = re.search(r"arena ([\d,]+), lower bound", result.stdout).group(1)
    assert int(arena.replace(",", "")) > bound
    assert line.startswith(f"certificate: optimum in [{bound:,}, {arena}] B"), line


def test_the_printed_bound_never_exceeds_the_printed_arena_when_aligned(tmp_path) -> None:
    # One 10-byte buffer at alignment 64 sits at offset 0: arena 10, and 10 is also the
    # bound (it printed "lower bound 64, ratio 0.1562" beside "arena 10 B = lower bound").
    path = tmp_path / "small.csv"
    path.write_text("id,lower,upper,size\n0,0,2,10\n")
    result = tensorgraph("plan-csv", str(path), "--alignment", "64")
    assert result.returncode == 0, result.stderr
    assert "1 buffers, arena 10, lower bound 10, ratio 1.0000" in result.stdout
    assert "certificate: optimal (arena 10 B = lower bound)" in result.stdout


def test_an_aligned_overlap_bounds_the_top_not_the_aligned_sum(tmp_path) -> None:
    # Two live 10-byte buffers at alignment 64: offsets 0 and 64, top 74. The bound on
    # the top is max(10 + 10, 64 + 64 - 63) = 65, below the arena; the capacity bounds
    # aligned extents, 128 of them, so 100 does not fit.
    path = tmp_path / "pair.csv"
    path.write_text("id,lower,upper,size\n0,0,2,10\n1,1,3,10\n")
    result = tensorgraph("plan-csv", str(path), "--alignment", "64")
    arena, bound = re.search(r"arena (\d+), lower bound (\d+),", result.stdout).groups()
    assert (int(arena), int(bound)) == (74, 65)
    capacity = tensorgraph("plan-csv", str(path), "--alignment", "64", "--capacity", "100")
    assert "lower bound 65 (128 for aligned extents), capacity 100: does not fit" in (
        capacity.stdout
    )


def test_a_directory_is_named_as_one(tmp_path) -> None:
    result = tensorgraph("plan-csv", str(tmp_path))
    fails_in_one_line(result, f"{tmp_path} is a directory, not a MiniMalloc CSV file")


@pytest.mark.parametrize("where", ["missing", "folder"])
def test_a_bad_out_path_is_refused_before_planning(hard, tmp_path, where) -> None:
    out = tmp_path / "nowhere" / "x.csv" if where == "missing" else tmp_path
    began = time.perf_counter()
    result = tensorgraph("plan-csv", str(hard), "--out", str(out))
    fails_in_one_line(result, "argument --out: ")
    assert "hard.csv:" not in result.stdout, "it planned before refusing the path"
    assert time.perf_counter() - began < 30
