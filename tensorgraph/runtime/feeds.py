"""Run-time feeds: the checked value of every input and param node of a graph.

Every backend calls `bind_feeds` first, so a missing, extra, mis-shaped or mistyped
value is a RunError naming it before any op runs (never a partial result).

Typing rule, one for arrays (ndarray, NumPy scalar, array-likes of other libraries) and
plain Python data (scalars, nested lists and tuples, read as NumPy reads them: float64,
int64 or bool) alike: a value of the declared dtype is taken as is; one of another
dtype is converted only when the conversion is exact: the same kind or a wider one
(NumPy's "same_kind" cast: never a float into an integer input, nor an int into a bool
one) and every element keeps its value (NaN stays NaN). Anything else is a RunError
naming the input, the expected dtype and the first element that would change, so a
float64 array of 1.5s feeds a float32 input and one holding 0.1 is refused, as the list
[0.1] is: nothing is rounded, wrapped or overflowed silently.

Backend-native arrays: a backend that computes on its own array type (MLX's mx.array)
passes `native`, a function giving such a value's IR dtype name (None for anything
else). A native value must have exactly the declared shape and dtype: it is returned
as is, never converted (not even exactly), so it stays on its device as given.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
from attrs import frozen

from tensorgraph.errors import RunError
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node

_PYTHON_DATA = (bool, int, float, list, tuple)

NativeDType = Callable[[object], str | None]  # a native array's IR dtype name, else None


def _exactly(kind: str, name: str, array: np.ndarray, expected: np.dtype, what: str) -> np.ndarray:
    """`array` (described as `what`) converted to `expected` when that is exact (see the
    module docstring), else RunError naming the input and the first value that changes."""
    if array.dtype.kind not in "biuf" or (
        array.size and not np.can_cast(array.dtype, expected, "same_kind")
    ):
        raise RunError(f"{kind} {name!r}: expected dtype {expected} but got {what}")
    with np.errstate(over="ignore", invalid="ignore"):
        converted = array.astype(expected)
        kept = (converted == array) & (converted.astype(array.dtype) == array)
    if array.dtype.kind == "f":
        kept |= np.isnan(array) & np.isnan(converted.astype(np.float64))
    if not kept.all():
        at = np.unravel_index(int(np.argmin(kept)), array.shape)
        where = f" at index {tuple(int(i) for i in at)}" if array.ndim else ""
        raise RunError(
            f"{kind} {name!r}: expected dtype {expected} but got {what}; cannot convert it "
            f"exactly: {array[at].item()!r}{where} would become {converted[at].item()!r}"
        )
    return converted


def _from_python(kind: str, name: str, value: object, expected: np.dtype) -> np.ndarray:
    """Python data as an array of `expected` (RunError unless the conversion is exact)."""
    try:
        natural = np.asarray(value)
    except (TypeError, ValueError, OverflowError) as err:
        raise RunError(
            f"{kind} {name!r}: cannot convert {value!r:.60} to {expected}: {err}"
        ) from err
    if natural.dtype == expected:
        return natural
    return _exactly(kind, name, natural, expected, f"Python data of {natural.dtype}")


def _checked_native(kind: str, node: Node, value: object, dtype: str) -> object:
    """Native array `value` (of IR dtype name `dtype`) for `node`, checked as is."""
    name = node.attr("name")
    if tuple(value.shape) != node.shape:
        raise RunError(f"{kind} {name!r}: expected shape {node.shape} but got {tuple(value.shape)}")
    if dtype != node.dtype.name:
        raise RunError(f"{kind} {name!r}: expected dtype {node.dtype} but got {dtype}")
    return value


def _checked(kind: str, node: Node, value: object, native: NativeDType | None = None) -> object:
    """`value` for input/param `node`, checked against its declared shape and dtype."""
    expected = node.dtype.to_numpy()
    name = node.attr("name")
    dtype = None if native is None or isinstance(value, np.ndarray) else native(value)
    if dtype is not None:
        return _checked_native(kind, node, value, dtype)
    if isinstance(value, np.ndarray):
        array = value
    elif isinstance(value, np.generic):  # before Python data: np.float64 is a float
        array = np.asarray(value)
    elif isinstance(value, _PYTHON_DATA):
        array = _from_python(kind, name, value, expected)
    else:
        try:
            array = np.asarray(value)
        except (TypeError, ValueError) as err:
            raise RunError(
                f"{kind} {name!r}: cannot convert {type(value).__name__} to an array"
            ) from err
    if tuple(array.shape) != node.shape:
        raise RunError(f"{kind} {name!r}: expected shape {node.shape} but got {array.shape}")
    if array.dtype != expected:
        return _exactly(kind, name, array, expected, str(array.dtype))
    return array


def _unknown(graph: Graph, kind: str, names: list[str], known: Mapping[str, Node]) -> RunError:
    listed = ", ".join(sorted(known)) or "none"
    return RunError(f"graph {graph.name!r}: unknown {kind}(s) {names}; its {kind}s: {listed}")


@frozen
class FeedNodes:
    """A graph's input and param nodes by name, in graph order. An executor that runs
    one (frozen) graph many times computes it once with `feed_nodes` and passes it to
    `bind_feeds`, which then does not scan the graph's nodes on every run."""

    inputs: Mapping[str, Node]
    params: Mapping[str, Node]


def feed_nodes(graph: Graph) -> FeedNodes:
    """The `FeedNodes` of `graph` as it is now."""
    return FeedNodes(
        {n.attr("name"): n for n in graph.nodes if n.op == "input"},
        {n.attr("name"): n for n in graph.nodes if n.op == "param"},
    )


def bind_feeds(
    graph: Graph,
    inputs: Mapping[str, object],
    params: Mapping[str, object] | None = None,
    native: NativeDType | None = None,
    nodes: FeedNodes | None = None,
    bound: bool = True,
) -> dict[int, object]:
    """node id -> checked array for every input and param node of `graph`.

    Inputs come from `inputs` by name; params from `params` by name, else from the
    graph's bound values (`graph.param_values`). A caller's ndarray is returned as is
    (no copy): executors must not write into feeds. With `native`, a backend-native
    array is returned as is too (see the module docstring); every other value is an
    ndarray. `nodes`: `feed_nodes(graph)`, when the caller keeps it. With `bound` False,
    a bound param not in `params` is left out (an executor that keeps its own converted
    copy of the bound values, and need not look them up per call). RunError, naming
    the input or param:
    an unknown name in `inputs` or `params`, a missing input, a param neither bound nor
    given, a shape or dtype other than the declared one (see module docstring)."""
    params = dict(params or {})
    nodes = feed_nodes(graph) if nodes is None else nodes
    input_nodes, param_nodes = nodes.inputs, nodes.params
    extra = sorted(set(inputs) - set(input_nodes))
    if extra:
        raise _unknown(graph, "input", extra, input_nodes)
    extra = sorted(set(params) - set(param_nodes))
    if extra:
        raise _unknown(graph, "param", extra, param_nodes)
    missing = sorted(set(input_nodes) - set(inputs))
    if missing:
        wanted = ", ".join(
            f"{name} {input_nodes[name].shape} {input_nodes[name].dtype}" for name in missing
        )
        raise RunError(f"graph {graph.name!r}: missing input(s) {missing}; expected {wanted}")
    values = {n.id: _checked("input", n, inputs[name], native) for name, n in input_nodes.items()}
    for name, node in param_nodes.items():
        if name in params:
            values[node.id] = _checked("param", node, params[name], native)
        elif name in graph.param_values:
            if bound:
                values[node.id] = graph.param_values[name]
        else:
            raise RunError(
                f"graph {graph.name!r}: param {name!r} is neither bound nor given "
                f"(expected {node.shape} {node.dtype})"
            )
    return values
