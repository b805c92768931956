"""Composite layers written with the builder, on the fused ops where one exists.

Normalisation is the fused `layer_norm` / `rms_norm`, attention the fused
`scaled_dot_product_attention` (its scores are the op's declared workspace, planned for
its step only), rotary embedding the fused `rope` unless the caller hands in explicit
(cos, sin) tables. `rotary_tables`, `apply_rotary` and `causal_mask` still build those
tables and masks the way a naive exporter emits them, from arange/cos/sin/comparisons,
so a decoder that rebuilds them per layer gives CSE real work.

Conventions: activations are row-major with features last; `linear` weights are stored
(in_features, out_features) so `x @ w` needs no transpose node (a transposed weight is a
weight-only computation every layer would repeat); attention tensors are
(batch, heads, seq, head_dim).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from tensorgraph.errors import DTypeError, GraphError, ShapeError
from tensorgraph.ir import builder as tg
from tensorgraph.ir import fused
from tensorgraph.ir.dtypes import DType, float32
from tensorgraph.ir.functions import gather
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import describe
from tensorgraph.ir.tensor import Tensor

# A large finite negative instead of -inf: exp() of it is exactly 0 in float32 and every
# backend agrees bit for bit, while -inf rows would turn into NaN if a row were all masked.
MASK_VALUE = -1e9


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """`x @ weight (+ bias)` with weight (in_features, out_features)."""
    y = x @ weight
    return y + bias if bias is not None else y


def layer_norm(x: Tensor, weight: Tensor | None, bias: Tensor | None, eps: float = 1e-5) -> Tensor:
    """Normalise over the last axis to zero mean and unit variance, then scale and shift
    (the fused `layer_norm` op)."""
    return fused.layer_norm(x, weight, bias, eps)


def rms_norm(x: Tensor, weight: Tensor | None, eps: float = 1e-5) -> Tensor:
    """`x * rsqrt(mean(x**2, last axis) + eps) * weight` (the fused `rms_norm` op)."""
    return fused.rms_norm(x, weight, eps)


def rotary(x: Tensor, offset: int = 0, base: float = 10000.0) -> Tensor:
    """Rotary embedding of x (..., seq, head_dim) at positions offset + i, half-split
    pairing: the fused `rope` op over the whole head, equal to
    `apply_rotary(x, *rotary_tables(graph, seq, head_dim, base, offset=offset))`."""
    return fused.rope(x, x.shape[-1], base=base, offset=offset)


def rotary_tables(
    graph: Graph,
    seq_len: int,
    head_dim: int,
    base: float = 10000.0,
    dtype: DType = float32,
    offset: int = 0,
) -> tuple[Tensor, Tensor]:
    """(cos, sin), each (seq_len, head_dim): angle[p, i] = (p + offset) * base^(-2(i mod
    half)/head_dim), the half-split layout `apply_rotary` expects."""
    half = head_dim // 2
    exponents = tg.arange(graph, 0, half, dtype=float32) * (-2.0 * math.log(base) / head_dim)
    inv_freq = tg.exp(exponents)
    positions = tg.arange(graph, offset, offset + seq_len, dtype=float32)
    angles = positions.reshape(seq_len, 1) * inv_freq.reshape(1, half)
    angles = tg.concatenate([angles, angles], axis=-1)
    return tg.cos(angles).astype(dtype), tg.sin(angles).astype(dtype)


def rotate_half(x: Tensor) -> Tensor:
    """concat(-x2, x1) over the last axis, where x1, x2 are its two halves."""
    half = x.shape[-1] // 2
    first = tg.narrow(x, -1, 0, half)
    second = tg.narrow(x, -1, half, half)
    return tg.concatenate([-second, first], axis=-1)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotary position embedding of x (..., seq, head_dim): x*cos + rotate_half(x)*sin."""
    return x * cos + rotate_half(x) * sin


def causal_mask(
    graph: Graph, seq_len: int, dtype: DType = float32, kv_len: int | None = None, offset: int = 0
) -> Tensor:
    """(seq_len, kv_len) additive mask: 0 where key position <= query position + offset,
    MASK_VALUE elsewhere."""
    kv_len = seq_len if kv_len is None else kv_len
    rows = tg.arange(graph, offset, offset + seq_len).reshape(seq_len, 1)
    cols = tg.arange(graph, 0, kv_len).reshape(1, kv_len)
    zero = tg.zeros(graph, (seq_len, kv_len), dtype)
    return tg.where(cols <= rows, zero, tg.full(graph, (seq_len, kv_len), MASK_VALUE, dtype))


def attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | str | None = None) -> Tensor:
    """softmax(q k^T / sqrt(d) + mask) v over (batch, heads, seq, head_dim) tensors: the
    fused op. `mask` is an additive float or bool (True = attend) Tensor, or "causal"."""
    return fused.scaled_dot_product_attention(
        q, k, v, scale=1.0 / math.sqrt(q.shape[-1]), mask=mask
    )


def split_heads(x: Tensor, n_heads: int) -> Tensor:
    """(batch, seq, dim) -> (batch, heads, seq, dim / heads)."""
    batch, seq, dim = x.shape
    return tg.transpose(x.reshape(batch, seq, n_heads, dim // n_heads), (0, 2, 1, 3))


def merge_heads(x: Tensor) -> Tensor:
    """(batch, heads, seq, head_dim) -> (batch, seq, heads * head_dim)."""
    batch, heads, seq, head_dim = x.shape
    return tg.transpose(x, (0, 2, 1, 3)).reshape(batch, seq, heads * head_dim)


def causal_attention(
    x: Tensor,
    wq: Tensor,
    wk: Tensor,
    wv: Tensor,
    wo: Tensor,
    n_heads: int,
    cos: Tensor | None = None,
    sin: Tensor | None = None,
    mask: Tensor | str | None = "causal",
) -> Tensor:
    """Multi-head self-attention on x (batch, seq, dim), rotary on q and k (from the
    tables when both are given, else the fused `rope`), then the output projection.
    `mask` as `attention` takes it."""
    q, k, v = (split_heads(x @ w, n_heads) for w in (wq, wk, wv))
    if cos is not None and sin is not None:
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
    else:
        q, k = rotary(q), rotary(k)
    return merge_heads(attention(q, k, v, mask)) @ wo


def swiglu_mlp(x: Tensor, w_gate: Tensor, w_up: Tensor, w_down: Tensor) -> Tensor:
    """(silu(x @ w_gate) * (x @ w_up)) @ w_down."""
    return (tg.silu(x @ w_gate) * (x @ w_up)) @ w_down


def llama_block(
    x: Tensor,
    params: Mapping[str, Tensor],
    n_heads: int,
    cos: Tensor | None = None,
    sin: Tensor | None = None,
    mask: Tensor | str | None = "causal",
    eps: float = 1e-5,
) -> Tensor:
    """Pre-norm decoder block: h = x + attn(rms_norm(x)); h + mlp(rms_norm(h)). Rotary
    and mask as `causal_attention` takes them (default: fused rope, causal).

    `params` keys: attn_norm, wq, wk, wv, wo, mlp_norm, w_gate, w_up, w_down."""
    p = params
    h = x + causal_attention(
        rms_norm(x, p["attn_norm"], eps),
        p["wq"],
        p["wk"],
        p["wv"],
        p["wo"],
        n_heads,
        cos,
        sin,
        mask,
    )
    return h + swiglu_mlp(rms_norm(h, p["mlp_norm"], eps), p["w_gate"], p["w_up"], p["w_down"])


LOSS_REDUCTIONS = ("mean", "sum", "none")


def _reduce_loss(loss: Tensor, reduction: str, name: str) -> Tensor:
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise GraphError(
        f"[{name}] 'reduction' must be one of {', '.join(LOSS_REDUCTIONS)} but got {reduction!r}"
    )


def cross_entropy(logits: Tensor, targets: Tensor, reduction: str = "mean") -> Tensor:
    """Cross-entropy of float `logits` (..., classes) against integer class `targets`
    (...): `-log_softmax(logits)[..., target]` per position, then its mean (default),
    sum or nothing ("none": the (...) losses). Equals
    `torch.nn.functional.cross_entropy(logits.reshape(-1, C), targets.reshape(-1))`
    (classes on the last axis, as a language model's logits have them) and
    `mlx.nn.losses.cross_entropy`. Numerically stable: log_softmax shifts by the row's
    maximum, and the target's term is picked with `gather` (its gradient a scatter_add).
    A target outside [0, classes) is a RunError at run time (gather's index guard).

    DTypeError: logits not float, or targets not integer. ShapeError: logits of rank 0,
    or targets' shape other than logits' without the last axis."""
    if not logits.dtype.is_float:
        raise DTypeError(
            f"[cross_entropy] logits must be float but {_label(logits)} is {logits.dtype}"
        )
    if targets.dtype.is_float or targets.dtype.name == "bool":
        raise DTypeError(
            f"[cross_entropy] targets must be integer class ids but {_label(targets)} is "
            f"{targets.dtype}"
        )
    if logits.ndim == 0 or tuple(targets.shape) != tuple(logits.shape[:-1]):
        raise ShapeError(
            f"[cross_entropy] targets {_label(targets)} {tuple(targets.shape)} must have the "
            f"shape of logits {_label(logits)} {tuple(logits.shape)} without its last axis"
        )
    log_probs = tg.log_softmax(logits, axis=-1)
    picked = gather(log_probs, tg.expand_dims(targets, -1), axis=-1)
    return _reduce_loss(-picked.reshape(targets.shape), reduction, "cross_entropy")


def mse_loss(pred: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """Squared error `(pred - target) ** 2` elementwise, then its mean (default), sum or
    nothing ("none"): `torch.nn.functional.mse_loss` and `mlx.nn.losses.mse_loss`.

    DTypeError: either not float, or their dtypes differ. ShapeError: their shapes
    differ (torch only warns and broadcasts, which hides a misshaped target)."""
    for tensor in (pred, target):
        if not tensor.dtype.is_float:
            raise DTypeError(f"[mse_loss] {_label(tensor)} must be float but is {tensor.dtype}")
    if pred.dtype != target.dtype:
        raise DTypeError(
            f"[mse_loss] pred {_label(pred)} is {pred.dtype} but target {_label(target)} is "
            f"{target.dtype}"
        )
    if tuple(pred.shape) != tuple(target.shape):
        raise ShapeError(
            f"[mse_loss] pred {_label(pred)} {tuple(pred.shape)} and target {_label(target)} "
            f"{tuple(target.shape)} differ in shape"
        )
    return _reduce_loss(tg.square(pred - target), reduction, "mse_loss")


def _label(tensor: Tensor) -> str:
    return describe(tensor.node)
