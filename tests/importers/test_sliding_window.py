"""Sliding-window caches (importers.sliding_window): transformers models whose cache has
sliding layers, imported by from_torch_generation with each sliding layer's keys and
values held in a ring of the window's length, against transformers itself: greedy
tokens of `model.generate`, and (stronger, since a tiny random model's tokens repeat)
the logits of the model's own forward over the whole sequence at every position,
teacher-forced through our prefill and decode. The ring's bookkeeping alone is checked
in torch eager against a list of the positions written.

Window 8 with one prefill bucket of 16: a prompt of 13 is longer than the window, a
prompt of 6 leaves 10 padding rows (more than the window: masked out of the ring
write), and a few decode steps wrap the ring. Each model is exported once per module
(strict export: about 4 s per entry, two entries)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch", reason="the models extra is not installed")
pytest.importorskip("transformers", reason="the models extra is not installed")

import tensorgraph as tg  # noqa: E402
from tensorgraph.importers.generation import from_torch_generation  # noqa: E402
from tensorgraph.models.generation import generate  # noqa: E402
from tests.models_suite.catalog import _transformers  # noqa: E402

BACKENDS = ("numpy", "arena", "mlx")
MAX_SEQ, BUCKET, WINDOW, VOCAB = 64, 16, 8, 128
SMALL = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,  # MLX's smallest quantization group: the caches can be quantized
    max_position_embeddings=MAX_SEQ,
    sliding_window=WINDOW,
)
SEQUENCE = [(37 * k + 11) % VOCAB for k in range(30)]  # teacher-forced tokens


def _imported(config: object) -> tuple[torch.nn.Module, tg.MultiProgram]:
    torch.manual_seed(0)
    model = _transformers().AutoModelForCausalLM.from_config(config).eval()
    entries = from_torch_generation(model, max_seq=MAX_SEQ, prompt_buckets=(BUCKET,))
    return model, tg.compile(entries)


@pytest.fixture(scope="module")
def mistral() -> tuple[torch.nn.Module, tg.MultiProgram]:
    """Every layer slides (no layer_types: one 4-D mask), attention through sdpa."""
    return _imported(_transformers().MistralConfig(**SMALL))


@pytest.fixture(scope="module")
def gemma2() -> tuple[torch.nn.Module, tg.MultiProgram]:
    """Layer 0 slides, layer 1 is global (layer_types: a mask per type); eager attention
    with attention-logit soft-capping, final-logit soft-capping."""
    return _imported(_transformers().Gemma2Config(**SMALL))


def transformers_greedy(model, prompt: list[int], steps: int) -> list[int]:
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=steps, do_sample=False)
    return out[0, len(prompt) :].tolist()


def transformers_logits(model, tokens: list[int]) -> np.ndarray:
    """The model's logits (len(tokens), V) over the whole sequence, no cache."""
    with torch.no_grad():
        return model(torch.tensor([tokens])).logits[0].numpy()


def prefill(multi, state, backend: str, prompt: list[int], position: int = 0) -> np.ndarray:
    ids = np.zeros((1, BUCKET), np.int64)
    ids[0, : len(prompt)] = prompt
    feeds = {"input_ids": ids, "position": np.int64(position), "length": np.int64(len(prompt))}
    return multi.run(f"prefill{BUCKET}", feeds, backend=backend, state=state)[0][0, -1]


def decode(multi, state, backend: str, token: int, position: int) -> np.ndarray:
    feeds = {"input_ids": np.array([[token]], np.int64), "position": np.int64(position)}
    return multi.run("decode", feeds, backend=backend, state=state)[0][0, -1]


def teacher_forced(multi, backend: str, chunks: list[int]) -> np.ndarray:
    """Our logits at positions sum(chunks) - 1 onwards: SEQUENCE prefilled in chunks of
    these lengths (each at its position), then decoded one token at a time."""
    state, position, got = multi.new_state(backend), 0, []
    for size in chunks:
        last = prefill(multi, state, backend, SEQUENCE[position : position + size], position)
        position += size
    got.append(last)
    for k in range(position, len(SEQUENCE)):
        got.append(decode(multi, state, backend, SEQUENCE[k], k))
    return np.stack(got)


@pytest.mark.parametrize("backend", BACKENDS)
def test_mistral_tokens_equal_transformers_as_the_ring_wraps(mistral, backend: str) -> None:
    # 6 prompt tokens + 18 new ones: positions 0-23 go round the 8-row ring 3 times
    model, multi = mistral
    prompt = [3, 4, 5, 6, 7, 8]
    want = transformers_greedy(model, prompt, 18)
    assert len(want) == 18  # no EOS: every token is compared
    assert generate(multi, np.array(prompt), 18, backend=backend).tokens[0].tolist() == want


@pytest.mark.parametrize("backend", BACKENDS)
def test_mistral_prompt_longer_than_the_window(mistral, backend: str) -> None:
    model, multi = mistral
    prompt = SEQUENCE[:13]
    want = transformers_greedy(model, prompt, 10)
    got = generate(multi, np.array(prompt), 10, backend=backend).tokens[0].tolist()
    assert got[: len(want)] == want
    assert len(want) == 10 or want[-1] == model.config.eos_token_id


@pytest.mark.parametrize("chunks", [[13], [6], [13, 5], [3, 9, 2]])
def test_mistral_logits_equal_transformers_forward(mistral, chunks: list[int]) -> None:
    """Every position's logits, from the first after the prompt to the end of SEQUENCE.
    [13, 5]: the second chunk starts at 13 over a full ring and leaves 11 padding rows
    that would overwrite slots the next queries still read, were they written."""
    model, multi = mistral
    start = sum(chunks) - 1
    want = transformers_logits(model, SEQUENCE)[start:]
    np.testing.assert_allclose(teacher_forced(multi, "numpy", chunks), want, atol=2e-5)


@pytest.mark.parametrize("backend", ["arena", "mlx"])
def test_mistral_logits_on_the_other_backends(mistral, backend: str) -> None:
    model, multi = mistral
    want = transformers_logits(model, SEQUENCE)[17:]
    np.testing.assert_allclose(teacher_forced(multi, backend, [13, 5]), want, atol=1e-4)


def test_the_window_changes_the_logits(mistral) -> None:
    """The comparison above can fail: the same weights with full attention give other
    logits once a query's keys reach past the window (position >= 8)."""
    model, multi = mistral
    full = copy.deepcopy(model)
    full.config.sliding_window = None
    gap = np.abs(transformers_logits(full, SEQUENCE) - transformers_logits(model, SEQUENCE))
    assert gap[:WINDOW].max() < 1e-5 and gap[WINDOW:].max(axis=-1).min() > 1e-3
    ours = teacher_forced(multi, "numpy", [13])
    assert np.abs(ours - transformers_logits(full, SEQUENCE)[12:]).max() > 1e-3


@pytest.mark.parametrize("backend", BACKENDS)
def test_gemma2_alternating_layers_generate_like_transformers(gemma2, backend: str) -> None:
    model, multi = gemma2
    assert model.config.attn_logit_softcapping and model.config.final_logit_softcapping
    prompt = [3, 4, 5, 6, 7, 8]
    want = transformers_greedy(model, prompt, 20)
    got = generate(multi, np.array(prompt), 20, backend=backend).tokens[0].tolist()
    assert got[: len(want)] == want
    assert len(want) == 20 or want[-1] == model.config.eos_token_id


@pytest.mark.parametrize("chunks", [[13], [6, 7]])
def test_gemma2_logits_equal_transformers_forward(gemma2, chunks: list[int]) -> None:
    model, multi = gemma2
    want = transformers_logits(model, SEQUENCE)[sum(chunks) - 1 :]
    np.testing.assert_allclose(teacher_forced(multi, "numpy", chunks), want, atol=2e-5)


def test_state_shapes_follow_the_window_and_max_seq(mistral, gemma2) -> None:
    """Sliding layers hold (B, kv heads, window, head dim) rings, global layers (B, kv
    heads, max_seq, head dim) caches, as the config says layer by layer."""
    for model, multi in (mistral, gemma2):
        config = model.config
        types = getattr(config, "layer_types", None) or ["sliding_attention"] * 2
        want = set()
        for i, kind in enumerate(types[: config.num_hidden_layers]):
            ring = kind == "sliding_attention"
            rows = config.sliding_window if ring else MAX_SEQ
            shape = (1, config.num_key_value_heads, rows, config.head_dim)
            want |= {(f"{kv}_{'ring' if ring else 'cache'}_{i}", shape) for kv in ("key", "value")}
        for program in multi.entries.values():
            assert {(s.name, s.shape) for s in program.graph.states} == want


def test_decode_writes_one_ring_row_in_place(mistral) -> None:
    """A decode step's ring write is one slice_update at a run-time row (position mod
    the window), not a rewrite of the ring."""
    _, multi = mistral
    graph = multi.entries["decode"].graph
    writes = [graph.node(i) for i in graph.state_updates.values()]
    assert [node.op for node in writes] == ["slice_update"] * 4
    assert all(graph.node(node.inputs[1]).shape[2] == 1 for node in writes)


def test_a_window_as_long_as_the_cache_keeps_a_plain_cache() -> None:
    """window >= max_seq: the sliding layers keep max_seq rows (no ring, nothing to
    wrap), and the masks still come from the importer."""
    from tensorgraph.importers.sliding_window import layer_kinds

    config = _transformers().Gemma2Config(**{**SMALL, "sliding_window": MAX_SEQ})
    config._attn_implementation = "eager"
    kinds = layer_kinds(config, MAX_SEQ)
    assert [(k.type, k.window, k.ring) for k in kinds] == [
        ("sliding_attention", MAX_SEQ, False),
        ("full_attention", None, False),
    ]


def test_unsupported_layers_and_attention_are_named() -> None:
    from tensorgraph.importers.sliding_window import layer_kinds

    config = _transformers().Gemma2Config(**SMALL)
    config._attn_implementation = "flex_attention"
    with pytest.raises(tg.GraphError, match=r"attention implementation 'flex_attention'"):
        layer_kinds(config, MAX_SEQ)
    config._attn_implementation = "eager"
    config.layer_types = ["sliding_attention", "chunked_attention"]
    config.attention_chunk_size = 4
    with pytest.raises(tg.GraphError, match=r"layer types \['chunked_attention'\]"):
        layer_kinds(config, MAX_SEQ)


@settings(max_examples=30)
@given(
    window=st.integers(1, 6),
    calls=st.lists(
        st.tuples(st.integers(1, 9), st.integers(0, 4)), min_size=1, max_size=6
    ),  # (real rows, padding rows) per call
)
def test_ring_rows_hold_the_last_window_positions(window: int, calls: list) -> None:
    """RingLayer in torch eager: each row written carries its position + 1 (padding rows
    -1); after every call, slot s holds the largest position p < next call's position
    with p mod window == s (0, never written, where there is none), and the keys a call
    returns carry the positions key_positions says (those written, not padding)."""
    from tensorgraph.importers.sliding_window import RingLayer

    length = torch.tensor(0)
    layer = RingLayer(window, length)
    position = 0
    for real, padding in calls:
        rows = real + padding
        marks = [p + 1.0 for p in range(position, position + real)] + [-1.0] * (rows - real)
        states = torch.tensor(marks).reshape(1, 1, rows, 1)
        layer.cumulative_length.copy_(torch.tensor(position))
        length.copy_(torch.tensor(real))
        keys, _ = layer.update(states, states)
        seen = layer.key_positions(torch.tensor(position), rows)
        written = (seen >= 0) & (seen < position + real)  # padding rows carry -1
        assert keys.shape[2] == seen.shape[0]
        np.testing.assert_array_equal(keys[0, 0, written, 0], (seen[written] + 1).float())
        position += real
        want = [
            max((p + 1 for p in range(position) if p % window == s), default=0)
            for s in range(window)
        ]
        np.testing.assert_array_equal(layer.keys[0, 0, :, 0], want)


def _starcoder2() -> object:
    sizes = {k: v for k, v in SMALL.items() if k != "head_dim"}  # hidden / heads
    return _transformers().Starcoder2Config(**sizes, bos_token_id=1, eos_token_id=2)


def _gemma3_text() -> object:
    # layer 0 slides (local rope base), layer 1 is global: a pattern of 2
    return _transformers().Gemma3TextConfig(**SMALL, sliding_window_pattern=2)


@pytest.mark.slow
@pytest.mark.parametrize("make_config", [_starcoder2, _gemma3_text])
def test_more_sliding_families_equal_transformers(make_config) -> None:
    """Starcoder2 with a sliding window (biases, layer norm) and Gemma 3 text (its local
    and global layers' two rotary bases): tokens on every backend, logits teacher-forced."""
    model, multi = _imported(make_config())
    prompt = [3, 4, 5, 6, 7, 8]
    want = transformers_greedy(model, prompt, 20)
    for backend in BACKENDS:
        got = generate(multi, np.array(prompt), 20, backend=backend).tokens[0].tolist()
        assert got[: len(want)] == want, backend
        assert len(want) == 20 or want[-1] == model.config.eos_token_id
    for chunks in ([13], [6, 7]):
        want_logits = transformers_logits(model, SEQUENCE)[sum(chunks) - 1 :]
        got_logits = teacher_forced(multi, "numpy", chunks)
        np.testing.assert_allclose(got_logits, want_logits, atol=2e-5)


def test_quantized_caches_keep_the_rings_float_in_every_entry(gemma2) -> None:
    """quantize_states over the entries: a ring's prefill write is a masked rewrite (no
    slice_update chain), so the ring stays float in every entry, its decode included
    (the entries share its layout), while the global layer's cache is quantized; the
    program compiles and the arena generates the reference interpreter's tokens."""
    from tensorgraph.passes.quantize_states import quantize_states

    _, multi = gemma2
    graphs = {name: program.graph for name, program in multi.entries.items()}
    quantized = quantize_states(graphs, bits=8, group_size=32)
    for name, graph in quantized.items():
        states = {s.name: s.dtype for s in graph.states}
        assert states["key_ring_0"] == states["value_ring_0"] == tg.float32, name
        assert states["key_cache_1"] == states["value_cache_1"] == tg.uint32, name
        assert {"key_cache_1.scales", "value_cache_1.biases"} <= set(states), name
    program = tg.compile(quantized)
    prompt = np.array([3, 4, 5, 6, 7, 8])
    want = generate(program, prompt, 12, backend="numpy").tokens
    np.testing.assert_array_equal(generate(program, prompt, 12, backend="arena").tokens, want)
