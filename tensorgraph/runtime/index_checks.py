"""Host checks of positions and indices before a call: every slice_update start and every
take/gather/index_update/gather_mm/scatter_add index computed from inputs, constants and
states alone, through small values (at most HOST_LIMIT elements, or `REARRANGING` ops
over such values), is evaluated on the host with the NumPy kernels and tested against
its axis before the call touches any state (a decode position, the token ids, a position
counter kept in a state).

Invariants: `check_indices` and a `HostCheckPlan` of the same checks raise the same
RunError (naming the node and both numbers) for the same feeds and state, the first
broken rule in graph order, and write nothing anywhere: values are only read. A rule
`implied` by the caller's known input ranges is proven once, when the plan is made, and
never evaluated per call. What only the device can check (an index computed from a
large value) is left to the call itself (codegen_mlx/guards.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
from attrs import frozen

from tensorgraph.errors import RunError
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node, describe
from tensorgraph.ir.ops import OPS
from tensorgraph.runtime.check_tables import scalar_table
from tensorgraph.runtime.kernels import (
    KERNELS,
    constant_value,
    evaluate,
    slice_start_fits,
    slice_start_message,
)

if TYPE_CHECKING:  # annotations only: state.py imports this module
    from tensorgraph.runtime.state import State

# operand position of the index / position each checked op reads, and its rule
INDEXED = {
    "take": (1, "signed"),
    "gather": (1, "unsigned"),
    "index_update": (2, "unsigned"),
    "gather_mm": (2, "unsigned"),
    "scatter_add": (2, "unsigned"),
}


HOST_LIMIT = 1 << 12  # elements: bigger values are never evaluated on the host to check


# Ops that only rearrange their input's elements (NumPy views, no arithmetic): one over
# a host-computable value is host-computable at any size. An embedding's gradient
# scatters by its token ids broadcast over the model width (GPT-2's: 256 ids, 32,768
# indices): checked from the ids on the host, it leaves nothing to the device, so a
# training step donates its states (codegen_mlx/state.py).
REARRANGING = frozenset({"reshape", "broadcast_to", "transpose", "narrow"})


@frozen
class HostCheck:
    """One position or index operand checked on the host before a call: operand `slot`
    of `node`, computed by `cone` (inputs and constants first, in graph order) from the
    feeds alone. `kind`: "start" (a slice_update start: 0 <= start <= size - rows),
    "signed" (indices in [-size, size)) or "unsigned" ([0, size)). `size`: the extent
    of the indexed axis; `rows`: the update's extent along it (starts only)."""

    node: Node
    slot: int
    cone: tuple[Node, ...]
    kind: str
    size: int
    rows: int = 0

    @property
    def rule(self) -> tuple[int, str, int, int]:
        """What the check tests: equal rules pass or fail together on the same feeds."""
        return (self.node.inputs[self.slot], self.kind, self.size, self.rows)


def host_checks(graph: Graph) -> tuple[HostCheck, ...]:
    """A `HostCheck` for every position or index operand computed from inputs,
    constants and states alone, through values of at most HOST_LIMIT elements or
    `REARRANGING` ops over such values, in graph order: what `check_indices` evaluates
    before a call."""
    host: dict[int, tuple[Node, ...]] = {}  # node id -> its host-computable cone
    for node in graph.nodes:
        small = int(np.prod(node.shape, dtype=np.int64)) <= HOST_LIMIT
        small = small or (node.op in REARRANGING and node.inputs[0] in host)
        if node.op in ("input", "constant", "state") and small:
            host[node.id] = (node,)
        elif small and not OPS[node.op].boundary and all(i in host for i in node.inputs):
            cone = {n.id: n for i in node.inputs for n in host[i]}
            host[node.id] = (*cone.values(), node)
    checks = []
    for node in graph.nodes:
        slot = _slot(node)
        if slot is None or node.inputs[slot] not in host:
            continue
        axis = node.attr("axis", 0)
        indexed = 1 if node.op == "gather_mm" else 0  # its indices pick b's experts
        size = graph.node(node.inputs[indexed]).shape[axis]
        cone = host[node.inputs[slot]]
        if node.op == "slice_update":
            rows = graph.node(node.inputs[1]).shape[axis]
            checks.append(HostCheck(node, slot, cone, "start", size, rows))
        else:
            checks.append(HostCheck(node, slot, cone, INDEXED[node.op][1], size))
    return tuple(checks)


def _slot(node: Node) -> int | None:
    if node.op == "slice_update" and len(node.inputs) == 3:
        return 2
    rule = INDEXED.get(node.op)
    return None if rule is None else rule[0]


def check_indices(
    graph: Graph,
    checks: Sequence[HostCheck],
    feeds: Mapping[int, object],
    state: State | None = None,
) -> None:
    """RunError naming the node and both numbers when a position or index in `checks`
    (`host_checks(graph)`) is out of range for the `feeds` of a call (node id -> value)
    and the current values of `state` (None: states read zeros, as a run without a
    State does): the first such node in graph order. Checks of one rule (a decode
    step's four cache writes at one position) are evaluated once. A caller that runs
    one graph many times keeps `HostCheckPlan(checks)` and calls it instead: the same
    checks, planned once."""
    HostCheckPlan(checks)(feeds, state)


def implied(check: HostCheck, known: Mapping[int, tuple[int, int]]) -> bool:
    """Whether `check` passes for every feed its caller vouches for: its index is an input
    itself (the cone is that one node) whose elements `known` (input node id -> (low,
    high)) puts in [low, high), an interval inside the range `check` accepts. A decode
    step fed the argmax of a vocab-wide logits row as its token: [0, vocab) needs no
    reading of the token when the embedding has >= vocab rows."""
    if len(check.cone) != 1 or check.cone[0].id not in known:
        return False
    low, high = known[check.cone[0].id]
    if low >= high:
        return False  # no element at all: nothing to vouch for, keep the check
    if check.kind == "start":
        return low >= 0 and high - 1 <= check.size - check.rows
    return low >= (-check.size if check.kind == "signed" else 0) and high <= check.size


class HostCheckPlan:
    """`check_indices` for fixed `checks`, planned once: each distinct rule with the
    cone nodes it evaluates first (none an earlier rule evaluated), the constants read
    once, and each op's NumPy kernel looked up once. Calling it with a call's feeds and
    State raises exactly what `check_indices` raises, in the same order (rules in graph
    order, each cone's ops before its test), and writes nothing anywhere.

    A rule over one scalar integer input (a decode position) is first looked up in its
    `check_tables.scalar_table`, evaluated once by the same kernels: a passing value
    costs one lookup, any other runs the rule.

    `known` (input node id -> (low, high)): inputs whose every element the caller
    guarantees in [low, high). A rule `implied` by them is proven here, once, and not
    evaluated per call (so an input that is a lazy device array need not be read); every
    other rule is evaluated as before, from the actual feeds.

    An op is computed as `kernels.evaluate` computes it (its kernel under NumPy's
    errstate, entered once per rule, the result's shape checked, cast to the node's
    dtype) but without evaluate's fresh copy: the values are only read here, never handed out. An op
    without a NumPy kernel keeps `evaluate` itself, which raises its RunError when the
    check is run, as before."""

    def __init__(
        self, checks: Sequence[HostCheck], known: Mapping[int, tuple[int, int]] | None = None
    ) -> None:
        self.constants: dict[int, np.ndarray] = {}
        self.rules: list[tuple[tuple[tuple[Node, object], ...], HostCheck, object]] = []
        planned: set[int] = set()
        done: set[tuple[int, str, int, int]] = set()
        for check in checks:
            if check.rule in done or (known and implied(check, known)):
                continue
            done.add(check.rule)
            steps = []
            for node in check.cone:
                if node.id in planned:
                    continue
                planned.add(node.id)
                if node.op == "constant":
                    self.constants[node.id] = constant_value(node)
                else:
                    steps.append((node, _host_step(node)))
            self.rules.append((tuple(steps), check, scalar_table(check)))
        # a rule may be skipped on its table only if no later rule reads what its steps
        # compute (each cone node is computed once, by the first rule that needs it);
        # a skipped rule still reads its inputs (`__call__`), so sharing those is fine
        later: set[int] = set()
        for k in range(len(self.rules) - 1, -1, -1):
            steps, check, table = self.rules[k]
            computed = (node.id for node, step in steps if step != "input")
            if table is not None and any(i in later for i in computed):
                self.rules[k] = (steps, check, None)
            later.update(node.id for node in check.cone)

    def __bool__(self) -> bool:
        return bool(self.rules)

    def __call__(self, feeds: Mapping[int, object], state: State | None = None) -> None:
        values = dict(self.constants)
        for steps, check, table in self.rules:
            if table is not None and table.passes(feeds):
                for node, step in steps:  # a scalar position passing in its table's window
                    if step == "input":
                        values[node.id] = np.asarray(feeds[node.id])
                continue
            # one errstate per rule, not per op (as evaluate: IEEE inf/nan, NumPy's casts)
            with np.errstate(all="ignore"):
                for node, step in steps:
                    if step == "input":
                        values[node.id] = np.asarray(feeds[node.id])
                    elif step == "state":
                        values[node.id] = (
                            np.zeros(node.shape, node.dtype.to_numpy())
                            if state is None
                            else state.host_value(node.name)
                        )
                    else:
                        values[node.id] = step(node, [values[i] for i in node.inputs])
            _test(check, values[check.rule[0]].astype(np.int64))


def _host_step(node: Node) -> object:
    """How `HostCheckPlan` computes `node`: "input", "state", or a function of (node,
    args) computing what `evaluate` computes (see HostCheckPlan)."""
    if node.op in ("input", "state"):
        return node.op
    kernel = KERNELS.get(node.op)
    if kernel is None:
        return evaluate  # raises its RunError naming the node, when the check runs
    target = node.dtype.to_numpy()

    def step(node: Node, args: list[np.ndarray]) -> np.ndarray:  # under the caller's errstate
        result = np.asarray(kernel(node, args))
        if result.shape != node.shape:
            raise RunError(
                f"{describe(node)}: kernel result has shape {result.shape}, the node {node.shape}"
            )
        return result if result.dtype == target else result.astype(target, order="C")

    return step


def _test(check: HostCheck, index: np.ndarray) -> None:
    """RunError naming `check`'s node and both numbers unless `index` is in range."""
    size, node = check.size, check.node
    if check.kind == "start":
        start = int(index.reshape(-1)[0]) if index.size else 0
        if not slice_start_fits(start, check.rows, size):
            raise RunError(slice_start_message(node, start, check.rows, size))
        return
    low = -size if check.kind == "signed" else 0
    if index.size == 1:  # a decode step's one token or position: a scalar compare
        value = int(index.reshape(-1)[0])
        if low <= value < size:
            return
    bad = (index < low) | (index >= size)
    if bad.any():
        raise RunError(
            f"{describe(node)}: index {index[bad].flat[0]} is out of range for axis "
            f"{node.attr('axis')} of size {size}"
        )
