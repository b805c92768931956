"""The ATen handler for writes at run-time positions, as exported caches make them:
`index_put` (what Core ATen makes of `index_copy_` and of `cache[:, :, pos] = k`; the
decompositions leave no index_copy), onto the IR's `index_update` (ir.updates).

A transformers StaticCache writes its keys with `keys.index_copy_(2, positions, k)`;
functionalised and decomposed, that is `index_put(keys, [None, None, positions], k)`,
whose result the exported program records as the buffer's mutation (the importer makes
the buffer a state and that result its update). The handler maps the forms with one
index tensor (1-D, or 0-D for one position); anything else (several index tensors, a
bool mask, accumulate=True) is Unsupported, named with its arguments.

The cache's positions are `arange(L) + position`: when `patterns.first_row` proves an
index is such a contiguous run (or has one row), the write is a `slice_update` at its
first row (one block copy, run-time start) instead of an `index_update` (a scatter).

Index semantics are index_put's: negative indices wrap as Python indexing does (-1 is
the last row), then index_update's range check makes -size - 1 and size run-time
errors, as torch raises them. (An index_copy reaches the importer as this index_put, so
its negative positions wrap too, where torch's eager index_copy raises.)
"""

from __future__ import annotations

from collections.abc import Sequence

from tensorgraph.importers.aten import Context, cast, handles, require
from tensorgraph.importers.aten_index import _wrap
from tensorgraph.importers.patterns import first_row
from tensorgraph.ir import api as tg
from tensorgraph.ir.tensor import Tensor
from tensorgraph.ir.updates import index_update


def _write(x: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    """x with src's slices written at positions `index` (1-D) along `dim`; src is cast to
    x's dtype and broadcast to the written block's shape, as torch does."""
    block = (*x.shape[:dim], index.shape[0], *x.shape[dim + 1 :])
    src = cast(src, x.dtype)
    if src.shape != block:
        src = tg.broadcast_to(src, block)
    return index_update(x, src, index, dim)


def _write_run(x: Tensor, dim: int, first: int | Tensor, rows: int, src: Tensor) -> Tensor:
    """x with src's `rows` slices written at first, first + 1, ... along `dim` (src cast
    and broadcast as in `_write`); slice_update checks the run fits the axis."""
    block = (*x.shape[:dim], rows, *x.shape[dim + 1 :])
    src = cast(src, x.dtype)
    if src.shape != block:
        src = tg.broadcast_to(src, block)
    return tg.slice_update(x, src, dim, first)


def _one_position(x: Tensor, dim: int, index: Tensor, src: Tensor) -> tuple[Tensor, Tensor]:
    """A 0-D index as a 1-D one of length 1, and src (the one slice, without the indexed
    dim, broadcast as torch does) with that dim put back."""
    slice_shape = (*x.shape[:dim], *x.shape[dim + 1 :])
    src = cast(src, x.dtype)
    if src.shape != slice_shape:
        src = tg.broadcast_to(src, slice_shape)
    return index.reshape((1,)), tg.expand_dims(src, dim)


@handles("index_put")
def _index_put(
    ctx: Context,
    x: Tensor,
    indices: Sequence[Tensor | None],
    values: Tensor,
    accumulate: bool = False,
) -> Tensor:
    require(not accumulate, "index_put with accumulate=True")
    given = [(d, t) for d, t in enumerate(indices) if t is not None]
    require(len(given) == 1, f"index_put with {len(given)} index tensors (one is)")
    ((dim, index),) = given
    require(index.dtype.is_integer, f"index_put with a {index.dtype} index tensor")
    require(index.ndim <= 1, f"index_put with a {index.ndim}-D index tensor")
    if index.ndim == 0:
        index, values = _one_position(x, dim, index, values)
    first = first_row(index, x.shape[dim])
    if first is None:
        return _write(x, dim, _wrap(index, x.shape[dim]), values)
    # rows first .. first + L - 1 in order (first_row's proof): the same block
    return _write_run(x, dim, first, index.shape[0], values)
