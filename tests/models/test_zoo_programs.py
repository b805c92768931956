"""Zoo programs are reproducible: the same plan twice and under load, and the same
outputs after a save and a load in a fresh process."""

import multiprocessing
import subprocess
import sys
import time

import numpy as np
import pytest

import tensorgraph as tg
from tensorgraph.models import ZOO, build_model
from tests.models.test_zoo import SMALL


def fingerprint(prog: tg.Program) -> tuple:
    """Everything a plan decides: order, aliasing, every offset, the arena size."""
    plan = prog.plan
    return (
        prog.order,
        tuple(sorted((k, a.source, a.offset, a.kind) for k, a in prog.aliasing.aliases.items())),
        tuple(sorted(plan.offsets.items())),
        tuple(sorted(plan.constant_offsets.items())),
        plan.arena_size,
    )


def _spin(seconds: float) -> None:
    """Keep one core busy for `seconds` (bounded: it always ends by itself)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_zoo_plans_are_identical_twice_and_under_load() -> None:
    models = {name: build_model(name, **SMALL[name]).graph for name in ZOO}
    first = {name: fingerprint(tg.compile(g)) for name, g in models.items()}
    second = {name: fingerprint(tg.compile(g)) for name, g in models.items()}
    assert first == second
    busy = [multiprocessing.Process(target=_spin, args=(60.0,)) for _ in range(2)]
    try:
        for process in busy:
            process.start()
        loaded = {name: fingerprint(tg.compile(g)) for name, g in models.items()}
    finally:
        for process in busy:
            process.terminate()
            process.join()
    assert loaded == first, "a loaded machine must not change any plan"


LOAD_AND_RUN = """
import sys
import numpy as np
import tensorgraph as tg
from tensorgraph.models import build_model
from tests.models.test_zoo import SMALL

name, path, out = sys.argv[1], sys.argv[2], sys.argv[3]
prog = tg.load(path)
inputs = build_model(name, **SMALL[name]).inputs(seed=5)
np.savez(out, *prog.run(inputs, backend="arena"))
"""


@pytest.mark.parametrize("name", sorted(ZOO))
def test_a_saved_zoo_program_runs_identically_in_a_fresh_process(name, tmp_path) -> None:
    model = build_model(name, **SMALL[name])
    prog = tg.compile(model.graph)
    path = tmp_path / f"{name}.tgp"
    prog.save(path)
    want = prog.run(model.inputs(seed=5), backend="arena")
    out = tmp_path / "out.npz"
    result = subprocess.run(
        [sys.executable, "-c", LOAD_AND_RUN, name, str(path), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    with np.load(out) as saved:
        got = [saved[f"arr_{i}"] for i in range(len(want))]
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.tobytes() == w.tobytes()
    loaded = tg.load(path)
    assert fingerprint(loaded) == fingerprint(prog)
