"""Greedy Llama generation: tensorgraph's multi-entry program on MLX vs a hand-written
MLX decode loop with a preallocated KV cache updated by mx.slice_update.

One process, same weights (`llama_weights`), same config. The hand-written contenders
follow MLX's KV-cache recipe (mlx-lm's KVCache): per layer a (batch, heads, max_seq,
head_dim) cache allocated once, each step's k/v written at row pos by mx.slice_update;
"eager" attends over the written rows cache[:, :, :pos + 1] as mlx-lm does, "compiled"
is one mx.compile'd step with pos as an mx.array and a bool mask over the whole cache
(shape-stable, so traced once). tensorgraph runs `generate` (default MLX mode). All three
must produce the same token ids. Decode time is the min over runs of the decode loop
(tokens - 1 steps, each ending with the argmax on the host), tensorgraph's loop being
the one `generate` runs. Memory is MLX's peak (weights and caches included) during the
decode loop, each contender measured alone in a fresh process, against the plan's shared
arena + weights + state. Also: the multi-entry program's arena vs each entry alone.

    python benches/bench_generate.py [--config default|dispatch] [--tokens 64] [--runs 5]
                                     [--device cpu|gpu] [--figures FILE]
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import time
from pathlib import Path

from tensorgraph.codegen_mlx import blas_info  # first: loads OpenBLAS before mlx.core

# isort: split
import mlx.core as mx
import numpy as np

import tensorgraph as tg
from tensorgraph.models.generation import (
    generate,
    generation_layout,
    llama_generation,
    llama_weights,
)
from tensorgraph.models.llama import LlamaConfig

CONFIGS = {
    "default": LlamaConfig(batch=1, dim=512, heads=8, hidden=1376, layers=2, vocab=512),
    "dispatch": LlamaConfig(batch=1, dim=64, heads=4, hidden=176, layers=8, vocab=512),
}


class HandWritten:
    """The zoo Llama written directly in mlx.core with per-layer preallocated caches."""

    def __init__(self, weights: dict[str, np.ndarray], config: LlamaConfig, max_seq: int):
        self.c, self.max_seq = config, max_seq
        self.w = {name: mx.array(a) for name, a in weights.items()}
        self.layers = [
            {k.split(".", 1)[1]: v for k, v in self.w.items() if k.startswith(f"l{i}.")}
            for i in range(config.layers)
        ]
        self.head_dim = config.dim // config.heads
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.step = mx.compile(self._masked_step)
        self.reset()

    def reset(self) -> None:
        shape = (self.c.batch, self.c.heads, self.max_seq, self.head_dim)
        self.caches = [mx.zeros(shape) for _ in range(2 * self.c.layers)]
        mx.eval(self.caches)

    def _heads(self, x: mx.array) -> mx.array:
        b, rows, _ = x.shape
        return x.reshape(b, rows, self.c.heads, self.head_dim).transpose(0, 2, 1, 3)

    def _forward(self, h, caches, offset, start, attend):
        """h (batch, rows, dim) through every layer; `attend(q, k_cache, v_cache, k, v)`."""
        c, new = self.c, []
        for i, p in enumerate(self.layers):
            x = mx.fast.rms_norm(h, p["attn_norm"], c.eps)
            q, k, v = (self._heads(x @ p[n]) for n in ("wq", "wk", "wv"))
            q = mx.fast.rope(
                q, self.head_dim, traditional=False, base=1e4, scale=1.0, offset=offset
            )
            k = mx.fast.rope(
                k, self.head_dim, traditional=False, base=1e4, scale=1.0, offset=offset
            )
            k_cache = mx.slice_update(caches[2 * i], k, start, axes=(2,))
            v_cache = mx.slice_update(caches[2 * i + 1], v, start, axes=(2,))
            new += [k_cache, v_cache]
            attended = attend(q, k_cache, v_cache, k, v)
            h = h + attended.transpose(0, 2, 1, 3).reshape(h.shape) @ p["wo"]
            x = mx.fast.rms_norm(h, p["mlp_norm"], c.eps)
            h = h + (nn_silu(x @ p["w_gate"]) * (x @ p["w_up"])) @ p["w_down"]
        logits = mx.fast.rms_norm(h[:, -1], self.w["norm"], c.eps) @ self.w["lm_head"]
        return logits, new

    def prefill(self, ids: np.ndarray) -> mx.array:
        def attend(q, k_cache, v_cache, k, v):
            return mx.fast.scaled_dot_product_attention(q, k, v, scale=self.scale, mask="causal")

        h = self.w["embed"][mx.array(ids)]
        logits, self.caches = self._forward(h, self.caches, 0, mx.array([0]), attend)
        return logits

    def decode_eager(self, token: np.ndarray, pos: int) -> mx.array:
        """mlx-lm's way: attend over the rows written so far (a shape that grows)."""

        def attend(q, k_cache, v_cache, k, v):
            keys, values = k_cache[:, :, : pos + 1], v_cache[:, :, : pos + 1]
            return mx.fast.scaled_dot_product_attention(q, keys, values, scale=self.scale)

        h = self.w["embed"][mx.array(token)]
        logits, self.caches = self._forward(h, self.caches, pos, mx.array([pos]), attend)
        return logits

    def _masked_step(self, token, pos, *caches):
        def attend(q, k_cache, v_cache, k, v):
            mask = (mx.arange(self.max_seq) <= pos).reshape(1, self.max_seq)
            return mx.fast.scaled_dot_product_attention(
                q, k_cache, v_cache, scale=self.scale, mask=mask
            )

        logits, new = self._forward(self.w["embed"][token], list(caches), pos, pos, attend)
        return (logits, *new)

    def decode_compiled(self, token: np.ndarray, pos: int) -> mx.array:
        """One mx.compile'd step: pos an mx.array, the whole cache under a bool mask."""
        logits, *self.caches = self.step(mx.array(token), mx.array([pos]), *self.caches)
        return logits


def nn_silu(x: mx.array) -> mx.array:
    return x * mx.sigmoid(x)


def hand_generate(model: HandWritten, prompt: np.ndarray, tokens: int, compiled: bool):
    """(token ids, decode seconds, MLX peak bytes during decode) of one greedy run."""
    model.reset()
    out = [np.asarray(mx.argmax(model.prefill(prompt), axis=-1)).astype(np.int32)]
    decode = model.decode_compiled if compiled else model.decode_eager
    mx.reset_peak_memory()
    began = time.perf_counter()
    for step in range(1, tokens):
        logits = decode(out[-1][:, None], prompt.shape[1] + step - 1)
        out.append(np.asarray(mx.argmax(logits, axis=-1)).astype(np.int32))
    seconds = time.perf_counter() - began
    return np.stack(out, axis=1), seconds, mx.get_peak_memory()


def tg_generate(program, prompt: np.ndarray, tokens: int, device: str):
    """(token ids, decode seconds, MLX peak bytes during decode) of one greedy run of the
    program, the same loop as `generate` (whose timing the figures also report)."""
    state = program.new_state("mlx")
    n, bucket = prompt.shape[1], next(b for b in BUCKETS if b >= prompt.shape[1])
    padded = np.zeros((prompt.shape[0], bucket), np.int32)
    padded[:, :n] = prompt

    def call(entry, feeds):
        (logits,) = program.run(entry, feeds, backend="mlx", state=state, device=device)
        return np.argmax(logits, axis=-1).astype(np.int32)

    out = [call(f"prefill{bucket}", {"tokens": padded, "length": np.array(n, np.int32)})]
    mx.reset_peak_memory()
    began = time.perf_counter()
    layout = generation_layout(program)
    for step in range(1, tokens):
        position = n + step - 1
        feeds = {"token": out[-1][:, None], "pos": np.array(position, np.int32)}
        out.append(call(layout.decode_entry(position), feeds))
    seconds = time.perf_counter() - began
    return np.stack(out, axis=1), seconds, mx.get_peak_memory()


def best_of(runs: dict, count: int) -> dict:
    """Each contender's fastest of `count` runs (tokens, seconds, peak), after one warm-up
    run each. The runs are interleaved, one of each contender per round, so the other
    work on a shared machine slows them all alike."""
    for run in runs.values():
        run()
    best: dict = {}
    for _ in range(count):
        for name, run in runs.items():
            result = run()
            if name not in best or result[1] < best[name][1]:
                best[name] = result
    return best


def arena_alone(entries: dict[str, tg.Graph]) -> dict[str, int]:
    """Each entry's activation arena when compiled on its own."""
    return {name: tg.compile(graph).plan.arena_size for name, graph in entries.items()}


BUCKETS = (32, 128, 512)
MAX_SEQ = 512


CONTENDERS = ("tensorgraph mlx (default)", "hand-written eager (mlx-lm)", "hand-written mx.compile")


def contender(name: str, config: LlamaConfig, prompt: np.ndarray, args, program=None):
    """The run() of contender `name` (tokens, decode seconds, decode peak bytes)."""
    if name == CONTENDERS[0]:
        return lambda: tg_generate(program, prompt, args.tokens, args.device)
    hand = HandWritten(llama_weights(config, 0), config, MAX_SEQ)
    compiled = name == CONTENDERS[2]
    return lambda: hand_generate(hand, prompt, args.tokens, compiled)


def peak_alone(name: str, args) -> int:
    """MLX's peak bytes during the decode loop of contender `name`, measured in a fresh
    process holding nothing but that contender (its weights, caches and activations)."""
    command = [sys.executable, __file__, "--memory-of", name, "--config", args.config]
    command += ["--prompt-len", str(args.prompt_len), "--tokens", str(args.tokens)]
    command += ["--device", args.device]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return int(done.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", choices=tuple(CONFIGS), default="default")
    parser.add_argument("--prompt-len", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--figures", type=Path, default=None, help="append the figures here")
    parser.add_argument("--memory-of", choices=CONTENDERS, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    mx.set_default_device(mx.cpu if args.device == "cpu" else mx.gpu)
    config = CONFIGS[args.config]
    prompt = np.random.default_rng(0).integers(0, config.vocab, (config.batch, args.prompt_len))
    prompt = prompt.astype(np.int32)
    entries = llama_generation(config, max_seq=MAX_SEQ, buckets=BUCKETS)
    if args.memory_of:
        program = tg.compile(entries) if args.memory_of == CONTENDERS[0] else None
        run = contender(args.memory_of, config, prompt, args, program)
        run()
        print(run()[2])
        return

    began = time.perf_counter()
    program = tg.compile(entries)
    compile_seconds = time.perf_counter() - began
    alone = arena_alone(entries)
    runs = {name: contender(name, config, prompt, args, program) for name in CONTENDERS}
    results = best_of(runs, args.runs)
    peaks = {name: peak_alone(name, args) for name in CONTENDERS}
    via_generate = generate(program, prompt, args.tokens, backend="mlx", device=args.device)

    steps = config.batch * (args.tokens - 1)
    agree = all(np.array_equal(r[0], via_generate.tokens) for r in results.values())
    best_hand = min(results[n][1] for n in CONTENDERS[1:])
    plan = program.arena_size + program.constant_size + program.state_size
    lines = [
        f"Llama {config.layers} layers, dim {config.dim}, {config.heads} heads, hidden "
        f"{config.hidden}, vocab {config.vocab}; max_seq {MAX_SEQ}, buckets {list(BUCKETS)}; "
        f"prompt {args.prompt_len}, {args.tokens} new tokens; MLX {args.device}; {blas_info()}",
        f"compile (all {len(entries)} entries): {compile_seconds:.2f} s",
        f"{'contender':<30} {'decode tok/s':>12} {'vs best hand':>12} {'peak MiB':>9} "
        f"{'vs plan':>8}",
    ]
    for name, (_, seconds, _) in results.items():
        lines.append(
            f"{name:<30} {steps / seconds:>12.1f} {best_hand / seconds:>12.3f} "
            f"{peaks[name] / 2**20:>9.2f} {peaks[name] / plan:>8.3f}"
        )
    lines += [
        f"generate(): prefill {via_generate.prefill_tokens_per_second:.1f} tok/s, decode "
        f"{via_generate.decode_tokens_per_second:.1f} tok/s",
        f"token ids agree (3 contenders + generate): {'yes' if agree else 'NO'}",
        f"plan: shared arena {program.arena_size:,} B + weights {program.constant_size:,} B "
        f"+ state {program.state_size:,} B = {plan:,} B ({plan / 2**20:.2f} MiB)",
        "arena per entry (multi-entry program / compiled alone): "
        + ", ".join(
            f"{name} {program.entries[name].plan.arena_size:,}/{alone[name]:,}" for name in alone
        ),
        f"multi-entry arena {program.arena_size:,} B vs largest entry alone "
        f"{max(alone.values()):,} B: ratio {program.arena_size / max(alone.values()):.3f}",
    ]
    text = "\n".join(lines)
    print(text)
    if args.figures:
        command = f"python benches/bench_generate.py --config {args.config} --device {args.device}"
        with args.figures.open("a") as out:
            out.write(f"```\n$ {command}\n{text}\n```\n\n")


if __name__ == "__main__":
    main()
