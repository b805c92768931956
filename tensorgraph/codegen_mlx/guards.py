"""Run-time preconditions the NumPy oracle enforces and MLX does not: `take` indices in
[-size, size), `gather` indices in [0, size), a run-time `slice_update` start with
0 <= start and start + rows <= extent, non-negative exponents of an integer `pow`,
and non-zero divisors of an integer remainder, fmod or floor_divide. Where the oracle raises
RunError the MLX backend must raise the same RunError, never return zeros or garbage.

A guard is checked in four tiers, cheapest first:

1. Statically, from dtypes: uint8 indices into an axis of 256 or more, or an unsigned
   exponent, cannot break the precondition; such nodes are never checked.
2. At run start, from compile-time values: indices or exponents that are a `constant`,
   `full` or `arange` node, or one seen through ops that only rearrange or select its
   elements (`SAME_VALUES`: reshape, broadcast_to, transpose, narrow), are checked on
   the host with NumPy (a constant's bytes are already there; `full` is one value).
   Those in range are never checked again on the device; broken ones stay guarded, so
   the run raises when it reaches them.
3. At run start, from the feeds: an index or position computed from inputs, constants
   and states alone through values of at most `HOST_LIMIT` elements, or rearranged
   from such a value (`runtime.state.REARRANGING`: an embedding gradient's token ids
   broadcast over the width), such as a decode step's `pos`, a token id or a position
   counter kept in a state, is evaluated and checked on the host with NumPy
   (`runtime.state.host_checks` / `check_indices`)
   before anything runs, which a stateful call needs anyway (nothing may be written to
   the state). The executor does this on every call, so such nodes are never checked
   on the device (`device_guarded`): a decode step of the zoo Llama had six device
   verdicts, about 10% of its time on the CPU. A stateful call with a guard left to
   the device keeps its states' old arrays until it has succeeded (codegen_mlx/state.py).
4. On the device, for everything else: `verdict` is one reduction over the guarded
   operand (argmax over an elementwise "bad" mask for take, min for pow) plus a sync to
   read it. That sync is the price of the error; tier 1 and 2 keep it off the common
   cases (slicing's constant positions, `x ** 2`), and an embedding lookup pays one
   tiny reduction over its token ids.

Executors: `guarded_nodes(graph)` lists the nodes of tiers 3 and 4, `device_guarded(graph)`
those of tier 4. Eager: `check(node, args)`
before lowering the node (args are materialised, so its sync is cheap). Traced
(mx.compile, where no value can be read mid-trace): return `verdict(node, args)` of each
guarded node as an extra output and `raise_if_broken(node, v)` on each after the run;
the lowering of take never hands MLX an out-of-range index, so the trace cannot crash.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import mlx.core as mx
import numpy as np
from attrs import frozen

from tensorgraph.codegen_mlx.arrays import MX_DTYPES
from tensorgraph.errors import RunError, TensorGraphError
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node, describe
from tensorgraph.ir.ops import OPS
from tensorgraph.runtime.kernels import (
    constant_value,
    evaluate,
    position_value,
    slice_start_fits,
    slice_start_message,
)
from tensorgraph.runtime.state import host_checks


@frozen
class Guard:
    """One op's precondition.

    `operand`: which input it constrains. `can_break(node, graph)`: False when the
    operand's dtype and the node's shapes make a violation impossible (tier 1).
    `violation(node, values)`: for host values of the operand, the culprits (a tuple of
    ints) or None (tier 2, and the oracle's reading). `verdict(node, args)`: an int64
    mx vector, lazy, [0, ...] when the args are fine, [1, *culprits] when not (tier 3).
    `message(node, culprits)`: the RunError text, in the NumPy kernels' words."""

    operand: int
    can_break: Callable[[Node, Graph], bool]
    violation: Callable[[Node, Graph, np.ndarray], tuple[int, ...] | None]
    verdict: Callable[[Node, Sequence[mx.array]], mx.array]
    message: Callable[[Node, tuple[int, ...]], str]


# ---------------------------------------------------------------- take


def _axis_size(node: Node, graph: Graph) -> int:
    return graph.node(node.inputs[0]).shape[node.attr("axis")]


def _take_can_break(node: Node, graph: Graph) -> bool:
    indices = graph.node(node.inputs[1])
    if 0 in indices.shape:
        return False
    info = np.iinfo(indices.dtype.to_numpy())
    size = _axis_size(node, graph)
    return info.min < -size or info.max >= size


def _take_violation(node: Node, graph: Graph, indices: np.ndarray) -> tuple[int, ...] | None:
    size = _axis_size(node, graph)
    wide = indices.astype(np.int64).reshape(-1)
    bad = (wide < -size) | (wide >= size)
    return (int(wide[bad][0]), size) if bad.any() else None


def _take_verdict(node: Node, args: Sequence[mx.array]) -> mx.array:
    size = args[0].shape[node.attr("axis")]
    wide = args[1].astype(mx.int64).reshape(-1)
    bad = mx.logical_or(wide < -size, wide >= size)
    first = mx.argmax(bad)  # the first bad index, or 0 when none is bad
    return mx.stack([bad[first].astype(mx.int64), wide[first], mx.array(size, mx.int64)])


def _take_message(node: Node, culprits: tuple[int, ...]) -> str:
    index, size = culprits
    return (
        f"{describe(node)}: index {index} is out of range for axis {node.attr('axis')} "
        f"of size {size}"
    )


# ---------------------------------------------------------------- pow


def _pow_can_break(node: Node, graph: Graph) -> bool:
    exponent = graph.node(node.inputs[1])
    return node.dtype.kind == "int" and exponent.dtype.kind == "int" and 0 not in exponent.shape


def _pow_violation(node: Node, graph: Graph, exponent: np.ndarray) -> tuple[int, ...] | None:
    lowest = int(exponent.astype(np.int64).min())
    return (lowest,) if lowest < 0 else None


def _pow_verdict(node: Node, args: Sequence[mx.array]) -> mx.array:
    # The node's dtype is a signed integer at least as wide as the exponent's, so int64
    # holds the exponent's values exactly, as the oracle's cast to the node's dtype does.
    lowest = mx.min(args[1].astype(mx.int64))
    return mx.stack([(lowest < 0).astype(mx.int64), lowest.astype(mx.int64)])


def _pow_message(node: Node, culprits: tuple[int, ...]) -> str:
    return f"{describe(node)}: integer power with the negative exponent {culprits[0]}"


# ---------------------------------------------------------------- slice_update


def _slice_update_can_break(node: Node, graph: Graph) -> bool:
    # Only a run-time start (a third operand) can be out of range: inference checked
    # an attribute start when the node was built.
    return len(node.inputs) == 3


def _slice_update_fit(node: Node, graph: Graph) -> tuple[int, int]:
    """(rows written, extent of the axis) of a slice_update."""
    axis = node.attr("axis")
    target, update = (graph.node(i) for i in node.inputs[:2])
    return update.shape[axis], target.shape[axis]


def _slice_update_violation(node: Node, graph: Graph, start: np.ndarray) -> tuple[int, ...] | None:
    rows, extent = _slice_update_fit(node, graph)
    value = position_value(start)
    return None if slice_start_fits(value, rows, extent) else (value, rows, extent)


def _slice_update_verdict(node: Node, args: Sequence[mx.array]) -> mx.array:
    axis = node.attr("axis")
    rows, extent = args[1].shape[axis], args[0].shape[axis]
    start = args[2].reshape(-1)[0].astype(mx.int64)
    bad = mx.logical_or(start < 0, start + rows > extent).astype(mx.int64)
    return mx.stack([bad, start, mx.array(rows, mx.int64), mx.array(extent, mx.int64)])


def _slice_update_message(node: Node, culprits: tuple[int, ...]) -> str:
    start, rows, extent = culprits
    return slice_start_message(node, start, rows, extent)


# ---------------------------------------------------------------- integer division


def _division_can_break(node: Node, graph: Graph) -> bool:
    # An empty result reads no divisor element (broadcasting never drops a used one).
    return node.dtype.is_integer and 0 not in node.shape


def _division_violation(node: Node, graph: Graph, divisor: np.ndarray) -> tuple[int, ...] | None:
    # The kernels divide by the divisor converted to the node's dtype (2**32 -> int32 0).
    with np.errstate(all="ignore"):
        converted = divisor.astype(node.dtype.to_numpy())
    return None if converted.all() else (0,)


def _division_verdict(node: Node, args: Sequence[mx.array]) -> mx.array:
    converted = args[1].astype(MX_DTYPES[node.dtype.name])
    zero = mx.any(converted == 0).astype(mx.int64)
    return mx.stack([zero, mx.array(0, mx.int64)])


def _division_message(node: Node, culprits: tuple[int, ...]) -> str:
    return f"{describe(node)}: integer division by zero"


# ---------------------------------------------------------------- unsigned indices


def index_guard(
    operand: int,
    extent: Callable[[Node, Graph], int],
    extent_of_args: Callable[[Node, Sequence[mx.array]], int],
    message: Callable[[Node, tuple[int, ...]], str],
) -> Guard:
    """The guard of an op whose operand `operand` holds indices that must lie in
    [0, extent) (index_update's rows, gather_mm's experts): `extent(node, graph)` at
    compile time, `extent_of_args(node, args)` on the device; culprits (index, extent)."""

    def can_break(node: Node, graph: Graph) -> bool:
        indices = graph.node(node.inputs[operand])
        if 0 in indices.shape:
            return False
        info = np.iinfo(indices.dtype.to_numpy())
        return info.min < 0 or info.max >= extent(node, graph)

    def violation(node: Node, graph: Graph, indices: np.ndarray) -> tuple[int, ...] | None:
        size = extent(node, graph)
        wide = indices.astype(np.int64).reshape(-1)
        bad = (wide < 0) | (wide >= size)
        return (int(wide[bad][0]), size) if bad.any() else None

    def verdict(node: Node, args: Sequence[mx.array]) -> mx.array:
        size = extent_of_args(node, args)
        wide = args[operand].astype(mx.int64).reshape(-1)
        bad = mx.logical_or(wide < 0, wide >= size)
        first = mx.argmax(bad)  # the first bad index, or 0 when none is bad
        return mx.stack([bad[first].astype(mx.int64), wide[first], mx.array(size, mx.int64)])

    return Guard(operand, can_break, violation, verdict, message)


def axis_index_guard(operand: int) -> Guard:
    """`index_guard` of an op whose operand `operand` indexes axis `axis` of its first
    input (gather's indices, index_update's and scatter_add's rows), the message naming
    that axis and its size."""
    return index_guard(
        operand, _axis_size, lambda node, args: args[0].shape[node.attr("axis")], _take_message
    )


_DIVISION = Guard(1, _division_can_break, _division_violation, _division_verdict, _division_message)

GUARDS: dict[str, Guard] = {
    "take": Guard(1, _take_can_break, _take_violation, _take_verdict, _take_message),
    "gather": axis_index_guard(1),
    "pow": Guard(1, _pow_can_break, _pow_violation, _pow_verdict, _pow_message),
    "slice_update": Guard(
        2,
        _slice_update_can_break,
        _slice_update_violation,
        _slice_update_verdict,
        _slice_update_message,
    ),
    "remainder": _DIVISION,
    "fmod": _DIVISION,
    "floor_divide": _DIVISION,
}


# ---------------------------------------------------------------- executors' interface


# Ops each of whose output elements is one of its first input's elements, same dtype:
# every guard is elementwise (an index in range, a divisor non-zero, an exponent
# non-negative), so a compile-time input in range proves every output in range. Max
# pool's gradient scatters by a constant window index broadcast over batch and
# channels: checked here once at compile time, not by a reduction and a sync per step,
# and leaving a training step nothing to check on the device (its states are then
# donated to their in-place updates: codegen_mlx/state.py).
SAME_VALUES = frozenset({"reshape", "broadcast_to", "transpose", "narrow"})


def _host_values(graph: Graph, node_id: int) -> np.ndarray | None:
    """The value of a node known before the run (tier 2), or None; for a `SAME_VALUES`
    op over such a node, that node's value (a superset of its elements: in range there
    means in range here); else the exact value of a small node computed from constants
    and bound params only (`_compile_time_value`: a training step's position indices,
    so that the step leaves nothing to the device and donates its states)."""
    node = graph.node(node_id)
    if node.op in SAME_VALUES:
        return _host_values(graph, node.inputs[0])
    if node.op == "constant":
        return constant_value(node)
    if node.op == "full":  # its one value, cast as the oracle casts it
        with np.errstate(all="ignore"):
            return np.asarray(node.attr("value")).astype(node.dtype.to_numpy())
    if node.op == "arange":  # the oracle's own values
        return evaluate(node, [])
    return _compile_time_value(graph, node_id, 0)


# A node computed from compile-time values only is evaluated by the oracle's kernels
# when it is this small and this close to them: enough for a training step's index
# arithmetic (a position table's normalised indices, `where(i < 0, i + n, i)` over
# folded params), without evaluating a model's weights at compile time.
KNOWN_ELEMENTS = 1 << 16
KNOWN_DEPTH = 8


def _compile_time_value(graph: Graph, node_id: int, depth: int) -> np.ndarray | None:
    """The exact value of a node computed only from constants and bound params (at
    most KNOWN_ELEMENTS elements, KNOWN_DEPTH ops deep), by the NumPy oracle's kernels;
    None for anything else (an input, a state, an impure op, too large)."""
    node = graph.node(node_id)
    if node.op == "constant":
        return constant_value(node)
    if node.op == "param":
        value = graph.param_values.get(node.name)
        return None if value is None else np.asarray(value)
    if OPS[node.op].boundary or not OPS[node.op].pure or depth >= KNOWN_DEPTH:
        return None
    if int(np.prod(node.shape, dtype=np.int64)) > KNOWN_ELEMENTS:
        return None
    args = []
    for i in node.inputs:
        value = _compile_time_value(graph, i, depth + 1)
        if value is None:
            return None
        args.append(value)
    try:
        with np.errstate(all="ignore"):
            return np.asarray(evaluate(node, args))
    except TensorGraphError:  # its own precondition broken: left to the run to report
        return None


def guarded_nodes(graph: Graph) -> tuple[Node, ...]:
    """The nodes of `graph`, in order, whose precondition must be checked on the device
    (tier 3), including those whose compile-time operand already breaks it (their check
    raises when the run reaches them). O(nodes + size of constant guarded operands)."""
    result = []
    for node in graph.nodes:
        guard = GUARDS.get(node.op)
        if guard is None or not guard.can_break(node, graph):
            continue
        values = _host_values(graph, node.inputs[guard.operand])
        if values is None or guard.violation(node, graph, values) is not None:
            result.append(node)
    return tuple(result)


def device_guarded(graph: Graph) -> tuple[Node, ...]:
    """`guarded_nodes(graph)` less those whose guarded operand is checked on the host at
    run start (`host_checks`, tier 3): what a run must check on the device, given that
    the executor ran `check_indices` on its feeds first."""
    on_host = {check.node.id for check in host_checks(graph)}
    return tuple(n for n in guarded_nodes(graph) if n.id not in on_host)


def verdict(node: Node, args: Sequence[mx.array]) -> mx.array:
    """`node`'s guard evaluated on `args` (lazy; see Guard.verdict)."""
    return GUARDS[node.op].verdict(node, args)


def raise_if_broken(node: Node, outcome: mx.array) -> None:
    """RunError naming `node` and the culprit if `outcome` (its verdict) says its
    inputs broke the precondition. Reads `outcome`, so it syncs."""
    broken, *culprits = outcome.tolist()
    if broken:
        raise RunError(GUARDS[node.op].message(node, tuple(culprits)))


def check(node: Node, args: Sequence[mx.array]) -> None:
    """Raise `node`'s RunError now if `args` break its precondition (eager executors)."""
    raise_if_broken(node, verdict(node, args))
