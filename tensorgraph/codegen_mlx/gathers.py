"""MLX lowerings of the ops that read or write at computed positions: `take` (NumPy's
gather), `gather` (torch's) and `slice_update`, registered in
`codegen_mlx.lowering.LOWERINGS`.

MLX's gathers do no bounds check (an index outside the axis reads out of bounds or
crashes the process) and mx.slice_update segfaults on an update of another rank or
from a start past the axis, so: indices outside the op's valid range are replaced by 0
and a run-time start is clamped into range before MLX sees them (guards.py reports
them as the oracle's RunError), and a mis-ranked update is refused here.

`IN_RANGE` holds the same lowerings without that replacement or clamping, for nodes
whose indices or start the executor proved in range on the host before the run
(guards.py, tier 3: a decode step's position and token id). Only an executor that ran
that check on the very feeds of the run may use them; their traces then carry no
per-call index pass (a decode step of the zoo Llama had six).
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx
import numpy as np

from tensorgraph.codegen_mlx.arrays import MX_DTYPES
from tensorgraph.codegen_mlx.lowering import Lowering, _filled
from tensorgraph.errors import RunError
from tensorgraph.ir.node import Node, describe


def _slice_update(node: Node, args: Sequence[mx.array], clamp: bool = True) -> mx.array:
    """`update` written into `target` from the start along the axis: the attribute, or
    the third operand (a run-time start). mx.slice_update writes out of bounds (or
    crashes the process) from a start past the axis, so a run-time start is clamped
    into [0, extent - rows] before MLX sees it; guards.py reports the unclamped value
    as the oracle's RunError, before the executor hands back any result."""
    # Functional: a new array. (`target[...] = update` would rebind the caller's object,
    # which other readers of the same value may still hold.) MLX donates the target's
    # buffer to the result when the executor has dropped every other reference.
    target, update = args[:2]
    axis = node.attr("axis")
    if update.ndim != target.ndim or target.shape != node.shape:
        # mx.slice_update segfaults on an update of another rank: refuse it here, whatever
        # produced it (a 0-d `take` index once did), rather than crash the process.
        raise RunError(
            f"{describe(node)}: update {tuple(update.shape)} cannot be written into target "
            f"{tuple(target.shape)} (the node expects {node.shape})"
        )
    if update.size == 0:
        return target
    if len(args) == 3:
        last = target.shape[axis] - update.shape[axis]  # inference keeps it >= 0
        start_indices = args[2].reshape(1)
        if clamp:
            start_indices = mx.clip(start_indices, 0, last)
    else:
        start_indices = mx.array([node.attr("start")], dtype=mx.int32)
    return mx.slice_update(target, update, start_indices=start_indices, axes=(axis,))


# The values each integer index dtype can hold: an index array of a dtype inside
# [-size, size) needs no range handling.
_INDEX_RANGES = {
    MX_DTYPES[name]: (int(np.iinfo(name).min), int(np.iinfo(name).max))
    for name in ("uint8", "int8", "int16", "int32", "int64")
}


def _take(node: Node, args: Sequence[mx.array]) -> mx.array:
    """NumPy's gather. Indices outside [-size, size) are replaced by 0 before MLX sees
    them (MLX's gather reads out of bounds); guards.py reports them as RunError. The
    replacement is one elementwise pass over the indices, skipped when their dtype
    cannot hold an out-of-range value."""
    x, indices = args
    axis = node.attr("axis")
    size = x.shape[axis]
    if size == 0:  # every index is out of range: the guard raises; nothing to gather
        return _filled(node, 0)
    low, high = _INDEX_RANGES[indices.dtype]
    if low < -size or high >= size:
        wide = indices.astype(mx.int64)
        bad = mx.logical_or(wide < -size, wide >= size)
        indices = mx.where(bad, mx.zeros_like(indices), indices)
    return mx.take(x, indices, axis=axis)


def _gather(node: Node, args: Sequence[mx.array]) -> mx.array:
    """torch.gather: x cut to the indices' extents off the axis, then take_along_axis.
    Indices outside [0, size) become 0 before MLX sees them (its gather does no bounds
    check); guards.py reports them as RunError."""
    x, indices = args
    axis = node.attr("axis")
    size = x.shape[axis]
    if size == 0:  # every index is out of range: the guard raises; nothing to gather
        return _filled(node, 0)
    low, high = _INDEX_RANGES[indices.dtype]
    if low < 0 or high >= size:
        wide = indices.astype(mx.int64)
        indices = mx.where(mx.logical_or(wide < 0, wide >= size), mx.zeros_like(wide), wide)
    cut = tuple(slice(None) if k == axis else slice(0, n) for k, n in enumerate(indices.shape))
    return mx.take_along_axis(x[cut], indices, axis=axis)


def _take_in_range(node: Node, args: Sequence[mx.array]) -> mx.array:
    """`_take` for indices proven in [-size, size) (see the module docstring)."""
    x, indices = args
    if x.shape[node.attr("axis")] == 0:  # no index fits: only empty indices get here
        return _filled(node, 0)
    return mx.take(x, indices, axis=node.attr("axis"))


def _gather_in_range(node: Node, args: Sequence[mx.array]) -> mx.array:
    """`_gather` for indices proven in [0, size) (see the module docstring)."""
    x, indices = args
    axis = node.attr("axis")
    if x.shape[axis] == 0:
        return _filled(node, 0)
    cut = tuple(slice(None) if k == axis else slice(0, n) for k, n in enumerate(indices.shape))
    return mx.take_along_axis(x[cut], indices, axis=axis)


def _slice_update_in_range(node: Node, args: Sequence[mx.array]) -> mx.array:
    """`_slice_update` for a run-time start proven in [0, extent - rows]."""
    return _slice_update(node, args, clamp=False)


TABLE: dict[str, Lowering] = {
    "take": _take,
    "gather": _gather,
    "slice_update": _slice_update,
}
IN_RANGE: dict[str, Lowering] = {
    "take": _take_in_range,
    "gather": _gather_in_range,
    "slice_update": _slice_update_in_range,
}
