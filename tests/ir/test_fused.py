"""The fused ops (attention, layer/RMS/group norm, rope): inference, reference numerics
against torch's functional ops (an independent implementation), rope against the
formula written out pair by pair from MLX's documentation, each fused op against the
same computation built from tensorgraph's primitive ops, the errors that name the
operand, and the declared workspace in bytes derived by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.ir.ops import workspace_bytes
from tensorgraph.runtime.reference import run_reference
from tests.ir.op_cases import F16, F64, Arrays, Case, case_adder, check_case

CASES: list[Case] = []
case = case_adder(CASES)
_random = Arrays(seed=12)
rand, flags = _random.rand, _random.flags


def _t(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x.astype(F64)))


def torch_sdpa(q, k, v, mask=None, causal=False, scale=None):
    """torch's attention in float64; MLX's causal alignment (bottom-right) as a bool mask,
    since torch's is_causal aligns top-left when L != S."""
    length, keys = q.shape[-2], k.shape[-2]
    if causal:
        mask = np.tril(np.ones((length, keys), bool), keys - length)
    attn_mask = None if mask is None else torch.from_numpy(np.asarray(mask))
    if attn_mask is not None and attn_mask.dtype != torch.bool:
        attn_mask = attn_mask.double()
    out = F.scaled_dot_product_attention(
        _t(q), _t(k), _t(v), attn_mask=attn_mask, scale=scale, enable_gqa=True
    )
    return out.numpy()


# ---------------------------------------------------------------- attention

SDPA = [  # id, q, k, v shapes
    ("mha", (2, 4, 5, 8), (2, 4, 5, 8), (2, 4, 5, 8)),
    ("gqa", (1, 6, 3, 8), (1, 2, 7, 8), (1, 2, 7, 8)),
    ("mqa-dv", (2, 4, 3, 4), (2, 1, 6, 4), (2, 1, 6, 5)),
]
for _id, _qs, _ks, _vs in SDPA:
    _qkv = (rand(*_qs), rand(*_ks), rand(*_vs))
    case(
        "scaled_dot_product_attention",
        _id,
        _qkv,
        tg.scaled_dot_product_attention,
        tg.float32,
        torch_sdpa,
    )
    case(
        "scaled_dot_product_attention",
        f"{_id}-causal-scale",
        _qkv,
        lambda q, k, v: tg.scaled_dot_product_attention(q, k, v, scale=0.3, mask="causal"),
        tg.float32,
        lambda q, k, v: torch_sdpa(q, k, v, causal=True, scale=0.3),
    )
_q, _k, _v = rand(2, 4, 3, 8), rand(2, 2, 6, 8), rand(2, 2, 6, 8)
for _id, _mask in (
    ("bool-LS", flags(3, 6)),
    ("bool-B11S", flags(2, 1, 1, 6)),
    ("float-BHLS", rand(2, 4, 3, 6)),
    ("float-1S", rand(1, 6)),
):
    case(
        "scaled_dot_product_attention",
        _id,
        (_q, _k, _v, _mask),
        lambda q, k, v, m: tg.scaled_dot_product_attention(q, k, v, mask=m),
        tg.float32,
        lambda q, k, v, m: torch_sdpa(q, k, v, mask=m),
    )
_dead = flags(3, 6)
_dead[1] = False  # query 1 sees no key: torch's rule gives a 0 row
case(
    "scaled_dot_product_attention",
    "dead-row",
    (_q, _k, _v, _dead),
    lambda q, k, v, m: tg.scaled_dot_product_attention(q, k, v, mask=m),
    tg.float32,
    lambda q, k, v, m: torch_sdpa(q, k, v, mask=m),
)
case(
    "scaled_dot_product_attention",
    "causal-S<L",  # queries 0 and 1 come before the first key: 0 rows
    (rand(1, 2, 4, 8), rand(1, 2, 2, 8), rand(1, 2, 2, 8)),
    lambda q, k, v: tg.scaled_dot_product_attention(q, k, v, mask="causal"),
    tg.float32,
    lambda q, k, v: torch_sdpa(q, k, v, causal=True),
)
case(
    "scaled_dot_product_attention",
    "float16",
    (rand(1, 2, 4, 8, dtype=F16), rand(1, 1, 4, 8, dtype=F16), rand(1, 1, 4, 8, dtype=F16)),
    tg.scaled_dot_product_attention,
    tg.float16,
    torch_sdpa,
)

# ---------------------------------------------------------------- normalisations

for _shape in ((4, 6), (2, 3, 5)):
    _x, _w, _b = rand(*_shape), rand(_shape[-1]), rand(_shape[-1])
    _d = (_shape[-1],)
    case(
        "layer_norm",
        f"{_shape}-affine",
        (_x, _w, _b),
        lambda x, w, b: tg.layer_norm(x, w, b, eps=1e-3),
        tg.float32,
        lambda x, w, b, d=_d: F.layer_norm(_t(x), d, _t(w), _t(b), 1e-3).numpy(),
    )
    case(
        "layer_norm",
        f"{_shape}-plain",
        (_x,),
        tg.layer_norm,
        tg.float32,
        lambda x, d=_d: F.layer_norm(_t(x), d, eps=1e-5).numpy(),
    )
    case(
        "layer_norm",
        f"{_shape}-bias-only",
        (_x, _b),
        lambda x, b: tg.layer_norm(x, None, b),
        tg.float32,
        lambda x, b, d=_d: F.layer_norm(_t(x), d, None, _t(b)).numpy(),
    )
    case(
        "rms_norm",
        f"{_shape}-weight",
        (_x, _w),
        lambda x, w: tg.rms_norm(x, w, eps=1e-4),
        tg.float32,
        lambda x, w, d=_d: F.rms_norm(_t(x), d, _t(w), 1e-4).numpy(),
    )
    case(
        "rms_norm",
        f"{_shape}-plain",
        (_x,),
        tg.rms_norm,
        tg.float32,
        lambda x, d=_d: F.rms_norm(_t(x), d, eps=1e-5).numpy(),
    )
case(
    "layer_norm",
    "float16",
    (rand(3, 8, dtype=F16), rand(8, dtype=F16), rand(8, dtype=F16)),
    tg.layer_norm,
    tg.float16,
    lambda x, w, b: F.layer_norm(_t(x), (8,), _t(w), _t(b)).numpy(),
)
for _shape, _groups in (((2, 6, 3, 4), 3), ((2, 4), 2), ((1, 4, 5), 4)):
    _x, _w, _b = rand(*_shape), rand(_shape[1]), rand(_shape[1])
    case(
        "group_norm",
        f"{_shape}/{_groups}",
        (_x, _w, _b),
        lambda x, w, b, g=_groups: tg.group_norm(x, g, w, b, eps=1e-4),
        tg.float32,
        lambda x, w, b, g=_groups: F.group_norm(_t(x), g, _t(w), _t(b), 1e-4).numpy(),
    )
    case(
        "group_norm",
        f"{_shape}/{_groups}-plain",
        (_x,),
        lambda x, g=_groups: tg.group_norm(x, g),
        tg.float32,
        lambda x, g=_groups: F.group_norm(_t(x), g).numpy(),
    )

# ---------------------------------------------------------------- rope


def rope_by_pairs(x, dims, traditional, base, scale, offset):
    """mx.fast.rope from its documentation, one feature pair at a time: position
    p = (offset + l) * scale, pair i of `dims/2` rotated by p * base^(-2i/dims); pair i
    is features (2i, 2i+1) when traditional, else (i, i + dims/2); the rest unchanged."""
    x = x.astype(F64)
    out = x.copy()
    length = x.shape[-2]
    for row in range(length):
        p = (offset + row) * scale
        for i in range(dims // 2):
            theta = p * base ** (-2.0 * i / dims)
            a, b = (2 * i, 2 * i + 1) if traditional else (i, i + dims // 2)
            xa, xb = x[..., row, a], x[..., row, b]
            out[..., row, a] = xa * math.cos(theta) - xb * math.sin(theta)
            out[..., row, b] = xa * math.sin(theta) + xb * math.cos(theta)
    return out


for _shape, _dims, _trad, _base, _scale, _offset in (
    ((2, 3, 5, 8), 8, False, 10000.0, 1.0, 0),
    ((2, 3, 5, 8), 8, True, 10000.0, 1.0, 0),
    ((1, 4, 12), 8, False, 500.0, 0.5, 3),
    ((1, 4, 12), 6, True, 500.0, 2.0, 7),
    ((6, 4), 4, False, 100.0, 1.0, 1),
):
    _opts = {"traditional": _trad, "base": _base, "scale": _scale, "offset": _offset}
    case(
        "rope",
        f"{_shape}-d{_dims}-{'trad' if _trad else 'half'}-o{_offset}",
        (rand(*_shape),),
        lambda x, d=_dims, o=_opts: tg.rope(x, d, **o),
        tg.float32,
        lambda x, d=_dims, o=_opts: rope_by_pairs(x, d, **o),
    )


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_inference_and_reference_numerics(c: Case) -> None:
    check_case(c)


# ---------------------------------------------------------------- fused == composite


def composite_attention(q, k, v, mask, causal, scale):
    """The unfused graph: repeat kv heads, scores, mask, softmax, weighted values."""
    group = q.shape[1] // k.shape[1]
    if group > 1:
        k, v = (
            tg.concatenate([t.reshape(*t.shape[:2], 1, *t.shape[2:])] * group, 2) for t in (k, v)
        )
        k, v = (t.reshape(t.shape[0], -1, *t.shape[3:]) for t in (k, v))
    scores = (q @ tg.swapaxes(k, -1, -2)) * scale
    length, keys = scores.shape[-2:]
    if causal:
        rows = tg.arange(q.graph, keys - length, keys).reshape(length, 1)
        allowed = tg.arange(q.graph, 0, keys).reshape(1, keys) <= rows
        scores = tg.where(allowed, scores, -1e30)
    if mask is not None:
        scores = tg.where(mask, scores, -1e30) if mask.dtype == tg.bool_ else scores + mask
    return tg.softmax(scores, -1) @ v


@given(
    batch=st.integers(1, 2),
    kv_heads=st.integers(1, 2),
    group=st.integers(1, 3),
    length=st.integers(1, 4),
    keys=st.integers(1, 5),
    head_dim=st.sampled_from([2, 4]),
    mask_kind=st.sampled_from(["none", "causal", "bool", "float"]),
    seed=st.integers(0, 2**16),
)
def test_attention_equals_its_composite(
    batch, kv_heads, group, length, keys, head_dim, mask_kind, seed
) -> None:
    # Every row keeps at least one key (bool masks get key 0 on; causal needs S >= L),
    # so the composite's -1e30 and the fused op's -inf give the same softmax.
    keys = max(keys, length) if mask_kind == "causal" else keys
    arrays = Arrays(seed)
    g = tg.Graph("attention")
    shapes = [(batch, kv_heads * group, length, head_dim), (batch, kv_heads, keys, head_dim)]
    q, k, v = g.input("q", shapes[0]), g.input("k", shapes[1]), g.input("v", shapes[1])
    feeds = {"q": arrays.rand(*shapes[0]), "k": arrays.rand(*shapes[1])}
    feeds["v"] = arrays.rand(*shapes[1])
    mask = None
    if mask_kind == "bool":
        mask = g.input("m", (length, keys), tg.bool_)
        feeds["m"] = arrays.flags(length, keys)
        feeds["m"][:, 0] = True
    elif mask_kind == "float":
        mask = g.input("m", (1, 1, length, keys))
        feeds["m"] = arrays.rand(1, 1, length, keys)
    scale = 1 / math.sqrt(head_dim)
    fused = tg.scaled_dot_product_attention(
        q, k, v, mask="causal" if mask_kind == "causal" else mask
    )
    g.output(fused)
    g.output(composite_attention(q, k, v, mask, mask_kind == "causal", scale))
    got, want = run_reference(g, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@given(
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple),
    affine=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_norms_equal_their_composites(shape, affine, seed) -> None:
    arrays = Arrays(seed)
    g = tg.Graph("norms")
    x = g.input("x", shape)
    feeds = {"x": arrays.rand(*shape)}
    w = b = None
    if affine:
        w, b = g.input("w", shape[-1:]), g.input("b", shape[-1:])
        feeds |= {"w": arrays.rand(*shape[-1:]), "b": arrays.rand(*shape[-1:])}
    centred = x - x.mean(-1, keepdims=True)
    layer = centred * tg.rsqrt(tg.square(centred).mean(-1, keepdims=True) + 1e-5)
    rms = x * tg.rsqrt(tg.square(x).mean(-1, keepdims=True) + 1e-5)
    if affine:
        layer, rms = layer * w + b, rms * w
    for t in (tg.layer_norm(x, w, b), layer, tg.rms_norm(x, w), rms):
        g.output(t)
    fused_layer, composite_layer, fused_rms, composite_rms = run_reference(g, feeds)
    np.testing.assert_allclose(fused_layer, composite_layer, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(fused_rms, composite_rms, rtol=1e-5, atol=1e-6)


@given(
    batch=st.integers(1, 2),
    groups=st.integers(1, 3),
    per_group=st.integers(1, 3),
    spatial=st.lists(st.integers(1, 3), max_size=2).map(tuple),
    seed=st.integers(0, 2**16),
)
def test_group_norm_equals_its_composite(batch, groups, per_group, spatial, seed) -> None:
    channels = groups * per_group
    shape = (batch, channels, *spatial)
    arrays = Arrays(seed)
    g = tg.Graph("group_norm")
    x, w, b = g.input("x", shape), g.input("w", (channels,)), g.input("b", (channels,))
    grouped = x.reshape(batch, groups, -1)
    centred = grouped - grouped.mean(-1, keepdims=True)
    normed = centred * tg.rsqrt(tg.square(centred).mean(-1, keepdims=True) + 1e-5)
    per_channel = (channels,) + (1,) * len(spatial)
    composite = normed.reshape(*shape) * w.reshape(*per_channel) + b.reshape(*per_channel)
    g.output(tg.group_norm(x, groups, w, b), composite)
    feeds = {"x": arrays.rand(*shape), "w": arrays.rand(channels), "b": arrays.rand(channels)}
    fused, want = run_reference(g, feeds)
    np.testing.assert_allclose(fused, want, rtol=1e-4, atol=1e-5)


@given(
    length=st.integers(1, 6),
    half=st.integers(1, 4),
    extra=st.integers(0, 3),
    offset=st.integers(0, 9),
    seed=st.integers(0, 2**16),
)
def test_rope_equals_the_half_split_composite(length, half, extra, offset, seed) -> None:
    """traditional=False is x*cos + rotate_half(x)*sin on the first `dims` features, with
    the tables built from arange/exp/cos/sin (how nn.py built them before the fused op)."""
    dims = 2 * half
    g = tg.Graph("rope")
    x = g.input("x", (2, length, dims + extra))
    exponents = tg.arange(g, 0, half, dtype=tg.float32) * (-2.0 * math.log(10000.0) / dims)
    positions = tg.arange(g, offset, offset + length, dtype=tg.float32).reshape(length, 1)
    angles = positions * tg.exp(exponents).reshape(1, half)
    angles = tg.concatenate([angles, angles], -1)
    head = tg.narrow(x, -1, 0, dims)
    first, second = tg.narrow(head, -1, 0, half), tg.narrow(head, -1, half, half)
    rotated = head * tg.cos(angles) + tg.concatenate([-second, first], -1) * tg.sin(angles)
    composite = tg.concatenate([rotated, tg.narrow(x, -1, dims, extra)], -1) if extra else rotated
    g.output(tg.rope(x, dims, offset=offset))
    g.output(composite)
    got, want = run_reference(g, {"x": Arrays(seed).rand(2, length, dims + extra)})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- errors


def _graph() -> tg.Graph:
    return tg.Graph("errors")


def test_heads_that_do_not_divide_name_both_operands() -> None:
    g = _graph()
    q, k = g.input("q", (1, 6, 3, 8)), g.input("k", (1, 4, 3, 8))
    with pytest.raises(tg.ShapeError, match=r"%\d+ scaled_dot_product_attention: .*6.*4.*q.*k"):
        tg.scaled_dot_product_attention(q, k, k)


def test_head_dim_mismatch_names_query_and_key() -> None:
    g = _graph()
    q, k = g.input("q", (1, 2, 3, 8)), g.input("k", (1, 2, 3, 4))
    with pytest.raises(tg.ShapeError, match=r"head dims differ: query q \(1, 2, 3, 8\)"):
        tg.scaled_dot_product_attention(q, k, k)


def test_key_and_value_must_agree() -> None:
    g = _graph()
    q, k, v = g.input("q", (1, 2, 3, 8)), g.input("k", (1, 2, 3, 8)), g.input("v", (1, 2, 4, 8))
    with pytest.raises(tg.ShapeError, match=r"key k .* and value v .*must share"):
        tg.scaled_dot_product_attention(q, k, v)


def test_mask_that_does_not_broadcast_is_named() -> None:
    g = _graph()
    q = g.input("q", (1, 2, 3, 8))
    mask = g.input("m", (3, 4), tg.bool_)
    with pytest.raises(tg.ShapeError, match=r"mask m \(3, 4\) does not broadcast.*\(1, 2, 3, 3\)"):
        tg.scaled_dot_product_attention(q, q, q, mask=mask)


def test_integer_mask_is_a_dtype_error() -> None:
    g = _graph()
    q = g.input("q", (1, 2, 3, 8))
    with pytest.raises(tg.DTypeError, match=r"mask m is int32"):
        tg.scaled_dot_product_attention(q, q, q, mask=g.input("m", (3, 3), tg.int32))


def test_unknown_mask_string_is_refused() -> None:
    g = _graph()
    q = g.input("q", (1, 2, 3, 8))
    with pytest.raises(tg.GraphError, match=r"mask must be 'causal' but got 'upper'"):
        tg.scaled_dot_product_attention(q, q, q, mask="upper")


def test_norm_weight_of_the_wrong_size_is_named() -> None:
    g = _graph()
    x, w = g.input("x", (2, 8)), g.input("w", (4,))
    with pytest.raises(tg.ShapeError, match=r"%\d+ layer_norm: w \(4,\) must be \(8,\)"):
        tg.layer_norm(x, w)
    with pytest.raises(tg.ShapeError, match=r"%\d+ rms_norm: w \(4,\) must be \(8,\)"):
        tg.rms_norm(x, w)


def test_group_count_must_divide_channels() -> None:
    g = _graph()
    with pytest.raises(tg.ShapeError, match=r"num_groups 4 does not divide the 6 channels of x"):
        tg.group_norm(g.input("x", (2, 6, 3)), 4)


def test_rope_dims_must_be_even_and_fit() -> None:
    g = _graph()
    x = g.input("x", (2, 3, 8))
    for dims in (3, 10, 0):
        with pytest.raises(tg.ShapeError, match=rf"rope dims {dims} must be even"):
            tg.rope(x, dims)


def test_integer_input_is_a_dtype_error() -> None:
    g = _graph()
    with pytest.raises(tg.DTypeError, match=r"layer_norm needs floating-point inputs but x"):
        tg.layer_norm(g.input("x", (2, 3), tg.int32))


# ---------------------------------------------------------------- workspace


def test_declared_workspace_in_bytes() -> None:
    g = _graph()
    q, k = g.input("q", (2, 8, 5, 16)), g.input("k", (2, 2, 7, 16))
    half = g.input("h", (1, 4, 3, 8), tg.float16)
    x = g.input("x", (3, 4, 10))
    image = g.input("img", (2, 6, 5, 5))
    tall, short = g.input("tall", (1, 1, 6, 4)), g.input("short", (1, 1, 3, 4))
    bool_mask = g.input("bm", (2, 1, 5, 7), tg.bool_)
    float_mask = g.input("fm", (1, 1, 5, 7))
    expected = {
        # (B, H, L, S) scores (the softmax in place) and (B, H, L, D) scaled queries in
        # the inputs' dtype: (2*8*5*7 + 2*8*5*16) * 4 bytes
        tg.scaled_dot_product_attention(q, k, k): (560 + 1280) * 4,
        # a causal mask adds its (L, S) bool and int32 positions of L and S: 35 + 4 * 12
        tg.scaled_dot_product_attention(q, k, k, mask="causal"): (560 + 1280) * 4 + 35 + 48,
        # more queries than keys: rows with no key are found with L int32 and L bool
        tg.scaled_dot_product_attention(tall, short, short, mask="causal"): (
            (1 * 6 * 3 + 1 * 6 * 4) * 4 + 18 + 4 * 9 + 5 * 6
        ),
        # a bool mask (2, 1, 5, 7) adds its row test, one bool per (2, 1, 5) row
        tg.scaled_dot_product_attention(q, k, k, mask=bool_mask): (560 + 1280) * 4 + 10,
        # a float mask (1, 1, 5, 7) also tests mask > -inf: 35 bools, plus 5 rows
        tg.scaled_dot_product_attention(q, k, k, mask=float_mask): (560 + 1280) * 4 + 40,
        # float16 attention keeps float16 scores: (1*4*3*3 + 1*4*3*8) * 2 bytes
        tg.scaled_dot_product_attention(half, half, half): (36 + 96) * 2,
        # mean and 1/std per row, float32: 12 rows
        tg.layer_norm(x): 2 * 12 * 4,
        # 1/rms per row
        tg.rms_norm(x): 12 * 4,
        # mean and 1/std per (sample, group): 2 * 3 groups
        tg.group_norm(image, 3): 2 * 2 * 3 * 4,
        # cos and sin tables, (L, dims / 2) float32 each: L = 4, dims = 6; plus one
        # product of the rotated features, 3*4 rows of 6 float32
        tg.rope(x, 6): 2 * 4 * 3 * 4 + 3 * 4 * 6 * 4,
    }
    for tensor, nbytes in expected.items():
        assert workspace_bytes(tensor.node, g) == nbytes, tensor
    assert workspace_bytes((x + 1.0).node, g) == 0, "ops without a workspace declare 0"
