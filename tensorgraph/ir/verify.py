"""The IR verifier: checks every structural invariant of a graph, independently.

Invariants checked (each failure raises GraphError, ShapeError or DTypeError whose
message carries the offending node's printed line):
1. node ids are unique;
2. every input id names a node earlier in the list (topological order, no dangling ids,
   hence no cycles);
3. every op is registered and called with an arity its OpDef allows;
4. attributes are exactly the op's schema, of the declared kinds;
5. shape and dtype equal what the op's inference gives for the inputs;
6. boundary names (inputs, params, named constants) are unique and non-empty for inputs
   and params;
7. every output id names a node;
8. bound param values exist only for declared params and match their shape and dtype;
9. every state update names a state node and sits at an output position, once, with a
   value of the state's shape and dtype;
10. initial state values exist only for declared states and match their shape and dtype;
11. `tg.Dim` extents are canonical (shapes compare after `dims.canonical`), and one
   name means one Dim across the graph's shapes and attributes;

The graph carries no memory decision: where a value's bytes live (a view of its input,
an in-place write over an operand) is computed by the planner's alias analysis for a
chosen order, so no attribute can claim it (4. rejects any attribute outside the schema).
"""

from __future__ import annotations

from tensorgraph.errors import DTypeError, GraphError, ShapeError
from tensorgraph.ir.dims import canonical, dims_in
from tensorgraph.ir.graph import Graph, label
from tensorgraph.ir.node import Node
from tensorgraph.ir.ops import OPS, Operand, complete_attrs
from tensorgraph.ir.printer import format_node


def _fail(error: type[Exception], node: Node, message: str) -> None:
    raise error(f"{message}\n  in: {format_node(node)}")


def verify(graph: Graph) -> None:
    """Raise on the first broken invariant (see module docstring); return None if sound."""
    seen: dict[int, Node] = {}
    names: dict[str, int] = {}
    dims: dict[str, object] = {}
    for node in graph.nodes:
        who = f"%{node.id} {node.op}"
        if node.id in seen:
            _fail(GraphError, node, f"{who}: duplicate node id")
        opdef = OPS.get(node.op)
        if opdef is None:
            _fail(GraphError, node, f"{who}: unknown op {node.op!r}")
        count = len(node.inputs)
        if count < opdef.min_inputs or (opdef.max_inputs is not None and count > opdef.max_inputs):
            _fail(GraphError, node, f"{who}: {count} inputs is not a valid arity")
        for i in node.inputs:
            if i not in seen:
                where = "a later node (order or cycle)" if i in graph else "no node (dangling)"
                _fail(GraphError, node, f"{who}: input %{i} is {where}")
        attrs = node.attr_dict
        if complete_attrs(opdef, attrs, who, node.symbolic) != attrs:
            _fail(GraphError, node, f"{who}: attributes {attrs} do not match the op's schema")
        operands = [Operand(label(seen[i]), seen[i].shape, seen[i].dtype) for i in node.inputs]
        try:
            shape, dtype = opdef.infer(operands, attrs)
        except (ShapeError, DTypeError, GraphError) as err:
            _fail(type(err), node, f"{who}: {err}")
        if node.symbolic:
            shape = tuple(d if type(d) is int else canonical(d) for d in shape)
            for dim in dims_in(node.shape, *attrs.values()):
                if dims.setdefault(dim.name, dim) != dim:
                    _fail(GraphError, node, f"{who}: two Dims named {dim.name!r}")
        if tuple(shape) != node.shape:
            _fail(ShapeError, node, f"{who}: shape {node.shape} but inference gives {shape}")
        if dtype != node.dtype:
            _fail(DTypeError, node, f"{who}: dtype {node.dtype} but inference gives {dtype}")
        if opdef.boundary:
            name = node.attr("name")
            if node.op != "constant" and not name:
                _fail(GraphError, node, f"{who}: inputs, params and states need a name")
            if name:
                if name in names:
                    _fail(GraphError, node, f"{who}: duplicate name {name!r} (%{names[name]})")
                names[name] = node.id
        seen[node.id] = node
    for position, output in enumerate(graph.outputs):
        if output not in seen:
            raise GraphError(f"graph {graph.name!r}: output {position} is %{output}, no node")
    _verify_states(graph, seen)
    params = {n.attr("name"): n for n in seen.values() if n.op == "param"}
    for name, value in graph.param_values.items():
        if name not in params:
            raise GraphError(f"graph {graph.name!r}: bound value for unknown param {name!r}")
        node = params[name]
        if tuple(value.shape) != node.shape or value.dtype != node.dtype.to_numpy():
            _fail(
                ShapeError,
                node,
                f"param {name!r}: bound value {value.shape} {value.dtype} does not match",
            )
    states = {n.attr("name"): n for n in seen.values() if n.op == "state"}
    for name, value in graph.state_values.items():  # invariant 10
        if name not in states:
            raise GraphError(f"graph {graph.name!r}: initial value for unknown state {name!r}")
        node = states[name]
        if tuple(value.shape) != node.shape or value.dtype != node.dtype.to_numpy():
            _fail(
                ShapeError,
                node,
                f"state {name!r}: initial value {value.shape} {value.dtype} does not match",
            )


def _verify_states(graph: Graph, seen: dict[int, Node]) -> None:
    """Invariant 9: each update names a state, at a distinct output position, and fits."""
    states = {n.attr("name"): n for n in seen.values() if n.op == "state"}
    positions = graph.state_positions
    if len(set(positions.values())) != len(positions):
        raise GraphError(f"graph {graph.name!r}: two states are updated by one output position")
    for name, position in positions.items():
        if name not in states:
            raise GraphError(f"graph {graph.name!r}: update of unknown state {name!r}")
        if not isinstance(position, int) or not 0 <= position < len(graph.outputs):
            raise GraphError(
                f"graph {graph.name!r}: state {name!r} is updated by output position "
                f"{position!r}, but the graph has {len(graph.outputs)} outputs"
            )
        value, state = seen[graph.outputs[position]], states[name]
        if value.shape != state.shape or value.dtype != state.dtype:
            _fail(
                ShapeError if value.shape != state.shape else DTypeError,
                value,
                f"state {name!r} is {state.shape} {state.dtype} but its update is "
                f"{value.shape} {value.dtype}",
            )
