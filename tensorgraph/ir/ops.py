"""The op registry: the single source of truth for every op.

Each `OpDef` states arity, attribute schema (with defaults), shape/dtype inference and
flags. Inference receives `Operand`s (a label for messages, shape, dtype) and the full
attribute dict, and raises ShapeError/DTypeError without the node prefix; the graph adds
`%id op:` when it re-raises. Attributes are stored canonically: axes non-negative and
sorted, shapes fully resolved, dtypes by name, so equal computations have equal nodes.

This module is the registry's core (`OpDef`, `register`, `OPS`, attribute checks,
`view_offset`); the inference rules live in `ir.inference` and the declarations of the
ops in `ir.op_table` (the fused ops and their builders in `ir.fused`), which this module
imports last so that `OPS` is always complete.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import sympy
from attrs import evolve, field, frozen

from tensorgraph.errors import GraphError
from tensorgraph.ir.dims import Dim, canonical
from tensorgraph.ir.dtypes import DTYPES, DType
from tensorgraph.ir.shapes import Shape, numel

if TYPE_CHECKING:
    from tensorgraph.ir.graph import Graph
    from tensorgraph.ir.node import Node
    from tensorgraph.ir.tensor import Tensor

REQUIRED = object()


@frozen
class Operand:
    """What inference sees of an input: a label for messages (`x`, `%3`), shape, dtype."""

    label: str
    shape: Shape
    dtype: DType

    def __str__(self) -> str:
        return f"{self.label} {self.shape}"


@frozen
class AttrSpec:
    """One attribute: its kind and default. Kinds: int, ints, float, scalar, bool, str,
    dtype, bytes, and the size-like kinds that may hold `tg.Dim` expressions: extent (an
    int or an integer expression of Dims), extents (a tuple of them) and bound (a float
    or an extent: arange's start and stop)."""

    kind: str
    default: object = REQUIRED


Infer = Callable[[Sequence[Operand], Mapping[str, object]], tuple[Shape, DType]]
# (operands, attributes, output shape, output dtype) -> scratch bytes during the op's step
Workspace = Callable[[Sequence[Operand], Mapping[str, object], Shape, DType], int]
# (forward node, its operands and its value as Tensors of the gradient graph, the value's
# cotangent) -> one cotangent per operand, None where none flows (indices, zero gradients)
Vjp = Callable[["Node", Sequence["Tensor"], "Tensor", "Tensor"], Sequence["Tensor | None"]]


@frozen
class OpDef:
    """An op's contract. `max_inputs=None` means variadic. `category` groups ops in reports.

    Flags: `elementwise` (output element i depends only on input elements i after
    broadcasting: safe to write in place of a same-sized operand), `commutative` (inputs
    compare as a set), `pure` (no side effects: CSE and DCE may merge or drop it),
    `boundary` (input / param / constant). View-ness depends on attributes, so it is the
    function `view_offset` below rather than a flag.

    `workspace` (None: 0 bytes) gives the scratch bytes the op materialises while it runs
    (what an unfused backend would allocate: attention scores, normalisation
    statistics); the planner gives them a buffer live only during the op's step.

    `vjp` (None: not differentiable) is the op's vector-Jacobian rule, set by
    `register_vjp` from the `ir.vjp_*` modules once the table is complete: reverse-mode
    autodiff (`tensorgraph.autodiff`) reads it and nothing else."""

    name: str
    min_inputs: int
    max_inputs: int | None
    infer: Infer
    attrs: Mapping[str, AttrSpec] = field(factory=dict)
    category: str = "other"
    elementwise: bool = False
    commutative: bool = False
    pure: bool = True
    boundary: bool = False
    workspace: Workspace | None = None
    vjp: Vjp | None = None


OPS: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    if op.name in OPS:
        raise GraphError(f"op {op.name!r} registered twice")
    OPS[op.name] = op
    return op


def register_vjp(name: str, rule: Vjp) -> None:
    """Give registered op `name` its vector-Jacobian rule (once: GraphError otherwise)."""
    op = get_op(name)
    if op.vjp is not None:
        raise GraphError(f"op {name!r} has a vjp rule already")
    OPS[name] = evolve(op, vjp=rule)


def workspace_bytes(node: Node, graph: Graph) -> int:
    """The scratch bytes `node` (a node of `graph`) declares for its step; 0 when its op
    declares no workspace. Needs the graph because a workspace may depend on operand
    shapes the output does not show (attention's key length)."""
    op = get_op(node.op)
    if op.workspace is None:
        return 0
    return _workspace(node, tuple((graph.node(i).shape, graph.node(i).dtype) for i in node.inputs))


# The planner asks for a node's workspace once per liveness analysis, and a schedule
# search runs thousands (the split zoo CNN's half-budget compile: 31 million calls,
# 82 s of 1,180 under cProfile). A workspace is a function of the node (op, attributes,
# output) and its operands' shapes and dtypes alone, which are the key.
@functools.lru_cache(maxsize=1 << 16)
def _workspace(node: Node, operands: tuple[tuple[Shape, DType], ...]) -> int:
    rule = get_op(node.op).workspace
    labelled = [
        Operand(f"%{i}", shape, dtype)
        for i, (shape, dtype) in zip(node.inputs, operands, strict=True)
    ]
    return int(rule(labelled, node.attr_dict, node.shape, node.dtype))


def get_op(name: str) -> OpDef:
    """The OpDef named `name`; GraphError listing known ops otherwise."""
    try:
        return OPS[name]
    except KeyError:
        raise GraphError(f"unknown op {name!r}; known ops: {', '.join(sorted(OPS))}") from None


# ---------------------------------------------------------------- attribute checks


def _is_dim_expr(value: object) -> bool:
    """An integer sympy expression whose symbols are all Dims (a symbolic extent)."""
    return (
        isinstance(value, sympy.Expr)
        and value.is_integer is True
        and all(isinstance(s, Dim) for s in value.free_symbols)
    )


_KIND_CHECKS: dict[str, Callable[[object], bool]] = {
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "extent": lambda v: _KIND_CHECKS["int"](v) or _is_dim_expr(v),
    "extents": lambda v: (
        isinstance(v, tuple) and all(type(x) is int or _KIND_CHECKS["extent"](x) for x in v)
    ),
    "bound": lambda v: _KIND_CHECKS["float"](v) or _is_dim_expr(v),
    "ints": lambda v: isinstance(v, tuple) and all(_KIND_CHECKS["int"](x) for x in v),
    "float": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "scalar": lambda v: isinstance(v, int | float | bool),
    "bool": lambda v: isinstance(v, bool),
    "str": lambda v: isinstance(v, str),
    "dtype": lambda v: isinstance(v, str) and v in DTYPES,
    "bytes": lambda v: isinstance(v, bytes),
}


_SYMBOLIC_KINDS = frozenset({"extent", "extents", "bound"})


def _canonical_extents(value: object) -> object:
    """Dim expressions in canonical form (equal extents, equal attributes); ints as given."""
    if type(value) is tuple:
        if all(type(v) is int for v in value):  # a static shape: nothing to canonicalise
            return value
        return tuple(_canonical_extents(v) for v in value)
    return canonical(value) if isinstance(value, sympy.Expr) else value


def complete_attrs(
    op: OpDef, attrs: Mapping[str, object], who: str, symbolic: bool = True
) -> dict[str, object]:
    """`attrs` checked against the op's schema with defaults filled in (GraphError names
    `who`, the attribute and the expected kind), Dim expressions in canonical form.
    `symbolic=False` says no attribute holds a Dim (a static node: the verifier's case),
    which skips looking for expressions to canonicalise."""
    unknown = set(attrs) - set(op.attrs)
    if unknown:
        raise GraphError(f"{who}: unknown attribute(s) {sorted(unknown)} for op {op.name!r}")
    result = {}
    for name, spec in op.attrs.items():
        value = attrs.get(name, spec.default)
        if value is REQUIRED:
            raise GraphError(f"{who}: missing required attribute {name!r}")
        if isinstance(value, list):
            value = tuple(value)
        if not _KIND_CHECKS[spec.kind](value):
            raise GraphError(f"{who}: attribute {name!r} must be {spec.kind} but got {value!r}")
        if symbolic and spec.kind in _SYMBOLIC_KINDS:
            value = _canonical_extents(value)
        result[name] = value
    return result


def view_offset(
    op: str, attrs: Mapping[str, object], source_shape: Shape, dtype: DType, source_dtype: DType
) -> int | None:
    """Byte offset into its input's storage when this op is a pure view, else None.

    Views: `reshape` (storage is contiguous, so always), `cast` to the same dtype, and
    `narrow` along an axis whose preceding axes all have extent 1, so the narrowed
    elements are one contiguous run (start * inner elements * itemsize). Nothing else."""
    if op == "reshape":
        return 0
    if op == "cast":
        return 0 if dtype == source_dtype else None
    if op == "narrow" and numel(source_shape[: attrs["axis"]]) == 1:
        return attrs["start"] * numel(source_shape[attrs["axis"] + 1 :]) * dtype.itemsize
    return None


# The table registers every op through `register` above, so it is imported once the core
# exists: importing this module alone gives the complete registry. The op families the
# table declares stay readable from here.
from tensorgraph.ir import elementwise_fused, fused, op_table  # noqa: E402, F401

FLOAT_UNARY, NUMERIC_UNARY = op_table.FLOAT_UNARY, op_table.NUMERIC_UNARY
ARITHMETIC, COMPARISONS = op_table.ARITHMETIC, op_table.COMPARISONS
