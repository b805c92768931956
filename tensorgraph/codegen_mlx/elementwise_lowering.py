"""MLX lowering of `elementwise` (ir/elementwise_fused.py), added to `LOWERINGS` on
import: each step lowered by its own op's lowering, in order, so the node emits the
very primitives the unfused chain would (the same roundings: the backends agree bit for
bit) and mx.compile fuses them as it fuses that chain (fusion.py models the node as a
chain of fusable primitives, `_chain`).
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx

from tensorgraph.codegen_mlx.arrays import native_dtype
from tensorgraph.codegen_mlx.lowering import LOWERINGS, _lowered
from tensorgraph.ir.dtypes import as_dtype
from tensorgraph.ir.elementwise_fused import step_nodes
from tensorgraph.ir.node import Node


def _elementwise(node: Node, args: Sequence[mx.array]) -> mx.array:
    values = list(args)
    for step in step_nodes(node, [(tuple(a.shape), as_dtype(native_dtype(a))) for a in args]):
        values.append(LOWERINGS[step.op](step, [values[r] for r in step.inputs]))
    return values[-1]


LOWERINGS["elementwise"] = _lowered("elementwise", _elementwise)
