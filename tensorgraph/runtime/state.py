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
Before a call touches any state, `check_indices` (runtime/index_checks.py) proves on the
host every position and index computed from inputs, constants and states alone through
small values (a decode position, the token ids, a position counter kept in a state): one
out of range is a RunError naming both numbers, and nothing is written to the state.
What only the device can check (an index computed from a large value) is checked during
the call; the MLX backend then keeps the states' old arrays until the call has succeeded
(see codegen_mlx/state.py). A state whose value an unexpected failure destroyed anyway (MLX
failing inside a call that had donated the state's buffer) is marked `lost`: reading it
or running on it is a RunError until `reset()`.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from tensorgraph.errors import RunError
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node
from tensorgraph.runtime.index_checks import (
    HOST_LIMIT,
    INDEXED,
    REARRANGING,
    HostCheck,
    HostCheckPlan,
    _host_step,
    _slot,
    _test,
    check_indices,
    host_checks,
    implied,
)

# The module's own names, and those it defined before the host checks of positions and
# indices moved to index_checks.py (re-exported: calls.py, codegen_mlx and tests import
# them from here).
__all__ = [
    "HOST_LIMIT",
    "INDEXED",
    "REARRANGING",
    "HostCheck",
    "HostCheckPlan",
    "State",
    "_dtype_name",
    "_host_step",
    "_slot",
    "_test",
    "check_indices",
    "check_state",
    "check_values",
    "host_checks",
    "implied",
    "own_state",
    "reset_own_states",
    "state_initials",
    "state_specs",
]


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
