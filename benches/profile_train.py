"""Where a training step's time goes, against hand-written MLX (benches/bench_train.py's
models and configs): the MLX primitives of one step in each (the uncompiled graph that
`mx.compile` receives: the hand-written `nn.value_and_grad` + AdamW update, and
tensorgraph's `tg.train_step` program lowered node by node), then tensorgraph's step run
node by node with a sync around each, its time summed per op (min over `--runs` steps).

    PYTHONPATH=. python benches/profile_train.py [--model resnet18|gpt2] [--runs 3]

Op-by-op times are not the step's time (no fusion, a sync per node) but rank what the
step spends: how benches/README.md's training section found the recomputed gelu tanh.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
import tempfile
import time
from pathlib import Path

from tensorgraph.codegen_mlx import blas_info  # noqa: F401  first: OpenBLAS before mlx.core

# isort: split
import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten

import tensorgraph as tg
from tensorgraph.cli_train import training_task
from tensorgraph.codegen_mlx.arrays import to_mx
from tensorgraph.codegen_mlx.executor import _in_range
from tensorgraph.codegen_mlx.lowering import lowering_of
from tensorgraph.ir.ops import OPS
from tensorgraph.runtime.kernels import constant_value

sys.path.insert(0, str(Path(__file__).parent))
import bench_train as bench  # the sibling module, found via sys.path
import train_models_mlx as hand


def primitives(arrays: list[mx.array]) -> collections.Counter:
    """MLX primitive name -> count over the graph that computes `arrays` (unevaluated)."""
    with tempfile.NamedTemporaryFile(suffix=".dot") as dot:
        mx.export_to_dot(dot.name, *arrays)
        return collections.Counter(re.findall(r'label ="([A-Za-z]+)', Path(dot.name).read_text()))


def hand_step_graph(model: str) -> list[mx.array]:
    """The loss, updated weights and moments of one hand-written step, unevaluated."""
    module, x, y, optimizer = bench.hand_setup(model)
    loss, grads = nn.value_and_grad(module, hand.loss)(module, x, y)
    optimizer.update(module, grads)
    updated = tree_flatten(module.parameters()) + tree_flatten(optimizer.state)
    return [loss] + [v for _, v in updated]


def lowered_step(model: str, timings: dict | None = None) -> list[mx.array]:
    """tensorgraph's step lowered node by node: the outputs and state updates; with
    `timings`, each node evaluated and synced alone, its seconds added under its op."""
    task = training_task(model, bench.CONFIGS[model], 0)
    program = tg.compile(tg.train_step(task.graph, optimizer=tg.optim.AdamW(bench.LEARNING_RATE)))
    graph, state, feeds = program.graph, program.new_state("mlx"), task.batches(0)
    slots: dict[int, mx.array] = {}
    for node in graph.nodes:
        if node.op == "constant":
            slots[node.id] = to_mx(constant_value(node))
        elif node.op == "input":
            slots[node.id] = mx.array(feeds[node.name])
        elif node.op == "state":
            slots[node.id] = mx.array(np.asarray(state[node.name]))
        elif node.op == "param":
            slots[node.id] = mx.array(graph.param_values[node.name])
    in_range = _in_range(program)
    for node in graph.nodes:
        if OPS[node.op].boundary:
            continue
        args = [slots[i] for i in node.inputs]
        if timings is not None:
            mx.eval(args)
            began = time.perf_counter()
        slots[node.id] = lowering_of(node, in_range)(node, args)
        if timings is not None:
            mx.eval(slots[node.id])
            timings[node.op] += time.perf_counter() - began
    return [slots[i] for i in graph.outputs]  # the loss, then every state update


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=tuple(bench.CONFIGS), default="gpt2")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    mx.set_default_device(mx.cpu)
    theirs, ours = primitives(hand_step_graph(args.model)), primitives(lowered_step(args.model))
    print(
        f"{args.model}: MLX primitives of one step: hand-written {sum(theirs.values())}, ", end=""
    )
    print(f"tensorgraph {sum(ours.values())}")
    for name in sorted(set(theirs) | set(ours), key=lambda k: -(theirs[k] + ours[k]))[:16]:
        print(f"  {name:<22} hand {theirs[name]:>5}  tensorgraph {ours[name]:>5}")
    best: dict[str, float] = {}
    for _ in range(args.runs):
        timings: dict[str, float] = collections.defaultdict(float)
        lowered_step(args.model, timings)
        best = {op: min(best.get(op, t), t) for op, t in timings.items()}
    total = sum(best.values())
    print(f"tensorgraph's step op by op (a sync per node): {total * 1e3:.1f} ms; top ops:")
    for op, seconds in sorted(best.items(), key=lambda item: -item[1])[:12]:
        print(f"  {op:<28} {seconds * 1e3:>7.2f} ms  {seconds / total:>6.1%}")


if __name__ == "__main__":
    main()
