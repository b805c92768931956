"""Saving and loading compiled programs: `prog.save(path)`, `tg.load(path)`.

`prog.save("m.tgp")` writes two files side by side:

- `m.tgp`, a zip archive (Python's zipfile: every member carries a CRC-32, so a flipped
  byte is caught) holding `program.json`: the format number, the graph (structure and
  constants, as `Graph.to_json` writes it, without bound weights), the order, the
  aliasing, the compile options, the statistics, the plan's buffer offsets, arena
  size and state layout, and the rematerialisation report (`prog.remat`) when compiled
  under a memory budget; a multi-entry program stores one such record per entry under
  `entries`, plus the shared state layout. Each record lists its bound params by name
  and the tensor of the weights file that holds each;
- `m.safetensors`, the bound weights as a safetensors file (`weights_io`), the format
  MLX and Hugging Face use, so `mx.load("m.safetensors")`,
  `safetensors.numpy.load_file` or `safetensors.torch.load_file` read them as they are
  (bfloat16 as BF16, a quantized param as `{name}`, `{name}.scales`, `{name}.biases`).
  A tensor is named by its param; an array bound in several entries or under several
  names (the shared weights of a multi-entry program) is stored once, under its first
  name, and loaded once, shared again. `program.json` records the file's name (found
  beside the program file when loading, so the pair can move together) and each
  tensor's dtype, shape and CRC-32. A program without bound weights writes no weights
  file. Saving never overwrites a `.safetensors` file that tensorgraph did not write
  (a user's checkpoint of the same name): that is a SaveError naming it.

States' initial values (`Graph.state_values`: a training step's weights and optimizer
moments) are tensors of the weights file too, listed by each record under `states`;
`save(program, path, state)` stores the current values of `state` (a State of the
program, any backend) instead, for every state, so the loaded program starts where the
saved one was: a training run saved after 3 steps and loaded runs step 4 exactly as the
original would. A state's value is the tensor `state:<name>` of the weights file (unless
it is the very array of a param stored already: a weight is stored once).

A symbolic program (a graph over `tg.Dim`s, whose plan is a `ParametricPlan`) saves the
same record: the graph's JSON keeps the dims and their ranges, the plan's fields are
those of its static plan at each dim's max (`plan.upper`), and `orientations` lists
each orientation as its ranking of the buffers (lowest first) and the dims whose plan
gave it. Loading recomputes the lifetimes and the conflicting pairs at the max, turns
each ranking back into its orientation, and proves the result with `verify_parametric`,
so the loaded program's `plan.at(...)` is the saved one's at every length.

Loading rebuilds the program without recompiling (no pass, no schedule, no search):
the graph is verified, liveness is recomputed from (graph, order, aliasing), which is
cheap and deterministic, the stored offsets are laid over it, and `verify_plan` proves
the result, so a tampered file can never yield an unsafe plan. Anything wrong (missing
file, not a zip, truncated, bad CRC, missing member, wrong format number, JSON nested
past Python's recursion limit, a field of the wrong type, options `compile` would
refuse, a plan that fails verification) is one LoadError naming the file and what is
wrong, never a partial program; a weights file that is missing, not safetensors, lacks
a tensor, holds one the program did not save, or holds a tensor of another dtype,
shape or bytes (CRC-32) than was saved is a LoadError naming the weights file and the
tensor. Files of format 1 (the weights as raw members `params/<k>.bin` of the archive)
still load. Saving to a path that cannot be written (a folder, a missing folder) is a
SaveError naming the path.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import numpy as np

from tensorgraph.errors import LoadError, SaveError, TensorGraphError
from tensorgraph.ir.dtypes import as_dtype
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.verify import verify
from tensorgraph.plan_records import (
    int_field,
    mapping_field,
    parametric_plan_record,
    static_plan_record,
)
from tensorgraph.weights_io import (
    check_target,
    checksum,
    read_metadata,
    read_tensors,
    write_tensors,
)

FORMAT = 2
FORMATS = (1, 2)  # the formats `load` reads: 1 kept the weights inside the archive
MANIFEST = "program.json"
PRODUCER = "tensorgraph"  # the weights file's metadata "producer": one save may overwrite


def _jsonable(value: object) -> object:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


def _record(
    program: object, keys: dict[int, str], tensors: dict, current: dict[str, np.ndarray]
) -> dict[str, object]:
    """The JSON record of one program; its bound params and its states' initial values
    (`current`'s where it has one) go to `tensors` (tensor name -> array) once per array
    (`keys`: id(array) -> tensor name, shared across the records), named by the first
    param or state bound to it."""
    from attrs import asdict

    graph = program.graph
    structure = Graph.from_nodes(
        graph.name, graph.nodes, graph.outputs, state_positions=graph.state_positions
    )
    initial = {n.name: current[n.name] for n in graph.states if n.name in current}
    initial = {**graph.state_values, **initial}
    params = [
        _stored(name, value, keys, tensors) for name, value in sorted(graph.param_values.items())
    ]
    states = [
        _stored(name, value, keys, tensors, "state:") for name, value in sorted(initial.items())
    ]
    plan = program.plan
    parametric = getattr(plan, "orientations", None) is not None
    static = plan.upper if parametric else plan
    record = {
        "algorithm": static.algorithm,
        "alignment": static.alignment,
        "arena_size": int(static.arena_size),
        "buffer_offsets": [[int(b), o] for b, o in static.buffer_offsets.items()],
        "state_layout": dict(static.state_layout),
        "state_size": static.state_size,
    }
    if parametric:  # the static plan at each dim's max above, and the orientations
        record["orientations"] = [
            {"ranked": [int(b) for b in o.ranked], "source": dict(o.source)}
            for o in plan.orientations
        ]
    return {
        "graph": json.loads(structure.to_json()),
        "order": list(program.order),
        "aliasing": program.aliasing.to_dict(),
        "options": _jsonable(asdict(program.options)),
        "stats": _jsonable(dict(program.stats)),
        "plan": record,
        "params": params,
        "states": states,
        "remat": None if program.remat is None else program.remat.to_dict(),
    }


def _stored(
    name: str, value: np.ndarray, keys: dict[int, str], tensors: dict, prefix: str = ""
) -> dict[str, str]:
    """The entry {name, tensor} of one stored array, added to `tensors` once."""
    if id(value) not in keys:
        key, count = prefix + name, 0
        while key in tensors:  # the name holds another entry's array already
            count += 1
            key = f"{prefix}{name}#{count}"
        keys[id(value)], tensors[key] = key, value
    return {"name": name, "tensor": keys[id(value)]}


def _current(program: object, state: object | None) -> dict[str, np.ndarray]:
    """name -> host copy of every state `state` holds (none when `state` is None);
    SaveError unless it is a State holding every state of `program`."""
    if state is None:
        return {}
    from tensorgraph.runtime.state import State, check_state

    entries = getattr(program, "entries", None)
    graphs = [p.graph for p in (entries.values() if entries is not None else [program])]
    names = {n.name for g in graphs for n in g.states}
    if not isinstance(state, State):
        raise SaveError(
            f"state must be a State holding the program's states ({', '.join(sorted(names))}) "
            f"but got {state!r:.80}"
        )
    try:
        for graph in graphs:  # each state of the declared shape and dtype
            check_state(state, state.backend, graph)
        return {name: state[name] for name in sorted(names)}
    except TensorGraphError as err:
        raise SaveError(f"cannot save the given State: {err}") from err


def save(program: object, path: str | os.PathLike, state: object | None = None) -> None:
    """Write `program` (a Program or a MultiProgram) to `path` (see the module
    docstring), with the current values of `state` as the states' initial values when
    given; SaveError naming the path when it is a folder, its folder is missing, or the
    filesystem refuses it, and naming the State when it is not one of the program's."""
    keys: dict[int, str] = {}
    tensors: dict[str, np.ndarray] = {}
    current = _current(program, state)
    entries = getattr(program, "entries", None)
    if entries is None:
        document = {"format": FORMAT, **_record(program, keys, tensors, current)}
    else:
        records = {name: _record(p, keys, tensors, current) for name, p in entries.items()}
        document = {"format": FORMAT, "entries": records}
    target = Path(path)
    check_target(target, "p.tgp")
    weights = target.with_suffix(".safetensors")
    document["weights"] = None
    if tensors:
        if weights == target:
            raise SaveError(
                f"{target}: a program file cannot end in .safetensors, the name of the "
                f"weights file saved beside it; use .tgp"
            )
        check_target(weights, "p.safetensors")
        if weights.exists() and (read_metadata(weights) or {}).get("producer") != PRODUCER:
            raise SaveError(
                f"{weights}: exists and was not written by tensorgraph; saving "
                f"{target.name} would overwrite it with the program's weights (move it, or "
                f"save the program under another name)"
            )
        document["weights"] = {
            "file": weights.name,
            "tensors": {
                key: {
                    "dtype": str(as_dtype(value.dtype)),
                    "shape": list(value.shape),
                    "crc32": checksum(value),
                }
                for key, value in tensors.items()
            },
        }
        write_tensors(weights, tensors, {"producer": PRODUCER, "program": target.name})
    try:
        with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_STORED) as archive:
            archive.writestr(MANIFEST, json.dumps(document))
    except OSError as err:
        raise SaveError(f"{target}: cannot write the program file ({err.strerror or err})") from err


def load(path: str | os.PathLike) -> object:
    """The program saved at `path` (a Program, or a MultiProgram when it was saved from
    one), ready to run (see the module docstring); LoadError naming the file and the
    problem otherwise."""
    where = Path(path)
    try:
        return _load(where)
    except LoadError:
        raise
    except (OSError, zipfile.BadZipFile, zipfile.LargeZipFile, EOFError) as err:
        raise LoadError(f"{where}: cannot read the program file ({err})") from err
    except RecursionError as err:
        raise LoadError(f"{where}: malformed program file (JSON nested too deeply)") from err
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError) as err:
        raise LoadError(f"{where}: malformed program file ({type(err).__name__}: {err})") from err
    except TensorGraphError as err:
        raise LoadError(f"{where}: the saved program is not sound: {err}") from err


def _load(where: Path) -> object:
    if not where.is_file():
        raise LoadError(f"{where}: no such program file")
    with zipfile.ZipFile(where) as archive:
        bad = archive.testzip()
        if bad is not None:
            raise LoadError(f"{where}: member {bad!r} is corrupt (CRC mismatch)")
        document = json.loads(archive.read(MANIFEST).decode("utf-8"))
        found = document.get("format") if isinstance(document, dict) else None
        if isinstance(found, bool) or found not in FORMATS:
            formats = " or ".join(str(f) for f in FORMATS)
            raise LoadError(f"{where}: not a tensorgraph program of format {formats} ({found!r})")
        if found == 1:
            loaded: dict[str, np.ndarray] = {}  # member -> array, shared by the entries

            def weight(entry: dict) -> np.ndarray:
                return _member_weight(where, archive, entry, loaded)

        else:
            weight = _file_weights(where, document.get("weights"))
        if "entries" not in document:
            return _program(where, weight, document)
        from tensorgraph.multi import MultiProgram

        entries = {
            str(name): _program(where, weight, record)
            for name, record in mapping_field(where, document["entries"], "entries").items()
        }
    return MultiProgram.assemble(entries)


def _file_weights(where: Path, record: object) -> object:
    """The weights file of a format-2 program (`record`: its name and tensors), read and
    checked whole (every tensor present, no other, each of the recorded dtype, shape and
    CRC-32): a function from a param entry to its (shared) array."""
    tensors: dict[str, np.ndarray] = {}
    path = None
    if record is not None:
        record = mapping_field(where, record, "weights")
        name = record["file"]
        if not isinstance(name, str) or name in ("", ".", "..") or Path(name).name != name:
            raise LoadError(f"{where}: weights.file must be a file name but got {name!r:.60}")
        path = where.parent / name
        saved = mapping_field(where, record["tensors"], "weights.tensors")
        tensors = read_tensors(path)
        for key in saved:
            if key not in tensors:
                raise LoadError(f"{path}: tensor {key!r} is missing ({where.name} binds it)")
        for key, value in tensors.items():
            if key not in saved:
                raise LoadError(f"{path}: tensor {key!r} is not one {where.name} saved")
            spec = mapping_field(where, saved[key], f"weights.tensors[{key!r}]")
            dtype = as_dtype(spec["dtype"])
            shape = tuple(int_field(where, d, f"a dim of tensor {key!r}") for d in spec["shape"])
            if value.dtype != dtype.to_numpy() or value.shape != shape:
                raise LoadError(
                    f"{path}: tensor {key!r} is {as_dtype(value.dtype)} {value.shape}, but "
                    f"{where.name} saved it as {dtype} {shape}"
                )
            if checksum(value) != int_field(where, spec["crc32"], f"the CRC-32 of {key!r}"):
                raise LoadError(
                    f"{path}: tensor {key!r} holds other bytes than {where.name} saved "
                    f"(CRC-32 differs)"
                )

    def weight(entry: dict) -> np.ndarray:
        key = entry["tensor"]
        if not isinstance(key, str) or key not in tensors:
            raise LoadError(
                f"{where}: param {entry['name']!r} names tensor {key!r:.60}, which "
                f"{path or 'the program (it saved no weights file)'} does not hold"
            )
        return tensors[key]

    return weight


def _member_weight(where: Path, archive: zipfile.ZipFile, entry: dict, loaded: dict) -> np.ndarray:
    """A format-1 param: the raw bytes of its archive member."""
    dtype = as_dtype(entry["dtype"])
    shape = tuple(int(d) for d in entry["shape"])
    member = entry["member"]
    if member not in loaded:
        data = archive.read(member)
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if len(data) != count * dtype.itemsize:
            raise LoadError(
                f"{where}: param {entry['name']!r} has {len(data)} bytes, expected "
                f"{count * dtype.itemsize} for {dtype} {shape}"
            )
        loaded[member] = np.frombuffer(data, dtype.to_numpy()).reshape(shape).copy()
    value = loaded[member]
    if value.shape != shape or value.dtype != dtype.to_numpy():
        raise LoadError(f"{where}: param {entry['name']!r} does not match member {member!r}")
    return value


def _options(where: Path, raw: object) -> object:
    """The recorded compile options, checked exactly as `compile` checks its own."""
    from tensorgraph.compiler import CompileOptions, check_options

    raw = mapping_field(where, raw, "options")
    passes = raw.get("passes")
    if not isinstance(passes, list) or not all(isinstance(p, str) for p in passes):
        raise LoadError(f"{where}: options.passes must be a list of pass names but got {passes!r}")
    options = CompileOptions(**{**raw, "passes": tuple(passes)})
    check_options(options)
    return options


def _stats(where: Path, raw: object) -> dict:
    stats = mapping_field(where, raw, "stats")
    for name, value in stats.items():
        mapping_field(where, value, f"stats[{name!r}]")
    return stats


def _program(where: Path, weight: object, document: dict) -> object:
    """One program from its record (see `_record`), its bound params from `weight`
    (param entry -> array), verified."""
    from tensorgraph.compiler import Program
    from tensorgraph.planner.aliasing import Aliasing
    from tensorgraph.planner.check import verify_plan
    from tensorgraph.remat import RematReport

    graph = Graph.from_json(json.dumps(document["graph"]))
    values = {str(e["name"]): weight(e) for e in document["params"]}
    initial = {str(e["name"]): weight(e) for e in document.get("states", [])}
    graph = Graph.from_nodes(
        graph.name, graph.nodes, graph.outputs, values, graph.state_positions, initial
    )
    verify(graph)
    order = tuple(int_field(where, i, "an order entry") for i in document["order"])
    if order != tuple(n.id for n in graph.nodes):
        raise LoadError(f"{where}: the stored order is not the graph's node order")
    aliasing = Aliasing.from_dict(document["aliasing"])
    options = _options(where, document["options"])
    stats = _stats(where, document["stats"])
    saved = mapping_field(where, document["plan"], "plan")
    alignment = int_field(where, saved["alignment"], "plan.alignment")
    if alignment != options.alignment:
        raise LoadError(
            f"{where}: plan.alignment {alignment} differs from the options' alignment "
            f"{options.alignment}"
        )
    # Files written before the report was stored have no "remat": None, as unbudgeted.
    raw_remat = document.get("remat")
    remat = None if raw_remat is None else RematReport.from_dict(raw_remat)
    if graph.dims:
        plan = parametric_plan_record(where, graph, order, aliasing, options, saved)
        return Program(graph, order, aliasing, plan, options, stats, graph, remat)
    plan = static_plan_record(where, graph, order, aliasing, options, saved)
    verify_plan(graph, plan, aliasing)
    return Program(graph, order, aliasing, plan, options, stats, graph, remat)
