"""Basic indexing of Tensors (`x[1:3, ..., None]`), as NumPy defines it, from primitive ops.

Ints, slices of any step, None and one Ellipsis. Unit-step slices become `narrow` (a free
view along axis 0), other steps a `take` of constant positions, ints a narrow whose axis
is then dropped; one final reshape inserts the None axes and drops the int ones. Tensor
indices are not basic indexing: they raise GraphError pointing to `take`.

An axis whose extent holds a `tg.Dim` takes unit-step slices and ints only (a strided
slice's length would need a static extent): None bounds are 0 and the extent, negative
ints count from the end, bounds may be extents, and nothing is clamped: narrow's rule
requires the slice inside the axis for every length (a GraphError names it otherwise).
"""

from __future__ import annotations

import numpy as np
import sympy

from tensorgraph.errors import GraphError
from tensorgraph.ir import functions as _fn
from tensorgraph.ir.dims import always, extent_or_int, is_static
from tensorgraph.ir.tensor import Tensor


def basic_index(x: Tensor, index: object) -> Tensor:
    """Basic indexing: ints, slices (any step), None and Ellipsis. Unit-step slices map to
    narrow (a view on axis 0); other steps gather with take; ints narrow then drop the axis."""
    items = list(index) if isinstance(index, tuple) else [index]
    if any(isinstance(i, Tensor) for i in items):
        raise GraphError("tensor indices are not basic indexing; use tg.take(x, indices, axis)")
    if items.count(Ellipsis) > 1:
        raise GraphError("an index can only have one ellipsis")
    explicit = len([i for i in items if i is not None and i is not Ellipsis])
    if explicit > x.ndim:
        raise GraphError(f"too many indices ({explicit}) for {x!r}")
    if Ellipsis in items:
        at = items.index(Ellipsis)
        items[at : at + 1] = [slice(None)] * (x.ndim - explicit)
    items += [slice(None)] * (x.ndim - len([i for i in items if i is not None]))
    result, axis, final_shape = x, 0, []
    for item in items:
        if item is None:
            final_shape.append(1)
            continue
        dim = x.shape[axis]
        if not is_static(dim):
            result, count = _symbolic_item(result, axis, item, dim)
            if count is not None:
                final_shape.append(count)
            axis += 1
            continue
        if isinstance(item, int | np.integer):
            i = int(item) + dim if item < 0 else int(item)
            if not 0 <= i < dim:
                raise GraphError(f"index {item} is out of range for axis {axis} of {x!r}")
            result = _fn.narrow(result, axis, i, 1)
        elif isinstance(item, slice):
            start, stop, step = item.indices(dim)
            count = len(range(start, stop, step))
            if step == 1:
                if count != dim:
                    result = _fn.narrow(result, axis, start, count)
            else:
                positions = result.graph.constant(np.arange(start, stop, step, dtype=np.int32))
                result = _fn.take(result, positions, axis)
            final_shape.append(count)
        else:
            raise GraphError(f"unsupported index {item!r} of type {type(item).__name__}")
        axis += 1
    if tuple(final_shape) != result.shape:
        result = _fn.reshape(result, final_shape)
    return result


def _symbolic_item(x: Tensor, axis: int, item: object, dim: object) -> tuple[Tensor, object]:
    """An int or unit-step slice on an axis of extent `dim` (holding a Dim): the narrowed
    tensor and the axis's new extent (None for an int, whose axis is dropped)."""
    if isinstance(item, int | np.integer | sympy.Expr):
        start = extent_or_int(item, "index")
        return _fn.narrow(
            x, axis, start + dim if is_static(start) and start < 0 else start, 1
        ), None
    if not isinstance(item, slice):
        raise GraphError(f"unsupported index {item!r} of type {type(item).__name__}")
    if item.step not in (None, 1):
        raise GraphError(
            f"a slice of step {item.step} along axis {axis} of extent {dim} (a tg.Dim): "
            "only unit steps have a length for every value"
        )
    bounds = []
    for bound, default in ((item.start, 0), (item.stop, dim)):
        value = default if bound is None else extent_or_int(bound, "slice bound")
        bounds.append(value + dim if is_static(value) and value < 0 else value)
    start, stop = bounds
    if always(start, "==", 0) and always(stop, "==", dim):
        return x, dim
    narrowed = _fn.narrow(x, axis, start, stop - start)
    return narrowed, narrowed.shape[axis]
