"""NumPy kernel of `gather_mm` (`ir.experts`), added to `runtime.kernels.KERNELS` on
import. The oracle's definition: every index is checked first (outside [0, E) is a
RunError naming the node, the index and E), then each expert's rows are multiplied by
its weight in float32: one matmul per distinct index, so the result is computed the
way a dense matmul of those rows is."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tensorgraph.errors import RunError
from tensorgraph.ir.node import Node, describe
from tensorgraph.runtime.kernels import KERNELS, _wide


def _gather_mm(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    a, b, indices = args
    experts = b.shape[0]
    wide = indices.astype(np.int64).reshape(-1)
    bad = (wide < 0) | (wide >= experts)
    if bad.any():
        raise RunError(
            f"{describe(node)}: expert index {int(wide[bad][0])} is out of range for "
            f"{experts} experts"
        )
    rows = _wide(a).reshape(-1, *a.shape[-2:])
    weights = _wide(b)
    out = np.zeros((rows.shape[0], a.shape[-2], b.shape[2]), np.float32)
    for expert in np.unique(wide):
        chosen = wide == expert
        out[chosen] = np.matmul(rows[chosen], weights[expert])
    return out.reshape(node.shape)


KERNELS["gather_mm"] = _gather_mm
