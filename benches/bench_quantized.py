"""Quantized and half-precision models (issue 24's targets), side by side in one run.

(a) The zoo Llama generation program (`llama_generation()`'s default config) with its
    weights at 4 bits, group 64 (`tg.quantize`): its constant segment against the
    float32 program's; its greedy tokens on MLX against the reference interpreter running
    the same program and against the plain NumPy loop (`reference_generate`) over the
    dequantized weights (mx.dequantize, MLX's own); decode tokens/s against a
    hand-written mlx-lm-style loop (bench_generate.HandWritten's forward with
    nn.QuantizedEmbedding / nn.QuantizedLinear layers holding the program's own packed
    arrays, MLX's layout as they are, and a preallocated cache: "eager" attends over
    cache[:, :, :pos + 1] as mlx-lm does, "compiled" is one mx.compile'd masked step),
    tokens required equal; MLX's peak over a whole generation (in a fresh process, so
    it holds nothing else) against the footprint total (constants + state + arena + I/O).
(b) The same with a KV cache at 8 bits (`kv_bits=8`): the state region against the
    float32 cache, tokens against the reference of the same configuration.
(c) The imported transformers Llama (tensorgraph/cli.py's HF_LLAMA) in bfloat16 (torch's
    own bf16 model through from_torch_generation), and that model at 4 bits: generation
    on MLX against the reference interpreter (and every step's logits, both fed the same
    tokens, within `rounding_tolerance`), and the bf16 first-token logits against
    transformers' own bf16 forward within `rounding_tolerance`.
(d) Every zoo model and the 16 suite models (CI sizes): constant segment float32 vs
    bfloat16 (`tg.to_dtype`) vs 4-bit (group 64, or 32 when 64 divides fewer weights),
    and each one's largest output error against float32 on the reference interpreter,
    relative to the float32 output's largest magnitude.

    python benches/bench_quantized.py [--parts a,b,c,d] [--models NAME,suite:NAME,...]
        [--tokens 64] [--runs 10] [--device cpu|gpu] [--figures FILE]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from bench_generate import BUCKETS, MAX_SEQ, HandWritten, best_of, hand_generate, tg_generate

# isort: split
import mlx.core as mx
import mlx.nn as nn
import numpy as np

import tensorgraph as tg
from tensorgraph.codegen_mlx import blas_info
from tensorgraph.models.generation import (
    INPUT_ROLES,
    generate,
    generation_layout,
    llama_generation,
    prefill_logits,
    reference_generate,
)
from tensorgraph.models.llama import LlamaConfig
from tensorgraph.passes.quantize import quantize_weights
from tensorgraph.passes.to_dtype import rounding_tolerance

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.models_suite

BITS, GROUP = 4, 64
SUITE = "suite:"  # part d's prefix of the 16 suite models (tests/models_suite/catalog.py)
CONTENDERS = ("tensorgraph mlx", "hand-written eager (mlx-lm)", "hand-written mx.compile")


class _Rows:
    """`table[ids]` read through a QuantizedEmbedding (only the rows it reads are
    dequantized), so HandWritten's `self.w["embed"][ids]` works on packed weights."""

    def __init__(self, embedding: nn.QuantizedEmbedding) -> None:
        self.embedding = embedding

    def __getitem__(self, ids: mx.array) -> mx.array:
        return self.embedding(ids)


def _parts(values: dict, name: str) -> dict[str, mx.array]:
    return {
        "weight": mx.array(values[name]),
        "scales": mx.array(values[f"{name}.scales"]),
        "biases": mx.array(values[f"{name}.biases"]),
    }


class HandQuantized(HandWritten):
    """The zoo Llama as mlx-lm writes a 4-bit model: every matmul weight an
    nn.QuantizedLinear, the embedding an nn.QuantizedEmbedding, each holding the packed
    codes, scales and biases of the quantized program's params unchanged ((N, K) as
    mx.quantize lays out a Linear's weight); norms, rope, attention and the
    preallocated cache as HandWritten's."""

    def __init__(self, values: dict, config: LlamaConfig, max_seq: int) -> None:
        norms = {n: a for n, a in values.items() if n.endswith("norm")}
        super().__init__(norms, config, max_seq)
        self.w["embed"] = _Rows(self._module(values, "embed", embedding=True))
        self.w["lm_head"] = self._module(values, "lm_head")
        for i, layer in enumerate(self.layers):
            for key in ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down"):
                layer[key] = self._module(values, f"l{i}.{key}")

    def _module(self, values: dict, name: str, embedding: bool = False) -> nn.Module:
        rows, packed = values[name].shape
        inner = packed * 32 // BITS
        if embedding:
            module = nn.QuantizedEmbedding(rows, inner, group_size=GROUP, bits=BITS)
        else:
            module = nn.QuantizedLinear(inner, rows, bias=False, group_size=GROUP, bits=BITS)
        module.update(_parts(values, name))
        mx.eval(module.parameters())
        return module

    def _forward(self, h, caches, offset, start, attend):
        """HandWritten._forward with each `x @ w` a QuantizedLinear call."""
        c, new = self.c, []
        for i, p in enumerate(self.layers):
            x = mx.fast.rms_norm(h, p["attn_norm"], c.eps)
            q, k, v = (self._heads(p[n](x)) for n in ("wq", "wk", "wv"))
            rope = {"traditional": False, "base": 1e4, "scale": 1.0, "offset": offset}
            q = mx.fast.rope(q, self.head_dim, **rope)
            k = mx.fast.rope(k, self.head_dim, **rope)
            per = len(caches) // (2 * c.layers)  # arrays a cache is kept in
            k_cache = self._store(caches[2 * i * per : (2 * i + 1) * per], k, start)
            v_cache = self._store(caches[(2 * i + 1) * per : (2 * i + 2) * per], v, start)
            new += [*k_cache, *v_cache]
            attended = attend(
                q, *(x[0] if per == 1 else tuple(x) for x in (k_cache, v_cache)), k, v
            )
            h = h + p["wo"](attended.transpose(0, 2, 1, 3).reshape(h.shape))
            x = mx.fast.rms_norm(h, p["mlp_norm"], c.eps)
            h = h + p["w_down"](nn.silu(p["w_gate"](x)) * p["w_up"](x))
        logits = self.w["lm_head"](mx.fast.rms_norm(h[:, -1], self.w["norm"], c.eps))
        return logits, new

    def _store(self, cache: list[mx.array], rows: mx.array, start: mx.array) -> list[mx.array]:
        """The cache's arrays with `rows` written at row `start`."""
        return [mx.slice_update(cache[0], rows, start, axes=(2,))]


class HandQuantizedKV(HandQuantized):
    """HandQuantized with mlx-lm's QuantizedKVCache: each cache kept as the (codes,
    scales, biases) of mx.quantize along head_dim (group 64), preallocated; the prompt
    attends over its own rows in float before they enter the cache (mlx-lm's
    quantized_kv_start=0), a decode step through mlx-lm's
    quantized_scaled_dot_product_attention over the stored rows, its own included."""

    def __init__(self, values: dict, config: LlamaConfig, max_seq: int, kv_bits: int) -> None:
        self.kv_bits = kv_bits
        super().__init__(values, config, max_seq)

    def reset(self) -> None:
        rows = (self.c.batch, self.c.heads, self.max_seq)
        parts = [
            mx.zeros((*rows, self.head_dim * self.kv_bits // 32), mx.uint32),
            mx.zeros((*rows, self.head_dim // GROUP)),
            mx.zeros((*rows, self.head_dim // GROUP)),
        ]
        self.caches = [mx.array(a) for _ in range(2 * self.c.layers) for a in parts]
        mx.eval(self.caches)

    def _store(self, cache: list[mx.array], rows: mx.array, start: mx.array) -> list[mx.array]:
        parts = mx.quantize(rows, group_size=GROUP, bits=self.kv_bits)
        return [mx.slice_update(c, p, start, axes=(2,)) for c, p in zip(cache, parts, strict=True)]

    def _attend(self, q: mx.array, keys: tuple, values: tuple, mask=None) -> mx.array:
        """mlx-lm's quantized_scaled_dot_product_attention."""
        options = {"group_size": GROUP, "bits": self.kv_bits}
        scores = mx.quantized_matmul(q * self.scale, *keys, transpose=True, **options)
        if mask is not None:
            scores = mx.where(mask, scores, mx.finfo(scores.dtype).min)
        probs = mx.softmax(scores, axis=-1, precise=True)
        return mx.quantized_matmul(probs, *values, transpose=False, **options)

    def decode_eager(self, token: np.ndarray, pos: int) -> mx.array:
        def attend(q, k_cache, v_cache, k, v):
            return self._attend(q, *((a[..., : pos + 1, :] for a in c) for c in (k_cache, v_cache)))

        h = self.w["embed"][mx.array(token)]
        logits, self.caches = self._forward(h, self.caches, pos, mx.array([pos]), attend)
        return logits

    def _masked_step(self, token, pos, *caches):
        def attend(q, k_cache, v_cache, k, v):
            mask = (mx.arange(self.max_seq) <= pos).reshape(1, self.max_seq)
            return self._attend(q, k_cache, v_cache, mask)

        logits, new = self._forward(self.w["embed"][token], list(caches), pos, pos, attend)
        return (logits, *new)


def quantized_program(kv_bits: int | None = None) -> tg.MultiProgram:
    """The zoo Llama generation program, weights at BITS/GROUP, KV cache at `kv_bits`."""
    entries = llama_generation(kv_bits=kv_bits)
    return tg.compile(tg.quantize(entries, bits=BITS, group_size=GROUP))


def dequantized(values: dict) -> dict[str, np.ndarray]:
    """The float weights the quantized params stand for (mx.dequantize, transposed back
    to the zoo's (K, N) for matmul weights), by the zoo's names."""
    out = {}
    for name, value in values.items():
        if name.endswith((".scales", ".biases")):
            continue
        if value.dtype != np.uint32:
            out[name] = value
            continue
        parts = _parts(values, name)
        w = mx.dequantize(
            parts["weight"], parts["scales"], parts["biases"], group_size=GROUP, bits=BITS
        )
        # the embedding table is quantized by rows as it is; every matmul weight (K, N)
        # as its transpose (MLX's (N, K) Linear layout)
        out[name] = np.asarray(w) if name == "embed" else np.asarray(w).T
    return out


def peak_alone(name: str, kv_bits: int | None, args: argparse.Namespace) -> int:
    """MLX's peak bytes over one whole greedy generation (prefill and decode, weights
    converted on the way) by contender `name`, in a fresh process holding nothing else."""
    command = [sys.executable, __file__, "--memory-of", name, "--tokens", str(args.tokens)]
    command += ["--prompt-len", str(args.prompt_len), "--device", args.device]
    command += ["--kv-bits", str(kv_bits)] if kv_bits else []
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return int(done.stdout.split()[-1])


def memory_of(args: argparse.Namespace) -> None:
    """The child of peak_alone: print the peak."""
    prompt = _prompt(args)
    program = quantized_program(args.kv_bits)
    mx.reset_peak_memory()
    if args.memory_of == CONTENDERS[0]:
        generate(program, prompt, args.tokens, backend="mlx", device=args.device)
    else:
        hand = hand_model(program.entries["decode"].graph.param_values, args.kv_bits)
        hand_generate(hand, prompt, args.tokens, args.memory_of == CONTENDERS[2])
    print(mx.get_peak_memory())


def _prompt(args: argparse.Namespace) -> np.ndarray:
    config = LlamaConfig()
    ids = np.random.default_rng(0).integers(0, config.vocab, (config.batch, args.prompt_len))
    return ids.astype(np.int32)


def _first_difference(a: np.ndarray, b: np.ndarray) -> str:
    if np.array_equal(a, b):
        return "yes"
    return f"NO (first at token {int(np.argmax((a != b).any(axis=0)))})"


def hand_model(values: dict, kv_bits: int | None) -> HandQuantized:
    """The hand-written contender over the program's packed weights."""
    if kv_bits is None:
        return HandQuantized(values, LlamaConfig(), MAX_SEQ)
    return HandQuantizedKV(values, LlamaConfig(), MAX_SEQ, kv_bits)


def contest(args: argparse.Namespace, kv_bits: int | None, lines: list[str]) -> object:
    """Compile the 4-bit program (KV cache at `kv_bits`), check its tokens against both
    references, race the contenders and add their table to `lines`; returns the
    program."""
    config, prompt = LlamaConfig(), _prompt(args)
    program = quantized_program(kv_bits)
    values = program.entries["decode"].graph.param_values
    ours = generate(program, prompt, args.tokens, backend="mlx", device=args.device).tokens
    interpreter = generate(program, prompt, args.tokens, backend="numpy").tokens
    weights = dequantized(values)
    loop = reference_generate(config, weights, prompt, args.tokens, kv_bits=kv_bits).tokens
    runs = {CONTENDERS[0]: lambda: tg_generate(program, prompt, args.tokens, args.device)}
    for name in CONTENDERS[1:]:
        hand = hand_model(values, kv_bits)
        runs[name] = lambda hand=hand, name=name: hand_generate(
            hand, prompt, args.tokens, name == CONTENDERS[2]
        )
    results = best_of(runs, args.runs)
    peaks = {name: peak_alone(name, kv_bits, args) for name in CONTENDERS}
    steps, total = config.batch * (args.tokens - 1), program.memory().total
    same = "the NumPy loop" + ("" if kv_bits is None else f" with kv_bits={kv_bits}")
    lines += [
        f"tokens (MLX) equal the reference interpreter on the same program: "
        f"{_first_difference(ours, interpreter)}; {same} over the mx.dequantize'd weights: "
        f"{_first_difference(ours, loop)}",
        f"{'contender':<30} {'decode tok/s':>12} {'vs eager':>9} {'vs compiled':>11} "
        f"{'tokens':>7} {'peak MiB':>9} {'peak/total':>10}",
    ]
    eager, compiled = results[CONTENDERS[1]][1], results[CONTENDERS[2]][1]
    for name, (tokens, seconds, _) in results.items():
        agree = "same" if np.array_equal(tokens, ours) else "DIFFER"
        lines.append(
            f"{name:<30} {steps / seconds:>12.1f} {eager / seconds:>9.3f} "
            f"{compiled / seconds:>11.3f} {agree:>7} "
            f"{peaks[name] / 2**20:>9.2f} {peaks[name] / total:>10.3f}"
        )
    return program


def part_a(args: argparse.Namespace, lines: list[str]) -> None:
    config = LlamaConfig()
    before = tg.compile(llama_generation()).memory()
    lines.append(
        f"(a) zoo Llama generation ({config.layers} layers, dim {config.dim}, hidden "
        f"{config.hidden}, vocab {config.vocab}; max_seq {MAX_SEQ}, buckets {list(BUCKETS)}) "
        f"at {BITS} bits, group {GROUP}; prompt {args.prompt_len}, {args.tokens} new tokens; "
        f"MLX {args.device}; {blas_info()}; decode: min of {args.runs} runs"
    )
    program = contest(args, None, lines)
    memory = program.memory()
    ratio = memory.constant_size / before.constant_size
    lines += [
        f"constant segment: {memory.constant_size:,} B vs float32 {before.constant_size:,} B: "
        f"{ratio:.3f}x (target <= 0.16x: {'met' if ratio <= 0.16 else 'NOT met'})",
        "footprint (4-bit program; peak/total above is MLX's peak over this total):",
        memory.table(),
        "",
    ]


def part_b(args: argparse.Namespace, lines: list[str]) -> None:
    before = tg.compile(llama_generation())
    lines.append(
        f"(b) the same with kv_bits=8 (group {GROUP}), KV cache as mlx-lm's QuantizedKVCache"
    )
    program = contest(args, 8, lines)
    ratio = program.state_size / before.state_size
    lines += [
        f"state region {program.state_size:,} B vs float32 cache {before.state_size:,} B: "
        f"{ratio:.3f}x (target <= 0.30x: {'met' if ratio <= 0.30 else 'NOT met'}); "
        f"footprint total {program.memory().total:,} B",
        "",
    ]


def part_c(args: argparse.Namespace, lines: list[str]) -> None:
    import torch

    from tensorgraph.cli import HF_LLAMA
    from tensorgraph.importers.generation import from_torch_generation
    from tensorgraph.importers.torch_compat import import_transformers

    transformers = import_transformers()
    torch.manual_seed(0)
    max_seq = 128
    config = transformers.LlamaConfig(**HF_LLAMA, max_position_embeddings=max_seq)
    model = transformers.LlamaForCausalLM(config).eval().to(torch.bfloat16)
    prompt = np.random.default_rng(0).integers(0, config.vocab_size, args.prompt_len)
    entries = from_torch_generation(model, max_seq=max_seq, prompt_buckets=(32,))
    with torch.no_grad():
        theirs = model(torch.tensor(prompt[None].astype(np.int64))).logits[:, -1]
    theirs = theirs.float().numpy().astype(np.float64)
    lines.append(
        f"(c) hf-llama (transformers LlamaForCausalLM {HF_LLAMA}), torch's own bfloat16 "
        f"model, max_seq {max_seq}; prompt {args.prompt_len}, {args.tokens} new tokens"
    )
    variants = {
        "bfloat16": entries,
        f"bfloat16 + {BITS}-bit": tg.quantize(entries, bits=BITS, group_size=GROUP),
    }
    for name, graphs in variants.items():
        program = tg.compile(graphs)
        tokens = min(args.tokens, max_seq - args.prompt_len)
        generate(program, prompt, tokens, backend="mlx", device=args.device)  # traces
        result = generate(program, prompt, tokens, backend="mlx", device=args.device)
        interpreter = generate(program, prompt, tokens, backend="numpy").tokens
        same = int(np.cumprod(result.tokens[0] == interpreter[0]).sum())
        first = {b: prefill_logits(program, prompt, b).astype(np.float64) for b in ("mlx", "numpy")}
        scale = float(np.abs(theirs).max())
        bound = rounding_tolerance(_prefill(program).graph, tg.bfloat16, scale)
        gaps = {b: float(np.abs(v - theirs).max()) for b, v in first.items()}
        check = "within" if max(gaps.values()) <= bound else "NOT within"
        forced = {b: forced_logits(program, prompt, interpreter[0], b) for b in ("mlx", "numpy")}
        forced_gap = float(np.abs(forced["mlx"] - forced["numpy"]).max())
        forced_bound = max(
            rounding_tolerance(e.graph, tg.bfloat16, float(np.abs(forced["numpy"]).max()))
            for e in program.entries.values()
        )
        lines += [
            f"  {name}: constants {program.constant_size:,} B; decode "
            f"{result.decode_tokens_per_second:.1f} tok/s (one run after one); MLX tokens "
            f"equal the reference interpreter for the first {same} of {tokens}"
            + ("" if same == tokens else f" ({_margin(forced['numpy'][same])})"),
            f"    first logits vs transformers' bf16 forward: MLX {gaps['mlx']:.4g}, "
            f"reference {gaps['numpy']:.4g} (bound {bound:.4g}, scale {scale:.3g}: "
            f"{check if name == 'bfloat16' else 'quantization error, not bounded'})",
            f"    every step's logits, MLX vs reference, both fed the reference's tokens: max "
            f"gap {forced_gap:.4g} (bound {forced_bound:.4g}: "
            f"{'within' if forced_gap <= forced_bound else 'NOT within'})",
        ]
    lines.append("")


def _prefill(program: object) -> object:
    return program.entries[next(n for n in program.entries if n.startswith("prefill"))]


def _margin(logits: np.ndarray) -> str:
    """The reference's top-two logit margin at a step where greedy choices differ."""
    top = np.sort(logits)[-2:]
    return f"a near tie there: the reference's top two logits {top[1] - top[0]:.3g} apart"


def forced_logits(
    program: object, prompt: np.ndarray, tokens: np.ndarray, backend: str
) -> np.ndarray:
    """Logits (steps, vocab) of the prefill and of each decode step fed `tokens` (teacher
    forcing: the same ids on every backend, so one near tie that flips a greedy choice
    does not make the later steps incomparable)."""
    layout, n = generation_layout(program), len(prompt)
    state, bucket = program.new_state(backend), layout.bucket_for(n, len(tokens))
    padded = np.zeros((1, bucket), np.int64)
    padded[0, :n] = prompt

    def call(entry: str, values: dict) -> np.ndarray:
        graph = program.entries[entry].graph
        feeds = {
            x.name: np.array(values[INPUT_ROLES[x.name]], x.dtype.to_numpy()) for x in graph.inputs
        }
        (logits,) = program.run(entry, feeds, backend=backend, state=state)
        return np.asarray(logits, np.float64).reshape(-1)

    out = [call(f"prefill{bucket}", {"ids": padded, "position": 0, "length": n})]
    for step, token in enumerate(tokens[:-1]):
        values = {"ids": [[token]], "position": n + step, "length": n}
        out.append(call(layout.decode_entry(n + step), values))
    return np.stack(out)


def _outputs(program, feeds: dict) -> list[np.ndarray]:
    declared = {n.name: n.dtype.to_numpy() for n in program.graph.inputs}
    typed = {k: np.asarray(v).astype(declared[k]) for k, v in feeds.items()}
    return [np.asarray(o, np.float64) for o in program.run(typed, backend="numpy")]


def _error(got: list[np.ndarray], want: list[np.ndarray]) -> float:
    return max(
        float(np.abs(g - w).max() / max(float(np.abs(w).max()), 1e-30))
        for g, w in zip(got, want, strict=True)
    )


def _quantized(graph: tg.Graph) -> tuple[tg.Graph, int, dict]:
    """(graph at BITS, group, quantize_weights' stats) with group 64, or 32 when 64
    leaves more 2-D float weights float."""
    results = {g: quantize_weights(graph, BITS, g) for g in (64, 32)}
    group = min(results, key=lambda g: (len(results[g].stats["kept"]), -g))
    return results[group].graph, group, results[group].stats


def _model(name: str) -> tuple[tg.Graph, dict]:
    """The float32 graph and feeds of zoo model `name` or suite model `suite:{name}`."""
    from tensorgraph.models import build_model

    if not name.startswith(SUITE):
        model = build_model(name)
        return model.graph, model.inputs(0)
    from tests.models_suite.catalog import build

    module, inputs = build(name[len(SUITE) :])
    graph = tg.from_torch(module, inputs, name[len(SUITE) :])
    return graph, {n.name: x.numpy() for n, x in zip(graph.inputs, inputs, strict=True)}


def part_d(args: argparse.Namespace, lines: list[str]) -> None:
    from tensorgraph.models import ZOO

    names, kept = args.models or list(ZOO) + list(_suite()), []
    lines += [
        "(d) constant segment and largest output error vs float32 (reference interpreter; "
        "relative to the float32 output's largest magnitude)",
        f"{'model':<24} {'float32 B':>12} {'bfloat16 B':>12} {'ratio':>6} {'4-bit B':>11} "
        f"{'ratio':>6} {'group':>5} {'2-D q':>6} {'bf16 err':>9} {'4-bit err':>9}",
    ]
    for name in names:
        graph, feeds = _model(name)
        quantized, group, stats = _quantized(graph)
        share = f"{stats['quantized']}/{stats['quantized'] + len(stats['kept'])}"
        kept += [f"  {name}: {param} ({why})" for param, why in stats["kept"].items()]
        programs = [tg.compile(g) for g in (graph, tg.to_dtype(graph, tg.bfloat16), quantized)]
        sizes = [p.memory().constant_size for p in programs]
        want, *others = (_outputs(p, feeds) for p in programs)
        errors = [_error(o, want) for o in others]
        lines.append(
            f"{name:<24} {sizes[0]:>12,} {sizes[1]:>12,} {sizes[1] / sizes[0]:>6.3f} "
            f"{sizes[2]:>11,} {sizes[2] / sizes[0]:>6.3f} {group:>5} {share:>6} "
            f"{errors[0]:>9.2e} {errors[1]:>9.2e}"
        )
        print(lines[-1], file=sys.stderr, flush=True)
    lines += [
        "2-D q: of the 2-D float weights, how many were quantized (conv kernels are not candidates)"
    ]
    lines += ["kept float:", *kept] if kept else []
    lines.append("")


def _suite() -> tuple[str, ...]:
    from tests.models_suite.catalog import MODELS

    return tuple(SUITE + name for name in MODELS)


PARTS = {"a": part_a, "b": part_b, "c": part_c, "d": part_d}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--parts", default="a,b,c,d", help="comma-separated parts to run")
    parser.add_argument("--models", type=lambda s: s.split(","), default=None, help="part d")
    parser.add_argument("--prompt-len", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--figures", type=Path, default=None, help="append the figures here")
    parser.add_argument("--memory-of", choices=CONTENDERS, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--kv-bits", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    mx.set_default_device(mx.cpu if args.device == "cpu" else mx.gpu)
    if args.memory_of:
        memory_of(args)
        return
    lines: list[str] = []
    for part in args.parts.split(","):
        began, start = time.perf_counter(), len(lines)
        PARTS[part](args, lines)
        print("\n".join(lines[start:]), flush=True)
        print(f"[part {part}: {time.perf_counter() - began:.1f} s]", flush=True)
    if args.figures:
        command = f"python benches/bench_quantized.py --parts {args.parts}"
        with args.figures.open("a") as out:
            out.write(f"```\n$ {command}\n" + "\n".join(lines) + "\n```\n\n")


if __name__ == "__main__":
    main()
