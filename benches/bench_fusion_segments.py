"""The segmented mode with and without the fusion-aware segment cost (codegen_mlx/
fusion.py), on bench_train.py's training steps (zoo ResNet-18, small GPT-2; AdamW).

Two tensorgraph programs of one step, each cut into segments at the executor's budget:
"charged" counts every elementwise temporary (the cost before fusion.py), "fused"
refunds what mx.compile fuses. Printed per model: the number of segments, the largest
segment cost over the budget (a lone step may exceed it: a convolution's scratch), and
each step's time (min over `--runs` after a warm-up, interleaved with the hand-written
mx.compile step, so a shared machine slows all alike) as a ratio to hand-written and
to "charged". MLX's peak of the default (fused) mode against the plan is
bench_train.py's figure.

    PYTHONPATH=. python benches/bench_fusion_segments.py [--model resnet18|gpt2|all] [--runs 20]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from tensorgraph.codegen_mlx import blas_info  # first: loads OpenBLAS before mlx.core

# isort: split
import mlx.core as mx

import tensorgraph as tg
from tensorgraph.cli_train import training_task
from tensorgraph.codegen_mlx import executor, segments

sys.path.insert(0, str(Path(__file__).parent))
from bench_train import CONFIGS, LEARNING_RATE, hand_contender


def tg_step(model: str, fused: bool):
    """(step() -> loss, segments, budget) of tensorgraph's segmented training step, its
    segments cut with (`fused`) or without the fusion refund."""
    task = training_task(model, CONFIGS[model], 0)
    program = tg.compile(tg.train_step(task.graph, optimizer=tg.optim.AdamW(LEARNING_RATE)))
    state = program.new_state("mlx")
    feeds = {k: mx.array(v) for k, v in task.batches(0).items()}
    mx.eval(list(feeds.values()))
    kept = segments.fusion_enabled
    segments.fusion_enabled = lambda: fused  # read once, when the segments are cut
    try:
        cut, _ = executor._segmented(program, mx.cpu)
    finally:
        segments.fusion_enabled = kept

    def step() -> float:
        (loss,) = program.run(dict(feeds), backend="mlx", state=state)
        return float(loss.item())

    return step, cut, executor.segment_budget(program)


def bench(model: str, runs: int) -> str:
    contenders, facts = {}, {}
    for name, fused in (("charged", False), ("fused", True)):
        step, cut, budget = tg_step(model, fused)
        contenders[name] = step
        facts[name] = (len(cut), max(s.cost for s in cut) / budget)
    contenders["hand-written"] = hand_contender(model)
    best = dict.fromkeys(contenders, float("inf"))
    losses = {name: [] for name in contenders}
    for round_ in range(runs + 1):  # round 0 warms up (traces)
        for name, step in contenders.items():
            began = time.perf_counter()
            losses[name].append(step())
            if round_:
                best[name] = min(best[name], time.perf_counter() - began)
    agree = losses["charged"] == losses["fused"]
    lines = [
        f"{model} {CONFIGS[model]}; MLX cpu; {blas_info()}; min of {runs}",
        f"{'contender':<14} {'segments':>8} {'max cost/budget':>15} {'step ms':>8} "
        f"{'vs hand':>8} {'vs charged':>10}",
    ]
    for name in contenders:
        count, worst = facts.get(name, ("", ""))
        lines.append(
            f"{name:<14} {count!s:>8} {worst if worst == '' else f'{worst:.3f}':>15} "
            f"{best[name] * 1e3:>8.2f} {best[name] / best['hand-written']:>8.3f} "
            f"{best[name] / best['charged']:>10.3f}"
        )
    lines.append(f"charged and fused losses identical over {runs + 1} steps: {agree}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=(*CONFIGS, "all"), default="all")
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    for model in CONFIGS if args.model == "all" else (args.model,):
        print(bench(model, args.runs), flush=True)


if __name__ == "__main__":
    main()
