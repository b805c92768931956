"""Program state: the persistent buffers (KV caches) a program's calls read and update.

A `State` holds the current value of every state of a program (or of all entries of a
multi-entry program) for one backend, in that backend's form:

- "numpy": one ndarray per state; a call reads them and, once it has succeeded,
  replaces them with the updated values (functional, so a failed call changes nothing);
- "arena": one byte region of `state_size` bytes, the plan's state region: each state
  is an ndarray view at its layout offset, and a call's in-place updates (a KV cache's
  slice_update) write straight into it, as the plan says. The region is backed up
  before the call and restored if the call fails;
- "mlx": one mx.array per state, on the device. The call is handed the only
  reference, so MLX can donate the cache's buffer to its in-place update (no copy of
  the cache per step); if a call fails after that, the state cannot be restored and is
  reset to zeros (the RunError says so).

Every state starts as zeros. Before a call touches any state, `check_indices` proves
on the host every position and index that is computed from inputs alone (a decode
position, the token ids): one out of range is a RunError naming both numbers, and
nothing is written to the state.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
from attrs import frozen

from tensorgraph.errors import RunError
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node, describe
from tensorgraph.ir.ops import OPS
from tensorgraph.runtime.kernels import (
    constant_value,
    evaluate,
    slice_start_fits,
    slice_start_message,
)

STATE_BACKENDS = ("numpy", "arena", "mlx")
# operand position of the index / position each checked op reads, and its rule
INDEXED = {"take": (1, "signed"), "gather": (1, "unsigned"), "index_update": (2, "unsigned")}
HOST_LIMIT = 1 << 12  # elements: bigger values are never evaluated on the host to check


class State:
    """The values of states `specs` (name -> (shape, dtype)) for `backend`, laid out
    at `layout` (name -> byte offset) in a region of `size` bytes (see module doc)."""

    def __init__(
        self,
        specs: Mapping[str, tuple[tuple[int, ...], np.dtype]],
        layout: Mapping[str, int],
        size: int,
        backend: str,
    ) -> None:
        if backend not in STATE_BACKENDS:
            known = ", ".join(STATE_BACKENDS)
            raise RunError(f"unknown backend {backend!r}; choose one of {known}")
        self.backend = backend
        self.specs = dict(specs)
        self.layout = dict(layout)
        self.size = size
        self.reset()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self.specs))

    def reset(self) -> None:
        """Every state back to zeros."""
        if self.backend == "arena":
            self.region = np.zeros(self.size, np.uint8)
            self.values: dict[str, object] = {}
            return
        self.region = None
        if self.backend == "numpy":
            self.values = {n: np.zeros(s, d) for n, (s, d) in self.specs.items()}
        else:
            from tensorgraph.codegen_mlx.arrays import to_mx

            self.values = {n: to_mx(np.zeros(s, d)) for n, (s, d) in self.specs.items()}

    def view(self, name: str) -> np.ndarray:
        """The arena backend's live view of state `name` in the region."""
        shape, dtype = self.specs[name]
        offset = self.layout[name]
        count = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        return self.region[offset : offset + count].view(dtype).reshape(shape)

    def __getitem__(self, name: str) -> np.ndarray:
        """A NumPy copy of state `name`'s current value."""
        if name not in self.specs:
            raise RunError(f"no state named {name!r}; states: {', '.join(self.names) or 'none'}")
        if self.backend == "arena":
            return self.view(name).copy()
        value = self.values[name]
        return np.array(value) if self.backend == "mlx" else value.copy()

    def __contains__(self, name: object) -> bool:
        return name in self.specs

    def __repr__(self) -> str:
        return f"<State {self.backend}: {', '.join(self.names)} ({self.size} B)>"


# A program's own States (owner -> backend -> State), kept outside the frozen programs.
_OWN: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def own_state(owner: object, backend: str) -> State:
    """`owner`'s own State for `backend` (a Program or MultiProgram: made by its
    `new_state` on first use, zeros, then kept across calls)."""
    states = _OWN.setdefault(owner, {})
    if backend not in states:
        states[backend] = owner.new_state(backend)
    return states[backend]


def reset_own_states(owner: object) -> None:
    """Every own State of `owner` back to zeros."""
    for state in _OWN.get(owner, {}).values():
        state.reset()


def state_specs(graphs: Iterable[Graph]) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """name -> (shape, NumPy dtype) of every state the graphs declare."""
    return {n.name: (n.shape, n.dtype.to_numpy()) for g in graphs for n in g.states}


def check_state(
    state: State, backend: str, graph: Graph, states: Sequence[Node] | None = None
) -> None:
    """RunError unless `state` is for `backend` and holds every state `graph` declares
    (`states`: `graph.states`, when the caller keeps it), with the declared shape and
    dtype."""
    if not isinstance(state, State):
        raise RunError(f"state must be a tensorgraph State but got {type(state).__name__}")
    if state.backend != backend:
        raise RunError(f"a state made for backend {state.backend!r} cannot run on {backend!r}")
    for node in graph.states if states is None else states:
        spec = state.specs.get(node.name)
        if spec is None or (tuple(spec[0]), np.dtype(spec[1])) != (
            node.shape,
            np.dtype(node.dtype.to_numpy()),
        ):
            raise RunError(
                f"graph {graph.name!r}: state {node.name!r} ({node.shape} {node.dtype}) is "
                "not in the given State, or has another shape or dtype"
            )


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
    """A `HostCheck` for every position or index operand computed from inputs and
    constants alone, through values of at most HOST_LIMIT elements, in graph order:
    what `check_indices` evaluates before a call."""
    host: dict[int, tuple[Node, ...]] = {}  # node id -> its host-computable cone
    for node in graph.nodes:
        small = int(np.prod(node.shape, dtype=np.int64)) <= HOST_LIMIT
        if node.op in ("input", "constant") and small:
            host[node.id] = (node,)
        elif small and not OPS[node.op].boundary and all(i in host for i in node.inputs):
            cone = {n.id: n for i in node.inputs for n in host[i]}
            host[node.id] = (*cone.values(), node)
    checks = []
    for node in graph.nodes:
        slot = _slot(node)
        if slot is None or node.inputs[slot] not in host:
            continue
        axis = node.attr("axis")
        size = graph.node(node.inputs[0]).shape[axis]
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


def check_indices(graph: Graph, checks: Sequence[HostCheck], feeds: Mapping[int, object]) -> None:
    """RunError naming the node and both numbers when a position or index in `checks`
    (`host_checks(graph)`) is out of range for the `feeds` of a call: the first such
    node in graph order. Checks of one rule (a decode step's four cache writes at one
    position) are evaluated once."""
    values: dict[int, np.ndarray] = {}
    done: set[tuple[int, str, int, int]] = set()
    for check in checks:
        rule = check.rule
        if rule in done:
            continue
        done.add(rule)
        for n in check.cone:
            if n.id in values:
                continue
            if n.op == "input":
                values[n.id] = np.asarray(feeds[n.id])
            elif n.op == "constant":
                values[n.id] = constant_value(n)
            else:
                values[n.id] = evaluate(n, [values[i] for i in n.inputs])
        index = values[rule[0]].astype(np.int64)
        size, node = check.size, check.node
        if check.kind == "start":
            start = int(index.reshape(-1)[0]) if index.size else 0
            if not slice_start_fits(start, check.rows, size):
                raise RunError(slice_start_message(node, start, check.rows, size))
            continue
        low = -size if check.kind == "signed" else 0
        bad = (index < low) | (index >= size)
        if bad.any():
            raise RunError(
                f"{describe(node)}: index {index[bad].flat[0]} is out of range for axis "
                f"{node.attr('axis')} of size {size}"
            )


def check_values(state: State, states: Sequence[Node]) -> None:
    """RunError naming the state unless every value `state` holds for `states` is still
    an array of its declared shape and dtype (a caller may have replaced one in
    `state.values`, or the arena region). Duck-typed, so the oracles import no backend:
    an MLX value's dtype is read from its name."""
    if state.backend == "arena":
        region = state.region
        if not isinstance(region, np.ndarray) or region.shape != (state.size,):
            raise RunError(f"the arena State's region is not {state.size} bytes: {region!r:.60}")
        return
    for node in states:
        value = state.values.get(node.name)
        shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
        if state.backend == "numpy":
            kind_ok = isinstance(value, np.ndarray)
        else:
            kind_ok = type(value).__module__.partition(".")[0] == "mlx"
        dtype = str(dtype).rsplit(".", 1)[-1]
        if not kind_ok or tuple(shape) != node.shape or dtype != node.dtype.name:
            found = type(value).__name__ + (f" {tuple(shape)} {dtype}" if kind_ok else "")
            raise RunError(
                f"state {node.name!r}: expected a {state.backend} array {node.shape} "
                f"{node.dtype} but the State holds {found}"
            )
