"""What each pass buys: arena (best planner, alignment 64, program order) with no passes,
then with each pass added in pipeline order, and the final lower bound; on a Llama-style
block and on 200 random graphs from the test strategies (summed).

    PYTHONPATH=. python benches/bench_passes.py     (imports tests/strategies.py)
"""

from __future__ import annotations

import warnings

import numpy as np
from hypothesis import HealthCheck, given, settings

import tensorgraph as tg
from tensorgraph.models.llama import BlockConfig, llama_block_model

STEPS = (
    (),
    ("dce",),
    ("dce", "cse"),
    ("dce", "cse", "view_alias"),
    ("dce", "cse", "view_alias", "reinplace"),
)


def llama_block() -> tg.Graph:
    return llama_block_model(BlockConfig(seq=128, dim=512, heads=8, hidden=1376)).graph


def arenas(graph: tg.Graph) -> list[int]:
    return [tg.compile(graph, passes=p, schedule="program").plan.arena_size for p in STEPS]


def main() -> None:
    names = ["none", "+dce", "+cse", "+view_alias", "+reinplace", "lower bound"]
    print(f"{'graph':<22} " + " ".join(f"{n:>12}" for n in names))
    block = llama_block()
    final = tg.compile(block, schedule="program").plan.lower_bound
    print(f"{'llama block':<22} " + " ".join(f"{a:>12,}" for a in [*arenas(block), final]))
    from tests.strategies import graphs  # the suite's random graphs (run from the repo root)

    totals = np.zeros(len(STEPS) + 1, dtype=np.int64)
    count = [0]

    @settings(
        max_examples=200, database=None, deadline=None, suppress_health_check=list(HealthCheck)
    )
    @given(graphs(max_ops=16))
    def collect(graph: tg.Graph) -> None:
        totals[:-1] += arenas(graph)
        totals[-1] += tg.compile(graph, schedule="program").plan.lower_bound
        count[0] += 1

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        collect()
    print(f"{f'random graphs ({count[0]}, sum)':<22} " + " ".join(f"{a:>12,}" for a in totals))


if __name__ == "__main__":
    main()
