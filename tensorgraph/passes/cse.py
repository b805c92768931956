"""Common-subexpression elimination: merges nodes with equal op, attributes, shape, dtype
and (already merged) inputs; a commutative op compares its inputs as a multiset. Inputs
and params never merge (each is a distinct value the caller supplies); constants merge
when their bytes, shape and dtype agree and they carry no user name (a named constant
is the user's, kept as written); only pure ops merge, and never a `full` a functional
update writes into (`_update_targets`). Preserves every output for every
input and the topological order. One pass over the nodes with a dict: O(n).

Attributes compare exactly, never with Python's `==`: `0.0 == -0.0` and `1 == 1.0 ==
True` would merge `x / full(-0.0)` (-inf) into `x / full(0.0)` (+inf), and a NaN is not
even equal to itself. `exact_key` compares floats by bit pattern (two NaNs with one
payload merge), keeps int, float and bool apart, and compares arrays by dtype, shape
and bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Hashable

import numpy as np

from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node
from tensorgraph.ir.ops import OPS
from tensorgraph.ir.updates import UPDATE_OPS
from tensorgraph.passes.result import PassResult


def exact_key(value: object) -> Hashable:
    """A hashable key that is equal for two attribute values exactly when they are the
    same value of the same kind, bit for bit: a float by its IEEE-754 double bits (so
    -0.0 differs from 0.0 and a NaN equals a NaN of the same payload); bool, int and
    float never equal one another; tuples element by element, recursively; a NumPy
    array or scalar by dtype, shape and bytes; bytes and str as themselves. Any other
    value is keyed by its exact type and itself (it must be hashable)."""
    if isinstance(value, bool | np.bool_):
        return ("bool", bool(value))
    if isinstance(value, np.generic | np.ndarray):
        array = np.asarray(value)
        return ("array", array.dtype.name, array.dtype.str, array.shape, array.tobytes())
    if isinstance(value, int):
        return ("int", int(value))
    if isinstance(value, float):
        return ("float", struct.pack("<d", value))
    if isinstance(value, tuple | list):
        return ("tuple", tuple(exact_key(v) for v in value))
    if isinstance(value, bytes | str):
        return (type(value).__name__, value)
    return (type(value).__module__, type(value).__qualname__, value)


def cse_key(node: Node) -> tuple:
    """What makes two nodes the same computation (inputs already rewired): op, exact
    attributes (see `exact_key`), shape, dtype and inputs, as a sorted multiset for a
    commutative op."""
    inputs = tuple(sorted(node.inputs)) if OPS[node.op].commutative else node.inputs
    attrs = tuple((name, exact_key(value)) for name, value in node.attrs)
    return (node.op, attrs, node.shape, node.dtype, inputs)


def _mergeable(node: Node, filled: frozenset[int]) -> bool:
    opdef = OPS[node.op]
    if node.op in ("input", "param"):
        return False
    if node.op == "constant":
        return not node.attr("name")
    return opdef.pure and node.id not in filled


def _update_targets(graph: Graph) -> frozenset[int]:
    """The `full` nodes some functional update writes into (its operand 0). They never
    merge: a fill shared by two updates is copied by the first (the second still reads
    it) and held from the first to the last (autodiff's zeros under each narrowed slice's
    cotangent, one per layer: GPT-2's (4, 64, 192) fill held across its whole backward),
    where a fill of its own per update costs one memset and lets the update write over
    it."""
    return frozenset(
        n.inputs[0]
        for n in graph.nodes
        if n.op in UPDATE_OPS and n.inputs and graph.node(n.inputs[0]).op == "full"
    )


def cse(graph: Graph) -> PassResult:
    """`graph` with every mergeable node whose `cse_key` was seen earlier replaced by that
    earlier node (stats: `merged`, the number of nodes dropped); `graph` itself when
    nothing merges."""
    survivor: dict[tuple, int] = {}  # cse key -> id of the node kept
    merged: dict[int, int] = {}  # dropped id -> id that replaces it
    filled = _update_targets(graph)
    for node in graph.nodes:
        if not _mergeable(node, filled):
            continue
        if any(i in merged for i in node.inputs):
            node = Node(
                node.id,
                node.op,
                tuple(merged.get(i, i) for i in node.inputs),
                node.attrs,
                node.shape,
                node.dtype,
            )
        kept = survivor.setdefault(cse_key(node), node.id)
        if kept != node.id:
            merged[node.id] = kept
    if not merged:
        return PassResult(graph, {"merged": 0})
    return PassResult(graph.replace_uses(merged), {"merged": len(merged)})
