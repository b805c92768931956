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
- Decoding rules (generate_seq2seq's DecodingRules, or any `rule(step)` of the same
  form, `Rule`) stay exact: a step whose token is forced is known on the host without
  reading anything (the first allowed id, 0 when the rule allows none, as np.argmax
  of an all -inf row gives); on any other step the banned ids are set to -inf on the
  device before the argmax (`mx.where`, not an additive mask: a banned NaN must become
  -inf, as the host's assignment makes it, and an allowed NaN stay NaN), which picks
  what np.argmax of the host-processed float64 row picks (ordering is kept by the
  exact widening of float16/bfloat16 to float64).
- No step runs past the last token: the loop makes exactly the tokens asked for (there
  is no early stop to find one step late), so the state after it is the synchronous
  loop's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import mlx.core as mx
import numpy as np

from tensorgraph.calls import call
from tensorgraph.codegen_mlx.arrays import MX_DTYPES

# One decode step's rule: (keep, forced). `keep` (vocab,) bool: the ids that may be
# picked (None: every id); `forced`: the logits are replaced by zeros first, so the pick
# is the first kept id whatever the logits (0 when none is kept).
Rule = tuple[np.ndarray | None, bool]


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
    rule: Callable[[int], Rule] | None = None,
) -> None:
    """Greedy decode steps at `positions` on MLX, pipelined (module docstring): step k
    runs entry `decode_entry(position)` of `program` (a MultiProgram; `roles(entry)`:
    its (input name, role, NumPy dtype) triples) on `state`, fed the previous step's
    token (the first: `first`, (batch,) int32 on the host) and its position, and
    `emit(k + 1, token)` hands its token ((batch,) int32) to the caller, in order.
    `options`: the MLX backend's run options, already checked by the caller. `rule(k)`
    (default: none) constrains token k's pick (`Rule`, see `pick_greedy`)."""
    batch = first.shape[0]
    token = mx.array(first.astype(np.int32))
    pending: tuple[int, mx.array] | None = None
    plans: dict[str, tuple] = {}  # entry -> (its Program, feed plan, run options)
    masks: dict[int, tuple] = {}  # id(keep) -> (keep, its device copy)
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
        token = pick_greedy(
            logits.reshape(batch, -1), (None, False) if rule is None else rule(step), masks
        )
        mx.async_eval(token)
        if pending is not None:
            emit(*_read(pending))
        pending = (step, token)
    if pending is not None:
        emit(*_read(pending))


def pick_greedy(rows: mx.array, rule: Rule, masks: dict[int, tuple] | None = None) -> mx.array:
    """The greedy pick of each row of `rows` (batch, vocab) under `rule` ((batch,)
    uint32, lazy): what `Sampler().sample` picks from the host-processed float64 rows
    (module docstring). A forced rule's pick is made on the host (nothing read from the
    device); `masks` caches each keep array's device copy across steps (by identity:
    a rule that returns the same array each step uploads it once)."""
    keep, forced = rule
    if forced:
        allowed = np.flatnonzero(keep)
        return mx.full((rows.shape[0],), int(allowed[0]) if allowed.size else 0, mx.uint32)
    if keep is not None:
        masks = {} if masks is None else masks
        if id(keep) not in masks:  # the entry holds `keep`, so its id is not reused
            masks[id(keep)] = (keep, mx.array(keep))
        rows = mx.where(masks[id(keep)][1], rows, float("-inf"))  # weak scalar: rows' dtype
    return mx.argmax(rows, axis=-1)


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
