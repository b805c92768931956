"""Program state: the persistent buffers (KV caches) a program's calls read and update.

A `State` holds the current value of every state of a program (or of all entries of a
multi-entry program) for one backend, in that backend's form:

- "numpy": one ndarray per state; a call reads them and, once it has succeeded,
  replaces them with the updated values (functional, so a failed call changes nothing);
- "arena": one byte region of `state_size` bytes, the plan's state region: each state
  is an ndarray view at its layout offset, and a call's in-place updates (a KV cache's
  slice_update) write straight into it, as the plan says. The region is backed up
  before the call and restored if the call fails;
- "mlx": one mx.array per state, on the device: a subclass the MLX backend defines
  (codegen_mlx/state.py), made by the driver's `new_state`, so that this module, an
  oracle, never imports the backend it judges.

Invariant: a call that raises leaves every state exactly as it was, on every backend.
Every state starts as its initial value (`initial`, from the graphs' `state_values`: a
trained weight starts from its param's value) or zeros, and `reset()` goes back to it.
Before a call touches any state, `check_indices` proves on the host every position and
index computed from inputs, constants and states alone through small values (a decode
position, the token ids, a position counter kept in a state): one out of range is a
RunError naming both numbers, and nothing is written to the state. What only the device
can check (an index computed from a large value) is checked during the call; the MLX
backend then keeps the states' old arrays until the call has succeeded (see
codegen_mlx/state.py). A state whose value an unexpected failure destroyed anyway (MLX
failing inside a call that had donated the state's buffer) is marked `lost`: reading it
or running on it is a RunError until `reset()`.
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
from tensorgraph.runtime.check_tables import scalar_table
from tensorgraph.runtime.kernels import (
    KERNELS,
    constant_value,
    evaluate,
    slice_start_fits,
    slice_start_message,
)

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


class State:
    """The values of states `specs` (name -> (shape, dtype)) for `backend`, laid out
    at `layout` (name -> byte offset) in a region of `size` bytes (see module doc),
    starting from `initial` (name -> host array; zeros for a state it lacks).
    `lost`: names of states a failed call destroyed (empty but for MLX's one case)."""

    BACKENDS: tuple[str, ...] = ("numpy", "arena")  # a subclass serves the others

    def __init__(
        self,
        specs: Mapping[str, tuple[tuple[int, ...], np.dtype]],
        layout: Mapping[str, int],
        size: int,
        backend: str,
        initial: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        if backend not in self.BACKENDS:
            known = ", ".join(self.BACKENDS)
            raise RunError(f"a {type(self).__name__} serves {known}, not {backend!r}")
        self.backend = backend
        self.specs = dict(specs)
        self.layout = dict(layout)
        self.size = size
        self.initial = {k: v for k, v in (initial or {}).items() if k in self.specs}
        self.reset()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self.specs))

    def reset(self) -> None:
        """Every state back to its initial value or zeros (a lost one included)."""
        self.lost: tuple[str, ...] = ()
        if self.backend == "arena":
            self.region = np.zeros(self.size, np.uint8)
            self.values: dict[str, object] = {}
        else:
            self.region = None
            self.values = {n: self.zeros(s, d) for n, (s, d) in self.specs.items()}
        self.assign(self.initial)

    def zeros(self, shape: tuple[int, ...], dtype: np.dtype) -> object:
        """A zero value of one state in this backend's form."""
        return np.zeros(shape, dtype)

    def host_value(self, name: str) -> np.ndarray:
        """State `name`'s current value as a NumPy array, read only (the arena's view,
        the numpy backend's own array): what the host checks read."""
        return self.view(name) if self.backend == "arena" else self.values[name]

    def check_usable(self) -> None:
        """RunError naming the states a failed call lost (see the module docstring)."""
        if self.lost:
            raise RunError(
                f"state {', '.join(map(repr, self.lost))} was lost when a call failed after "
                "MLX had taken its buffer; call reset() (or the program's reset_state())"
            )

    def view(self, name: str) -> np.ndarray:
        """The arena backend's live view of state `name` in the region."""
        shape, dtype = self.specs[name]
        offset = self.layout[name]
        count = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        return self.region[offset : offset + count].view(dtype).reshape(shape)

    def from_host(self, array: np.ndarray) -> object:
        """A copy of host `array` in this backend's form (the numpy backend's own array)."""
        return np.array(array, copy=True)

    def assign(self, values: Mapping[str, np.ndarray]) -> None:
        """Each state named in `values` set to a copy of that host array (a saved prompt
        cache put back). RunError naming the state, before anything is written, when the
        State is unusable, a name is unknown or a value's shape or dtype differs from the
        state's."""
        self.check_usable()
        for name, array in values.items():
            if name not in self.specs:
                raise RunError(f"no state named {name!r}; states: {', '.join(self.names)}")
            shape, dtype = self.specs[name]
            got = np.asarray(array)
            if got.shape != tuple(shape) or got.dtype != np.dtype(dtype):
                raise RunError(
                    f"state {name!r} is {tuple(shape)} {np.dtype(dtype)} but the value "
                    f"given is {got.shape} {got.dtype}"
                )
        for name, array in values.items():
            if self.backend == "arena":
                self.view(name)[...] = array
            else:
                self.values[name] = self.from_host(np.asarray(array))

    def __getitem__(self, name: str) -> np.ndarray:
        """A NumPy copy of state `name`'s current value."""
        if name not in self.specs:
            raise RunError(f"no state named {name!r}; states: {', '.join(self.names) or 'none'}")
        self.check_usable()
        return np.array(self.host_value(name), copy=True)

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


def state_initials(graphs: Iterable[Graph]) -> dict[str, np.ndarray]:
    """name -> initial value of every state the graphs give one (`Graph.state_values`).
    RunError naming the state when two graphs give one state different values."""
    initial: dict[str, np.ndarray] = {}
    for graph in graphs:
        for name, value in graph.state_values.items():
            known = initial.setdefault(name, value)
            if known is not value and not (
                known.dtype == value.dtype and np.array_equal(known, value, equal_nan=True)
            ):
                raise RunError(
                    f"state {name!r} has two different initial values (graph {graph.name!r} "
                    "gives another than an earlier entry)"
                )
    return initial


def check_state(
    state: State,
    backend: str,
    graph: Graph,
    states: Sequence[Node] | None = None,
    region: tuple[Mapping[str, int], int] | None = None,
) -> None:
    """RunError unless `state` is for `backend` and holds every state `graph` declares
    (`states`: `graph.states`, when the caller keeps it), with the declared shape and
    dtype; for the arena backend, also laid out as `region` (the plan's state layout
    and size) says, as the arena executor reads and writes the region by the plan."""
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
        if backend == "arena" and region is not None:
            layout, size = region
            if state.size != size or state.layout.get(node.name) != layout[node.name]:
                raise RunError(
                    f"graph {graph.name!r}: state {node.name!r} lies at offset "
                    f"{state.layout.get(node.name)} of a {state.size}-byte region in the "
                    f"given State, but the plan puts it at {layout[node.name]} of {size} "
                    "bytes (a State made by another program)"
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
        dtype = _dtype_name(dtype)
        if not kind_ok or tuple(shape) != node.shape or dtype != node.dtype.name:
            found = type(value).__name__ + (f" {tuple(shape)} {dtype}" if kind_ok else "")
            raise RunError(
                f"state {node.name!r}: expected a {state.backend} array {node.shape} "
                f"{node.dtype} but the State holds {found}"
            )


# (type, dtype) -> name, read once per dtype; keyed with the type because dtypes compare
# equal across kinds (np.dtype("int64") == np.int64) while their str differ
_DTYPE_NAMES: dict[tuple[type, object], str] = {}


def _dtype_name(dtype: object) -> str:
    """The last dotted part of `str(dtype)` ("float32" for mlx.core.float32 and NumPy's
    float32), kept per dtype: `check_values` reads it for every state on every call."""
    key = (type(dtype), dtype)
    try:
        name = _DTYPE_NAMES.get(key)
    except TypeError:  # an unhashable dtype (values are duck-typed): not kept
        return str(dtype).rsplit(".", 1)[-1]
    if name is None:
        name = _DTYPE_NAMES[key] = str(dtype).rsplit(".", 1)[-1]
    return name
