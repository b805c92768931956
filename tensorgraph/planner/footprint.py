"""The whole footprint of a compiled program: every byte it holds while it runs, by
where it lives, and the constant segment by kind.

A program holds four things: the constant segment (weights and literals, laid back to
back at the plan's alignment), the state region (KV caches, persistent across calls),
the arena (every intermediate value, reused as the plan says) and the caller's inputs
and outputs (which the MLX backend keeps in arrays of their own). The constant segment
is broken down by kind: float weights by dtype, quantized weights by their
quantization ("4-bit affine, group 64": the packed codes with their scales and biases),
integer and bool tables by dtype. Invariant: the kinds' bytes sum to the constant
segment less its alignment padding, which `padding` states; `total` is the four parts.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from attrs import frozen

from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node
from tensorgraph.planner.report import human

# the operand slots of a quantized op that hold the weight's parts
QUANTIZED_SLOTS = {"dequantize": (0, 1, 2), "quantized_matmul": (1, 2, 3)}


def quantization_label(node: Node) -> str:
    """How a quantized weight read by `node` is named: '4-bit affine, group 64'."""
    mode, bits, group = node.attr("mode"), node.attr("bits"), node.attr("group_size")
    return f"{bits}-bit {mode}, group {group}" if mode == "affine" else f"{mode}, group {group}"


def _quantized_roots(graph: Graph) -> dict[int, str]:
    """Constant-segment node id -> its quantization, for every part of a quantized
    weight (read by a quantized op directly or through the row `take` of a lookup)."""
    labels: dict[int, str] = {}
    for node in graph.nodes:
        slots = QUANTIZED_SLOTS.get(node.op, ())
        for slot in slots:
            if slot >= len(node.inputs):
                continue
            part = graph.node(node.inputs[slot])
            if part.op == "take":
                part = graph.node(part.inputs[0])
            labels.setdefault(part.id, quantization_label(node))
    return labels


@frozen
class Footprint:
    """Bytes held by a compiled program (see the module docstring). `constants` lists
    (kind, bytes) from the largest kind down."""

    constants: tuple[tuple[str, int], ...]
    constant_size: int
    state_size: int
    arena_size: int
    io_size: int

    @property
    def padding(self) -> int:
        """Alignment bytes of the constant segment between its values."""
        return self.constant_size - sum(size for _, size in self.constants)

    @property
    def total(self) -> int:
        return self.constant_size + self.state_size + self.arena_size + self.io_size

    def table(self) -> str:
        """The footprint as aligned text lines, one part (and one constant kind) a line."""
        rows = [("constants", self.constant_size)]
        rows += [(f"  {kind}", size) for kind, size in self.constants]
        if self.padding:
            rows.append(("  alignment padding", self.padding))
        rows += [
            ("state region", self.state_size),
            ("arena", self.arena_size),
            ("inputs and outputs", self.io_size),
            ("total", self.total),
        ]
        width = max(len(label) for label, _ in rows)
        lines = ["memory footprint:"]
        for label, size in rows:
            lines.append(f"  {label:<{width}}  {human(size):>10}  {size:>14,} B")
        return "\n".join(lines)


def constant_kinds(constants: Iterable[tuple[Graph, Node]]) -> tuple[tuple[str, int], ...]:
    """(kind, bytes) of constant-segment values (each given once, with its graph), from
    the largest kind down."""
    kinds: dict[str, int] = defaultdict(int)
    labels: dict[int, dict[int, str]] = {}
    for graph, node in constants:
        if id(graph) not in labels:
            labels[id(graph)] = _quantized_roots(graph)
        kinds[labels[id(graph)].get(node.id, node.dtype.name)] += node.nbytes
    return tuple(sorted(kinds.items(), key=lambda kind: (-kind[1], kind[0])))


def io_size(graph: Graph) -> int:
    """Bytes of `graph`'s inputs and of the outputs a call returns."""
    inputs = sum(n.nbytes for n in graph.nodes if n.op == "input")
    return inputs + sum(graph.node(o).nbytes for o in graph.returned)


def footprint(graph: Graph, plan: object) -> Footprint:
    """The footprint of `graph` compiled to `plan` (a MemoryPlan)."""
    kinds = constant_kinds((graph, graph.node(root)) for root in plan.liveness.constants)
    return Footprint(kinds, plan.constant_size, plan.state_size, plan.arena_size, io_size(graph))
