"""The values of a symbolic graph's dims, read off the shapes of a call's feeds.

Every axis of an input (or of a param given at run time) whose extent is a bare
`tg.Dim` binds that dim to the axis length of the fed array. Each binding must agree
with the others of the same dim and lie in its range; every dim of the graph must be
bound by some such axis (an extent like `2*seq` is checked once the graph is
specialised, by the feed check, not solved). Each failure is a RunError naming the
input, the dim, the value and the range, raised before any op runs.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tensorgraph.errors import RunError
from tensorgraph.ir.dims import Dim, is_static
from tensorgraph.ir.graph import Graph


def _shape_of(value: object) -> tuple[int, ...] | None:
    """The shape of a fed value (an array of any library, or nested Python data), or
    None when it has none (the feed check then names the problem)."""
    shape = getattr(value, "shape", None)
    if shape is None:
        try:
            shape = np.shape(value)
        except (TypeError, ValueError):
            return None
    return tuple(int(d) for d in shape)


def bind_dims(
    graph: Graph, inputs: Mapping[str, object], params: Mapping[str, object] | None = None
) -> dict[str, int]:
    """dim name -> value for every dim of `graph`, from the feeds' shapes (see the module
    docstring). RunError: a fed array whose rank differs from its node's, two feeds that
    give one dim different values, a value outside the dim's range, a dim no fed axis
    carries."""
    found: dict[str, tuple[int, str]] = {}  # dim name -> (value, the input that gave it)
    fed = [(n, inputs.get(n.name), "input") for n in graph.inputs]
    fed += [(n, (params or {}).get(n.name), "param") for n in graph.params]
    for node, value, kind in fed:
        if value is None or all(is_static(d) for d in node.shape):
            continue
        shape = _shape_of(value)
        if shape is None:
            continue
        if len(shape) != len(node.shape):
            raise RunError(f"{kind} {node.name!r}: expected shape {node.shape} but got {shape}")
        for axis, (extent, length) in enumerate(zip(node.shape, shape, strict=True)):
            if not isinstance(extent, Dim):
                continue
            if not extent.min <= length <= extent.max:
                raise RunError(
                    f"{kind} {node.name!r}: axis {axis} has length {length}, the dim "
                    f"{extent.name!r}, outside its range [{extent.min}, {extent.max}]"
                )
            earlier = found.setdefault(extent.name, (length, node.name))
            if earlier[0] != length:
                raise RunError(
                    f"{kind} {node.name!r}: axis {axis} has length {length}, but the dim "
                    f"{extent.name!r} ({extent.describe()}) is {earlier[0]} in "
                    f"{earlier[1]!r}"
                )
    missing = sorted(set(graph.dims) - set(found))
    if missing:
        dims = ", ".join(graph.dims[name].describe() for name in missing)
        raise RunError(
            f"graph {graph.name!r}: no fed axis carries the dim(s) {dims}: each dim must be "
            "the whole extent of an axis of some input"
        )
    return {name: value for name, (value, _) in found.items()}
