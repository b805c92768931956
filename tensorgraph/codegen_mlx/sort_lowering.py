"""MLX lowerings of `sort` and `argsort`, added to `codegen_mlx.lowering.LOWERINGS` on
import, with the NumPy kernels' order (runtime.sort_kernels): MLX's argsort is stable
and puts NaN last (checked on the CPU backend, ties over 5,000 elements), so ascending
is MLX's argsort and descending is the same reversal as the oracle's. Values are the
input gathered at those positions, so sort and argsort always agree.
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx

from tensorgraph.codegen_mlx.lowering import LOWERINGS, _lowered
from tensorgraph.ir.node import Node


def _order(node: Node, x: mx.array) -> mx.array:
    axis = node.attr("axis")
    if not node.attr("descending"):
        return mx.argsort(x, axis=axis)
    reverse = tuple(slice(None, None, -1) if a == axis else slice(None) for a in range(x.ndim))
    ranked = mx.argsort(x[reverse], axis=axis)
    return (x.shape[axis] - 1) - ranked[reverse]


def _argsort(node: Node, args: Sequence[mx.array]) -> mx.array:
    return _order(node, args[0]).astype(mx.int64)


def _sort(node: Node, args: Sequence[mx.array]) -> mx.array:
    return mx.take_along_axis(args[0], _order(node, args[0]), node.attr("axis"))


LOWERINGS.update({"sort": _lowered("sort", _sort), "argsort": _lowered("argsort", _argsort)})
