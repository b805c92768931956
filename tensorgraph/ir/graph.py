"""The graph: SSA nodes in a topological order, named boundary nodes, ordered outputs.

A Graph is the one mutable object of the IR, and only by appending (`input`, `param`,
`constant`, `state`, `output`, `update_state`, `add`): nodes are never changed or removed
in place. Passes make new graphs with `Graph.from_nodes`. Derived facts (users, names)
are computed from the nodes; the node tuple and the boundary lists (`nodes`, `inputs`,
`params`, `states`, `boundary(op)`) are computed once and kept until the next append
(`_append` is the one place nodes are added, so the kept ones are never stale): an
executor running one graph per decode step reads them on every call. Bound param values
(weights known at compile time) travel with the graph.

State: a `state` node is a persistent buffer (a KV cache) that a call reads as it was
left by the previous call (when fresh: the initial value the graph carries for it in
`state_values`, a trained weight's starting value, or zeros). `update_state(s, v)` says
the call leaves `v` in it. The new value leaves the call like an output, so
`update_state` appends `v` to `outputs` and records its position in `state_positions`:
every pass, the scheduler and the liveness analysis keep it alive to the end exactly as
they keep an output, with no code of their own. `returned` lists the outputs a run hands
back (the others are committed to the state). Invariant: each state is updated at most
once, by a value of its shape and dtype, and every position in `state_positions` names a
state node.

Symbolic dimensions: shapes and size-like attributes may hold `tg.Dim` extents
(`ir.dims`). `dims` lists the graph's Dims by name; one name means one Dim (a second
Dim of that name with another range is a GraphError). `specialize(seq=40)` gives the
static graph at those values.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from tensorgraph.errors import DTypeError, GraphError, ShapeError, TensorGraphError
from tensorgraph.ir.dims import Dim, canonical_shape, dims_in
from tensorgraph.ir.dtypes import DType, as_dtype
from tensorgraph.ir.node import Node, describe
from tensorgraph.ir.ops import Operand, complete_attrs, get_op

if TYPE_CHECKING:
    from tensorgraph.ir.tensor import Tensor


_BUILDING: list[Graph] = []  # graphs entered with `with graph:`, innermost last


def current_graph() -> Graph | None:
    """The innermost graph opened with `with graph:`, or None."""
    return _BUILDING[-1] if _BUILDING else None


def label(node: Node) -> str:
    """How messages name a value: the user's name for boundary nodes, else `%id`."""
    return node.name or f"%{node.id}"


class Graph:
    """A tensor graph under construction or produced by a pass (see module docstring)."""

    def __init__(self, name: str = "graph") -> None:
        self.name = name
        self._nodes: list[Node] = []
        self._by_id: dict[int, Node] = {}
        self._outputs: list[int] = []
        self._names: dict[str, int] = {}
        self._state_positions: dict[str, int] = {}  # state name -> position in _outputs
        self.param_values: dict[str, np.ndarray] = {}
        self.state_values: dict[str, np.ndarray] = {}  # state name -> initial value (else zeros)
        self._dims: dict[str, Dim] = {}  # the Dims in node shapes and attributes, by name
        self._next_id = 0
        # derived from _nodes, dropped by _append: "" -> every node, op -> its nodes
        self._kept: dict[str, tuple[Node, ...]] = {}

    # ------------------------------------------------------------ reading

    @property
    def nodes(self) -> Sequence[Node]:
        """Every node, in a valid topological order (read-only view)."""
        kept = self._kept.get("")
        if kept is None:
            kept = self._kept[""] = tuple(self._nodes)
        return kept

    @property
    def next_id(self) -> int:
        """The id the next node added gets: ids only grow, so nodes made from here on
        are exactly those with an id at least this (a mark, as for `fuse_since`)."""
        return self._next_id

    @property
    def outputs(self) -> tuple[int, ...]:
        """Ids of the output nodes, in the order the user listed them (repeats allowed)."""
        return tuple(self._outputs)

    @property
    def state_positions(self) -> dict[str, int]:
        """State name -> the position in `outputs` of its new value (see module doc)."""
        return dict(self._state_positions)

    @property
    def state_updates(self) -> dict[str, int]:
        """State name -> id of the node whose value the call leaves in that state."""
        return {name: self._outputs[k] for name, k in self._state_positions.items()}

    @property
    def returned(self) -> tuple[int, ...]:
        """Ids of the outputs a run hands back: `outputs` less the state updates."""
        updates = set(self._state_positions.values())
        return tuple(o for k, o in enumerate(self._outputs) if k not in updates)

    @property
    def dims(self) -> dict[str, Dim]:
        """The `tg.Dim`s in this graph's shapes and attributes, by name (empty when every
        shape is static)."""
        return dict(self._dims)

    @property
    def states(self) -> list[Node]:
        return self.boundary("state")

    def node(self, node_id: int) -> Node:
        try:
            return self._by_id[node_id]
        except KeyError:
            raise GraphError(f"graph {self.name!r} has no node %{node_id}") from None

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._by_id

    def __len__(self) -> int:
        return len(self._nodes)

    def boundary(self, op: str) -> list[Node]:
        """The nodes of boundary op `op` ('input', 'param', 'constant' or 'state'), in
        order: a fresh list each call (the caller may change it), of nodes found once."""
        kept = self._kept.get(op)
        if kept is None:
            kept = self._kept[op] = tuple(n for n in self._nodes if n.op == op)
        return list(kept)

    @property
    def inputs(self) -> list[Node]:
        return self.boundary("input")

    @property
    def params(self) -> list[Node]:
        return self.boundary("param")

    def users(self) -> dict[int, list[int]]:
        """node id -> ids of the nodes reading it (once per reading node, in order)."""
        result: dict[int, list[int]] = {n.id: [] for n in self._nodes}
        for node in self._nodes:
            for source in dict.fromkeys(node.inputs):
                result[source].append(node.id)
        return result

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Graph):
            return NotImplemented
        return (
            self.name == other.name
            and self._nodes == other._nodes
            and self._outputs == other._outputs
            and self._state_positions == other._state_positions
            and _same_values(self.param_values, other.param_values)
            and _same_values(self.state_values, other.state_values)
        )

    __hash__ = None  # mutable

    def __str__(self) -> str:
        from tensorgraph.ir.printer import format_graph

        return format_graph(self)

    def __repr__(self) -> str:
        return f"<Graph {self.name!r}: {len(self._nodes)} nodes, {len(self._outputs)} outputs>"

    # ------------------------------------------------------------ building

    def __enter__(self) -> Graph:
        """`with g:` makes `g` the graph for generators (tg.arange, tg.full, tg.zeros)."""
        _BUILDING.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _BUILDING.remove(self)

    def add(
        self,
        op: str,
        inputs: Sequence[int] = (),
        attrs: Mapping[str, object] | None = None,
    ) -> Node:
        """Append `op(inputs)` with `attrs`: validates arity and attributes, infers shape and
        dtype. Errors name the would-be node (`%id op`) and the operands."""
        opdef = get_op(op)
        node_id = self._next_id
        who = f"%{node_id} {op}"
        inputs = tuple(inputs)
        if len(inputs) < opdef.min_inputs or (
            opdef.max_inputs is not None and len(inputs) > opdef.max_inputs
        ):
            expected = (
                f"{opdef.min_inputs}"
                if opdef.min_inputs == opdef.max_inputs
                else f"{opdef.min_inputs}..{opdef.max_inputs or 'n'}"
            )
            raise GraphError(f"{who}: takes {expected} inputs but got {len(inputs)}")
        operands = []
        for i in inputs:
            if i not in self._by_id:
                raise GraphError(f"{who}: input %{i} is not a node of graph {self.name!r}")
            source = self._by_id[i]
            operands.append(Operand(label(source), source.shape, source.dtype))
        full = complete_attrs(opdef, attrs or {}, who)
        try:
            shape, dtype = opdef.infer(operands, full)
        except (ShapeError, DTypeError, GraphError) as err:
            raise type(err)(f"{who}: {err}") from err
        except TypeError as err:
            # A rule not written for Dim extents compared one (sympy cannot decide it):
            # refused by name rather than assumed.
            if not dims_in(*(o.shape for o in operands), *full.values()):
                raise
            shapes = ", ".join(str(o) for o in operands)
            raise GraphError(
                f"{who}: {op}'s shape rule cannot compare Dim extents ({err}): {shapes}"
            ) from err
        node = Node(node_id, op, inputs, full, shape, dtype)
        if node.symbolic:  # extents in canonical form: equal extents make equal nodes
            node = Node(node_id, op, inputs, full, canonical_shape(shape), dtype)
        name = node.name
        if name and opdef.boundary:
            if name in self._names:
                raise GraphError(f"{who}: duplicate name {name!r} (already %{self._names[name]})")
            self._names[name] = node_id
        self._append(node)
        return node

    def _append(self, node: Node) -> None:
        if node.symbolic:
            for dim in dims_in(node.shape, *(v for _, v in node.attrs)):
                known = self._dims.setdefault(dim.name, dim)
                if known != dim:
                    raise GraphError(
                        f"{describe(node)}: Dim {dim.describe()} beside the graph's Dim "
                        f"{known.describe()} of the same name"
                    )
        self._nodes.append(node)
        self._kept.clear()
        self._by_id[node.id] = node
        self._next_id = max(self._next_id, node.id + 1)

    def _tensor(self, node: Node) -> Tensor:
        from tensorgraph.ir.tensor import Tensor

        return Tensor(self, node.id)

    def input(self, name: str, shape: Iterable[int], dtype: DType | str = "float32") -> Tensor:
        """A run-time input named `name` (fed by `prog.run({name: array})`)."""
        dtype = as_dtype(dtype)
        node = self.add("input", (), {"name": name, "shape": tuple(shape), "dtype": dtype.name})
        return self._tensor(node)

    def param(
        self,
        name: str,
        shape: Iterable[int],
        dtype: DType | str = "float32",
        value: np.ndarray | None = None,
    ) -> Tensor:
        """A weight named `name`: bound now when `value` is given, else supplied at run time."""
        dtype = as_dtype(dtype)
        node = self.add("param", (), {"name": name, "shape": tuple(shape), "dtype": dtype.name})
        if value is not None:
            self.bind(name, value)
        return self._tensor(node)

    def bind(self, name: str, value: np.ndarray) -> None:
        """Bind param `name` to `value` (its shape and dtype must match the declaration)."""
        self.param_values[name] = self._checked_value("param", name, value)

    def _checked_value(self, op: str, name: str, value: np.ndarray) -> np.ndarray:
        """A C-contiguous copy of `value` for the `op` node `name` (GraphError when there
        is none; ShapeError/DTypeError naming it when the value does not fit)."""
        node = self._names.get(name)
        if node is None or self._by_id[node].op != op:
            raise GraphError(f"graph {self.name!r} has no {op} named {name!r}")
        declared = self._by_id[node]
        array = np.asarray(value)
        if tuple(array.shape) != declared.shape:
            raise ShapeError(f"{op} {name!r}: value shape {array.shape} != {declared.shape}")
        if array.dtype != declared.dtype.to_numpy():
            raise DTypeError(f"{op} {name!r}: value dtype {array.dtype} != {declared.dtype}")
        return np.array(array, order="C")

    def state(
        self,
        name: str,
        shape: Iterable[int],
        dtype: DType | str = "float32",
        value: np.ndarray | None = None,
    ) -> Tensor:
        """A persistent buffer named `name` (a KV cache, a trained weight): a call reads
        the value the previous call left (when fresh: `value`, kept in `state_values`,
        or zeros); `update_state` sets what this call leaves."""
        dtype = as_dtype(dtype)
        node = self.add("state", (), {"name": name, "shape": tuple(shape), "dtype": dtype.name})
        if value is not None:
            self.state_values[name] = self._checked_value("state", name, value)
        return self._tensor(node)

    def update_state(self, state: Tensor | str, value: Tensor) -> None:
        """After a successful call, state `state` (its tensor or name) holds `value`, a
        tensor of this graph with the state's shape and dtype. GraphError when the state
        is unknown or already updated, ShapeError/DTypeError when `value` does not fit."""
        name = state if isinstance(state, str) else getattr(self._node_of(state), "name", None)
        node_id = self._names.get(name) if isinstance(name, str) else None
        if node_id is None or self._by_id[node_id].op != "state":
            raise GraphError(f"graph {self.name!r}: {state!r} is not a state of this graph")
        if name in self._state_positions:
            raise GraphError(f"graph {self.name!r}: state {name!r} is already updated")
        target, source = self._by_id[node_id], self._node_of(value)
        if source.shape != target.shape:
            raise ShapeError(
                f"state {name!r} is {target.shape} but its update {describe(source)} is "
                f"{source.shape}"
            )
        if source.dtype != target.dtype:
            raise DTypeError(
                f"state {name!r} is {target.dtype} but its update {describe(source)} is "
                f"{source.dtype}"
            )
        self._state_positions[name] = len(self._outputs)
        self._outputs.append(source.id)

    def _node_of(self, tensor: object) -> Node:
        node_id = getattr(tensor, "id", None)
        if getattr(tensor, "graph", None) is not self or node_id not in self._by_id:
            raise GraphError(f"graph {self.name!r}: {tensor!r} is not one of its nodes")
        return self._by_id[node_id]

    def constant(self, value: object, dtype: DType | str | None = None, name: str = "") -> Tensor:
        """A literal array (kept as bytes in the node, so equal constants are equal nodes)."""
        array = np.asarray(value)
        target = as_dtype(dtype) if dtype is not None else _default_dtype(array)
        array = np.array(array, dtype=target.to_numpy(), order="C")
        node = self.add(
            "constant",
            (),
            {"name": name, "shape": array.shape, "dtype": target.name, "value": array.tobytes()},
        )
        return self._tensor(node)

    def output(self, *tensors: Tensor) -> None:
        """Append outputs, in order; a tensor may be listed more than once."""
        for tensor in tensors:
            node_id = getattr(tensor, "id", None)
            if getattr(tensor, "graph", None) is not self or node_id not in self._by_id:
                raise GraphError(f"graph {self.name!r}: output {tensor!r} is not one of its nodes")
            self._outputs.append(node_id)

    # ------------------------------------------------------------ rewriting

    @classmethod
    def from_nodes(
        cls,
        name: str,
        nodes: Iterable[Node],
        outputs: Iterable[int],
        param_values: Mapping[str, np.ndarray] | None = None,
        state_positions: Mapping[str, int] | None = None,
        state_values: Mapping[str, np.ndarray] | None = None,
    ) -> Graph:
        """A graph holding exactly `nodes` (in the given order), `outputs`, the state
        updates at `state_positions` (name -> output position) and the states' initial
        values `state_values`. Ids are kept; only `verify` checks the result, so passes
        can be checked after the fact."""
        graph = cls(name)
        for node in nodes:
            if node.id in graph._by_id:
                raise GraphError(f"graph {name!r}: duplicate node id %{node.id}")
            graph._append(node)
            if node.name and get_op(node.op).boundary:
                graph._names.setdefault(node.name, node.id)
        graph._outputs = list(outputs)
        graph.param_values = dict(param_values or {})
        graph._state_positions = dict(state_positions or {})
        graph.state_values = dict(state_values or {})
        return graph

    def rebuilt(self, nodes: Iterable[Node], outputs: Iterable[int] | None = None) -> Graph:
        """A graph of `nodes` with this graph's name, outputs (or `outputs`, position for
        position), state updates and the bound values of the params and the initial
        values of the states still present."""
        nodes = list(nodes)
        outputs = self._outputs if outputs is None else list(outputs)
        states = {n.name for n in nodes if n.op == "state"}
        initial = {k: v for k, v in self.state_values.items() if k in states}
        return Graph.from_nodes(
            self.name, nodes, outputs, self._live_params(nodes), self._state_positions, initial
        )

    def replace_uses(self, mapping: Mapping[int, int]) -> Graph:
        """A new graph where every use of `old` (inputs and outputs) reads `mapping[old]`,
        and the replaced nodes are dropped. Replacements must come earlier in the order."""
        nodes = [
            node
            if not any(i in mapping for i in node.inputs)
            else _evolve_inputs(node, tuple(mapping.get(i, i) for i in node.inputs))
            for node in self._nodes
            if node.id not in mapping
        ]
        return self.rebuilt(nodes, [mapping.get(o, o) for o in self._outputs])

    def keep(self, node_ids: Iterable[int]) -> Graph:
        """A new graph with only the nodes in `node_ids` (order kept), same outputs."""
        keep = set(node_ids)
        return self.rebuilt(n for n in self._nodes if n.id in keep)

    def _live_params(self, nodes: Iterable[Node]) -> dict[str, np.ndarray]:
        names = {n.name for n in nodes if n.op == "param"}
        return {k: v for k, v in self.param_values.items() if k in names}

    def specialize(self, **values: int) -> Graph:
        """This graph with each named Dim replaced by its int value (`seq=40`); see
        `tensorgraph.ir.specialize.specialize` for the contract and errors."""
        from tensorgraph.ir.specialize import specialize

        return specialize(self, **values)

    # ------------------------------------------------------------ serialisation

    def to_json(self) -> str:
        """Exact JSON text of the graph, constants and bound params included."""
        from tensorgraph.ir.serialize import graph_to_json

        return graph_to_json(self)

    @classmethod
    def from_json(cls, text: str) -> Graph:
        """The graph `to_json` wrote; verified, so a corrupted text raises a GraphError."""
        from tensorgraph.ir.serialize import graph_from_json

        return graph_from_json(text)


def _same_values(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(
        a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k], equal_nan=True) for k in a
    )


def _evolve_inputs(node: Node, inputs: tuple[int, ...]) -> Node:
    return Node(node.id, node.op, inputs, node.attrs, node.shape, node.dtype)


def _default_dtype(array: np.ndarray) -> DType:
    """float64 literals become float32 and Python ints int32 (the MLX defaults)."""
    if array.dtype == np.float64:
        return as_dtype("float32")
    if array.dtype == np.int64 and array.ndim == 0:
        return as_dtype("int32")
    try:
        return as_dtype(array.dtype)
    except TensorGraphError as err:
        raise DTypeError(f"constant of unsupported dtype {array.dtype}") from err


__all__ = ["Graph", "describe", "label"]
