"""Text reports: what the passes did and where every byte of the arena goes.

Read top to bottom: the pass table (what each pass removed, merged, aliased or
reinplaced, and the lower bound after it), the schedule, the plan summary (arena vs
lower bound vs no reuse), the largest buffers by offset, then the buffers live at the
peak step with the ops that make them and the ops that last read them: that list is
what a user must change to shrink the arena. Workspace buffers (scratch a fused op
declares for its step) appear as `ws %n` with their op, and the summary totals them.
Every line fits in `WIDTH` characters; long tables show the `top` largest rows and say
how many more there are.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node
from tensorgraph.planner.buffers import Buffer
from tensorgraph.planner.liveness import WorkspaceId

if TYPE_CHECKING:
    from tensorgraph.planner.plan import MemoryPlan


class Compiled(Protocol):
    """What a program report reads of a compiled program (the driver's `Program` is
    one): the planner stays below the driver and never imports it."""

    source: Graph
    graph: Graph
    stats: Mapping[str, Mapping[str, object]]
    plan: MemoryPlan


WIDTH = 100
UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def human(nbytes: int) -> str:
    """Bytes in binary units with two decimals (`1.50 MiB`); plain bytes below 1 KiB."""
    value = float(nbytes)
    for unit in UNITS[:-1]:
        if abs(value) < 1024:
            return f"{int(value)} B" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    return f"{value:.2f} {UNITS[-1]}"


def _fit(text: str, width: int) -> str:
    """`text` cut to at most `width` characters, marked with `..` when cut."""
    return text if len(text) <= width else text[: width - 2] + ".."


def _number(value: object) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def _name(node: Node) -> str:
    return f"%{node.id} {node.name!r}" if node.name else f"%{node.id}"


def _shape(node: Node) -> str:
    return "(" + ", ".join(map(str, node.shape)) + ("," if len(node.shape) == 1 else "") + ")"


# ---------------------------------------------------------------- the plan


def _describe_buffer(graph: Graph, b: Buffer) -> tuple[str, Node, str, str]:
    """(buffer label, the node it belongs to, shape text, dtype text) for a table row."""
    if isinstance(b.id, WorkspaceId):
        return f"ws %{b.id.node}", graph.node(b.id.node), "scratch", "-"
    node = graph.node(b.id)
    return _name(node), node, _shape(node), str(node.dtype)


def _peak_buffers(plan: MemoryPlan) -> list[Buffer]:
    """The buffers and workspaces live at `plan`'s peak step, largest first."""
    live = plan.live_at_peak() + plan.liveness.workspace_at(plan.peak_step)
    return sorted(live, key=lambda b: (-b.size, b.id))


def peak_holders(plan: MemoryPlan, graph: Graph, top: int = 3) -> str:
    """One line naming the `top` largest buffers live at `plan`'s peak step (`graph` the
    planned one), e.g. "its peak step 1275 holds 4.52 MiB in 7 buffers, the largest:
    %192 conv2d_weight_backward (256, 256, 3, 3) 2.25 MiB, ...": what an error that cites
    the arena can tell a user to shrink. Workspaces count as `ws %n` of their op."""
    step, peak = plan.peak_step, _peak_buffers(plan)
    named = []
    for b in peak[:top]:
        label, node, shape, _ = _describe_buffer(graph, b)
        named.append(f"{label} {node.op} {shape} {human(b.size)}")
    total, largest = human(sum(b.size for b in peak)), ", ".join(named)
    return f"its peak step {step} holds {total} in {len(peak)} buffers, the largest: {largest}"


def _holders_at(plan: MemoryPlan, graph: Graph, step: int) -> dict[int, Node]:
    """Root id -> the last node written in place into its bytes at or before `step`."""
    live = plan.liveness
    holders: dict[int, Node] = {}
    for node_id in live.steps[: step + 1]:
        node = graph.node(node_id)
        alias = plan.aliasing.of(node_id)
        if alias is not None and alias.kind == "inplace":
            holders[live.storage[node_id].root] = node
    return holders


def _last_reader(plan: MemoryPlan, graph: Graph, root: int) -> str:
    step = plan.liveness.last_read[root]
    if step >= len(plan.liveness.steps):
        return "output"
    reader = graph.node(plan.liveness.steps[step])
    return f"%{reader.id} {reader.op}"


def _buffer_table(plan: MemoryPlan, graph: Graph, top: int) -> list[str]:
    shown = sorted(plan.buffers, key=lambda b: (-b.size, b.id))[:top]
    hidden = len(plan.buffers) - len(shown)
    chosen = f"the {len(shown)} largest of {len(plan.buffers)}" if hidden else f"all {len(shown)}"
    title = f"buffers by offset ({chosen}):"
    header = (
        f"  {'offset':>11} {'bytes':>11}  {'lifetime':<11} {'buffer':<12} {'op':<12} "
        f"{'shape':<18} dtype"
    )
    lines = [title, header]
    for b in sorted(shown, key=lambda b: (plan.buffer_offsets[b.id], b.id)):
        label, node, shape, dtype = _describe_buffer(graph, b)
        lines.append(
            f"  {plan.buffer_offsets[b.id]:>11,} {b.size:>11,}  "
            f"{_fit(f'[{b.start}, {b.end})', 11):<11} {_fit(label, 12):<12} "
            f"{_fit(node.op, 12):<12} {_fit(shape, 18):<18} {dtype}"
        )
    if hidden:
        rest = sum(b.size for b in plan.buffers) - sum(b.size for b in shown)
        lines.append(f"  ... {hidden} more buffers ({human(rest)}) not shown")
    return lines


def _peak_list(plan: MemoryPlan, graph: Graph, top: int) -> list[str]:
    """Buffers live at the peak: producing op, the in-place op whose value the bytes
    hold at the peak (if any), and the op whose read keeps them alive; a workspace live
    there is listed with its op (it lives only at that op's step)."""
    step, peak = plan.peak_step, _peak_buffers(plan)
    total = sum(b.size for b in peak)
    holders = _holders_at(plan, graph, step)
    lines = [
        f"live at the peak step {step}: {human(total)} in {len(peak)} buffers "
        "(shrink these to shrink the arena):",
        f"  {'bytes':>10} {'share':>5}  {'buffer':<8} {'op':<10} {'shape':<15} "
        f"{'lifetime':<11} {'holds now':<13} last read by",
    ]
    for b in peak[:top]:
        label, node, shape, _ = _describe_buffer(graph, b)
        holder = holders.get(b.id)
        now = f"%{holder.id} {holder.op}" if holder is not None else "-"
        share = 100 * b.size / total if total else 0.0
        reader = "its op" if isinstance(b.id, WorkspaceId) else _last_reader(plan, graph, b.id)
        lines.append(
            f"  {human(b.size):>10} {share:>4.0f}%  {_fit(label, 8):<8} "
            f"{_fit(node.op, 10):<10} {_fit(shape, 15):<15} "
            f"{_fit(f'[{b.start}, {b.end})', 11):<11} {_fit(now, 13):<13} "
            f"{_fit(reader, 18)}"
        )
    if len(peak) > top:
        rest = total - sum(b.size for b in peak[:top])
        lines.append(f"  ... {len(peak) - top} more buffers ({human(rest)})")
    return lines


def format_plan(plan: MemoryPlan, graph: Graph, top: int = 20) -> str:
    """The plan's report (see the module docstring); at most `top` rows per table."""
    steps = len(plan.liveness.steps)
    saved = 100 * plan.bytes_saved / plan.total_unshared if plan.total_unshared else 0.0
    lines = [
        f"memory plan ({plan.algorithm}, alignment {plan.alignment} B, "
        f"{plan.planning_seconds * 1000:,.1f} ms): {len(plan.buffers):,} buffers over "
        f"{steps:,} steps",
        f"  arena {human(plan.arena_size)} ({plan.arena_size:,} B) | lower bound "
        f"{human(plan.lower_bound)} | ratio {plan.ratio:.3f}",
        f"  no reuse {human(plan.total_unshared)} | saved {human(plan.bytes_saved)} "
        f"({saved:.1f}%) | constant segment {human(plan.constant_size)} "
        f"({len(plan.liveness.constants)} params/constants)",
    ]
    lines += _state_lines(plan, graph)
    workspace = plan.liveness.workspace.values()
    if workspace:
        largest = max(workspace, key=lambda b: (b.size, -b.start))
        lines.append(
            f"  workspace {human(sum(b.size for b in workspace))} in {len(workspace)} buffers "
            f"| largest {human(largest.size)}: %{largest.id.node} "
            f"{graph.node(largest.id.node).op}"
        )
    lines += _buffer_table(plan, graph, top)
    lines += _peak_list(plan, graph, top)
    return "\n".join(_fit(line, WIDTH) for line in lines)


def copied_states(plan: MemoryPlan, graph: Graph) -> list[str]:
    """The states whose update is not planned in place: copied into the state region
    after the call's last step."""
    return [
        name
        for name, value in graph.state_updates.items()
        if plan.locate(value) != ("state", plan.state_layout[name])
    ]


def _state_lines(plan: MemoryPlan, graph: Graph) -> list[str]:
    states = graph.states
    if not states:
        return []
    updated = graph.state_updates
    copied = copied_states(plan, graph)
    copied_bytes = sum(graph.node(updated[name]).nbytes for name in copied)
    return [
        f"  state region {human(plan.state_size)} ({len(plan.state_layout)} states; "
        f"this graph reads {len(states)}, updates {len(updated)}: "
        f"{len(updated) - len(copied)} in place, {len(copied)} copied"
        + (f", {human(copied_bytes)}: {', '.join(copied)})" if copied else ")")
    ]


# ---------------------------------------------------------------- the program


def _counters(counters: Mapping[str, object]) -> str:
    """`name value` pairs, names with spaces for underscores, numbers as `_number` writes
    them: one style for every counter the report and the command line print."""
    return ", ".join(f"{k.replace('_', ' ')} {_number(v)}" for k, v in counters.items())


def _pass_table(stats: Mapping[str, Mapping[str, object]]) -> list[str]:
    """One row per pass: the counters every pass has as columns, the rest as details."""
    rows = list(stats.items())
    common = [k for k in rows[0][1] if all(k in counters for _, counters in rows)]
    columns = [(k, max(len(k), *(len(_number(c[k])) for _, c in rows))) for k in common]
    head = "  ".join(f"{k.replace('_', ' '):>{w}}" for k, w in columns)
    width = max(12, *(len(name) + 1 for name, _ in rows))  # pass names are never cut
    lines = [f"  {'pass':<{width}}{head}  details"]
    for name, counters in rows:
        cells = "  ".join(f"{_number(counters[k]):>{w}}" for k, w in columns)
        details = _counters({k: v for k, v in counters.items() if k not in common})
        lines.append(f"  {name:<{width}}{cells}  {details or '-'}")
    return lines


def format_program_header(program: Compiled) -> str:
    """The first part of a program's report: node counts, the pass table, then one line
    each for the schedule and the plan's stats (each stage once). Lines fit in `WIDTH`
    characters; counts carry thousands separators."""
    lines = [
        f"program {program.graph.name!r}: {len(program.source):,} nodes in, "
        f"{len(program.graph):,} after passes"
    ]
    passes = {k: v for k, v in program.stats.items() if k not in ("schedule", "plan")}
    if passes:
        lines.append("passes:")
        lines += _pass_table(passes)
    for stage in ("schedule", "plan"):
        if program.stats.get(stage):
            lines += textwrap.wrap(
                f"{stage}: {_counters(program.stats[stage])}",
                WIDTH,
                subsequent_indent="  ",
                break_on_hyphens=False,
            )
    return "\n".join(_fit(line, WIDTH) for line in lines)


def format_program_report(program: Compiled) -> str:
    """A compiled program's report: `format_program_header` (node counts, the pass table,
    the schedule and plan stats), then the plan's report (`MemoryPlan.report`). Lines fit
    in `WIDTH` characters and no line is printed twice."""
    from tensorgraph.planner.footprint import footprint

    memory = footprint(program.graph, program.plan).table()
    return (
        format_program_header(program) + "\n" + program.plan.report(program.graph) + "\n" + memory
    )


def format_multi_report(multi: object) -> str:
    """A multi-entry program: one row per entry (arena, lower bound, steps, constant
    segment, state updates in place; a symbolic entry's at each dim's max, then its
    range on a line of its own), then the shared memory and its total."""
    lines = [f"multi-entry program: {len(multi.entries)} entries"]
    width = max(5, *(len(name) for name in multi.entries))
    lines.append(
        f"  {'entry':<{width}}  {'arena':>10}  {'lower bound':>11}  {'steps':>5}  "
        f"{'constants':>10}  state updates"
    )
    for name, program in multi.entries.items():
        plan, graph = program.plan, program.graph
        updated, copied = len(graph.state_updates), len(copied_states(plan, graph))
        lines.append(
            f"  {name:<{width}}  {human(plan.arena_size):>10}  {human(plan.lower_bound):>11}  "
            f"{len(plan.liveness.steps):>5}  {human(plan.constant_size):>10}  "
            f"{updated} ({updated - copied} in place)"
        )
        if graph.dims:  # a parametric plan: each call takes its arena at the call's dims
            ranges = ", ".join(d.describe() for d in graph.dims.values())
            lines.append(f"  {'':<{width}}  (symbolic: {ranges}; sizes above at the max)")
    lines += [
        "shared (entries run one at a time):",
        f"  arena {human(multi.arena_size)} (the largest entry's) | weights and constants "
        f"{human(multi.constant_size)} (stored once)",
        f"  state region {human(multi.state_size)} ({len(multi.state_layout)} states) | total "
        f"{human(multi.total_size)} ({multi.total_size:,} B)",
    ]
    return "\n".join(_fit(line, WIDTH) for line in lines)
