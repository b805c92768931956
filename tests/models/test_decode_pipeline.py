"""Pipelined greedy decoding on MLX (models/decode_pipeline.py): the device's argmax is
NumPy's greedy pick on any logits row, ties and NaNs included; generate's tokens and
stream equal the NumPy backend's and MLX's synchronous loop's; a token out of the
embedding's range is the same RunError, raised before the failing step writes, with the
state as the synchronous backends leave it; a host check the known range of a fed input
implies is proven soundly (the plan that skips it fails exactly where the full plan does)."""

import ml_dtypes
import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.errors import RunError
from tensorgraph.models.decode_pipeline import pick_greedy
from tensorgraph.models.generation import generate, llama_generation
from tensorgraph.models.llama import LlamaConfig
from tensorgraph.models.sampling import Sampler
from tensorgraph.models.seq2seq_generation import DecodingRules
from tensorgraph.runtime.state import HostCheckPlan, host_checks, implied

DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


@settings(max_examples=60)
@given(
    rows=st.integers(1, 4),
    vocab=st.integers(1, 40),
    levels=st.integers(1, 4),
    nans=st.integers(0, 3),
    dtype=st.sampled_from(sorted(DTYPES)),
    seed=st.integers(0, 2**16),
)
def test_device_argmax_is_the_greedy_pick(rows, vocab, levels, nans, dtype, seed) -> None:
    """Few distinct values make ties likely; NaNs at random places: mx.argmax must pick
    what Sampler().sample (np.argmax of the float64 logits) picks, in every dtype."""
    rng = np.random.default_rng(seed)
    logits = rng.integers(-levels, levels + 1, (rows, vocab)).astype(np.float32)
    for _ in range(nans):
        logits[rng.integers(rows), rng.integers(vocab)] = np.nan
    typed = logits.astype(DTYPES[dtype])
    device = mx.array(logits).astype(getattr(mx, dtype))
    got = np.array(mx.argmax(device, axis=-1), np.int32)
    want = Sampler().sample(typed, None)
    assert got.shape == want.shape == (rows,)
    np.testing.assert_array_equal(got, want)


@settings(max_examples=80)
@given(
    vocab=st.integers(1, 12),
    count=st.integers(1, 4),
    ids=st.lists(st.lists(st.integers(-1, 13), max_size=4), min_size=4, max_size=4),
    forced=st.lists(st.none() | st.integers(-1, 13), min_size=2, max_size=2),
    start=st.integers(1, 2),
    nans=st.integers(0, 3),
    dtype=st.sampled_from(sorted(DTYPES)),
    data=st.data(),
)
def test_device_pick_under_decoding_rules_is_the_host_pick(
    vocab, count, ids, forced, start, nans, dtype, data
) -> None:
    """Random rules (bans, forced BOS/EOS, ids past the vocabulary), any step, logits
    with ties and NaNs: pick_greedy with the step's DecodingRules.mask picks what the
    synchronous loop picks (Sampler().sample of rules.apply's float64 rows); the
    per-step rules DecodingRules.masks memoises are each step's own mask."""
    suppress, bad, begin, eos = ids
    rules = DecodingRules((0,) * start, suppress, bad, begin, eos, *forced)
    step = data.draw(st.integers(0, count - 1), label="step")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16), label="seed"))
    logits = rng.integers(-2, 3, (2, vocab)).astype(np.float32)
    for _ in range(nans):
        logits[rng.integers(2), rng.integers(vocab)] = np.nan
    typed = logits.astype(DTYPES[dtype])
    rule = rules.mask(step, count, vocab)
    per_step = rules.masks(count, vocab)  # what generate_seq2seq hands the pipeline
    for k in range(count):  # the memoised rule of every step is the step's own
        (keep, forced), (want_keep, want_forced) = per_step(k), rules.mask(k, count, vocab)
        assert forced == want_forced and (keep is None) == (want_keep is None)
        np.testing.assert_array_equal(keep, want_keep)
    got = np.array(pick_greedy(mx.array(logits).astype(getattr(mx, dtype)), rule), np.int32)
    want = Sampler().sample(rules.apply(typed, step, count), None)
    np.testing.assert_array_equal(got, want)


def zoo_program(max_seq: int = 24) -> object:
    config = LlamaConfig(dim=32, heads=2, hidden=40, layers=2, vocab=37)
    return tg.compile(llama_generation(config, max_seq=max_seq, buckets=(4, 8), seed=1))


@settings(max_examples=4)
@given(length=st.integers(1, 8), tokens=st.integers(1, 15), seed=st.integers(0, 99))
def test_pipelined_tokens_and_stream_equal_numpy_and_the_synchronous_loop(
    length, tokens, seed
) -> None:
    """Windows decode4/decode8/decode are crossed on the way (positions up to 22)."""
    program = PROGRAM
    prompt = np.random.default_rng(seed).integers(0, 37, (1, length)).astype(np.int32)
    streamed: list[np.ndarray] = []
    piped = generate(program, prompt, tokens, backend="mlx", on_token=streamed.append)
    numpy = generate(program, prompt, tokens, backend="numpy")
    synchronous = generate(program, prompt, tokens, backend="mlx", stats=True)  # not piped
    assert piped.tokens.shape == (1, tokens)
    np.testing.assert_array_equal(piped.tokens, numpy.tokens)
    np.testing.assert_array_equal(piped.tokens, synchronous.tokens)
    assert len(streamed) == tokens
    np.testing.assert_array_equal(np.stack(streamed, axis=1), piped.tokens)
    for name in piped.state.names:  # the caches the steps leave: the same computation
        np.testing.assert_allclose(piped.state[name], synchronous.state[name], atol=1e-6)


PROGRAM = zoo_program()


def counter_program(rows: int, vocab: int = 8, max_seq: int = 12) -> object:
    """A generation program whose greedy token after t is t + 1 (mod vocab): the
    embedding is one-hot with `rows` rows (< vocab: the argmax can leave its range),
    the logits a shift of it; each step writes its row into a cache state."""
    embed = np.eye(rows, vocab, dtype=np.float32)
    shift = np.roll(np.eye(vocab, dtype=np.float32), 1, axis=1)  # e_i -> e_{i+1}

    def body(g: tg.Graph, ids: tg.Tensor, count: int, start: object) -> tg.Tensor:
        table = g.param("embed", embed.shape, tg.float32, embed)
        weight = g.param("shift", shift.shape, tg.float32, shift)
        cache = g.state("cache", (1, 1, max_seq, vocab), tg.float32)
        h = tg.take(table, ids, axis=0)  # (1, count, vocab)
        g.update_state(cache, tg.slice_update(cache, h.reshape(1, 1, count, vocab), 2, start))
        return h, weight

    prefill = tg.Graph("prefill4")
    tokens = prefill.input("tokens", (1, 4), tg.int32)
    length = prefill.input("length", (), tg.int32)
    h, weight = body(prefill, tokens, 4, 0)
    prefill.output(tg.take(h, length - 1, axis=1) @ weight)
    decode = tg.Graph("decode")
    token = decode.input("token", (1, 1), tg.int32)
    pos = decode.input("pos", (), tg.int32)
    h, weight = body(decode, token, 1, pos)
    decode.output(h.reshape(1, vocab) @ weight)
    return tg.compile({"prefill4": prefill, "decode": decode})


def test_counter_program_pipelines_past_the_embedding_check() -> None:
    program = counter_program(rows=8)
    for backend in ("numpy", "mlx"):
        result = generate(program, [5], 10, backend=backend)
        np.testing.assert_array_equal(result.tokens, [[6, 7, 0, 1, 2, 3, 4, 5, 6, 7]])


@pytest.mark.parametrize("backend", ["numpy", "arena", "mlx"])
def test_token_past_the_embedding_is_the_same_error_and_state(backend) -> None:
    """Tokens 3, 4, 5: feeding 5 to a 5-row embedding fails on every backend with the
    same RunError, before that step writes its cache row (rows 0-4 hold tokens 0-4)."""
    program = counter_program(rows=5)
    state = program.new_state(backend)
    streamed: list[np.ndarray] = []
    with pytest.raises(RunError, match=r"%\d+ take: index 5 is out of range for axis 0 of size 5"):
        generate(program, [0, 1, 2], 6, backend=backend, state=state, on_token=streamed.append)
    cache = state["cache"][0, 0]
    np.testing.assert_array_equal(cache[:5], np.eye(5, 8, dtype=np.float32))
    np.testing.assert_array_equal(cache[5:], 0)
    # the pipelined loop hands a token over once the next step is queued: 3 and 4 came
    # out before the failing step's check (the synchronous loops hand 5 as well)
    assert [int(t[0]) for t in streamed][:2] == [3, 4]


@st.composite
def indexed_graphs(draw: st.DrawFn) -> tuple:
    """(graph with a take over a fed index vector and a slice_update at a fed start, the
    index input's id, the start input's id, the extent)."""
    size = draw(st.integers(1, 9))
    rows = draw(st.integers(1, size))
    g = tg.Graph("indexed")
    table = g.input("table", (size, 2), tg.float32)
    index = g.input("index", (3,), tg.int64)
    start = g.input("start", (), tg.int64)
    rows_in = g.input("rows", (rows, 2), tg.float32)
    g.output(tg.take(table, index, axis=0))
    g.output(tg.slice_update(table, rows_in, 0, start))
    ids = {n.name: n.id for n in g.inputs}
    return g, ids["index"], ids["start"], size, rows


def _outcome(plan: HostCheckPlan, feeds: dict) -> str:
    try:
        plan(feeds)
    except RunError as err:
        return str(err)
    return "passes"


@settings(max_examples=80)
@given(case=indexed_graphs(), data=st.data())
def test_known_ranges_skip_only_checks_they_imply(case, data) -> None:
    graph, index, start, size, rows = case
    checks = host_checks(graph)
    assert {c.kind for c in checks} == {"signed", "start"}
    low = data.draw(st.integers(-12, 12), label="low")
    high = data.draw(st.integers(low + 1, 14), label="high")
    target = data.draw(st.sampled_from((index, start)), label="target")
    values = st.integers(low, high - 1)
    feeds = {
        index: np.array(data.draw(st.lists(values, min_size=3, max_size=3)), np.int64)
        if target == index
        else np.zeros(3, np.int64),
        start: np.array(data.draw(values) if target == start else 0, np.int64),
    }
    known = HostCheckPlan(checks, {target: (low, high)})
    full = HostCheckPlan(checks)
    assert _outcome(known, feeds) == _outcome(full, feeds)
    check = next(c for c in checks if c.cone[0].id == target)
    accepted = range(-size, size) if check.kind == "signed" else range(0, size - rows + 1)
    assert implied(check, {target: (low, high)}) == (
        low >= accepted.start and high <= accepted.stop
    )
