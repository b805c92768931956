"""One call of a compiled program on a backend: feeds in, outputs out, states committed.

The driver's dispatch by backend (the oracles in runtime/ and the MLX backend never
import each other). `call` is what `Program.run` and `MultiProgram.run` do. For a
graph without states it is the backend's executor. For a graph with states
(runtime/state.py) it also:

1. checks the `State` (made for this backend, holding every state the graph declares,
   none of them lost);
2. proves on the host every position and index computed from inputs, constants and
   states alone (`state.check_indices`), so a position past the cache's length is a
   RunError naming both numbers before anything is written to the state (the MLX
   executor runs the same check itself, with its own feeds);
3. runs the backend with the states as feeds, then commits each state's new value:
   numpy replaces its arrays after success; the arena executor updates the region in
   place (restored from a backup on failure); MLX commits its new arrays after success
   (codegen_mlx/state.py says when it donates the old ones);
4. returns only the outputs the caller asked for (`graph.returned`).

Invariant: a call that raises leaves every state as it was (the one exception, MLX
failing inside a call it was handed a state's buffer for, marks that state lost: a
RunError until it is reset, never a silently changed value).
`new_state` makes the State of each backend: the NumPy oracles' own, or the MLX
backend's subclass.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping

import numpy as np

from tensorgraph.compiler import BACKENDS
from tensorgraph.errors import RunError
from tensorgraph.runtime.feeds import bind_feeds, feed_nodes
from tensorgraph.runtime.per_object import PerObject
from tensorgraph.runtime.state import HostCheckPlan, State, check_state, check_values, host_checks

# Per-program facts computed once (states, feed nodes, host checks: each a scan of the
# graph), keyed by the program: a decode step should not rescan its graph per call.
_FACTS = PerObject()


def new_state(
    specs: Mapping[str, tuple[tuple[int, ...], np.dtype]],
    layout: Mapping[str, int],
    size: int,
    backend: str,
    initial: Mapping[str, np.ndarray] | None = None,
) -> State:
    """A fresh State of states `specs` (name -> (shape, dtype)) at `layout` in a region
    of `size` bytes, for `backend` (RunError naming it when it is not one of BACKENDS),
    each state at its `initial` value (name -> host array) or zeros."""
    if backend not in BACKENDS:
        raise RunError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend == "mlx":
        from tensorgraph.codegen_mlx.state import MLXState

        return MLXState(specs, layout, size, backend, initial)
    return State(specs, layout, size, backend, initial)


def _facts(program: object) -> tuple:
    """(states, feed nodes, host checks planned (`HostCheckPlan`), the States already
    checked for this program: a State's specs and backend never change, so
    `check_state` passes once for good, and the output positions of state updates)."""
    kept = _FACTS.of(program)
    facts = kept.get("facts")
    if facts is None:
        graph = program.graph
        checks = HostCheckPlan(host_checks(graph))
        updates = frozenset(graph.state_positions.values())
        facts = (tuple(graph.states), feed_nodes(graph), checks, weakref.WeakSet(), updates)
        kept["facts"] = facts
    return facts


def _returned(updates: frozenset[int], outputs: list) -> list:
    """`outputs` less those at the positions `updates` (committed to the state)."""
    return [value for k, value in enumerate(outputs) if k not in updates]


def call(
    program: object,
    inputs: Mapping[str, object],
    params: Mapping[str, object] | None,
    backend: str,
    state: State | None,
    options: Mapping[str, object],
) -> list:
    """The outputs `graph.returned` of one run of `program` (see the module docstring);
    `state` None runs on the program's default state for `backend`."""
    graph = program.graph
    states, nodes, checks, checked, updates = _facts(program)
    if not states:
        if state is not None:
            raise RunError(f"graph {graph.name!r} has no states, but a state was given")
        return _run(program, inputs, params, backend, None, options)
    if state is None:
        state = program.state(backend)
    if state not in checked:
        plan = program.plan
        check_state(state, backend, graph, states, (plan.state_layout, plan.state_size))
        checked.add(state)
    state.check_usable()
    check_values(state, states)  # a value replaced since: every call
    if checks and backend != "mlx":  # the MLX executor checks them itself (its guards)
        feeds = bind_feeds(graph, inputs, params, nodes=nodes)
        checks(feeds, state)  # check_indices, planned once per program
    return _returned(updates, _run(program, inputs, params, backend, state, options))


def _run(
    program: object,
    inputs: Mapping[str, object],
    params: Mapping[str, object] | None,
    backend: str,
    state: State | None,
    options: Mapping[str, object],
) -> list:
    graph = program.graph
    if backend == "numpy":
        from tensorgraph.runtime.reference import run_reference

        values = None if state is None else state.values
        outputs = run_reference(graph, inputs, params, values, **options)
        if state is not None:
            for name, position in graph.state_positions.items():
                state.values[name] = outputs[position]
        return outputs
    if backend == "arena":
        from tensorgraph.runtime.arena import run_arena

        if state is None:
            return run_arena(graph, program.plan, inputs, params, **options)
        backup = state.region.copy()
        try:
            return run_arena(graph, program.plan, inputs, params, state=state.region, **options)
        except BaseException:
            state.region[...] = backup
            raise
    from tensorgraph.codegen_mlx import run_mlx  # "mlx": Program.run checked the name
    from tensorgraph.codegen_mlx.prepared_call import run_prepared

    # a repeated call (a decode step) takes the prepared path: the same outputs, states
    # and errors as run_mlx, without re-deriving per call what depends only on the
    # program and the options; any call it does not take is run_mlx's
    outputs = run_prepared(program, inputs, params, state, options)
    if outputs is not None:
        return outputs
    return run_mlx(program, inputs, params, state=state, **options)
