"""JSON (de)serialisation that round-trips a graph exactly.

Attribute values keep their Python types: ints stay ints, floats stay floats (JSON keeps
the distinction and Python's float repr round-trips), tuples come back as tuples, and
bytes (constant payloads), bound param arrays and initial state values travel as base64.
`graph_from_json` verifies the result, so a corrupted text raises a GraphError rather
than a broken graph.

Symbolic dimensions: a graph with `tg.Dim`s lists them under "dims" (name, min, max),
and each extent expression in a shape or attribute travels as {"extent": text}, the
text form of `ir.dims` (parsed back against the listed dims only). A static graph's
text is unchanged: it has no "dims" entry.
"""

from __future__ import annotations

import base64
import json

import numpy as np
import sympy

from tensorgraph.errors import GraphError
from tensorgraph.ir.dims import Dim, from_text, to_text
from tensorgraph.ir.dtypes import as_dtype
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node
from tensorgraph.ir.ops import complete_attrs, get_op

FORMAT = "tensorgraph-graph/1"


def _encode(value: object) -> object:
    if isinstance(value, bytes):
        return {"bytes": base64.b64encode(value).decode("ascii")}
    if isinstance(value, tuple):
        return {"tuple": [_encode(v) for v in value]}
    if isinstance(value, sympy.Basic):
        return {"extent": to_text(value)}
    return value


def _decode(value: object, dims: dict[str, Dim]) -> object:
    if isinstance(value, dict):
        if "bytes" in value:
            return base64.b64decode(value["bytes"])
        if "tuple" in value:
            return tuple(_decode(v, dims) for v in value["tuple"])
        if "extent" in value:
            return from_text(value["extent"], dims)
        raise GraphError(f"unknown encoded attribute value {value!r}")
    return value


def _read_dims(entries: object) -> dict[str, Dim]:
    """The "dims" list as name -> Dim (GraphError for a malformed entry, a repeated name
    or a bad range, from Dim itself)."""
    if not isinstance(entries, list):
        raise GraphError(f"malformed graph JSON: dims must be a list but got {entries!r:.60}")
    dims = {}
    for entry in entries:
        entry = _object(entry, "a dim")
        dim = Dim(entry["name"], entry["min"], entry["max"])
        if dims.setdefault(dim.name, dim) != dim:
            raise GraphError(f"malformed graph JSON: dim {dim.name!r} is listed twice")
    return dims


def graph_to_json(graph: Graph) -> str:
    """The graph as JSON text (see module docstring)."""
    nodes = [
        {
            "id": n.id,
            "op": n.op,
            "inputs": list(n.inputs),
            "attrs": [[k, _encode(v)] for k, v in n.attrs],
            "shape": [_encode(d) for d in n.shape],
            "dtype": n.dtype.name,
        }
        for n in graph.nodes
    ]
    params = {name: _encode_array(value) for name, value in graph.param_values.items()}
    document = {
        "format": FORMAT,
        "name": graph.name,
        "nodes": nodes,
        "outputs": list(graph.outputs),
        "state_updates": graph.state_positions,
        "params": params,
    }
    if graph.state_values:  # absent otherwise: graphs without them keep their old text
        document["state_values"] = {k: _encode_array(v) for k, v in graph.state_values.items()}
    if graph.dims:
        document["dims"] = [
            {"name": d.name, "min": d.min, "max": d.max} for d in graph.dims.values()
        ]
    return json.dumps(document)


def _encode_array(value: np.ndarray) -> dict:
    return {
        "dtype": as_dtype(value.dtype).name,
        "shape": list(value.shape),
        "data": base64.b64encode(np.ascontiguousarray(value).tobytes()).decode("ascii"),
    }


def _decode_array(p: dict) -> np.ndarray:
    data = base64.b64decode(p["data"])
    return np.frombuffer(data, dtype=as_dtype(p["dtype"]).to_numpy()).reshape(p["shape"]).copy()


def _object(value: object, what: str) -> dict:
    if not isinstance(value, dict):
        raise GraphError(f"malformed graph JSON: {what} must be an object but got {value!r:.60}")
    return value


def graph_from_json(text: str) -> Graph:
    """The graph `graph_to_json` wrote, verified. GraphError naming the problem for text
    that is not JSON, nested past Python's recursion limit, not an object of this
    format, or with a field of the wrong type."""
    from tensorgraph.ir.verify import verify

    try:
        document = _object(json.loads(text), "the top level")
        if document.get("format") != FORMAT:
            raise GraphError(f"not a tensorgraph graph (format {document.get('format')!r})")
        # Attributes added to an op after a file was written take their defaults, so
        # older graphs and programs keep loading (unknown attributes are still refused).
        dims = _read_dims(document.get("dims", []))
        nodes = [
            Node(
                int(n["id"]),
                n["op"],
                tuple(n["inputs"]),
                complete_attrs(
                    get_op(n["op"]),
                    {k: _decode(v, dims) for k, v in n["attrs"]},
                    f"%{n['id']} {n['op']}",
                ),
                tuple(_decode(d, dims) for d in n["shape"]),
                as_dtype(n["dtype"]),
            )
            for n in document["nodes"]
        ]
        params = {
            name: _decode_array(_object(p, f"param {name!r}"))
            for name, p in _object(document["params"], "params").items()
        }
        initial = {
            name: _decode_array(_object(p, f"state value {name!r}"))
            for name, p in _object(document.get("state_values", {}), "state_values").items()
        }
        updates = _object(document.get("state_updates", {}), "state_updates")
        positions = {str(k): int(v) for k, v in updates.items()}
        graph = Graph.from_nodes(
            document["name"], nodes, document["outputs"], params, positions, initial
        )
    except RecursionError as err:
        raise GraphError("malformed graph JSON: nested too deeply") from err
    except (KeyError, TypeError, ValueError, OverflowError) as err:
        raise GraphError(f"malformed graph JSON: {err!r}") from err
    verify(graph)
    return graph
