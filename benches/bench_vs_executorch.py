"""tensorgraph's arena vs ExecuTorch's memory planner on the same exported models.

Each model (plain PyTorch, tests/importers/torch_examples.py) is exported once
with torch.export. ExecuTorch plans it with `to_edge` -> `to_executorch` (its default
greedy planner), with and without its constant propagation; the arena is read from the
emitted program (`non_const_buffer_sizes`). tensorgraph imports the same export (weights
folded, as constant propagation does) and compiles it with the default pipeline, with
each pass switched off, and with the program order instead of the chosen schedule.
Both plan graph inputs and outputs inside the arena. Alignment 16 bytes on both sides.

Needs the `torch` and `compare` extras (torch==2.13.0, executorch==1.5.1).

    python benches/bench_vs_executorch.py [--small]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import torch

import tensorgraph as tg
from tensorgraph.importers.torch_export import from_exported

# The PyTorch models are test fixtures (tests/importers/torch_examples.py), not part of the
# package: put the repository root on the path so that `tests` is importable from here.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.importers.torch_examples import examples

PASSES = ("dce", "cse", "view_alias", "reinplace")
ALIGNMENT = 16


def executorch_arena(program: torch.export.ExportedProgram, constant_prop: bool) -> int:
    from executorch.exir import to_edge
    from executorch.exir.passes.constant_prop_pass import constant_prop_pass

    edge = to_edge(program)
    if constant_prop:
        edge._edge_programs["forward"] = constant_prop_pass(edge.exported_program())
    emitted = edge.to_executorch().executorch_program
    sizes = emitted.execution_plan[0].non_const_buffer_sizes
    return sum(sizes[1:])  # index 0 is reserved by ExecuTorch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--small", action="store_true", help="the test-sized models")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    header = (
        f"{'model':<13} {'ET':>11} {'ET+constprop':>13} {'tg':>11} {'tg/ET+cp':>9} "
        f"{'tg LB':>11} {'program ord':>11} " + " ".join(f"{'no ' + p:>13}" for p in PASSES)
    )
    print(header)
    for name, (module, inputs) in examples(small=args.small).items():
        program = torch.export.export(module, inputs)
        et_default = executorch_arena(program, constant_prop=False)
        et_constprop = executorch_arena(torch.export.export(module, inputs), constant_prop=True)
        graph = from_exported(program, name)
        began = time.perf_counter()
        prog = tg.compile(graph, alignment=ALIGNMENT)
        seconds = time.perf_counter() - began
        program_order = tg.compile(graph, alignment=ALIGNMENT, schedule="program")
        without = [
            tg.compile(
                graph, passes=tuple(q for q in PASSES if q != p), alignment=ALIGNMENT
            ).plan.arena_size
            for p in PASSES
        ]
        arena = prog.plan.arena_size
        print(
            f"{name:<13} {et_default:>11,} {et_constprop:>13,} {arena:>11,} "
            f"{arena / et_constprop:>9.3f} {prog.plan.lower_bound:>11,} "
            f"{program_order.plan.arena_size:>11,} " + " ".join(f"{w:>13,}" for w in without),
            flush=True,
        )
        peak = prog.plan.live_at_peak()[:4]
        held = ", ".join(
            f"%{b.id} {prog.graph.node(b.id).op} {prog.graph.node(b.id).shape}" for b in peak
        )
        print(
            f"{'':<13} compile {seconds:.2f} s; schedule {prog.schedule_stats}; peak held "
            f"by: {held}",
            flush=True,
        )


if __name__ == "__main__":
    main()
