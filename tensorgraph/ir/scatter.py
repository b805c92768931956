"""`scatter_add`: a functional accumulate at run-time positions (torch's scatter_add),
the backward of `take` and `gather` (an embedding lookup's weight gradient).

`scatter_add(target, update, indices, axis)` with `indices` an integer tensor of
`update`'s shape and `target`'s rank, no larger than `target` off `axis`, is a copy of
`target` to which every update element is added at its index along `axis`:

    out = target.copy();  out[..., indices[i, j, k], ...] += update[i, j, k]   (axis 1)

the other coordinates being the element's own. Repeated indices accumulate (summed in
index order by the NumPy oracle; MLX's order may differ, so repeats agree within
float rounding there). Every index must lie in [0, target.shape[axis]) (no wrapping),
else the run is a RunError naming the node and the index, on every backend. The result
has `target`'s shape and dtype; `update` must have that dtype. Kernels:
`runtime.scatter_kernels`; MLX: `codegen_mlx.scatter_lowering` (`.at[].add`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from tensorgraph.errors import DTypeError, ShapeError
from tensorgraph.ir.dtypes import DType
from tensorgraph.ir.ops import AttrSpec, OpDef, Operand, register
from tensorgraph.ir.shapes import Shape, normalize_axis

if TYPE_CHECKING:
    from tensorgraph.ir.tensor import Tensor


def infer_scatter_add(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    """target's shape and dtype; ShapeError / DTypeError naming the operands otherwise."""
    target, update, indices = xs
    axis = attrs["axis"]
    if not 0 <= axis < len(target.shape):
        raise ShapeError(f"axis {axis} is out of range for {target}")
    if not indices.dtype.is_integer:
        raise DTypeError(f"the indices must be integer but {indices.label} is {indices.dtype}")
    if indices.shape != update.shape:
        raise ShapeError(f"indices {indices} must have the shape of update {update}")
    fits = len(update.shape) == len(target.shape) and all(
        u <= t for k, (u, t) in enumerate(zip(update.shape, target.shape, strict=True)) if k != axis
    )
    if not fits:
        raise ShapeError(
            f"update {update} must have the rank of target {target} and no larger extent "
            f"off axis {axis}"
        )
    if update.dtype != target.dtype:
        raise DTypeError(f"{update.label} is {update.dtype}, target {target.dtype}")
    return target.shape, target.dtype


register(
    OpDef("scatter_add", 3, 3, infer_scatter_add, {"axis": AttrSpec("int")}, category="update")
)


def scatter_add(target: Tensor, update: Tensor, indices: Tensor, axis: int) -> Tensor:
    """A copy of `target` with each element of `update` added at its index along `axis`
    (torch's `target.scatter_add(axis, indices, update)`; see the module docstring)."""
    # The registry core imports this module to complete `OPS`, and `ir.tensor` needs the
    # graph, which needs the registry: so the handle plumbing is imported on use.
    from tensorgraph.ir.tensor import emit

    return emit("scatter_add", [target, update, indices], axis=normalize_axis(axis, target.ndim))
