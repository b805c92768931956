"""Imported models in bench_mlx_gpu.py's table: tensorgraph's MLX modes beside torch eager.

A model of the real-model suite (tests/models_suite/catalog.py) is imported with
`tg.from_torch` and compiled with the default passes; its tokens or image go in as an
mx.array and its output comes back as one (device-resident, as for the Llama configs).
Contenders: tensorgraph default (auto), tensorgraph compiled, torch eager on the same
kind of device (CUDA when MLX runs on the GPU and torch sees one; else the CPU). Time is
the min over `runs` rounds after a warm-up: tensorgraph's two modes round-robin, then
torch's runs. Peak/plan as in bench_mlx_gpu:
(resident weights + MLX peak above the pre-run level) / (arena + constant segment +
inputs/outputs). torch's peak is `torch.cuda.max_memory_allocated` above the pre-run
level on CUDA; on the CPU torch reports none. Errors are relative to torch's output.
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from pathlib import Path

import mlx.core as mx
import numpy as np
import torch
from bench_mlx_gpu import MIB, measure_round

import tensorgraph as tg
from tensorgraph.codegen_mlx.stats import io_bytes, plan_bound

# The suite is a test fixture, not part of the package (as in bench_vs_executorch.py).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.models_suite.catalog import build


def _torch_runner(module: torch.nn.Module, args: tuple, device: str):
    """(run, peak, device) for torch eager: run() returns the output once the device has
    finished; peak() is the CUDA allocator's peak above its level before the last run,
    or None on the CPU."""
    cuda = device == "gpu" and torch.cuda.is_available()
    target = torch.device("cuda" if cuda else "cpu")
    module = module.to(target)
    args = tuple(a.to(target) for a in args)

    before = [0]

    def run() -> torch.Tensor:
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            before[0] = torch.cuda.memory_allocated()
        with torch.no_grad():
            out = module(*args)
        if cuda:
            torch.cuda.synchronize()
        return out

    def peak() -> int | None:
        return torch.cuda.max_memory_allocated() - before[0] if cuda else None

    return run, peak, target


def bench_imported(name: str, device: str, runs: int, full: bool) -> None:
    """Print one imported model's rows (module docstring)."""
    module, args = build(name, full=full)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = tg.from_torch(module, args, name)
    prog = tg.compile(graph)
    names = [n.name for n in graph.nodes if n.op == "input"]
    feeds = {k: mx.array(a.numpy()) for k, a in zip(names, args, strict=True)}
    torch_run, torch_peak, target = _torch_runner(module, args, device)
    runners = {
        "tg default": lambda: prog.run(feeds, backend="mlx", device=device)[0],
        "tg compiled": lambda: prog.run(feeds, backend="mlx", mode="compiled", device=device)[0],
    }
    for run in runners.values():  # warm-up: weights converted, segments traced
        mx.eval(run())
    reference = torch_run().float().cpu().numpy()
    best = {k: math.inf for k in [*runners, "torch eager"]}
    peak: dict[str, int | None] = dict.fromkeys(best, 0)
    outputs = {}
    for _ in range(runs):
        for contender, run in runners.items():
            seconds, above, out = measure_round(run)
            best[contender] = min(best[contender], seconds)
            peak[contender] = max(peak[contender], above)
            outputs[contender] = np.asarray(out)
    # torch after MLX, not interleaved: torch's OpenMP workers spin for a while after
    # each parallel region and took the cores from the MLX run right after (gpt2's tg
    # default measured 3.3 ms alone and 6.3 ms interleaved with torch on 2 cores).
    for _ in range(runs):
        began = time.perf_counter()
        torch_run()
        best["torch eager"] = min(best["torch eager"], time.perf_counter() - began)
        read = torch_peak()
        peak["torch eager"] = None if read is None else max(peak["torch eager"], read)
    plan = prog.plan
    io, bound = io_bytes(graph), plan_bound(prog)
    resident = sum(v.nbytes for v in graph.param_values.values())
    resident += sum(n.nbytes for n in graph.nodes if n.op == "input")
    scale = float(np.max(np.abs(reference))) or 1.0
    size = ", ".join("x".join(map(str, a.shape)) for a in args)
    print(
        f"\n{name} (imported, inputs {size}; torch on {target}): arena "
        f"{plan.arena_size / MIB:.2f} MiB, constants {plan.constant_size / MIB:.2f} MiB, "
        f"inputs/outputs {io / MIB:.2f} MiB"
    )
    print(
        f"{'contender':<24} {'ms':>9} {'vs torch':>9} {'peak MiB':>9} {'peak/plan':>9} "
        f"{'act/arena':>9} {'rel err':>9}"
    )
    for contender in best:
        ratio = best[contender] / best["torch eager"]
        head = f"{contender:<24} {best[contender] * 1e3:>9.2f} {ratio:>9.3f}"
        if contender == "torch eager":
            shown = "-" if peak[contender] is None else f"{peak[contender] / MIB:.2f}"
            print(f"{head} {shown:>9} {'-':>9} {'-':>9} {0:>9.1e}")
            continue
        error = float(np.max(np.abs(outputs[contender] - reference))) / scale
        print(
            f"{head} {peak[contender] / MIB:>9.2f} {(resident + peak[contender]) / bound:>9.3f} "
            f"{peak[contender] / plan.arena_size:>9.3f} {error:>9.1e}"
        )
