"""ATen handlers for slicing, gathers, joins and splits, padding, generators, and the
functional updates that in-place writes become (slice_scatter, copy: KV-cache writes).

Advanced indexing (`aten.index.Tensor`) follows NumPy/torch: the index tensors broadcast
together; when they index adjacent dims the result keeps those dims' place, otherwise
the broadcast dims come first. It maps onto one `take` over the indexed dims flattened
into one (row-major linear index), so any number of index tensors and `None` entries
costs one gather. Generators (`full`, `arange`, `*_like`, `new_*`) produce torch's dtype:
the `dtype` keyword when given, else torch's default for the call.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import sympy

from tensorgraph.importers.aten import Context, cast, handles, require, to_dtype
from tensorgraph.importers.sym_sizes import as_operand
from tensorgraph.ir import api as tg
from tensorgraph.ir.tensor import Tensor

# ---------------------------------------------------------------- slicing and selection


# torch's "to the end" for a slice's end (sys.maxsize), as the export records it.
_END = 2**63 - 1


@handles("slice", "slice_copy")
def _slice(
    ctx: Context,
    x: Tensor,
    dim: int = 0,
    start: int | None = None,
    end: int | None = None,
    step: int = 1,
) -> Tensor:
    symbolic_axis = not isinstance(x.shape[dim], int)
    if step == 1 and (
        symbolic_axis or not all(v is None or isinstance(v, int) for v in (start, end))
    ):
        # A bound that is an extent of Dims (a dynamic import's `[:, :seq]`), or any bound
        # on an axis of symbolic length (`[:, -1:]`, transformers' logits_to_keep): a
        # negative bound counts from the axis's end, as Python's; then a narrow, whose
        # inference proves it fits the axis for every length, or refuses it.
        size = x.shape[dim]
        end = size if end is None or end == _END else end
        start = 0 if start is None else start
        start, end = (size + v if isinstance(v, int) and v < 0 else v for v in (start, end))
        return tg.narrow(x, dim, start, end - start)
    index: list[object] = [slice(None)] * x.ndim
    index[dim] = slice(start, end, step)
    return x[tuple(index)]


@handles("select", "select_copy")
def _select(ctx: Context, x: Tensor, dim: int, index: int) -> Tensor:
    items: list[object] = [slice(None)] * x.ndim
    items[dim] = index
    return x[tuple(items)]


def _pieces(x: Tensor, dim: int, sizes: Sequence[int]) -> tuple[Tensor, ...]:
    dim %= x.ndim
    result, start = [], 0
    for size in sizes:
        result.append(x if size == x.shape[dim] else tg.narrow(x, dim, start, size))
        start += size
    return tuple(result)


@handles("split", "split_with_sizes", "split_copy")
def _split(ctx: Context, x: Tensor, sizes: int | Sequence[int], dim: int = 0) -> tuple:
    if isinstance(sizes, int):
        total = x.shape[dim]
        sizes = [min(sizes, total - start) for start in range(0, total, sizes)] or [0]
    return _pieces(x, dim, sizes)


@handles("cat")
def _cat(ctx: Context, tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    # torch still accepts 1-D empty tensors in a cat of any rank: they contribute nothing.
    kept = [cast(t, ctx.out_dtype) for t in tensors if t.shape != (0,)]
    return kept[0] if len(kept) == 1 else tg.concatenate(kept, dim)


@handles("flip")
def _flip(ctx: Context, x: Tensor, dims: Sequence[int]) -> Tensor:
    for dim in dims:
        positions = np.arange(x.shape[dim] - 1, -1, -1, dtype=np.int32)
        x = tg.take(x, ctx.graph.constant(positions), dim)
    return x


@handles("diagonal")
def _diagonal(ctx: Context, x: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """torch's diagonal (a strided view there; a gather here): the other axes in order,
    then the diagonal, element k at (k + max(-offset, 0), k + max(offset, 0))."""
    d1, d2 = dim1 % x.ndim, dim2 % x.ndim
    require(d1 != d2, "diagonal of an axis with itself")
    rows, cols = x.shape[d1], x.shape[d2]
    first = np.arange(max(0, min(rows + min(offset, 0), cols - max(offset, 0))))
    flat_index = (first + max(-offset, 0)) * cols + first + max(offset, 0)
    rest = [d for d in range(x.ndim) if d not in (d1, d2)]
    moved = tg.transpose(x, (*rest, d1, d2)).reshape(*(x.shape[d] for d in rest), rows * cols)
    return tg.take(moved, ctx.graph.constant(flat_index.astype(np.int32)), moved.ndim - 1)


@handles("repeat")
def _repeat(ctx: Context, x: Tensor, repeats: Sequence[int]) -> Tensor:
    # Tile: view x as (1, d0, 1, d1, ...), broadcast to (r0, d0, r1, d1, ...), merge pairs.
    shape = (1,) * (len(repeats) - x.ndim) + x.shape
    spread = [v for d in shape for v in (1, d)]
    wide = [v for r, d in zip(repeats, shape, strict=True) for v in (r, d)]
    return tg.broadcast_to(x.reshape(spread), wide).reshape(ctx.out_shape)


# ---------------------------------------------------------------- gathers


@handles("index_select")
def _index_select(ctx: Context, x: Tensor, dim: int, index: Tensor) -> Tensor:
    return tg.take(x, index, dim)


@handles("embedding")
def _embedding(
    ctx: Context,
    weight: Tensor,
    indices: Tensor,
    padding_idx: int = -1,
    scale_grad_by_freq: bool = False,
    sparse: bool = False,
) -> Tensor:
    # padding_idx and the gradient options only change training: the lookup is a take.
    return tg.take(weight, indices, 0)


@handles("gather")
def _gather(ctx: Context, x: Tensor, dim: int, index: Tensor, sparse_grad: bool = False) -> Tensor:
    return tg.gather(x, index, dim % max(x.ndim, 1))


def _wrap(index: Tensor, size: int) -> Tensor:
    """Negative indices counted from the end, as torch does."""
    return tg.where(index < 0, index + as_operand(index, size), index)


@handles("index", "_unsafe_index")
def _index(ctx: Context, x: Tensor, indices: Sequence[Tensor | None]) -> Tensor:
    indexed = [i for i, t in enumerate(indices) if t is not None]
    for i in indexed:
        require(indices[i].dtype.is_integer, f"index with a {indices[i].dtype} index tensor")
    rest = [d for d in range(x.ndim) if d not in indexed]
    # 1. indexed dims first: (D1..Dk, rest...); 2. one row-major linear index over them.
    order = indexed + rest
    moved = x if order == list(range(x.ndim)) else tg.transpose(x, order)
    sizes = [x.shape[d] for d in indexed]
    linear = None
    for position, dim in enumerate(indexed):
        stride = math.prod(sizes[position + 1 :])
        term = _wrap(cast(indices[dim], tg.int64), x.shape[dim])
        term = term * as_operand(term, stride) if stride != 1 else term
        linear = term if linear is None else linear + term
    flat = moved.reshape((math.prod(sizes), *(x.shape[d] for d in rest)))
    result = tg.take(flat, linear, 0)  # (broadcast dims..., rest...)
    # 3. adjacent indexed dims keep their place: move the broadcast dims back to it.
    first, batch = indexed[0], linear.ndim
    if indexed == list(range(first, first + len(indexed))) and first > 0:
        axes = (
            list(range(batch, batch + first))
            + list(range(batch))
            + list(range(batch + first, result.ndim))
        )
        result = tg.transpose(result, axes)
    return result


# ---------------------------------------------------------------- padding


def _pairs(x: Tensor, pad: Sequence[int]) -> list[tuple[int, int]]:
    """torch's flat pad list (pairs from the last dim backwards) as one (before, after)
    pair per axis from the first, tg.pad's order."""
    pairs = [(0, 0)] * x.ndim
    for k in range(len(pad) // 2):
        pairs[x.ndim - 1 - k] = (int(pad[2 * k]), int(pad[2 * k + 1]))
    return pairs


@handles("constant_pad_nd")
def _constant_pad_nd(ctx: Context, x: Tensor, pad: Sequence[int], value: float = 0) -> Tensor:
    return tg.pad(x, _pairs(x, pad), _fill(value, x.dtype))  # negative amounts crop


# ---------------------------------------------------------------- generators


def _fill(value: object, dtype: tg.DType) -> object:
    """`value` as the Python scalar kind of `dtype` (full's value must match it)."""
    if dtype == tg.bool_:
        return bool(value)
    return float(value) if dtype.is_float else int(value)


def _full(ctx: Context, value: object, dtype: object) -> Tensor:
    dtype = to_dtype(dtype, ctx.out_dtype)
    if isinstance(value, sympy.Expr):  # a symbolic size (`fill_(x.shape[1])`): its value
        scalar = tg.arange(ctx.graph, value, value + 1, dtype=tg.int64).reshape(())
        scalar = scalar.astype(dtype) if dtype != tg.int64 else scalar
        return tg.broadcast_to(scalar, ctx.out_shape) if ctx.out_shape else scalar
    return tg.full(ctx.graph, ctx.out_shape, _fill(value, dtype), dtype=dtype)


@handles("full")
def _full_handler(ctx: Context, size: Sequence[int], value: object, dtype: object = None) -> Tensor:
    return _full(ctx, value, dtype)


@handles("full_like")
def _full_like(ctx: Context, x: Tensor, value: object, dtype: object = None) -> Tensor:
    return _full(ctx, value, dtype)


@handles("scalar_tensor")
def _scalar_tensor(ctx: Context, value: object, dtype: object = None) -> Tensor:
    return _full(ctx, value, dtype)


@handles("arange")
def _arange(ctx: Context, *numbers: float, dtype: object = None) -> Tensor:
    start, end, step = (0, numbers[0], 1) if len(numbers) == 1 else (*numbers, 1)[:3]
    return tg.arange(ctx.graph, start, end, step, dtype=to_dtype(dtype, ctx.out_dtype))


# ---------------------------------------------------------------- functional updates


@handles("slice_scatter")
def _slice_scatter(
    ctx: Context,
    x: Tensor,
    src: Tensor,
    dim: int = 0,
    start: int | None = None,
    end: int | None = None,
    step: int = 1,
) -> Tensor:
    require(step == 1, f"slice_scatter with step {step}")
    dim %= x.ndim
    first = range(x.shape[dim])[slice(start, end)].start if x.shape[dim] else 0
    return tg.slice_update(x, cast(src, x.dtype), dim, first)


# ---------------------------------------------------------------- sorting


@handles("sort")
def _sort(
    ctx: Context,
    x: Tensor,
    dim: int = -1,
    descending: bool = False,
    *,
    stable: bool | None = None,
) -> tuple:
    """(values, int64 positions). tensorgraph's order is stable; torch's unstable
    default is free to order ties any way, so the stable one is a valid answer too."""
    require(x.ndim >= 1, "sort of a 0-d tensor")
    return tg.sort(x, dim, bool(descending)), tg.argsort(x, dim, bool(descending))


@handles("topk")
def _topk(
    ctx: Context, x: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True
) -> tuple:
    """The k largest (or smallest) along `dim`, in order (torch leaves the order free
    when sorted=False; in order is one of its answers), ties in their original order."""
    require(x.ndim >= 1, "topk of a 0-d tensor")
    axis = dim % x.ndim
    require(0 <= k <= x.shape[axis], f"topk of {k} along an axis of {x.shape[axis]}")
    values = tg.narrow(tg.sort(x, axis, bool(largest)), axis, 0, k)
    return values, tg.narrow(tg.argsort(x, axis, bool(largest)), axis, 0, k)
