"""Automatic differentiation on the IR: `value_and_grad` (reverse mode) builds a graph
that computes a scalar loss and its gradients, from the vector-Jacobian rules the op
registry holds beside each op (`OpDef.vjp`, set by the `ir.vjp_*` modules)."""

from tensorgraph.autodiff.reverse import value_and_grad

__all__ = ["value_and_grad"]
