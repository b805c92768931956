"""Greedy decoding on MLX, pipelined: the next token stays on the device, and step t + 1
is queued before token t is read back, as mlx-lm's `generate_step` does.

Why. A synchronous decode step waits for the device, copies the logits row to the host,
picks the argmax in NumPy and converts the pick back into a feed: host work per token
that the device sits idle through (measured in benches/README.md, "Decode speed per
family"). Here each step's token is `mx.argmax` of its logits, fed lazily to the next
step; the host reads one int per row, one step behind, while the device computes the
next step. What the host still does per step (feeds, checks, the segment's dispatch)
overlaps the device's work on the step before.

Invariants:

- Same tokens as the synchronous loop with the greedy `Sampler`: `mx.argmax` picks the
  first index of the maximum, NaN first where a row has one, as `np.argmax` of the
  float64 logits does (tests/models/test_decode_pipeline.py holds both to it on random
  rows with ties and NaNs); the logits are the same arrays either way.
- Same checks: the token fed to a step is the argmax of a vocab-wide row, so it lies in
  [0, vocab): the executor is told so (`run_mlx`'s `known`), and an index check that
  range implies (an embedding of >= vocab rows) is proven instead of read; any other
  check still reads the token (waiting for it), so a bad index is the same RunError,
  raised before the failing step writes anything. Positions are host ints, checked as
  before on every step.
- Streaming: `on_token` gets token t once step t + 1 is queued (not before), still in
  order and before step t + 2 is queued.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import mlx.core as mx
import numpy as np

from tensorgraph.calls import call
from tensorgraph.codegen_mlx.arrays import MX_DTYPES


def decode_greedy(
    program: object,
    decode_entry: Callable[[int], str],
    roles: Callable[[str], list],
    first: np.ndarray,
    positions: range,
    vocab: int,
    state: object,
    options: Mapping[str, object],
    emit: Callable[[int, np.ndarray], None],
) -> None:
    """Greedy decode steps at `positions` on MLX, pipelined (module docstring): step k
    runs entry `decode_entry(position)` of `program` (a MultiProgram; `roles(entry)`:
    its (input name, role, NumPy dtype) triples) on `state`, fed the previous step's
    token (the first: `first`, (batch,) int32 on the host) and its position, and
    `emit(k + 1, token)` hands its token ((batch,) int32) to the caller, in order.
    `options`: the MLX backend's run options, already checked by the caller."""
    token = mx.array(first.astype(np.int32))
    pending: tuple[int, mx.array] | None = None
    plans: dict[str, tuple] = {}  # entry -> (its Program, feed plan, run options)
    for step, position in enumerate(positions, start=1):
        entry = decode_entry(position)
        if entry not in plans:
            plans[entry] = _plan(program.entries[entry], roles(entry), vocab, options)
        entry_program, fed, run = plans[entry]
        feeds = {
            name: token.astype(mx_dtype).reshape(-1, 1) if ids else np.array(position, dtype)
            for name, ids, dtype, mx_dtype in fed
        }
        (logits,) = call(entry_program, feeds, None, "mlx", state, run)
        token = mx.argmax(logits.reshape(first.shape[0], -1), axis=-1)
        mx.async_eval(token)
        if pending is not None:
            emit(*_read(pending))
        pending = (step, token)
    if pending is not None:
        emit(*_read(pending))


def _plan(entry: object, roles: list, vocab: int, options: Mapping[str, object]) -> tuple:
    """(entry, (input name, is the token, NumPy dtype, MLX dtype) per input, run options
    telling the executor the token's range: an argmax over a vocab-wide row)."""
    fed = [
        (name, role == "ids", dtype, MX_DTYPES[np.dtype(dtype).name]) for name, role, dtype in roles
    ]
    known = {name: (0, vocab) for name, ids, _, _ in fed if ids}
    return entry, fed, {**options, "known": known, "wait": False}


def _read(pending: tuple[int, mx.array]) -> tuple[int, np.ndarray]:
    """(step, its token on the host as (batch,) int32): waits for that step only."""
    step, token = pending
    return step, np.array(token, np.int32)
