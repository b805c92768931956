"""Text reports: what the passes did and where every byte of the arena goes.

Read top to bottom: the summary line (arena vs lower bound vs no reuse), then the
largest buffers by offset, then the buffers live at the peak step with the ops that
make them: that list is what a user must change to shrink the arena."""

from __future__ import annotations

from tensorgraph.ir.graph import Graph, label


def human(nbytes: int) -> str:
    """Bytes in binary units with three significant digits (`1.50 MiB`)."""
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _describe_buffer(graph: Graph, root: int) -> tuple[str, str, str]:
    node = graph.node(root)
    return f"%{root} {label(node) if node.name else ''}".strip(), node.op, f"{node.shape}"


def format_plan(plan: object, graph: Graph, top: int = 20) -> str:
    """The plan's report (see module docstring); at most `top` rows per table."""
    lines = [
        f"memory plan ({plan.algorithm}, alignment {plan.alignment} B, "
        f"{plan.planning_seconds * 1000:.1f} ms): {len(plan.buffers)} buffers",
        f"  arena {human(plan.arena_size)} ({plan.arena_size} B) | lower bound "
        f"{human(plan.lower_bound)} | ratio {plan.ratio:.3f} | no reuse "
        f"{human(plan.total_unshared)} | saved {human(plan.bytes_saved)}",
        f"  constant segment {human(plan.constant_size)} "
        f"({len(plan.liveness.constants)} params/constants)",
    ]
    biggest = sorted(plan.buffers, key=lambda b: (-b.size, b.id))[:top]
    lines.append(f"  largest buffers, by offset ({len(biggest)} of {len(plan.buffers)}):")
    lines.append(f"    {'offset':>12} {'bytes':>12}  {'lifetime':<13} {'value':<18} op / shape")
    for b in sorted(biggest, key=lambda b: (plan.buffer_offsets[b.id], b.id)):
        name, op, shape = _describe_buffer(graph, b.id)
        lifetime = f"[{b.start}, {b.end})"
        lines.append(
            f"    {plan.buffer_offsets[b.id]:>12} {b.size:>12}  {lifetime:<13} {name:<18} "
            f"{op} {shape}"
        )
    peak = plan.live_at_peak()
    curve = plan.liveness.live_bytes()
    peak_bytes = curve[plan.peak_step] if curve else 0
    lines.append(
        f"  live at the peak step {plan.peak_step} ({human(peak_bytes)} in {len(peak)} "
        "buffers); shrink these to shrink the arena:"
    )
    for b in peak[:top]:
        name, op, shape = _describe_buffer(graph, b.id)
        lines.append(f"    {human(b.size):>12}  {name:<18} {op} {shape} lives [{b.start}, {b.end})")
    if len(peak) > top:
        lines.append(f"    ... {len(peak) - top} more")
    return "\n".join(lines)


def format_program_report(program: object) -> str:
    """Pass statistics, scheduling, then the plan's report."""
    lines = [
        f"program {program.graph.name!r}: {len(program.source)} nodes in, "
        f"{len(program.graph)} nodes after passes"
    ]
    if program.stats:
        lines.append("  passes:")
        for name, stats in program.stats.items():
            counters = ", ".join(f"{k} {v}" for k, v in stats.items())
            lines.append(f"    {name:<11} {counters}")
    if program.schedule_stats:
        counters = ", ".join(f"{k} {v}" for k, v in program.schedule_stats.items())
        lines.append(f"  schedule: {counters}")
    lines.append(program.plan.report(program.graph))
    return "\n".join(lines)
