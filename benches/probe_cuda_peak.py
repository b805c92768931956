"""Where MLX's peak exceeds tensorgraph's plan on a device: per op kind, the bytes an
op allocates beyond its output (a cuBLASLt workspace, a copy of a strided input), and
per segment of the Whisper encoder (bench_delegate_memory.py's), the peak of each
segment evaluated alone against the segmenter's worst-case cost.

    PYTHONPATH=.:benches python benches/probe_cuda_peak.py [--device gpu]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from tensorgraph.codegen_mlx import blas_info  # noqa: F401  first: loads OpenBLAS before mlx.core

# isort: split
import mlx.core as mx


def extra_of(build, *shapes) -> tuple[int, int]:
    """(peak above the inputs, output bytes) of one evaluation of build(*inputs)."""
    args = [mx.random.normal(s) for s in shapes]
    mx.eval(args)
    mx.eval(build(*args))
    mx.synchronize()
    mx.reset_peak_memory()
    before = mx.get_active_memory()
    out = build(*args)
    mx.eval(out)
    mx.synchronize()
    return mx.get_peak_memory() - before, out.nbytes


def ops() -> None:
    cases = {
        "matmul 1500x256 @ 256x1024": (lambda a, b: a @ b, (1500, 256), (256, 1024)),
        "matmul 1500x1024 @ 1024x256": (lambda a, b: a @ b, (1500, 1024), (1024, 256)),
        "batched 4x1500x64 @ 4x64x1500": (lambda a, b: a @ b, (4, 1500, 64), (4, 64, 1500)),
        "addmm 1500x256": (lambda a, b, c: mx.addmm(c, a, b), (1500, 256), (256, 256), (256,)),
        "softmax 4x1500x1500": (lambda a: mx.softmax(a, axis=-1), (4, 1500, 1500)),
        "softmax of a temp": (lambda a: mx.softmax(a * 2, axis=-1), (4, 1500, 1500)),
        "gelu-ish 1500x1024": (lambda a: a * mx.sigmoid(1.702 * a), (1500, 1024)),
        "conv1d 1x3000x80 k3": (
            lambda a, w: mx.conv1d(a, w, padding=1),
            (1, 3000, 80),
            (256, 3, 80),
        ),
    }
    for name, (build, *shapes) in cases.items():
        extra, out = extra_of(build, *shapes)
        mib = [f"{b / 2**20:8.2f}" for b in (extra, out, extra - out)]
        print(f"{name:34s} peak above inputs {mib[0]} MiB  output {mib[1]} MiB  extra {mib[2]}")


def segments() -> None:
    import bench_delegate_memory as bench

    from tensorgraph.codegen_mlx import executor

    size = bench.SIZES["default"]
    module = bench.source_model("whisper-encoder", size)
    program = bench.compile_program("whisper-encoder", size, module)
    run = bench.contender("tensorgraph", "whisper-encoder", size, module, program)
    run()
    mx.synchronize()
    resident = mx.get_active_memory()
    mx.reset_peak_memory()
    run()
    mx.synchronize()
    peak = mx.get_peak_memory()
    best = min(timed(run) for _ in range(5))
    plan = program.plan
    budget = executor.segment_budget(program)
    print(
        f"whole call: {best * 1e3:.2f} ms, peak {peak / 2**20:.2f} MiB, resident "
        f"{resident / 2**20:.2f}, arena {plan.arena_size / 2**20:.2f}, budget {budget / 2**20:.2f}"
    )
    segs, _ = executor._segmented(program, mx.default_device())
    print(f"{len(segs)} segments; costs (MiB): {[round(s.cost / 2**20, 1) for s in segs]}")


def timed(run) -> float:
    began = time.perf_counter()
    run()
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", choices=("cpu", "gpu"), default="gpu")
    parser.add_argument("--segments-only", action="store_true")
    args = parser.parse_args()
    mx.set_default_device(mx.cpu if args.device == "cpu" else mx.gpu)
    if args.segments_only:
        segments()
        return
    ops()
    for ops_per_buffer in ("", "1", "4", "60"):  # MLX CUDA's commit interval (default 20)
        print(f"== MLX_MAX_OPS_PER_BUFFER={ops_per_buffer or 'default'}", flush=True)
        env = dict(os.environ, MLX_MAX_OPS_PER_BUFFER=ops_per_buffer)
        if not ops_per_buffer:
            del env["MLX_MAX_OPS_PER_BUFFER"]
        command = [sys.executable, __file__, "--device", args.device, "--segments-only"]
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        print(done.stdout.strip(), done.stderr.strip()[-300:] if done.returncode else "")


if __name__ == "__main__":
    main()
