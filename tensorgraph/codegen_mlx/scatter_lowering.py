"""MLX lowering of `scatter_add` (`ir.scatter`) and its run-time guard, added to
`LOWERINGS` and `guards.GUARDS` on import: the target flattened, every update element
added at its flat position with `.at[].add` (MLX's scatter-add), reshaped back.

MLX does no bounds check, while the oracle (runtime.scatter_kernels) raises a RunError
for an index outside [0, size): so such an index is replaced by 0 before MLX sees it,
and the guard registered here (operand 2; guards.py's tiers) reports it as the
oracle's RunError, so a run that hits one never returns a value. Repeated indices
accumulate in MLX's order, which may differ from the oracle's index order: repeats
agree within float rounding.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import mlx.core as mx

from tensorgraph.codegen_mlx import guards
from tensorgraph.codegen_mlx.lowering import LOWERINGS, _lowered
from tensorgraph.ir.node import Node


def _scatter_add(node: Node, args: Sequence[mx.array]) -> mx.array:
    target, update, indices = args
    axis, size = node.attr("axis"), target.shape[node.attr("axis")]
    if update.size == 0:
        return target
    wide = indices.astype(mx.int64)
    wide = mx.where(mx.logical_or(wide < 0, wide >= size), mx.zeros_like(wide), wide)
    # flat position = sum over axes of coordinate * the target's row-major stride
    flat = mx.zeros(update.shape, mx.int64)
    for k in range(update.ndim):
        stride = math.prod(target.shape[k + 1 :])
        if k == axis:
            coordinate = wide
        else:
            shape = [1] * update.ndim
            shape[k] = update.shape[k]
            coordinate = mx.arange(update.shape[k], dtype=mx.int64).reshape(shape)
        flat = flat + coordinate * stride
    out = target.reshape(-1).at[flat.reshape(-1)].add(update.reshape(-1))
    return out.reshape(target.shape)


LOWERINGS["scatter_add"] = _lowered("scatter_add", _scatter_add)
guards.GUARDS["scatter_add"] = guards.axis_index_guard(2)
