"""Every zoo model compiles, its plan verifies, and the arena and MLX backends agree with
the reference interpreter run on the unoptimised graph."""

import numpy as np
import pytest

import tensorgraph as tg
from tensorgraph.models import ZOO, build_model
from tensorgraph.planner.buffers import Assignment
from tensorgraph.planner.verify import verify_assignment
from tensorgraph.runtime.reference import run_reference

SMALL = {
    "mlp": {"batch": 4, "features": 32, "hidden": 64},
    "llama": {"seq": 16, "dim": 64, "heads": 4, "hidden": 96, "vocab": 64},
    "llama_decode": {"max_seq": 32, "pos": 7, "dim": 64, "heads": 4, "hidden": 96, "vocab": 64},
    "gpt2": {"seq": 16, "dim": 64, "heads": 4, "vocab": 64, "max_positions": 32},
    "resnet18": {"image": 32, "width": 8, "classes": 10},
    "mobilenet_v2": {"image": 32, "width": 0.35, "classes": 10},
}


def test_every_zoo_model_has_a_small_config() -> None:
    assert set(SMALL) == set(ZOO)


@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_model_plans_and_runs_on_every_backend(name) -> None:
    model = build_model(name, **SMALL[name])
    prog = tg.compile(model.graph)
    plan = prog.plan
    verify_assignment(plan.buffers, Assignment(dict(plan.buffer_offsets), plan.arena_size), 64)
    assert plan.lower_bound <= plan.arena_size <= plan.total_unshared
    inputs = model.inputs(0)
    want = run_reference(model.graph, inputs)
    for got, expected in zip(prog.run(inputs, backend="arena"), want, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    for got, expected in zip(prog.run(inputs, backend="mlx"), want, strict=True):
        assert got.shape == expected.shape and got.dtype == expected.dtype
        scale = max(float(np.max(np.abs(expected))), 1.0)
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * scale)


def test_decode_step_writes_the_new_row_into_each_cache() -> None:
    config = SMALL["llama_decode"]
    model = build_model("llama_decode", **config)
    inputs = model.inputs(0)
    outputs = run_reference(model.graph, inputs)
    k_cache = outputs[1]
    old = inputs["k_cache0"]
    pos = config["pos"]
    np.testing.assert_array_equal(np.delete(k_cache, pos, axis=2), np.delete(old, pos, axis=2))
    assert not np.array_equal(k_cache[:, :, pos], old[:, :, pos])


def test_unknown_model_and_field_are_named() -> None:
    with pytest.raises(tg.GraphError, match="unknown model 'bert'"):
        build_model("bert")
    with pytest.raises(tg.GraphError, match=r"unknown config field\(s\) \['depth'\]"):
        build_model("mlp", depth=3)
