"""`gather_mm`: a batch of matmuls, each against the weight an index selects, MLX's
`mx.gather_mm(a, b, rhs_indices=indices)`: the expert dispatch of a mixture of experts.

`gather_mm(a, b, indices)` with `a` (..., M, K), `b` (E, K, N) and integer `indices`
of `a`'s batch shape (...) is, for every batch position i,

    out[i] = a[i] @ b[indices[i]]                                   (..., M, N)

in `a`'s dtype (`b` must have it too): computed in float32 and rounded once, as a
matmul. Every index must lie in [0, E), else the run is a RunError naming the node and
the index, on every backend. No (..., K, N) stack of selected weights is ever made: a
token reads its expert's weight where it lies, which is what keeps an imported MoE
layer's peak at its activations rather than at a copy of its experts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from tensorgraph.errors import DTypeError, ShapeError
from tensorgraph.ir.dtypes import DType
from tensorgraph.ir.ops import OpDef, Operand, register
from tensorgraph.ir.shapes import Shape

if TYPE_CHECKING:
    from tensorgraph.ir.tensor import Tensor


def infer_gather_mm(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    """(..., M, N) in a's dtype; ShapeError / DTypeError naming the operands otherwise."""
    a, b, indices = xs
    if len(a.shape) < 2 or len(b.shape) != 3:
        raise ShapeError(f"gather_mm takes a (..., M, K) and b (E, K, N), not {a} and {b}")
    if a.shape[-1] != b.shape[1]:
        raise ShapeError(f"inner dims differ: {a} @ a weight of {b}")
    if indices.shape != a.shape[:-2]:
        raise ShapeError(f"indices {indices} must have {a.label}'s batch shape {a.shape[:-2]}")
    if not a.dtype.is_float or a.dtype != b.dtype:
        raise DTypeError(
            f"gather_mm takes floats of one dtype: {a.label} {a.dtype}, {b.label} {b.dtype}"
        )
    if not indices.dtype.is_integer:
        raise DTypeError(f"indices {indices.label} must be integer but are {indices.dtype}")
    return (*a.shape[:-1], b.shape[2]), a.dtype


register(OpDef("gather_mm", 3, 3, infer_gather_mm, {}, category="matmul"))


def gather_mm(a: Tensor, b: Tensor, indices: Tensor) -> Tensor:
    """`a[i] @ b[indices[i]]` for every batch position i (see the module docstring)."""
    # The registry core imports this module to complete `OPS`, and `ir.tensor` needs the
    # graph, which needs the registry: so the handle plumbing is imported on use.
    from tensorgraph.ir.tensor import emit

    return emit("gather_mm", [a, b, indices])
