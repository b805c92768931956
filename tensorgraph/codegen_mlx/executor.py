"""Run a compiled Program on MLX, following its memory plan; arrays in, arrays out.

Arrays: feeds may be NumPy arrays (or Python data) or mx.arrays, in any mix; mx.arrays
are checked as strictly as NumPy ones (exact shape and dtype, RunError naming the
input) and used as they are, never copied. When any feed is an mx.array the outputs are
mx.arrays, evaluated and left on the device; otherwise they are fresh NumPy arrays.

Modes (all compute the same values; each keeps weights and constants converted once
per program and device):

- `auto` (the default): segmented execution (segments.py). The schedule is cut where
  the plan's live bytes allow, each segment is traced once with mx.compile, and one
  segment is in flight while Python builds the next. A segment's worst-case bytes stay
  within `segment_budget`: the arena plus SLACK (5%) of the plan's whole footprint
  (arena + constant segment + inputs/outputs). So the run's MLX peak is at most 1.05x
  what the plan accounts for (plus MLX scratch no plan holds), and a model whose
  weights dwarf its activations gets few, long segments: close to mx.compile's speed
  where dispatch dominates. With SLACK = 0 the peak is the arena itself.
- `eager`: walk the schedule, evaluate each step, and drop every value right after its
  last use. Operands that die at a step are dropped *before* the op runs, so the op
  holds the only reference and MLX can donate the buffer to an elementwise output: the
  plan's in-place reuse. Exactly the plan's live set, but a Python step and a sync per op.
- `compiled`: the whole schedule as one mx.compile'd function. Fast, but MLX allocates
  every output at dispatch, ahead of the kernels, so it may hold most intermediates.

Measured side by side in benches/FIGURES-E.md (`benches/bench_mlx_gpu.py`).

Symbolic programs run as their concrete program at the call's length, `adopt`ed: the
weights, segmentation and shapeless traces of the symbolic program serve every length,
and MLX's cache is bounded during the call (codegen_mlx/symbolic.py).

Per-run accounting: `run_mlx(..., stats=True)` records a `RunStats` (stats.py: time,
MLX peak vs arena + constant segment + inputs/outputs), read back with
`last_run(program)`; without `stats` nothing is measured or reset.

The per-program cache (converted weights and constants, traces, segments, host-check
plans) and each run's boundary values come from program_cache.py; the `compiled`
mode's whole-program trace is compiled_mode.py's.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping, Sequence
from typing import NoReturn

import mlx.core as mx
import numpy as np

from tensorgraph.codegen_mlx.arrays import native_dtype, to_mx, to_numpy
from tensorgraph.codegen_mlx.compiled_mode import run_compiled, trace_program
from tensorgraph.codegen_mlx.guards import (
    check,
    device_guarded,
    guarded_nodes,
)
from tensorgraph.codegen_mlx.lowering import lowering_of
from tensorgraph.codegen_mlx.program_cache import (
    _CACHES,
    STALE,
    _boundary_nodes,
    _boundary_values,
    _cache,
    _converted,
    _feed_nodes,
    _guarded,
    _host_checks,
    _host_plan,
    _in_range,
    _resident,
    adopt,
    last_run,
)
from tensorgraph.codegen_mlx.segments import run_segments, segment_schedule, trace_segment
from tensorgraph.codegen_mlx.stats import RunStats, io_bytes
from tensorgraph.errors import RunError, TensorGraphError
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node
from tensorgraph.ir.ops import OPS
from tensorgraph.planner.sharing import shared_of
from tensorgraph.runtime.feeds import bind_feeds

# The module's own names, and those it defined before the per-program cache and the
# compiled mode's trace moved to program_cache.py and compiled_mode.py (re-exported:
# symbolic.py, prepared_call.py, tests and benches import them from here).
__all__ = [
    "MODES",
    "SLACK",
    "STALE",
    "_CACHES",
    "_boundary_nodes",
    "_boundary_values",
    "_cache",
    "_converted",
    "_feed_nodes",
    "_guarded",
    "_host_checks",
    "_host_plan",
    "_in_range",
    "_resident",
    "adopt",
    "device_guarded",
    "last_run",
    "raise_state_lost",
    "run_compiled",
    "run_eager",
    "run_mlx",
    "segment_budget",
    "trace_program",
]

MODES = ("auto", "eager", "compiled")
# A segment may allocate this fraction of the plan's footprint beyond the arena: half
# the 10% memory tolerance, the other half left to MLX's unplanned scratch.
SLACK = 0.05


def _device(device: str | None) -> mx.Device:
    if device is None:
        return mx.default_device()
    if device not in ("cpu", "gpu"):
        raise RunError(f"unknown MLX device {device!r}; choose 'cpu' or 'gpu'")
    if device == "gpu" and not mx.is_available(mx.gpu):
        raise RunError("device 'gpu': this MLX has no GPU backend here; use device='cpu'")
    return mx.cpu if device == "cpu" else mx.gpu


def _check_on_host(
    program: object,
    feeds: dict[int, object],
    device: mx.Device,
    state: object | None,
    known: Mapping[str, tuple[int, int]] | None = None,
) -> None:
    """Check the indices and positions computable from the feeds and the small states
    of `state` on the host (guards.py, tier 3), but those the `known` ranges of inputs
    prove once and for all (`runtime.state.implied`). When one is out of range: a graph
    with states raises that RunError now, before anything touches the state; a stateless
    one runs eagerly with every guard, which raises the first broken precondition in
    schedule order, as the other executors and the oracle do (the host's check is in
    graph order)."""
    plan = _host_plan(program, known)
    if not plan:
        return
    try:
        plan(feeds, state)
    except RunError:
        graph = program.graph
        if graph.states:
            raise
        with mx.stream(device):
            values = _boundary_values(program, dict(feeds), device)
            run_eager(graph, program.plan.liveness.last_use, values, guarded_nodes(graph))
        raise


def run_eager(
    graph: Graph,
    last_use: Mapping[int, int],
    values: dict[int, mx.array],
    guarded: Sequence[Node] | None = None,
    in_range: frozenset[int] = frozenset(),
) -> list[mx.array]:
    """Evaluate step by step, dropping each value after `last_use` (see module doc).
    `values` (every boundary node's array) is consumed; `guarded` is
    `guarded_nodes(graph)`, when the caller keeps it; `in_range`: see
    `lowering.lowering_of`."""
    outputs = set(graph.outputs)
    guarded = {n.id for n in (guarded_nodes(graph) if guarded is None else guarded)}
    slots: dict[int, mx.array] = {}
    for step, node in enumerate(graph.nodes):
        if OPS[node.op].boundary:
            value = values.pop(node.id)
            if last_use[node.id] != -1 or node.id in outputs:
                slots[node.id] = value
            continue
        args = [slots[i] for i in node.inputs]
        if node.id in guarded:
            check(node, args)  # RunError where the NumPy kernels raise (see guards.py)
        for i in dict.fromkeys(node.inputs):
            if last_use[i] == step and i not in outputs:
                del slots[i]  # the op now holds the only reference: MLX may donate it
        result = lowering_of(node, in_range)(node, args)
        del args
        mx.eval(result)
        if last_use[node.id] != -1 or node.id in outputs:
            slots[node.id] = result
    return [slots[o] for o in graph.outputs]


def segment_budget(program: object) -> int:
    """The worst-case bytes a segment may allocate (segments.py): the plan's arena plus
    SLACK times the plan's whole footprint (arena + constant segment + inputs/outputs).
    For an entry of a MultiProgram the arena is the shared one (the largest entry's):
    the program holds that memory for its largest entry anyway, and a small entry (a
    decode step) then runs in few segments instead of one per few ops."""
    plan = program.plan
    shared = shared_of(program)
    arena = plan.arena_size if shared is None else shared.arena_size
    return arena + int(SLACK * (arena + plan.constant_size + io_bytes(program.graph)))


def _segmented(program: object, device: mx.Device) -> tuple[tuple, tuple]:
    """The program's segments (`segment_budget`) and their traces, cached per device."""
    cache = _cache(program)
    key = f"segments-{device}"
    if key not in cache and cache.get("segment-source") is not None:
        cache[key] = cache["segment-source"](program, device)
    if key not in cache:
        plan = program.plan
        budget = segment_budget(program)
        segments = segment_schedule(program.graph, plan.liveness, plan.aliasing, budget)
        in_range = _in_range(program)
        traces = tuple(trace_segment(program.graph, s, in_range) for s in segments)
        cache[key] = (segments, traces)
    return cache[key]


def _execute(
    program: object, mode: str, values: dict[int, mx.array], device: mx.Device, wait: bool = True
):
    """(outputs, evaluations launched) of one run in `mode`; `values` is consumed.
    `wait` False: the outputs of mode "auto" may still be computing (`run_segments`)."""
    graph = program.graph
    if mode == "eager":
        last_use = program.plan.liveness.last_use
        results = run_eager(graph, last_use, values, _guarded(program), _in_range(program))
        return results, sum(not OPS[n.op].boundary for n in graph.nodes)
    if mode == "compiled":
        return run_compiled(program, values, device), 1
    segments, traces = _segmented(program, device)
    last_use = program.plan.liveness.last_use
    results = run_segments(graph, segments, traces, values, last_use, wait=wait)
    return results, sum(t is not None for t in traces)


def run_mlx(
    program: object,
    inputs: Mapping[str, object],
    params: Mapping[str, object] | None = None,
    *,
    mode: str = "auto",
    device: str | None = None,
    stats: bool = False,
    state: object | None = None,
    known: Mapping[str, tuple[int, int]] | None = None,
    wait: bool = True,
) -> list:
    """The program's outputs computed with MLX, in the graph's output order: mx.arrays
    (evaluated, on the device) when any feed is an mx.array, else NumPy arrays.

    `state` (an `MLXState`, codegen_mlx/state.py) feeds the graph's states and receives
    their new values once the call has succeeded; the outputs at the state updates'
    positions stay mx.arrays. A call that raises leaves `state` as it was: the state's
    arrays are donated to the call (so MLX can update a cache in place) only when no
    check is left to the device, else they are kept until the call has succeeded.

    `mode` is one of MODES; `device` None uses MLX's default (Metal GPU on Apple
    silicon, CPU on Linux), or "cpu" / "gpu". `stats` records this run's `RunStats`
    for `last_run(program)`. RunError on bad feeds (naming the input or param, mx.array
    feeds included) or arguments, or where an op's precondition breaks (guards.py).

    Pipelining (what `generate`'s greedy decode loop uses; not `Program.run` options):
    `known` (input name -> (low, high)) is the caller's guarantee that every element of
    that input lies in [low, high), e.g. a token fed as the lazy mx.argmax of a logits
    row of width high: a host check that range implies is proven once instead of reading
    the input (which would wait for the device); every other check reads it as before.
    With `wait` False, mode "auto" and no guard left to the device, the outputs (mx.arrays
    fed mx.arrays) are returned while their last segment may still be computing, so the
    caller can queue the next call behind it. Such a call is committed to `state` at once;
    MLX failing later inside it (out of memory) surfaces when its arrays are read, not
    as this call's error (the trade-off of any pipelined loop, mlx-lm's included)."""
    if mode not in MODES:
        raise RunError(f"unknown MLX mode {mode!r}; choose one of {', '.join(MODES)}")
    graph = program.graph
    target = _device(device)
    cache = _cache(program)
    feeds = bind_feeds(graph, inputs, params, native_dtype, _feed_nodes(program), bound=False)
    # bound params are NumPy (Graph keeps them so): only the caller's arrays can be mx
    native = any(isinstance(v, mx.array) for v in inputs.values()) or any(
        isinstance(v, mx.array) for v in (params or {}).values()
    )
    _check_on_host(program, feeds, target, state, known)
    if "states" not in cache:
        cache["states"] = tuple(graph.states)
        cache["updates"] = {k: name for name, k in graph.state_positions.items()}
        cache["updated"] = frozenset(graph.state_positions)
    # donate only when nothing is left to check on the device (codegen_mlx/state.py)
    donate = not _guarded(program)
    handed = _hand_over(cache["states"], cache["updated"], state, feeds, donate)
    bound = cache.get("cache-bound")
    if bound is not None:  # restored below: the limit is MLX's, process-wide
        previous = mx.set_cache_limit(bound)
        mx.set_cache_limit(min(bound, previous))
    try:
        return _run(program, mode, target, feeds, native, stats, state, wait)
    except BaseException as err:
        if not handed:
            raise
        raise_state_lost(state, handed, err)
    finally:
        if bound is not None:
            mx.set_cache_limit(previous)


def raise_state_lost(state: object, handed: Sequence[str], err: BaseException) -> NoReturn:
    """Raise `err` of a call that failed after the states `handed` were handed over
    (donated: their old values may be gone), marking them lost on `state`; a
    TensorGraphError is re-raised as its own type naming the lost states."""
    state.lost = tuple(handed)
    if isinstance(err, TensorGraphError):
        raise type(err)(f"{err} (state {', '.join(handed)} lost: reset it)") from err
    raise err


def _hand_over(
    states: Sequence[Node],
    updated: Collection[str],
    state: object | None,
    feeds: dict[int, object],
    donate: bool,
) -> list[str]:
    """Feed every state node of `states` from `state` into `feeds` (node id -> array).
    With `donate`, the array of a state the call updates is moved (the call then holds
    the only reference, so MLX may donate it); otherwise, and for a state the call only
    reads, it stays in `state` too. The names moved. Without a `state`, states read
    zeros and their updates are dropped."""
    if state is None:
        for node in states:
            feeds[node.id] = to_mx(np.zeros(node.shape, node.dtype.to_numpy()))
        return []
    moved = []
    values = state.values
    for node in states:
        name = node.name
        if donate and name in updated:
            feeds[node.id] = values.pop(name)
            moved.append(name)
        else:
            feeds[node.id] = values[name]
    return moved


def _run(
    program: object,
    mode: str,
    target: mx.Device,
    feeds: dict[int, object],
    native: bool,
    stats: bool,
    state: object | None,
    wait: bool = True,
) -> list:
    graph = program.graph
    updates = _cache(program)["updates"]  # output position -> state name (run_mlx)
    with mx.stream(target):
        if stats:
            held = {id(v): v.nbytes for v in _resident(program, target).values()}
            held.update((id(v), v.nbytes) for v in feeds.values() if isinstance(v, mx.array))
            mx.synchronize()
            mx.reset_peak_memory()
            baseline = mx.get_active_memory()
            began = time.perf_counter()
        values = _boundary_values(program, feeds, target)
        results, evaluations = _execute(program, mode, values, target, wait or stats)
        outputs = [r if native or k in updates else to_numpy(r) for k, r in enumerate(results)]
        if stats:
            seconds = time.perf_counter() - began
            above = max(mx.get_peak_memory() - baseline, 0)
            _cache(program)["last-run"] = RunStats(
                mode=mode,
                device=str(target),
                evaluations=evaluations,
                seconds=seconds,
                peak=sum(held.values()) + above,
                resident=sum(held.values()),
                arena_size=program.plan.arena_size,
                constant_size=program.plan.constant_size,
                io_size=io_bytes(graph),
            )
        if state is not None:  # committed last: nothing after this can fail
            for k, name in updates.items():
                state.values[name] = results[k]
        return outputs
