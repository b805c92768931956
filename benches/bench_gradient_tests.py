"""What the slow job's suite-model gradient tests (tests/autodiff/test_torch_gradients.py)
spend, before and after they compile with `GRADIENT_ONLY` (the program order and greedy
offsets instead of the default schedule search): for each model, the import (torch.export,
the same either way), then compile + one reference run of its gradient graph under each
option set, interleaved in one process, with the two runs' outputs checked equal bit for
bit (the reference computes node by node, whatever the order and the offsets).

    PYTHONPATH=. python benches/bench_gradient_tests.py [--models mobilenet_v3_large,...]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import tensorgraph as tg
from tensorgraph.importers import torch_export
from tests.autodiff.test_torch_gradients import GRADIENT_ONLY, _with_loss
from tests.models_suite import catalog


def measure(name: str) -> None:
    torch_export.fold_weights = lambda graph: graph  # as the test imports: every weight a param
    module, args = catalog.build(name, False)
    module.eval()
    started = time.perf_counter()
    graph, _ = _with_loss(tg.from_torch(module, args))
    imported = time.perf_counter() - started
    wrt = [k for k, p in module.named_parameters() if p.requires_grad]
    vg = tg.value_and_grad(graph, wrt)
    feeds = {n.name: a.numpy() for n, a in zip(graph.inputs, args, strict=True)}
    seconds, outputs = {}, {}
    for label, options in (("gradient-only", GRADIENT_ONLY), ("default", {})):
        started = time.perf_counter()
        outputs[label] = tg.compile(vg, **options).run(feeds, backend="numpy")
        seconds[label] = time.perf_counter() - started
    same = all(
        np.array_equal(a, b)
        for a, b in zip(outputs["gradient-only"], outputs["default"], strict=True)
    )
    ratio = seconds["default"] / seconds["gradient-only"]
    print(
        f"{name:20s} nodes {len(vg.nodes):5d}  import {imported:6.1f} s  "
        f"compile+run default {seconds['default']:7.1f} s  gradient-only "
        f"{seconds['gradient-only']:6.1f} s  ratio {ratio:6.1f}x"
        f"  outputs equal: {same}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", default="mobilenet_v3_large")
    for name in parser.parse_args().models.split(","):
        measure(name)


if __name__ == "__main__":
    main()
