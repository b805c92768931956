"""Recognising two torch idioms in the IR being built, so handlers emit the cheaper op.

Both matchers read only the ops, attributes, shapes and dtypes of the nodes already
emitted (never FX or parameter names) and answer None unless the equivalence is proved:

- `first_row(index)`: a 1-D integer index that is `a + s + arange(L)` (an `arange` of
  step 1 from `a`, plus a run-time scalar `s`, through reshapes and widening casts), as
  transformers' StaticCache writes its rows (`arange(L) + cumulative_length`). Its rows
  are the contiguous run [a + s, a + s + L) in order, so an `index_put` at them is a
  `slice_update` at a + s: one block copy instead of a scatter with a range check per row.
- `unrepeated_kv(x)`: a (B, Hkv * n, S, D) tensor that is torch's `repeat_kv` of a
  (B, Hkv, S, D) one (an expand of an inserted axis 2 to n, merged into the heads), so
  that head h is kv head h // n; the IR's attention reads grouped heads natively (query
  head h reads kv head h // (H / Hkv)), so the copy per query head is unnecessary.
- `grouped_product(a, b)`: the batched product of written-out attention (eager
  attention, taken for Gemma 2's soft-capping) with b the flattened repeat_kv of the
  cache, or of its transpose: computed per kv head instead, each kv head's n query
  heads stacked as rows, so the product reads the cache as stored (no copy per query
  head: 2 x 512 KiB a layer per decode step at 8 heads over 256 rows), as mlx-lm's
  attention does by reshaping the queries to (B, Hkv, n, L, D).
"""

from __future__ import annotations

from tensorgraph.ir import api as tg
from tensorgraph.ir.tensor import Tensor

__all__ = ["first_row", "grouped_heads", "grouped_product", "unrepeated_kv"]

# a + s + i cannot wrap in these for any row that lies within an axis (which has fewer
# than 2**31 rows): narrower integer dtypes could, so their progressions are not matched.
_WIDE_INTEGERS = (tg.int32, tg.int64)


def _producer(x: Tensor, position: int = 0) -> Tensor:
    return Tensor(x.graph, x.node.inputs[position])


def _progression(x: Tensor) -> tuple[int, Tensor | None] | None:
    """(a, s) when x, read in row-major order, is a + s + i at flat position i (s a
    Tensor of one element, or None for 0); None when that is not proved."""
    node = x.node
    if x.dtype not in _WIDE_INTEGERS:
        return None
    if node.op == "arange":
        start, step = node.attr("start"), node.attr("step")
        exact = all(type(v) is int for v in (start, step)) and step == 1
        return (start, None) if exact else None
    if node.op == "reshape":
        # a reshape keeps the row-major order of the elements
        return _progression(_producer(x))
    if node.op == "cast":
        source = _producer(x)
        widening = source.dtype in _WIDE_INTEGERS and source.dtype.itemsize <= x.dtype.itemsize
        return _progression(source) if widening else None
    if node.op == "add":
        for run, scalar in ((0, 1), (1, 0)):
            found = _offset_run(x, _producer(x, run), _producer(x, scalar))
            if found is not None:
                return found
    return None


def _offset_run(total: Tensor, run: Tensor, scalar: Tensor) -> tuple[int, Tensor] | None:
    """(a, s) for total = run + scalar, where run is a + s0 + i: `scalar` has one element
    and `run` as many as `total`, so broadcasting only adds unit axes and keeps the
    row-major order of run's elements."""
    if scalar.size != 1 or run.size != total.size or not scalar.dtype.is_integer:
        return None
    found = _progression(run)
    if found is None:
        return None
    start, offset = found
    scalar = scalar.reshape(()) if scalar.shape != () else scalar
    scalar = scalar.astype(total.dtype) if scalar.dtype != total.dtype else scalar
    if offset is not None:
        scalar = scalar + (offset.astype(total.dtype) if offset.dtype != total.dtype else offset)
    return start, scalar


def first_row(index: Tensor, extent: int) -> int | Tensor | None:
    """The first row of a 1-D integer `index` whose rows are provably the contiguous run
    first, first + 1, ..., first + L - 1 along an axis of `extent` rows, with negative
    starts wrapped as torch's index_put wraps each index (first + extent); else None.

    The answer is an int when the run is fixed and lies within [0, extent), a 0-d
    integer Tensor when it starts at a run-time scalar (an index of length 1 is always
    such a run). Where `index_put` at the run and `slice_update` at `first` differ: a
    run-time run that straddles 0 (some rows negative, some not) wraps into two pieces
    under index_put, and is a RunError under slice_update (start + L past the axis); so
    is every negative position in torch's eager index_copy, which such a cache calls."""
    if index.ndim != 1 or not index.dtype.is_integer:
        return None
    found = _progression(index)
    if found is None:
        if index.shape != (1,):
            return None
        start = index.reshape(())
    else:
        first, offset = found
        if offset is None:
            inside = first >= 0 and first + index.shape[0] <= extent
            return first if inside else None
        start = offset + first if first else offset
    return tg.where(start < 0, start + extent, start)


def unrepeated_kv(x: Tensor) -> Tensor | None:
    """The (B, Hkv, S, D) tensor k when x (B, Hkv * n, S, D) is torch's repeat_kv of it:
    reshape(broadcast_to(y, (B, Hkv, n, S, D))) with y of shape (B, Hkv, 1, S, D), so
    x[b, h] = y[b, h // n, 0] = k[b, h // n] (the merge of axes 1 and 2 is row-major).
    None for any other producer, e.g. a tiling (B, n, Hkv, S, D), where head h is kv
    head h % Hkv."""
    if x.ndim != 4 or x.node.op != "reshape":
        return None
    wide = _producer(x)
    if wide.node.op != "broadcast_to" or wide.ndim != 5:
        return None
    batch, groups, copies, length, size = wide.shape
    source = _producer(wide)
    if x.shape != (batch, groups * copies, length, size):
        return None
    if source.shape != (batch, groups, 1, length, size):
        return None
    narrow = (batch, groups, length, size)
    if source.node.op == "reshape" and _producer(source).shape == narrow:
        return _producer(source)  # the tensor torch unsqueezed: no view needed
    return source.reshape(narrow)


def grouped_heads(k: Tensor, v: Tensor, heads: int) -> tuple[Tensor, Tensor]:
    """k and v with their repeat_kv undone when both are such repeats (B, Hkv * n, S, D)
    of the same number Hkv of kv heads, and Hkv * n divides the query's `heads`; else k
    and v as given. Attention over the unrepeated pair reads, for query head h, kv head
    h // (heads / Hkv) = h // (m * n), where m = heads / (Hkv * n) is the grouping torch
    applies on top (1 without enable_gqa): the same head as (h // m) // n, which torch
    reads through the repeat."""
    small_k, small_v = unrepeated_kv(k), unrepeated_kv(v)
    if small_k is None or small_v is None or k.shape[1] != v.shape[1] or heads % k.shape[1]:
        return k, v
    if small_v.shape[1] != small_k.shape[1]:
        return k, v
    return small_k, small_v


def grouped_product(a: Tensor, b: Tensor) -> Tensor | None:
    """a @ b computed without b's repeat, when a (B * H, M, K) and b (B * H, K, N) are
    batched products whose b is a (B, H, ...) tensor with its first two axes merged
    that is torch's repeat_kv of k (B, Hkv, S, D), H = Hkv * n (b = its (S, D) or its
    transposed (D, S) matrices); None otherwise. With g = h // n and j = h % n, a's
    batch index b * H + h is row block j of batch b * Hkv + g once a is reshaped to
    (B * Hkv, n * M, K) (a row-major regrouping), and every one of those rows multiplies
    the same matrix k[b, g]: so a @ b = reshape((a regrouped) @ k[b, g], b's shape)."""
    if a.ndim != 3 or b.ndim != 3 or a.shape[0] != b.shape[0] or b.node.op != "reshape":
        return None
    heads = _producer(b)
    if heads.ndim != 4 or heads.shape[0] * heads.shape[1] != b.shape[0]:
        return None
    if tuple(heads.shape[2:]) != tuple(b.shape[1:]):
        return None
    repeated, transposed = heads, False
    if heads.node.op == "transpose" and tuple(heads.node.attr("axes")) == (0, 1, 3, 2):
        repeated, transposed = _producer(heads), True
    k = unrepeated_kv(repeated)
    if k is None or k.shape[1] == repeated.shape[1]:
        return None
    batch, groups = k.shape[:2]
    copies, rows = repeated.shape[1] // groups, a.shape[1]
    matrices = k.reshape(batch * groups, *k.shape[2:])
    if transposed:  # a transpose of the cache as stored: the rewrite reads it in place
        matrices = tg.swapaxes(matrices, -1, -2)
    product = a.reshape(batch * groups, copies * rows, a.shape[2]) @ matrices
    return product.reshape(b.shape[0], rows, product.shape[-1])
