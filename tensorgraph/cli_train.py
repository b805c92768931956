"""The `tensorgraph train MODEL` command: a zoo model trained on synthetic data.

A zoo model's graph gets a cross-entropy loss (`tg.nn.cross_entropy`) against a new
int32 input `target`, and `tg.train_step` makes it one program whose weights and
optimizer moments are states updated in place by every call. The data come from
`--seed` and are learnable, so a working step shows a falling loss:

- classifiers (mlp, resnet18, mobilenet_v2): each step draws fresh inputs from a
  normal distribution; a sample's class is the argmax of its flattened values times a
  fixed random "teacher" matrix (a linear rule the model can learn);
- decoders (gpt2, llama): each step draws fresh sequences that count upward by a fixed
  stride modulo the vocabulary from random first tokens; the model reads the first
  `seq` tokens and predicts each next one (next-token targets).

`--memory-budget` takes bytes (`40MiB`) or a share of the arena that keeps every value
(`50%`, read off a compile without a budget first).

Printed: the plan's memory (arena, the state region holding weights and optimizer
state, constants, I/O), the recompute overhead (0 without `--memory-budget`: every value
the backward reads is kept; with it, `tg.compile(memory_budget=)`'s choice: the FLOPs
recomputed per step and what chose them; the step is then built with
`train_step(expand=False)`, which keeps fewer values for the backward), then one progress
line per step with its loss and samples (or tokens) per second, and a summary. `--plot
DIR` writes the loss curve as `DIR/<model>_loss.png`, then sweeps `--tradeoff-points`
memory budgets over the step as `--memory-budget` builds it, prints each point (arena,
recompute FLOPs) and writes the arena-against-recompute plot as
`DIR/<model>_tradeoff.png` (tensorgraph/cli_tradeoff.py). Bad input (an unknown
or untrainable model, a non-positive learning rate, step count or batch) is one line and
exit 2, as every command's.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from attrs import frozen

from tensorgraph.cli import (
    BACKENDS,
    UsageError,
    _config,
    _output_dir,
    _positive_int,
    _progress,
    _seed,
)
from tensorgraph.errors import TensorGraphError

# zoo model -> the kind of its synthetic targets
TRAINABLE = {
    "mlp": "classes",
    "resnet18": "classes",
    "mobilenet_v2": "classes",
    "gpt2": "tokens",
    "llama": "tokens",
}
DEFAULT_LEARNING_RATES = {"sgd": 0.1, "adam": 1e-3, "adamw": 1e-3}


@frozen
class TrainingTask:
    """A zoo model with its loss: `graph` (outputs the float scalar loss; inputs the
    model's and `target`), `batches(step)` the feeds of one step (deterministic in the
    seed and the step), `per_step` the samples or tokens one step trains on, `unit`
    which of the two."""

    graph: object
    batches: Callable[[int], dict[str, np.ndarray]]
    per_step: int
    unit: str


def training_task(name: str, config: dict[str, object], seed: int) -> TrainingTask:
    """The zoo model `name` (a TRAINABLE one) built with `config` overrides, its logits
    fed to a cross-entropy against synthetic targets from `seed` (module docstring).
    UsageError names a model that cannot be trained here; GraphError a bad config."""
    import tensorgraph as tg
    from tensorgraph.ir.tensor import Tensor
    from tensorgraph.models import build_model

    if name not in TRAINABLE:
        raise UsageError(f"cannot train {name!r}; trainable zoo models: {', '.join(TRAINABLE)}")
    model = build_model(name, **config).graph
    logits = model.node(model.outputs[0])
    (data,) = model.inputs
    g = tg.Graph.from_nodes(model.name, model.nodes, [], model.param_values)
    target = g.input("target", logits.shape[:-1], tg.int32)
    g.output(tg.nn.cross_entropy(Tensor(g, logits.id), target))
    rng = np.random.default_rng(seed)
    if TRAINABLE[name] == "classes":
        features = int(np.prod(data.shape[1:]))
        teacher = rng.standard_normal((features, logits.shape[-1])).astype(np.float32)
        dtype = data.dtype.to_numpy()

        def classes(step: int) -> dict[str, np.ndarray]:
            x = np.random.default_rng([seed, step]).standard_normal(data.shape)
            labels = np.argmax(x.reshape(len(x), -1).astype(np.float32) @ teacher, axis=-1)
            return {data.name: x.astype(dtype), "target": labels.astype(np.int32)}

        return TrainingTask(g, classes, data.shape[0], "samples")
    vocab = logits.shape[-1]
    stride = int(rng.integers(1, vocab))
    batch, seq = data.shape

    def tokens(step: int) -> dict[str, np.ndarray]:
        first = np.random.default_rng([seed, step]).integers(0, vocab, (batch, 1))
        counted = (first + stride * np.arange(seq + 1)) % vocab
        return {
            data.name: counted[:, :-1].astype(np.int32),
            "target": counted[:, 1:].astype(np.int32),
        }

    return TrainingTask(g, tokens, batch * seq, "tokens")


def make_optimizer(name: str, learning_rate: float | None) -> object:
    """`tg.optim`'s SGD, Adam or AdamW (mlx.optimizers' defaults otherwise) at
    `learning_rate` (None: DEFAULT_LEARNING_RATES[name])."""
    from tensorgraph import optim

    kinds = {"sgd": optim.SGD, "adam": optim.Adam, "adamw": optim.AdamW}
    rate = DEFAULT_LEARNING_RATES[name] if learning_rate is None else learning_rate
    return kinds[name](learning_rate=rate)


def memory_line(prog: object) -> str:
    """The plan's memory: arena, state region (weights + optimizer state), constants,
    I/O (the fed inputs and the returned loss), and their total, in binary units."""
    from tensorgraph.planner.timeline import byte_label

    graph, plan = prog.graph, prog.plan
    io = sum(n.nbytes for n in graph.inputs) + sum(graph.node(i).nbytes for i in graph.returned)
    total = plan.arena_size + plan.state_size + plan.constant_size + io
    return (
        f"memory: arena {byte_label(plan.arena_size)}, weights + optimizer state "
        f"{byte_label(plan.state_size)}, constants {byte_label(plan.constant_size)}, "
        f"I/O {byte_label(io)}; total {byte_label(total)}"
    )


def recompute_line(prog: object) -> str:
    """The recompute overhead: the FLOPs of the values recomputed per step, as a share
    of the step's own FLOPs (planner/flops.py's estimate), and what chose them."""
    from tensorgraph.planner.flops import flops
    from tensorgraph.planner.timeline import byte_label

    report = prog.remat
    if report is None:
        return "recompute: 0 FLOPs (no memory budget: every value the backward reads is kept)"
    graph = prog.graph
    total = sum(flops(graph, node) for node in graph.nodes)
    share = report.recompute_flops / max(total - report.recompute_flops, 1)
    gap = "no bound" if report.gap is None else f"gap {report.gap:.3g}"
    split = f"; {report.split} weight gradients split into chunks" if report.split else ""
    return (
        f"recompute: {report.recompute_flops:,} FLOPs per step (+{share:.2%}), "
        f"{len(report.recomputed)} values recomputed by {report.method} ({gap}); arena "
        f"{byte_label(report.arena)} against {byte_label(report.keep_all_arena)} keeping "
        f"every value, budget {byte_label(report.budget)}{split}"
    )


def cmd_train(args: argparse.Namespace) -> int:
    import tensorgraph as tg

    began = time.perf_counter()
    config = _config(args.config)
    if args.batch is not None:
        config["batch"] = args.batch
    task = training_task(args.model, config, args.seed)
    optimizer = make_optimizer(args.optimizer, args.lr)
    print(f"compiling the training step of {args.model} ({args.optimizer}) ...", flush=True)
    # Under a memory budget the fused ops stay whole (train_step's `expand`): fewer
    # values kept for the backward, at a slower MLX step.
    budgeted = args.memory_budget is not None
    step = tg.train_step(task.graph, optimizer=optimizer, expand=not budgeted)
    budget = args.memory_budget
    if isinstance(budget, BudgetShare):
        # The keep-everything arena is read off a compile without a budget; the
        # budgeted compile plans it again (seconds, against minutes of its search).
        arena = tg.compile(step).plan.arena_size
        budget = max(1, int(budget.fraction * arena))
        print(
            f"  memory budget {args.memory_budget.fraction:.1%} of the keep-everything "
            f"arena ({arena:,} B): {budget:,} B",
            flush=True,
        )
    prog = tg.compile(step, memory_budget=budget)
    print(f"  {memory_line(prog)}")
    print(f"  {recompute_line(prog)}")
    state = prog.new_state(args.backend)
    losses, rates = [], []
    for step in range(args.steps):
        feeds = task.batches(step)
        start = time.perf_counter()
        loss = float(np.asarray(prog.run(feeds, backend=args.backend, state=state)[0]))
        seconds = time.perf_counter() - start
        losses.append(loss)
        rates.append(task.per_step / seconds)
        _progress(step + 1, args.steps, f"loss {loss:.4f}  {rates[-1]:,.0f} {task.unit}/s")
    steady = rates[1:] or rates  # the first call also builds the backend's program
    print(
        f"loss {losses[0]:.4f} -> {losses[-1]:.4f} over {args.steps} steps; "
        f"{np.median(steady):,.0f} {task.unit}/s (median, after the first step); "
        f"done in {time.perf_counter() - began:.1f} s"
    )
    if args.plot is not None:
        # the trade-off sweep compiles to memory budgets: the step as --memory-budget builds it
        plot_training(args, losses, tg.train_step(task.graph, optimizer=optimizer, expand=False))
    return 0 if all(np.isfinite(losses)) else 1


def plot_training(args: argparse.Namespace, losses: list[float], step: object) -> None:
    """`--plot DIR`: the loss curve, then the trade-off sweep of `step` (printed even
    without matplotlib) and its plot, both beside each other in DIR."""
    from tensorgraph.cli_tradeoff import plot_tradeoff, sweep_budgets, sweep_lines

    try:
        print(f"  loss curve: {plot_losses(losses, args.model, args.plot).resolve()}")
    except TensorGraphError as err:  # no matplotlib: say how to get it
        print(f"  no plot: {err}")
    print(f"sweeping {args.tradeoff_points} memory budgets ...", flush=True)
    sweep = sweep_budgets(
        step, args.tradeoff_points, lambda k, n, text: _progress(k, n, f"trade-off: {text}")
    )
    print("\n".join(sweep_lines(sweep)))
    try:
        print(f"  trade-off plot: {plot_tradeoff(sweep, args.model, args.plot).resolve()}")
    except TensorGraphError as err:
        print(f"  no plot: {err}")


def plot_losses(losses: list[float], model: str, folder: Path) -> Path:
    """The loss per step as `folder/<model>_loss.png` (folder created if missing);
    TensorGraphError when matplotlib is not installed."""
    from tensorgraph.planner.timeline import _pyplot

    plt = _pyplot()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{model}_loss.png"
    figure, axes = plt.subplots(figsize=(6, 4), dpi=100)
    axes.plot(range(1, len(losses) + 1), losses, marker="o")
    axes.set_xlabel("step")
    axes.set_ylabel("loss (cross-entropy)")
    axes.set_title(f"tensorgraph train {model}")
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return path


_UNITS = {"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "KB": 10**3, "MB": 10**6}


def byte_size(text: str) -> int:
    """A positive number of bytes: an int with an optional binary (KiB, MiB, GiB) or
    decimal (KB, MB) unit, fractions allowed with a unit (1.5MiB)."""
    number = text.rstrip("KMGiB")
    unit = text[len(number) :]
    try:
        value = float(number) * _UNITS[unit]
    except (KeyError, ValueError):
        value = -1
    if not 0 < value < 1 << 62 or (not unit and not number.isdigit()):
        raise argparse.ArgumentTypeError(
            f"expects a positive size in bytes, e.g. 40MiB, 512KiB or 3000000, but got {text!r}"
        )
    return int(value)


@frozen
class BudgetShare:
    """`--memory-budget` as a share of the keep-everything arena (`50%`): the budget is
    `floor(fraction * arena)` of the step compiled keeping every value."""

    fraction: float


def memory_budget(text: str) -> int | BudgetShare:
    """`--memory-budget`'s value: a byte size (`byte_size`) or a percentage in (0, 100]
    of the keep-everything arena, fractions allowed (`50%`, `37.5%`)."""
    if not text.endswith("%"):
        return byte_size(text)
    try:
        percent = float(text[:-1])
    except ValueError:
        percent = -1.0
    if not 0 < percent <= 100:
        raise argparse.ArgumentTypeError(
            f"expects a percentage of the keep-everything arena in (0, 100], e.g. 50%, "
            f"but got {text!r}"
        )
    return BudgetShare(percent / 100)


def _trainable(text: str) -> str:
    if text not in TRAINABLE:
        raise argparse.ArgumentTypeError(
            f"cannot train {text!r}; trainable zoo models: {', '.join(TRAINABLE)}"
        )
    return text


def _learning_rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):  # also refuses NaN
        raise argparse.ArgumentTypeError(f"expects a positive learning rate but got {text!r}")
    return value


def add_train_command(commands: argparse._SubParsersAction) -> None:
    """Register `train` on the `tensorgraph` parser's subcommands."""
    sub = commands.add_parser(
        "train",
        help="train a zoo model on synthetic data",
        description="Train a zoo model (its training step one planned program) on "
        "synthetic data from a seed; print the loss per step and the plan's memory.",
    )
    sub.add_argument("model", type=_trainable, help=f"one of: {', '.join(TRAINABLE)}")
    sub.add_argument("--steps", type=_positive_int, default=10, metavar="N", help="training steps")
    sub.add_argument(
        "--batch",
        type=_positive_int,
        default=None,
        metavar="B",
        help="samples per step (default: the model's config)",
    )
    sub.add_argument(
        "--optimizer",
        choices=("sgd", "adam", "adamw"),
        default="adamw",
        help="update rule (tg.optim, mlx.optimizers' formulas)",
    )
    sub.add_argument(
        "--lr",
        type=_learning_rate,
        default=None,
        metavar="X",
        help="learning rate (default: 0.1 for sgd, 1e-3 for adam and adamw)",
    )
    sub.add_argument("--seed", type=_seed, default=0, help="seed of the synthetic data")
    sub.add_argument("--backend", choices=BACKENDS, default="mlx", help="backend running it")
    sub.add_argument(
        "--config",
        nargs="+",
        action="extend",
        default=[],
        metavar="K=V",
        help="override config fields, e.g. hidden=64 layers=1 (default: the model's "
        "defaults, listed by `tensorgraph models`)",
    )
    sub.add_argument(
        "--memory-budget",
        type=memory_budget,
        default=None,
        metavar="SIZE",
        help="fit the step's arena in SIZE bytes (e.g. 40MiB, 512KiB, 3000000) or in a "
        "share of the arena that keeps every value (e.g. 50%%) at the least recompute "
        "(default: keep every value the backward reads)",
    )
    sub.add_argument(
        "--plot",
        type=_output_dir,
        default=None,
        metavar="DIR",
        help="write the loss curve to DIR/<model>_loss.png and, after a sweep of memory "
        "budgets, the arena-against-recompute trade-off to DIR/<model>_tradeoff.png "
        "(default: no plot)",
    )
    sub.add_argument(
        "--tradeoff-points",
        type=_positive_int,
        default=4,
        metavar="N",
        help="budgets in the trade-off sweep of --plot, from keep-everything's arena down "
        "to checkpoint-every-layer's (default: 4; each is one rematerialising compile)",
    )
    sub.set_defaults(run=cmd_train)
