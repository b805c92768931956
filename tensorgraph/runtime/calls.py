"""One call of a compiled program on a backend: feeds in, outputs out, states committed.

`call` is what `Program.run` and `MultiProgram.run` do. For a graph without states it
is the backend's executor. For a graph with states (runtime/state.py) it also:

1. checks the `State` (made for this backend, holding every state the graph declares);
2. proves on the host every position and index computed from inputs alone
   (`state.check_indices`), so a position past the cache's length is a RunError naming
   both numbers before anything is written to the state;
3. runs the backend with the states as feeds, then commits each state's new value:
   numpy replaces its arrays after success; the arena executor updates the region in
   place (restored from a backup on failure); MLX hands its arrays to the call (so the
   cache's buffer can be donated to its in-place update) and stores the new ones;
4. returns only the outputs the caller asked for (`graph.returned`).
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping

from tensorgraph.errors import RunError
from tensorgraph.runtime.feeds import bind_feeds, feed_nodes
from tensorgraph.runtime.state import State, check_indices, check_state, check_values, host_checks

# Per-program facts computed once (states, feed nodes, host checks: each a scan of the
# graph), keyed by the program: a decode step should not rescan its graph per call.
_FACTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _facts(program: object) -> tuple:
    """(states, feed nodes, host checks, the States already checked for this program:
    a State's specs and backend never change, so `check_state` passes once for good)."""
    facts = _FACTS.get(program)
    if facts is None:
        graph = program.graph
        facts = (tuple(graph.states), feed_nodes(graph), host_checks(graph), weakref.WeakSet())
        _FACTS[program] = facts
    return facts


def _returned(graph: object, outputs: list) -> list:
    updates = set(graph.state_positions.values())
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
    states, nodes, checks, checked = _facts(program)
    if not states:
        if state is not None:
            raise RunError(f"graph {graph.name!r} has no states, but a state was given")
        return _run(program, inputs, params, backend, None, options)
    if state is None:
        state = program.state(backend)
    if state not in checked:
        check_state(state, backend, graph, states)
        checked.add(state)
    check_values(state, states)  # a value replaced since: every call
    if checks and backend != "mlx":  # the MLX executor checks them itself (its guards)
        check_indices(graph, checks, bind_feeds(graph, inputs, params, nodes=nodes))
    return _returned(graph, _run(program, inputs, params, backend, state, options))


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

    return run_mlx(program, inputs, params, state=state, **options)
