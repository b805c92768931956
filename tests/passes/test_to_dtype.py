"""`tg.to_dtype` (passes/to_dtype.py): random graphs and the zoo in float16 and bfloat16,
with and without autocast's float32 ops. The converted graph keeps its signature, the
arena equals the reference bit for bit, MLX agrees with the reference within the
rounding a value of that dtype can carry, and the float32 model is matched within what
reduced precision allows."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.errors import DTypeError
from tensorgraph.ir.dtypes import as_dtype
from tensorgraph.models import build_model
from tensorgraph.models.generation import llama_generation
from tensorgraph.passes.to_dtype import FLOAT32_OPS, REDUCED_OPS, convert, rounding_tolerance
from tests.strategies import feeds, graphs

HALVES = (tg.bfloat16, tg.float16)


def rounding_bound(graph: tg.Graph, dtype: np.dtype, scale: float) -> float:
    return rounding_tolerance(graph, as_dtype(dtype), scale)


def assert_close_by_rounding(
    got: np.ndarray, want: np.ndarray, graph: tg.Graph, dtype: tg.DType
) -> None:
    """Within the rounding of `graph`'s reduced `dtype`: an output kept in float32 (a
    sum, a softmax) carries the roundings of the reduced values it was computed from,
    so its bound is the reduced dtype's too; integers and bools exactly."""
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
        return
    finite = np.isfinite(want.astype(np.float64))
    scale = float(np.abs(want.astype(np.float64)[finite]).max(initial=1.0))
    atol = rounding_bound(graph, dtype.to_numpy(), scale)
    np.testing.assert_allclose(
        got.astype(np.float64), want.astype(np.float64), rtol=0, atol=atol, equal_nan=True
    )


@settings(max_examples=30)
@given(graphs(), st.sampled_from(HALVES), st.booleans())
def test_random_graphs_convert_and_agree(graph: tg.Graph, dtype: tg.DType, keep: bool) -> None:
    result = convert(graph, dtype, keep)
    converted = result.graph
    assert [n.name for n in converted.inputs] == [n.name for n in graph.inputs]
    assert len(converted.outputs) == len(graph.outputs)
    for node in converted.inputs + converted.params:
        assert node.dtype == dtype  # every float32 boundary value converted
    if not keep:
        assert all(converted.node(o).dtype == dtype for o in converted.outputs)
    inputs, params = feeds(converted)
    prog = tg.compile(converted)
    ref = prog.run(inputs, params=params, backend="numpy")
    for got, want in zip(prog.run(inputs, params=params, backend="arena"), ref, strict=True):
        assert got.tobytes() == want.tobytes()
    for got, want in zip(prog.run(inputs, params=params, backend="mlx"), ref, strict=True):
        assert_close_by_rounding(got, want, converted, dtype)


def test_autocast_keeps_float32_ops_and_reduces_contractions() -> None:
    g = tg.Graph("attention-ish")
    x = g.input("x", (4, 8))
    w = g.param("w", (8, 8), tg.float32, np.eye(8, dtype=np.float32))
    probs = tg.softmax(x @ w, axis=-1)
    g.output(probs @ w, tg.sum(probs, axis=0))
    kept = tg.to_dtype(g, tg.bfloat16)
    by_op = {n.op: n for n in kept.nodes}
    assert by_op["softmax"].dtype == tg.float32 and by_op["sum"].dtype == tg.float32
    assert [kept.node(i).dtype for i in by_op["matmul"].inputs] == [tg.bfloat16] * 2
    assert [kept.node(o).dtype for o in kept.outputs] == [tg.bfloat16, tg.float32]
    plain = tg.to_dtype(g, tg.bfloat16, keep_float32=False)
    assert {n.dtype for n in plain.nodes} == {tg.bfloat16}
    assert plain.param_values["w"].dtype == np.dtype(ml_dtypes.bfloat16)
    assert "softmax" in FLOAT32_OPS and "matmul" in REDUCED_OPS


@pytest.mark.parametrize("name", ["llama", "gpt2", "resnet18"])
@pytest.mark.parametrize("keep", [True, False])
def test_zoo_in_bfloat16_follows_float32(name: str, keep: bool) -> None:
    """Each zoo model in bfloat16: the arena plan halves or better (activations in two
    bytes), every backend agrees, and the float32 model's outputs are met within the
    rounding bound."""
    model = build_model(name)
    inputs = model.make_inputs(0)
    full = tg.compile(model.graph)
    want = full.run(inputs, backend="numpy")
    converted = tg.to_dtype(model.graph, tg.bfloat16, keep_float32=keep)
    prog = tg.compile(converted)
    # half the bytes, but for the small tables autocast computes in float32 (rope's)
    assert prog.plan.constant_size <= 0.51 * full.plan.constant_size
    assert prog.plan.arena_size <= full.plan.arena_size
    half_inputs = {
        k: v.astype(ml_dtypes.bfloat16) if v.dtype == np.float32 else v for k, v in inputs.items()
    }
    ref = prog.run(half_inputs, backend="numpy")
    for got, expected in zip(prog.run(half_inputs, backend="arena"), ref, strict=True):
        assert got.tobytes() == expected.tobytes()
    for got, expected in zip(prog.run(half_inputs, backend="mlx"), ref, strict=True):
        assert_close_by_rounding(got, expected, converted, tg.bfloat16)
    for got, expected in zip(ref, want, strict=True):
        scale = float(np.abs(expected).max())
        bound = rounding_bound(converted, ml_dtypes.bfloat16, scale)
        assert np.abs(got.astype(np.float64) - expected).max() <= bound


def test_states_convert_with_their_updates() -> None:
    decode = llama_generation(max_seq=32, buckets=(8,), windows=())["decode"]
    converted = tg.to_dtype(decode, tg.float16)
    assert len(converted.states) == 4 and {s.dtype for s in converted.states} == {tg.float16}
    prog = tg.compile(converted)  # verifies: every update in its state's dtype
    feeds = {"token": np.array([[3]], np.int32), "pos": np.array(0, np.int32)}
    (logits,) = prog.run(feeds, backend="arena")
    assert logits.dtype == np.float16 and np.isfinite(logits).all()
    assert np.abs(prog.state("arena")["k0"][..., 0, :]).max() > 0  # the cache was written


@pytest.mark.parametrize("dtype", [tg.int32, tg.bool_, "int8"])
def test_only_floats_are_targets(dtype: object) -> None:
    g = tg.Graph("g")
    g.output(tg.relu(g.input("x", (2,))))
    with pytest.raises(DTypeError, match="float16, bfloat16 or float32"):
        tg.to_dtype(g, dtype)
    assert tg.to_dtype(g, tg.float32) is g
