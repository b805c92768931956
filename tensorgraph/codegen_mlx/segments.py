"""Segmented execution, the MLX backend's default: the schedule cut into segments, each
traced once with mx.compile, evaluated in order, so MLX's memory follows the plan while
dispatch costs one compiled call per segment instead of Python work and a sync per op.

Why segments. MLX allocates an op's output when the op is dispatched, on the calling
thread, not when its kernel runs (CPU and GPU alike), and inside one evaluation the
dispatching thread runs ahead of the kernels. So evaluating a whole program at once
(mode "compiled", or a hand-written model) may hold nearly every intermediate at the
same time, in MLX's order rather than the plan's; evaluating op by op (mode "eager")
holds exactly the plan's live set but pays Python dispatch and a sync per op.

Cost model: the worst case of evaluating steps [start, stop) in one go is

    cost = carried(start) + sum of the bytes the segment's nodes allocate

where `carried(s)` is the size of the arena buffers live at step s but born earlier
(graph inputs and arena params count from step 0: they exist before any step), and a
node allocates its own size unless the plan's aliasing makes it a view (MLX reshapes,
axis-0 slices and same-dtype casts share their input's buffer), plus the temporaries
its lowering is known to make outside any plan (`SCRATCH`, scratch.py: conv2d's NHWC copies and
im2col matrix, a pool's padded copy) and any buffer the plan gives the step itself
(a fused op's declared workspace). In-place nodes count as allocations: MLX donates a
dying operand only when it can, so the cost does not under-estimate. Less what
mx.compile fuses: an elementwise node whose one reader is an elementwise op of its
shape in the same segment is interior to a fused kernel and allocates nothing, within
MLX's depth and kernel-input limits (fusion.py, which states the rules it mirrors).

Segmentation (`segment_schedule`): greedy over the schedule, each segment ending at
its longest prefix whose cost fits `budget` (a fused chain's last op lowers the cost,
so the cut looks a little past a prefix that does not fit: `cut_steps`), so every
segment's worst case fits the budget. With the plan's arena as the budget, MLX's peak stays at the
arena, plus what MLX allocates outside any plan (a kernel's scratch); a larger budget
buys fewer segments (the executor's choice: executor.segment_budget). A one-step
segment costs at most that step's live bytes (<= lower bound <= arena) unless the step
writes in place, and a segment always takes at least one step, so the cut progresses.
A segment boundary, where the executor waits, holds exactly the plan's live set.
On a GPU, MLX also keeps an op's inputs until its command buffer completes: the package
caps a buffer at a few ops (command_buffers.py) so that retention stays small.

Execution (`run_segments`): one segment in flight. The compiled call that builds
segment k+1's lazy graph (Python work) runs while the device computes segment k; k+1 is
dispatched (mx.async_eval) once k has finished, so at most one segment's allocations
are outstanding. Values leave the executor at their planned last use, before the
segment that reads them last is dispatched, so MLX frees each as soon as that
segment's kernels have read it. Guards (see guards.py) return their verdicts as extra
segment outputs, checked after the last segment in schedule order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import mlx.core as mx
from attrs import field, frozen

from tensorgraph.codegen_mlx.fusion import (
    FusionFacts,
    SegmentFusion,
    fusion_enabled,
    fusion_facts,
)
from tensorgraph.codegen_mlx.guards import device_guarded, raise_if_broken, verdict
from tensorgraph.codegen_mlx.lowering import lowering_of
from tensorgraph.codegen_mlx.scratch import SCRATCH
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node
from tensorgraph.ir.ops import OPS, workspace_bytes
from tensorgraph.planner.aliasing import Aliasing
from tensorgraph.planner.liveness import Liveness


@frozen
class Segment:
    """Steps [start, stop) of the schedule, evaluated together.

    `nodes`: the non-boundary node ids computed, in schedule order. `inputs`: the ids
    they read that are computed before `start` or are boundary nodes, in first-read
    order. `outputs`: ids computed here and read at or after `stop` (graph outputs
    included). `released`: the `inputs` whose last use lies in this segment (not graph
    outputs): the executor drops them before dispatching it. `guarded`: ids of `nodes`
    whose precondition is checked on the device. `cost`: the worst-case bytes of the
    segment (module docstring)."""

    start: int
    stop: int
    nodes: tuple[int, ...] = field(converter=tuple)
    inputs: tuple[int, ...] = field(converter=tuple)
    outputs: tuple[int, ...] = field(converter=tuple)
    released: tuple[int, ...] = field(converter=tuple)
    guarded: tuple[int, ...] = field(converter=tuple)
    cost: int


def allocation(graph: Graph, aliasing: Aliasing, node_id: int) -> int:
    """Bytes MLX may allocate to run node `node_id`: 0 for boundary nodes (their arrays
    exist before the run) and views, else the node's size plus what of its `SCRATCH`
    its declared workspace does not cover (the plan gives the workspace its own buffer,
    which `step_costs` counts)."""
    node = graph.node(node_id)
    alias = aliasing.of(node_id)
    if OPS[node.op].boundary or (alias is not None and alias.kind == "view"):
        return 0
    scratch = SCRATCH.get(node.op)
    if scratch is None:
        return node.nbytes
    return node.nbytes + max(0, scratch(graph, node) - workspace_bytes(node, graph))


def carried_bytes(graph: Graph, liveness: Liveness) -> list[int]:
    """`carried(s)` for every step s (module docstring), by a difference array over the
    buffers: O(buffers + steps)."""
    boundary = {n.id for n in graph.nodes if OPS[n.op].boundary}
    delta = [0] * (len(liveness.steps) + 1)
    for buffer in liveness.buffers:
        first = 0 if buffer.id in boundary else buffer.start + 1
        if first < buffer.end:
            delta[first] += buffer.size
            delta[buffer.end] -= buffer.size
    carried, total = [], 0
    for step in range(len(liveness.steps)):
        total += delta[step]
        carried.append(total)
    return carried


class StepSizes(list):
    """The bytes each step allocates (a list, as `cut_steps` always took), with the
    schedule's `fusion.FusionFacts` beside it (`fusion`; None: no fusion is modelled)
    so that the cut refunds what mx.compile fuses."""

    fusion: FusionFacts | None = None


def step_costs(graph: Graph, liveness: Liveness, aliasing: Aliasing) -> tuple[list, StepSizes]:
    """(`carried(s)`, the bytes step s allocates) for every step s of the planned
    schedule (module docstring): a node's `allocation` plus any buffer of no node (a
    fused op's declared workspace, live at its step only). The sizes carry the
    schedule's fusion facts (`StepSizes`) unless MLX's compiler is told not to fuse."""
    steps = liveness.steps
    nodes = {n.id for n in graph.nodes}
    extra = [0] * len(steps)
    for buffer in liveness.buffers:
        if buffer.id not in nodes:
            extra[buffer.start] += buffer.size
    sizes = StepSizes(allocation(graph, aliasing, i) + extra[k] for k, i in enumerate(steps))
    if fusion_enabled():
        guarded = frozenset(n.id for n in device_guarded(graph))
        sizes.fusion = fusion_facts(graph, steps, guarded)
    return carried_bytes(graph, liveness), sizes


# How many steps past its last fitting prefix a segment may look for a longer one that
# fits again (refunds lower the cost when a fused chain completes): bounds the cut's
# work at O(steps * LOOKAHEAD) while spanning any optimizer update's chain.
LOOKAHEAD = 64


def cut_steps(costs: Sequence[tuple[list, list, int]]) -> list[tuple[int, int, int]]:
    """(start, stop, cost under the first) of each segment of a greedy cut of the steps
    such that, under every (carried, sizes, budget) of `costs` (one schedule's
    `step_costs` at one or more lengths, each with its budget), each segment's cost is
    at most the budget, except one-step segments, which may exceed it.

    Sizes that carry fusion facts (`StepSizes`) are refunded what the segment fuses
    (fusion.py), so a segment's cost can fall as it grows (a chain's last op refunds the
    temporaries it fuses). Each segment therefore ends at its longest prefix that fits,
    looking past a prefix that does not while the nodes still waiting for their fusing
    reader could bring the cost back within the budget (at most LOOKAHEAD steps past the
    last fit). Without fusion facts the cost only grows, and this is the plain greedy
    cut before the first step that would exceed the budget."""
    count = len(costs[0][1])
    budgets = [budget for _, _, budget in costs]
    bounds, start = [], 0
    while start < count:
        states = [_opened(sizes, start) for _, sizes, _ in costs]
        running = [carried[start] for carried, _, _ in costs]
        best = None
        for step in range(start, count):
            running = [
                total + state.add(step) for total, state in zip(running, states, strict=True)
            ]
            if best is None or all(t <= b for t, b in zip(running, budgets, strict=True)):
                best = (step + 1, running[0])  # a lone step may exceed the budget
            elif step + 1 - best[0] > LOOKAHEAD or any(
                total - state.pending > budget
                for total, state, budget in zip(running, states, budgets, strict=True)
            ):
                break
        bounds.append((start, *best))
        start = best[0]
    return bounds


class _Unfused:
    """A segment's cost changes when nothing is refunded: each step's own bytes."""

    pending = 0

    def __init__(self, sizes: Sequence[int]) -> None:
        self.add = sizes.__getitem__


def _opened(sizes: Sequence[int], start: int) -> SegmentFusion | _Unfused:
    """The cost model of a segment opened at `start`: `add(step)` gives the cost change
    of the next step, `pending` the bytes a later step could still refund."""
    facts = getattr(sizes, "fusion", None)
    return _Unfused(sizes) if facts is None else SegmentFusion(facts, sizes, start)


def segment_schedule(
    graph: Graph, liveness: Liveness, aliasing: Aliasing, budget: int
) -> tuple[Segment, ...]:
    """The schedule of `graph` (planned: `liveness` and `aliasing` are the plan's) cut
    greedily into segments whose cost is at most `budget` bytes, except one-step
    segments, which may exceed it. The segments partition the steps in order; an empty
    schedule gives no segment. O(nodes + edges + buffers)."""
    carried, sizes = step_costs(graph, liveness, aliasing)
    return segments_of(graph, liveness, cut_steps([(carried, sizes, budget)]))


def segments_of(
    graph: Graph, liveness: Liveness, bounds: Sequence[tuple[int, int, int]]
) -> tuple[Segment, ...]:
    """The `Segment`s of (start, stop, cost) `bounds` over `graph`'s planned schedule.
    Their nodes, inputs, outputs and releases depend only on the schedule and the
    lifetimes, so one list serves every length of a symbolic program."""
    guarded = {n.id for n in device_guarded(graph)}
    return tuple(
        _segment(graph, liveness, guarded, start, stop, cost) for start, stop, cost in bounds
    )


def _segment(
    graph: Graph, liveness: Liveness, guarded: set[int], start: int, stop: int, cost: int
) -> Segment:
    last_use = liveness.last_use
    outputs = set(graph.outputs)
    nodes = [i for i in liveness.steps[start:stop] if not OPS[graph.node(i).op].boundary]
    made = set(nodes)
    inputs = dict.fromkeys(i for n in nodes for i in graph.node(n).inputs if i not in made)
    return Segment(
        start=start,
        stop=stop,
        nodes=nodes,
        inputs=inputs,
        outputs=[i for i in nodes if last_use[i] >= stop],
        released=[i for i in inputs if last_use[i] < stop and i not in outputs],
        guarded=[i for i in nodes if i in guarded],
        cost=cost,
    )


Trace = Callable[..., list[mx.array]]


def trace_segment(
    graph: Graph,
    segment: Segment,
    in_range: frozenset[int] = frozenset(),
    *,
    shapeless: bool = False,
    overrides: Mapping[int, Callable] | None = None,
) -> Trace | None:
    """`segment` as an mx.compile'd function: its inputs' arrays -> its outputs' arrays,
    then one verdict per guarded node. None when it has neither (nothing it computes is
    observable: dead code the rewrites did not remove). `in_range`: ids of nodes whose
    indices the caller checks on the host before every call (`lowering.lowering_of`).
    `shapeless`: compiled with `mx.compile(shapeless=True)`, replayed at any input shapes
    (only for segments of shapeless nodes, codegen_mlx/shapeless.py); `overrides`: node
    id -> the lowering used in place of its op's (`shapeless.lowering`)."""
    if not segment.outputs and not segment.guarded:
        return None
    overrides = overrides or {}
    nodes = [
        (graph.node(i), overrides.get(i) or lowering_of(graph.node(i), in_range))
        for i in segment.nodes
    ]
    guarded = [graph.node(i) for i in segment.guarded]

    def run(*args: mx.array) -> list[mx.array]:
        slots = dict(zip(segment.inputs, args, strict=True))
        for node, lower in nodes:
            slots[node.id] = lower(node, [slots[i] for i in node.inputs])
        verdicts = [verdict(n, [slots[i] for i in n.inputs]) for n in guarded]
        return [slots[o] for o in segment.outputs] + verdicts

    return mx.compile(run, shapeless=shapeless)


def run_segments(
    graph: Graph,
    segments: Sequence[Segment],
    traces: Sequence[Trace | None],
    values: dict[int, mx.array],
    last_use: Mapping[int, int],
    *,
    wait: bool = True,
) -> list[mx.array]:
    """The graph's outputs, evaluated segment by segment (module docstring). `values`
    holds every boundary node's array and is consumed: the executor's slots. RunError
    from the first guarded node, in schedule order, whose inputs broke its guard.
    `wait` False with no guarded node: the outputs are returned once the last segment
    is dispatched (mx.async_eval), not finished, so a caller can queue work behind it."""
    outputs = set(graph.outputs)
    unused = [i for i in values if last_use[i] == -1 and i not in outputs]
    steps = dispatch_steps(graph, segments, traces, unused)
    return dispatch(steps, values, wait=wait)


@frozen
class DispatchSteps:
    """What `dispatch` does for one segmented program, worked out once (a repeated
    call keeps it: codegen_mlx/prepared_call.py): the boundary values nothing reads
    (`unused`), per traced segment (its trace, the ids it reads, the ids released before
    it runs, the ids of its outputs), the ids released at untraced segments (`dropped`),
    the graph's output ids, and the guarded nodes in schedule order."""

    unused: tuple[int, ...]
    steps: tuple[tuple[Trace, tuple[int, ...], tuple[int, ...], tuple[int, ...]], ...]
    dropped: tuple[int, ...]
    outputs: tuple[int, ...]
    guarded: tuple[Node, ...]


def dispatch_steps(
    graph: Graph,
    segments: Sequence[Segment],
    traces: Sequence[Trace | None],
    unused: Sequence[int],
) -> DispatchSteps:
    """The `DispatchSteps` of `segments` (traced as `traces`) of `graph`, `unused` the
    boundary ids that no node reads and no output is. An untraced segment (no op to
    run) only releases values: those releases move to the next traced segment's (they
    are values no later segment reads), or to `dropped` after the last one."""
    steps, pending = [], []
    for segment, trace in zip(segments, traces, strict=True):
        pending.extend(segment.released)
        if trace is None:
            continue
        steps.append((trace, tuple(segment.inputs), tuple(pending), tuple(segment.outputs)))
        pending = []
    guarded = tuple(graph.node(i) for segment in segments for i in segment.guarded)
    return DispatchSteps(tuple(unused), tuple(steps), tuple(pending), tuple(graph.outputs), guarded)


def dispatch(plan: DispatchSteps, slots: dict[int, mx.array], *, wait: bool = True) -> list:
    """Run `plan` on `slots` (every boundary node's array, consumed), as `run_segments`
    says. A segment's inputs are read before its releases, so a value a segment reads
    last is held only by the lazy graph once its compiled call returns."""
    for i in plan.unused:
        del slots[i]  # an input or param nothing reads: no reason to hold it
    verdicts: list[mx.array] = []
    pending: list[mx.array] | None = None
    for trace, inputs, released, outputs in plan.steps:
        args = [slots[i] for i in inputs]
        for i in released:
            del slots[i]
        results = trace(*args)
        del args  # the lazy graph now holds the only references to released values
        if pending is not None:
            mx.eval(pending)  # segment k done before k+1 allocates
            pending = None
        mx.async_eval(results)
        count = len(outputs)
        slots.update(zip(outputs, results[:count], strict=True))
        verdicts.extend(results[count:])
        pending = results
    for i in plan.dropped:
        del slots[i]
    result = [slots[o] for o in plan.outputs]
    if not wait and not verdicts:
        return result  # each output is a dispatched segment's, or a boundary value as given
    mx.eval(result, verdicts)
    for node, outcome in zip(plan.guarded, verdicts, strict=True):
        raise_if_broken(node, outcome)
    return result
