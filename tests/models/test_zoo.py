"""Every zoo model compiles, its plan verifies, and the arena and MLX backends agree with
the reference interpreter run on the unoptimised graph, in each model dtype; configs are
checked and overridable; parameter counts match the architectures' formulas."""

import numpy as np
import pytest

import tensorgraph as tg
from tensorgraph.ir.dtypes import as_dtype
from tensorgraph.models import (
    ZOO,
    LlamaConfig,
    build_model,
    gpt2,
    llama,
    mlp,
    param_count,
)
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

# MLX against the reference: the largest error allowed relative to the output's largest
# magnitude (at least 1). float32 keeps ~7 digits; float16 ~3; bfloat16 ~2, and every
# layer of a deep model rounds again.
RELATIVE_TOLERANCE = {tg.float32: 1e-4, tg.float16: 1e-2, tg.bfloat16: 5e-2}


def assert_close(got: np.ndarray, want: np.ndarray, dtype: tg.DType) -> None:
    assert got.shape == want.shape
    assert got.dtype == want.dtype
    got64, want64 = got.astype(np.float64), want.astype(np.float64)
    scale = max(float(np.max(np.abs(want64))), 1.0)
    tolerance = RELATIVE_TOLERANCE[dtype] * scale if as_dtype(want.dtype).is_float else 0.0
    np.testing.assert_allclose(got64, want64, rtol=0, atol=tolerance)


def plan_is_valid(prog: tg.Program) -> None:
    plan = prog.plan
    assignment = Assignment(dict(plan.buffer_offsets), plan.arena_size)
    verify_assignment(plan.buffers, assignment, plan.alignment)
    assert plan.lower_bound <= plan.arena_size <= plan.total_unshared


def test_every_zoo_model_has_a_small_config() -> None:
    assert set(SMALL) == set(ZOO)


@pytest.mark.parametrize("dtype", [tg.float32, tg.float16, tg.bfloat16], ids=str)
@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_model_plans_and_runs_on_every_backend(name, dtype) -> None:
    model = build_model(name, **SMALL[name], dtype=dtype.name)
    prog = tg.compile(model.graph)
    plan_is_valid(prog)
    inputs = model.inputs(0)
    want = run_reference(model.graph, inputs)
    float_outputs = [model.graph.node(i).dtype for i in model.graph.outputs]
    assert float_outputs == [dtype] * len(want), "the model is built in the dtype asked for"
    for got, expected in zip(prog.run(inputs, backend="arena"), want, strict=True):
        np.testing.assert_array_equal(got, expected)  # the same kernels, in planned memory
    for got, expected in zip(prog.run(inputs, backend="mlx"), want, strict=True):
        assert_close(got, expected, dtype)


@pytest.mark.parametrize("name", sorted(ZOO))
def test_default_config_compiles_to_a_valid_plan(name) -> None:
    prog = tg.compile(build_model(name).graph)
    plan_is_valid(prog)
    assert len(prog.plan.buffers) > 0


def test_decode_step_writes_the_new_row_into_each_cache() -> None:
    config = SMALL["llama_decode"]
    model = build_model("llama_decode", **config)
    inputs = model.inputs(0)
    outputs = run_reference(model.graph, inputs)
    assert len(outputs) == 1 + 2 * 2, "logits, then k and v caches of both layers"
    pos = config["pos"]
    names = ["k_cache0", "v_cache0", "k_cache1", "v_cache1"]
    for cache, name in zip(outputs[1:], names, strict=True):
        old = inputs[name]
        np.testing.assert_array_equal(np.delete(cache, pos, axis=2), np.delete(old, pos, axis=2))
        assert not np.array_equal(cache[:, :, pos], old[:, :, pos])


def count(graph: tg.Graph, op: str) -> int:
    return sum(node.op == op for node in graph.nodes)


@pytest.mark.parametrize("name", ["llama", "llama_decode", "gpt2"])
def test_decoders_are_built_on_the_fused_ops(name) -> None:
    layers = 3
    graph = build_model(name, **SMALL[name], layers=layers).graph
    norm = "layer_norm" if name == "gpt2" else "rms_norm"
    # two norms per block plus the final one; q and k rotated per Llama layer
    assert count(graph, norm) == 2 * layers + 1
    assert count(graph, "scaled_dot_product_attention") == layers
    assert count(graph, "rope") == (0 if name == "gpt2" else 2 * layers)
    # no unfused attention, softmax, mask or rotary table is left to plan
    assert {"softmax", "where", "cos", "sin", "rsqrt"}.isdisjoint(n.op for n in graph.nodes)


# Declared workspace of the SMALL configs (2 layers), derived from the op definitions:
# - llama, seq 16, 4 heads of 16, causal: attention scores 4*16*16*4 B = 4096 (softmax in
#   place) plus scaled queries 4*16*16*4 B = 4096, plus the causal mask 16*16 B = 256 and
#   its positions 4*(16+16) B = 128: 8576 per layer; rope cos+sin tables 2*16*8*4 B =
#   1024 plus one product of the rotated features 4*16*16*4 B = 4096, for each of q and
#   k; rms_norm 16 rows * 4 B = 64, five norms: 2*8576 + 4*5120 + 5*64 = 37,952.
# - llama_decode, one query over pos + 1 = 8 cached rows, no mask: scores 4*1*8*4 B = 128
#   plus scaled query 4*1*16*4 B = 256 per layer; rope tables 2*1*8*4 B = 64 plus product
#   4*1*16*4 B = 256, four of them; norms 1 row * 4 B, five: 2*384 + 4*320 + 5*4 = 2068.
# - gpt2, seq 16, causal: attention 8576 per layer as llama's; layer_norm mean and 1/std,
#   2*16*4 B = 128, five norms: 2*8576 + 5*128 = 17,792.
WORKSPACE = {"llama": 37_952, "llama_decode": 2_068, "gpt2": 17_792}


@pytest.mark.parametrize("name", sorted(WORKSPACE))
def test_decoder_workspace_is_planned_for_its_steps(name) -> None:
    prog = tg.compile(build_model(name, **SMALL[name]).graph)
    workspace = prog.plan.liveness.workspace
    assert sum(b.size for b in workspace.values()) == WORKSPACE[name]
    for node_id, buffer in workspace.items():
        step = prog.plan.liveness.step_of[node_id]
        assert (buffer.start, buffer.end) == (step, step + 1)
        assert buffer.id in prog.plan.buffer_offsets
    # the arena holds the largest step: the attention step's inputs, result and scores
    assert prog.plan.arena_size >= max(b.size for b in workspace.values())


def test_builders_take_a_config_or_keywords() -> None:
    sizes = {"seq": 8, "dim": 32, "heads": 2, "hidden": 48, "vocab": 16, "layers": 1}
    by_config = llama(LlamaConfig(**sizes)).graph
    assert llama(**sizes).graph == by_config
    assert llama(LlamaConfig(seq=8), **{k: v for k, v in sizes.items() if k != "seq"}).graph == (
        by_config
    )
    assert build_model("llama", **sizes).graph == by_config


def test_weights_and_inputs_are_seeded() -> None:
    first, second = build_model("gpt2", **SMALL["gpt2"]), build_model("gpt2", **SMALL["gpt2"])
    assert first.graph == second.graph, "bound weights are the same every time"
    for name, value in first.inputs(3).items():
        np.testing.assert_array_equal(value, second.inputs(3)[name])
    assert not np.array_equal(first.inputs(3)["tokens"], first.inputs(4)["tokens"])


def test_param_counts_follow_the_architectures() -> None:
    b, f, h, n, c = 4, 32, 64, 3, 10
    model = mlp(batch=b, features=f, hidden=h, layers=n, classes=c)
    assert model.param_count == f * h + h + (n - 1) * (h * h + h) + h * c

    d, hidden, vocab, layers = 64, 96, 64, 2
    model = llama(seq=16, dim=d, heads=4, hidden=hidden, vocab=vocab, layers=layers)
    per_layer = 4 * d * d + 3 * d * hidden + 2 * d
    assert model.param_count == 2 * vocab * d + layers * per_layer + d

    positions = 32
    model = gpt2(seq=16, dim=d, heads=4, vocab=vocab, layers=layers, max_positions=positions)
    per_layer = 12 * d * d + 13 * d  # qkv, proj, 4x MLP weights and biases, 2 LayerNorms
    assert model.param_count == (vocab + positions) * d + layers * per_layer + 2 * d + d * vocab
    assert param_count(model.graph) == sum(v.size for v in model.graph.param_values.values())


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_cnn_param_counts_grow_with_the_square_of_width(name) -> None:
    narrow = build_model(name, **SMALL[name])
    wide = build_model(name, **{**SMALL[name], "width": SMALL[name]["width"] * 2})
    assert wide.param_count > 2 * narrow.param_count, "conv weights are out x in channels"


@pytest.mark.parametrize(
    ("name", "config", "message"),
    [
        ("mlp", {"batch": 0}, r"MLPConfig\.batch must be a positive int but got 0"),
        ("mlp", {"batch": 2.5}, r"MLPConfig\.batch must be a positive int but got 2\.5"),
        ("mlp", {"layers": True}, r"MLPConfig\.layers must be a positive int but got True"),
        ("llama", {"heads": 3}, r"LlamaConfig: dim 256 is not divisible by heads 3"),
        ("llama", {"dim": 12, "heads": 4}, r"LlamaConfig: head size dim / heads = 3 is odd"),
        ("llama", {"eps": 0.0}, r"LlamaConfig\.eps must be a positive number but got 0\.0"),
        ("llama", {"dtype": "int32"}, r"LlamaConfig\.dtype must be one of .* but got 'int32'"),
        ("llama_decode", {"pos": 128}, r"pos 128 must lie in \[0, 128\)"),
        ("llama_decode", {"pos": -1}, r"LlamaDecodeConfig\.pos must be a non-negative int"),
        ("gpt2", {"seq": 200}, r"GPT2Config: seq 200 exceeds max_positions 128"),
        ("mobilenet_v2", {"width": 0}, r"MobileNetConfig\.width must be a positive number"),
        ("resnet18", {"image": "big"}, r"ResNetConfig\.image must be a positive int but got 'big'"),
    ],
)
def test_bad_config_values_are_named(name, config, message) -> None:
    with pytest.raises(tg.GraphError, match=message):
        build_model(name, **config)


def test_unknown_model_and_field_are_named() -> None:
    with pytest.raises(tg.GraphError, match="unknown model 'bert'"):
        build_model("bert")
    with pytest.raises(tg.GraphError, match=r"MLPConfig: unknown config field\(s\) \['depth'\]"):
        build_model("mlp", depth=3)
    with pytest.raises(tg.GraphError, match="expected a MLPConfig but got LlamaConfig"):
        mlp(LlamaConfig())
