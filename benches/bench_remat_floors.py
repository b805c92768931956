"""The two ends of rematerialisation on the zoo's training steps (issue 27): for AdamW
steps of bench_remat.py's MLP, CNN (ResNet-18), GPT-2 and Llama, with autodiff's
expansion and without it (`tg.train_step(..., expand=False)`), the keep-everything
arena, checkpoint-every-layer's arena and recompute FLOPs, and the floor: every forward
value recomputed, a fresh copy at each read (`compile_checkpointed(step, "all")`, the
least memory the remat model knows, and what a budget below every point reports). A
budget of half the keep-everything arena (the issue's target point) has a point only
where the floor is at most 0.50x. Bytes and FLOPs are exact (no timing).

    PYTHONPATH=. python benches/bench_remat_floors.py [--models mlp,cnn,gpt2,llama]
"""

from __future__ import annotations

import argparse

from bench_remat import MODELS, with_loss

import tensorgraph as tg
from tensorgraph.models import build_model
from tensorgraph.remat import compile_checkpointed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    args = parser.parse_args()
    header = ("model", "expand", "keep B", "layers B", "x keep", "layers FLOPs", "floor B")
    header += ("x keep", "floor FLOPs", "half fits")
    print("".join(f"{h:>15}" for h in header))
    for name in args.models.split(","):
        zoo, config = MODELS[name]
        loss = with_loss(build_model(zoo, **config).graph)
        for expand in (True, False):
            step = tg.train_step(loss, optimizer=tg.optim.AdamW(learning_rate=1e-3), expand=expand)
            keep = tg.compile(step).plan.arena_size
            layers, floor = compile_checkpointed(step), compile_checkpointed(step, "all")
            row = (
                name,
                str(expand),
                f"{keep:,}",
                f"{layers.plan.arena_size:,}",
                f"{layers.plan.arena_size / keep:.3f}",
                f"{layers.remat.recompute_flops:,}",
                f"{floor.plan.arena_size:,}",
                f"{floor.plan.arena_size / keep:.3f}",
                f"{floor.remat.recompute_flops:,}",
                "yes" if floor.plan.arena_size <= keep // 2 else "no",
            )
            print("".join(f"{c:>15}" for c in row), flush=True)


if __name__ == "__main__":
    main()
