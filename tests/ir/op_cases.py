"""The harness of the per-op tests (tests/ir/test_ops_*.py): case tables, seeded arrays,
the check every case runs, and the NumPy oracles more than one test module uses.

A `Case` builds one op through the builder on inputs like its arrays; the check compares
inference (shape, dtype) with an independent NumPy expression and the reference
interpreter's values with that expression's (never the kernels under test). Each test
module keeps its own table and its own seeded generator, so its arrays do not depend on
which other modules ran; tests/ir/test_ops.py checks that the tables together exercise
every op of the registry.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import ml_dtypes
import numpy as np

import tensorgraph as tg
from tensorgraph.ir.dtypes import as_dtype
from tensorgraph.runtime.reference import run_reference

F64 = np.float64
F16 = np.dtype(np.float16)
BF16 = np.dtype(ml_dtypes.bfloat16)


class Arrays:
    """Random input arrays from one seeded generator."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def rand(
        self, *shape: int, dtype: object = np.float32, low: float = -2, high: float = 2
    ) -> np.ndarray:
        return self.rng.uniform(low, high, shape).astype(dtype)

    def ints(
        self, *shape: int, low: int = -5, high: int = 6, dtype: object = np.int32
    ) -> np.ndarray:
        return self.rng.integers(low, high, shape).astype(dtype)

    def flags(self, *shape: int) -> np.ndarray:
        return self.rng.random(shape) > 0.5


def wide(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """`fn` applied to float64 copies of its array arguments."""
    return lambda *xs: fn(*(x.astype(F64) for x in xs))


def method(name: str, *args: object, **kwargs: object) -> Callable[..., object]:
    """Calls method `name` on a Tensor or an ndarray alike (the builder mirrors NumPy)."""
    return lambda x: getattr(x, name)(*args, **kwargs)


@dataclass(frozen=True)
class Case:
    """`build(*inputs)` (or `build(graph)` when there are no arrays) applies `op`.
    Inference must give the shape of `expected(*arrays)` and `dtype`; the reference must
    give its values: exactly for bool and integer results, else to rtol/atol (two units
    in the last place for half precision). `expected=None` means `build` itself on the
    NumPy arrays: the builder mirrors NumPy, so the same expression is the oracle."""

    id: str
    op: str
    arrays: tuple[np.ndarray, ...]
    build: Callable[..., tg.Tensor]
    dtype: tg.DType
    expected: Callable[..., np.ndarray] | None = None
    rtol: float = 1e-5
    atol: float = 1e-6


def case_adder(table: list[Case]) -> Callable[..., None]:
    """`case(op, id, arrays, build, dtype, expected=None, **tolerance)`, appending the Case
    with id `op-id` to `table`."""

    def case(op: str, id: str, arrays, build, dtype, expected=None, **tolerance) -> None:
        table.append(Case(f"{op}-{id}", op, tuple(arrays), build, dtype, expected, **tolerance))

    return case


def build_and_run(build: Callable[..., tg.Tensor], arrays: tuple[np.ndarray, ...]):
    """(graph, output tensor, reference value) of `build` over inputs like `arrays`."""
    g = tg.Graph("op")
    inputs = [g.input(f"a{i}", a.shape, as_dtype(a.dtype)) for i, a in enumerate(arrays)]
    out = build(*inputs) if arrays else build(g)
    g.output(out)
    (value,) = run_reference(g, {f"a{i}": a for i, a in enumerate(arrays)})
    return g, out, value


def assert_matches(got: np.ndarray, want: np.ndarray, dtype: tg.DType, rtol: float, atol: float):
    """Shape, then dtype, then values (see Case)."""
    target = dtype.to_numpy()
    assert got.shape == want.shape, f"shape {got.shape}, expected {want.shape}"
    assert got.dtype == target, f"dtype {got.dtype}, expected {target}"
    if not dtype.is_float:
        np.testing.assert_array_equal(got, want.astype(target))
        return
    if dtype.itemsize < 4:
        rtol = atol = 2 * float(ml_dtypes.finfo(target).eps)
    np.testing.assert_allclose(
        got.astype(F64), want.astype(F64), rtol=rtol, atol=atol, equal_nan=True
    )


def check_case(c: Case) -> None:
    """The case's op was emitted, inference agrees with NumPy, the reference's values match."""
    g, out, got = build_and_run(c.build, c.arrays)
    assert c.op in {n.op for n in g.nodes}, f"the builder emitted no {c.op} node"
    want = np.asarray((c.expected or c.build)(*c.arrays))
    assert out.shape == want.shape, f"inferred shape {out.shape}, NumPy gives {want.shape}"
    assert out.dtype == c.dtype, f"inferred dtype {out.dtype}, expected {c.dtype}"
    assert_matches(got, want, c.dtype, c.rtol, c.atol)


# ---------------------------------------------------------------- shared oracles


def erf_f64(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[F64])(x)


def softmax_f64(x: np.ndarray, axis: int) -> np.ndarray:
    x = x.astype(F64)
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def naive_conv_transpose2d(x, w, stride, padding, dilation, output_padding, groups):
    """The definition, one input pixel at a time: pixel (b, c, i, j) adds w[c, o', p, q]
    to output (b, group's o', i * stride + p * dilation - padding, ...) when that lands
    inside the output. The independent oracle for conv_transpose2d."""
    (sh, sw), (ph, pw), (dh, dw), (eh, ew) = stride, padding, dilation, output_padding
    n, c, h, wd = x.shape
    _ci, og, kh, kw = w.shape
    oh = (h - 1) * sh - 2 * ph + dh * (kh - 1) + eh + 1
    ow = (wd - 1) * sw - 2 * pw + dw * (kw - 1) + ew + 1
    out = np.zeros((n, og * groups, oh, ow))
    per_group = c // groups
    for b in range(n):
        for ic in range(c):
            group = ic // per_group
            for i in range(h):
                for j in range(wd):
                    for p in range(kh):
                        for q in range(kw):
                            r, s = i * sh + p * dh - ph, j * sw + q * dw - pw
                            if 0 <= r < oh and 0 <= s < ow:
                                for o in range(og):
                                    value = float(x[b, ic, i, j]) * float(w[ic, o, p, q])
                                    out[b, group * og + o, r, s] += value
    return out


def naive_conv2d(x, w, stride, padding, dilation, groups):
    """A direct loop over every output element: the independent oracle for conv2d.
    `padding` is (H, W), padding both sides, or ((top, bottom), (left, right)), a
    negative bottom or right leaving out that many last rows or columns."""
    (sh, sw), (dh, dw) = stride, dilation
    rows, cols = (p if isinstance(p, tuple) else (p, p) for p in padding)
    n, _c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    kept = x[:, :, : h + min(rows[1], 0), : wd + min(cols[1], 0)]
    grow = ((rows[0], max(rows[1], 0)), (cols[0], max(cols[1], 0)))
    xp = np.pad(kept.astype(F64), ((0, 0), (0, 0), *grow))
    oh = (h + sum(rows) - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + sum(cols) - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, o, oh, ow))
    per_group = o // groups
    for b in range(n):
        for oc in range(o):
            first = (oc // per_group) * cg
            for i in range(oh):
                for j in range(ow):
                    for ic in range(cg):
                        for p in range(kh):
                            for q in range(kw):
                                pixel = xp[b, first + ic, i * sh + p * dh, j * sw + q * dw]
                                out[b, oc, i, j] += pixel * w[oc, ic, p, q]
    return out
