"""`verify_plan`: proves a compiled plan safe, independently of how it was made.

Runs on every compiled plan (compile's `verify=True` default) and again on load. It
trusts neither the offset algorithm nor the alias analysis:

1. `verify_assignment` (an event sweep sharing no code with the algorithms): every
   buffer has an aligned offset inside the arena, and buffers live at the same step
   share no byte;
2. every node's planned bytes lie inside the arena or the constant segment, and an
   aliased node's bytes are its source's plus the alias offset;
3. versions: a value's bytes are written at its writer's step (the node itself, or for
   a view the node it views, transitively). No other write may touch those bytes after
   that step while the value is still read; a write at the very step of a read is
   allowed only when the writer reads that operand with the same element mapping
   (`aliasing.same_mapping`), so the element order of a kernel cannot matter. A
   contiguous concat writes only the slots whose operand is not already in place
   (`copy_elim.written_ranges`), so values placed into it are never rewritten.

4. states (checked right after 1): the region's size is an int >= 0; the layout puts
   every state the graph declares at an aligned int offset inside the region, and no
   two of them share a byte (`verify_state_layout`); each state is planned in the
   region at its layout offset (never in the arena or the constant segment); and the
   region is written only over states the graph updates (a read-only state's bytes
   never change). So every state update lands where its state lives and nowhere else:
   an update located at its state's offset was written there in place (check 3 keeps
   it intact to the end), any other is copied over its state's bytes at the end of
   the call, which lie inside the region and share no byte with another state.

Check 3 is what makes an in-place decision safe: it is derived from the offsets and the
schedule alone. O(nodes + edges + writes per root * values per root).
"""

from __future__ import annotations

import bisect
import itertools
from collections import defaultdict
from collections.abc import Mapping
from numbers import Integral

from tensorgraph.errors import PlanError
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import describe
from tensorgraph.ir.ops import OPS
from tensorgraph.planner.aliasing import Aliasing, same_mapping, writable_state
from tensorgraph.planner.buffers import Assignment
from tensorgraph.planner.copy_elim import written_ranges
from tensorgraph.planner.verify import verify_assignment


def verify_plan(graph: Graph, plan: object, aliasing: Aliasing) -> None:
    """Raise PlanError naming the buffers or nodes if `plan` is unsafe for `graph` run in
    the plan's order with `aliasing` (see the module docstring); None when it is sound.
    A `ParametricPlan` (symbolic `graph`) is proven for every value of its dims by
    `parametric.verify_parametric`, which runs these checks at its sampled lengths."""
    if getattr(plan, "orientations", None) is not None:
        from tensorgraph.planner.parametric import verify_parametric

        if plan.graph.nodes != graph.nodes or plan.aliasing != aliasing:
            raise PlanError(
                f"graph {graph.name!r}: the parametric plan was made for another graph or aliasing"
            )
        verify_parametric(plan)
        return
    assignment = Assignment(dict(plan.buffer_offsets), plan.arena_size)
    verify_assignment(plan.buffers, assignment, plan.alignment)
    _check_states(graph, plan)
    _check_placement(graph, plan, aliasing)
    _check_versions(graph, plan, aliasing, plan.liveness)
    _check_state_writes(graph, plan, aliasing)


def _check_placement(graph: Graph, plan: object, aliasing: Aliasing) -> None:
    for node in graph.nodes:
        segment, offset = plan.locate(node.id)
        top = plan.segment_size(segment)
        if offset < 0 or offset + node.nbytes > top:
            raise PlanError(
                f"{describe(node)}: bytes [{offset}, {offset + node.nbytes}) fall outside the "
                f"{segment} of {top} bytes"
            )
        alias = aliasing.of(node.id)
        if alias is not None and plan.locate(alias.source) != (segment, offset - alias.offset):
            raise PlanError(
                f"{describe(node)}: planned at {segment}+{offset}, but it is a {alias.kind} "
                f"of %{alias.source} at +{alias.offset}"
            )


def _check_versions(graph: Graph, plan: object, aliasing: Aliasing, live: object) -> None:
    last_use = live.last_use
    # Boundary values are written before the first step runs.
    written = {
        n: -1 if OPS[graph.node(n).op].boundary else step for n, step in live.step_of.items()
    }
    writer: dict[int, int] = {}  # node -> the node whose step wrote its bytes
    writes: dict[str, list[tuple[int, int, int, int]]] = defaultdict(list)
    for node_id in live.steps:
        node = graph.node(node_id)
        alias = aliasing.of(node_id)
        if alias is not None and alias.kind == "view":
            writer[node_id] = writer[alias.source]
            continue
        writer[node_id] = node_id
        for segment, low, high in written_ranges(graph, node, plan.locate):
            writes[segment].append((written[node_id], low, high, node_id))
    for segment_writes in writes.values():
        segment_writes.sort()
    starts = {segment: [w[0] for w in ws] for segment, ws in writes.items()}
    for node in graph.nodes:
        born, dies = written[writer[node.id]], last_use[node.id]
        if not node.nbytes or dies <= born:
            continue
        segment, low = plan.locate(node.id)
        high = low + node.nbytes
        segment_writes = writes[segment]
        first = bisect.bisect_right(starts[segment], born)
        for step, w_low, w_high, w_id in segment_writes[first:]:
            if step > dies:
                break
            if w_high <= low or high <= w_low:
                continue
            if step == dies and _reads_alike(graph, w_id, node.id, w_low, low):
                continue
            raise PlanError(
                f"{describe(graph.node(w_id))} at step {step} writes bytes [{w_low}, {w_high}) "
                f"of the {segment}, overwriting {describe(node)} (bytes [{low}, {high}), "
                f"written at step {born}, read until step {dies})"
            )


def _reads_alike(graph: Graph, writer_id: int, value_id: int, w_low: int, low: int) -> bool:
    """True when `writer_id` reads `value_id` with the same element mapping it writes,
    and reads it at this step for the last time (the caller checked the step)."""
    writer = graph.node(writer_id)
    if value_id not in writer.inputs or OPS[writer.op].boundary:
        return False
    return same_mapping(writer, graph.node(value_id), low - w_low)


def _is_int(value: object) -> bool:
    return isinstance(value, Integral) and not isinstance(value, bool)


def verify_state_layout(
    sizes: Mapping[str, int], layout: Mapping[str, object], size: object, alignment: int = 1
) -> None:
    """Raise PlanError naming the state(s) unless region `size` is an int >= 0 and
    `layout` (state name -> byte offset) gives every state of `sizes` (name -> bytes) an
    int offset that is a multiple of `alignment`, with its bytes inside `[0, size]`,
    and no two of them share a byte (an empty state owns none). Names in `layout` but
    not in `sizes` are not checked (another entry's states)."""
    if not _is_int(size) or size < 0:
        raise PlanError(f"the state region's size must be an int >= 0 but got {size!r}")
    spans = []
    for name, nbytes in sizes.items():
        if name not in layout:
            raise PlanError(f"state {name!r} has no offset in the state layout")
        offset = layout[name]
        if not _is_int(offset):
            raise PlanError(f"state {name!r}: offset must be an int but got {offset!r}")
        offset = int(offset)
        where = f"state {name!r} (bytes [{offset}, {offset + nbytes}))"
        if offset % alignment:
            raise PlanError(f"{where} is not aligned to {alignment} bytes")
        if offset < 0 or offset + nbytes > size:
            raise PlanError(f"{where} lies outside the state region of {size} bytes")
        if nbytes:
            spans.append((offset, offset + nbytes, name))
    spans.sort()
    for (low, high, name), (other_low, other_high, other) in itertools.pairwise(spans):
        if other_low < high:
            raise PlanError(
                f"states {name!r} (bytes [{low}, {high})) and {other!r} (bytes "
                f"[{other_low}, {other_high})) overlap in the state region"
            )


def _check_states(graph: Graph, plan: object) -> None:
    """Check 4, before placement: the layout of the graph's states, and each state
    planned at its layout offset."""
    layout = plan.state_layout
    verify_state_layout(
        {n.name: n.nbytes for n in graph.states}, layout, plan.state_size, plan.alignment
    )
    for node in graph.states:
        segment, offset = plan.locate(node.id)
        if segment != "state" or offset != layout[node.name]:
            raise PlanError(
                f"{describe(node)}: planned at {segment}+{offset}, not at its state layout "
                f"offset {layout[node.name]}"
            )


def _check_state_writes(graph: Graph, plan: object, aliasing: Aliasing) -> None:
    """Check 4, last: writes into the region only over states the graph updates. A view
    writes nothing (its bytes are its source's, as in check 3), so a view of a read-only
    state (a decode's reshape of the cross-attention cache) is a read, not a write."""
    layout = plan.state_layout
    spans = [
        (layout[n.name], layout[n.name] + n.nbytes)
        for n in graph.states
        if writable_state(graph, n)
    ]
    for node in graph.nodes:
        alias = aliasing.of(node.id)
        if OPS[node.op].boundary or (alias is not None and alias.kind == "view"):
            continue
        for segment, low, high in written_ranges(graph, node, plan.locate):
            inside = any(a <= low and high <= b for a, b in spans)
            if segment == "state" and low < high and not inside:
                raise PlanError(
                    f"{describe(node)} writes state-region bytes [{low}, {high}) outside "
                    "every state this graph updates"
                )
