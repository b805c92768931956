"""The IR: dtypes, shapes, the op registry, nodes, graphs, builder, verifier, printer."""

from tensorgraph.ir.dtypes import DTYPES, DType, as_dtype, promote_types
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node, describe
from tensorgraph.ir.ops import OPS, OpDef, get_op, view_offset
from tensorgraph.ir.verify import verify

__all__ = [
    "DTYPES",
    "OPS",
    "DType",
    "Graph",
    "Node",
    "OpDef",
    "as_dtype",
    "describe",
    "get_op",
    "promote_types",
    "verify",
    "view_offset",
]

# The vector-Jacobian rules build backward nodes with the op functions, which need the
# whole IR: they join the registry here, once every module above is loaded.
from tensorgraph.ir import (
    vjp_elementwise,
    vjp_fused,
    vjp_layout,
    vjp_products,
    vjp_quantized,
    vjp_reductions,
    vjp_windows,
)
