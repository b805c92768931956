"""The MLX backend's State: one mx.array per state, on the device.

A call that updates a state either donates its array or keeps it, and a call that
raises leaves every state as it was in both cases:

- donate: the call is handed the only reference to the state's array, so MLX can give
  its buffer to the in-place update (no copy of a KV cache per step). The executor
  does this only when nothing in the call can fail once it runs: every position and
  index was proven on the host first (`runtime.state.check_indices`: inputs,
  constants and small states), and no guard is left to the device
  (`guards.device_guarded` is empty). A decode step fed its position, or keeping it in
  a small state, is such a call;
- keep: where a guard can only be checked on the device (an index computed from a
  large value), the State keeps the old arrays until the call has succeeded. MLX then
  cannot donate them: the update copies the state once per call, the price of a check
  that only the device can make.

A training step is a donating call when its indices are proven on the host: max
pool's gradient scatters by a constant window index and an embedding's by the fed
token ids, both merely broadcast (guards.py, tiers 2 and 3). Its weights and moments
then live once, updated in place, as the plan counts them (the state region once):
kept instead, the old and new arrays coexist at the update, up to twice the region
(the zoo ResNet-18 step peaked at 1.56x its plan so; 1.10x donating).

What a failed step guarantees: every error tensorgraph raises (a feed's name, shape
or dtype, a State of another program, an index or position out of range) leaves the
weights and optimizer state exactly as they were, donating or not: those are checked
before any state is handed to MLX, or, kept, the state is never replaced.

The new arrays are committed only after the call has succeeded. If MLX itself fails
inside a donating call (out of memory, an interrupt), the donated states cannot be
restored: they are marked `lost` (runtime/state.py), so that reading them or running
on them is a RunError until `reset()`, never a silent restart from zeros.
"""

from __future__ import annotations

import numpy as np

from tensorgraph.codegen_mlx.arrays import to_mx, to_numpy
from tensorgraph.runtime.state import State


class MLXState(State):
    """A `State` for the "mlx" backend: `values` maps each state to its mx.array."""

    BACKENDS = ("mlx",)

    def zeros(self, shape: tuple[int, ...], dtype: np.dtype) -> object:
        return to_mx(np.zeros(shape, dtype))

    def host_value(self, name: str) -> np.ndarray:
        """State `name`'s value copied to the host (it syncs: what the host checks read
        of a small state, a position counter)."""
        return to_numpy(self.values[name])

    def from_host(self, array: np.ndarray) -> object:
        return to_mx(array)
