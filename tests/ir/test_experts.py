"""gather_mm (ir.experts): the op table's cases and a property over random shapes,
dtypes and indices against an independent oracle (a Python loop of per-row matmuls in
float64), every backend; out-of-range indices a RunError naming the node on every
backend, whether the indices are feeds (checked on the host) or computed (the device
guard); named inference errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.errors import DTypeError, RunError, ShapeError
from tests.ir.op_cases import BF16, Case, case_adder, check_case

CASES: list[Case] = []  # the op table's cases (tests/ir/test_ops.py runs them all)
case = case_adder(CASES)
BACKENDS = ("numpy", "arena", "mlx")


def loop_oracle(a: np.ndarray, b: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """out[i] = a[i] @ b[indices[i]], one batch position at a time, in float64."""
    rows = a.astype(np.float64).reshape(-1, *a.shape[-2:])
    flat = indices.reshape(-1)
    out = np.zeros((len(flat), a.shape[-2], b.shape[-1]))
    for i, expert in enumerate(flat):
        out[i] = rows[i] @ b[expert].astype(np.float64)
    return out.reshape(*a.shape[:-1], b.shape[-1])


_rng = np.random.default_rng(3)
case(
    "gather_mm",
    "tokens",
    [
        _rng.standard_normal((6, 1, 8)).astype(np.float32),
        _rng.standard_normal((3, 8, 5)).astype(np.float32),
        np.array([2, 0, 0, 1, 2, 2], np.int32),
    ],
    tg.gather_mm,
    tg.float32,
    loop_oracle,
)
case(
    "gather_mm",
    "batched-bf16",
    [
        _rng.standard_normal((2, 3, 4, 16)).astype(BF16),
        _rng.standard_normal((4, 16, 8)).astype(BF16),
        np.array([[3, 0, 1], [1, 1, 2]], np.int64),
    ],
    tg.gather_mm,
    tg.bfloat16,
    loop_oracle,
)


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_case(c: Case) -> None:
    check_case(c)


@given(
    st.lists(st.integers(0, 3), min_size=0, max_size=2),
    st.integers(1, 3),
    st.integers(1, 4),
    st.integers(1, 5),
    st.integers(0, 2**32 - 1),
)
def test_random_dispatch_agrees_on_every_backend(batch, m, experts, n, seed) -> None:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((*batch, m, 6)).astype(np.float32)
    b = rng.standard_normal((experts, 6, n)).astype(np.float32)
    indices = rng.integers(0, experts, batch).astype(np.int32)
    g = tg.Graph("dispatch")
    out = tg.gather_mm(
        g.input("a", a.shape),
        g.param("b", b.shape, tg.float32, b),
        g.input("i", indices.shape, tg.int32),
    )
    g.output(out * 2.0)
    prog = tg.compile(g)
    feeds = {"a": a, "i": indices}
    want = 2 * loop_oracle(a, b, indices)
    ref = prog.run(feeds, backend="numpy")[0]
    np.testing.assert_allclose(ref, want, rtol=1e-5, atol=1e-5)
    assert prog.run(feeds, backend="arena")[0].tobytes() == ref.tobytes()
    np.testing.assert_allclose(prog.run(feeds, backend="mlx")[0], ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("computed", [False, True])
@pytest.mark.parametrize("backend", BACKENDS)
def test_an_index_past_the_experts_is_a_run_error(backend: str, computed: bool) -> None:
    """From a feed (host-checked) or computed from one (an argmax over scores, which
    only the device can check: 4 lies past the 3 experts)."""
    g = tg.Graph("bad")
    a = g.input("a", (2, 1, 4))
    b = g.param("b", (3, 4, 4), tg.float32, np.ones((3, 4, 4), np.float32))
    if computed:
        indices = tg.argmax(g.input("scores", (2, 5)), axis=1).astype(tg.int32)
        feeds = {"scores": np.array([[0, 1, 0, 0, 0], [0, 0, 0, 0, 9]], np.float32)}
    else:
        indices = g.input("i", (2,), tg.int32)
        feeds = {"i": np.array([1, 4], np.int32)}
    g.output(tg.gather_mm(a, b, indices))
    prog = tg.compile(g)
    feeds["a"] = np.ones((2, 1, 4), np.float32)
    with pytest.raises(RunError, match=r"%\d+ gather_mm: expert index 4 is out of range for 3"):
        prog.run(feeds, backend=backend)


@pytest.mark.parametrize(
    ("shapes", "error", "match"),
    [
        (((2, 1, 4), (3, 5, 4), (2,)), ShapeError, "inner dims differ"),
        (((2, 1, 4), (3, 4, 4), (3,)), ShapeError, "batch shape"),
        (((4,), (3, 4, 4), ()), ShapeError, r"a \(..., M, K\)"),
        (((2, 1, 4), (4, 4), (2,)), ShapeError, r"b \(E, K, N\)"),
    ],
)
def test_disagreements_are_named(shapes, error, match) -> None:
    g = tg.Graph("g")
    a, b, i = shapes
    with pytest.raises(error, match=match):
        tg.gather_mm(g.input("a", a), g.input("b", b), g.input("i", i, tg.int32))


def test_dtypes_are_named() -> None:
    g = tg.Graph("g")
    a, b = g.input("a", (2, 1, 4)), g.input("b", (3, 4, 4), tg.float16)
    with pytest.raises(DTypeError, match="floats of one dtype"):
        tg.gather_mm(a, b, g.input("i", (2,), tg.int32))
    with pytest.raises(DTypeError, match="must be integer"):
        tg.gather_mm(a, g.input("c", (3, 4, 4)), g.input("f", (2,)))
