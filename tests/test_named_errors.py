"""Bad values at every boundary (a program file, a graph's JSON, `run`'s arguments, a
State, `from_torch`, `save`, the alignment, a feed's dtype) are named TensorGraphErrors
that name the value: each case here raised a raw Python exception (or was silently
accepted) before."""

import json
import re
import zipfile
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
import torch

import tensorgraph as tg
from tensorgraph import cli
from tensorgraph.runtime.feeds import bind_feeds

DEEP = "[" * 100_000 + "]" * 100_000


def _graph() -> tg.Graph:
    g = tg.Graph("m")
    g.output(tg.relu(g.input("x", (2, 3))) + 1.0)
    return g


X = np.ones((2, 3), np.float32)


# ---------------------------------------------------------------- program files


def _rewritten(tmp_path: Path, name: str, edit) -> Path:
    """A copy of a saved program whose program.json text is `edit(text)`."""
    source = tmp_path / "good.tgp"
    tg.compile(_graph()).save(source)
    with zipfile.ZipFile(source) as archive:
        text = archive.read("program.json").decode()
    target = tmp_path / f"{name}.tgp"
    with zipfile.ZipFile(target, "w") as archive:
        archive.writestr("program.json", edit(text))
    return target


def _set(*path: str, value: object):
    def edit(text: str) -> str:
        document = json.loads(text)
        holder = document
        for key in path[:-1]:
            holder = holder[key]
        holder[path[-1]] = value
        return json.dumps(document)

    return edit


TAMPERED = {  # name: (edit of program.json, the message naming the value)
    "plan alignment 0": (
        _set("plan", "alignment", value=0),
        "plan.alignment 0 differs from the options' alignment 64",
    ),
    "buffer id 1e400": (
        lambda text: text.replace('"buffer_offsets": [[', '"buffer_offsets": [[1e400, 0], [', 1),
        "a buffer id must be an integer but got inf",
    ),
    "JSON nested 100,000 deep": (
        lambda text: text[:-1] + f', "extra": {DEEP}}}',
        "malformed program file .JSON nested too deeply.",
    ),
    "stats a string": (_set("stats", value="abc"), "stats must be a JSON object but got 'abc'"),
    "options alignment 0": (
        _set("options", "alignment", value=0),
        r"alignment must be a power of two \(bytes\) but got 0",
    ),
    "options alignment 3": (
        _set("options", "alignment", value=3),
        r"alignment must be a power of two \(bytes\) but got 3",
    ),
    "options planner magic": (
        _set("options", "planner", value="magic"),
        "unknown planner 'magic'",
    ),
    "options passes a string": (
        _set("options", "passes", value="dce"),
        "options.passes must be a list of pass names but got 'dce'",
    ),
    "options a list": (_set("options", value=[1]), r"options must be a JSON object but got \[1\]"),
}


@pytest.mark.parametrize("case", sorted(TAMPERED))
def test_a_bad_program_file_is_a_load_error_naming_the_value(tmp_path, case) -> None:
    edit, message = TAMPERED[case]
    path = _rewritten(tmp_path, "bad", edit)
    with pytest.raises(tg.LoadError, match=rf"bad\.tgp: .*{message}"):
        tg.load(path)


def test_the_untampered_copy_loads(tmp_path) -> None:
    prog = tg.load(_rewritten(tmp_path, "same", lambda text: text))
    assert prog.options == tg.compile(_graph()).options
    assert "arena" in prog.report()


# ---------------------------------------------------------------- graph JSON


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[1]", r"the top level must be an object but got \[1\]"),
        ("3", "the top level must be an object but got 3"),
        (DEEP, "nested too deeply"),
    ],
    ids=["list", "number", "deep"],
)
def test_graph_json_that_is_not_an_object_is_a_graph_error(text, message) -> None:
    with pytest.raises(tg.GraphError, match=f"malformed graph JSON: {message}"):
        tg.Graph.from_json(text)


@pytest.mark.parametrize("updates", [[], None, 3], ids=["list", "null", "number"])
def test_state_updates_of_the_wrong_type_are_a_graph_error(updates) -> None:
    document = json.loads(_graph().to_json())
    document["state_updates"] = updates
    pattern = f"state_updates must be an object but got {re.escape(repr(updates))}"
    with pytest.raises(tg.GraphError, match=pattern):
        tg.Graph.from_json(json.dumps(document))


# ---------------------------------------------------------------- run's arguments


@pytest.mark.parametrize("backend", ["numpy", "arena", "mlx"])
@pytest.mark.parametrize(
    ("inputs", "params", "message"),
    [
        ([X], None, "inputs must be a dict of input name -> array but got list; its inputs: x"),
        (None, None, "inputs must be a dict of input name -> array but got NoneType"),
        ({"x": X}, [X], "params must be None or a dict of param name -> array but got list"),
    ],
    ids=["inputs list", "inputs None", "params list"],
)
def test_inputs_that_are_not_a_dict_are_named(inputs, params, message, backend) -> None:
    with pytest.raises(tg.RunError, match=rf"graph 'm': {message}"):
        tg.compile(_graph()).run(inputs, params, backend=backend)


@pytest.mark.parametrize(
    ("backend", "known"),
    [("numpy", "none"), ("arena", "fill, aliasing"), ("mlx", "mode, device, stats")],
)
def test_an_unknown_run_option_is_named_with_the_backends_options(backend, known) -> None:
    pattern = rf"unknown option\(s\) \['colour'\] for backend '{backend}'; its options: {known}"
    with pytest.raises(tg.RunError, match=pattern):
        tg.compile(_graph()).run({"x": X}, backend=backend, colour="red")


def test_gpu_where_mlx_has_none_is_a_run_error(monkeypatch) -> None:
    monkeypatch.setattr(mx, "is_available", lambda device: device != mx.gpu)
    with pytest.raises(tg.RunError, match="device 'gpu': this MLX has no GPU backend here"):
        tg.compile(_graph()).run({"x": X}, backend="mlx", device="gpu")


def _cached() -> tg.Program:
    g = tg.Graph("cache")
    cache = g.state("cache", (1, 4, 2), tg.float32)
    new = tg.slice_update(cache, g.input("x", (1, 1, 2)), 1, 1)
    g.update_state(cache, new)
    g.output(tg.sum(new, axis=1))
    return tg.compile(g)


@pytest.mark.parametrize("backend", ["numpy", "mlx"])
@pytest.mark.parametrize(
    "replacement",
    [np.zeros((1, 2, 2), np.float32), np.zeros((1, 4, 2), np.float64), [[0.0]], None],
    ids=["shape", "dtype", "list", "None"],
)
def test_a_state_value_replaced_by_a_wrong_one_is_named(backend, replacement) -> None:
    prog = _cached()
    state = prog.new_state(backend)
    value = replacement
    if backend == "mlx" and isinstance(value, np.ndarray) and value.dtype == np.float32:
        value = mx.array(value)
    state.values["cache"] = value
    with pytest.raises(tg.RunError, match=r"state 'cache': expected a \w+ array \(1, 4, 2\)"):
        prog.run({"x": np.ones((1, 1, 2), np.float32)}, backend=backend, state=state)


def test_a_replaced_arena_region_is_named() -> None:
    prog = _cached()
    state = prog.new_state("arena")
    state.region = np.zeros(3, np.uint8)
    with pytest.raises(tg.RunError, match=f"region is not {state.size} bytes"):
        prog.run({"x": np.ones((1, 1, 2), np.float32)}, backend="arena", state=state)


# ---------------------------------------------------------------- from_torch, save


def test_from_torch_takes_a_lone_tensor_as_the_one_argument() -> None:
    module = torch.nn.Linear(3, 2).eval()
    x = torch.randn(4, 3)
    graph = tg.from_torch(module, x)
    assert graph.to_json() == tg.from_torch(module, (x,)).to_json()
    (got,) = tg.compile(graph).run({"input": x.numpy()}, backend="numpy")
    np.testing.assert_allclose(got, module(x).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_from_torch_names_example_inputs_of_another_type() -> None:
    with pytest.raises(tg.GraphError, match=r"example_inputs must be a tuple .* but got dict"):
        tg.from_torch(torch.nn.Linear(3, 2).eval(), {"x": torch.randn(4, 3)})


def test_save_to_a_folder_or_into_a_missing_one_is_a_save_error(tmp_path) -> None:
    prog = tg.compile(_graph())
    with pytest.raises(tg.SaveError, match=f"{tmp_path}: is a folder"):
        prog.save(tmp_path)
    missing = tmp_path / "missing" / "p.tgp"
    with pytest.raises(tg.SaveError, match=f"the folder {tmp_path / 'missing'} does not exist"):
        prog.save(missing)
    assert issubclass(tg.SaveError, tg.TensorGraphError)


# ---------------------------------------------------------------- one rule each


@pytest.mark.parametrize("alignment", [3, 48, 100])
def test_compile_and_the_command_line_refuse_the_same_alignments(alignment, tmp_path) -> None:
    with pytest.raises(tg.PlanError, match=f"alignment must be a power of two .* {alignment}"):
        tg.compile(_graph(), alignment=alignment)
    path = tmp_path / "one.csv"
    path.write_text("id,lower,upper,size\n0,0,1,8\n")
    assert cli.main(["plan-csv", str(path), "--alignment", str(alignment)]) == 2
    assert tg.compile(_graph(), alignment=128).plan.alignment == 128


@pytest.mark.parametrize(
    "kind", [list, np.array], ids=["Python data", "NumPy array (float64, int64)"]
)
def test_python_data_and_arrays_follow_one_conversion_rule(kind) -> None:
    g = tg.Graph("feeds")
    x = g.input("x", (2,), tg.float32)
    ids = g.input("ids", (2,), tg.int8)
    g.output(x)
    exact = bind_feeds(g, {"x": kind([0.5, 3.0]), "ids": kind([1, -2])})
    assert exact[x.id].dtype == np.float32 and exact[x.id].tolist() == [0.5, 3.0]
    assert exact[ids.id].dtype == np.int8 and exact[ids.id].tolist() == [1, -2]
    lossy = r"input 'x': expected dtype float32 but got .*float64; cannot convert it exactly: 0.1"
    with pytest.raises(tg.RunError, match=lossy):
        bind_feeds(g, {"x": kind([0.1, 3.0]), "ids": kind([1, 2])})
    wraps = r"input 'ids': .*cannot convert it exactly: 300 at index \(1,\) would become 44"
    with pytest.raises(tg.RunError, match=wraps):
        bind_feeds(g, {"x": kind([0.5, 3.0]), "ids": kind([1, 300])})
    with pytest.raises(tg.RunError, match=r"input 'ids': expected dtype int8 but got .*float64"):
        bind_feeds(g, {"x": kind([0.5, 3.0]), "ids": kind([1.0, 2.0])})


def test_nan_and_a_float64_scalar_convert_when_exact() -> None:
    g = tg.Graph("feeds")
    x = g.input("x", (2,), tg.float32)
    g.output(x)
    got = bind_feeds(g, {"x": np.array([np.nan, np.inf])})[x.id]
    assert got.dtype == np.float32 and np.isnan(got[0]) and got[1] == np.inf
    with pytest.raises(tg.RunError, match=r"1e\+300 at index \(0,\) would become inf"):
        bind_feeds(g, {"x": np.array([1e300, 0.0])})
    with pytest.raises(tg.RunError, match="input 'x': cannot convert"):
        bind_feeds(g, {"x": [[1.0], [2.0, 3.0]]})
