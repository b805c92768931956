"""The memory timeline plot: every buffer as a rectangle in (schedule step, byte offset).

x is the schedule step, y the byte offset; a buffer is the rectangle spanning its
lifetime `[start, end)` and its planned bytes `[offset, offset + size)`, coloured by the
registry category of the op that produces it. The lower-bound curve (live bytes per
step, a step plot) and the arena size are drawn over it: where the curve stays below the
arena line at the peak, the plan loses bytes to fragmentation. All rectangles go into
one PatchCollection, so a 2,000-buffer plan renders in about a second; only the largest
buffers that have room for their text get a label. The byte axis has ticks at a
power-of-two step, labelled in binary units (`512 B`, `1.5 KiB`, `2 MiB`).
"""

from __future__ import annotations

import math
from pathlib import Path

from tensorgraph.errors import TensorGraphError
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.ops import OPS
from tensorgraph.planner.liveness import owner
from tensorgraph.planner.plan import MemoryPlan
from tensorgraph.planner.report import UNITS, human

# One colour per op registry category (Tableau 10 and two of its neighbours, with grey
# for the boundary ops); a test checks every category has its own.
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
    "attention": "#17becf",
    "normalization": "#bcbd22",
    "other": "#cccccc",
}
# Past this many rectangles their white outlines would hide the colours.
OUTLINE_LIMIT = 400
LABEL_FONT_SIZE = 7
# Rough width of one label character at LABEL_FONT_SIZE, in pixels at 100 dpi.
LABEL_CHAR_PIXELS = 4.5


def _pyplot():
    """matplotlib.pyplot on the Agg backend (files only, no display needed)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise TensorGraphError(
            "matplotlib is needed for plots: pip install 'tensorgraph[plot]'"
        ) from err
    return plt


def byte_label(nbytes: float) -> str:
    """A byte count in the largest binary unit that keeps it at least 1 (B below 1 KiB),
    with at most two decimals and no trailing zeros: 512 -> `512 B`, 1536 -> `1.5 KiB`,
    3 * 2**20 -> `3 MiB`. The axis ticks sit on multiples of a power of two of at least
    a quarter of their unit, so two decimals show them exactly."""
    value, unit = float(nbytes), UNITS[0]
    for bigger in UNITS[1:]:
        if abs(round(value, 2)) < 1024:
            break
        value, unit = value / 1024, bigger
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return f"{'0' if text == '-0' else text} {unit}"


def _kind(graph: Graph, node_id: int) -> str:
    return OPS[graph.node(owner(node_id)).op].category


def timeline_figure(
    plan: MemoryPlan,
    graph: Graph,
    *,
    title: str | None = None,
    label_top: int = 12,
    size: tuple[float, float] = (12, 6),
    dpi: int = 100,
) -> object:
    """The timeline of `plan` (made for `graph`, the compiled graph whose node ids the
    buffers carry) as a matplotlib Figure of `size` inches at `dpi`, laid out and
    labelled; the caller owns it (save it, then `matplotlib.pyplot.close` it). At most
    `label_top` buffers are labelled: the largest by bytes (longer lifetime first among
    equals) whose rectangle holds the text. The byte axis reads in B/KiB/MiB/GiB
    (`byte_label`). Raises TensorGraphError when matplotlib is not installed."""
    plt = _pyplot()
    from matplotlib.collections import PatchCollection
    from matplotlib.patches import Patch, Rectangle
    from matplotlib.ticker import FuncFormatter, MultipleLocator

    steps = len(plan.liveness.steps)
    curve = plan.liveness.live_bytes()
    top = max(plan.arena_size, max(curve, default=0), 1)
    figure, axes = plt.subplots(figsize=size, dpi=dpi)
    try:
        kinds = sorted({_kind(graph, b.id) for b in plan.buffers})
        rectangles = [
            Rectangle((b.start, plan.buffer_offsets[b.id]), b.end - b.start, b.size)
            for b in plan.buffers
        ]
        colours = [
            KIND_COLOURS.get(_kind(graph, b.id), KIND_COLOURS["other"]) for b in plan.buffers
        ]
        outline = len(rectangles) <= OUTLINE_LIMIT
        axes.add_collection(
            PatchCollection(
                rectangles,
                facecolors=colours,
                edgecolors="white" if outline else "none",
                linewidths=0.3 if outline else 0.0,
                alpha=0.9,
            )
        )
        if curve:  # repeat the last value so the step plot covers the last step too
            axes.step(
                range(steps + 1),
                [*curve, curve[-1]],
                where="post",
                color="black",
                linewidth=1.2,
                label=f"live bytes (lower bound {human(plan.lower_bound)})",
            )
        axes.axhline(
            plan.arena_size,
            color="#d62728",
            linestyle="--",
            linewidth=1.2,
            label=f"arena {human(plan.arena_size)}",
        )
        axes.set_xlim(0, max(steps, 1))
        axes.set_ylim(0, top * 1.05)
        # About six ticks at a power-of-two step (512 B, 128 KiB, ...): round numbers in
        # binary units, each at least 1 B and at least a sixth of the top.
        axes.yaxis.set_major_locator(MultipleLocator(2 ** max(math.ceil(math.log2(top / 6)), 0)))
        axes.yaxis.set_major_formatter(FuncFormatter(lambda value, _: byte_label(value)))
        axes.set_xlabel("schedule step")
        axes.set_ylabel("byte offset")
        axes.set_title(
            title
            or f"{graph.name}: {len(plan.buffers)} buffers, arena {plan.arena_size:,} B, "
            f"lower bound {plan.lower_bound:,} B ({plan.ratio:.3f}x)"
        )
        handles, _ = axes.get_legend_handles_labels()
        handles += [Patch(color=KIND_COLOURS.get(k, KIND_COLOURS["other"]), label=k) for k in kinds]
        axes.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
        figure.tight_layout()
        _label_largest(axes, plan, graph, label_top, dpi)  # after layout: final pixel sizes
    except BaseException:
        plt.close(figure)
        raise
    return figure


def plot_timeline(
    plan: MemoryPlan,
    graph: Graph,
    path: str | Path,
    *,
    title: str | None = None,
    label_top: int = 12,
    size: tuple[float, float] = (12, 6),
    dpi: int = 100,
) -> Path:
    """Write `timeline_figure(plan, graph, ...)` as a PNG at exactly `path` (no suffix is
    added), creating missing parent folders; returns the path. The image is `size`
    inches at `dpi` (1200x600 pixels by default). Raises TensorGraphError when
    matplotlib is not installed, OSError when the file cannot be written."""
    plt = _pyplot()
    path = Path(path)
    figure = timeline_figure(plan, graph, title=title, label_top=label_top, size=size, dpi=dpi)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path, dpi=dpi, format="png")
    finally:
        plt.close(figure)
    return path


def _label_largest(axes: object, plan: MemoryPlan, graph: Graph, count: int, dpi: int) -> None:
    """Label up to `count` buffers, largest first, each inside its rectangle: written
    across when the rectangle is wide enough, up the side when only tall enough, and
    skipped when neither (an unreadable label hides more than it tells)."""
    to_pixels = axes.transData.transform
    char_pixels = LABEL_CHAR_PIXELS * dpi / 100
    placed = 0
    for b in sorted(plan.buffers, key=lambda b: (-b.size, b.start - b.end, b.id)):
        if placed >= count:
            break
        offset = plan.buffer_offsets[b.id]
        text = f"%{owner(b.id)} {graph.node(owner(b.id)).op}"
        (left, bottom), (right, upper) = to_pixels([(b.start, offset), (b.end, offset + b.size)])
        width, height = right - left, upper - bottom
        needed, line = len(text) * char_pixels, 2 * LABEL_FONT_SIZE * dpi / 72
        if width >= needed and height >= line:
            rotation = 0
        elif height >= needed and width >= line:
            rotation = 90
        else:
            continue
        axes.text(
            (b.start + b.end) / 2,
            offset + b.size / 2,
            text,
            ha="center",
            va="center",
            rotation=rotation,
            fontsize=LABEL_FONT_SIZE,
            clip_on=True,
        )
        placed += 1
