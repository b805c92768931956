"""Host checks of one scalar integer input, tabulated: a decode step's position.

A check whose index is computed from one 0-d integer input through 0-d integer or bool
elementwise ops and constants (the position of a cache write, normalised as torch.export
writes it: `where(pos < 0, pos + size, pos)`) has a verdict that depends on that one
value. `scalar_table` evaluates the check's cone once, over every value of a window
around the checked extent ([-2 size - 2, 2 size + 2], within the input dtype), with the
same NumPy kernels the per-call check runs; a call whose value lies in the window and
passes there is then a table lookup instead of a kernel per op.

Exactness: integer and bool elementwise kernels compute each element of a vector as
they compute a 0-d array (no rounding, wrap-around alike), so the table holds exactly the
per-call verdicts; floats are excluded (a SIMD loop may round a transcendental
differently from the scalar one). A value outside the window, or one the table fails,
runs the per-call check, which raises the error with its numbers: the table only ever
skips checks that pass.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from attrs import frozen

from tensorgraph.errors import TensorGraphError
from tensorgraph.ir.ops import OPS
from tensorgraph.runtime.kernels import KERNELS, constant_value

_LEAVES = frozenset({"input", "constant"})


@frozen(eq=False)
class ScalarTable:
    """Verdicts of one check for input `input_id` = `low` + k: `passing[k]`."""

    input_id: int
    low: int
    passing: np.ndarray

    def passes(self, feeds: Mapping[int, object]) -> bool:
        """True when the call's value of the input is in the table and passes there
        (False also for a value that is not a host array: the caller checks it)."""
        value = feeds[self.input_id]
        if not isinstance(value, np.ndarray | np.generic):
            return False
        k = int(value) - self.low
        return 0 <= k < self.passing.shape[0] and bool(self.passing[k])


def scalar_table(check: object) -> ScalarTable | None:
    """The ScalarTable of a `runtime.state.HostCheck` (module docstring), or None when its
    cone is not one 0-d integer input through 0-d integer/bool elementwise ops (or casts)
    and constants, or a kernel refuses the window."""
    inputs = [n for n in check.cone if n.op == "input"]
    if len(inputs) != 1:
        return None
    for node in check.cone:
        elementwise = node.op == "cast" or (node.op in OPS and OPS[node.op].elementwise)
        if node.shape != () or np.dtype(node.dtype.to_numpy()).kind not in "biu":
            return None
        if node.op not in _LEAVES and not (elementwise and node.op in KERNELS):
            return None
    (source,) = inputs
    limits = np.iinfo(source.dtype.to_numpy())
    span = 2 * check.size + 2
    domain = np.arange(max(-span, int(limits.min)), min(span, int(limits.max)) + 1)
    values: dict[int, np.ndarray] = {}
    try:
        with np.errstate(all="ignore"):
            for node in check.cone:
                if node.op == "input":
                    values[node.id] = domain.astype(node.dtype.to_numpy())
                elif node.op == "constant":
                    values[node.id] = constant_value(node)
                else:
                    result = KERNELS[node.op](node, [values[i] for i in node.inputs])
                    values[node.id] = np.asarray(result).astype(node.dtype.to_numpy())
    except (TensorGraphError, ValueError, TypeError, OverflowError):
        return None
    index = np.broadcast_to(values[check.rule[0]], domain.shape).astype(np.int64)
    if check.kind == "start":
        passing = (index >= 0) & (index + check.rows <= check.size)
    else:
        passing = (index >= (-check.size if check.kind == "signed" else 0)) & (index < check.size)
    return ScalarTable(source.id, int(domain[0]), passing)
