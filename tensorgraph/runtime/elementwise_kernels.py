"""NumPy kernel of `elementwise` (ir/elementwise_fused.py), added to
`runtime.kernels.KERNELS` on import: the program's steps evaluated in order, each with
its own op's kernel through `kernels.evaluate` (so each result is rounded to its step's
dtype, as the unfused chain's would be), the last step's result returned (a fresh
array: an executor may place it over an operand's bytes, in place).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tensorgraph.ir.dtypes import as_dtype
from tensorgraph.ir.elementwise_fused import step_nodes
from tensorgraph.ir.node import Node
from tensorgraph.runtime.kernels import KERNELS, evaluate


def _elementwise(node: Node, args: Sequence[np.ndarray]) -> np.ndarray:
    values = list(args)
    for step in step_nodes(node, [(a.shape, as_dtype(a.dtype)) for a in args]):
        values.append(evaluate(step, [values[r] for r in step.inputs]))
    return values[-1]


KERNELS["elementwise"] = _elementwise
