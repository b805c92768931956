"""NumPy kernel of `scatter_add` (`ir.scatter`), added to `runtime.kernels.KERNELS` on
import. The oracle's definition: every index is checked first (outside [0, size) along
the axis is a RunError naming the node, the index and the size), then `np.add.at`
accumulates the updates into a copy of the target in index order (unbuffered, so a
repeated index adds every time), in the float32 computation precision for half types."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tensorgraph.errors import RunError
from tensorgraph.ir.node import Node, describe
from tensorgraph.runtime.kernels import KERNELS, _wide


def _scatter_add(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    target, update, indices = args
    axis = node.attr("axis")
    size = target.shape[axis]
    wide = indices.astype(np.int64)
    bad = (wide < 0) | (wide >= size)
    if bad.any():
        raise RunError(
            f"{describe(node)}: index {int(wide[bad].flat[0])} is out of range for axis "
            f"{axis} of size {size}"
        )
    out = np.array(_wide(target), order="C", copy=True)
    where = list(np.indices(update.shape, sparse=True))
    where[axis] = wide
    np.add.at(out, tuple(where), _wide(update))
    return out


KERNELS["scatter_add"] = _scatter_add
