"""tensorgraph's arena vs ExecuTorch's memory planner on the 16 real models of issue 12
and four outside architectures.

Each model (tests/models_suite/catalog.py: torchvision and transformers with random
weights, batch 1, float32, images 224x224, sequences of 128; tests/models_suite/outside.py:
small configs, 32x32 images, 32 tokens) is exported with torch.export. The outside four
are those where an outside check found tensorgraph's arena at or above ExecuTorch's
(issue 23): Swin v2, Mixtral with batched experts, SigLIP's vision tower, PVT-v2; any
other outside model can be named with --models. ExecuTorch plans it with `to_edge` ->
`to_executorch` (its default greedy planner), once as is and once after its constant
propagation; the arena is read from the emitted program (`non_const_buffer_sizes`).
tensorgraph imports the same export (weights folded, as constant propagation does) and
compiles it with the default pipeline, and again without reinplacing and copy
elimination (ExecuTorch does neither: the like-for-like column).
Both plan graph inputs and outputs inside the arena; alignment 16 bytes on both sides.
Compile times: tensorgraph's import (decompositions included) + compile against
ExecuTorch's to_edge + to_executorch, both from the same exported program.

Needs the `models` and `compare` extras (torch, torchvision, transformers, executorch).

    python benches/bench_vs_executorch.py [--small] [--models NAME ...]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from pathlib import Path

import torch

import tensorgraph as tg
from tensorgraph.importers.torch_export import from_exported

# The model catalog is a test fixture (tests/models_suite/catalog.py), not part of the
# package: put the repository root on the path so that `tests` is importable from here.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.models_suite import outside
from tests.models_suite.catalog import MODELS, build

OUTSIDE = ("swinv2", "mixtral", "siglip_vision", "pvt_v2")

ALIGNMENT = 16
# The default passes less the in-place ones ExecuTorch does not do: writing over a dying
# operand (reinplace) and writing concat operands into their slots (copy_elim).
NO_REINPLACE = tuple(p for p in tg.DEFAULT_PASSES if p not in ("reinplace", "copy_elim"))


def executorch_arena(program: torch.export.ExportedProgram, constant_prop: bool) -> tuple:
    """(arena bytes, seconds for to_edge + to_executorch) of ExecuTorch's default plan."""
    from executorch.exir import to_edge
    from executorch.exir.passes.constant_prop_pass import constant_prop_pass

    began = time.perf_counter()
    edge = to_edge(program)
    if constant_prop:
        edge._edge_programs["forward"] = constant_prop_pass(edge.exported_program())
    emitted = edge.to_executorch().executorch_program
    seconds = time.perf_counter() - began
    sizes = emitted.execution_plan[0].non_const_buffer_sizes
    return sum(sizes[1:]), seconds  # index 0 is reserved by ExecuTorch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--small", action="store_true", help="the CI sizes (64x64 images)")
    parser.add_argument(
        "--models", nargs="*", default=[*MODELS, *OUTSIDE], choices=MODELS + outside.MODELS
    )
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    header = (
        f"{'model':<19} {'ET':>12} {'ET+constprop':>13} {'tg':>12} {'tg/ET+cp':>9} "
        f"{'tg no-reinpl':>13} {'/ET+cp':>7} {'tg LB':>12} {'ET s':>6} {'tg s':>6}"
    )
    print(header)
    ratios, like_ratios = [], []
    for name in args.models:
        if name in MODELS:
            module, inputs = build(name, full=not args.small)
        else:
            module, inputs = outside.build(name)
        et_default, et_seconds = executorch_arena(torch.export.export(module, inputs), False)
        et_constprop, _ = executorch_arena(torch.export.export(module, inputs), True)
        program = torch.export.export(module, inputs)
        began = time.perf_counter()
        graph = from_exported(program, name)
        prog = tg.compile(graph, alignment=ALIGNMENT)
        tg_seconds = time.perf_counter() - began
        like = tg.compile(graph, passes=NO_REINPLACE, alignment=ALIGNMENT).plan.arena_size
        arena = prog.plan.arena_size
        ratios.append(arena / et_constprop)
        like_ratios.append(like / et_constprop)
        print(
            f"{name:<19} {et_default:>12,} {et_constprop:>13,} {arena:>12,} "
            f"{arena / et_constprop:>9.3f} {like:>13,} {like / et_constprop:>7.3f} "
            f"{prog.plan.lower_bound:>12,} {et_seconds:>6.1f} {tg_seconds:>6.1f}",
            flush=True,
        )

    def geomean(values: list[float]) -> float:
        return math.exp(sum(math.log(v) for v in values) / len(values))

    print(
        f"geometric mean tg/ET+constprop {geomean(ratios):.3f}; "
        f"without reinplacing {geomean(like_ratios):.3f}; "
        f"tg <= ET+constprop on {sum(r <= 1 for r in ratios)} of {len(ratios)}"
    )


if __name__ == "__main__":
    main()
