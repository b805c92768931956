"""Host work around tensorgraph's compiled decode step: tensorgraph's `generate` against
bench_decode_families' compiled hand-written loop (Llama, default size, 64 tokens; 3
warm-up rounds, then 5 interleaved rounds, min), then a cProfile of one `generate`. The
host share is the profile's `generate` total less `segments.run_segments`.

    PYTHONPATH=. python benches/profile_decode_host.py
"""

from __future__ import annotations

import cProfile
import pstats
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_decode_families as bench

import tensorgraph as tg
from tensorgraph.importers.generation import from_torch_generation
from tensorgraph.models.generation import generate


def main() -> None:
    model = bench.build_model("llama", "default")
    entries = from_torch_generation(model, max_seq=bench.MAX_SEQ, prompt_buckets=(bench.BUCKET,))
    program = tg.compile(entries)
    prompt = np.random.default_rng(0).integers(3, 500, (1, 20)).astype(np.int32)
    hand = bench.DecoderLM(model, bench.MAX_SEQ)
    for _ in range(3):
        generate(program, prompt, 64, backend="mlx")
        bench.hand_generate(hand, prompt, 64, True)
    ours, theirs = [], []
    for _ in range(5):
        ours.append(generate(program, prompt, 64, backend="mlx").decode_seconds)
        theirs.append(bench.hand_generate(hand, prompt, 64, True)[1])
    print(
        f"tg {min(ours):.4f} s, hand {min(theirs):.4f} s, tok/s ratio {min(theirs) / min(ours):.3f}"
    )
    profile = cProfile.Profile()
    profile.enable()
    generate(program, prompt, 64, backend="mlx")
    profile.disable()
    pstats.Stats(profile).sort_stats("cumulative").print_stats(30)


if __name__ == "__main__":
    main()
