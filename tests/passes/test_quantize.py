"""`tg.quantize` (passes/quantize.py) on random graphs of projections in both
orientations, tied embedding tables and weights nothing can quantize. The oracle is
MLX: the float graph with each quantized weight replaced by
`mx.dequantize(mx.quantize(w))` (of w.T for a column-quantized one) must give the
quantized graph's outputs; the arena equals the reference bit for bit; the counters
say what was quantized, what was stored once and why a param stayed float."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.codegen_mlx.arrays import to_mx, to_numpy
from tensorgraph.errors import RunError, ShapeError
from tensorgraph.ir.quantized import MODES
from tensorgraph.passes.quantize import quantize_weights

SPECS = [(m, b, g) for m, (bs, gs) in MODES.items() for b in bs for g in gs]


def model(rng: np.random.Generator, k: int, bound: bool = True) -> tuple[tg.Graph, dict]:
    """ids -> embedding (tied with the head) -> a (K, N) projection read as x @ W ->
    a torch-Linear projection read as x @ W.T -> tied head; plus a weight read
    elementwise and one whose axis no group divides (both stay float)."""
    g = tg.Graph("model")
    values = {
        "embed": rng.standard_normal((6, k)).astype(np.float32),
        "w_in": rng.standard_normal((k, 2 * k)).astype(np.float32),  # x @ w_in
        "w_out": rng.standard_normal((k, 2 * k)).astype(np.float32),  # x @ w_out.T
        "scale": rng.standard_normal((1, k)).astype(np.float32),
        "odd": rng.standard_normal((40, 3)).astype(np.float32),  # K = 40: no group divides it
    }
    p = {n: g.param(n, v.shape, tg.float32, v if bound else None) for n, v in values.items()}
    ids = g.input("ids", (5,), tg.int32)
    h = tg.take(p["embed"], ids, axis=0)
    h = tg.relu(h @ p["w_in"])
    h = h @ tg.transpose(p["w_out"]) * p["scale"]
    g.output(h @ tg.transpose(p["embed"]), g.input("x", (5, 40)) @ p["odd"])
    return g, values


def mlx_roundtrip(w: np.ndarray, mode: str, bits: int, group: int) -> np.ndarray:
    parts = mx.quantize(to_mx(w), group_size=group, bits=bits, mode=mode)
    options = {"group_size": group, "bits": bits, "mode": mode}
    if mode != "affine":
        options["dtype"] = mx.float32
    return to_numpy(mx.dequantize(*parts, **options))


@settings(max_examples=20)
@given(st.sampled_from(SPECS), st.integers(0, 2**32 - 1))
def test_quantized_graph_computes_with_mlx_dequantized_weights(spec: tuple, seed: int) -> None:
    mode, bits, group = spec
    k = 64 if mode != "affine" else 2 * group
    graph, values = model(np.random.default_rng(seed), k)
    result = quantize_weights(graph, bits=bits, group_size=group, mode=mode)
    assert result.stats["quantized"] == 3 and result.stats["tied"] == 0
    assert set(result.stats["kept"]) == {"scale", "odd"}
    assert "not read as a matmul weight" in result.stats["kept"]["scale"]
    assert "not a multiple of the group size" in result.stats["kept"]["odd"]
    params = {n.name for n in result.graph.params}
    assert {"embed", "embed.scales", "w_in", "w_out.scales"} <= params
    assert ("w_in.biases" in params) == (mode == "affine")
    # the oracle: the float graph over MLX's dequantized weights
    oracle, _ = model(np.random.default_rng(seed), k)
    for name in ("embed", "w_out"):
        oracle.bind(name, mlx_roundtrip(values[name], mode, bits, group))
    oracle.bind("w_in", mlx_roundtrip(values["w_in"].T.copy(), mode, bits, group).T.copy())
    feeds = {"ids": np.array([0, 5, 2, 2, 1], np.int32), "x": np.ones((5, 40), np.float32)}
    want = tg.compile(oracle).run(feeds, backend="numpy")
    prog = tg.compile(result.graph)
    ref = prog.run(feeds, backend="numpy")
    for got, expected in zip(ref, want, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-4 * np.abs(expected).max())
    for got, expected in zip(prog.run(feeds, backend="arena"), ref, strict=True):
        assert got.tobytes() == expected.tobytes()
    assert prog.plan.constant_size < tg.compile(graph).plan.constant_size


def test_a_head_folded_into_a_second_copy_is_stored_once() -> None:
    """The import folds a tied head's transpose into its own param: both quantize to the
    same arrays, so they are stored once."""
    rng = np.random.default_rng(0)
    table = rng.standard_normal((10, 64)).astype(np.float32)
    g = tg.Graph("tied")
    embed = g.param("embed", table.shape, tg.float32, table)
    head = g.param("head", (64, 10), tg.float32, table.T.copy())
    h = tg.take(embed, g.input("ids", (3,), tg.int32), axis=0)
    g.output(h @ head)
    result = quantize_weights(g, bits=8, group_size=64)
    assert result.stats["tied"] == 1
    assert sorted(n.name for n in result.graph.params) == ["embed", "embed.biases", "embed.scales"]


def test_run_time_weights_take_the_quantized_names() -> None:
    """An unbound weight is declared quantized: the caller passes mx.quantize's arrays
    under `{name}`, `{name}.scales`, `{name}.biases`; a wrong shape is a RunError."""
    rng = np.random.default_rng(1)
    graph, values = model(rng, 64, bound=False)
    quantized = tg.quantize(graph, bits=4, group_size=32)
    params = dict(values)
    for name, weight in (("embed", values["embed"]), ("w_out", values["w_out"])):
        parts = mx.quantize(to_mx(weight), group_size=32, bits=4)
        params.update(
            zip((name, f"{name}.scales", f"{name}.biases"), map(to_numpy, parts), strict=True)
        )
    parts = mx.quantize(to_mx(values["w_in"].T.copy()), group_size=32, bits=4)
    params.update(zip(("w_in", "w_in.scales", "w_in.biases"), map(to_numpy, parts), strict=True))
    prog = tg.compile(quantized)
    feeds = {"ids": np.array([1, 2, 3, 4, 5], np.int32), "x": np.ones((5, 40), np.float32)}
    outs = {b: prog.run(feeds, params=params, backend=b) for b in ("numpy", "arena", "mlx")}
    for a, r in zip(outs["arena"], outs["numpy"], strict=True):
        assert a.tobytes() == r.tobytes()
    for m, r in zip(outs["mlx"], outs["numpy"], strict=True):
        np.testing.assert_allclose(m, r, rtol=1e-4, atol=1e-4 * np.abs(r).max())
    params["w_in.scales"] = params["w_in.scales"][:, :1]
    with pytest.raises(RunError, match=r"w_in\.scales"):
        prog.run(feeds, params=params, backend="numpy")


def test_save_and_load_keep_the_quantized_weights(tmp_path) -> None:
    graph, _ = model(np.random.default_rng(2), 64)
    prog = tg.compile(tg.quantize(graph, bits=3, group_size=32))
    prog.save(tmp_path / "q.tgp")
    loaded = tg.load(tmp_path / "q.tgp")
    feeds = {"ids": np.array([0, 1, 2, 3, 4], np.int32), "x": np.ones((5, 40), np.float32)}
    for a, b in zip(
        loaded.run(feeds, backend="arena"), prog.run(feeds, backend="arena"), strict=True
    ):
        assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"bits": 7}, "bits .* not 7"),
        ({"group_size": 48}, "not 48"),
        ({"mode": "int4"}, "'int4'"),
        ({"mode": "nvfp4", "bits": 4, "group_size": 32}, "not 32"),
    ],
)
def test_unsupported_quantization_is_named(options: dict, match: str) -> None:
    graph, _ = model(np.random.default_rng(3), 64)
    with pytest.raises(ShapeError, match=match):
        tg.quantize(graph, **options)


def test_a_weight_that_is_also_an_output_is_returned_dequantized() -> None:
    """Returned as it is, a quantized weight is its dequantized value; a transpose that
    is returned itself is no weight use, so that weight stays float."""
    rng = np.random.default_rng(4)
    g = tg.Graph("returned")
    w = g.param("w", (8, 64), tg.float32, rng.standard_normal((8, 64)).astype(np.float32))
    v = g.param("v", (8, 64), tg.float32, rng.standard_normal((8, 64)).astype(np.float32))
    x = g.input("x", (2, 64))
    tv = tg.transpose(v)
    g.output(x @ tg.transpose(w), w, x @ tv, tv)
    result = quantize_weights(g, bits=8, group_size=64)
    assert result.stats["quantized"] == 1 and set(result.stats["kept"]) == {"v"}
    prog = tg.compile(result.graph)
    product, weight, _, transposed = prog.run({"x": np.ones((2, 64), np.float32)}, backend="numpy")
    back = mlx_roundtrip(g.param_values["w"], "affine", 8, 64)
    assert weight.tobytes() == back.tobytes()
    np.testing.assert_allclose(product, np.ones((2, 64)) @ back.T, rtol=1e-5)
    assert transposed.tobytes() == np.ascontiguousarray(g.param_values["v"].T).tobytes()
