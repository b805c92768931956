"""The memory timeline plot: every buffer as a rectangle in (compute step, byte offset).

x counts compute steps: the boundary nodes (inputs, params, constants, states) run no
code, so they take no column of their own. Buffers born before the first compute step
(the inputs, params planned in the arena) start in one column at the left edge, left of
x = 0, labelled "in". A boundary step allocates and reads nothing, so every byte live
at one is live at the next compute step too (or in that column): dropping those steps
loses no byte of the curve nor its peak. y is the byte offset; a buffer is the rectangle
spanning its lifetime and its planned bytes `[offset, offset + size)`, coloured by the
registry category of the op that produces it. The live-bytes curve (summed sizes live
at each step; its maximum is the lower bound) is drawn against its own axis on the
right, on the same scale, and the arena size over it: where the curve stays below the
arena line at the peak, the plan loses bytes to fragmentation.

The state region and the constant segment persist across calls and are not part of the
arena; `show_state=True` stacks them above it (state first), each value as a bar over
the whole run, so a KV cache hides nothing unless asked for; otherwise the title says
how many bytes they hold. The legend lists only what is drawn: a kind whose every
rectangle is under a pixel is left out. The buffers live at the peak step are labelled
`%id op` (largest first, those at least a text line tall), at the dotted peak line.
All rectangles go into one PatchCollection, so a 2,000-buffer plan renders in about a
second. The byte axes have ticks at a power-of-two step, labelled in binary units
(`512 B`, `1.5 KiB`, `2 MiB`).
"""

from __future__ import annotations

import bisect
import math
from pathlib import Path

from attrs import frozen

from tensorgraph.errors import TensorGraphError
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.ops import OPS
from tensorgraph.planner.buffers import Buffer
from tensorgraph.planner.liveness import WorkspaceId, owner
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
# The persistent segments `show_state` draws above the arena, hatched to tell them apart.
SEGMENT_COLOURS = {"state": "#8c564b", "constant": "#7f7f7f"}
# Past this many rectangles their white outlines would hide the colours.
OUTLINE_LIMIT = 400
LABEL_FONT_SIZE = 7
# A kind is listed in the legend when one of its rectangles covers at least this many
# pixels both ways: less is drawn as nothing a reader can match to a colour.
VISIBLE_PIXELS = 1.0


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


@frozen
class ComputeSteps:
    """The x axis: schedule steps of compute nodes, numbered 0, 1, ... in order.
    `first` is the schedule step of the first compute node (the step count when none);
    the steps before it collapse into the column `[-column, 0)`, a fifteenth of the
    axis (at least one step) so that its label reads at any step count."""

    steps: tuple[int, ...]
    first: int

    @classmethod
    def of(cls, plan: MemoryPlan, graph: Graph) -> ComputeSteps:
        order = plan.liveness.steps
        compute = tuple(i for i, node_id in enumerate(order) if not _is_boundary(graph, node_id))
        return cls(compute, compute[0] if compute else len(order))

    @property
    def column(self) -> int:
        """Width of the left column, in steps."""
        return max(1, math.ceil(len(self.steps) / 15))

    def x(self, step: int) -> int:
        """Where schedule step `step` starts: `-column` before the first compute step,
        else the number of compute steps before it."""
        return -self.column if step < self.first else bisect.bisect_left(self.steps, step)

    def span(self, start: int, end: int) -> tuple[int, int]:
        """x extent `[left, right)` of the schedule lifetime `[start, end)`."""
        return self.x(start), bisect.bisect_left(self.steps, end)


def _is_boundary(graph: Graph, node_id: int) -> bool:
    return OPS[graph.node(node_id).op].category == "boundary"


def _kind(graph: Graph, node_id: int) -> str:
    return OPS[graph.node(owner(node_id)).op].category


def _curve(plan: MemoryPlan, axis: ComputeSteps) -> tuple[list[int], list[int]]:
    """(x, live bytes) of the step curve: the left column's largest value (when a
    boundary step comes first), then one value per compute step (the bytes live at its
    schedule step)."""
    live = plan.liveness.live_bytes(plan.alignment)
    head = live[: axis.first]
    xs, ys = ([-axis.column], [max(head)]) if head else ([], [])
    xs += range(len(axis.steps))
    ys += [live[step] for step in axis.steps]
    return xs, ys


@frozen
class _Bar:
    """One rectangle to draw: x `[left, right)`, bytes `[bottom, bottom + height)`."""

    left: float
    right: float
    bottom: int
    height: int
    kind: str


def _arena_bars(plan: MemoryPlan, graph: Graph, axis: ComputeSteps) -> list[_Bar]:
    bars = []
    for b in plan.buffers:
        left, right = axis.span(b.start, b.end)
        if right > left:  # lives across at least one column
            offset = plan.buffer_offsets[b.id]
            bars.append(_Bar(left, right, offset, b.size, _kind(graph, b.id)))
    return bars


def _segment_bars(
    plan: MemoryPlan, graph: Graph, left: int, right: int
) -> tuple[list[_Bar], list[tuple[str, int, int]]]:
    """The state region's states (this graph's) and the constant segment's roots as
    bars over the whole run, stacked above the arena; and (name, bottom, height) of each
    state, for its label."""
    bars, names = [], []
    states = {node.name: node for node in graph.states}
    for name, offset in sorted(plan.state_layout.items(), key=lambda item: item[1]):
        if name in states:
            bottom = plan.arena_size + offset
            bars.append(_Bar(left, right, bottom, states[name].nbytes, "state"))
            names.append((name, bottom, states[name].nbytes))
    base = plan.arena_size + plan.state_size
    for root in plan.liveness.constants:
        size = graph.node(root).nbytes
        bars.append(_Bar(left, right, base + plan.constant_offsets[root], size, "constant"))
    return bars, names


def _colour(kind: str) -> str:
    return SEGMENT_COLOURS.get(kind) or KIND_COLOURS.get(kind, KIND_COLOURS["other"])


def timeline_figure(
    plan: MemoryPlan,
    graph: Graph,
    *,
    title: str | None = None,
    label_top: int = 12,
    size: tuple[float, float] = (12, 6),
    dpi: int = 100,
    show_state: bool = False,
) -> object:
    """The timeline of `plan` (made for `graph`, the compiled graph whose node ids the
    buffers carry) as a matplotlib Figure of `size` inches at `dpi`, laid out and
    labelled; the caller owns it (save it, then `matplotlib.pyplot.close` it).

    `figure.axes[0]` holds the buffers (x: compute steps, y: byte offset) and
    `figure.axes[1]` the live-bytes curve on the same byte scale. At most `label_top`
    buffers live at the peak step are labelled. `show_state` draws the state region and
    the constant segment above the arena (see the module docstring). The byte axes read
    in B/KiB/MiB/GiB (`byte_label`). Raises TensorGraphError when matplotlib is not
    installed."""
    plt = _pyplot()
    from matplotlib.collections import PatchCollection
    from matplotlib.patches import Patch, Rectangle
    from matplotlib.ticker import MaxNLocator

    axis = ComputeSteps.of(plan, graph)
    xs, curve = _curve(plan, axis)
    left = -axis.column if axis.first > 0 else 0  # a boundary step first: the "in" column
    right = max(len(axis.steps), left + 1)
    bars = _arena_bars(plan, graph, axis)
    states: list[tuple[str, int, int]] = []
    if show_state:
        extra, states = _segment_bars(plan, graph, left, right)
        bars += extra
    top = max(
        plan.arena_size,
        max(curve, default=0),
        max((b.bottom + b.height for b in bars), default=0),
        1,
    )
    figure, axes = plt.subplots(figsize=size, dpi=dpi)
    try:
        outline = len(bars) <= OUTLINE_LIMIT
        axes.add_collection(
            PatchCollection(
                [Rectangle((b.left, b.bottom), b.right - b.left, b.height) for b in bars],
                facecolors=[_colour(b.kind) for b in bars],
                edgecolors="white" if outline else "none",
                linewidths=0.3 if outline else 0.0,
                alpha=0.9,
            )
        )
        lines = [
            axes.axhline(
                plan.arena_size,
                color="#d62728",
                linestyle="--",
                linewidth=1.2,
                label=f"arena {human(plan.arena_size)}",
            )
        ]
        if show_state and plan.state_size:
            lines.append(
                axes.axhline(
                    plan.arena_size + plan.state_size,
                    color=SEGMENT_COLOURS["state"],
                    linestyle=":",
                    linewidth=1.0,
                    label=f"state region {human(plan.state_size)} (above the arena)",
                )
            )
        _byte_axis(axes, top)
        axes.set_xlabel(
            "compute step (boundary nodes: column 'in' at the left edge)"
            if left < 0
            else "compute step"
        )
        ticks = [int(t) for t in MaxNLocator(integer=True).tick_values(0, right) if 0 <= t <= right]
        axes.set_xticks([left / 2, *ticks] if left < 0 else ticks)
        axes.set_xticklabels(["in", *map(str, ticks)] if left < 0 else list(map(str, ticks)))
        axes.set_xlim(left, right)
        axes.set_ylabel(
            "byte offset: arena, state region, constant segment" if show_state else "byte offset"
        )
        # The curve gets its own axis, on the same byte scale: a value, not an offset.
        live = axes.twinx()
        if curve:  # repeat the last value so the step plot covers the last column too
            lines.insert(
                0,
                live.step(
                    [*xs, max(xs[-1] + 1, 0)],
                    [*curve, curve[-1]],
                    where="post",
                    color="black",
                    linewidth=1.2,
                    label="live bytes (right axis; peak = lower bound)",
                )[0],
            )
        _byte_axis(live, top)
        live.set_ylabel("live bytes (the curve)")
        peak_x = axis.x(plan.peak_step)
        if curve and label_top > 0:
            axes.axvline(peak_x + 0.5, color="black", linestyle=":", linewidth=0.8)
        axes.set_title(title or _title(plan, graph, show_state))
        kinds = sorted({b.kind for b in bars})

        def legend(shown: list[str]) -> None:
            handles = [*lines, *(Patch(color=_colour(k), label=_kind_label(k)) for k in shown)]
            live.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.12, 1.0), fontsize=8)

        legend(kinds)  # every candidate first: the final legend is never wider
        figure.tight_layout()
        legend([k for k in kinds if k in _visible_kinds(axes, bars)])
        figure.tight_layout()
        # After layout, at the final pixel sizes: only labels a text line fits.
        _label_states(axes, states, (left + right) / 2, dpi)
        _label_peak(axes, plan, graph, axis, label_top, dpi)
    except BaseException:
        plt.close(figure)
        raise
    return figure


def _kind_label(kind: str) -> str:
    return {"constant": "params and constants"}.get(kind, kind)


def _title(plan: MemoryPlan, graph: Graph, show_state: bool) -> str:
    text = (
        f"{graph.name}: {len(plan.buffers):,} buffers, arena {plan.arena_size:,} B, "
        f"lower bound {plan.lower_bound:,} B ({plan.ratio:.3f}x)"
    )
    segments = {"state region": plan.state_size, "constant segment": plan.constant_size}
    hidden = [f"{name} {human(size)}" for name, size in segments.items() if size]
    if hidden and not show_state:
        text += f"\nnot drawn (show_state / --plot-state): {', '.join(hidden)}"
    return text


def _byte_axis(axes: object, top: int) -> None:
    """y from 0 to 5% over `top`, about six ticks at a power-of-two step (512 B,
    128 KiB, ...): round numbers in binary units, each at least 1 B."""
    from matplotlib.ticker import FuncFormatter, MultipleLocator

    axes.set_ylim(0, top * 1.05)
    axes.yaxis.set_major_locator(MultipleLocator(2 ** max(math.ceil(math.log2(top / 6)), 0)))
    axes.yaxis.set_major_formatter(FuncFormatter(lambda value, _: byte_label(value)))


def _visible_kinds(axes: object, bars: list[_Bar]) -> set[str]:
    """Kinds with a rectangle at least VISIBLE_PIXELS wide and tall as laid out now."""
    to_pixels = axes.transData.transform
    seen = set()
    for b in bars:
        if b.kind in seen:
            continue
        (x0, y0), (x1, y1) = to_pixels([(b.left, b.bottom), (b.right, b.bottom + b.height)])
        if x1 - x0 >= VISIBLE_PIXELS and y1 - y0 >= VISIBLE_PIXELS:
            seen.add(b.kind)
    return seen


def plot_timeline(
    plan: MemoryPlan,
    graph: Graph,
    path: str | Path,
    *,
    title: str | None = None,
    label_top: int = 12,
    size: tuple[float, float] = (12, 6),
    dpi: int = 100,
    show_state: bool = False,
) -> Path:
    """Write `timeline_figure(plan, graph, ...)` as a PNG at exactly `path` (no suffix is
    added), creating missing parent folders; returns the path. The image is `size`
    inches at `dpi` (1200x600 pixels by default). Raises TensorGraphError when
    matplotlib is not installed, OSError when the file cannot be written."""
    plt = _pyplot()
    path = Path(path)
    figure = timeline_figure(
        plan, graph, title=title, label_top=label_top, size=size, dpi=dpi, show_state=show_state
    )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path, dpi=dpi, format="png")
    finally:
        plt.close(figure)
    return path


def peak_labels(plan: MemoryPlan, graph: Graph) -> list[tuple[Buffer, str]]:
    """The buffers live at the peak step (workspace included), largest first, each with
    its label: `%id op`, or `ws %id op` for an op's workspace."""
    step = plan.peak_step
    live = plan.live_at_peak() + plan.liveness.workspace_at(step)
    labelled = []
    for b in sorted(live, key=lambda b: (-b.size, b.id)):
        node = graph.node(owner(b.id))
        prefix = "ws " if isinstance(b.id, WorkspaceId) else ""
        labelled.append((b, f"{prefix}%{node.id} {node.op}"))
    return labelled


def _line_pixels(dpi: int) -> float:
    """The height of one label line, with some room around it, in pixels."""
    return 1.5 * LABEL_FONT_SIZE * dpi / 72


def _is_tall_enough(axes: object, bottom: float, height: float, dpi: int) -> bool:
    (_, low), (_, high) = axes.transData.transform([(0, bottom), (0, bottom + height)])
    return high - low >= _line_pixels(dpi)


def _label_states(axes: object, states: list[tuple[str, int, int]], x: float, dpi: int) -> None:
    """Each drawn state's name in the middle of its bar, where a text line fits."""
    for name, bottom, height in states:
        if _is_tall_enough(axes, bottom, height, dpi):
            axes.text(
                x, bottom + height / 2, name, ha="center", va="center", fontsize=LABEL_FONT_SIZE
            )


def _label_peak(
    axes: object, plan: MemoryPlan, graph: Graph, axis: ComputeSteps, count: int, dpi: int
) -> None:
    """Label up to `count` buffers live at the peak, largest first, at the peak column
    and each buffer's middle byte: those at least one text line tall. Buffers live at
    one step never share bytes, so these labels never overlap; shorter ones are left
    out (the report lists every one)."""
    x = axis.x(plan.peak_step)
    low, high = axes.get_xlim()
    to_right = x + 0.5 <= (low + high) / 2  # write into the wider side of the plot
    for b, text in peak_labels(plan, graph)[:count]:
        offset = plan.buffer_offsets[b.id]
        if not _is_tall_enough(axes, offset, b.size, dpi):
            continue
        axes.annotate(
            text,
            (x + 0.5, offset + b.size / 2),
            xytext=(6 if to_right else -6, 0),
            textcoords="offset points",
            ha="left" if to_right else "right",
            va="center",
            fontsize=LABEL_FONT_SIZE,
            bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "alpha": 0.8, "lw": 0},
            annotation_clip=True,
        )
