"""A quantized KV cache (`llama_generation(kv_bits=...)`): greedy tokens equal the NumPy
reference loop of the same configuration on every backend; the cache rows, dequantized,
are the reference's stored rows to within one quantization step (a code may round the
other way when float32 and float64 k differ at a rounding boundary); the arena equals
the reference interpreter bit for bit, state bytes included; the state region shrinks to
what the codes, scales and biases take; bad widths, groups and head sizes are named."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.errors import GraphError, RunError, ShapeError
from tensorgraph.models.generation import (
    generate,
    generation_layout,
    llama_generation,
    llama_weights,
    reference_generate,
)
from tensorgraph.models.llama import LlamaConfig
from tensorgraph.runtime.quant_kernels import QuantSpec, dequantize
from tests.models.test_generation import assert_tokens_equal


@st.composite
def cases(draw: st.DrawFn) -> tuple:
    """(config, max_seq, buckets, prompt, new tokens, kv_bits, kv_group_size): small
    Llamas whose head size (32 or 64) the group divides."""
    heads = draw(st.sampled_from((1, 2)))
    head_dim = draw(st.sampled_from((32, 64)))
    config = LlamaConfig(
        batch=draw(st.integers(1, 2)),
        dim=heads * head_dim,
        heads=heads,
        hidden=draw(st.sampled_from((16, 40))),
        layers=draw(st.integers(1, 2)),
        vocab=draw(st.sampled_from((16, 37))),
    )
    group = draw(st.sampled_from([g for g in (32, 64) if head_dim % g == 0]))
    bits = draw(st.sampled_from((3, 4, 8)))
    max_seq = draw(st.integers(4, 16))
    buckets = tuple(draw(st.lists(st.integers(1, max_seq), min_size=1, max_size=2, unique=True)))
    length = draw(st.integers(1, min(max(buckets), max_seq - 1)))
    tokens = draw(st.integers(1, max_seq - length))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    prompt = rng.integers(0, config.vocab, (config.batch, length)).astype(np.int32)
    return config, max_seq, buckets, prompt, tokens, bits, group


def compiled(config, max_seq, buckets, bits, group) -> object:
    entries = llama_generation(
        config, max_seq=max_seq, buckets=buckets, kv_bits=bits, kv_group_size=group
    )
    return tg.compile(entries)


def assert_cache_rows_match(state, reference, config, bits: int, group: int) -> None:
    """Each quantized cache's written rows, dequantized, equal the reference's stored
    rows to within one step (the group's scale) and float32 rounding."""
    spec = QuantSpec("affine", bits, group)
    for i in range(config.layers):
        for name, rows in ((f"k{i}", reference.keys[i]), (f"v{i}", reference.values[i])):
            count = rows.shape[2]
            codes, scales, biases = (
                np.asarray(state[name + suffix])[:, :, :count]
                for suffix in ("", ".scales", ".biases")
            )
            assert codes.dtype == np.uint32 and scales.dtype == biases.dtype == np.float32
            got = dequantize(codes, scales, biases, spec).astype(np.float64)
            step = np.repeat(np.abs(scales.astype(np.float64)), group, axis=-1)
            gap = np.abs(got - rows)
            assert (gap <= step + 1e-4 * np.maximum(1.0, np.abs(rows))).all(), name
            assert np.mean(gap > 1e-4 * np.maximum(1.0, np.abs(rows))) < 0.01, (
                f"{name}: more than 1% of the values a whole step off the reference"
            )


@settings(max_examples=10)
@given(case=cases())
def test_tokens_and_cache_rows_equal_the_reference_on_the_oracles(case) -> None:
    config, max_seq, buckets, prompt, tokens, bits, group = case
    program = compiled(config, max_seq, buckets, bits, group)
    weights = llama_weights(config)
    reference = reference_generate(config, weights, prompt, tokens, bits, group)
    results = {b: generate(program, prompt, tokens, backend=b) for b in ("numpy", "arena")}
    for result in results.values():
        assert_tokens_equal(result.tokens, reference)
    assert_cache_rows_match(results["numpy"].state, reference, config, bits, group)
    for name in (n.name for n in program.entries["decode"].graph.states):  # arena = reference
        want = np.asarray(results["numpy"].state[name])
        got = np.asarray(results["arena"].state[name])
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), name


@settings(max_examples=5)
@given(case=cases())
def test_mlx_tokens_equal_the_reference(case) -> None:
    config, max_seq, buckets, prompt, tokens, bits, group = case
    program = compiled(config, max_seq, buckets, bits, group)
    reference = reference_generate(config, llama_weights(config), prompt, tokens, bits, group)
    result = generate(program, prompt, tokens, backend="mlx")
    assert_tokens_equal(result.tokens, reference)
    assert_cache_rows_match(result.state, reference, config, bits, group)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("backend", ["numpy", "arena", "mlx"])
def test_logits_follow_the_quantized_reference_not_the_float_one(bits, backend) -> None:
    """Teacher-forced on the reference's tokens, each step's logits are the quantized
    reference's to float32 rounding, while the float cache's differ by far more: the
    program reads the quantized rows, its own included."""
    config = LlamaConfig(dim=64, heads=2, hidden=40, layers=2, vocab=37)
    program = compiled(config, 16, (4,), bits, 32)
    weights = llama_weights(config)
    reference = reference_generate(config, weights, [1, 2, 3], 6, bits, 32)
    floating = reference_generate(config, weights, [1, 2, 3], 6)
    state = program.new_state(backend)
    feeds = {"tokens": np.array([[1, 2, 3, 0]], np.int32), "length": np.array(3, np.int32)}
    logits = [program.run("prefill4", feeds, backend=backend, state=state)[0]]
    for step in range(1, 6):
        feeds = {"token": reference.tokens[:, step - 1 : step], "pos": np.array(2 + step)}
        logits.append(program.run("decode", feeds, backend=backend, state=state)[0])
    gaps = [np.max(np.abs(got - want)) for got, want in zip(logits, reference.logits, strict=True)]
    drift = [np.max(np.abs(a - b)) for a, b in zip(floating.logits, reference.logits, strict=True)]
    assert max(gaps) <= 1e-4, gaps
    assert drift[0] == 0 and min(drift[1:]) > 10 * max(gaps), (
        "the prompt attends in float; every decode step reads the quantized cache"
    )


def test_state_region_shrinks_to_codes_scales_and_biases() -> None:
    """The zoo's heads (64 values) in groups of 64: 8 bits take 64 bytes of codes and 8
    of scale and bias a row against 256 in float32 (0.28x), 4 bits 32 + 8 (0.16x)."""
    config = LlamaConfig(dim=128, heads=2, hidden=40, layers=2, vocab=37)
    sizes = {
        bits: tg.compile(llama_generation(config, max_seq=32, buckets=(8,), kv_bits=bits))
        for bits in (None, 8, 4)
    }
    rows = 2 * config.layers * config.batch * config.heads * 32  # k and v, every layer
    assert sizes[None].state_size == rows * 256
    for bits, per_row in ((8, 64 + 8), (4, 32 + 8)):
        program = sizes[bits]
        assert program.state_size == rows * per_row
        assert program.state_size <= 0.30 * sizes[None].state_size
        states = {n.name: (n.shape, n.dtype) for n in program.entries["decode"].graph.states}
        shape = (config.batch, config.heads, 32)
        assert states["k1"] == ((*shape, 64 * bits // 32), tg.uint32)
        assert states["v0.scales"] == states["v0.biases"] == ((*shape, 1), tg.float32)
        assert generation_layout(program).max_seq == 32
        memory = program.memory()
        assert memory.state_size == program.state_size


def test_the_float_cache_is_unchanged_by_default() -> None:
    config = LlamaConfig(dim=32, heads=2, hidden=24, layers=1, vocab=20)
    plain = llama_generation(config, max_seq=8, buckets=(4,))
    default = llama_generation(config, max_seq=8, buckets=(4,), kv_bits=None, kv_group_size=32)
    assert {n: g.to_json() for n, g in plain.items()} == {
        n: g.to_json() for n, g in default.items()
    }
    assert {n.name for n in plain["decode"].states} == {"k0", "v0"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kv_bits": 7}, r"kv_bits must be one of \(2, 3, 4, 5, 6, 8\) .* not 7"),
        ({"kv_bits": True}, "kv_bits must be one of .* not True"),
        ({"kv_bits": "8"}, "kv_bits must be one of .* not '8'"),
        ({"kv_bits": 8, "kv_group_size": 16}, r"kv_group_size must be one of \(32, 64, 128\)"),
        ({"kv_bits": 4, "kv_group_size": 64}, "kv_group_size 64 does not divide the head size 32"),
    ],
)
def test_bad_cache_quantization_is_named(kwargs, message) -> None:
    config = LlamaConfig(dim=64, heads=2, hidden=16, vocab=16)
    with pytest.raises(GraphError, match=message):
        llama_generation(config, max_seq=8, buckets=(4,), **kwargs)


def test_the_reference_names_a_bad_cache_quantization() -> None:
    config = LlamaConfig(dim=64, heads=2, hidden=16, vocab=16)
    weights = llama_weights(config)
    with pytest.raises(ShapeError, match=r"bits .* not 7"):
        reference_generate(config, weights, [1], 2, kv_bits=7)
    with pytest.raises(ShapeError, match="kv_group_size 64 does not divide the head size 32"):
        reference_generate(config, weights, [1], 2, kv_bits=8, kv_group_size=64)


@pytest.mark.parametrize("backend", ["numpy", "arena", "mlx"])
def test_a_refused_position_leaves_every_cache_part_unchanged(backend) -> None:
    config = LlamaConfig(dim=64, heads=2, hidden=24, layers=1, vocab=20)
    program = compiled(config, 12, (4, 8), 4, 32)
    state = program.new_state(backend)
    generate(program, [3, 1, 4, 1, 5], 3, backend=backend, state=state)
    names = [n.name for n in program.entries["decode"].graph.states]
    before = {name: np.array(state[name]) for name in names}
    assert any(np.any(a != 0) for a in before.values()), "the prefill wrote the caches"
    feeds = {"token": np.zeros((1, 1), np.int32), "pos": np.array(12, np.int32)}
    with pytest.raises(RunError, match=r"12.*12"):
        program.run("decode", feeds, backend=backend, state=state)
    feeds["pos"] = np.array(8, np.int32)
    with pytest.raises(RunError, match="index 8 is out of range for axis 0 of size 8"):
        program.run("decode8", feeds, backend=backend, state=state)
    for name, value in before.items():
        assert np.array_equal(np.array(state[name]), value), name


def test_a_saved_program_keeps_its_quantized_cache(tmp_path) -> None:
    config = LlamaConfig(dim=64, heads=2, hidden=24, layers=1, vocab=20)
    program = compiled(config, 12, (4,), 8, 32)
    program.save(str(tmp_path / "kv.tgp"))
    loaded = tg.load(str(tmp_path / "kv.tgp"))
    assert loaded.state_size == program.state_size
    first = generate(program, [1, 2], 6, backend="arena")
    second = generate(loaded, [1, 2], 6, backend="arena")
    assert np.array_equal(first.tokens, second.tokens)
    for name in ("k0", "k0.scales", "k0.biases", "v0", "v0.scales", "v0.biases"):
        assert np.asarray(first.state[name]).tobytes() == np.asarray(second.state[name]).tobytes()
