"""Fused ops: attention, normalisations and rotary embedding as single IR nodes.

Each op is declared once here (an `OpDef` with shape/dtype inference and a declared
workspace) and has a builder function named and typed after `mlx.core.fast`
(`scaled_dot_product_attention`, `layer_norm`, `rms_norm`, `rope`) or, where MLX has no
fast kernel, after torch's functional op (`group_norm`, NCHW channels on axis 1).

Semantics (the NumPy kernels in `runtime.fused_kernels` are their definition):

- `scaled_dot_product_attention(q, k, v[, mask])`: q (B, H, L, D), k (B, Hkv, S, D),
  v (B, Hkv, S, Dv), H a multiple of Hkv (query head h reads key/value head
  h // (H / Hkv)); out (B, H, L, Dv) = softmax(scale * q k^T + mask) v. A bool mask
  keeps True entries (False -> -inf), a float mask is added; either broadcasts to
  (B, H, L, S). `causal` keeps key j for query i when j <= i + S - L (MLX's alignment:
  the last query sees every key).
- `layer_norm(x[, weight][, bias])` and `rms_norm(x[, weight])` normalise the last
  axis; weight and bias are (D,).
- `group_norm(x[, weight][, bias])`: x (N, C, ...), statistics over each of
  `num_groups` channel groups and all trailing axes; weight and bias are (C,).
- `rope(x[, offset])`: x (..., L, D); the first `dims` features of row l are rotated
  by angles (offset + l) * scale * base^(-2i/dims), i < dims/2, pairing feature i with i + dims/2
  (`traditional=False`) or 2i with 2i + 1 (`traditional=True`); the rest pass through.

Optional operands are inputs after the required ones; `has_weight` / `has_bias`
attributes say which are present, so the input list is unambiguous. Workspace (bytes
an unfused backend materialises during the step, see `ops.workspace_bytes`): SDPA's
(B, H, L, S) scores in the inputs' dtype (the mask is added and the softmax taken in
place, so the probabilities reuse the scores' bytes) plus the queries times the scale
(B, H, L, D) (the queries themselves stay live), a causal mask's (L, S) bool and its
two int32 position vectors, and the mask's row test (`workspace_sdpa`). MLX 0.32's CPU
fallback peaks at exactly that beside its result, measured over float32/float16, grouped
heads, bool/float/causal masks and L from 1 to 1000; a fused GPU kernel needs less, so
the plan is an upper bound there. Normalisations: float32 mean and reciprocal deviation
per normalised row or group (one value per row for rms_norm). Rope: float32 cos and sin
tables, (L, dims/2) each, plus one product of the rotated features (x*cos is held while
rotate(x)*sin is formed; the other product can be the result's own bytes).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from tensorgraph.errors import DTypeError, GraphError, ShapeError
from tensorgraph.ir.dtypes import DType, bool_
from tensorgraph.ir.index_inference import check_position
from tensorgraph.ir.ops import AttrSpec, OpDef, Operand, register
from tensorgraph.ir.shapes import Shape, numel

if TYPE_CHECKING:
    from tensorgraph.ir.tensor import Tensor

STAT_BYTES = 4  # the statistics of every normalisation are float32


def _float(x: Operand, op: str) -> None:
    if not x.dtype.is_float:
        raise DTypeError(f"{op} needs floating-point inputs but {x.label} is {x.dtype}")


def _same_dtype(xs: Sequence[Operand], op: str) -> DType:
    for x in xs:
        _float(x, op)
    for x in xs[1:]:
        if x.dtype != xs[0].dtype:
            raise DTypeError(
                f"{op} needs equal dtypes but {xs[0].label} is {xs[0].dtype} and "
                f"{x.label} is {x.dtype}"
            )
    return xs[0].dtype


def _optional(xs: Sequence[Operand], attrs: Mapping, required: int, op: str) -> list:
    """The operands after the `required` ones, checked against has_weight/has_bias."""
    flags = [attrs.get("has_weight", True), attrs.get("has_bias", False)]
    expected = required + sum(flags)
    if len(xs) != expected:
        raise ShapeError(
            f"{op} with has_weight={flags[0]}, has_bias={flags[1]} takes {expected} "
            f"inputs but got {len(xs)}"
        )
    return list(xs[required:])


def _affine(params: Sequence[Operand], size: int, what: str, op: str) -> None:
    for p in params:
        if p.shape != (size,):
            raise ShapeError(f"{p.label} {p.shape} must be ({size},), the {what}")


# ---------------------------------------------------------------- attention


def infer_sdpa(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    q, k, v = xs[:3]
    dtype = _same_dtype([q, k, v], "scaled_dot_product_attention")
    for x in (q, k, v):
        if len(x.shape) != 4:
            raise ShapeError(f"scaled_dot_product_attention needs rank-4 inputs but {x} is not")
    (b, h, length, d), (bk, hk, s, dk), (bv, hv, sv, dv) = q.shape, k.shape, v.shape
    if dk != d:
        raise ShapeError(f"head dims differ: query {q} and key {k} (D must match)")
    if (bk, hk, s) != (bv, hv, sv):
        raise ShapeError(f"key {k} and value {v} must share batch, heads and length")
    if bk != b:
        raise ShapeError(f"batch sizes differ: query {q} and key {k}")
    if hk == 0 or h % hk:
        raise ShapeError(
            f"query heads {h} are not a multiple of key/value heads {hk}: query {q}, key {k}"
        )
    if len(xs) == 4:
        mask = xs[3]
        if mask.dtype != bool_ and mask.dtype != dtype:
            raise DTypeError(
                f"the mask {mask.label} is {mask.dtype}; it must be bool or the query's {dtype}"
            )
        if attrs["causal"]:
            raise ShapeError(f"both causal=True and an array mask {mask}: pass one of them")
        target = (b, h, length, s)
        fits = len(mask.shape) <= 4 and all(
            m in (1, t) for m, t in zip(reversed(mask.shape), reversed(target), strict=False)
        )
        if not fits:
            raise ShapeError(f"mask {mask} does not broadcast to the scores {target}")
    return (b, h, length, dv), dtype


def workspace_sdpa(xs: Sequence[Operand], attrs: Mapping, shape: Shape, dtype: DType) -> int:
    """Scores (B, H, L, S) + scaled queries (B, H, L, D) in the inputs' dtype; a causal
    mask adds its (L, S) bool and two int32 position vectors; an explicit mask adds the
    bool row test over its leading axes (and, for a float mask, `mask > -inf`)."""
    b, h, length, _ = shape
    keys, depth = xs[1].shape[2], xs[0].shape[3]
    nbytes = b * h * length * (keys + depth) * dtype.itemsize
    if attrs.get("causal", False):
        nbytes += length * keys + 4 * (length + keys)
        nbytes += 5 * length if keys < length else 0  # rows with no key: int32 + bool
    if len(xs) == 4:
        mask = xs[3]
        nbytes += numel(mask.shape[:-1]) + (0 if mask.dtype == bool_ else numel(mask.shape))
    return nbytes


# ---------------------------------------------------------------- normalisations


def infer_layer_norm(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    dtype = _same_dtype(xs, "layer_norm")
    x = xs[0]
    if not x.shape:
        raise ShapeError(f"layer_norm needs at least one axis but {x} is a scalar")
    _affine(_optional(xs, attrs, 1, "layer_norm"), x.shape[-1], "last axis of x", "layer_norm")
    return x.shape, dtype


def infer_rms_norm(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    dtype = _same_dtype(xs, "rms_norm")
    x = xs[0]
    if not x.shape:
        raise ShapeError(f"rms_norm needs at least one axis but {x} is a scalar")
    _affine(xs[1:], x.shape[-1], "last axis of x", "rms_norm")
    return x.shape, dtype


def _rows(shape: Shape) -> int:
    return numel(shape[:-1])


def workspace_layer_norm(xs: Sequence[Operand], attrs: Mapping, shape: Shape, dtype: DType) -> int:
    return 2 * _rows(shape) * STAT_BYTES  # mean and 1/std per row


def workspace_rms_norm(xs: Sequence[Operand], attrs: Mapping, shape: Shape, dtype: DType) -> int:
    return _rows(shape) * STAT_BYTES  # 1/rms per row


def infer_group_norm(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    dtype = _same_dtype(xs, "group_norm")
    x, groups = xs[0], attrs["num_groups"]
    if len(x.shape) < 2:
        raise ShapeError(f"group_norm needs x of shape (N, C, ...) but got {x}")
    channels = x.shape[1]
    if groups < 1 or channels % groups:
        raise ShapeError(f"num_groups {groups} does not divide the {channels} channels of {x}")
    _affine(_optional(xs, attrs, 1, "group_norm"), channels, "channels of x", "group_norm")
    return x.shape, dtype


def workspace_group_norm(xs: Sequence[Operand], attrs: Mapping, shape: Shape, dtype: DType) -> int:
    return 2 * shape[0] * attrs["num_groups"] * STAT_BYTES  # mean and 1/std per group


# ---------------------------------------------------------------- rotary embedding


def infer_rope(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    """x (..., L, D)[, offset]: a second operand is the run-time offset (an int32/int64
    scalar of shape () or (1,)), and then the `offset` attribute must be 0."""
    x = xs[0]
    _float(x, "rope")
    if len(xs) == 2:
        check_position(xs[1])
        if attrs["offset"] != 0:
            raise ShapeError(
                f"offset {attrs['offset']} given beside the run-time offset "
                f"{xs[1].label} (the attribute must be 0 when the offset is an operand)"
            )
    dims = attrs["dims"]
    if len(x.shape) < 2:
        raise ShapeError(f"rope needs x of shape (..., L, D) but got {x}")
    if dims < 2 or dims % 2 or dims > x.shape[-1]:
        raise ShapeError(f"rope dims {dims} must be even, >= 2 and <= D of {x}")
    if not attrs["base"] > 0:
        raise ShapeError(f"rope base must be positive but got {attrs['base']}")
    return x.shape, x.dtype


def workspace_rope(xs: Sequence[Operand], attrs: Mapping, shape: Shape, dtype: DType) -> int:
    tables = 2 * shape[-2] * (attrs["dims"] // 2) * STAT_BYTES  # cos and sin, float32
    products = numel(shape[:-1]) * attrs["dims"] * dtype.itemsize  # x*cos beside rot(x)*sin
    return tables + products


_EPS = {"eps": AttrSpec("float", 1e-5)}
_AFFINE = {"has_weight": AttrSpec("bool", True), "has_bias": AttrSpec("bool", True)}
register(
    OpDef(
        "scaled_dot_product_attention",
        3,
        4,
        infer_sdpa,
        {"scale": AttrSpec("float"), "causal": AttrSpec("bool", False)},
        category="attention",
        workspace=workspace_sdpa,
    )
)
register(
    OpDef(
        "layer_norm",
        1,
        3,
        infer_layer_norm,
        {**_EPS, **_AFFINE},
        category="normalization",
        workspace=workspace_layer_norm,
    )
)
register(
    OpDef(
        "rms_norm",
        1,
        2,
        infer_rms_norm,
        _EPS,
        category="normalization",
        workspace=workspace_rms_norm,
    )
)
register(
    OpDef(
        "group_norm",
        1,
        3,
        infer_group_norm,
        {**_EPS, **_AFFINE, "num_groups": AttrSpec("int")},
        category="normalization",
        workspace=workspace_group_norm,
    )
)
register(
    OpDef(
        "rope",
        1,
        2,  # x[, offset]: a run-time offset is a second operand and attr offset 0
        infer_rope,
        {
            "dims": AttrSpec("int"),
            "traditional": AttrSpec("bool", False),
            "base": AttrSpec("float", 10000.0),
            "scale": AttrSpec("float", 1.0),
            "offset": AttrSpec("int", 0),
        },
        category="elementwise",
        workspace=workspace_rope,
    )
)


# ---------------------------------------------------------------- builders


def _emit(op: str, inputs: Sequence[Tensor | None], **attrs: object) -> Tensor:
    # The registry core imports this module to complete `OPS`, and `ir.tensor` needs
    # the graph, which needs the registry: so the handle plumbing is imported on use.
    from tensorgraph.ir.tensor import emit

    return emit(op, [t for t in inputs if t is not None], **attrs)


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    scale: float | None = None,
    mask: Tensor | str | None = None,
) -> Tensor:
    """softmax(scale * q k^T + mask) v (see the module docstring), MLX's signature.

    `scale` defaults to 1/sqrt(D), and to 1.0 when D is 0 (the scores are then all 0
    whatever the scale, so each row averages v, as MLX gives for any finite scale).
    `mask` is None, "causal", or a bool (True = attend) or additive float Tensor
    broadcastable to (B, H, L, S). ShapeError/DTypeError name
    the operand whose heads, head dim, batch or mask do not fit."""
    if isinstance(mask, str) and mask != "causal":
        raise GraphError(f"scaled_dot_product_attention: mask must be 'causal' but got {mask!r}")
    causal = isinstance(mask, str)
    if scale is None:
        depth = q.shape[-1] if q.shape else 0
        if not isinstance(depth, int):  # 1/sqrt of a tg.Dim extent is no attribute value
            raise GraphError(
                f"scaled_dot_product_attention: the head dim {depth} of {q!r} holds a "
                "tg.Dim: pass scale"
            )
        scale = 1.0 / math.sqrt(depth) if depth else 1.0
    array_mask = None if causal else mask
    return _emit(
        "scaled_dot_product_attention",
        [q, k, v, array_mask],
        scale=float(scale),
        causal=causal,
    )


def layer_norm(
    x: Tensor, weight: Tensor | None = None, bias: Tensor | None = None, eps: float = 1e-5
) -> Tensor:
    """(x - mean) / sqrt(var + eps) * weight + bias over the last axis (MLX's
    `fast.layer_norm`; biased variance, as torch)."""
    return _emit(
        "layer_norm",
        [x, weight, bias],
        eps=float(eps),
        has_weight=weight is not None,
        has_bias=bias is not None,
    )


def rms_norm(x: Tensor, weight: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """x / sqrt(mean(x**2, last axis) + eps) * weight (MLX's `fast.rms_norm`)."""
    return _emit("rms_norm", [x, weight], eps=float(eps))


def group_norm(
    x: Tensor,
    num_groups: int,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """Normalise x (N, C, ...) over each of `num_groups` channel groups and all trailing
    axes, then scale and shift per channel (torch's `F.group_norm`)."""
    return _emit(
        "group_norm",
        [x, weight, bias],
        num_groups=int(num_groups),
        eps=float(eps),
        has_weight=weight is not None,
        has_bias=bias is not None,
    )


def rope(
    a: Tensor,
    dims: int,
    *,
    traditional: bool = False,
    base: float = 10000.0,
    scale: float = 1.0,
    offset: int | Tensor = 0,
) -> Tensor:
    """Rotary position embedding of `a` (..., L, D), MLX's `fast.rope` (see the module
    docstring for the pairing of features). Row l is at position offset + l; `offset`
    is an int (fixed in the graph) or an int32/int64 scalar Tensor of shape () or (1,),
    a run-time position (a decode step's), which becomes the node's second operand with
    the `offset` attribute 0. Any integer offset is valid, negative ones included."""
    attrs = {
        "dims": int(dims),
        "traditional": bool(traditional),
        "base": float(base),
        "scale": float(scale),
    }
    from tensorgraph.ir.tensor import Tensor  # on use, as in _emit

    if isinstance(offset, Tensor):
        return _emit("rope", [a, offset], **attrs, offset=0)
    try:
        position = operator.index(offset)
    except TypeError as err:
        raise GraphError(
            f"rope: offset must be an int or an integer scalar Tensor but got {offset!r}"
        ) from err
    return _emit("rope", [a], **attrs, offset=position)
