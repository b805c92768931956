"""`tg.quantize_states` (passes/quantize_states.py): float caches held quantized, for
caches written by slice_update or index_update and read any way. The oracle is MLX's
own quantizer: after each call the cache's parts are `mx.quantize` of the rows
written, and every read sees `mx.dequantize` of what the cache holds; the arena equals
the reference bit for bit and MLX (eager and traced) agrees; caches that cannot be
quantized stay float with the reason."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

import tensorgraph as tg
from tensorgraph.codegen_mlx.arrays import to_mx, to_numpy
from tensorgraph.ir.updates import index_update
from tensorgraph.passes.quantize_states import quantize_graph_states

SHAPE = (1, 2, 8, 64)  # (batch, heads, positions, head dim)


def cache_graph(write: str) -> tg.Graph:
    """Writes two rows at `pos` into a cache state, then reads the whole cache through
    a matmul with `q` (attention scores)."""
    g = tg.Graph("cache")
    k = g.state("k", SHAPE, tg.float32)
    pos = g.input("pos", (), tg.int32)
    rows = g.input("rows", (1, 2, 2, 64))
    if write == "slice":
        new = tg.slice_update(k, rows, axis=2, start=pos)
    else:
        index = (tg.arange(g, 0, 2) + pos).astype(tg.int64)
        new = index_update(k, rows, index, axis=2)
    g.update_state(k, new)
    g.output(g.input("q", (1, 2, 1, 64)) @ tg.swapaxes(new, 2, 3))
    return g


def mlx_oracle(calls: list[tuple[int, np.ndarray]], q: np.ndarray, bits: int) -> np.ndarray:
    """The scores of the last call, computed with MLX's quantizer on a NumPy cache of
    codes, scales and biases: each write quantizes its rows, the read dequantizes."""
    options = {"group_size": 64, "bits": bits}
    zero = mx.quantize(mx.zeros(SHAPE), **options)
    parts = [to_numpy(p).copy() for p in zero]
    for pos, rows in calls:
        for store, written in zip(parts, mx.quantize(to_mx(rows), **options), strict=True):
            store[:, :, pos : pos + rows.shape[2]] = to_numpy(written)
    cache = to_numpy(mx.dequantize(*map(to_mx, parts), **options)).astype(np.float64)
    return q.astype(np.float64) @ np.swapaxes(cache, 2, 3)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("write", ["slice", "index"])
def test_a_quantized_cache_holds_what_mlx_quantize_gives(write: str, bits: int) -> None:
    result = quantize_graph_states(cache_graph(write), bits=bits, group_size=64)
    assert result.stats == {"quantized": 1, "kept": {}}
    graph = result.graph
    assert sorted(s.name for s in graph.states) == ["k", "k.biases", "k.scales"]
    prog = tg.compile(graph)
    assert prog.plan.state_size <= (bits / 32 + 2 / 64) * 4 * np.prod(SHAPE) + 3 * 64
    rng = np.random.default_rng(bits)
    calls = [(pos, rng.standard_normal((1, 2, 2, 64)).astype(np.float32)) for pos in (0, 5)]
    q = rng.standard_normal((1, 2, 1, 64)).astype(np.float32)
    outs = {}
    for backend, mode in [("numpy", None), ("arena", None), ("mlx", "eager"), ("mlx", "compiled")]:
        state = prog.new_state(backend)
        options = {"mode": mode} if mode else {}
        for pos, rows in calls:
            feeds = {"pos": np.array(pos, np.int32), "rows": rows, "q": q}
            (scores,) = prog.run(feeds, backend=backend, state=state, **options)
        outs[(backend, mode)] = scores
    want = mlx_oracle(calls, q, bits)
    np.testing.assert_allclose(outs[("numpy", None)], want, rtol=1e-5, atol=1e-4)
    assert outs[("arena", None)].tobytes() == outs[("numpy", None)].tobytes()
    for mode in ("eager", "compiled"):
        np.testing.assert_allclose(outs[("mlx", mode)], outs[("numpy", None)], rtol=1e-5, atol=1e-4)


def test_caches_that_cannot_be_quantized_stay_float_and_say_why() -> None:
    g = tg.Graph("odd")
    narrow = g.state("narrow", (1, 4, 48), tg.float32)  # no group divides 48
    counter = g.state("counter", (1,), tg.int32)
    along = g.state("along", (2, 64), tg.float32)  # written along its last axis
    g.update_state(narrow, narrow + 1.0)
    added = g.state("added", (1, 64), tg.float32)
    g.update_state(added, added + 1.0)  # computed, not written: stays float
    g.update_state(counter, counter + 1)
    g.update_state(along, tg.slice_update(along, g.input("x", (2, 32)), axis=1, start=0))
    result = quantize_graph_states(g, bits=8, group_size=64)
    assert result.stats["quantized"] == 0 and result.graph is g
    kept = result.stats["kept"]
    assert "not a multiple of the group size 64" in kept["narrow"]
    assert kept["counter"] == "dtype int32 is not a float"
    assert "writes along the quantized last axis" in kept["along"]
    assert "is not a write into it" in kept["added"]


def test_an_imported_cache_generates_the_reference_tokens_on_every_backend() -> None:
    """transformers' static cache (any family: here Llama with a 32-wide head), held at
    8 bits: MLX, traced or eager, gives the reference interpreter's tokens."""
    import torch

    from tensorgraph.importers.generation import from_torch_generation
    from tensorgraph.importers.torch_compat import import_transformers
    from tensorgraph.models.generation import generate

    transformers = import_transformers()
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
    )
    model = transformers.LlamaForCausalLM(config).eval()
    entries = from_torch_generation(model, max_seq=32, prompt_buckets=(8,))
    float_program = tg.compile(entries)
    program = tg.compile(tg.quantize_states(entries, bits=8, group_size=32))
    assert program.memory().state_size <= 0.32 * float_program.memory().state_size
    prompt = np.arange(3, 9)
    want = generate(program, prompt, 6, backend="numpy").tokens
    assert (generate(program, prompt, 6, backend="arena").tokens == want).all()
    for mode in ("eager", "auto"):
        assert (generate(program, prompt, 6, backend="mlx", mode=mode).tokens == want).all()
