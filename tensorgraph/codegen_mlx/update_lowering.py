"""MLX lowering of `index_update` (`ir.updates`) and its run-time guard, added to
`LOWERINGS` and `guards.GUARDS` on import.

MLX's scatter does no bounds check and promises no order for repeated indices, while the
oracle (runtime.update_kernels) raises a RunError for an index outside [0, size) and keeps
the last write of a repeated one. So:

- an out-of-range index is replaced by 0 before MLX sees it, and the guard registered
  here (operand 2, the index; guards.py's three tiers) reports it as the oracle's
  RunError, so a run that hits one never returns a value;
- with repeats possible (L > 1), every write to a position carries the update of the
  last occurrence of that position (one L x L comparison and a take of the update's L
  rows), so whichever write MLX performs last, the result is the oracle's;
- a single row (L = 1, a decode step's cache write) is `mx.slice_update` at a run-time
  start instead of a scatter: nothing can repeat, and it is the cheaper op.

Functional, like slice_update's lowering: the target array is never mutated; MLX donates
its buffer to the result when the executor has dropped every other reference.
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx

from tensorgraph.codegen_mlx import guards
from tensorgraph.codegen_mlx.lowering import LOWERINGS, _lowered
from tensorgraph.ir.node import Node


def _in_range(wide: mx.array, size: int) -> mx.array:
    """`wide` (int64) with every index outside [0, size) replaced by 0 (guarded)."""
    bad = mx.logical_or(wide < 0, wide >= size)
    return mx.where(bad, mx.zeros_like(wide), wide)


def _index_update(node: Node, args: Sequence[mx.array]) -> mx.array:
    target, update, index = args
    axis = node.attr("axis")
    size, rows = target.shape[axis], index.shape[0]
    if rows == 0:
        return target
    wide = _in_range(index.astype(mx.int64), size)
    if rows == 1:
        return mx.slice_update(target, update, start_indices=wide, axes=(axis,))
    # Last write wins: row i takes the update of the last row j with index[j] == index[i].
    positions = mx.arange(rows, dtype=mx.int64)
    same = wide.reshape(rows, 1) == wide.reshape(1, rows)
    last = mx.max(mx.where(same, positions.reshape(1, rows), -1), axis=1)
    update = mx.take(update, last, axis=axis)
    shape = [1] * target.ndim
    shape[axis] = rows
    spread = mx.broadcast_to(wide.reshape(shape), update.shape)
    return mx.put_along_axis(target, spread, update, axis=axis)


LOWERINGS["index_update"] = _lowered("index_update", _index_update)
guards.GUARDS["index_update"] = guards.axis_index_guard(2)
