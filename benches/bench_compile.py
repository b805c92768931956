"""Compile time with the plan verifier on vs off, and save/load sizes and times, for
every zoo model at its default config, measured side by side in one run.

    python benches/bench_compile.py [--repeat N]

Verification is `check.verify_plan` (the event sweep plus the versions check), which
`compile` always runs; "off" times the same compile with it replaced by a no-op. Times
are the minimum of N runs (machines are noisy). A saved program is two files: the
program (`.tgp`, a zip of JSON) and its weights (`.safetensors` beside it); both sizes
are printed."""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import tensorgraph as tg
import tensorgraph.planner.check as check
from tensorgraph.models import ZOO, build_model


def best_of(repeat: int, action) -> float:
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        action()
        times.append(time.perf_counter() - began)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per figure (default 5)")
    args = parser.parse_args()
    verify = check.verify_plan
    print(
        f"{'model':<14}{'verify on':>11}{'off':>10}{'overhead':>10}"
        f"{'program':>10}{'weights':>13}{'save':>9}{'load':>9}"
    )
    with tempfile.TemporaryDirectory() as folder:
        for name in ZOO:
            graph = build_model(name).graph
            on = best_of(args.repeat, lambda g=graph: tg.compile(g))
            check.verify_plan = lambda graph, plan, aliasing: None
            try:
                off = best_of(args.repeat, lambda g=graph: tg.compile(g))
            finally:
                check.verify_plan = verify
            prog = tg.compile(graph)
            path = Path(folder) / f"{name}.tgp"
            save = best_of(args.repeat, lambda p=prog, f=path: p.save(f))
            load = best_of(args.repeat, lambda f=path: tg.load(f))
            print(
                f"{name:<14}{on * 1e3:>9.1f}ms{off * 1e3:>8.1f}ms{on / off - 1:>+10.1%}"
                f"{path.stat().st_size:>10,}{path.with_suffix('.safetensors').stat().st_size:>13,}"
                f"{save * 1e3:>7.1f}ms{load * 1e3:>7.1f}ms"
            )


if __name__ == "__main__":
    main()
