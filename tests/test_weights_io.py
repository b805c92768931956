"""Weights in safetensors files: a saved program's weights file and `tg.save_weights` are
read by safetensors' NumPy and torch loaders and by `mx.load` as the same names, dtypes
and bytes; `tg.load` gives the weights back bit for bit (every dtype, bfloat16 and
quantized ones included) and refuses a weights file that is missing, not safetensors,
or holds a tensor missing, extra, or of another dtype, shape or bytes, naming it."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
import safetensors.numpy
import safetensors.torch
import torch
from hypothesis import given
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.ir.dtypes import DTYPES as TG_DTYPES
from tensorgraph.ir.dtypes import as_dtype
from tensorgraph.models.generation import generate, llama_generation

DTYPES = ("float32", "bfloat16", "float16", "int64", "int32", "int16", "int8", "uint32", "uint8")
DTYPES += ("bool",)
TORCH = {"bfloat16": torch.int16, "float16": torch.int16, "float32": torch.int32}


def raw(value: np.ndarray) -> bytes:
    return np.asarray(value, order="C").tobytes()


def random_array(rng: np.random.Generator, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """Any bit pattern of `dtype` (NaN payloads, infinities, subnormals included)."""
    numpy_dtype = TG_DTYPES[dtype].to_numpy()
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    count = int(np.prod(shape, dtype=np.int64))
    return np.frombuffer(rng.bytes(count * numpy_dtype.itemsize), numpy_dtype).reshape(shape)


NO_FOLD = ("dce", "cse", "view_alias", "reinplace")  # fold would rename the params


def compiled(graph: tg.Graph) -> tg.Program:
    """`graph` compiled with its params as they are (no fold)."""
    return tg.compile(graph, passes=NO_FOLD)


def every_dtype_graph(seed: int, shapes: list[tuple[int, ...]]) -> tg.Graph:
    """One bound param per dtype (of the given shapes, cycled), each an output."""
    rng = np.random.default_rng(seed)
    g = tg.Graph("every_dtype")
    for i, dtype in enumerate(DTYPES):
        shape = shapes[i % len(shapes)]
        p = g.param(f"layer.{dtype}", shape, dtype, value=random_array(rng, dtype, shape))
        g.output(tg.reshape(p, (-1,)))
    return g


def assert_same_weights(read: dict, expected: dict) -> None:
    """`read` (name -> array of any framework, as NumPy) holds `expected` bit for bit."""
    assert sorted(read) == sorted(expected)
    for name, value in expected.items():
        assert read[name].shape == value.shape, name
        assert read[name].dtype == value.dtype, name
        assert raw(read[name]) == raw(value), name


def torch_as_numpy(tensor: torch.Tensor, dtype: np.dtype) -> np.ndarray:
    """A torch tensor as NumPy of `dtype`, through its bits (NumPy has no bfloat16)."""
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(dtype)
    return tensor.numpy()


def mlx_as_numpy(array: mx.array, dtype: np.dtype) -> np.ndarray:
    if array.dtype == mx.bfloat16:
        return np.array(array.view(mx.uint16)).view(dtype)
    return np.array(array)


def assert_standard_tools_read(path: Path, expected: dict) -> None:
    """safetensors (NumPy and torch) and MLX read `path` as `expected`, bit for bit."""
    assert_same_weights(safetensors.numpy.load_file(path), expected)
    by_torch = safetensors.torch.load_file(path)
    assert_same_weights(
        {k: torch_as_numpy(v, expected[k].dtype) for k, v in by_torch.items()}, expected
    )
    for name, value in expected.items():
        if value.dtype == tg.bfloat16.to_numpy():
            assert by_torch[name].dtype == torch.bfloat16
    by_mlx = mx.load(str(path))
    assert_same_weights(
        {k: mlx_as_numpy(v, expected[k].dtype) for k, v in by_mlx.items()}, expected
    )
    for name, value in expected.items():
        if value.dtype == tg.bfloat16.to_numpy():
            assert by_mlx[name].dtype == mx.bfloat16


# ---------------------------------------------------------------- round trips


# Random bit patterns include signalling NaNs, on which Graph.__eq__'s NaN test warns.
@pytest.mark.filterwarnings("ignore:invalid value encountered in isnan:RuntimeWarning")
@given(
    seed=st.integers(0, 2**32 - 1),
    shapes=st.lists(
        st.lists(st.integers(0, 5), min_size=0, max_size=3).map(tuple), min_size=1, max_size=4
    ),
)
def test_a_program_keeps_every_dtype_bit_for_bit_in_a_standard_weights_file(
    seed, shapes, tmp_path_factory
) -> None:
    folder = tmp_path_factory.mktemp("dtypes")
    g = every_dtype_graph(seed, shapes)
    program = compiled(g)
    program.save(folder / "m.tgp")
    assert sorted(p.name for p in folder.iterdir()) == ["m.safetensors", "m.tgp"]
    assert_standard_tools_read(folder / "m.safetensors", g.param_values)
    loaded = tg.load(folder / "m.tgp")
    assert loaded.graph == program.graph
    assert_same_weights(loaded.graph.param_values, g.param_values)
    assert dict(loaded.plan.offsets) == dict(program.plan.offsets)
    for got, want in zip(
        loaded.run({}, backend="arena"), program.run({}, backend="arena"), strict=True
    ):
        assert got.dtype == want.dtype and raw(got) == raw(want)


@pytest.mark.parametrize("precision", ["float32", "bfloat16", "4-bit"])
def test_a_generation_program_round_trips_with_its_weights_stored_once(tmp_path, precision):
    entries = llama_generation(max_seq=16, buckets=(8,))
    if precision != "float32":
        entries = {k: tg.to_dtype(g, tg.bfloat16) for k, g in entries.items()}
    if precision == "4-bit":
        entries = {k: tg.quantize(g, bits=4, group_size=64) for k, g in entries.items()}
    multi = tg.compile(entries)
    multi.save(tmp_path / "llama.tgp")
    stored = safetensors.numpy.load_file(tmp_path / "llama.safetensors")
    shared = {id(v): v for p in multi.entries.values() for v in p.graph.param_values.values()}
    assert len(stored) == len(shared)  # every array once, though every entry binds it
    bound = {k: v for p in multi.entries.values() for k, v in p.graph.param_values.items()}
    assert_standard_tools_read(tmp_path / "llama.safetensors", {k: bound[k] for k in stored})
    loaded = tg.load(tmp_path / "llama.tgp")
    assert isinstance(loaded, tg.MultiProgram)
    for name, program in multi.entries.items():
        assert loaded.entries[name].graph == program.graph
        assert_same_weights(loaded.entries[name].graph.param_values, program.graph.param_values)
    reloaded = {id(v) for p in loaded.entries.values() for v in p.graph.param_values.values()}
    assert len(reloaded) == len(shared)  # shared again after loading
    if precision == "4-bit":
        packed = [v for v in stored.values() if v.dtype == np.uint32]
        assert packed and all(
            f"{k}.scales" in stored for k, v in stored.items() if v.dtype == np.uint32
        )
    prompt = np.array([3, 1, 4, 1, 5])
    want = generate(multi, prompt, 4, backend="arena")
    got = generate(loaded, prompt, 4, backend="arena")
    np.testing.assert_array_equal(got.tokens, want.tokens)


def test_a_name_bound_to_different_arrays_in_two_entries_keeps_both(tmp_path) -> None:
    def entry(value: float) -> tg.Graph:
        g = tg.Graph(f"e{value}")
        x = g.input("x", (2,), tg.float32)
        g.output(x * g.param("w", (2,), tg.float32, value=np.full(2, value, np.float32)))
        return g

    multi = tg.compile({"a": entry(2.0), "b": entry(3.0)})
    multi.save(tmp_path / "two.tgp")
    assert sorted(safetensors.numpy.load_file(tmp_path / "two.safetensors")) == ["w", "w#1"]
    loaded = tg.load(tmp_path / "two.tgp")
    for name, factor in (("a", 2.0), ("b", 3.0)):
        (out,) = loaded.run(name, {"x": np.ones(2, np.float32)}, backend="numpy")
        np.testing.assert_array_equal(out, [factor, factor])
    with pytest.raises(
        tg.SaveError, match=r"param 'w' holds different arrays in entries 'a' and 'b'"
    ):
        tg.save_weights(multi, tmp_path / "w.safetensors")


def test_a_program_without_bound_weights_writes_no_weights_file(tmp_path) -> None:
    g = tg.Graph("free")
    x = g.input("x", (2, 3), tg.float32)
    g.output(x @ g.param("w", (3, 2), tg.float32))
    compiled(g).save(tmp_path / "free.tgp")
    assert [p.name for p in tmp_path.iterdir()] == ["free.tgp"]
    loaded = tg.load(tmp_path / "free.tgp")
    assert loaded.graph.param_values == {}


def test_a_format_1_file_with_weights_inside_still_loads(tmp_path) -> None:
    g = every_dtype_graph(7, [(2, 3)])
    compiled(g).save(tmp_path / "new.tgp")
    with zipfile.ZipFile(tmp_path / "new.tgp") as archive:
        document = json.loads(archive.read("program.json"))
    weights = safetensors.numpy.load_file(tmp_path / "new.safetensors")
    document["format"] = 1
    blobs = {}
    for entry in document["params"]:
        value = weights[entry.pop("tensor")]
        member = f"params/{len(blobs)}.bin"
        entry.update(dtype=str(as_dtype(value.dtype)), shape=list(value.shape), member=member)
        blobs[entry["member"]] = raw(value)
    del document["weights"]
    with zipfile.ZipFile(tmp_path / "old.tgp", "w") as archive:
        archive.writestr("program.json", json.dumps(document))
        for member, data in blobs.items():
            archive.writestr(member, data)
    (tmp_path / "new.safetensors").unlink()  # format 1 reads no weights file
    assert_same_weights(tg.load(tmp_path / "old.tgp").graph.param_values, g.param_values)


# ---------------------------------------------------------------- save_weights / load_weights


def quantizable_graph(bound: bool) -> tg.Graph:
    """An embedding and two matmuls (both orientations), weights bound when `bound`."""
    rng = np.random.default_rng(3)
    values = {
        "embed": rng.standard_normal((32, 128)).astype(np.float32),
        "up": rng.standard_normal((256, 128)).astype(np.float32),  # torch Linear: (N, K)
        "down": rng.standard_normal((256, 64)).astype(np.float32),  # x @ P: (K, N)
    }
    g = tg.Graph("q")
    tokens = g.input("tokens", (4,), tg.int32)
    params = {
        k: g.param(k, v.shape, tg.float32, value=v if bound else None) for k, v in values.items()
    }
    h = tg.take(params["embed"], tokens, axis=0)
    h = tg.matmul(h, tg.transpose(params["up"], (1, 0)))
    g.output(tg.matmul(h, params["down"]))
    return g


def test_quantized_weights_export_as_an_mlx_checkpoint_and_feed_an_unbound_program(tmp_path):
    quantized = tg.quantize(quantizable_graph(bound=True), bits=4, group_size=64)
    path = tmp_path / "q.safetensors"
    tg.save_weights(quantized, path)
    exported = quantized.param_values
    assert {"embed", "embed.scales", "embed.biases", "up.scales", "down.biases"} <= set(exported)
    assert exported["up"].dtype == np.uint32
    assert_standard_tools_read(path, exported)
    by_mlx = mx.load(str(path))  # MLX's own ops take them as they are
    w = mx.dequantize(by_mlx["up"], by_mlx["up.scales"], by_mlx["up.biases"], group_size=64, bits=4)
    assert w.shape == (256, 128)
    checkpoint = tg.load_weights(path)
    assert_same_weights(checkpoint, exported)
    tokens = {"tokens": np.array([0, 5, 31, 2], np.int32)}
    want = tg.compile(quantized).run(tokens, backend="numpy")
    runtime = tg.compile(tg.quantize(quantizable_graph(bound=False), bits=4, group_size=64))
    got = runtime.run(tokens, params=checkpoint, backend="numpy")
    np.testing.assert_array_equal(got[0], want[0])
    compiled(quantized).save(tmp_path / "q.tgp")  # a quantized program keeps them too
    assert_standard_tools_read(tmp_path / "q.safetensors", exported)
    loaded = tg.load(tmp_path / "q.tgp")
    assert_same_weights(loaded.graph.param_values, exported)
    assert raw(loaded.run(tokens, backend="arena")[0]) == raw(want[0])


def test_save_weights_takes_a_program_a_graph_or_a_dict(tmp_path) -> None:
    g = every_dtype_graph(1, [(3,)])
    for i, source in enumerate((g, compiled(g), dict(g.param_values))):
        tg.save_weights(source, tmp_path / f"{i}.safetensors")
        assert_same_weights(tg.load_weights(tmp_path / f"{i}.safetensors"), g.param_values)


def test_save_weights_refuses_a_bad_path_or_source(tmp_path) -> None:
    g = every_dtype_graph(1, [(3,)])
    with pytest.raises(tg.SaveError, match="is a folder"):
        tg.save_weights(g, tmp_path)
    with pytest.raises(tg.SaveError, match=r"missing.*does not exist"):
        tg.save_weights(g, tmp_path / "missing" / "w.safetensors")
    with pytest.raises(tg.SaveError, match="not int"):
        tg.save_weights(3, tmp_path / "w.safetensors")
    with pytest.raises(tg.SaveError, match=r"param 'x'.*float64"):
        tg.save_weights({"x": np.zeros(2)}, tmp_path / "w.safetensors")


def test_load_weights_names_a_missing_file_garbage_or_a_dtype_it_lacks(tmp_path) -> None:
    with pytest.raises(tg.LoadError, match=r"none\.safetensors: no such weights file"):
        tg.load_weights(tmp_path / "none.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"not a safetensors file at all")
    with pytest.raises(tg.LoadError, match=r"junk\.safetensors: not a readable safetensors"):
        tg.load_weights(tmp_path / "junk.safetensors")
    safetensors.numpy.save_file(
        {"ok": np.ones(2, np.float32), "wide": np.ones(2, np.float64)}, tmp_path / "f64.safetensors"
    )
    with pytest.raises(tg.LoadError, match=r"f64\.safetensors: tensor 'wide' is F64"):
        tg.load_weights(tmp_path / "f64.safetensors")


# ---------------------------------------------------------------- refused files


def saved(tmp_path: Path) -> tuple[Path, dict]:
    g = every_dtype_graph(5, [(2, 3)])
    compiled(g).save(tmp_path / "m.tgp")
    return tmp_path / "m.tgp", dict(safetensors.numpy.load_file(tmp_path / "m.safetensors"))


def rewrite(weights: dict, name: str, value: np.ndarray | None) -> dict:
    changed = dict(weights)
    if value is None:
        del changed[name]
    else:
        changed[name] = value
    return changed


TAMPERED = {  # case: (edit of the weights, the message naming the tensor)
    "missing tensor": (
        lambda w: rewrite(w, "layer.int32", None),
        r"tensor 'layer\.int32' is missing \(m\.tgp binds it\)",
    ),
    "extra tensor": (
        lambda w: rewrite(w, "stranger", np.zeros(1, np.float32)),
        r"tensor 'stranger' is not one m\.tgp saved",
    ),
    "wrong dtype": (
        lambda w: rewrite(w, "layer.float32", w["layer.float32"].view(np.int32)),
        r"tensor 'layer\.float32' is int32 \(2, 3\), but m\.tgp saved it as float32 \(2, 3\)",
    ),
    "wrong shape": (
        lambda w: rewrite(w, "layer.bfloat16", w["layer.bfloat16"].reshape(3, 2)),
        r"tensor 'layer\.bfloat16' is bfloat16 \(3, 2\), but m\.tgp saved it as bfloat16 \(2, 3\)",
    ),
    "other bytes": (
        lambda w: rewrite(w, "layer.uint8", w["layer.uint8"] ^ np.uint8(1)),
        r"tensor 'layer\.uint8' holds other bytes than m\.tgp saved",
    ),
}


@pytest.mark.parametrize("case", sorted(TAMPERED))
def test_a_tampered_weights_file_is_a_load_error_naming_the_tensor(tmp_path, case) -> None:
    path, weights = saved(tmp_path)
    edit, message = TAMPERED[case]
    safetensors.numpy.save_file(edit(weights), tmp_path / "m.safetensors")
    with pytest.raises(tg.LoadError, match=rf"m\.safetensors: {message}"):
        tg.load(path)


def test_a_missing_or_unreadable_weights_file_is_a_load_error_naming_it(tmp_path) -> None:
    path, _ = saved(tmp_path)
    data = (tmp_path / "m.safetensors").read_bytes()
    (tmp_path / "m.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(tg.LoadError, match=r"m\.safetensors: not a readable safetensors file"):
        tg.load(path)
    (tmp_path / "m.safetensors").unlink()
    with pytest.raises(tg.LoadError, match=r"m\.safetensors: no such weights file"):
        tg.load(path)


def test_a_moved_pair_loads_and_a_program_copied_alone_names_its_weights_file(tmp_path) -> None:
    path, weights = saved(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    path.rename(elsewhere / "renamed.tgp")  # the program may take another name
    (tmp_path / "m.safetensors").rename(elsewhere / "m.safetensors")
    assert_same_weights(tg.load(elsewhere / "renamed.tgp").graph.param_values, weights)
    (elsewhere / "renamed.tgp").rename(tmp_path / "alone.tgp")
    with pytest.raises(tg.LoadError, match=r"m\.safetensors: no such weights file"):
        tg.load(tmp_path / "alone.tgp")


def test_saving_never_overwrites_a_checkpoint_tensorgraph_did_not_write(tmp_path) -> None:
    g = every_dtype_graph(2, [(4,)])
    checkpoint = {"model.embed_tokens.weight": np.ones((2, 2), np.float32)}
    safetensors.numpy.save_file(checkpoint, tmp_path / "m.safetensors")
    with pytest.raises(tg.SaveError, match=r"m\.safetensors: exists and was not written by"):
        compiled(g).save(tmp_path / "m.tgp")
    assert_same_weights(safetensors.numpy.load_file(tmp_path / "m.safetensors"), checkpoint)
    assert not (tmp_path / "m.tgp").exists()
    with pytest.raises(tg.SaveError, match=r"cannot end in \.safetensors"):
        compiled(g).save(tmp_path / "p.safetensors")
    compiled(g).save(tmp_path / "n.tgp")
    compiled(g).save(tmp_path / "n.tgp")  # its own weights file: saved over
    assert_same_weights(tg.load(tmp_path / "n.tgp").graph.param_values, g.param_values)
