"""Shape and dtype inference of the indexing ops: take and gather (integer indices
into one axis) and slice_update (a block written into a target along one axis, at a
static start or a run-time position). Rules as in inference.py: operands and canonical
attributes in, (shape, dtype) out or a ShapeError/DTypeError naming the operand; a
condition on `tg.Dim` extents must hold for every value of the dims.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from tensorgraph.errors import DTypeError, ShapeError
from tensorgraph.ir.dtypes import DType, int32, int64
from tensorgraph.ir.inference import always_holds, check_axes, same_extent
from tensorgraph.ir.shapes import Shape

if TYPE_CHECKING:
    from tensorgraph.ir.ops import Operand


def infer_take(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    x, indices = xs
    axis = attrs["axis"]
    check_axes(x, (axis,))
    if not indices.dtype.is_integer:
        raise DTypeError(f"take needs integer indices but {indices.label} is {indices.dtype}")
    return (*x.shape[:axis], *indices.shape, *x.shape[axis + 1 :]), x.dtype


def infer_gather(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    """torch.gather: indices of x's rank, no larger than x off `axis`; result of the
    indices' shape and x's dtype."""
    x, indices = xs
    axis = attrs["axis"]
    check_axes(x, (axis,))
    if not indices.dtype.is_integer:
        raise DTypeError(f"gather needs integer indices but {indices.label} is {indices.dtype}")
    fits = len(indices.shape) == len(x.shape) and all(
        always_holds(i, "<=", d, f"gather: axis {k} of {indices} fits {x}")
        for k, (i, d) in enumerate(zip(indices.shape, x.shape, strict=True))
        if k != axis
    )
    if not fits:
        raise ShapeError(
            f"gather along axis {axis}: {indices} must have the rank of {x} and no larger "
            "extent on the other axes"
        )
    return indices.shape, x.dtype


def check_position(position: Operand) -> None:
    """A run-time position (slice_update's start, rope's offset): an int32 or int64
    scalar of shape () or (1,); DTypeError/ShapeError naming it otherwise."""
    if position.dtype not in (int32, int64):
        raise DTypeError(
            f"the position {position.label} is {position.dtype}; it must be int32 or int64"
        )
    if position.shape not in ((), (1,)):
        raise ShapeError(f"the position {position} must have shape () or (1,)")


def infer_slice_update(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    """`update` written into `target` along `axis` from `start`. With two operands the
    start is the attribute and the whole fit is checked here; with a third operand (an
    integer scalar, the run-time start) the attribute must be 0 and only the static fit
    is checked (equal extents off `axis`, update extent <= target extent along it): the
    kernels check start + rows <= extent when the value is known."""
    target, update = xs[:2]
    axis, start = attrs["axis"], attrs["start"]
    check_axes(target, (axis,))
    fits = len(update.shape) == len(target.shape) and all(
        same_extent(u, t, f"{update} matches {target} on axis {i}")
        for i, (u, t) in enumerate(zip(update.shape, target.shape, strict=True))
        if i != axis
    )
    if len(xs) == 3:
        check_position(xs[2])
        if start != 0:
            raise ShapeError(
                f"start {start} given beside the run-time start {xs[2].label} "
                "(the attribute must be 0 when the start is an operand)"
            )
        if not fits or not always_holds(
            update.shape[axis], "<=", target.shape[axis], f"{update} fits {target}"
        ):
            raise ShapeError(
                f"{update} does not fit {target} at axis {axis} (start {xs[2].label} at run time)"
            )
    elif (
        not fits
        or not always_holds(start, ">=", 0, f"start {start} of {update} in {target}")
        or not always_holds(
            start + update.shape[axis], "<=", target.shape[axis], f"{update} fits {target}"
        )
    ):
        raise ShapeError(f"{update} does not fit {target} at axis {axis} start {start}")
    if update.dtype != target.dtype:
        raise DTypeError(f"{update.label} is {update.dtype}, target {target.dtype}")
    return target.shape, target.dtype
