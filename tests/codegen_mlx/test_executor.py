"""The MLX executor: modes agree, errors are named, memory stays within the plan."""

import mlx.core as mx
import numpy as np
import pytest

import tensorgraph as tg
from tensorgraph.codegen_mlx import blas_info
from tensorgraph.models import build_model
from tensorgraph.models.llama import BlockConfig, llama_block_model


def test_modes_agree_and_missing_input_is_named() -> None:
    model = build_model("mlp", batch=4, features=32, hidden=64)
    prog = tg.compile(model.graph)
    inputs = model.inputs(0)
    eager = prog.run(inputs, backend="mlx", mode="eager")
    compiled = prog.run(inputs, backend="mlx", mode="compiled")
    np.testing.assert_allclose(eager[0], compiled[0], rtol=1e-5, atol=1e-6)
    with pytest.raises(tg.RunError, match=r"missing input\(s\) \['x'\]"):
        prog.run({}, backend="mlx")
    with pytest.raises(tg.RunError, match="unknown MLX mode 'lazy'"):
        prog.run(inputs, backend="mlx", mode="lazy")
    with pytest.raises(tg.RunError, match="unknown MLX device 'tpu'"):
        prog.run(inputs, backend="mlx", device="tpu")


def test_blas_is_reported() -> None:
    assert "BLAS" in blas_info()


def llama_block_program() -> tuple[tg.Program, dict]:
    model = llama_block_model(BlockConfig(seq=64, dim=256, heads=4, hidden=512))
    return tg.compile(model.graph), model.inputs(0)


def test_eager_peak_memory_stays_within_the_plan() -> None:
    prog, inputs = llama_block_program()
    # The constant segment holds every param and constant; inputs are part of the arena.
    params_bytes = sum(v.nbytes for v in prog.graph.param_values.values())
    assert prog.plan.constant_size >= params_bytes
    budget = prog.plan.arena_size + prog.plan.constant_size
    prog.run(inputs, backend="mlx", mode="eager")  # warm-up: kernels, caches
    mx.clear_cache()
    mx.reset_peak_memory()
    baseline = mx.get_active_memory()
    prog.run(inputs, backend="mlx", mode="eager")
    peak = mx.get_peak_memory() - baseline
    ratio = peak / budget
    print(f"MLX eager peak {peak} B vs arena + params/constants {budget} B: {ratio:.3f}x")
    assert ratio <= 1.10
