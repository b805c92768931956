"""NumPy kernels of the fused ops (`ir.fused`): the definition of their values.

Every kernel computes in float64, whatever the node's dtype, and rounds once to the
node's dtype at the end (torch's CPU kernels accumulate half-precision attention and
norms in float32; float64 is wider still, so the oracle carries no rounding of its
own into comparisons). Like every kernel in `runtime.kernels`, each returns a fresh
C-contiguous array of exactly the node's shape and dtype and never writes its
arguments. Importing this module adds the kernels to `runtime.kernels.KERNELS`, the
table both NumPy executors use.

An attention row whose every key is masked out (a bool mask row with no True, an
additive mask row of -inf, a causal query before the first key when S < L) has no
softmax; its output is 0, as torch gives (its math kernel's `_safe_softmax`). So is
every row of attention over zero keys (S = 0), as MLX gives. Zero-size operands run
like any other: a normalisation of an empty row, a group norm of batch 0 or a rope of
length 0 gives its (empty) result, never a NumPy error or warning.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tensorgraph.ir.node import Node
from tensorgraph.runtime.kernels import KERNELS, Kernel, position_value

WIDE = np.float64


def _wide(x: np.ndarray) -> np.ndarray:
    return x.astype(WIDE)


def _result(node: Node, value: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(value.astype(node.dtype.to_numpy()))


def _optional(node: Node, args: Sequence[np.ndarray]) -> tuple[np.ndarray | None, ...]:
    """(weight, bias) of a normalisation, None where the node has none."""
    rest = [_wide(a) for a in args[1:]]
    weight = rest.pop(0) if node.attr("has_weight", True) and rest else None
    bias = rest.pop(0) if node.attr("has_bias", False) and rest else None
    return weight, bias


def attention_scores(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    """scale * q k^T with the node's mask applied (masked entries -inf), float64,
    (B, H, L, S): the workspace an unfused backend materialises."""
    q, k = _wide(args[0]), _wide(args[1])
    heads, kv_heads = q.shape[1], k.shape[1]
    k = np.repeat(k, heads // kv_heads, axis=1)  # query head h reads kv head h // group
    scores = (q @ np.swapaxes(k, -1, -2)) * node.attr("scale")
    length, keys = scores.shape[-2:]
    if node.attr("causal"):
        allowed = np.arange(keys)[None, :] <= np.arange(length)[:, None] + (keys - length)
        scores = np.where(allowed, scores, -np.inf)
    if len(args) == 4:
        mask = args[3]
        scores = np.where(mask, scores, -np.inf) if mask.dtype == np.bool_ else scores + mask
    return scores


def _sdpa(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    scores = attention_scores(node, args)
    top = scores.max(axis=-1, keepdims=True, initial=-np.inf)  # S = 0: every row is dead
    dead = np.isneginf(top)  # every key masked: the row's output is 0 (torch's rule)
    probs = np.exp(scores - np.where(dead, 0.0, top))
    probs /= np.where(dead, 1.0, probs.sum(axis=-1, keepdims=True))
    v = _wide(args[2])
    v = np.repeat(v, scores.shape[1] // v.shape[1], axis=1)
    return _result(node, probs @ v)


def _layer_norm(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    x = _wide(args[0])
    if not x.size:  # no row to normalise (NumPy's mean of an empty row warns)
        return _result(node, x)
    mean = x.mean(axis=-1, keepdims=True)
    var = np.square(x - mean).mean(axis=-1, keepdims=True)
    y = (x - mean) / np.sqrt(var + node.attr("eps"))
    weight, bias = _optional(node, args)
    y = y * weight if weight is not None else y
    return _result(node, y + bias if bias is not None else y)


def _rms_norm(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    x = _wide(args[0])
    if not x.size:
        return _result(node, x)
    y = x / np.sqrt(np.square(x).mean(axis=-1, keepdims=True) + node.attr("eps"))
    return _result(node, y * _wide(args[1]) if len(args) == 2 else y)


def _group_norm(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    x = _wide(args[0])
    if not x.size:  # batch 0, no channel or no position (reshape cannot infer a -1 of 0)
        return _result(node, x)
    batch, channels = x.shape[:2]
    grouped = x.reshape(batch, node.attr("num_groups"), -1)
    mean = grouped.mean(axis=-1, keepdims=True)
    var = np.square(grouped - mean).mean(axis=-1, keepdims=True)
    y = ((grouped - mean) / np.sqrt(var + node.attr("eps"))).reshape(x.shape)
    per_channel = (channels,) + (1,) * (x.ndim - 2)
    weight, bias = _optional(node, args)
    y = y * weight.reshape(per_channel) if weight is not None else y
    return _result(node, y + bias.reshape(per_channel) if bias is not None else y)


def rope_angles(node: Node, length: int, offset: int) -> np.ndarray:
    """(L, dims/2) float64 angles: (offset + l) * scale * base^(-2i/dims)."""
    dims = node.attr("dims")
    positions = (np.arange(length, dtype=WIDE) + offset) * node.attr("scale")
    inv_freq = node.attr("base") ** (-np.arange(dims // 2, dtype=WIDE) * 2.0 / dims)
    return positions[:, None] * inv_freq[None, :]


def _rope(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    """The offset is the attribute, or the value of the second operand (a run-time
    position; any integer is valid)."""
    x = _wide(args[0])
    dims = node.attr("dims")
    offset = position_value(args[1]) if len(args) == 2 else node.attr("offset")
    angles = rope_angles(node, x.shape[-2], offset)
    cos, sin = np.cos(angles), np.sin(angles)
    if node.attr("traditional"):
        first, second = slice(0, dims, 2), slice(1, dims, 2)
    else:
        first, second = slice(0, dims // 2), slice(dims // 2, dims)
    a, b = x[..., first], x[..., second]
    y = x.copy()
    y[..., first] = a * cos - b * sin
    y[..., second] = a * sin + b * cos
    return _result(node, y)


FUSED_KERNELS: dict[str, Kernel] = {
    "scaled_dot_product_attention": _sdpa,
    "layer_norm": _layer_norm,
    "rms_norm": _rms_norm,
    "group_norm": _group_norm,
    "rope": _rope,
}
KERNELS.update(FUSED_KERNELS)
