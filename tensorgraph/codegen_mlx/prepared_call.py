"""A repeated call of one program on MLX, prepared once: the lean per-call path.

Why. A decode step calls the same entry with the same options hundreds of times, and
the generic executor (executor.run_mlx) re-derives per call what only depends on the
program and the options: it checks the mode and device, binds the feeds through the
general typing rules (Python data, exact conversions), looks up about ten per-program
facts, gathers the device constants and walks the segment list. Measured in
benches/README.md ("Decode speed per family"), that Python is the whole gap to a
hand-written MLX loop on a GPU, where the step itself is ~0.4 ms.

What is prepared, per (program, mode, device, known ranges, wait): the device, the
host check plan, whether the states are donated, the device constants and bound
params gathered into one dict, the segments' `DispatchSteps`, the inputs' declared
signature (name, node id, shape, NumPy and MLX dtype) and the states' positions. The
per-call work is then:

1. match the feeds against the signature (exactly one value per input, an ndarray,
   NumPy scalar or mx.array of the declared dtype and shape, no params given):
   anything else, including every bad feed, goes the generic way, which converts what
   may be converted and raises the named RunError it always raised;
2. the host checks (the same `HostCheckPlan`, so the same RunError in the same order,
   before any state is handed over); a failing check of a stateless program goes the
   generic way too, which runs it eagerly to raise the first broken precondition in
   schedule order, as every executor does;
3. hand the states over (donated exactly when the generic path donates them),
   dispatch the segments, commit the states' new values.

Invariant: for every call it takes, the prepared path returns the outputs, commits the
states and raises the errors of `run_mlx` with the same arguments (a property test
compares the two on random programs and feeds: tests/codegen_mlx/test_prepared_call.py);
every call it does not take is `run_mlx`'s. Runs with `stats`, a mode other than "auto",
params given, and adopted (symbolic) programs are not prepared: they are rare per
call, or their caches change under them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

import mlx.core as mx
import numpy as np

from tensorgraph.codegen_mlx.arrays import MX_DTYPES, to_mx, to_numpy
from tensorgraph.codegen_mlx.executor import (
    _boundary_values,
    _cache,
    _device,
    _feed_nodes,
    _guarded,
    _host_plan,
    _segmented,
    raise_state_lost,
)
from tensorgraph.codegen_mlx.segments import dispatch, dispatch_steps
from tensorgraph.errors import RunError, TensorGraphError

_OPTIONS = frozenset(("mode", "device", "known", "wait"))
_UNPREPARED = "unprepared"  # kept for options the prepared path cannot take


class PreparedCall:
    """One program's MLX call with fixed options, prepared once (module docstring).
    Calling it gives the outputs (all of the graph's, as `run_mlx` returns them), or
    None when the call is not one it takes (the caller then runs `run_mlx`)."""

    def __init__(
        self, program: object, device: str | None, known: Mapping | None, wait: bool
    ) -> None:
        graph = program.graph
        self.target = _device(device)
        self.wait = wait
        self.checks = _host_plan(program, known)
        self.donate = not _guarded(program)  # run_mlx's rule (codegen_mlx/state.py)
        self.inputs = tuple(
            (name, node.id, node.shape, node.dtype.to_numpy(), MX_DTYPES.get(node.dtype.name))
            for name, node in _feed_nodes(program).inputs.items()
        )
        updated = dict(graph.state_positions)  # state name -> its output position
        self.states = tuple((n.name, n.id, n.name in updated) for n in graph.states)
        self.updates = tuple((k, name) for name, k in updated.items())
        with mx.stream(self.target):
            self.resident = _boundary_values(program, {}, self.target)
            segments, traces = _segmented(program, self.target)
        last_use = program.plan.liveness.last_use
        outputs = set(graph.outputs)
        fed = [i for _, i, *_ in self.inputs] + [i for _, i, _ in self.states]
        boundary = [*self.resident, *fed]
        unused = [i for i in boundary if last_use[i] == -1 and i not in outputs]
        self.steps = dispatch_steps(graph, segments, traces, unused)

    def feeds(self, inputs: Mapping[str, object]) -> tuple[dict[int, object], bool] | None:
        """(node id -> feed, whether any feed is an mx.array) when every input is an
        mx.array, ndarray or NumPy scalar of exactly its declared dtype and shape (what
        `bind_feeds` takes as is), else None."""
        if len(inputs) != len(self.inputs):
            return None
        feeds, native = {}, False
        for name, node_id, shape, np_dtype, mx_dtype in self.inputs:
            value = inputs.get(name)
            kind = type(value)
            if kind is mx.array:
                if value.dtype != mx_dtype or tuple(value.shape) != shape:
                    return None
                native = True
            elif kind is np.ndarray or isinstance(value, np.generic):  # a scalar: 0-d
                if value.dtype != np_dtype or value.shape != shape:
                    return None
            else:
                return None  # Python data, another library's array: bind_feeds' rules
            feeds[node_id] = value
        return feeds, native

    def __call__(self, inputs: Mapping[str, object], state: object | None) -> list | None:
        """The outputs of one call on `state` (checked by the caller as for `run_mlx`),
        or None for a call the generic path takes (module docstring)."""
        matched = self.feeds(inputs)
        if matched is None or (self.states and state is None):
            return None  # a State-less run of a program with states reads zeros: generic
        feeds, native = matched
        if self.checks:
            try:
                self.checks(feeds, state)
            except RunError:
                if not self.states:
                    return None  # run_mlx raises the schedule's first broken guard
                raise
        handed = []
        if self.states:
            values = state.values
            for name, node_id, updated in self.states:
                if self.donate and updated:
                    feeds[node_id] = values.pop(name)
                    handed.append(name)
                else:
                    feeds[node_id] = values[name]
        try:
            with mx.stream(self.target):
                slots = dict(self.resident)
                for node_id in list(feeds):  # moved: a donated state keeps one reference
                    feed = feeds.pop(node_id)
                    slots[node_id] = feed if type(feed) is mx.array else to_mx(feed)
                results = dispatch(self.steps, slots, wait=self.wait)
                updates = self.updates
                if native:
                    outputs = results
                else:
                    kept = {k for k, _ in updates}
                    outputs = [r if k in kept else to_numpy(r) for k, r in enumerate(results)]
                if state is not None:  # committed last: nothing after this can fail
                    for k, name in updates:
                        state.values[name] = results[k]
                return outputs
        except BaseException as err:
            if not handed:
                raise
            raise_state_lost(state, handed, err)


def prepared_call(program: object, options: Mapping[str, object]) -> PreparedCall | None:
    """The `PreparedCall` of `program` under the MLX run `options` (made on first use,
    kept with the program's other MLX facts), or None where the generic path runs:
    `stats`, a mode other than "auto", an adopted program, or options the generic path
    would refuse (it then raises their error)."""
    if not _OPTIONS.issuperset(options):
        return None  # `stats` (or an unknown option, which run_mlx names)
    mode = options.get("mode", "auto")
    known = options.get("known")
    try:
        key = (
            "prepared",
            mode,
            options.get("device"),
            options.get("wait", True),
            tuple(sorted(known.items())) if known else (),
        )
        hash(key)
    except (TypeError, AttributeError):
        return None  # a malformed option: run_mlx names it
    cache = _cache(program)
    prepared = cache.get(key)
    if prepared is None:
        prepared = _UNPREPARED
        if mode == "auto" and "owner" not in cache:
            # a bad device or known range: run_mlx raises it, in its order
            with contextlib.suppress(TensorGraphError):
                prepared = PreparedCall(program, options.get("device"), known, key[3])
        cache[key] = prepared
    return None if prepared is _UNPREPARED else prepared


def run_prepared(
    program: object,
    inputs: Mapping[str, object],
    params: Mapping[str, object] | None,
    state: object | None,
    options: Mapping[str, object],
) -> list | None:
    """`run_mlx(program, inputs, params, state=state, **options)`'s outputs by the
    prepared path, or None where that path does not take the call (module docstring)."""
    if params:
        return None
    prepared = prepared_call(program, options)
    return None if prepared is None else prepared(inputs, state)
