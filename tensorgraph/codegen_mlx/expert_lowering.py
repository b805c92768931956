"""MLX lowering of `gather_mm` (`ir.experts`) and its run-time guard, added to
`LOWERINGS` and `guards.GUARDS` on import: `mx.gather_mm(a, b, rhs_indices=...)`.

MLX does no bounds check on the indices, while the oracle (runtime.expert_kernels)
raises a RunError for one outside [0, E): so an out-of-range index is replaced by 0
before MLX sees it, and the guard registered here (operand 2; guards.py's tiers)
reports it as the oracle's RunError, so a run that hits one never returns a value.
Half-precision operands are widened to float32 first: MLX 0.32's CPU gather_mm takes
float32 only, and float32 with one rounding is the oracle's semantics anyway (at the
cost of widening the expert weights on every call; a GPU build could take them as
they are).
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx

from tensorgraph.codegen_mlx import guards
from tensorgraph.codegen_mlx.lowering import LOWERINGS, _lowered
from tensorgraph.ir.node import Node, describe


def _gather_mm(node: Node, args: Sequence[mx.array]) -> mx.array:
    a, b, indices = args
    wide = indices.astype(mx.int64)
    safe = mx.where(mx.logical_or(wide < 0, wide >= b.shape[0]), mx.zeros_like(wide), wide)
    if a.dtype != mx.float32:  # MLX 0.32's CPU gather_mm takes float32 only
        safe = safe.astype(mx.uint32)
        out = mx.gather_mm(a.astype(mx.float32), b.astype(mx.float32), rhs_indices=safe)
        return out.astype(a.dtype)  # computed in float32, rounded once: the oracle's way
    return mx.gather_mm(a, b, rhs_indices=safe.astype(mx.uint32))


def _message(node: Node, culprits: tuple[int, ...]) -> str:
    index, experts = culprits
    return f"{describe(node)}: expert index {index} is out of range for {experts} experts"


LOWERINGS["gather_mm"] = _lowered("gather_mm", _gather_mm)
guards.GUARDS["gather_mm"] = guards.index_guard(
    2,
    lambda node, graph: graph.node(node.inputs[1]).shape[0],
    lambda node, args: args[1].shape[0],
    _message,
)
