"""NumPy kernel of `index_update` (`ir.updates`), added to `runtime.kernels.KERNELS` on
import (same contract: a fresh result of the node's shape and dtype that aliases none of
its arguments, so an executor may place it over the target's bytes: in place).

The oracle's definition of the op: an index outside [0, size) along the axis is a
RunError naming the node, the index and the size, raised before anything is written;
when an index repeats, only its last occurrence is written (torch's CPU index_copy keeps
the last write; NumPy's fancy assignment promises no order for repeats, so the kernel
never hands it one).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tensorgraph.errors import RunError
from tensorgraph.ir.node import Node, describe
from tensorgraph.runtime.kernels import KERNELS


def last_occurrences(index: np.ndarray) -> np.ndarray:
    """The positions i of a 1-D `index` whose value does not occur again after i, in
    increasing order: writing only those gives 'last write wins' in any write order."""
    reversed_first = np.unique(index[::-1], return_index=True)[1]
    return np.sort(index.size - 1 - reversed_first)


def _index_update(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    target, update, index = args
    axis = node.attr("axis")
    size = target.shape[axis]
    wide = index.astype(np.int64).reshape(-1)
    bad = (wide < 0) | (wide >= size)
    if bad.any():
        raise RunError(
            f"{describe(node)}: index {int(wide[bad][0])} is out of range for axis {axis} "
            f"of size {size}"
        )
    out = np.array(target, order="C", copy=True)
    keep = last_occurrences(wide)
    into: list[object] = [slice(None)] * target.ndim
    into[axis] = wide[keep]
    source: list[object] = [slice(None)] * target.ndim
    source[axis] = keep
    out[tuple(into)] = update[tuple(source)]
    return out


KERNELS["index_update"] = _index_update
