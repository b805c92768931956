"""Human-readable text form: one line per node, `%id = op(inputs) {attrs} : shape dtype`.

The text is a pure function of the graph (stable across runs); constants print a short
digest of their bytes instead of the payload."""

from __future__ import annotations

import hashlib

from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node


def _format_value(value: object) -> str:
    if isinstance(value, bytes):
        return f"<{len(value)} bytes sha1:{hashlib.sha1(value).hexdigest()[:10]}>"
    return repr(value)


def format_node(node: Node) -> str:
    """`%3 = add(%1, %2) {} : (2, 3) float32`, attributes sorted by name."""
    inputs = ", ".join(f"%{i}" for i in node.inputs)
    attrs = ", ".join(f"{k}={_format_value(v)}" for k, v in node.attrs)
    attrs = f" {{{attrs}}}" if attrs else ""
    return f"%{node.id} = {node.op}({inputs}){attrs} : {node.shape} {node.dtype}"


def format_graph(graph: Graph) -> str:
    """The whole graph: a header, one line per node, then the outputs."""
    lines = [f"graph {graph.name!r} ({len(graph)} nodes)"]
    lines += ["  " + format_node(node) for node in graph.nodes]
    lines.append("  return " + ", ".join(f"%{o}" for o in graph.returned))
    lines += [f"  state {name!r} <- %{node}" for name, node in graph.state_updates.items()]
    return "\n".join(lines)
