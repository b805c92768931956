"""The memory timeline plot: every buffer as a rectangle in (schedule step, byte offset).

x is the schedule step, y the byte offset; a buffer is the rectangle spanning its
lifetime `[start, end)` and its planned bytes `[offset, offset + size)`, coloured by the
kind of op that produces it. The lower-bound curve (live bytes per step) and the arena
size are drawn over it, so gaps between the curve and the arena line show where the
plan loses bytes to fragmentation. Drawn with one PatchCollection, so a 2,000-buffer
plan renders in about a second; only the largest buffers get a label.
"""

from __future__ import annotations

from pathlib import Path

from tensorgraph.errors import TensorGraphError
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.ops import OPS

KIND_COLOURS = {
    "boundary": "#9e9e9e",
    "elementwise": "#4e79a7",
    "matmul": "#e15759",
    "reduction": "#f28e2b",
    "layout": "#76b7b2",
    "view": "#bab0ac",
    "conv": "#59a14f",
    "pool": "#edc948",
    "gather": "#b07aa1",
    "update": "#ff9da7",
    "generator": "#9c755f",
    "other": "#cccccc",
}


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise TensorGraphError(
            "matplotlib is needed for plots: pip install 'tensorgraph[plot]'"
        ) from err
    return plt


def plot_timeline(
    plan: object,
    graph: Graph,
    path: str | Path,
    *,
    title: str | None = None,
    label_top: int = 12,
    size: tuple[float, float] = (12, 6),
    dpi: int = 100,
) -> Path:
    """Write the timeline of `plan` (for `graph`) as a PNG at `path`; returns the path.

    The image is `size` inches at `dpi` (1200x600 pixels by default). Raises
    TensorGraphError when matplotlib is not installed."""
    plt = _pyplot()
    from matplotlib.collections import PatchCollection
    from matplotlib.patches import Patch, Rectangle

    path = Path(path)
    figure, axes = plt.subplots(figsize=size, dpi=dpi)
    rectangles, colours, kinds = [], [], set()
    for b in plan.buffers:
        kind = OPS[graph.node(b.id).op].category
        kinds.add(kind)
        rectangles.append(
            Rectangle((b.start, plan.buffer_offsets[b.id]), b.end - b.start, max(b.size, 1))
        )
        colours.append(KIND_COLOURS.get(kind, KIND_COLOURS["other"]))
    axes.add_collection(
        PatchCollection(
            rectangles, facecolors=colours, edgecolors="white", linewidths=0.3, alpha=0.9
        )
    )
    curve = plan.liveness.live_bytes()
    steps = len(plan.liveness.steps)
    if curve:
        axes.step(
            range(steps),
            curve,
            where="post",
            color="black",
            linewidth=1.2,
            label="live bytes (lower bound curve)",
        )
    axes.axhline(
        plan.arena_size,
        color="#d62728",
        linestyle="--",
        linewidth=1.2,
        label=f"arena {plan.arena_size:,} B",
    )
    for b in sorted(plan.buffers, key=lambda b: -b.size)[:label_top]:
        node = graph.node(b.id)
        axes.text(
            b.start + (b.end - b.start) / 2,
            plan.buffer_offsets[b.id] + b.size / 2,
            f"%{b.id} {node.op}",
            ha="center",
            va="center",
            fontsize=7,
            clip_on=True,
        )
    axes.set_xlim(0, max(steps, 1))
    axes.set_ylim(0, max(plan.arena_size, max(curve, default=0), 1) * 1.05)
    axes.set_xlabel("schedule step")
    axes.set_ylabel("byte offset")
    ratio = plan.arena_size / plan.lower_bound if plan.lower_bound else 1.0
    axes.set_title(
        title
        or f"{graph.name}: {len(plan.buffers)} buffers, arena "
        f"{plan.arena_size:,} B, lower bound {plan.lower_bound:,} B ({ratio:.3f}x)"
    )
    handles, _ = axes.get_legend_handles_labels()
    handles += [
        Patch(color=KIND_COLOURS.get(k, KIND_COLOURS["other"]), label=k) for k in sorted(kinds)
    ]
    axes.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=dpi)
    plt.close(figure)
    return path
