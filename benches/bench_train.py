"""A training step on MLX: tensorgraph's `tg.train_step` program against hand-written
MLX (`nn.value_and_grad` + `optimizer.update` under `mx.compile`, mlx-examples' recipe),
for the zoo ResNet-18 and a small GPT-2 (issue 27's targets).

Same weights (the zoo's), same data (a fixed batch: images and classes, or tokens and
next-token targets), same loss (mean cross-entropy), same optimizer (AdamW, mlx's
defaults, lr 1e-3). The hand-written models are benches/train_models_mlx.py.

- time: each contender's step, min over `--runs` after a warm-up; runs interleaved, one
  of each per round, so other work on a shared machine slows both alike. The losses of
  every step are recorded and must agree (both train the same run from the same start).
- memory: MLX's peak during a step (weights, optimizer state and data included), each
  contender alone in a fresh process (`--memory-of`), against tensorgraph's plan
  (arena + weights and optimizer state (the state region) + constants + I/O; target
  ratio <= 1.10), and tensorgraph's keep-everything arena against the hand-written
  peak above its weights and optimizer state (target <= 0.70).

    python benches/bench_train.py [--model resnet18|gpt2|all] [--runs 10] [--figures FILE]
                                  [--device cpu|gpu] [--no-compiled]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

from tensorgraph.codegen_mlx import blas_info  # first: loads OpenBLAS before mlx.core

# isort: split
import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np

import tensorgraph as tg
from tensorgraph.cli_train import training_task

sys.path.insert(0, str(Path(__file__).parent))
import train_models_mlx as hand  # the sibling module, found via sys.path

LEARNING_RATE = 1e-3
CONFIGS = {
    "resnet18": {"batch": 8, "image": 32, "width": 16, "classes": 10},
    "gpt2": {"batch": 4, "seq": 64, "dim": 128, "heads": 4, "layers": 2, "vocab": 512},
}
CONTENDERS = ("tensorgraph mlx", "hand-written mx.compile", "tensorgraph mlx compiled")
HAND = CONTENDERS[1]


def tg_contender(model: str, mode: str = "auto"):
    """(step() -> loss float, plan bytes dict) of tensorgraph's training step run in the
    MLX backend's `mode`: "auto" (the default, segmented: the peak stays near the plan)
    or "compiled" (one mx.compile'd trace, as the hand-written step)."""
    task = training_task(model, CONFIGS[model], 0)
    program = tg.compile(tg.train_step(task.graph, optimizer=tg.optim.AdamW(LEARNING_RATE)))
    state = program.new_state("mlx")
    feeds = {k: mx.array(v) for k, v in task.batches(0).items()}
    mx.eval(list(feeds.values()))

    def step() -> float:
        (loss,) = program.run(dict(feeds), backend="mlx", state=state, mode=mode)
        return float(loss.item())

    graph, plan = program.graph, program.plan
    io = sum(n.nbytes for n in graph.inputs) + sum(graph.node(i).nbytes for i in graph.returned)
    sizes = {
        "arena": plan.arena_size,
        "state": plan.state_size,
        "constants": plan.constant_size,
        "io": io,
    }
    return step, sizes


def hand_setup(model: str) -> tuple[nn.Module, mx.array, mx.array, optim.Optimizer]:
    """The hand-written MLX model on the zoo's weights, its batch (images NHWC, or
    tokens; targets) as mx.arrays, and its initialised AdamW."""
    task = training_task(model, CONFIGS[model], 0)
    weights = dict(task.graph.param_values)
    c = CONFIGS[model]
    if model == "resnet18":
        module = hand.ResNet18(weights, c["width"])
    else:
        module = hand.GPT2(weights, c["heads"], c["layers"])
    batch = task.batches(0)
    x = batch["image"].transpose(0, 2, 3, 1) if model == "resnet18" else batch["tokens"]
    optimizer = optim.AdamW(learning_rate=LEARNING_RATE)
    optimizer.init(module.trainable_parameters())
    return module, mx.array(np.ascontiguousarray(x)), mx.array(batch["target"]), optimizer


def hand_contender(model: str):
    """step() -> loss float of the hand-written MLX model (mx.compile'd step)."""
    module, x, y, optimizer = hand_setup(model)
    loss_and_grad = nn.value_and_grad(module, hand.loss)
    held = [module.state, optimizer.state]
    mx.eval(held, x, y)

    @partial(mx.compile, inputs=held, outputs=held)
    def compiled(x: mx.array, y: mx.array) -> mx.array:
        loss, grads = loss_and_grad(module, x, y)
        optimizer.update(module, grads)
        return loss

    def step() -> float:
        loss = compiled(x, y)
        mx.eval(loss, held)
        return float(loss.item())

    return step


def timed(step) -> tuple[float, float]:
    began = time.perf_counter()
    loss = step()
    return loss, time.perf_counter() - began


def peak_alone(model: str, name: str, device: str) -> int:
    """MLX's peak bytes over a step of contender `name`, after its warm-up step, in a
    fresh process holding only that contender, on MLX `device`."""
    command = [sys.executable, __file__, "--model", model, "--memory-of", name]
    command += ["--device", device]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return int(done.stdout.split()[-1])


def weights_and_moments(sizes: dict) -> int:
    """The hand-written side's weights + AdamW moments: the same bytes as tensorgraph's
    state region less its step counter (AdamW without bias correction keeps none)."""
    return sizes["state"]


def bench(model: str, runs: int, device: str, compiled: bool = True) -> str:
    """The figures of `model`'s contenders; `compiled` False leaves out tensorgraph's
    compiled mode (on MLX's CUDA backend its first trace of a whole step JIT-compiles
    every fused kernel: over 75 s for GPT-2 on an H200, more than a device round gives)."""
    tg_step, sizes = tg_contender(model)
    steps = {CONTENDERS[0]: tg_step, HAND: hand_contender(model)}
    if compiled:
        steps[CONTENDERS[2]] = tg_contender(model, "compiled")[0]
    losses: dict[str, list[float]] = {name: [] for name in steps}
    best = dict.fromkeys(steps, float("inf"))
    for _ in range(runs + 1):  # the first round is the warm-up (traces, compiles)
        for name, step in steps.items():
            loss, seconds = timed(step)
            losses[name].append(loss)
            best[name] = min(best[name], seconds) if len(losses[name]) > 1 else best[name]
    peaks = {name: peak_alone(model, name, device) for name in steps}
    plan = sizes["arena"] + sizes["state"] + sizes["constants"] + sizes["io"]
    hand_above = peaks[HAND] - weights_and_moments(sizes)
    theirs = np.array(losses[HAND])
    ours = np.array(losses[CONTENDERS[0]])
    mine = [np.array(losses[name]) for name in steps if name != HAND]
    agree = all(np.allclose(m, theirs, rtol=1e-3) for m in mine)
    worst = max(float(np.max(np.abs(m - theirs) / np.abs(theirs))) for m in mine)
    c = CONFIGS[model]
    lines = [
        f"{model} {c}; AdamW lr {LEARNING_RATE}; MLX {device}; {blas_info()}",
        f"{'contender':<26} {'step ms':>9} {'vs hand':>8} {'peak MiB':>9}",
    ]
    for name in steps:
        lines.append(
            f"{name:<26} {best[name] * 1e3:>9.2f} {best[name] / best[HAND]:>8.3f} "
            f"{peaks[name] / 2**20:>9.2f}"
        )
    lines += [
        f"losses agree over {runs + 1} steps (rtol 1e-3): {'yes' if agree else 'NO'} "
        f"(worst relative difference {worst:.2e}; first {ours[0]:.4f}, last {ours[-1]:.4f})",
        f"plan: arena {sizes['arena']:,} B + weights and AdamW moments {sizes['state']:,} B "
        f"+ constants {sizes['constants']:,} B + I/O {sizes['io']:,} B = {plan:,} B",
        f"tensorgraph MLX peak / plan: {peaks[CONTENDERS[0]] / plan:.3f} (target <= 1.10)"
        + (f"; compiled mode: {peaks[CONTENDERS[2]] / plan:.3f}" if compiled else ""),
        f"hand-written peak above weights and moments: {hand_above:,} B; keep-everything "
        f"arena / that: {sizes['arena'] / hand_above:.3f} (target <= 0.70)",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=(*CONFIGS, "all"), default="all")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--figures", type=Path, default=None, help="append the figures here")
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument(
        "--no-compiled", action="store_true", help="leave out tensorgraph's compiled mode"
    )
    parser.add_argument("--memory-of", choices=CONTENDERS, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    mx.set_default_device(mx.cpu if args.device == "cpu" else mx.gpu)
    if args.memory_of:
        if args.memory_of == HAND:
            step = hand_contender(args.model)
        else:
            mode = "compiled" if args.memory_of == CONTENDERS[2] else "auto"
            step, _ = tg_contender(args.model, mode)
        step()
        mx.reset_peak_memory()
        step()
        print(mx.get_peak_memory())
        return
    models = tuple(CONFIGS) if args.model == "all" else (args.model,)
    compiled = not args.no_compiled
    text = "\n\n".join(bench(model, args.runs, args.device, compiled) for model in models)
    print(text)
    if args.figures:
        command = (
            f"python benches/bench_train.py --model {args.model} --runs {args.runs} "
            f"--device {args.device}" + ("" if compiled else " --no-compiled")
        )
        with args.figures.open("a") as out:
            out.write(f"```\n$ {command}\n{text}\n```\n\n")


if __name__ == "__main__":
    main()
