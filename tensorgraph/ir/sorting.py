"""Sorting along an axis: `sort` (the values in order) and `argsort` (their int64
positions), MLX's names; torch's `topk` is an argsort cut to k positions.

Order: ascending by default, descending with `descending=True`; equal elements keep
their original order either way (stable), and NaN sorts as the largest value, as in
torch. Both ops take numbers, not bools.
"""

from __future__ import annotations

from tensorgraph.ir.shapes import normalize_axis
from tensorgraph.ir.tensor import Tensor, emit


def sort(x: Tensor, axis: int = -1, descending: bool = False) -> Tensor:
    """`x`'s values in order along `axis` (see the module docstring)."""
    return emit("sort", [x], axis=normalize_axis(axis, x.ndim), descending=bool(descending))


def argsort(x: Tensor, axis: int = -1, descending: bool = False) -> Tensor:
    """The int64 positions along `axis` that put `x` in order: `take_along_axis(x,
    argsort(x))` equals `sort(x)`; ties in their original order."""
    return emit("argsort", [x], axis=normalize_axis(axis, x.ndim), descending=bool(descending))
