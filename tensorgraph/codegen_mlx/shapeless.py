"""Which nodes of a symbolic graph MLX can trace once for every length:
`mx.compile(shapeless=True)`.

A shapeless trace is recorded at one length and replayed at others: MLX recomputes every
recorded primitive's output shape from its inputs' (`Primitive::output_shapes`), and
everything else the trace decided in Python at record time stays as it was. So a node
may join a shapeless trace only when nothing its lowering decides depends on the dims:

1. its op is in SHAPELESS_OPS: the lowering reads only its operands' arrays, its dtype
   and static attributes (an axis, an epsilon), never `node.shape` or an operand's
   extent along a symbolic axis, and every MLX primitive it records infers its output
   shape from its inputs. Measured with MLX 0.32 (tests/codegen_mlx/test_symbolic_mlx.py
   replays each at several lengths against a per-shape compile): elementwise ops with
   broadcasting, matmul, reductions over fixed axes, softmax, transposes, casts,
   concatenation, row-wise norms and gathers from a static table are; a slice (narrow,
   pad) cannot infer its shape (MLX raises), `broadcast_to` and `full` bake their target
   shape, and attention's causal mask and rope's tables are built for the traced length
   (MLX replays them silently wrong: the reason for an allowlist, not a denylist);
2. no attribute holds a dim (a reshape target, a narrow's start, an arange bound);
   a reshape is the one exception: with exactly one symbolic extent in its target, it
   lowers as `mx.reshape(x, target with -1 there)`, which MLX re-infers per length
   (`lowering`), since the other extents are static and the element count is kept;
3. every extent of the node and of its operands is at least 1 at every length: the
   lowerings decide "no elements" (`lowering._lowered`) in Python; and every axis a
   reduction reduces (sum, mean, max, min, prod, softmax, a norm's last axis) is at
   least 2 at every length: MLX 0.32's shapeless replay of a reduction over an axis of
   extent 1 (a static 1 too, once other extents change) crashes the process (a
   segmentation fault, found by the tests' random graphs; argmax, cumsum and matmul
   were fine);
4. matmul only for floats (the integer path reshapes to `node.shape`), a gather only
   from an operand whose shape holds no dim (the index replacement reads its extent).

Anything else (a node not passing 1-4, or a guarded node, whose verdict reads extents) is
shape-dependent: its segment is traced per length and kept in a bounded cache.
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx

from tensorgraph.codegen_mlx.lowering import Lowering
from tensorgraph.ir.dims import always, dims_in, is_static
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node

SHAPELESS_OPS = frozenset(
    {
        # elementwise, unary
        *("neg", "abs", "exp", "log", "sqrt", "rsqrt", "reciprocal", "square", "sin"),
        *("cos", "tanh", "sigmoid", "relu", "gelu", "silu", "logical_not", "erf"),
        *("log1p", "expm1", "isnan", "isinf", "sign"),
        # elementwise, binary with broadcasting
        *("add", "sub", "mul", "div", "maximum", "minimum", "eq", "ne", "lt", "le"),
        *("gt", "ge", "logical_and", "logical_or", "where"),
        # contractions, reductions over fixed axes, layout
        *("matmul", "sum", "mean", "max", "min", "prod", "argmax", "argmin"),
        *("softmax", "log_softmax", "transpose", "cast", "concat", "reshape"),
        *("rms_norm", "layer_norm", "take"),
    }
)


def _reduced_axes(node: Node, rank: int) -> tuple[int, ...]:
    """The axes of its first operand (of rank `rank`) that reduction `node` reduces;
    () for an op that reduces none."""
    if node.op in ("sum", "mean", "max", "min", "prod"):
        return tuple(a % rank for a in node.attr("axes"))
    if node.op in ("softmax", "log_softmax"):
        return (node.attr("axis") % rank,)
    if node.op in ("rms_norm", "layer_norm"):
        return (rank - 1,)
    return ()


def is_shapeless(graph: Graph, node: Node) -> bool:
    """Whether `node` of symbolic `graph` may join a shapeless trace (rules 1-4 of the
    module docstring)."""
    if node.op not in SHAPELESS_OPS:
        return False
    operands = [graph.node(i) for i in node.inputs]
    if node.op == "reshape":
        if sum(not is_static(d) for d in node.shape) > 1:
            return False
    elif dims_in(*(value for _, value in node.attrs)):
        return False
    extents = [d for n in (node, *operands) for d in n.shape]
    if not all(d >= 1 if is_static(d) else always(d, ">=", 1) is True for d in extents):
        return False
    if operands:
        shape = operands[0].shape
        for axis in _reduced_axes(node, len(shape)):
            if always(shape[axis], ">=", 2) is not True:
                return False
    if node.op == "matmul" and not node.dtype.is_float:
        return False
    return not (node.op == "take" and not all(is_static(d) for d in operands[0].shape))


def shapeless_nodes(graph: Graph, guarded: Sequence[Node] = ()) -> frozenset[int]:
    """Ids of the non-boundary nodes of symbolic `graph` that may join a shapeless trace;
    the `guarded` nodes (whose device checks read extents) never do."""
    unguarded = {n.id for n in graph.nodes} - {n.id for n in guarded}
    return frozenset(n.id for n in graph.nodes if n.id in unguarded and is_shapeless(graph, n))


def lowering(node: Node) -> Lowering | None:
    """The lowering a shapeless trace uses for symbolic `node` in place of its op's, or
    None when the op's own serves: a reshape with one symbolic extent reshapes to its
    target with -1 there (rule 2)."""
    if node.op != "reshape" or all(is_static(d) for d in node.shape):
        return None
    target = tuple(d if is_static(d) else -1 for d in node.shape)
    return lambda concrete, args: mx.reshape(args[0], target)
