"""ATen handlers for the ops tensorgraph has fused ops for: attention and normalisation.

Registered into `importers.aten.ATEN` with `handles` (that module imports this one at its
end). Each maps torch's semantics onto the fused IR op (`ir.fused`):

- `scaled_dot_product_attention` and the CPU flash / efficient variants export may
  produce: torch's `is_causal` aligns the mask top-left (query i sees keys j <= i), the
  IR's causal flag bottom-right (MLX's); they agree when L == S, and otherwise the
  handler passes torch's mask explicitly as a bool Tensor. Grouped-query heads need no
  `enable_gqa` on the IR side (a multiple of the kv heads is always allowed), so k and
  v repeated per query head by torch's repeat_kv (expand + reshape) are passed without
  the repeat (`patterns.grouped_heads` proves it from their shapes): no copy of the
  cache per query head.
- `layer_norm` / `native_layer_norm` over several trailing axes reshape them into one
  (the IR op normalises the last axis) and back; `rms_norm` with `eps=None` uses torch's
  default, the machine epsilon of the input's dtype.
- `group_norm` / `native_group_norm`.

The statistics outputs of the `native_*` ops (mean, rstd) and attention's log-sum-exp
exist only for autograd: a graph that reads one gets a GraphError naming the node.
Dropout is refused unless its probability is 0 (inference graphs).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tensorgraph.errors import GraphError
from tensorgraph.importers.aten import Context, handles
from tensorgraph.importers.patterns import grouped_heads
from tensorgraph.ir import api as tg
from tensorgraph.ir.tensor import Tensor

# the float epsilon torch's rms_norm uses when `eps` is None
_EPS = {tg.float32: 2.0**-23, tg.float16: 2.0**-10, tg.bfloat16: 2.0**-7}


class _StatisticOutput:
    """Stands for an autograd-only result (a norm's mean or rstd, attention's log-sum-
    exp): any use of it by a later node fails with a GraphError naming the node."""

    def __init__(self, ctx: Context, what: str) -> None:
        self.message = (
            f"{ctx.node.name}: its {what} output is for autograd only; tensorgraph imports "
            "inference graphs"
        )

    def __repr__(self) -> str:
        return self.message

    def __getattr__(self, name: str) -> object:
        raise GraphError(self.message)


def _no_dropout(ctx: Context, dropout_p: float) -> None:
    if dropout_p:
        raise GraphError(f"{ctx.node.name}: attention dropout_p={dropout_p} (only 0 imports)")


def _attention(
    ctx: Context,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    is_causal: bool,
    scale: float | None,
) -> Tensor:
    length, keys = q.shape[-2], k.shape[-2]
    if is_causal and mask is not None:
        raise GraphError(f"{ctx.node.name}: attention with both is_causal and attn_mask")
    if is_causal and length != keys:
        # torch aligns the causal mask top-left: query i sees keys 0..i
        rows = tg.arange(ctx.graph, 0, length).reshape(length, 1)
        mask = tg.arange(ctx.graph, 0, keys).reshape(1, keys) <= rows
        is_causal = False
    if q.ndim == 4 and k.ndim == 4 and v.ndim == 4:
        k, v = grouped_heads(k, v, q.shape[1])
    return tg.scaled_dot_product_attention(
        q, k, v, scale=scale, mask="causal" if is_causal else mask
    )


@handles("scaled_dot_product_attention")
def _sdpa(
    ctx: Context,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    _no_dropout(ctx, dropout_p)
    return _attention(ctx, q, k, v, attn_mask, is_causal, scale)


@handles("_scaled_dot_product_flash_attention_for_cpu")
def _sdpa_flash_cpu(
    ctx: Context,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    attn_mask: Tensor | None = None,
    scale: float | None = None,
) -> tuple:
    _no_dropout(ctx, dropout_p)
    out = _attention(ctx, q, k, v, attn_mask, is_causal, scale)
    return out, _StatisticOutput(ctx, "log-sum-exp")


@handles("_scaled_dot_product_efficient_attention")
def _sdpa_efficient(
    ctx: Context,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    attn_bias: Tensor | None,
    compute_log_sumexp: bool,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
) -> tuple:
    _no_dropout(ctx, dropout_p)
    out = _attention(ctx, q, k, v, attn_bias, is_causal, scale)
    stat = _StatisticOutput(ctx, "log-sum-exp")
    return out, stat, stat, stat


def _normalised(
    ctx: Context,
    x: Tensor,
    shape: Sequence[int],
    weight: Tensor | None,
    bias: Tensor | None,
    eps: float,
    rms: bool,
) -> Tensor:
    """layer_norm / rms_norm over the trailing axes `shape`, flattened into one."""
    shape = tuple(int(d) for d in shape)
    if not shape or tuple(x.shape[len(x.shape) - len(shape) :]) != shape:
        raise GraphError(
            f"{ctx.node.name}: normalized_shape {list(shape)} is not the trailing shape of "
            f"{x.shape}"
        )
    lead = x.shape[: len(x.shape) - len(shape)]
    size = math.prod(shape)
    flat = x.reshape(*lead, size) if len(shape) > 1 else x
    weight = weight.reshape(size) if weight is not None and len(shape) > 1 else weight
    bias = bias.reshape(size) if bias is not None and len(shape) > 1 else bias
    y = tg.rms_norm(flat, weight, eps) if rms else tg.layer_norm(flat, weight, bias, eps)
    return y.reshape(*x.shape) if len(shape) > 1 else y


@handles("layer_norm")
def _layer_norm(
    ctx: Context,
    x: Tensor,
    normalized_shape: Sequence[int],
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
    cudnn_enable: bool = True,
) -> Tensor:
    return _normalised(ctx, x, normalized_shape, weight, bias, eps, rms=False)


@handles("native_layer_norm")
def _native_layer_norm(
    ctx: Context,
    x: Tensor,
    normalized_shape: Sequence[int],
    weight: Tensor | None,
    bias: Tensor | None,
    eps: float,
) -> tuple:
    y = _normalised(ctx, x, normalized_shape, weight, bias, eps, rms=False)
    return y, _StatisticOutput(ctx, "mean"), _StatisticOutput(ctx, "rstd")


@handles("rms_norm")
def _rms_norm(
    ctx: Context,
    x: Tensor,
    normalized_shape: Sequence[int],
    weight: Tensor | None = None,
    eps: float | None = None,
) -> Tensor:
    if eps is None:
        eps = _EPS.get(x.dtype, 2.0**-23)
    return _normalised(ctx, x, normalized_shape, weight, None, eps, rms=True)


@handles("group_norm")
def _group_norm(
    ctx: Context,
    x: Tensor,
    num_groups: int,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
    cudnn_enabled: bool = True,
) -> Tensor:
    return tg.group_norm(x, num_groups, weight, bias, eps)


@handles("native_group_norm")
def _native_group_norm(
    ctx: Context,
    x: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    batch: int,
    channels: int,
    spatial: int,
    group: int,
    eps: float,
) -> tuple:
    y = tg.group_norm(x, group, weight, bias, eps)
    return y, _StatisticOutput(ctx, "mean"), _StatisticOutput(ctx, "rstd")
