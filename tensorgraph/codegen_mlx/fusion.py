"""What `mx.compile` fuses inside one segment, as a conservative model for segment costs.

MLX's compiler (mlx/compile.cpp, `compile_fuse`, checked on the installed 0.32.4 with
`mx.export_to_dot` of compiled outputs, tests/codegen_mlx/test_fusion.py) walks the traced
tape from its end and grows a group from each array ("root") down through its inputs:
an array joins the group when its primitive is fusable (unary, binary, ternary `Select`,
`AsType`, `Broadcast`), every primitive reading it (its "parents") is already in the
group, its depth (primitives from the root) is below `MAX_DEPTH`, and the group's
candidate inputs number fewer than `MAX_ARRAYS`. A group of two or more primitives
becomes one `Compiled` kernel: its interior arrays are never allocated; its root and any
member that is a traced output are the kernel's outputs. A traced output of another
shape than the root stops the group; smaller operands broadcast in.

The model. A node is *absorbed* (allocates nothing) in a segment when:

1. its lowering is one fusable primitive (`SINGLE`: operands possibly cast with `AsType`
   and broadcast first), it is not a graph output, and the device checks no guard on it;
2. it has exactly one reading node, which is in the same segment, is itself `SINGLE`
   and unguarded, and has the same shape (then the reader's primitives are its only
   parents, and they are in whatever group the reader is in);
3. its depth bound `h` (the longest path, in primitives, from any array of the segment
   that could root its group down to it) is below `MAX_DEPTH`;
4. its component (nodes joined by edges a fused group can cross) counts at most
   `MAX_ARRAYS - 1` arrays that could be candidate inputs: every array of the
   component or read by it, less its absorbed-eligible nodes (never candidates), plus
   each lowering's own scalar constants, operand casts and inner primitives.

Invariant: every absorbed node is interior to a `Compiled` kernel when the segment is
traced with `mx.compile`, so a segment's cost without its absorbed nodes still bounds
what MLX allocates. Where the model cannot tell what a lowering emits (`UNKNOWN`), it
assumes the worst: depth `MAX_DEPTH` and an unbounded component. MLX fuses more than
this (a node read by two nodes of one group, as in x * sigmoid(x)): those stay charged.

`SegmentFusion` applies the model step by step as the greedy cut grows a segment: a
node is refunded when its reader joins the segment and charged again if a later step
deepens or widens its group past MLX's limits, so every prefix's cost is a bound.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from attrs import frozen

from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node
from tensorgraph.ir.ops import OPS

MAX_DEPTH = 11  # mlx/compile.cpp max_compile_depth: depth >= 11 ends a group
MAX_ARRAYS = 24  # max_compile_arrays: a group stops growing at 24 candidate inputs
# A component past this many nodes is treated as unbounded: it cannot keep every
# candidate input below MAX_ARRAYS anyway unless nearly all of it is absorbed, and
# re-checking it at every step would make the cut quadratic.
MAX_COMPONENT = 256

# Ops lowered to one fusable MLX primitive (after operand casts and broadcasts), with
# the scalar constants the lowering adds (relu's 0, reciprocal's 1). Each was read in
# lowering.py / math_lowering.py and checked on MLX (test_fusion.py).
# fmt: off
_SINGLE = {
    **dict.fromkeys((
        "neg", "abs", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid",
        "square", "erf", "log1p", "expm1", "tan", "atan", "sign", "logical_not",
        "bitwise_not", "add", "sub", "mul", "div", "pow", "maximum", "minimum", "atan2",
        "bitwise_and", "bitwise_or", "bitwise_xor", "eq", "ne", "lt", "le", "gt", "ge",
        "logical_and", "logical_or", "logical_xor", "where",
    ), 0),
    "relu": 1,
    "reciprocal": 1,
}
# fmt: on
_FLOAT_SINGLE = {"floor", "ceil", "round", "remainder"}  # on integers: other lowerings
_ROUNDING = {"floor", "ceil", "round", "trunc"}  # integers: the operand itself

# Ops whose lowering reads each operand through fusable primitives only, at most `L`
# deep below its own output (gelu's tanh form: 9 with an operand cast), or returns an
# operand as it is (L counts that as 1): (L, inner primitives, scalar constants).
_CHAIN = {"gelu": (9, 14, 6), "silu": (3, 4, 0), "broadcast_to": (1, 1, 0)}
_TRANSPARENT = (2, 2, 1)  # a reduction over no axis, integer rounding: x, cast or x != 0
_FLOAT_CHAIN = {"trunc": (2, 5, 1), "isinf": (2, 5, 2)}

# Ops whose lowering reads each operand with a non-fusable primitive, directly or through
# one AsType: an operand is at depth <= 1 in any group these start, whatever follows.
# fmt: off
_OPAQUE = {
    "matmul", "matmul_transposed", "matmul_transposed_a", "conv2d", "sum", "mean", "max",
    "min", "prod", "any", "all", "argmax", "argmin", "cumsum", "cumprod", "softmax",
    "log_softmax",
}
# fmt: on
_LAYOUT = {"reshape", "cast", "transpose", "narrow", "concat"}  # opaque unless no-ops
_REDUCTIONS = {"sum", "mean", "max", "min", "prod", "any", "all"}

REL, ABS, UNKNOWN = 0, 1, 2  # edge kinds: depth = reader's + value, = value, worst case


def fusion_enabled() -> bool:
    """False when MLX's compiler is told not to fuse (MLX_DISABLE_COMPILE): then every
    node allocates, and the segment cost must charge them all."""
    return not os.environ.get("MLX_DISABLE_COMPILE")


def is_single(graph: Graph, node: Node) -> bool:
    """Whether `node`'s lowering is one fusable primitive (condition 1's `SINGLE`)."""
    if node.op in _SINGLE:
        return True
    first = graph.node(node.inputs[0]) if node.inputs else None
    if node.op in _FLOAT_SINGLE:
        return node.dtype.is_float
    if node.op == "cast":
        return first is not None and first.dtype != node.dtype  # else a view: returns x
    return node.op == "isnan" and first is not None and first.dtype.is_float


def _is_identity(node: Node, first: Node) -> bool:
    """Whether a layout op's lowering may hand back its operand (MLX returns the input
    of a no-op reshape, slice or cast); otherwise it is one non-fusable primitive."""
    if node.op in ("reshape", "cast"):
        return node.shape == first.shape and node.dtype == first.dtype
    if node.op == "transpose":
        return tuple(node.attr("axes")) == tuple(range(len(node.shape)))
    if node.op == "narrow":
        return node.attr("start") == 0 and node.attr("length") == first.shape[node.attr("axis")]
    return node.op == "concat" and len(node.inputs) == 1


def _chain(graph: Graph, node: Node) -> tuple[int, int, int] | None:
    """(L, inner primitives, constants) of a `_CHAIN`-like lowering, else None."""
    if node.op in _CHAIN:
        return _CHAIN[node.op]
    if node.op == "elementwise":
        return program_chain(graph, node)
    if node.op in _REDUCTIONS and not node.attr("axes"):
        return _TRANSPARENT
    first = graph.node(node.inputs[0]) if node.inputs else None
    if node.op in _LAYOUT and first is not None and _is_identity(node, first):
        return _TRANSPARENT
    if node.op in _ROUNDING and not node.dtype.is_float:
        return _TRANSPARENT  # integer rounding returns its operand
    if node.op in _FLOAT_CHAIN and first is not None and first.dtype.is_float:
        return _FLOAT_CHAIN[node.op]
    return None


def program_chain(graph: Graph, node: Node) -> tuple[int, int, int] | None:
    """(L, inner primitives, constants) of an `elementwise` node's lowering: each step one
    `_SINGLE` primitive, behind an `AsType` where an operand's dtype is not the step's
    and a `Broadcast` where its shape is not; None (the worst case) where a step is not
    `_SINGLE`."""
    from tensorgraph.ir.elementwise_fused import step_nodes

    operands = [(graph.node(i).shape, graph.node(i).dtype) for i in node.inputs]
    steps = step_nodes(node, operands)
    depth, inner, constants = [0] * len(operands), 0, 0
    for step in steps:
        if step.op not in _SINGLE:
            return None
        below = 0
        for r in step.inputs:
            shape, dtype = operands[r]
            wrapped = int(dtype != step.dtype) + int(shape != step.shape)
            below, inner = max(below, depth[r] + wrapped), inner + wrapped
        operands.append((step.shape, step.dtype))
        depth.append(below + 1)
        inner, constants = inner + 1, constants + _SINGLE[step.op]
    return depth[-1], inner, constants


@frozen
class FusionFacts:
    """The model's per-step facts for one planned schedule (module docstring), indexed
    by step. `reader[k]`: the step of the one node that would fuse step k's node
    (conditions 1-2), or -1. `edges[k]`: (operand step, kind, value) for each computed
    operand: REL (depth = the reader's + value), ABS (depth = value) or UNKNOWN.
    `arrays[k]`: the node's id and its operands' ids. `extra[k]`: candidate inputs the
    lowering adds beyond `arrays` (constants, operand casts, inner primitives).
    `broadcasts[k]`: operands it broadcasts (a `Broadcast` with readers outside a group
    is split, not made an input, so it counts only where it may sit at MAX_DEPTH)."""

    reader: tuple[int, ...]
    edges: tuple[tuple[tuple[int, int, int], ...], ...]
    arrays: tuple[tuple[int, ...], ...]
    extra: tuple[int, ...]
    broadcasts: tuple[int, ...]


def fusion_facts(
    graph: Graph, steps: Sequence[int], guarded: frozenset[int] = frozenset()
) -> FusionFacts:
    """The `FusionFacts` of `graph` scheduled as `steps` (node ids), `guarded` the ids
    of nodes whose guard the device checks (their verdicts read their operands).
    O(nodes + edges)."""
    step_of = {node_id: k for k, node_id in enumerate(steps)}
    readers: dict[int, set[int]] = {}
    for node_id in steps:
        for i in graph.node(node_id).inputs:
            readers.setdefault(i, set()).add(node_id)
    outputs = set(graph.outputs)
    single = {i for i in steps if not OPS[graph.node(i).op].boundary and i not in guarded}
    single = {i for i in single if is_single(graph, graph.node(i))}
    reader, edges, arrays, extra, broadcasts = [], [], [], [], []
    for node_id in steps:
        node = graph.node(node_id)
        users = readers.get(node_id, set())
        fused_by = -1
        if node_id in single and node_id not in outputs and len(users) == 1:
            (user,) = users
            if user in single and graph.node(user).shape == node.shape:
                fused_by = step_of[user]
        reader.append(fused_by)
        node_edges, added, spread = _edges(graph, node, node_id in single, step_of)
        edges.append(node_edges)
        arrays.append((node_id, *dict.fromkeys(node.inputs)))
        extra.append(added)
        broadcasts.append(spread)
    return FusionFacts(*map(tuple, (reader, edges, arrays, extra, broadcasts)))


def _edges(
    graph: Graph, node: Node, single: bool, step_of: dict[int, int]
) -> tuple[tuple[tuple[int, int, int], ...], int, int]:
    """(edges, extra candidate inputs, broadcasts) of `node` as a reader (FusionFacts)."""
    if OPS[node.op].boundary:
        return (), 0, 0
    operands = [graph.node(i) for i in dict.fromkeys(node.inputs)]
    computed = [x for x in operands if not OPS[x.op].boundary]
    if single:
        mixed = len({x.dtype for x in operands} | {node.dtype}) > 1
        edges, extra, spread = [], _SINGLE.get(node.op, 0), 0
        for x in operands:
            broadcast = int(x.shape != node.shape)
            extra, spread = extra + int(mixed), spread + broadcast  # AsType, Broadcast
            if x in computed:
                edges.append((step_of[x.id], REL, 1 + int(mixed) + broadcast))
        return tuple(edges), extra, spread
    chain = _chain(graph, node)
    if chain is not None:
        depth, inner, constants = chain
        return tuple((step_of[x.id], REL, depth) for x in computed), inner + constants, 0
    if node.op in _OPAQUE or node.op in _LAYOUT:
        return tuple((step_of[x.id], ABS, 1) for x in computed), 0, 0
    return tuple((step_of[x.id], UNKNOWN, MAX_DEPTH) for x in computed), 0, 0


class SegmentFusion:
    """The absorbed nodes of a growing segment [start, ...) of one schedule, and the
    bytes they refund (module docstring). `add(step)` takes the next step and returns
    how much the segment's cost changes: the step's own bytes, less the nodes it lets
    fuse, plus any refunded earlier that no longer fuse; `pending` is the bytes of the
    segment's nodes whose fusing reader is still to come (what a longer segment could
    refund). Mutable: one per segment."""

    def __init__(self, facts: FusionFacts, sizes: Sequence[int], start: int) -> None:
        self.facts, self.sizes, self.start = facts, sizes, start
        self.depth: dict[int, int] = {}  # step -> depth bound h
        self.root: dict[int, int] = {}  # union-find parent, by step
        self.arrays: dict[int, set[int]] = {}  # component root -> ids of its arrays
        self.members: dict[int, list[int]] = {}  # component root -> steps
        self.extra: dict[int, int] = {}  # component root -> extra candidate inputs
        self.unbounded: set[int] = set()  # component roots of unknown width
        self.candidates: dict[int, list[int]] = {}  # component root -> eligible steps
        self.absorbed: set[int] = set()
        self.count: dict[int, int] = {}  # component root -> how many are absorbed
        self.pending = 0  # bytes of steps whose fusing reader is still to come

    def _find(self, step: int) -> int:
        while self.root[step] != step:
            self.root[step] = self.root[self.root[step]]
            step = self.root[step]
        return step

    def _union(self, a: int, b: int) -> int:
        a, b = self._find(a), self._find(b)
        if a == b:
            return a
        if len(self.members[a]) < len(self.members[b]):
            a, b = b, a
        self.root[b] = a
        self.arrays[a] |= self.arrays.pop(b)
        self.members[a] += self.members.pop(b)
        self.candidates[a] += self.candidates.pop(b)
        self.extra[a] += self.extra.pop(b)
        self.count[a] += self.count.pop(b)
        if b in self.unbounded or len(self.members[a]) > MAX_COMPONENT:
            self.unbounded.discard(b)
            self.unbounded.add(a)
        return a

    def _deepen(self, step: int, depth: int) -> None:
        """Raise step's depth bound to `depth` and push the rise down its REL edges."""
        stack = [(step, min(depth, MAX_DEPTH))]
        while stack:
            k, d = stack.pop()
            if self.depth.get(k, 0) >= d:
                continue
            self.depth[k] = d
            for j, kind, value in self.facts.edges[k]:
                if j >= self.start and kind == REL:
                    stack.append((j, min(d + value, MAX_DEPTH)))

    def add(self, step: int) -> int:
        """Take `step` (the next of the segment) and return the change of its cost."""
        facts = self.facts
        self.depth[step], self.root[step] = 0, step
        self.arrays[step] = set(facts.arrays[step])
        self.members[step], self.extra[step] = [step], facts.extra[step]
        self.candidates[step], self.count[step] = [], 0
        touched = {step}
        for j, kind, value in facts.edges[step]:
            if j < self.start:
                continue  # computed before the segment: an input array, no primitive
            if kind == UNKNOWN:
                self._deepen(j, MAX_DEPTH)
                self.unbounded.add(self._union(step, j))
            else:
                self._deepen(j, value)
                if kind == REL:
                    self._union(step, j)
                touched.add(j)
        for j, _, _ in facts.edges[step]:
            if j >= self.start and facts.reader[j] == step:
                self.candidates[self._find(j)].append(j)
                self.pending -= self.sizes[j]
        if facts.reader[step] > step:
            self.pending += self.sizes[step]
        delta = self.sizes[step]
        for component in {self._find(k) for k in touched}:
            delta += self._settle(component)
        return delta

    def _settle(self, component: int) -> int:
        """Re-decide which of `component`'s eligible nodes are absorbed; the cost change."""
        if component in self.unbounded and not self.count[component]:
            return 0  # nothing to revoke; its candidates stay charged
        candidates = self.candidates[component]
        shallow = [k for k in candidates if self.depth[k] < MAX_DEPTH]
        width = len(self.arrays[component]) - len(shallow) + self.extra[component]
        width += sum(  # broadcasts that may sit at MAX_DEPTH (below a member, under a cast)
            self.facts.broadcasts[k]
            for k in self.members[component]
            if self.depth[k] + 2 >= MAX_DEPTH
        )
        fits = component not in self.unbounded and width < MAX_ARRAYS
        delta = 0
        for k in candidates:
            fused = fits and self.depth[k] < MAX_DEPTH
            if fused and k not in self.absorbed:
                self.absorbed.add(k)
                delta -= self.sizes[k]
            elif not fused and k in self.absorbed:
                self.absorbed.discard(k)
                delta += self.sizes[k]
        self.count[component] = sum(k in self.absorbed for k in candidates)
        return delta
