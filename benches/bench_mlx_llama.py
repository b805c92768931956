"""tensorgraph on MLX vs the same Llama decoder hand-written in mlx.core vs NumPy.

One process, same weights: a Llama-style decoder (default: 2 layers, dim 512, 8 heads,
seq 128, SwiGLU hidden 1376, RMSNorm, rotary; `--config dispatch`: 8 layers, dim 64,
where per-op overhead dominates). tensorgraph gets mx.array tokens and returns mx.array
logits (the device-resident path, no NumPy conversion). Each contender is warmed up,
then timed as the min of N runs; outputs are checked against the NumPy reference; MLX
peak memory is measured per run with mx.reset_peak_memory / mx.get_peak_memory. Also
prints fp32 matmul throughput with the BLAS tensorgraph loaded, and without it (a
subprocess with TENSORGRAPH_BLAS=off).

    python benches/bench_mlx_llama.py [--runs 10] [--config default|dispatch]
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import time

from tensorgraph.codegen_mlx import blas_info  # first: loads OpenBLAS before mlx.core

# isort: split
import mlx.core as mx
import numpy as np

import tensorgraph as tg
from tensorgraph.models.llama import LlamaConfig, llama

CONFIGS = {
    "default": LlamaConfig(batch=1, seq=128, dim=512, heads=8, hidden=1376, layers=2, vocab=512),
    "dispatch": LlamaConfig(batch=1, seq=64, dim=64, heads=4, hidden=176, layers=8, vocab=512),
}


def matmul_gflops(n: int = 1024, runs: int = 5) -> float:
    a = mx.random.normal((n, n))
    b = mx.random.normal((n, n))
    mx.eval(a @ b)
    best = math.inf
    for _ in range(runs):
        began = time.perf_counter()
        mx.eval(a @ b)
        best = min(best, time.perf_counter() - began)
    return 2 * n**3 / best / 1e9


def hand_written(weights: dict[str, mx.array], config: LlamaConfig):
    """The decoder written directly with mlx.core ops (tables and mask built once)."""
    c = config
    head_dim = c.dim // c.heads
    half = head_dim // 2
    inv_freq = mx.exp(mx.arange(half, dtype=mx.float32) * (-2.0 * math.log(10000.0) / head_dim))
    angles = mx.arange(c.seq, dtype=mx.float32)[:, None] * inv_freq[None, :]
    angles = mx.concatenate([angles, angles], axis=-1)
    cos, sin = mx.cos(angles), mx.sin(angles)
    mask = mx.where(mx.tril(mx.ones((c.seq, c.seq), dtype=mx.bool_)), 0.0, -1e9)

    def rms_norm(x, w):
        return x * mx.rsqrt(mx.mean(x * x, axis=-1, keepdims=True) + c.eps) * w

    def rotary(x):
        rotated = mx.concatenate([-x[..., half:], x[..., :half]], axis=-1)
        return x * cos + rotated * sin

    def heads(x):
        return x.reshape(c.batch, c.seq, c.heads, head_dim).transpose(0, 2, 1, 3)

    def forward(tokens):
        h = mx.take(weights["embed"], tokens, axis=0)
        for i in range(c.layers):
            p = {k.split(".", 1)[1]: v for k, v in weights.items() if k.startswith(f"l{i}.")}
            x = rms_norm(h, p["attn_norm"])
            q, k, v = heads(x @ p["wq"]), heads(x @ p["wk"]), heads(x @ p["wv"])
            q, k = rotary(q), rotary(k)
            scores = (q @ k.transpose(0, 1, 3, 2)) * (1.0 / math.sqrt(head_dim)) + mask
            attn = mx.softmax(scores, axis=-1, precise=True) @ v
            h = h + attn.transpose(0, 2, 1, 3).reshape(c.batch, c.seq, c.dim) @ p["wo"]
            x = rms_norm(h, p["mlp_norm"])
            gate = x @ p["w_gate"]
            h = h + (gate * mx.sigmoid(gate) * (x @ p["w_up"])) @ p["w_down"]
        return rms_norm(h, weights["norm"]) @ weights["lm_head"]

    return forward


def measure(run, runs: int) -> tuple[float, int, np.ndarray]:
    """(min seconds, max MLX peak bytes above the pre-run level, output) over `runs`."""
    result = run()
    best, peak = math.inf, 0
    for _ in range(runs):
        mx.clear_cache()
        mx.reset_peak_memory()
        before = mx.get_active_memory()
        began = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - began)
        peak = max(peak, mx.get_peak_memory() - before)
    return best, peak, np.asarray(result)


def main() -> None:
    if os.environ.get("TENSORGRAPH_BENCH_GFLOPS_ONLY"):
        print(f"{matmul_gflops():.1f}")
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--config", choices=tuple(CONFIGS), default="default")
    args = parser.parse_args()
    config = CONFIGS[args.config]
    model = llama(config)
    graph = model.graph
    inputs = model.inputs(0)
    prog = tg.compile(graph)
    weights = {k: mx.array(v) for k, v in graph.param_values.items()}
    tokens = mx.array(inputs["tokens"])
    feeds = {"tokens": tokens}
    forward = hand_written(weights, config)
    compiled_forward = mx.compile(forward)

    def evaluated(fn):
        def run():
            out = fn(tokens)
            mx.eval(out)
            return out

        return run

    contenders = {
        "tensorgraph mlx (auto)": lambda: prog.run(feeds, backend="mlx")[0],
        "tensorgraph mlx eager": lambda: prog.run(feeds, backend="mlx", mode="eager")[0],
        "tensorgraph mlx compiled": lambda: prog.run(feeds, backend="mlx", mode="compiled")[0],
        "hand-written mlx": evaluated(forward),
        "hand-written mlx + compile": evaluated(compiled_forward),
    }
    results = {name: measure(run, args.runs) for name, run in contenders.items()}
    began = time.perf_counter()
    reference = prog.run(inputs, backend="numpy")[0]
    numpy_seconds = time.perf_counter() - began
    best_hand = min(results["hand-written mlx"][0], results["hand-written mlx + compile"][0])
    hand_peak = min(results["hand-written mlx"][1], results["hand-written mlx + compile"][1])
    print(
        f"Llama decoder {config.layers} layers, dim {config.dim}, {config.heads} heads, seq "
        f"{config.seq}; MLX device {mx.default_device()}; BLAS: {blas_info()}"
    )
    print(f"plan: arena {prog.plan.arena_size:,} B, params/constants {prog.plan.constant_size:,} B")
    print(
        f"{'contender':<28} {'ms':>9} {'vs best hand':>12} {'peak MiB':>9} {'vs hand peak':>12}"
        f" {'max rel err':>11}"
    )
    scale = float(np.max(np.abs(reference)))
    for name, (seconds, peak, output) in results.items():
        error = float(np.max(np.abs(output - reference))) / scale
        print(
            f"{name:<28} {seconds * 1000:>9.2f} {seconds / best_hand:>12.3f} "
            f"{peak / 2**20:>9.2f} {peak / hand_peak:>12.3f} {error:>11.2e}"
        )
    print(
        f"{'numpy reference':<28} {numpy_seconds * 1000:>9.2f} "
        f"{numpy_seconds / best_hand:>12.3f} {'-':>9} {'-':>12} {0:>11.2e}"
    )
    with_blas = matmul_gflops()
    env = {**os.environ, "TENSORGRAPH_BLAS": "off", "TENSORGRAPH_BENCH_GFLOPS_ONLY": "1"}
    without = subprocess.run(
        [sys.executable, __file__], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    print(
        f"1024x1024 fp32 matmul: {with_blas:.1f} GFLOP/s with {blas_info()}; "
        f"{without} GFLOP/s with MLX's bundled BLAS"
    )


if __name__ == "__main__":
    main()
