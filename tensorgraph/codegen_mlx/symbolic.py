"""The MLX executor of symbolic programs: one program for every length in its dims'
ranges, run at the length each call brings.

A call at dims L runs the concrete program at L (the driver's `concrete_program`: the
graph specialised at L and `plan.at(...)`), adopted (`executor.adopt`) so that:

- weights: every length reads the symbolic program's one device copy of its bound
  params and constants (node ids and bound arrays are the same at every length), never
  a copy per length;
- segments (mode "auto"): the schedule is cut once for every length (`SymbolicTraces`:
  the greedy cut of segments.py, cutting where the segment's cost exceeds the budget at
  any of the sampled lengths `parametric_build.candidate_dims`: each dim's max, min and
  three geometric interior points; a cost is carried bytes plus allocations, affine or
  quadratic in the dims for the models we run, so the samples bound it closely, and
  benches/bench_symbolic_mlx.py measures the peak at random lengths). A segment whose
  nodes are all shapeless (shapeless.py) is traced once per device with
  `mx.compile(shapeless=True)` and replayed at every length; any other segment is
  traced per length and lives with that length's concrete program, of which the driver
  keeps the last MLX_CACHED_LENGTHS (the bounded cache of compiled shapes). A segment
  with a node guarded on the device at some length (guards.py; a guard's need can
  depend on the length) uses a per-length trace at that length;
- mode "compiled": the whole schedule as one trace, shapeless when every node is, else
  per length; mode "eager" evaluates op by op and compiles nothing;
- MLX's buffer cache: limited, while the call runs, to the arena at each dim's max
  less the inputs and outputs at the max (`cache_bound`). MLX's cache reuses a freed
  buffer only for a request of about its size and never splits or merges buffers
  (mlx#3350), so a loop over changing lengths keeps buffers of every length it met and
  grows without bound; the plan says the program never needs more than the arena at
  the max at once. The limit is MLX's process-wide one, set for the call and restored
  after (never raised above what the caller had), so what the caller frees after the
  call (its feeds, the previous call's outputs) goes to the cache under the caller's
  limit: the inputs and outputs are left out of the bound so that the cache after a
  loop of calls stays within the arena at the max (the issue's target). Its cost, the
  allocations the cache no longer serves, is measured in benches/README.md.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import mlx.core as mx
from attrs import define, field

from tensorgraph.codegen_mlx.executor import SLACK, _guarded, _in_range, adopt, trace_program
from tensorgraph.codegen_mlx.segments import (
    Segment,
    cut_steps,
    segments_of,
    step_costs,
    trace_segment,
)
from tensorgraph.codegen_mlx.shapeless import lowering, shapeless_nodes
from tensorgraph.codegen_mlx.stats import io_bytes
from tensorgraph.ir.ops import OPS
from tensorgraph.planner.parametric_build import candidate_dims

# symbolic Program -> its SymbolicTraces; weak: they live as long as the program
_TRACES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@define(eq=False)
class SymbolicTraces:
    """What the lengths of one symbolic program share on MLX: `bounds` (start, stop,
    cost at each dim's max) of its segments, `shapeless` whether each segment's nodes
    are all shapeless, `whole` whether every node is, `overrides` the shapeless
    lowerings (`shapeless.lowering`), `cache_bound` MLX's cache limit during a call
    (module docstring; None leaves MLX's as it is), and
    `traces` (device, segment index or "compiled") -> the shapeless trace."""

    bounds: tuple[tuple[int, int, int], ...]
    shapeless: tuple[bool, ...]
    whole: bool
    overrides: dict[int, Callable]
    cache_bound: int | None
    traces: dict = field(factory=dict)


def _budget(plan: object, graph: object) -> int:
    """`executor.segment_budget` of the concrete program (`plan`, `graph`)."""
    arena = plan.arena_size
    return arena + int(SLACK * (arena + plan.constant_size + io_bytes(graph)))


def symbolic_traces(program: object) -> SymbolicTraces:
    """The `SymbolicTraces` of symbolic `program`, made on first use (module docstring)."""
    if program in _TRACES:
        return _TRACES[program]
    plan = program.plan
    costs, io = [], 0
    for dims in candidate_dims(plan.dims):  # each dim's max first
        at, graph = plan.at(**dims), plan.graph_at(**dims)
        costs.append((*step_costs(graph, at.liveness, at.aliasing), _budget(at, graph)))
        io = max(io, io_bytes(graph))
    bounds = tuple(cut_steps(costs))
    symbolic = program.graph
    free = shapeless_nodes(symbolic)
    computed = {n.id for n in symbolic.nodes if not OPS[n.op].boundary}
    steps = plan.at(**plan.representative).liveness.steps
    shapeless = tuple(
        all(i in free for i in steps[start:stop] if i in computed) for start, stop, _ in bounds
    )
    overrides = {}
    for node in symbolic.nodes:
        override = lowering(node) if node.id in free else None
        if override is not None:
            overrides[node.id] = override
    traces = SymbolicTraces(
        bounds,
        shapeless,
        all(i in free for i in computed),
        overrides,
        max(int(plan.arena_size) - io, 0),
    )
    _TRACES[program] = traces
    return traces


def prepare(program: object, concrete: object) -> None:
    """Make `concrete` (symbolic `program`'s concrete program at one length) run on MLX
    as the module docstring says."""
    traces = symbolic_traces(program)
    adopt(
        concrete,
        program,
        segments=lambda p, device: _segments(traces, p, device),
        compiled=lambda p, device: _compiled(traces, p, device),
        cache_bound=traces.cache_bound,
    )


def _segments(traces: SymbolicTraces, concrete: object, device: mx.Device) -> tuple:
    """(segments, traces) of `concrete` on `device`: the shared cut, the shapeless
    segments' shared traces, per-length traces for the others."""
    segments: tuple[Segment, ...] = segments_of(
        concrete.graph, concrete.plan.liveness, traces.bounds
    )
    in_range = _in_range(concrete)
    out = []
    for k, segment in enumerate(segments):
        if traces.shapeless[k] and not segment.guarded:
            key = (str(device), k)
            if key not in traces.traces:
                traces.traces[key] = trace_segment(
                    concrete.graph, segment, in_range, shapeless=True, overrides=traces.overrides
                )
            out.append(traces.traces[key])
        else:
            out.append(trace_segment(concrete.graph, segment, in_range))
    return segments, tuple(out)


def _compiled(traces: SymbolicTraces, concrete: object, device: mx.Device) -> tuple:
    """(feed ids, trace) of the whole schedule of `concrete` on `device`: shared and
    shapeless when every node is shapeless and none is guarded at this length."""
    graph = concrete.graph
    feed_ids = tuple(n.id for n in graph.nodes if n.op in ("input", "param", "state"))
    guarded, in_range = _guarded(concrete), _in_range(concrete)
    if not traces.whole or guarded:
        return feed_ids, trace_program(graph, feed_ids, guarded, in_range)
    key = (str(device), "compiled")
    if key not in traces.traces:
        traces.traces[key] = trace_program(
            graph, feed_ids, (), in_range, shapeless=True, overrides=traces.overrides
        )
    return feed_ids, traces.traces[key]


def shared_traces(program: object) -> dict:
    """(device, segment index or "compiled") -> the shapeless traces symbolic `program`
    has made so far (for tests and benches: one per segment, whatever the lengths)."""
    return dict(symbolic_traces(program).traces)
