"""Prefix folding: a value of a symbolic graph that depends only on constants, bound
params and the dims (a causal mask or position rows built from `arange(seq)`) becomes a
constant computed at each dim's max, read at the call's length through narrows.

Plain folding (`passes.fold`) leaves such a value in the arena: its shape holds a dim,
and a constant has one value. But many of them are *prefix-stable*: at every length L in
range, each element of the value at L equals the element at the same index of the value
at the max, `v(L) = v(max)[:e_0(L), :e_1(L), ...]` where `e_k` are its extents. Such a
value is a constant `v(max)` (a bound param) plus a `narrow(axis=k, start=0,
length=e_k)` per symbolic axis. A value folds only when that narrow is a view (one
symbolic axis, after axes of extent 1: position rows, a mask's row and column index
vectors), so its computation leaves the arena and nothing is copied back into it; a
(1, 1, seq, seq) mask would need a copy as large as itself, and stays computed from its
folded index vectors. The trade: the constant segment holds `v(max)` at every length,
so a value folds only when it is at most SMALL_FOLD bytes at the max (as `fold` admits
masks and tables); the bench's "+const" column shows the cost.

Prefix-stability is decided per node, by rules that hold for every value of the dims
(`statically_known_true`: undecided is "not stable"), from the inputs' stability and,
where noted, from the values at the max (which the rules prove are prefixes of every
other length's, so a fact of every element there holds at every length):

- a bound param or constant: static, stable; `full` of a number; `arange` whose start
  and step are numbers (its stop may be a dim: element i is start + i * step);
- an elementwise op of stable operands, each broadcast by the same extents or by a
  static 1 (element i reads element i, or element 0 of a broadcast axis);
  `where(c, a, b)` with stable `c` all false at the max is `b` (all true: `a`); an
  integer product with a stable operand all zero at the max is zero;
- `cast` of a stable value; `reshape` that only adds or removes static 1 axes;
  `narrow` with a number start; `concat` along an axis where only the last operand's
  extent holds a dim; `cumsum` / `cumprod` (element i folds elements 0..i, a prefix);
- `take(table, indices)` of a stable table by stable non-negative indices that are, at
  each element, below the table's extent at the shortest length where that element
  exists (checked over the whole range: one dim, extents non-decreasing in it).

Every stable value's extents are at their largest at the max (else no prefix of the
max's value holds it). Everything else is not stable, and nothing folds through it.
Outputs are unchanged bit for bit: the constant is computed by the reference kernels
(as `fold` does) and the narrows copy its elements. O(nodes) plus the kernels' work at
the max.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import sympy

from tensorgraph.errors import TensorGraphError
from tensorgraph.ir.dims import Dim, always, dims_in
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node
from tensorgraph.ir.ops import OPS
from tensorgraph.passes.result import PassResult
from tensorgraph.runtime.kernels import constant_value
from tensorgraph.runtime.kernels import evaluate as run_kernel

SMALL_FOLD = 1 << 16  # bytes at the max: the largest value made a constant (as `fold`'s)
COMPILE_FOLD = 64 << 20  # bytes at the max: the largest value computed at compile time
NEVER_FOLDED = frozenset({"dequantize"})  # as `fold`: the user chose the small form
SCANS = frozenset({"cumsum", "cumprod"})
# The attributes a stable value's op may hold a dim in: extents of its own result. Any
# other attribute holding one (an arange's start, a scalar operand) makes the elements
# depend on the length, so the value is not stable.
SIZE_ATTRS = {
    "arange": ("stop",),
    "full": ("shape",),
    "reshape": ("shape",),
    "narrow": ("length",),
}


def _static(value: object) -> bool:
    return not (isinstance(value, sympy.Basic) and value.free_symbols)


def _squeezed(shape: tuple) -> tuple:
    return tuple(d for d in shape if d != 1)


def _broadcasts(operand: tuple, out: tuple) -> bool:
    """True when `operand` (right-aligned) has each axis of `out`'s extent or a static 1."""
    if len(operand) > len(out):
        return False
    tail = out[len(out) - len(operand) :]
    # Extents are canonical (expanded), so equal values are equal expressions.
    return all(a == 1 or a == b for a, b in zip(operand, tail, strict=True))


def _known(graph: Graph) -> set[int]:
    """Ids of the pure values computed from bound params, constants and generators alone
    (the dims may appear in their shapes and attributes)."""
    known: set[int] = set()
    for node in graph.nodes:
        if OPS[node.op].boundary:
            bound = node.op == "constant" or (
                node.op == "param" and node.name in graph.param_values
            )
        else:
            bound = (
                OPS[node.op].pure
                and node.op not in NEVER_FOLDED
                and all(i in known for i in node.inputs)
            )
        if bound:
            known.add(node.id)
    return known


class _Analysis:
    """The values at the max of the known nodes and which of them are prefix-stable."""

    def __init__(self, graph: Graph, known: set[int]) -> None:
        self.graph = graph
        self.dims = graph.dims
        self.at_max = graph.specialize(**{n: d.max for n, d in self.dims.items()})
        self.values: dict[int, np.ndarray] = {}
        self.stable: set[int] = set()
        self.of_dims: set[int] = set()  # known values whose shape or computation holds a dim
        for node in graph.nodes:
            if node.id not in known:
                continue
            if (
                node.symbolic
                or dims_in(*(v for _, v in node.attrs))
                or any(i in self.of_dims for i in node.inputs)
            ):
                self.of_dims.add(node.id)
            if self._compute(node) and self._rule(node):
                self.stable.add(node.id)

    def _compute(self, node: Node) -> bool:
        """Its value at the max into `values` (False when too large or it fails there)."""
        concrete = self.at_max.node(node.id)
        if concrete.nbytes > COMPILE_FOLD or any(i not in self.values for i in concrete.inputs):
            return False
        try:
            # The reference kernels' values, warnings silenced (a log of arange(seq)'s 0
            # is -inf there too); a kernel that fails at the max folds nothing through it.
            with np.errstate(all="ignore"):
                if node.op == "param":
                    value = self.graph.param_values[node.name]
                elif node.op == "constant":
                    value = constant_value(concrete)
                else:
                    value = run_kernel(concrete, [self.values[i] for i in concrete.inputs])
        except (TensorGraphError, ArithmeticError, ValueError, IndexError, TypeError):
            return False
        self.values[node.id] = np.asarray(value)
        return True

    def _is(self, node_id: int) -> bool:
        return node_id in self.stable

    def _rule(self, node: Node) -> bool:
        graph, op, inputs = self.graph, node.op, node.inputs
        shapes = [graph.node(i).shape for i in inputs]
        if OPS[op].boundary:
            return True
        sized = SIZE_ATTRS.get(op, ())  # the attributes that may hold a dim
        if dims_in(*(v for k, v in node.attrs if k not in sized)):
            return False
        # A prefix of the max's value needs every extent at its largest at the max.
        at_max = self.at_max.node(node.id).shape
        if not all(
            _static(e) or always(e, "<=", top) is True
            for e, top in zip(node.shape, at_max, strict=True)
        ):
            return False
        if op in ("arange", "full"):
            return True  # start, step and value are numbers (checked above)
        if op == "where" and self._is(inputs[0]):
            cond = self.values[inputs[0]]
            for branch, holds in ((2, not cond.any()), (1, bool(cond.all()))):
                if holds:
                    return self._is(inputs[branch]) and _broadcasts(shapes[branch], node.shape)
        if op == "mul" and node.dtype.name.startswith(("int", "uint", "bool")):
            for k, i in enumerate(inputs):
                if self._is(i) and not self.values[i].any() and _broadcasts(shapes[k], node.shape):
                    return True
        if not all(self._is(i) for i in inputs):
            return False
        if OPS[op].elementwise:
            return all(_broadcasts(s, node.shape) for s in shapes)
        if op in ("cast", *SCANS):
            return True
        if op == "reshape":
            return _squeezed(shapes[0]) == _squeezed(node.shape)
        if op == "narrow":
            return True  # its start is a number (checked above)
        if op == "concat":
            axis = node.attr("axis")
            return all(_static(s[axis]) for s in shapes[:-1])
        if op == "take":
            return self._take_in_range(node)
        return False

    def _take_in_range(self, node: Node) -> bool:
        """Every index non-negative and below the table's extent at the shortest length
        where its element exists (module docstring)."""
        table, indices = (self.graph.node(i) for i in node.inputs)
        values = self.values[indices.id].astype(np.int64)
        extent = table.shape[node.attr("axis")]
        if values.size == 0:
            return True
        if values.min() < 0:
            return False
        if _static(extent):
            return int(values.max()) < int(extent)
        found = dims_in(extent, *indices.shape)
        if len(found) != 1:
            return False
        (dim,) = found
        lengths = np.arange(dim.min, dim.max + 1)
        table_at = _extents(extent, dim)
        if table_at is None:
            return False
        shortest = np.full(values.shape, dim.min, dtype=np.int64)
        for axis, e in enumerate(indices.shape):
            if _static(e):
                continue
            at = _extents(e, dim)
            if at is None:
                return False
            position = np.arange(values.shape[axis]).reshape(
                [-1 if k == axis else 1 for k in range(values.ndim)]
            )
            # the first length whose extent exceeds the position: there it first exists
            first = lengths[np.minimum(np.searchsorted(at, position, side="right"), len(at) - 1)]
            shortest = np.maximum(shortest, first)
        return bool((values < table_at[shortest - dim.min]).all())


@lru_cache(maxsize=256)
def _extents(extent: object, dim: Dim) -> np.ndarray | None:
    """`extent` at every length of `dim`, min to max (None unless non-decreasing over
    them), vectorised by NumPy as `dims.dim_range` evaluates a range; memoised (a model
    repeats its few extents, and lambdify is the costly part)."""
    lengths = np.arange(dim.min, dim.max + 1, dtype=np.int64)
    at = np.asarray(sympy.lambdify([dim], extent, "numpy")(lengths))
    at = np.broadcast_to(at, lengths.shape).astype(np.int64)
    at.flags.writeable = False
    return at if (np.diff(at) >= 0).all() else None


def prefix_fold(graph: Graph) -> PassResult:
    """The pass (module docstring): counters `prefix_folded` (values now a constant and
    narrows) and `prefix_dropped` (nodes no longer computed). A graph without dims, or
    with no stable value that a run-time value or an output reads, is returned as is."""
    unchanged = PassResult(graph, {"prefix_folded": 0, "prefix_dropped": 0})
    if not graph.dims:
        return unchanged
    known = _known(graph)
    if not any(graph.node(i).symbolic for i in known):
        return unchanged
    analysis = _Analysis(graph, known)
    folded = _roots(graph, analysis)
    if not folded:
        return unchanged
    return _rewrite(graph, analysis, folded)


def _roots(graph: Graph, analysis: _Analysis) -> set[int]:
    """The stable values to fold: walking back from the outputs, a stable value of the
    dims that a run-time value or an output reads folds when its bytes at the max are
    at most SMALL_FOLD; otherwise (or when it is a boundary value or a generator, cheap
    to make and reusable in place, as `fold` keeps them) its inputs are weighed in turn.
    A value computed from constants alone is `fold`'s to decide, and stays as it left it."""
    needed = set(graph.outputs) | {n.id for n in graph.nodes if not OPS[n.op].pure}
    folded: set[int] = set()
    for node in reversed(graph.nodes):
        if node.id not in needed:
            continue
        if node.id not in analysis.stable:
            needed.update(node.inputs)
            continue
        size = analysis.at_max.node(node.id).nbytes
        small = size <= SMALL_FOLD and _read_as_view(node.shape)
        if node.inputs and node.id in analysis.of_dims and small:
            folded.add(node.id)
        else:
            needed.update(node.inputs)
    return folded


def _read_as_view(shape: tuple) -> bool:
    """True when the constant at the max reads as a value of `shape` through a view: one
    axis holds a dim and every axis before it has extent 1 (`ops.view_offset`'s narrow).
    A narrow along a later axis copies, and its copy takes as many arena bytes as the
    value did (a (1, 1, seq, seq) mask), so such a value is not folded: the stable
    values it is computed from are weighed instead."""
    axes = [k for k, e in enumerate(shape) if not _static(e)]
    return len(axes) == 1 and all(e == 1 for e in shape[: axes[0]])


def _rewrite(graph: Graph, analysis: _Analysis, folded: set[int]) -> PassResult:
    """`graph` with each folded value replaced by its constant at the max and a narrow per
    symbolic axis (the last keeps the value's id, so its readers are unchanged), and the
    nodes nothing reads any more dropped."""
    fresh = max(n.id for n in graph.nodes) + 1
    values = dict(graph.param_values)
    taken = {n.name for n in graph.nodes if n.name} | set(values)
    nodes: list[Node] = []
    for node in graph.nodes:
        if node.id not in folded:
            nodes.append(node)
            continue
        name = f"folded.{node.id}"
        while name in taken:
            name += "_"
        taken.add(name)
        value = analysis.values[node.id]
        values[name] = value
        axes = [k for k, e in enumerate(node.shape) if not _static(e)]
        shape = tuple(value.shape)
        attrs = {"name": name, "shape": shape, "dtype": node.dtype.name}
        last = node.id if not axes else fresh
        fresh += 0 if not axes else 1
        nodes.append(Node(last, "param", (), attrs, shape, node.dtype))
        for k, axis in enumerate(axes):
            shape = (*shape[:axis], node.shape[axis], *shape[axis + 1 :])
            target = node.id if k == len(axes) - 1 else fresh
            fresh += 0 if target == node.id else 1
            attrs = {"axis": axis, "start": 0, "length": node.shape[axis]}
            nodes.append(Node(target, "narrow", (last,), attrs, shape, node.dtype))
            last = target
    # Drop what no output (state updates included) needs any more: the folded values'
    # computations and the bound values only they read. Inputs, unbound params and
    # states stay (the caller's signature, as `dce` keeps them).
    needed = set(graph.outputs)
    kept = []
    for node in reversed(nodes):
        signature = node.op in ("input", "state") or (
            node.op == "param" and node.name not in values
        )
        if node.id in needed or signature or not OPS[node.op].pure:
            needed.update(node.inputs)
            kept.append(node)
    kept.reverse()
    names = {n.name for n in kept if n.op == "param"}
    params = {k: v for k, v in values.items() if k in names}
    result = Graph.from_nodes(
        graph.name, kept, graph.outputs, params, graph.state_positions, graph.state_values
    )
    gone = {n.id for n in graph.nodes} - {n.id for n in kept}
    stats = {"prefix_folded": len(folded), "prefix_dropped": len(gone)}
    return PassResult(result, stats)
