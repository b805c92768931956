"""tensorgraph's MLX modes vs the same Llama hand-written in mlx.core, on CPU or GPU.

The issue-15 table: for each Llama config (layers, dim, seq, batch) of the zoo builder,
one process, same weights, device-resident arrays (mx.array tokens in, mx.array logits
out, no NumPy conversion), four contenders: tensorgraph's default mode (auto:
segmented), tensorgraph compiled (one mx.compile), hand-written MLX, hand-written +
mx.compile. Each is warmed up, then all are timed round-robin (min of --runs runs).
Peak: MLX's peak bytes above the pre-run level (mx.get_peak_memory), as the issue's
table measures it; `peak/plan` adds the weights every contender keeps resident and
divides by the plan's bound (arena + constant segment + inputs/outputs); `act/arena`
divides the peak above the pre-run level by the arena alone. Outputs are checked
against hand-written + mx.compile.

    python benches/bench_mlx_gpu.py [--device cpu|gpu] [--configs small,dispatch] [--runs 5]

Configs: small (2, 512, 128, 1; benches/bench_mlx_llama.py's), medium (4, 2048, 512, 1),
large (2, 4096, 1024, 4; several GiB: a GPU machine's), dispatch (8, 64, 64, 1: per-op
overhead dominates). Default: all four on a GPU, small and dispatch on a CPU.

Imported models (`--imported resnet50,gpt2`, the default; `--imported ""` skips them):
models of the real-model suite (tests/models_suite/catalog.py, random weights, needs
the `models` extra) imported with `tg.from_torch`. No hand-written MLX exists for
them, so the contenders are tensorgraph's default mode, tensorgraph compiled, and the
same module in torch eager (on CUDA when MLX runs on the GPU and torch sees one,
else on the CPU), as an outside reference for time; torch's peak is its CUDA
allocator's, and "-" on the CPU. Full sizes (images 224, 128 tokens) on a GPU; the
suite's CI sizes on a CPU unless `--full`.

    python benches/bench_mlx_gpu.py --configs "" --imported resnet50,gpt2 --full
"""

from __future__ import annotations

import argparse
import math
import time

from tensorgraph.codegen_mlx import blas_info  # first: loads OpenBLAS before mlx.core

# isort: split
import mlx.core as mx
from bench_mlx_llama import CONFIGS as LLAMA_CONFIGS
from bench_mlx_llama import hand_written

import tensorgraph as tg
from tensorgraph.codegen_mlx.stats import io_bytes, plan_bound
from tensorgraph.models.llama import LlamaConfig, llama

CONFIGS = {
    "small": LLAMA_CONFIGS["default"],
    "medium": LlamaConfig(batch=1, seq=512, dim=2048, heads=16, hidden=5504, layers=4, vocab=8192),
    "large": LlamaConfig(batch=4, seq=1024, dim=4096, heads=32, hidden=11008, layers=2, vocab=8192),
    "dispatch": LLAMA_CONFIGS["dispatch"],
}
CPU_DEFAULT = ("small", "dispatch")
CONTENDERS = ("tg default", "tg compiled", "hand-written", "hand-written + compile")
MIB = 2**20


def measure_round(run) -> tuple[float, int, mx.array]:
    """One timed run: (seconds, MLX peak bytes above the pre-run level, output)."""
    mx.synchronize()
    mx.clear_cache()
    mx.reset_peak_memory()
    before = mx.get_active_memory()
    began = time.perf_counter()
    out = run()
    mx.eval(out)
    seconds = time.perf_counter() - began
    return seconds, max(mx.get_peak_memory() - before, 0), out


def bench_config(name: str, config: LlamaConfig, device: str, runs: int) -> None:
    model = llama(config)
    prog = tg.compile(model.graph)
    tokens = mx.array(model.inputs(0)["tokens"])
    weights = {k: mx.array(v) for k, v in model.graph.param_values.items()}
    forward = hand_written(weights, config)
    compiled_forward = mx.compile(forward)
    runners = {
        "tg default": lambda: prog.run({"tokens": tokens}, backend="mlx", device=device)[0],
        "tg compiled": lambda: prog.run(
            {"tokens": tokens}, backend="mlx", mode="compiled", device=device
        )[0],
        "hand-written": lambda: forward(tokens),
        "hand-written + compile": lambda: compiled_forward(tokens),
    }
    best = dict.fromkeys(CONTENDERS, math.inf)
    peak = dict.fromkeys(CONTENDERS, 0)
    outputs = {}
    for run in runners.values():  # warm-up: traces, weight conversion
        mx.eval(run())
    for _ in range(runs):
        for contender, run in runners.items():
            seconds, bytes_above, out = measure_round(run)
            best[contender] = min(best[contender], seconds)
            peak[contender] = max(peak[contender], bytes_above)
            outputs[contender] = out
    plan = prog.plan
    graph = prog.graph
    io, bound = io_bytes(graph), plan_bound(prog)
    resident = sum(v.nbytes for v in weights.values()) + tokens.nbytes
    reference = outputs["hand-written + compile"]
    scale = mx.max(mx.abs(reference)).item()
    c = config
    print(
        f"\n{name}: {c.layers} layers, dim {c.dim}, seq {c.seq}, batch {c.batch} (heads "
        f"{c.heads}, hidden {c.hidden}, vocab {c.vocab}); arena {plan.arena_size / MIB:.2f} "
        f"MiB, constants {plan.constant_size / MIB:.2f} MiB, inputs/outputs {io / MIB:.2f} MiB"
    )
    print(
        f"{'contender':<24} {'ms':>9} {'vs hand+c':>9} {'peak MiB':>9} {'peak/plan':>9} "
        f"{'act/arena':>9} {'rel err':>9}"
    )
    for contender in CONTENDERS:
        error = mx.max(mx.abs(outputs[contender] - reference)).item() / scale
        print(
            f"{contender:<24} {best[contender] * 1e3:>9.2f} "
            f"{best[contender] / best['hand-written + compile']:>9.3f} "
            f"{peak[contender] / MIB:>9.2f} {(resident + peak[contender]) / bound:>9.3f} "
            f"{peak[contender] / plan.arena_size:>9.3f} {error:>9.1e}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=("cpu", "gpu"), default=None)
    parser.add_argument("--configs", default=None, help=f"comma-separated: {', '.join(CONFIGS)}")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--imported", default="resnet50,gpt2", help="suite models, comma-separated")
    parser.add_argument("--full", action="store_true", help="imported models at full size")
    args = parser.parse_args()
    device = args.device or ("gpu" if mx.default_device() == mx.gpu else "cpu")
    mx.set_default_device(mx.gpu if device == "gpu" else mx.cpu)
    names = [n for n in args.configs.split(",") if n] if args.configs is not None else None
    if names is None:
        names = list(CONFIGS) if device == "gpu" else list(CPU_DEFAULT)
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        parser.error(f"unknown config(s) {unknown}; choose from {', '.join(CONFIGS)}")
    print(f"MLX {mx.__version__} on {mx.default_device()}; BLAS: {blas_info()}; min of {args.runs}")
    for name in names:
        bench_config(name, CONFIGS[name], device, args.runs)
    imported = [n for n in args.imported.split(",") if n]
    if imported:
        from bench_mlx_imported import bench_imported  # torch: only when asked for

        for name in imported:
            bench_imported(name, device, args.runs, args.full or device == "gpu")


if __name__ == "__main__":
    main()
