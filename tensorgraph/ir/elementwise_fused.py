"""`elementwise`: a chain of attribute-free elementwise ops as one node, so that its
intermediate values never take memory of their own.

Why. A chain like AdamW's moment update, b1 * m + (1 - b1) * g, reads g while g must
stay live for the next chain (g * g), so unfused each of its steps needs a buffer of
g's size beside g; one node reading m and g and writing over m needs none. With the
largest weight's gradient and one such temporary live together, that pair is the floor
of a training step whose activations are small (a batch of one): no recompute lowers
it, while the fused update halves it.

Semantics: exactly the unfused chain's. `program` lists the steps, `op a b ...` joined
by `;`: operand k < len(inputs) is input k, and operand len(inputs) + j is step j's
result. Each step is a registered elementwise op without attributes (add, mul, sqrt,
square, ...), evaluated with its own kernel, its result in its own inferred dtype, so
every rounding is the unfused chain's: the backends agree with that chain bit for bit.
The node's value is the last step's. Like every elementwise op it may be written over a
same-sized operand (planner/aliasing.py), which is the point.

Invariants: a program has at least one step, every step reads only inputs and earlier
steps, and every input and step is read (the last step by the node), so the result has
the broadcast shape of the inputs. Its vector-Jacobian rule (ir/vjp_elementwise.py) is
the chain's own, step by step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from tensorgraph.errors import DTypeError, ShapeError
from tensorgraph.ir.dtypes import DType
from tensorgraph.ir.ops import OPS, AttrSpec, OpDef, Operand, register
from tensorgraph.ir.shapes import Shape

if TYPE_CHECKING:
    from tensorgraph.ir.node import Node
    from tensorgraph.ir.tensor import Tensor

Step = tuple[str, tuple[int, ...]]


def parse_program(text: str, inputs: int) -> list[Step]:
    """The steps of `text` (module docstring), checked against `inputs` operands;
    ShapeError naming the step that reads what does not exist, an op that is not an
    attribute-free elementwise op, or a value nothing reads."""
    steps: list[Step] = []
    for k, part in enumerate(text.split(";") if text else []):
        if not part.split():
            raise ShapeError(f"step {k} of the program {text!r} is empty")
        op, *refs = part.split()
        if op not in OPS or not OPS[op].elementwise or OPS[op].attrs:
            raise ShapeError(
                f"step {k} ({part!r}): {op!r} is not an elementwise op without attributes"
            )
        try:
            operands = tuple(int(r) for r in refs)
        except ValueError:
            raise ShapeError(f"step {k} ({part!r}): operands must be ints") from None
        if any(not 0 <= r < inputs + k for r in operands):
            raise ShapeError(
                f"step {k} ({part!r}) reads a value of neither an input nor an earlier step"
            )
        steps.append((op, operands))
    if not steps:
        raise ShapeError("an elementwise program needs at least one step")
    read = {r for _, operands in steps for r in operands} | {inputs + len(steps) - 1}
    unread = sorted(set(range(inputs + len(steps))) - read)
    if unread:
        raise ShapeError(f"values {unread} of the program {text!r} are never read")
    return steps


def format_program(steps: Sequence[Step]) -> str:
    return ";".join(" ".join((op, *map(str, operands))) for op, operands in steps)


def _walk(operands: Sequence[Operand], steps: Sequence[Step]) -> list[Operand]:
    """Each step checked by its op's own inference, in order: the steps' values as
    Operands (shape and dtype); ShapeError/DTypeError naming the step otherwise."""
    values = list(operands)
    for k, (op, refs) in enumerate(steps):
        spec, reads = OPS[op], [values[r] for r in refs]
        if not spec.min_inputs <= len(reads) <= (spec.max_inputs or len(reads)):
            raise ShapeError(f"step {k}: {op} takes {spec.min_inputs} operands, not {len(reads)}")
        try:
            shape, dtype = spec.infer(reads, {})
        except (ShapeError, DTypeError) as err:
            raise type(err)(f"step {k} ({op}): {err}") from None
        values.append(Operand(f"step {k}", shape, dtype))
    return values[len(operands) :]


def infer_elementwise(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    """The last step's shape and dtype (the inputs' broadcast shape: every value flows
    into the last step), each step checked by its op's own inference."""
    last = _walk(xs, parse_program(attrs["program"], len(xs)))[-1]
    return last.shape, last.dtype


def step_nodes(node: Node, operands: Sequence[tuple[Shape, DType]]) -> list[Node]:
    """Nodes standing for `node`'s steps (ids -1, -2, ...; their inputs are positions:
    the node's operands, then earlier steps), each with its inferred shape and dtype, for
    backends that evaluate a program step by step with their ops' own kernels.
    `operands` are the (shape, dtype) of `node`'s inputs."""
    from tensorgraph.ir.node import Node

    steps = parse_program(node.attr("program"), len(node.inputs))
    values = _walk([Operand(f"operand {k}", s, d) for k, (s, d) in enumerate(operands)], steps)
    return [
        Node(-1 - k, op, refs, (), v.shape, v.dtype)
        for k, ((op, refs), v) in enumerate(zip(steps, values, strict=True))
    ]


def fuse_since(result: Tensor, first: int, replace: Mapping[int, Tensor] | None = None) -> Tensor:
    """`result` as one `elementwise` node of its graph: the chain is every node from id
    `first` on (`graph.next_id` before building `result`) of `result`'s shape that `result`
    is computed from through elementwise ops without attributes; anything else it reads
    (older nodes, scalars, other ops, other fused nodes) is an input. The chain's nodes
    stay in the graph, unread by the fused node: dead code for the compile's DCE.
    `replace` (node id -> Tensor) names values the chain must read as other tensors
    (an unfused moment update -> its fused node): those ids end the chain, and the
    fused node reads their replacements. `result` itself when the chain has fewer than
    two steps."""
    from tensorgraph.ir.tensor import Tensor, emit

    graph = result.graph
    replace = replace or {}
    shape = graph.node(result.id).shape

    def fusable(node: Node) -> bool:
        spec = OPS[node.op]
        return (
            node.id >= first
            and node.id not in replace
            and spec.elementwise
            and not spec.attrs
            and not spec.boundary
            and node.shape == shape
        )

    chain: dict[int, Node] = {}
    pending = [result.id]
    while pending:
        node = graph.node(pending.pop())
        if node.id not in chain and fusable(node):
            chain[node.id] = node
            pending.extend(node.inputs)
    if len(chain) < 2:
        return replace.get(result.id, result)
    inputs: list[int] = []
    position: dict[int, int] = {}
    order = sorted(chain)  # ids grow along the graph: a topological order of the chain
    for node_id in order:
        for i in chain[node_id].inputs:
            if i not in chain and i not in position:
                position[i] = len(inputs)
                inputs.append(i)
    steps = []
    for node_id in order:
        steps.append((chain[node_id].op, tuple(position[i] for i in chain[node_id].inputs)))
        position[node_id] = len(inputs) + len(steps) - 1
    operands = [replace[i] if i in replace else Tensor(graph, i) for i in inputs]
    return emit("elementwise", operands, graph, program=format_program(steps))


register(
    OpDef(
        "elementwise",
        1,
        None,
        infer_elementwise,
        {"program": AttrSpec("str")},
        category="elementwise",
        elementwise=True,
    )
)
