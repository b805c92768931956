"""`tensorgraph train`: a zoo model's training step on synthetic data prints the plan's
memory, a progress line with the loss and rate per step, and a summary; the first loss
is the model's cross-entropy on the first batch (computed here with NumPy from the
reference interpreter's logits), the data are learnable and seeded, a small model's
loss falls; `--plot` writes the loss curve; bad arguments exit 2 with one line and no
traceback, before anything is compiled."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tensorgraph import cli
from tensorgraph.cli_train import BudgetShare, byte_size, memory_budget, training_task
from tensorgraph.models import build_model
from tensorgraph.runtime.reference import run_reference
from tests.test_cli import tensorgraph

MLP = ["--config", "features=8", "hidden=16", "layers=2", "classes=4"]
GPT2 = ["--config", "dim=16", "heads=2", "layers=1", "vocab=32", "seq=8", "max_positions=8"]
STEP = re.compile(r"^\[(\d+)/(\d+)\] loss (\S+)  [\d,]+ (samples|tokens)/s$")


def _losses(out: str) -> list[float]:
    found = [STEP.match(line) for line in out.splitlines()]
    return [float(m.group(3)) for m in found if m]


def _cross_entropy(logits: np.ndarray, target: np.ndarray) -> float:
    """Mean over positions of -log softmax(logits)[target], in float64."""
    z = logits.astype(np.float64).reshape(-1, logits.shape[-1])
    z = z - z.max(axis=-1, keepdims=True)
    log_probs = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return float(-np.mean(log_probs[np.arange(len(z)), target.reshape(-1)]))


@pytest.mark.parametrize(
    ("model", "flags", "config", "unit"),
    [
        ("mlp", MLP, {"features": 8, "hidden": 16, "layers": 2, "classes": 4}, "samples"),
        (
            "gpt2",
            GPT2,
            {"dim": 16, "heads": 2, "layers": 1, "vocab": 32, "seq": 8, "max_positions": 8},
            "tokens",
        ),
        (
            "llama",
            ["--config", "dim=16", "heads=2", "hidden=32", "layers=1", "vocab=32", "seq=8"],
            {"dim": 16, "heads": 2, "hidden": 32, "layers": 1, "vocab": 32, "seq": 8},
            "tokens",
        ),
        (
            "resnet18",
            ["--batch", "2", "--config", "image=16", "width=4", "classes=5"],
            {"batch": 2, "image": 16, "width": 4, "classes": 5},
            "samples",
        ),
    ],
)
def test_train_prints_memory_progress_and_the_first_loss(model, flags, config, unit, capsys):
    assert cli.main(["train", model, *flags, "--steps", "3", "--backend", "arena"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert re.search(r"memory: arena [\d.]+ \S+, weights \+ optimizer state [\d.]+ \S+", out)
    assert "recompute: 0 FLOPs" in out
    steps = [STEP.match(line) for line in lines if STEP.match(line)]
    assert [(m.group(1), m.group(2), m.group(4)) for m in steps] == [
        (str(i), "3", unit) for i in (1, 2, 3)
    ]
    feeds = training_task(model, config, 0).batches(0)
    graph = build_model(model, **config).graph
    logits = run_reference(graph, {k: v for k, v in feeds.items() if k != "target"})[0]
    assert _losses(out)[0] == pytest.approx(_cross_entropy(logits, feeds["target"]), abs=1e-4)
    assert lines[-1].startswith(f"loss {_losses(out)[0]:.4f} -> {_losses(out)[-1]:.4f} over 3")


def test_synthetic_data_are_seeded_and_next_token_targets_are_the_next_tokens():
    config = {"dim": 16, "heads": 2, "layers": 1, "vocab": 32, "seq": 8, "max_positions": 8}
    task = training_task("gpt2", config, 5)
    first, again, other = task.batches(0), training_task("gpt2", config, 5).batches(0), None
    other = training_task("gpt2", config, 6).batches(0)
    np.testing.assert_array_equal(first["tokens"], again["tokens"])
    assert not np.array_equal(first["tokens"], other["tokens"])
    assert not np.array_equal(first["tokens"], task.batches(1)["tokens"])  # fresh per step
    np.testing.assert_array_equal(first["target"][:, :-1], first["tokens"][:, 1:])
    assert task.per_step == 8 and task.unit == "tokens"


def test_a_small_model_learns_and_the_plot_is_written(tmp_path, capsys):
    argv = ["train", "mlp", *MLP, "--steps", "25", "--optimizer", "sgd", "--lr", "0.5"]
    argv += ["--tradeoff-points", "1"]  # the sweep is tested below
    assert cli.main([*argv, "--backend", "numpy", "--plot", str(tmp_path / "plots")]) == 0
    out = capsys.readouterr().out
    losses = _losses(out)
    assert len(losses) == 25
    assert np.mean(losses[-5:]) < 0.8 * np.mean(losses[:5])
    plot = tmp_path / "plots" / "mlp_loss.png"
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"loss curve: {plot.resolve()}" in out


def test_train_runs_on_mlx_and_as_a_command():
    result = tensorgraph("train", "mlp", *MLP, "--steps", "2", "--batch", "3")
    assert result.returncode == 0, result.stderr
    assert len(_losses(result.stdout)) == 2


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["resnet50"], "cannot train 'resnet50'; trainable zoo models: mlp, "),
        (["llama_decode"], "cannot train 'llama_decode'"),
        (["mlp", "--lr", "0"], "expects a positive learning rate but got '0'"),
        (["mlp", "--lr=-1e-3"], "expects a positive learning rate"),
        (["mlp", "--lr", "nan"], "expects a positive learning rate"),
        (["mlp", "--steps", "0"], "expects a positive int but got '0'"),
        (["mlp", "--batch", "-2"], "expects a positive int but got '-2'"),
        (["mlp", "--optimizer", "lion"], "invalid choice: 'lion'"),
        (["mlp", "--config", "hidden=0"], "hidden"),
    ],
)
def test_bad_arguments_exit_two_with_one_line(flags, message, capsys):
    assert cli.main(["train", *flags]) == 2
    captured = capsys.readouterr()
    assert message in captured.err
    assert len(captured.err.strip().splitlines()) == 1 and "Traceback" not in captured.err
    assert captured.out == ""


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("3000000", 3_000_000),
        ("40MiB", 40 << 20),
        ("1.5KiB", 1536),
        ("2KB", 2000),
        ("1GiB", 1 << 30),
    ],
)
def test_memory_budget_sizes(text, size):
    assert byte_size(text) == size


@pytest.mark.parametrize(
    ("text", "fraction"), [("50%", 0.5), ("37.5%", 0.375), ("100%", 1.0), ("0.1%", 0.001)]
)
def test_memory_budget_shares(text, fraction):
    assert memory_budget(text) == BudgetShare(fraction)


@pytest.mark.parametrize(
    "text", ["0", "-5", "abc", "1.5", "5TB", "MiB", "0KiB", "0%", "-10%", "150%", "%", "half%"]
)
def test_a_bad_memory_budget_exits_two_with_one_line(text, capsys):
    assert cli.main(["train", "mlp", *MLP, "--memory-budget", text]) == 2
    captured = capsys.readouterr()
    assert "--memory-budget" in captured.err and "Traceback" not in captured.err
    assert len(captured.err.strip().splitlines()) == 1


def test_a_budget_below_keeping_everything_recomputes_and_trains_the_same(capsys):
    """One byte below the keep-everything arena (read off a compile without a budget),
    the step recomputes some forward values: its arena fits the budget, and the losses
    are the no-budget run's bit for bit (a recomputed value is the same value)."""
    import tensorgraph as tg
    from tensorgraph.cli_train import make_optimizer

    task = training_task("mlp", {"features": 8, "hidden": 16, "layers": 2, "classes": 4}, 0)
    keep_all = tg.compile(tg.train_step(task.graph, optimizer=make_optimizer("adamw", None)))
    budget = keep_all.plan.arena_size - 1
    runs = {}
    for flags in ([], ["--memory-budget", str(budget)]):
        assert cli.main(["train", "mlp", *MLP, "--steps", "3", "--backend", "numpy", *flags]) == 0
        runs[bool(flags)] = capsys.readouterr().out
    assert _losses(runs[True]) == _losses(runs[False]) and len(_losses(runs[True])) == 3
    found = re.search(
        r"recompute: ([\d,]+) FLOPs per step .* by (\S+) .*; arena (.*) against", runs[True]
    )
    assert found and int(found.group(1).replace(",", "")) > 0 and found.group(2) != "keep-all"


def test_a_share_budgets_that_share_of_the_keep_everything_arena(capsys):
    """`--memory-budget 90%`: the budget printed is floor(0.9 * the keep-everything
    arena), that arena read off a compile without a budget here, and the step is compiled
    to that budget (recomputing: 90% is below keeping everything)."""
    import tensorgraph as tg
    from tensorgraph.cli_train import make_optimizer
    from tensorgraph.planner.timeline import byte_label

    task = training_task("mlp", {"features": 8, "hidden": 16, "layers": 2, "classes": 4}, 0)
    step = tg.train_step(task.graph, optimizer=make_optimizer("adamw", None), expand=False)
    arena = tg.compile(step).plan.arena_size
    flags = ["--steps", "1", "--backend", "numpy", "--memory-budget", "90%"]
    assert cli.main(["train", "mlp", *MLP, *flags]) == 0
    out = capsys.readouterr().out
    budget = int(0.9 * arena)
    assert f"memory budget 90.0% of the keep-everything arena ({arena:,} B): {budget:,} B" in out
    found = re.search(r"recompute: ([\d,]+) FLOPs per step .* by (\S+) ", out)
    assert found and _count(found.group(1)) > 0 and found.group(2) != "keep-all"
    assert f"keeping every value, budget {byte_label(budget)}" in out  # what was compiled


def test_a_budget_too_small_names_the_smallest_one_that_compiles(capsys):
    assert cli.main(["train", "mlp", *MLP, "--steps", "1", "--memory-budget", "100"]) == 2
    err = capsys.readouterr().err
    smallest = re.search(r"the smallest budget found feasible is (\d+) B", err)
    assert smallest and len(err.strip().splitlines()) == 1
    flags = ["--steps", "1", "--backend", "numpy", "--memory-budget", smallest.group(1)]
    assert cli.main(["train", "mlp", *MLP, *flags]) == 0


TRADEOFF = re.compile(
    r"^  budget ([\d,]+) B: arena ([\d,]+) B \([\d.]+x\), recompute ([\d,]+) FLOPs"
)


def _count(text: str) -> int:
    return int(text.replace(",", ""))


def test_plot_sweeps_budgets_and_writes_the_tradeoff_plot_beside_the_loss_curve(tmp_path, capsys):
    """`--plot` with `--tradeoff-points 2`: two budgets falling from the keep-everything
    arena (printed first, no recompute) to the lowest the sweep reaches; each
    point's arena fits its budget, recompute never falls as the budget falls and is
    positive at the lowest budget (below keep-everything's arena something must be
    recomputed); both PNGs land in the folder."""
    plots = tmp_path / "plots"
    flags = ["--steps", "1", "--backend", "numpy", "--plot", str(plots), "--tradeoff-points", "2"]
    assert cli.main(["train", "mlp", *MLP, *flags]) == 0
    out = capsys.readouterr().out
    keep = re.search(
        r"^  keep everything: arena ([\d,]+) B \(1.00x\), recompute 0 FLOPs", out, re.M
    )
    layers = re.search(
        r"^  checkpoint every layer: arena ([\d,]+) B .*recompute ([\d,]+)", out, re.M
    )
    assert keep and layers
    points = [
        (_count(m.group(1)), _count(m.group(2)), _count(m.group(3)))
        for m in map(TRADEOFF.match, out.splitlines())
        if m
    ]
    assert len(points) == 2 and "no point fits" not in out
    budgets = [b for b, _, _ in points]
    assert budgets == sorted(budgets, reverse=True) and budgets[0] < _count(keep.group(1))
    # The relu perceptron's backward reads only the layer inputs: checkpointing every
    # layer keeps everything, so the sweep goes down to recompute-all's arena.
    assert _count(layers.group(1)) == _count(keep.group(1))
    assert "down to recompute-all's" in out and budgets[-1] < _count(layers.group(1))
    assert all(arena <= budget for budget, arena, _ in points)
    recompute = [r for _, _, r in points]
    assert recompute == sorted(recompute) and recompute[-1] > 0
    for name in ("mlp_loss.png", "mlp_tradeoff.png"):
        assert (plots / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"trade-off plot: {(plots / 'mlp_tradeoff.png').resolve()}" in out


def test_without_matplotlib_the_sweep_is_printed_and_each_plot_says_why_not(
    tmp_path, capsys, monkeypatch
):
    from tensorgraph.errors import TensorGraphError
    from tensorgraph.planner import timeline

    def missing():
        raise TensorGraphError("matplotlib is needed for plots: pip install 'tensorgraph[plot]'")

    monkeypatch.setattr(timeline, "_pyplot", missing)
    flags = [
        "--steps",
        "1",
        "--backend",
        "numpy",
        "--plot",
        str(tmp_path),
        "--tradeoff-points",
        "1",
    ]
    assert cli.main(["train", "mlp", *MLP, *flags]) == 0
    out = capsys.readouterr().out
    assert out.count("no plot: matplotlib is needed for plots") == 2
    assert sum(bool(TRADEOFF.match(line)) for line in out.splitlines()) == 1
    assert not list(tmp_path.iterdir())


def test_a_bad_tradeoff_point_count_exits_two_with_one_line(capsys):
    assert cli.main(["train", "mlp", "--tradeoff-points", "0"]) == 2
    captured = capsys.readouterr()
    assert "--tradeoff-points" in captured.err and "expects a positive int" in captured.err
    assert len(captured.err.strip().splitlines()) == 1


def test_a_sweep_where_checkpointing_does_not_shrink_the_arena_says_so():
    """The printed summary names the lower end it swept to, lists the fixed points and
    reports each budget no point met with the compiler's message."""
    from tensorgraph.cli_tradeoff import Sweep, TradeoffPoint, sweep_lines

    keep = TradeoffPoint("keep everything", None, 1000, 0, "keep-all", 0.0)
    layers = TradeoffPoint("checkpoint every layer", None, 1000, 70, "checkpoint-layers", None)
    infeasible = ((500, "the smallest budget found feasible is 1000 B"),)
    sweep = Sweep(keep, layers, (), infeasible, "half of it")
    assert sweep_lines(sweep) == [
        "trade-off: 1 budgets from keep-everything's arena down to half of it",
        "  keep everything: arena 1,000 B (1.00x), recompute 0 FLOPs (keep-all, gap 0)",
        "  checkpoint every layer: arena 1,000 B (1.00x), recompute 70 FLOPs "
        "(checkpoint-layers, no bound)",
        "  budget 500 B: no point fits (the smallest budget found feasible is 1000 B)",
    ]
