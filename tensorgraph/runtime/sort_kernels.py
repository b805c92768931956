"""NumPy kernels of `sort` and `argsort` (ir.sorting), added to `runtime.kernels.KERNELS`
on import (same contract: a fresh result of the node's shape and dtype; half precision
sorted in float32, which orders half values exactly as they are).

Both orders are stable (ties keep their original order) and put NaN as the largest
value, as torch does: ascending is NumPy's stable argsort (NaN last); descending is
that argsort of the array reversed along the axis, reversed back and mapped to the
original positions, which keeps ties in their original order and puts NaN first.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tensorgraph.ir.node import Node
from tensorgraph.runtime.kernels import KERNELS, _wide


def order(x: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    """The positions along `axis` that sort `x` (module docstring)."""
    if not descending:
        return np.argsort(x, axis=axis, kind="stable")
    ranked = np.argsort(np.flip(x, axis), axis=axis, kind="stable")
    return (x.shape[axis] - 1) - np.flip(ranked, axis)


def _argsort(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    return order(_wide(args[0]), node.attr("axis"), node.attr("descending")).astype(np.int64)


def _sort(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    x = _wide(args[0])
    positions = order(x, node.attr("axis"), node.attr("descending"))
    return np.take_along_axis(x, positions, node.attr("axis"))


KERNELS.update({"sort": _sort, "argsort": _argsort})
