"""ATen handlers for mixture-of-experts dispatch as transformers exports it by default
(its `grouped_mm` experts): the token counts per expert (`histc`), the grouped matmul
over tokens sorted by expert (transformers' `grouped_mm_fallback` custom op, and
`aten._grouped_mm`), and the scratch tensor the un-sort is written into
(`empty_permuted`).

A grouped matmul with offsets `offs` (the running token count per expert) multiplies
row s by the weight of the expert whose range holds s: expert(s) = #{e: offs[e] <= s}.
It maps onto one `gather_mm` (ir.experts) with those indices, so no per-expert copy of
the rows or stack of selected weights is made; rows past `offs[-1]` (which transformers
leaves to the kernel, then masks) are zero, as torch's fallback leaves them.
"""

from __future__ import annotations

from collections.abc import Sequence

from tensorgraph.importers.aten import Context, cast, handles, require, to_dtype
from tensorgraph.ir import api as tg
from tensorgraph.ir.tensor import Tensor


@handles("histc")
def _histc(ctx: Context, x: Tensor, bins: int = 100, min: float = 0.0, max: float = 0.0) -> Tensor:
    """torch.histc with an explicit range: bin = floor((x - min) * bins / (max - min)),
    the top edge in the last bin, values outside [min, max] not counted."""
    require(x.dtype.is_float, f"histc of a {x.dtype} tensor")
    require(max > min, f"histc with range [{min}, {max}] (a data-dependent range)")
    flat = x.reshape((-1,))
    position = tg.floor((flat - min) * (bins / (max - min))).astype(tg.int32)
    position = tg.minimum(position, bins - 1)  # x == max: the last bin
    inside = tg.logical_and(flat >= min, flat <= max)
    bins_row = tg.arange(ctx.graph, 0, bins, dtype=tg.int32).reshape((1, bins))
    hits = tg.logical_and(position.reshape((-1, 1)) == bins_row, inside.reshape((-1, 1)))
    return tg.sum(hits.astype(x.dtype), axis=0)


def _grouped(input: Tensor, weight: Tensor, offs: Tensor) -> Tensor:
    """input (S, K) rows grouped by expert at offsets `offs` (E,), times weight (E, K, N)."""
    require(input.ndim == 2 and weight.ndim == 3, "a grouped matmul other than 2-D x 3-D")
    require(offs.ndim == 1 and offs.shape[0] == weight.shape[0], "offsets of another length")
    rows, experts = input.shape[0], weight.shape[0]
    row = tg.arange(input.graph, 0, rows, dtype=tg.int32).reshape((rows, 1))
    ends = cast(offs, tg.int32).reshape((1, experts))
    expert = tg.sum((ends <= row).astype(tg.int32), axis=1)  # (S,): #{e: offs[e] <= s}
    used = expert < experts
    out = tg.gather_mm(
        input.reshape((rows, 1, input.shape[1])), weight, tg.minimum(expert, experts - 1)
    )
    out = out.reshape((rows, weight.shape[2]))
    return tg.where(used.reshape((rows, 1)), out, tg.zeros(input.graph, out.shape, out.dtype))


@handles("grouped_mm_fallback")
def _grouped_mm_fallback(ctx: Context, input: Tensor, weight: Tensor, offs: Tensor) -> Tensor:
    return _grouped(input, cast(weight, input.dtype), offs)


@handles("_grouped_mm")
def _grouped_mm(
    ctx: Context,
    input: Tensor,
    weight: Tensor,
    offs: Tensor | None = None,
    bias: Tensor | None = None,
    out_dtype: object = None,
) -> Tensor:
    require(offs is not None, "_grouped_mm without offsets")
    require(bias is None, "_grouped_mm with a bias")
    out = _grouped(input, cast(weight, input.dtype), offs)
    return cast(out, to_dtype(out_dtype, out.dtype))


@handles("empty_permuted")
def _empty_permuted(
    ctx: Context, size: Sequence[int], physical_layout: Sequence[int], dtype: object = None
) -> Tensor:
    """Uninitialised memory in torch: zeros here (every value is a valid one)."""
    return tg.zeros(ctx.graph, ctx.out_shape, to_dtype(dtype, ctx.out_dtype))
