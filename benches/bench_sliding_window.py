"""Sliding-window caches (issue 25): the state region of an imported Mistral-shaped model
whose layers slide over a window of 512 at max_seq 4,096, held as rings of the window's
length, against the same model and weights with full caches (sliding_window=None).

Both are imported by `from_torch_generation` (prefill bucket 32 + decode) and compiled as
one MultiProgram each; the state bytes are the plan's state region. Each program then
generates greedily on MLX past the window (the ring wraps) and its tokens are checked
against transformers' own `generate` of the same model (the full-cache program against
the full-attention model); decode tokens/s is the min over runs of `generate`'s decode
loop. The target: ring state <= 0.13x of the full cache (window / max_seq = 0.125).

    python benches/bench_sliding_window.py [--window 512] [--max-seq 4096] [--tokens 560]
"""

from __future__ import annotations

import argparse
import copy
import time

import numpy as np

import tensorgraph as tg
from tensorgraph.importers.generation import from_torch_generation
from tensorgraph.importers.torch_compat import import_transformers
from tensorgraph.models.generation import generate

BUCKET = 32


def mistral(window: int, max_seq: int) -> object:
    """A Mistral-shaped model (grouped-query heads 8/2, every layer sliding), narrow."""
    import torch

    transformers = import_transformers()
    config = transformers.MistralConfig(
        vocab_size=256,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=max_seq,
        sliding_window=window,
    )
    torch.manual_seed(0)
    return transformers.MistralForCausalLM(config).eval()


def transformers_tokens(model: object, prompt: list[int], tokens: int) -> list[int]:
    import torch

    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt]), max_new_tokens=tokens, do_sample=False, min_new_tokens=tokens
        )
    return out[0, len(prompt) :].tolist()


def measure(name: str, model: object, max_seq: int, prompt: list[int], args) -> dict:
    began = time.perf_counter()
    multi = tg.compile(from_torch_generation(model, max_seq=max_seq, prompt_buckets=(BUCKET,)))
    built = time.perf_counter() - began
    states = {s.name: s.shape for s in multi.entries["decode"].graph.states}
    generate(multi, np.array(prompt), args.tokens, backend="mlx")  # traces every entry
    runs = [generate(multi, np.array(prompt), args.tokens, backend="mlx") for _ in range(args.runs)]
    best = min(runs, key=lambda r: r.decode_seconds)
    want = transformers_tokens(model, prompt, args.tokens)
    same = all(r.tokens[0].tolist() == want for r in runs)
    return {
        "name": name,
        "state": multi.entries["decode"].plan.state_size,
        "shapes": sorted(set(states.values())),
        "decode": best.decode_tokens_per_second,
        "same": same,
        "built": built,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=int, default=512)
    parser.add_argument("--max-seq", type=int, default=4096)
    parser.add_argument("--tokens", type=int, default=560, help="new tokens (past the window)")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    ring_model = mistral(args.window, args.max_seq)
    full_model = copy.deepcopy(ring_model)
    full_model.config.sliding_window = None  # the same weights, full attention
    prompt = [int(t) for t in np.random.default_rng(0).integers(3, 256, 24)]
    print(
        f"Mistral-shaped, 2 layers, kv heads 2 x head_dim 32, window {args.window}, "
        f"max_seq {args.max_seq}; prompt {len(prompt)} + {args.tokens} new tokens on MLX"
    )
    rows = [
        measure("ring (window)", ring_model, args.max_seq, prompt, args),
        measure("full cache", full_model, args.max_seq, prompt, args),
    ]
    full = rows[1]["state"]
    print(
        f"{'program':<15} {'state bytes':>12} {'ratio':>7} {'cache shapes':<34} "
        f"{'decode tok/s':>12}  tokens = transformers"
    )
    for row in rows:
        shapes = ", ".join(str(s) for s in row["shapes"])
        print(
            f"{row['name']:<15} {row['state']:>12,} {row['state'] / full:>6.3f}x {shapes:<34} "
            f"{row['decode']:>12.1f}  {'yes' if row['same'] else 'NO'}"
        )
    ratio = rows[0]["state"] / full
    print(
        f"ring state / full cache state = {ratio:.4f}x (target <= 0.13x: "
        f"{'met' if ratio <= 0.13 else 'NOT met'})"
    )


if __name__ == "__main__":
    main()
