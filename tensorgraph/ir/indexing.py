"""Basic indexing of Tensors (`x[1:3, ..., None]`), as NumPy defines it, from primitive ops.

Ints, slices of any step, None and one Ellipsis. Unit-step slices become `narrow` (a free
view along axis 0), other steps a `take` of constant positions, ints a narrow whose axis
is then dropped; one final reshape inserts the None axes and drops the int ones. Tensor
indices are not basic indexing: they raise GraphError pointing to `take`.
"""

from __future__ import annotations

import numpy as np

from tensorgraph.errors import GraphError
from tensorgraph.ir import functions as _fn
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
