"""`index_update`: a functional write of rows at run-time positions (torch's index_copy).

`index_update(target, update, index, axis)` is a copy of `target` whose positions
`index[i]` along `axis` hold `update`'s slice i along that axis:

    out = target.copy();  out[..., index[i], ...] = update[..., i, ...]   for each i

`index` is a 1-D integer tensor of length L, `update` has `target`'s rank, L on `axis`
and `target`'s extent on every other axis, and `target`'s dtype; the result has
`target`'s shape and dtype. Every index must lie in [0, target.shape[axis]) (torch's
index_copy range: negatives are not wrapped), else the run is a RunError naming the node
and the index, on every backend. When an index repeats, the last write wins (what torch
does on the CPU), so the result is deterministic everywhere.

It is how an exported KV cache write (`cache.index_copy_(2, cache_position, k)`, which
Core ATen spells `index_put(cache, [None, None, cache_position], k)`) reaches the IR when
the positions are a run-time tensor. Like `slice_update` it is an update op: the planner
may write it in place into `target`'s bytes when that buffer dies here (a state's
bytes included). Kernels: `runtime.update_kernels`; MLX: `codegen_mlx.update_lowering`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from tensorgraph.errors import DTypeError, ShapeError
from tensorgraph.ir.dtypes import DType
from tensorgraph.ir.ops import AttrSpec, OpDef, Operand, register
from tensorgraph.ir.shapes import Shape, normalize_axis

# The functional updates of their operand 0 (the target): the output is the target with
# some elements replaced, so writing it over the target reads element i where it writes
# it (the planner's reinplace, CSE's fills, update placement).
UPDATE_OPS = ("slice_update", "index_update")

if TYPE_CHECKING:
    from tensorgraph.ir.tensor import Tensor


def infer_index_update(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    """target's shape and dtype; ShapeError / DTypeError naming the operands otherwise."""
    target, update, index = xs
    axis = attrs["axis"]
    if not 0 <= axis < len(target.shape):
        raise ShapeError(f"axis {axis} is out of range for {target}")
    if len(index.shape) != 1:
        raise ShapeError(f"index {index} must be 1-D")
    if not index.dtype.is_integer:
        raise DTypeError(f"the index must be integer but {index.label} is {index.dtype}")
    expected = target.shape[:axis] + index.shape + target.shape[axis + 1 :]
    if update.shape != expected:
        raise ShapeError(
            f"update {update} must have shape {expected} "
            f"(target {target} with axis {axis} of index {index}'s length)"
        )
    if update.dtype != target.dtype:
        raise DTypeError(f"{update.label} is {update.dtype}, target {target.dtype}")
    return target.shape, target.dtype


register(
    OpDef(
        "index_update",
        3,
        3,
        infer_index_update,
        {"axis": AttrSpec("int")},
        category="update",
    )
)


def index_update(target: Tensor, update: Tensor, index: Tensor, axis: int) -> Tensor:
    """A copy of `target` with `update`'s slices written at positions `index` along `axis`
    (torch's `target.index_copy(axis, index, update)`; see the module docstring). A
    negative `axis` counts from the end. Indices outside [0, target.shape[axis]) are a
    RunError at run time; a repeated index keeps the last write."""
    # The registry core imports this module to complete `OPS`, and `ir.tensor` needs the
    # graph, which needs the registry: so the handle plumbing is imported on use.
    from tensorgraph.ir.tensor import emit

    return emit("index_update", [target, update, index], axis=normalize_axis(axis, target.ndim))
