"""What an MLX run derives from a program once and keeps: the per-program cache, and the
boundary values (inputs, params, constants, states) each run starts from.

Invariants: the artefacts (weights and constants converted to mx.array, host-check
plans, feed nodes, compiled traces and segments, the last run's stats) are keyed by the
frozen Program itself, by identity, and live exactly as long as it: never inside it, so
a Program stays a value. Each is computed on first use and then only read: bound params
and constants are converted once per program and device (once per content for the
entries of a MultiProgram, and the owner's copies serve an `adopt`ed concrete program
of a symbolic one), so a call costs one dict copy, not a conversion of every weight.
`_boundary_values` consumes the feeds it is given: a state's array keeps no other
reference, so MLX may donate its buffer to the state's in-place update.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping

import mlx.core as mx

from tensorgraph.codegen_mlx.arrays import to_mx
from tensorgraph.codegen_mlx.guards import device_guarded
from tensorgraph.codegen_mlx.stats import RunStats
from tensorgraph.errors import RunError
from tensorgraph.planner.sharing import shared_of
from tensorgraph.runtime.feeds import feed_nodes
from tensorgraph.runtime.kernels import constant_value
from tensorgraph.runtime.per_object import PerObject
from tensorgraph.runtime.state import HostCheckPlan, host_checks

# Per-program artefacts (weights converted to mx.array, compiled traces and segments,
# the last run's stats), keyed by the frozen Program itself: they live as long as the
# program and never inside it.
_CACHES = PerObject()  # by identity: a decode step looks it up ~10 times per call


def _cache(program: object) -> dict[str, object]:
    return _CACHES.of(program)


def last_run(program: object) -> RunStats | None:
    """The `RunStats` of `program`'s latest MLX run made with `stats=True`, or None."""
    return _cache(program).get("last-run")


STALE = ("constant-values-", "prepared")  # cache keys `adopt` drops


def adopt(
    program: object,
    owner: object,
    *,
    segments: Callable | None = None,
    compiled: Callable | None = None,
    cache_bound: int | None = None,
) -> None:
    """Run `program` (a concrete program of symbolic program `owner`: the same node ids
    and bound values at one length) with `owner`'s device copies of the bound params and
    constants, so that every length shares one copy; its segments and traces come from
    `segments(program, device)` -> (segments, traces) and its whole-program trace from
    `compiled(program, device)` -> (feed ids, trace) (codegen_mlx/symbolic.py), and
    MLX's buffer cache is limited to `cache_bound` bytes while it runs (None: as MLX
    has it)."""
    cache = _cache(program)
    cache["owner"] = weakref.ref(owner)  # weak: the owner's caches hold `program`
    cache["segment-source"], cache["compiled-source"] = segments, compiled
    cache["cache-bound"] = cache_bound
    for key in [k for k in cache if str(k[0] if isinstance(k, tuple) else k).startswith(STALE)]:
        # gathered from this program's own copies: now the owner's serve (a prepared
        # call, prepared_call.py, holds them too; adopted programs are not prepared)
        del cache[key]


def _resident(program: object, device: mx.Device) -> dict[int, mx.array]:
    """This program's converted bound params and constants on `device` (node id ->
    array), filled on first use; its owner's for an adopted program (`adopt`)."""
    owner = _cache(program).get("owner")
    if owner is not None and owner() is not None:
        program = owner()
    return _cache(program).setdefault(f"values-{device}", {})


def _guarded(program: object) -> tuple:
    """`device_guarded(program.graph)`, computed once per program (it scans every node):
    the guards left to the device once `_check_on_host` passed."""
    cache = _cache(program)
    if "guarded" not in cache:
        cache["guarded"] = device_guarded(program.graph)
    return cache["guarded"]


def _host_checks(program: object) -> tuple:
    """`host_checks(program.graph)`, computed once per program."""
    cache = _cache(program)
    if "host-checks" not in cache:
        cache["host-checks"] = host_checks(program.graph)
    return cache["host-checks"]


def _host_plan(
    program: object, known: Mapping[str, tuple[int, int]] | None = None
) -> HostCheckPlan:
    """`HostCheckPlan(_host_checks(program), known)`: the host checks planned once per
    program and `known` ranges (input name -> (low, high), see `run_mlx`); RunError
    naming a `known` entry that is no input of the graph or no pair of ints."""
    cache = _cache(program)
    key = ("host-plan", tuple(sorted(known.items())) if known else ())
    if key not in cache:
        ids = {}
        inputs = _feed_nodes(program).inputs
        for name, bounds in (known or {}).items():
            if name not in inputs:
                raise RunError(f"known range for {name!r}: the graph has no such input")
            if len(bounds) != 2 or not all(isinstance(b, int) for b in bounds):
                raise RunError(f"known range for {name!r}: expected (low, high) ints, {bounds!r}")
            ids[inputs[name].id] = bounds
        cache[key] = HostCheckPlan(_host_checks(program), ids)
    return cache[key]


def _feed_nodes(program: object) -> object:
    """`feed_nodes(program.graph)`, computed once per program."""
    cache = _cache(program)
    if "feed-nodes" not in cache:
        cache["feed-nodes"] = feed_nodes(program.graph)
    return cache["feed-nodes"]


def _in_range(program: object) -> frozenset[int]:
    """Ids of the nodes whose indices are a graph input or a state that `_check_on_host`
    proves in range before every run: their traces need no index replacement pass
    (gathers.IN_RANGE). Indices computed from inputs are checked on the host too, but
    keep the device-side pass: MLX might round or wrap a computed value differently
    from NumPy, and an unchecked out-of-range index reads out of bounds."""
    cache = _cache(program)
    if "in-range" not in cache:
        cache["in-range"] = frozenset(
            check.node.id
            for check in _host_checks(program)
            if len(check.cone) == 1 and check.cone[0].op in ("input", "state")
        )
    return cache["in-range"]


def _boundary_nodes(program: object) -> tuple[tuple, dict[int, object]]:
    """(constant nodes, {bound param id: its bound value}), computed once per program
    so that a run touches only its boundary nodes, not the whole graph."""
    cache = _cache(program)
    if "boundary" not in cache:
        graph = program.graph
        constants = tuple(n for n in graph.nodes if n.op == "constant")
        bound = {
            n.id: graph.param_values[n.name]
            for n in graph.nodes
            if n.op == "param" and n.name in graph.param_values
        }
        cache["boundary"] = (constants, bound)
    return cache["boundary"]


def _boundary_values(
    program: object, feeds: dict[int, object], device: mx.Device
) -> dict[int, mx.array]:
    """MLX arrays for inputs, params and constants. Bound params (unless the caller
    passed others: `feeds` holds a param only then, `bind_feeds(bound=False)`) and
    constants are converted once per program and device and reused: they never change
    between runs, and converting 100 MB of weights per call would cost time and double
    peak memory; gathered once, they cost one dict copy per call. mx.array feeds are
    used as they are."""
    cache = _resident(program, device)
    constants, bound = _boundary_nodes(program)
    kept = _cache(program)
    shared = shared_of(program)
    key = f"constant-values-{device}"  # the same arrays as `cache` holds, gathered once
    if key not in kept:
        for node in constants:
            if node.id not in cache:
                cache[node.id] = to_mx(constant_value(node))
        for node_id, value in bound.items():
            if node_id not in cache:
                cache[node_id] = _converted(shared, value, device)
        kept[key] = {i: cache[i] for i in (*(n.id for n in constants), *bound)}
    values = dict(kept[key])
    for node_id in list(feeds):
        # consumed: a state's array must have no other reference left, so that MLX can
        # donate its buffer to the state's in-place update
        feed = feeds.pop(node_id)
        if feed is bound.get(node_id):
            if node_id not in cache:
                cache[node_id] = _converted(shared, feed, device)
            values[node_id] = cache[node_id]
        else:
            values[node_id] = feed if isinstance(feed, mx.array) else to_mx(feed)
    return values


def _converted(shared: object | None, value: object, device: mx.Device) -> mx.array:
    """`value` as an mx.array: converted once for all entries of a MultiProgram (its
    weights are one array per distinct content), else once for this program."""
    if shared is None:
        return to_mx(value)
    key = (str(device), id(value))
    if key not in shared.converted:
        shared.converted[key] = (value, to_mx(value))
    return shared.converted[key][1]
