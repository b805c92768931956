"""Rematerialisation under a memory budget (issue 27): for training steps (AdamW) of the
zoo MLP, CNN (ResNet-18) and small GPT-2 and Llama, the keep-everything arena,
checkpoint-every-layer's point (arena, recompute FLOPs), and `tg.compile(step,
memory_budget=...)` over a sweep of budgets (from the keep-everything arena down to
checkpoint-every-layer's, then half the keep-everything arena):
placed arena, recompute FLOPs (also as a ratio to the forward's FLOPs), the solver's
proven gap on the answering method's own program, the gap against the full multi-copy
program's dual bound at the same model budget ("full gap": 0.000 is certified optimal
for the full model; `-`: the full program was not solved or the answer is a
fallback), the method that answered and the time to choose (wall seconds, and the process's CPU
seconds: on a shared machine the wall time measures the load as much as the search).
Every point is checked:
arena <= budget, and one step on the arena executor equals the keep-everything step
bit for bit.

    PYTHONPATH=. python benches/bench_remat.py [--models mlp,cnn,gpt2,llama] [--budgets B,...]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import tensorgraph as tg
from tensorgraph.ir.tensor import Tensor
from tensorgraph.models import build_model
from tensorgraph.planner.flops import flops
from tensorgraph.remat import compile_checkpointed

MODELS = {
    "mlp": ("mlp", {"batch": 512, "features": 128, "hidden": 256, "layers": 4}),
    "cnn": ("resnet18", {"batch": 8, "image": 64, "width": 8}),
    "gpt2": ("gpt2", {"batch": 4, "seq": 64, "dim": 64, "heads": 2, "layers": 2, "vocab": 128}),
    "llama": (
        "llama",
        {"batch": 4, "seq": 64, "dim": 64, "heads": 2, "hidden": 192, "layers": 2, "vocab": 128},
    ),
}
# Budgets: these fractions of the way from the keep-everything arena down to
# checkpoint-every-layer's, then half the keep-everything arena (two points on the way,
# not four: every budget plans several points, minutes per model on the shared machine).
SPAN = (0.5, 1.0)


def with_loss(graph: tg.Graph) -> tg.Graph:
    """`graph` with its output replaced by sum(output * fixed weights): a scalar loss."""
    out = graph.node(graph.outputs[0])
    weights = np.random.default_rng(0).uniform(-1, 1, out.shape).astype(np.float32)
    g = tg.Graph.from_nodes(graph.name, graph.nodes, [], graph.param_values)
    g.output((Tensor(g, out.id) * g.constant(weights)).sum())
    return g


def forward_flops(graph: tg.Graph) -> int:
    """FLOPs of the nodes the loss depends on (the forward), planner/flops.py's."""
    seen, stack = set(), [graph.outputs[0]]
    while stack:
        i = stack.pop()
        if i not in seen:
            seen.add(i)
            stack.extend(graph.node(i).inputs)
    return sum(flops(graph, graph.node(i)) for i in seen)


def one_step(prog: tg.Program, feeds: dict) -> list:
    return prog.run(feeds, backend="arena", state=prog.new_state("arena"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument(
        "--budgets",
        default="",
        help="extra budgets in bytes, comma-separated (e.g. half of an earlier run's "
        "keep-everything arena), tried after the default ones",
    )
    args = parser.parse_args()
    extra = [int(b) for b in args.budgets.split(",") if b]
    for name in args.models.split(","):
        zoo, config = MODELS[name]
        model = build_model(zoo, **config)
        loss = with_loss(model.graph)
        step = tg.train_step(loss, optimizer=tg.optim.AdamW(learning_rate=1e-3))
        feeds = model.inputs(0)
        keep = tg.compile(step)
        expected = one_step(keep, feeds)
        fwd = forward_flops(loss)
        layers = compile_checkpointed(step)
        keep_arena = keep.plan.arena_size
        print(f"\n{name} ({zoo} {config}): {len(keep.graph)} nodes, forward {fwd:,} FLOPs")
        plan = keep.plan
        in_place = sum(
            plan.locate(v) == ("state", plan.state_layout[n])
            for n, v in keep.graph.state_updates.items()
        )
        print(
            f"  keep everything        arena {keep_arena:>10,} B  (state updates written "
            f"over their states: {in_place} of {len(keep.graph.state_updates)})"
        )
        print(
            f"  checkpoint every layer arena {layers.plan.arena_size:>10,} B "
            f"({layers.plan.arena_size / keep_arena:.2f}x)  recompute "
            f"{layers.remat.recompute_flops:,} FLOPs "
            f"({layers.remat.recompute_flops / fwd:.2f}x forward)"
        )
        header = (
            "budget",
            "arena",
            "x keep",
            "recompute FLOPs",
            "x fwd",
            "gap",
            "full gap",
            "method",
            "s",
            "cpu s",
        )
        print("  " + "".join(f"{h:>16}" for h in header))
        span = keep_arena - layers.plan.arena_size
        for budget in [keep_arena - int(f * span) for f in SPAN] + [keep_arena // 2] + extra:
            started, cpu = time.perf_counter(), time.process_time()
            try:
                prog = tg.compile(step, memory_budget=budget)
            except tg.PlanError as err:
                wall, cpu = time.perf_counter() - started, time.process_time() - cpu
                print(
                    f"  {budget:>16,}  no point fits ({wall:.1f} s, {cpu:.1f} cpu s): "
                    f"{str(err).split('; ', 1)[1]}"
                )
                continue
            seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
            got = one_step(prog, feeds)
            assert prog.plan.arena_size <= budget
            assert all(np.array_equal(a, b) for a, b in zip(got, expected, strict=True))
            r = prog.remat
            gap = "-" if r.gap is None else f"{r.gap:.3f}"
            full_gap = "-" if r.full_gap is None else f"{r.full_gap:.3f}"
            row = (
                f"{budget:,}",
                f"{r.arena:,}",
                f"{r.arena / keep_arena:.2f}",
                f"{r.recompute_flops:,}",
                f"{r.recompute_flops / fwd:.2f}",
                gap,
                full_gap,
                r.method,
                f"{seconds:.1f}",
                f"{cpu:.1f}",
            )
            print("  " + "".join(f"{c:>16}" for c in row))


if __name__ == "__main__":
    main()
