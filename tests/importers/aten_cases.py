"""One-op PyTorch functions for the ATen handler table test, with seeded inputs.

Each `Case` is a torch function of tensors and the inputs to export it on. They are
written as a user writes PyTorch (`x.sum(dtype=...)`, `x[idx]`, `F.max_pool2d(...,
ceil_mode=True)`), so what reaches the importer is what export and the Core ATen
decompositions really produce. Inputs come from one seeded generator: negative values,
broadcasting shapes, integer and bool tensors, NaN/inf where a predicate needs them.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from attrs import frozen

_gen = torch.Generator().manual_seed(12)


def f(*shape: int) -> torch.Tensor:
    """Standard normal float32."""
    return torch.randn(*shape, generator=_gen)


def pos(*shape: int) -> torch.Tensor:
    """Positive float32 in [0.1, 2.1)."""
    return torch.rand(*shape, generator=_gen) * 2 + 0.1


def i(*shape: int, low: int = -5, high: int = 6) -> torch.Tensor:
    """int64 in [low, high)."""
    return torch.randint(low, high, shape, generator=_gen)


def b(*shape: int) -> torch.Tensor:
    return torch.rand(*shape, generator=_gen) > 0.5


def nonzero_int(*shape: int) -> torch.Tensor:
    x = i(*shape)
    return torch.where(x == 0, torch.ones_like(x), x)


def special(*shape: int) -> torch.Tensor:
    x = f(*shape)
    x.view(-1)[:3] = torch.tensor([float("nan"), float("inf"), -float("inf")])
    return x


def _kv_write(cache: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """A KV-cache update as decoders write it: in place on a clone (export makes it a
    functional slice_scatter/copy)."""
    cache = cache.clone()
    cache[:, :, 3:4] = new
    return cache


def _put_row(cache: torch.Tensor, at: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """Columns `at` of a clone set to `new` broadcast (index_put with a leading None)."""
    cache = cache.clone()
    cache[:, at] = new
    return cache


@frozen
class Case:
    id: str
    fn: Callable[..., object]
    inputs: tuple


def _cases() -> list[Case]:
    x, y = f(3, 4), f(3, 4)
    row, col = f(4), f(3, 1)
    img = f(2, 4, 9, 9)
    return [
        # ---------------- unary float (torch's values on random normals / positives)
        *[
            Case(name, getattr(torch, name), (f(3, 5),))
            for name in [
                "neg",
                "abs",
                "exp",
                "sin",
                "cos",
                "tanh",
                "sigmoid",
                "relu",
                "floor",
                "ceil",
                "round",
                "trunc",
                "sign",
                "erf",
                "atan",
                "expm1",
                "exp2",
            ]
        ],
        *[
            Case(name, getattr(torch, name), (pos(3, 5),))
            for name in ["log", "sqrt", "rsqrt", "reciprocal", "log1p", "log2", "log10"]
        ],
        Case("tan", torch.tan, (f(3, 5) * 0.5,)),
        Case("silu", F.silu, (f(3, 5),)),
        Case("exp_of_int_promotes", torch.exp, (i(3, 4),)),
        Case("neg_int", torch.neg, (i(3, 4),)),
        Case("abs_int", torch.abs, (i(3, 4),)),
        *[Case(name, getattr(torch, name), (special(3, 4),)) for name in ("isnan", "isinf")],
        Case("isfinite", torch.isfinite, (special(3, 4),)),
        Case("gelu", F.gelu, (f(3, 5),)),
        Case("gelu_tanh", lambda v: F.gelu(v, approximate="tanh"), (f(3, 5),)),
        Case("hardtanh", lambda v: F.hardtanh(v, -0.5, 0.7), (f(3, 5),)),
        Case("relu6", F.relu6, (f(3, 5) * 4,)),
        Case("clamp", lambda v: v.clamp(-0.3, 0.4), (f(3, 5),)),
        Case("clamp_min", lambda v: v.clamp(min=0.1), (f(3, 5),)),
        Case("clamp_max_int", lambda v: v.clamp(max=2), (i(3, 5),)),
        Case("clamp_tensor", lambda v, lo: v.clamp(lo, lo + 1), (f(3, 5), f(5))),
        Case("hardsigmoid", F.hardsigmoid, (f(3, 5) * 4,)),
        Case("hardswish", F.hardswish, (f(3, 5) * 4,)),
        Case("leaky_relu", lambda v: F.leaky_relu(v, 0.2), (f(3, 5),)),
        Case("elu", F.elu, (f(3, 5),)),
        Case("softplus", F.softplus, (f(3, 5) * 10,)),
        Case("mish", F.mish, (f(3, 5),)),
        # ---------------- binary arithmetic: broadcasting, scalars, alpha, int promotion
        Case("add_broadcast", lambda p, q: p + q, (x, row)),
        Case("add_alpha", lambda p, q: torch.add(p, q, alpha=2), (x, y)),
        Case("sub_column", lambda p, q: p - q, (x, col)),
        Case("rsub_scalar", lambda p: 1.5 - p, (x,)),
        Case("mul_scalar", lambda p: p * 3, (x,)),
        Case("div", lambda p, q: p / q, (x, pos(4))),
        Case("div_int_int_is_float", lambda p, q: p / q, (i(3, 4), nonzero_int(3, 4))),
        Case("div_floor", lambda p, q: torch.div(p, q, rounding_mode="floor"), (x, pos(4))),
        Case("div_trunc", lambda p, q: torch.div(p, q, rounding_mode="trunc"), (x, pos(4))),
        Case(
            "div_trunc_int",
            lambda p, q: torch.div(p, q, rounding_mode="trunc"),
            (i(3, 4), nonzero_int(3, 4)),
        ),
        Case("int_plus_float_scalar", lambda p: p + 0.5, (i(3, 4),)),
        Case("int_times_float_tensor", lambda p, q: p * q, (i(3, 4), f(3, 4))),
        Case("pow_2", lambda p: p**2, (x,)),
        Case("pow_half", lambda p: p**0.5, (pos(3, 4),)),
        Case("pow_3", lambda p: p**3, (x,)),
        Case("pow_tensor", torch.pow, (pos(3, 4), f(3, 4))),
        Case("pow_scalar_base", lambda p: 2**p, (f(3, 4),)),
        Case("maximum", torch.maximum, (x, row)),
        Case("minimum", torch.minimum, (x, y)),
        Case("remainder", torch.remainder, (x, pos(4))),
        Case("remainder_int", torch.remainder, (i(3, 4), nonzero_int(3, 4))),
        Case("fmod", torch.fmod, (x, pos(3, 4))),
        Case("floor_divide_int", torch.floor_divide, (i(3, 4), nonzero_int(4))),
        Case("atan2", torch.atan2, (x, y)),
        # ---------------- comparisons and logic
        *[
            Case(f"{name}_broadcast", getattr(torch, name), (x, row))
            for name in ("eq", "ne", "lt", "le", "gt", "ge")
        ],
        Case("gt_scalar", lambda p: p > 0.1, (x,)),
        Case("eq_int_scalar", lambda p: p == 2, (i(3, 4),)),
        Case("lt_int_float", lambda p, q: p < q, (i(3, 4), f(3, 4))),
        Case("logical_and", torch.logical_and, (b(3, 4), b(4))),
        Case("logical_or_float", torch.logical_or, (x, b(3, 4))),
        Case("logical_xor", torch.logical_xor, (b(3, 4), b(3, 4))),
        Case("logical_not_float", torch.logical_not, (x.round(),)),
        Case("and_bool", lambda p, q: p & q, (b(3, 4), b(3, 4))),
        Case("or_bool", lambda p, q: p | q, (b(3, 4), b(1, 4))),
        Case("xor_bool", lambda p, q: p ^ q, (b(3, 4), b(3, 4))),
        Case("and_int", lambda p, q: p & q, (i(3, 4, low=0, high=64), i(3, 4, low=0, high=64))),
        Case("or_int", lambda p, q: p | q, (i(3, 4), i(3, 4))),
        Case("invert_bool", lambda p: ~p, (b(3, 4),)),
        Case("invert_int", lambda p: ~p, (i(3, 4),)),
        Case("where", torch.where, (b(3, 4), x, row)),
        Case("where_scalar", lambda c, p: torch.where(c, p, -1.0), (b(3, 4), x)),
        Case("masked_fill", lambda p, m: p.masked_fill(m, -1e9), (x, b(3, 4))),
        # ---------------- reductions
        Case("sum_dims_keepdim", lambda p: p.sum((0, -1), keepdim=True), (f(2, 3, 4),)),
        Case("sum_all", torch.sum, (x,)),
        Case("sum_dtype", lambda p: p.sum(-1, dtype=torch.float16), (x,)),
        Case("sum_bool_is_int64", lambda p: p.sum(-1), (b(3, 4),)),
        Case("sum_int", lambda p: p.sum(0), (i(3, 4),)),
        Case("mean_neg_dim", lambda p: p.mean(-2), (f(2, 3, 4),)),
        Case("amax", lambda p: p.amax(-1), (x,)),
        Case("amin", lambda p: p.amin((0, 1), keepdim=True), (f(2, 3, 4),)),
        Case("max_all", torch.max, (x,)),
        Case("min_all_int", torch.min, (i(3, 4),)),
        Case("max_dim", lambda p: torch.max(p, -1), (x,)),
        Case("min_dim_keepdim", lambda p: torch.min(p, 0, keepdim=True), (x,)),
        Case("argmax", lambda p: p.argmax(-1), (x,)),
        Case("argmax_flat", torch.argmax, (x,)),
        Case("argmin_keepdim", lambda p: p.argmin(0, keepdim=True), (x,)),
        Case("any_dim", lambda p: p.any(-1), (b(3, 4),)),
        Case("all_float", torch.all, (x.round(),)),
        Case("prod_dim", lambda p: p.prod(1), (f(3, 4),)),
        Case("prod_int_all", torch.prod, (i(3, 2, low=1, high=4),)),
        Case("cumsum", lambda p: p.cumsum(-1), (x,)),
        Case("cumsum_bool_mask", lambda p: p.cumsum(1), (b(3, 4),)),
        Case("cumsum_dtype", lambda p: p.cumsum(0, dtype=torch.int32), (i(3, 4),)),
        Case("cumprod", lambda p: p.cumprod(0), (pos(3, 4),)),
        Case("var", lambda p: p.var(-1), (x,)),
        Case("var_biased", lambda p: p.var(0, correction=0, keepdim=True), (x,)),
        Case("std", lambda p: p.std((0, 1)), (f(2, 3, 4),)),
        Case("norm_2", lambda p: torch.linalg.vector_norm(p, dim=-1), (x,)),
        Case("norm_1", lambda p: torch.linalg.vector_norm(p, 1), (x,)),
        Case("softmax", lambda p: p.softmax(-1), (x,)),
        Case("softmax_dtype", lambda p: F.softmax(p, 0, dtype=torch.float32), (x.half(),)),
        Case("log_softmax", lambda p: F.log_softmax(p, 1), (x,)),
        Case("logsumexp", lambda p: p.logsumexp(-1), (x,)),
        # ---------------- layout
        Case("view", lambda p: p.view(4, 3), (x,)),
        Case("reshape_after_transpose", lambda p: p.t().reshape(-1), (x,)),
        Case("flatten", lambda p: p.flatten(1), (f(2, 3, 4),)),
        Case("unsqueeze_neg", lambda p: p.unsqueeze(-1), (x,)),
        Case("squeeze", lambda p: p.squeeze(1), (f(3, 1, 4),)),
        Case("unflatten", lambda p: p.unflatten(-1, (2, 2)), (x,)),
        Case("permute", lambda p: p.permute(2, 0, 1), (f(2, 3, 4),)),
        Case("transpose_neg", lambda p: p.transpose(-1, -3), (f(2, 3, 4),)),
        Case("expand", lambda p: p.expand(2, 3, 4), (f(3, 1),)),
        Case("repeat", lambda p: p.repeat(2, 1, 3), (f(3, 2),)),
        Case("flip", lambda p: p.flip(0, -1), (x,)),
        Case("sort", lambda p: torch.sort(p, dim=0).values, (f(5, 3),)),
        Case(
            "sort_stable_descending",
            lambda p: torch.sort(p, dim=-1, descending=True, stable=True).indices,
            (i(3, 8, low=0, high=3),),
        ),
        Case("argsort", lambda p: torch.argsort(p, dim=1, descending=True), (f(3, 6),)),
        Case("topk", lambda p: torch.topk(p, 3).values + torch.topk(p, 3).indices, (f(4, 7),)),
        Case(
            "topk_smallest_dim0",
            lambda p: torch.topk(p, 2, dim=0, largest=False).indices,
            (f(5, 3),),
        ),
        Case("diagonal", lambda p: p.diagonal(), (f(4, 4),)),
        Case("diagonal_offset_dims", lambda p: p.diagonal(1, -1, 0) + 0, (f(3, 2, 5),)),
        Case("diagonal_below_wide", lambda p: p.diagonal(-2, 1, 2) * 2, (f(2, 5, 3),)),
        Case("diagonal_empty", lambda p: p.diagonal(4) + 0, (f(3, 4),)),
        Case("lshift", lambda p: (p << 3) + (p << 0), (i(3, 4, low=-100, high=100),)),
        Case("lshift_wraps_int8", lambda p: p << 7, (i(3, 4).to(torch.int8),)),
        Case("rshift_floors_negatives", lambda p: p >> 2, (i(3, 4, low=-100, high=100),)),
        Case("rshift_uint8", lambda p: p >> 7, (i(3, 4, low=0, high=255).to(torch.uint8),)),
        Case("roll", lambda p: p.roll((1, -2), (0, 1)), (x,)),
        Case("to_int", lambda p: p.to(torch.int32), (x * 5,)),
        Case("to_half", lambda p: p.half(), (x,)),
        Case("bool_to_float", lambda p: p.float(), (b(3, 4),)),
        Case("type_as", lambda p, q: p.type_as(q), (i(3, 4), x)),
        # ---------------- slicing, joins, splits, gathers
        Case("slice_step", lambda p: p[:, 1::2], (f(3, 6),)),
        Case("slice_neg", lambda p: p[-2:, :-1], (x,)),
        Case("select_neg", lambda p: p[:, -1], (x,)),
        Case("narrow", lambda p: p.narrow(1, 1, 2), (x,)),
        Case("split_int", lambda p: p.split(3, -1), (f(2, 7),)),
        Case("split_sizes", lambda p: p.split([1, 2], 0), (x,)),
        Case("chunk", lambda p: p.chunk(3, 1), (f(2, 8),)),
        Case("unbind", lambda p: p.unbind(1), (x,)),
        Case("cat", lambda p, q: torch.cat([p, q], -1), (x, f(3, 2))),
        Case("cat_mixed_dtypes", lambda p, q: torch.cat([p, q]), (i(2, 4), x)),
        Case("stack", lambda p, q: torch.stack([p, q], 1), (x, y)),
        Case("index_select", lambda p, k: p.index_select(1, k), (x, i(5, low=0, high=4))),
        Case("embedding", F.embedding, (i(2, 3, low=0, high=6), f(6, 4))),
        Case("gather", lambda p, k: p.gather(1, k), (x, i(3, 2, low=0, high=4))),
        Case("gather_neg_dim", lambda p, k: p.gather(-2, k), (x, i(2, 4, low=0, high=3))),
        Case("index_one_tensor", lambda p, k: p[k], (x, i(2, 2, low=-3, high=3))),
        Case(
            "index_two_tensors",
            lambda p, k, m: p[k, m],
            (x, i(5, low=0, high=3), i(5, low=0, high=4)),
        ),
        Case(
            "index_after_slice",
            lambda p, k: p[:, k],
            (f(2, 5, 3), i(4, low=-5, high=5)),
        ),
        Case(
            "index_separated",
            lambda p, k, m: p[k, :, m],
            (f(3, 2, 4), i(2, 1, low=0, high=3), i(5, low=0, high=4)),
        ),
        Case(
            "index_adjacent_broadcast",
            lambda p, k, m: p[:, k, m],
            (f(2, 3, 4, 2), i(2, 1, low=0, high=3), i(1, 5, low=0, high=4)),
        ),
        Case("pad", lambda p: F.pad(p, (1, 2, 0, 3), value=0.5), (x,)),
        Case("pad_crop", lambda p: F.pad(p, (-1, 2)), (x,)),
        Case("pad_reflect", lambda p: F.pad(p, (2, 1, 1, 0), mode="reflect"), (img,)),
        Case("pad_replicate", lambda p: F.pad(p, (0, 3), mode="replicate"), (f(2, 3, 5),)),
        Case("slice_scatter", lambda p, q: p.slice_scatter(q, 1, 1, 3), (x, f(3, 2))),
        Case("slice_scatter_neg", lambda p, q: p.slice_scatter(q, -1, -2), (x, f(3, 2))),
        Case("select_scatter", lambda p, q: p.select_scatter(q, 0, -1), (x, f(4))),
        Case("kv_cache_write", _kv_write, (f(1, 2, 6, 4), f(1, 2, 1, 4))),
        # index_copy (a static cache's write at run-time positions) becomes index_put
        Case(
            "index_copy",
            lambda c, at, v: c.index_copy(2, at, v),
            (f(1, 2, 6, 4), torch.tensor([4, 1]), f(1, 2, 2, 4)),
        ),
        Case(
            "index_copy_repeat",  # torch's CPU kernel keeps the last write of a repeat
            lambda c, at, v: c.index_copy(0, at, v),
            (f(5, 3), torch.tensor([2, 0, 2]), f(3, 3)),
        ),
        Case(
            "index_put_negative",
            lambda c, at, v: c.index_put((at,), v),
            (x, i(2, low=-3, high=0), f(2, 4)),
        ),
        Case("index_put_broadcast", _put_row, (x, torch.tensor([3, 0]), f(3, 1))),
        Case("index_put_0d", lambda c, at, v: c.index_put((at,), v), (x, torch.tensor(1), f(4))),
        # ---------------- generators (shapes and dtypes from the call)
        Case("full", lambda p: p + torch.full((3, 4), 2.5), (x,)),
        Case("full_int", lambda p: p + torch.full((4,), 3, dtype=torch.int32), (i(3, 4),)),
        Case("zeros_ones", lambda p: p + torch.zeros(4) - torch.ones(3, 1), (x,)),
        Case("full_like", lambda p: torch.full_like(p, 7), (i(3, 4),)),
        Case("full_like_dtype", lambda p: torch.full_like(p, 1.5, dtype=torch.float16), (x,)),
        Case("zeros_like_ones_like", lambda p: torch.zeros_like(p) + torch.ones_like(p), (x,)),
        Case("new_ones", lambda p: p.new_ones((2, 3)), (i(3),)),
        Case("new_zeros_dtype", lambda p: p.new_zeros((2,), dtype=torch.bool), (x,)),
        Case("new_full", lambda p: p.new_full((2, 2), -3.0), (x,)),
        Case("arange", lambda p: p + torch.arange(4), (x,)),
        Case("arange_start_step", lambda p: p * torch.arange(1, 9, 2), (i(3, 4),)),
        Case("arange_float", lambda p: p + torch.arange(0.0, 2.0, 0.5), (x,)),
        Case("triu", lambda p: p.triu(1), (f(4, 4),)),
        Case("tril_neg", lambda p: p.tril(-1), (f(3, 5),)),
        Case("scalar_tensor", lambda p: torch.where(p > 0, p, torch.tensor(0.25)), (x,)),
        # ---------------- matrix products
        Case("linear", F.linear, (f(2, 3, 4), f(5, 4), f(5))),
        Case("addmm", lambda c, p, q: torch.addmm(c, p, q, beta=0.5, alpha=2), (row, x, f(4, 4))),
        Case("mm", torch.mm, (x, f(4, 2))),
        Case("bmm", torch.bmm, (f(2, 3, 4), f(2, 4, 5))),
        Case("matmul_broadcast", torch.matmul, (f(2, 3, 4), f(4, 5))),
        Case(
            "baddbmm",
            lambda c, p, q: torch.baddbmm(c, p, q, alpha=0.5),
            (f(3, 5), f(2, 3, 4), f(2, 4, 5)),
        ),
        # ---------------- convolution, normalisation, pooling
        Case("conv2d", lambda p, w, c: F.conv2d(p, w, c, 2, 1), (img, f(6, 4, 3, 3), f(6))),
        Case(
            "conv2d_grouped_dilated",
            lambda p, w: F.conv2d(p, w, None, 1, 2, 2, 2),
            (img, f(4, 2, 3, 3)),
        ),
        Case("conv2d_depthwise", lambda p, w: F.conv2d(p, w, groups=4), (img, f(4, 1, 3, 3))),
        Case("conv1d", lambda p, w, c: F.conv1d(p, w, c, 2, 1), (f(2, 4, 11), f(3, 4, 3), f(3))),
        Case(
            "conv_transpose2d",
            lambda p, w, c: F.conv_transpose2d(p, w, c, 2, 1, 1),
            (img, f(4, 3, 3, 3), f(3)),
        ),
        Case(
            "conv_transpose2d_grouped_dilated",
            lambda p, w: F.conv_transpose2d(p, w, None, 2, 0, 0, 2, 2),
            (img, f(4, 1, 2, 2)),
        ),
        Case(
            "conv_transpose1d",
            lambda p, w, c: F.conv_transpose1d(p, w, c, 2, 1, 1),
            (f(2, 4, 7), f(4, 3, 3), f(3)),
        ),
        Case(
            "conv1d_grouped_dilated",
            lambda p, w: F.conv1d(p, w, None, 1, 2, 2, 2),
            (f(1, 4, 10), f(6, 2, 3)),
        ),
        Case(
            "batch_norm",
            lambda p, m, v, w, c: F.batch_norm(p, m, v, w, c, False, 0.1, 1e-3),
            (img, f(4), pos(4), f(4), f(4)),
        ),
        Case(
            "batch_norm_batch_statistics",  # BatchNorm(track_running_stats=False) in eval
            lambda p, w, c: F.batch_norm(p, None, None, w, c, True, 0.1, 1e-3),
            (img, f(4), f(4)),
        ),
        Case(
            "instance_norm",
            lambda p, w, c: F.instance_norm(p, weight=w, bias=c, eps=1e-3),
            (img, f(4), f(4)),
        ),
        Case("instance_norm_1d_plain", lambda p: F.instance_norm(p), (f(2, 3, 7),)),
        Case("layer_norm", lambda p, w, c: F.layer_norm(p, (4,), w, c), (f(2, 3, 4), f(4), f(4))),
        Case("rms_norm", lambda p, w: F.rms_norm(p, (4,), w, 1e-6), (f(2, 3, 4), f(4))),
        Case(
            "sdpa_causal",
            lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
            (f(1, 2, 5, 8), f(1, 2, 5, 8), f(1, 2, 5, 8)),
        ),
        Case(
            "sdpa_bool_mask",
            lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
            (
                f(1, 2, 3, 8),
                f(1, 2, 5, 8),
                f(1, 2, 5, 8),
                b(3, 5) | torch.eye(3, 5, dtype=torch.bool),
            ),
        ),
        Case("group_norm", lambda p, w, c: F.group_norm(p, 2, w, c), (img, f(4), f(4))),
        Case("max_pool2d", lambda p: F.max_pool2d(p, 3, 2, 1), (img,)),
        Case("max_pool2d_ceil", lambda p: F.max_pool2d(p, 3, 2, ceil_mode=True), (f(1, 2, 8, 8),)),
        Case("max_pool2d_dilated", lambda p: F.max_pool2d(p, 2, 1, 0, 2), (img,)),
        Case("avg_pool2d", lambda p: F.avg_pool2d(p, 3, 2, 1), (img,)),
        Case(
            "avg_pool2d_ceil_exclude_pad",
            lambda p: F.avg_pool2d(p, 3, 2, 1, ceil_mode=True, count_include_pad=False),
            (f(1, 2, 8, 8),),
        ),
        Case("avg_pool2d_divisor", lambda p: F.avg_pool2d(p, 2, divisor_override=3), (img,)),
        Case("adaptive_avg_pool2d_1", lambda p: F.adaptive_avg_pool2d(p, 1), (img,)),
        Case(
            "adaptive_avg_pool2d_1_permuted",  # decomposes to mean + as_strided
            lambda p: F.adaptive_avg_pool2d(p.permute(0, 3, 1, 2), 1),
            (f(1, 5, 5, 4),),
        ),
        Case("adaptive_avg_pool2d_uneven", lambda p: F.adaptive_avg_pool2d(p, (4, 2)), (img,)),
        Case("adaptive_max_pool2d", lambda p: F.adaptive_max_pool2d(p, (3, 4)), (img,)),
        Case("pixel_shuffle", lambda p: F.pixel_shuffle(p, 2), (f(1, 8, 3, 3),)),
        Case("upsample_nearest", lambda p: F.interpolate(p, scale_factor=2), (f(1, 2, 3, 4),)),
        Case("upsample_nearest_size", lambda p: F.interpolate(p, (5, 7)), (f(1, 2, 3, 4),)),
        Case(
            "upsample_bilinear",
            lambda p: F.interpolate(p, scale_factor=2, mode="bilinear"),
            (f(1, 2, 3, 4),),
        ),
        Case(
            "upsample_bilinear_align",
            lambda p: F.interpolate(p, (5, 6), mode="bilinear", align_corners=True),
            (f(1, 2, 3, 4),),
        ),
        Case("dropout_eval", lambda p: F.dropout(p, 0.5, training=False) * 2, (x,)),
        # ---------------- mixture-of-experts dispatch (transformers' grouped_mm experts)
        Case("histc", lambda p: torch.histc(p, bins=5, min=-1.0, max=1.0), (f(40),)),
        Case(
            "histc_expert_counts",
            lambda e: torch.histc(e.float(), bins=4, min=0, max=3),
            (i(20, low=0, high=4),),
        ),
        Case(
            "empty_permuted_inverse_permutation",
            lambda p: torch.empty_permuted((6,), (0,), dtype=torch.int64).index_put(
                (torch.argsort(p),), torch.arange(6)
            ),
            (f(6),),
        ),
        # small integers: the bfloat16 products and sums are exact on every side
        Case("grouped_mm_bf16", _grouped_mm_bf16, (i(7, 8, low=-3, high=4), i(3, 8, 8))),
        Case(
            "grouped_mm_transformers",
            _transformers_grouped_mm,
            (f(7, 4), f(3, 4, 5), torch.tensor([2, 2, 6], dtype=torch.int32)),
        ),
        Case("top1_dispatch_with_capacity", _top1_dispatch, (f(12, 4),)),
    ]


def _grouped_mm_bf16(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """torch's grouped matmul (bfloat16, 16-byte strides): rows 0-1 by expert 0, 2-6 by
    expert 2 (torch leaves rows past the last offset uninitialised: none here)."""
    offs = torch.tensor([2, 2, 7], dtype=torch.int32)
    return torch._grouped_mm(x.bfloat16(), w.bfloat16(), offs=offs).float()


def _top1_dispatch(logits: torch.Tensor) -> torch.Tensor:
    """Switch Transformers' top-1 router: a one-hot of each token's expert (one_hot checks
    its indices with `_assert_async`), zeroed past 2 tokens per expert."""
    dispatch = F.one_hot(torch.argmax(logits.softmax(-1), dim=-1), num_classes=4)
    return dispatch * (torch.cumsum(dispatch, dim=-2) <= 2)


def _transformers_grouped_mm(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """transformers' own grouped-matmul fallback op (registered by its moe module)."""
    from tensorgraph.importers.torch_compat import import_transformers

    import_transformers()
    import transformers.integrations.moe  # noqa: F401  (registers the op)

    return torch.ops.transformers.grouped_mm_fallback(x, w, offs)


CASES = _cases()
