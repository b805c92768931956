"""The fused ops on MLX (mx.fast kernels, group_norm composite) against the NumPy oracle,
eager and compiled, once with the CPU's written-out composites and once with mx.fast
(`codegen_mlx.fused.FAST_ON_CPU`), so both lowerings are checked on any machine.

Tolerances, derived for inputs uniform in [-2, 2] (float32 unit roundoff u = 6e-8):
- norms: a row of D <= 24 values; mean and variance are float32 sums, relative error
  about D * u = 1.5e-6 on the statistics, so outputs of magnitude <= ~5 err by < 1e-5:
  rtol 1e-5, atol 1e-5.
- attention: a score is a float32 dot product of D <= 8 terms, |q . k| <= 32, error
  <= D * u * 32 * scale ~ 6e-6; softmax turns a score error e into a relative error e
  of each probability, and the output sums probabilities times |v| <= 2, so the error
  is < 2e-5: rtol 1e-5, atol 3e-5.
- rope: MLX forms the angle (offset + l) * scale * inv_freq in float32, position <= 40,
  error <= 40 * u * 2 rad = 5e-6; a rotation of |x| <= 2 moves by at most that much:
  atol 2e-5.
- float16: the oracle rounds once from float64, MLX accumulates in float32 and rounds
  once, so both are within half an ulp of the exact value: two ulps (2 * 2**-10
  relative, atol as much near 1).

MLX's compiled mode builds a CPU kernel per new shape (about a second each), so the
properties over shapes draw fewer examples than the suite's default.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.codegen_mlx import fused
from tests.codegen_mlx.test_lowering import check


@pytest.fixture(autouse=True, scope="module", params=[False, True], ids=["composite", "fast"])
def lowering(request: pytest.FixtureRequest) -> object:
    """Every test of this module runs with both CPU lowerings of the fused ops."""
    fused.FAST_ON_CPU = request.param
    yield request.param
    fused.FAST_ON_CPU = False


NORM = {"rtol": 1e-5, "atol": 1e-5}
ATTENTION = {"rtol": 1e-5, "atol": 3e-5}
HALF = {"rtol": 2 * 2**-10, "atol": 2 * 2**-10}


def uniform(seed: int, *shape: int, dtype: object = np.float32) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-2, 2, shape).astype(dtype)


@given(
    batch=st.integers(1, 2),
    kv_heads=st.integers(1, 2),
    group=st.integers(1, 3),
    length=st.integers(1, 5),
    keys=st.integers(1, 6),
    head_dim=st.sampled_from([4, 8]),
    mask=st.sampled_from(["none", "causal", "bool", "float"]),
    seed=st.integers(0, 2**16),
)
def test_attention_matches_the_oracle(
    batch, kv_heads, group, length, keys, head_dim, mask, seed
) -> None:
    q = uniform(seed, batch, kv_heads * group, length, head_dim)
    k = uniform(seed + 1, batch, kv_heads, keys, head_dim)
    v = uniform(seed + 2, batch, kv_heads, keys, head_dim)
    rng = np.random.default_rng(seed)
    extra = {
        "none": (),
        "causal": (),
        "bool": (rng.random((length, keys)) > 0.4,),  # dead rows included
        "float": (uniform(seed + 3, 1, 1, length, keys),),
    }[mask]

    def build(g, *ts):
        m = "causal" if mask == "causal" else (ts[3] if len(ts) == 4 else None)
        return tg.scaled_dot_product_attention(ts[0], ts[1], ts[2], mask=m)

    check(build, q, k, v, *extra, **ATTENTION)


@settings(max_examples=6)
@given(
    shape=st.lists(st.integers(1, 6), min_size=1, max_size=3).map(tuple),
    last=st.integers(1, 24),
    affine=st.sampled_from(["none", "weight", "both", "bias"]),
    seed=st.integers(0, 2**16),
)
def test_layer_and_rms_norm_match_the_oracle(shape, last, affine, seed) -> None:
    x = uniform(seed, *shape, last)
    w, b = uniform(seed + 1, last), uniform(seed + 2, last)
    weight = affine in ("weight", "both")
    bias = affine in ("bias", "both")
    arrays = [x] + ([w] if weight else []) + ([b] if bias else [])

    def build(g, x, *rest):
        rest = list(rest)
        wt = rest.pop(0) if weight else None
        bt = rest.pop(0) if bias else None
        return tg.layer_norm(x, wt, bt, eps=1e-5), tg.rms_norm(x, wt, eps=1e-6)

    # float32 normalisation loses about a few ulps of max|x| / std per row: rows of
    # nearly equal values (a 2-element row, say) are ill-conditioned, so the tolerance
    # grows with the worst row's max|x| / std (1 for well-spread rows)
    spread = np.sqrt(x.astype(np.float64).var(axis=-1) + 1e-5)
    condition = float(np.max(np.max(np.abs(x), axis=-1) / spread))
    check(build, *arrays, rtol=1e-5, atol=max(NORM["atol"], 4e-6 * condition))


@settings(max_examples=12)
@given(
    batch=st.integers(1, 2),
    groups=st.integers(1, 3),
    per_group=st.integers(1, 3),
    spatial=st.lists(st.integers(1, 4), max_size=2).map(tuple),
    seed=st.integers(0, 2**16),
)
@example(batch=1, groups=1, per_group=2, spatial=(), seed=194)  # two near-equal values
def test_group_norm_matches_the_oracle(batch, groups, per_group, spatial, seed) -> None:
    channels = groups * per_group
    x = uniform(seed, batch, channels, *spatial)
    w, b = uniform(seed + 1, channels), uniform(seed + 2, channels)
    # as for layer_norm: a group of nearly equal values (two channels, no spatial axes)
    # is ill-conditioned, so the tolerance grows with the worst group's max|x| / std
    grouped = x.astype(np.float64).reshape(batch, groups, -1)
    spread = np.sqrt(grouped.var(axis=-1) + 1e-5)
    condition = float(np.max(np.max(np.abs(grouped), axis=-1) / spread))
    atol = max(NORM["atol"], 4e-6 * condition)
    check(lambda g, x, w, b: tg.group_norm(x, groups, w, b), x, w, b, rtol=1e-5, atol=atol)


@settings(max_examples=12)
@given(
    lead=st.lists(st.integers(1, 3), max_size=2).map(tuple),
    length=st.integers(1, 8),
    half=st.integers(1, 4),
    extra=st.integers(0, 4),
    traditional=st.booleans(),
    offset=st.integers(0, 32),
    scale=st.sampled_from([1.0, 0.5, 2.0]),
    seed=st.integers(0, 2**16),
)
def test_rope_matches_the_oracle(lead, length, half, extra, traditional, offset, scale, seed):
    x = uniform(seed, *lead, length, 2 * half + extra)

    def build(g, x):
        return tg.rope(x, 2 * half, traditional=traditional, scale=scale, offset=offset)

    check(build, x, rtol=1e-5, atol=2e-5)


def test_half_precision_fused_ops_round_once() -> None:
    q = uniform(1, 1, 4, 6, 8, dtype=np.float16)
    kv = uniform(2, 1, 2, 6, 8, dtype=np.float16)
    w = uniform(3, 8, dtype=np.float16)

    def build(g, q, kv, w):
        return (
            tg.scaled_dot_product_attention(q, kv, kv, mask="causal"),
            tg.layer_norm(q, w, w),
            tg.rms_norm(q, w),
            tg.rope(q, 8),
        )

    check(build, q, kv, w, **HALF)


def test_rope_tables_are_shared_and_bounded() -> None:
    # One table per distinct (dims, base, scale, offset, length), reused by every rope
    # op that asks for it; a decode loop (a new offset per step) keeps at most
    # ROPE_TABLES_KEPT of them.
    g = tg.Graph("rope")
    x = g.input("x", (1, 2, 3, 4))
    nodes = [tg.rope(x, 4, offset=k).node for k in range(fused.ROPE_TABLES_KEPT + 6)]
    first = fused._rope_tables(nodes[0], 3)
    assert fused._rope_tables(nodes[0], 3) is first
    for node in nodes:
        fused._rope_tables(node, 3)
    assert len(fused._ROPE_TABLES) <= fused.ROPE_TABLES_KEPT


_attention = tg.scaled_dot_product_attention
_QKV = {"q": (1, 2, 3, 4), "k": (1, 2, 0, 4), "v": (1, 2, 0, 5)}
ZERO_SIZE = {  # id: (build, input shapes, expected value written out from the definition)
    "attention over zero keys": (_attention, _QKV, lambda q, k, v: np.zeros((1, 2, 3, 5))),
    "causal attention over zero keys": (
        lambda q, k, v: _attention(q, k, v, mask="causal"),
        _QKV,
        lambda q, k, v: np.zeros((1, 2, 3, 5)),
    ),
    "attention of head dim 0": (  # every score is 0 at the default scale: rows average v
        _attention,
        {"q": (1, 2, 3, 0), "k": (1, 2, 4, 0), "v": (1, 2, 4, 3)},
        lambda q, k, v: np.broadcast_to(v.mean(axis=2, keepdims=True), (1, 2, 3, 3)),
    ),
    "group norm of batch 0": (
        lambda x: tg.group_norm(x, 2),
        {"x": (0, 4, 3)},
        lambda x: np.zeros((0, 4, 3)),
    ),
    "layer norm of empty rows": (tg.layer_norm, {"x": (3, 0)}, lambda x: np.zeros((3, 0))),
    "rms norm of no rows": (tg.rms_norm, {"x": (0, 4)}, lambda x: np.zeros((0, 4))),
    "rope of length 0": (lambda x: tg.rope(x, 4), {"x": (2, 0, 4)}, lambda x: x),
}


@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("backend", ["numpy", "arena", "mlx"])
@pytest.mark.parametrize("name", sorted(ZERO_SIZE))
def test_zero_size_fused_ops_run_on_every_backend(name: str, backend: str) -> None:
    # The NumPy oracles crashed here (np.max of an empty axis, a reshape of batch 0) or
    # warned (the mean of an empty row), and the builder divided by a head dim of 0,
    # while MLX gave these values.
    build, shapes, expected = ZERO_SIZE[name]
    g = tg.Graph("zero size")
    g.output(build(**{k: g.input(k, s) for k, s in shapes.items()}))
    rng = np.random.default_rng(3)
    feeds = {k: rng.uniform(-2, 2, s).astype(np.float32) for k, s in shapes.items()}
    want = expected(**feeds)
    (got,) = tg.compile(g).run(feeds, backend=backend)
    assert got.shape == want.shape
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_the_default_scale_of_head_dim_0_is_1() -> None:
    g = tg.Graph("no depth")
    q = g.input("q", (1, 1, 2, 0))
    assert tg.scaled_dot_product_attention(q, q, q).node.attr("scale") == 1.0
