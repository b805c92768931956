"""SSA nodes: frozen values that hash by content, so equal fields mean one computation."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import sympy
from attrs import evolve, field, frozen

from tensorgraph.ir.dtypes import DType

__all__ = ["Node", "describe", "evolve"]


def _freeze(value: object) -> object:
    """Lists become tuples (recursively) so attribute values are hashable."""
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value


def _canonical_attrs(attrs: Mapping[str, object] | Iterable) -> tuple[tuple[str, object], ...]:
    items = attrs.items() if isinstance(attrs, Mapping) else attrs
    return tuple(sorted((str(k), _freeze(v)) for k, v in items))


@frozen(cache_hash=True)
class Node:
    """One SSA value: `op` applied to `inputs` (node ids), giving `shape` and `dtype`.

    Invariants: attrs are sorted (name, value) pairs with tuples for sequences; a
    constant's payload is `bytes` in attr `value`; nodes never change (use `evolve`)."""

    id: int
    op: str
    inputs: tuple[int, ...] = field(converter=tuple)
    attrs: tuple[tuple[str, object], ...] = field(converter=_canonical_attrs)
    shape: tuple[int, ...] = field(converter=tuple)
    dtype: DType
    # Bytes of the dense row-major tensor this node produces: derived, computed once
    # (the planner reads it hundreds of thousands of times per compile). An expression
    # of the shape's `tg.Dim`s when the shape holds one (`type(nbytes) is int` is the
    # cheap test for a static shape).
    nbytes: int = field(init=False, eq=False, repr=False)

    # Whether the shape or an attribute holds a `tg.Dim`: derived once, so graphs and the
    # verifier test a bool per node instead of scanning attributes on every pass.
    symbolic: bool = field(init=False, eq=False, repr=False)

    @nbytes.default
    def _nbytes(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count * self.dtype.itemsize

    @symbolic.default
    def _symbolic(self) -> bool:
        if type(self.nbytes) is not int:
            return True
        for _, value in self.attrs:  # plain loops: this runs once per node ever built
            if type(value) is tuple:
                for item in value:
                    if isinstance(item, sympy.Basic):
                        return True
            elif isinstance(value, sympy.Basic):
                return True
        return False

    def attr(self, name: str, default: object = None) -> object:
        """The value of attribute `name`, or `default` if absent."""
        for key, value in self.attrs:
            if key == name:
                return value
        return default

    @property
    def attr_dict(self) -> dict[str, object]:
        return dict(self.attrs)

    @property
    def name(self) -> str | None:
        """The user's name for input, param and constant nodes (None for others)."""
        value = self.attr("name")
        return value if isinstance(value, str) else None


def describe(node: Node) -> str:
    """`%id op` (plus the name of a boundary node): how every message names a node."""
    name = node.name
    return f"%{node.id} {node.op}" + (f" {name!r}" if name else "")
