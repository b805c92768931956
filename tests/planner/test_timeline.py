"""The timeline plot is a real PNG of the requested size, for a zoo model and for a
2,000-buffer plan, its byte axis reads in binary units, and a missing matplotlib is
reported with the way to install it. Its contents are checked on the matplotlib objects
(axes, legend, texts, rectangles), not on pixels: x counts compute steps, the legend
names only what is drawn, the live-bytes curve has its own axis, the state region and
the constant segment are drawn only when asked, and the peak's buffers carry their op."""

import contextlib
import struct
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.ir.ops import OPS
from tensorgraph.models import build_model
from tensorgraph.planner.liveness import owner
from tensorgraph.planner.timeline import byte_label, plot_timeline, timeline_figure
from tests.strategies import graphs

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from the IHDR chunk, which the PNG standard puts first."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path} is not a PNG file"
    length, chunk = struct.unpack(">I4s", data[8:16])
    assert chunk == b"IHDR" and length == 13, "the first chunk of a PNG must be IHDR"
    return struct.unpack(">II", data[16:24])


def test_plot_is_a_png_of_the_default_size(tmp_path) -> None:
    model = build_model("llama", seq=16, dim=64, heads=4, hidden=96, vocab=64)
    prog = tg.compile(model.graph)
    path = plot_timeline(prog.plan, prog.graph, tmp_path / "nested" / "llama.png")
    assert path == tmp_path / "nested" / "llama.png", "missing folders are created"
    assert png_size(path) == (1200, 600)


def test_size_dpi_title_and_no_labels(tmp_path) -> None:
    model = build_model("resnet18", image=32, width=8, classes=10)
    prog = tg.compile(model.graph)
    path = plot_timeline(
        prog.plan,
        prog.graph,
        tmp_path / "resnet.png",
        title="resnet18 at 32x32",
        label_top=0,
        size=(8, 4),
        dpi=50,
    )
    assert png_size(path) == (400, 200)


def test_a_two_thousand_buffer_plan_renders(tmp_path) -> None:
    g = tg.Graph("chain")
    h = g.input("x", (8, 8), tg.float32)
    for _ in range(2000):
        h = tg.sin(h)
    g.output(h)
    # Without reinplace every sin owns a buffer: 2,000 buffers plus the input's.
    prog = tg.compile(
        g, passes=("dce", "cse", "view_alias"), planner="greedy_size", schedule="program"
    )
    assert len(prog.plan.buffers) >= 2000
    assert png_size(plot_timeline(prog.plan, prog.graph, tmp_path / "chain.png")) == (1200, 600)


def test_missing_matplotlib_names_the_install_command(tmp_path, monkeypatch) -> None:
    model = build_model("mlp", batch=2, features=8, hidden=8, layers=1, classes=2)
    prog = tg.compile(model.graph)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    with pytest.raises(tg.TensorGraphError, match=r"pip install 'tensorgraph\[plot\]'"):
        plot_timeline(prog.plan, prog.graph, tmp_path / "none.png")
    assert not (tmp_path / "none.png").exists()


def test_byte_labels_read_in_binary_units() -> None:
    # By hand: 1536 = 1.5 * 1024; 3 MiB = 3 * 2**20; 1.25 GiB = 5 * 2**28; below 1 KiB
    # the count stays in bytes; a count that rounds to 1024 of a unit moves up a unit.
    cases = {
        0: "0 B",
        512: "512 B",
        1023: "1023 B",
        1024: "1 KiB",
        1536: "1.5 KiB",
        1280: "1.25 KiB",
        3 * 2**20: "3 MiB",
        768 * 2**10: "768 KiB",
        5 * 2**28: "1.25 GiB",
        2**20 - 1: "1 MiB",
    }
    for nbytes, text in cases.items():
        assert byte_label(nbytes) == text, nbytes


def test_byte_axis_of_a_small_plan_reads_in_kib(tmp_path) -> None:
    # x (384 float32 = 1536 B) and sin(x) (1536 B) are both live at step 1 and no pass
    # aliases them, so arena = lower bound = 3072 B. The tick step is the power of two
    # at or above 3072 / 6 = 512, and the axis runs to 3072 * 1.05: seven ticks.
    g = tg.Graph("two")
    x = g.input("x", (384,), tg.float32)
    g.output(tg.sin(x))
    prog = tg.compile(g, passes=(), schedule="program")
    assert prog.plan.arena_size == 3072
    import matplotlib.pyplot as plt

    figure = timeline_figure(prog.plan, prog.graph)
    try:
        figure.canvas.draw()
        axes = figure.axes[0]
        labels = [t.get_text() for t in axes.get_yticklabels()]
        ticks = list(axes.get_yticks())
    finally:
        plt.close(figure)
    visible = [(t, text) for t, text in zip(ticks, labels, strict=True) if 0 <= t <= 3225.6]
    assert visible == [
        (0, "0 B"),
        (512, "512 B"),
        (1024, "1 KiB"),
        (1536, "1.5 KiB"),
        (2048, "2 KiB"),
        (2560, "2.5 KiB"),
        (3072, "3 KiB"),
    ]
    assert png_size(plot_timeline(prog.plan, prog.graph, tmp_path / "two.png")) == (1200, 600)


def test_plot_is_written_at_exactly_the_path_given(tmp_path) -> None:
    # matplotlib appends ".png" to a name without a suffix unless told the format.
    model = build_model("mlp", batch=2, features=8, hidden=8, layers=1, classes=2)
    prog = tg.compile(model.graph)
    path = plot_timeline(prog.plan, prog.graph, tmp_path / "timeline")
    assert path == tmp_path / "timeline"
    assert png_size(path) == (1200, 600)
    assert [p.name for p in tmp_path.iterdir()] == ["timeline"]


def test_every_op_category_has_its_own_colour() -> None:
    from tensorgraph.ir.ops import OPS
    from tensorgraph.planner.timeline import KIND_COLOURS

    categories = {op.category for op in OPS.values()}
    assert categories <= set(KIND_COLOURS)
    colours = [KIND_COLOURS[c] for c in categories]
    assert len(set(colours)) == len(colours)


@contextlib.contextmanager
def figure_of(plan: object, graph: tg.Graph, **options: object) -> Iterator[object]:
    """`timeline_figure(plan, graph, **options)`, drawn, closed on exit."""
    import matplotlib.pyplot as plt

    figure = timeline_figure(plan, graph, **options)
    try:
        figure.canvas.draw()
        yield figure
    finally:
        plt.close(figure)


def legend_labels(figure: object) -> list[str]:
    return [t.get_text() for t in figure.axes[1].get_legend().get_texts()]


def rectangles(axes: object) -> list[tuple[float, float, float, float]]:
    """(left, bottom, right, top) of every rectangle of the buffers' PatchCollection."""
    (collection,) = axes.collections
    boxes = []
    for path in collection.get_paths():
        (x0, y0), (x1, y1) = path.vertices.min(axis=0), path.vertices.max(axis=0)
        boxes.append((float(x0), float(y0), float(x1), float(y1)))
    return boxes


def params_first(count: int) -> tg.Graph:
    """`count` params declared before any compute node, then one add per param: the
    program order spends `count + 1` boundary steps before the first add."""
    g = tg.Graph("params_first")
    x = g.input("x", (64,), tg.float32)
    params = [g.param(f"p{i}", (64,), tg.float32) for i in range(count)]
    h = x
    for p in params:
        h = h + p
    g.output(h)
    return g


def test_x_axis_counts_compute_steps_with_boundary_nodes_at_the_left_edge() -> None:
    # mobilenet_v2's first 160 steps showed only its input: params took one step each.
    # Here 31 boundary steps come before 30 adds; the x axis has 30 compute steps and a
    # column left of 0 for what is loaded before them (the input x, 256 B).
    g = params_first(30)
    prog = tg.compile(g, passes=("dce", "cse", "view_alias"), schedule="program")
    assert len(prog.plan.liveness.steps) == 61
    with figure_of(prog.plan, prog.graph) as figure:
        axes = figure.axes[0]
        left, right = axes.get_xlim()
        labels = [t.get_text() for t in axes.get_xticklabels()]
        boxes = rectangles(axes)
    assert right == 30 and left < 0
    assert labels[0] == "in" and labels[1] == "0"
    # The input x is born before the first add and read by it: one rectangle from the
    # left column to x = 1. Each add's buffer starts at its own compute step.
    starts = sorted(box[0] for box in boxes)
    assert starts[0] == left and starts[1:] == list(range(30))
    x_box = next(box for box in boxes if box[0] == left)
    assert x_box[2] == 1 and x_box[3] - x_box[1] == 256


def test_the_curve_has_its_own_axis_and_peaks_at_the_lower_bound() -> None:
    model = build_model("mobilenet_v2")
    prog = tg.compile(model.graph)
    with figure_of(prog.plan, prog.graph) as figure:
        buffers, live = figure.axes
        assert buffers.get_lines()[0].get_linestyle() == "--"  # only the arena line
        (curve,) = live.get_lines()
        assert "live bytes" in live.get_ylabel()
        assert live.get_ylim() == buffers.get_ylim()
        assert max(curve.get_ydata()) == prog.plan.lower_bound
        assert curve.get_xdata()[-1] == buffers.get_xlim()[1]


def test_legend_lists_only_kinds_that_are_drawn() -> None:
    # x and sin(x) take 4 MiB each; the sum is 4 bytes, a thousandth of a pixel high:
    # drawn as nothing, so "reduction" is not in the legend.
    g = tg.Graph("tiny_reduction")
    x = g.input("x", (1024, 1024), tg.float32)
    y = tg.sin(x)
    g.output(y, tg.sum(y))
    prog = tg.compile(g)
    kinds = {OPS[prog.graph.node(owner(b.id)).op].category for b in prog.plan.buffers}
    assert kinds == {"boundary", "elementwise", "reduction"}
    with figure_of(prog.plan, prog.graph) as figure:
        labels = legend_labels(figure)
    assert labels[2:] == ["boundary", "elementwise"]
    assert labels[0].startswith("live bytes") and labels[1].startswith("arena")


def stateful() -> tg.Graph:
    """A decode-like step: a 64 KiB cache state updated in place at row `pos` with a
    4-row slab from x @ w (w a bound 1 KiB param)."""
    g = tg.Graph("stateful")
    cache = g.state("cache", (1, 4, 256, 16), tg.float32)
    x = g.input("x", (1, 4, 4, 16), tg.float32)
    pos = g.input("pos", (), tg.int32)
    w = g.param("w", (16, 16), tg.float32, np.eye(16, dtype=np.float32))
    new = tg.slice_update(cache, x @ w, 2, pos)
    g.update_state(cache, new)
    g.output(tg.sum(new, axis=2))
    return g


def test_state_and_constants_are_drawn_only_when_asked() -> None:
    prog = tg.compile(stateful())
    plan = prog.plan
    assert plan.state_size == 65536 and plan.constant_size == 1024
    with figure_of(plan, prog.graph) as figure:
        hidden_boxes = rectangles(figure.axes[0])
        hidden_top = figure.axes[0].get_ylim()[1]
        hidden_title = figure.axes[0].get_title()
        hidden_legend = legend_labels(figure)
    # Hidden: the arena's buffers only, on the arena's scale; the title says what is not
    # drawn.
    assert max(box[3] for box in hidden_boxes) <= plan.arena_size < 64 * 1024
    assert hidden_top <= 1.05 * max(plan.arena_size, plan.lower_bound)
    assert "not drawn" in hidden_title and "state region 64.00 KiB" in hidden_title
    assert not any("state" in label or "params" in label for label in hidden_legend)
    with figure_of(plan, prog.graph, show_state=True) as figure:
        shown_boxes = rectangles(figure.axes[0])
        texts = [t.get_text() for t in figure.axes[0].texts]
        shown_legend = legend_labels(figure)
    # Shown: one more bar for the cache (above the arena) and one for w (above the
    # state region), both over the whole run.
    extra = sorted(set(shown_boxes) - set(hidden_boxes), key=lambda box: box[1])
    assert [(box[1], box[3]) for box in extra] == [
        (plan.arena_size, plan.arena_size + 65536),
        (plan.arena_size + 65536, plan.arena_size + 65536 + 1024),
    ]
    assert "cache" in texts
    assert "state" in shown_legend and "params and constants" in shown_legend


def test_peak_buffers_are_labelled_by_their_op() -> None:
    model = build_model("llama")
    prog = tg.compile(model.graph)
    plan, graph = prog.plan, prog.graph
    with figure_of(plan, graph) as figure:
        texts = [t.get_text() for t in figure.axes[0].texts]
    peak = [b for b in plan.buffers if b.start <= plan.peak_step < b.end]
    # Every buffer live at the peak holding a tenth of the arena or more is tall enough
    # for a label; every label names a buffer live at the peak and the op making it.
    large = {f"%{b.id} {graph.node(b.id).op}" for b in peak if b.size * 10 >= plan.arena_size}
    assert len(large) >= 3 and large <= set(texts)
    for text in texts:
        node_id, op = text.removeprefix("ws ").removeprefix("%").split()
        assert any(owner(b.id) == int(node_id) for b in peak)
        assert graph.node(int(node_id)).op == op


def test_plot_state_on_the_command_line(tmp_path) -> None:
    from tensorgraph import cli

    path = tmp_path / "mlp.png"
    assert cli.main(["compile", "mlp", "--plot", str(path), "--plot-state"]) == 0
    assert png_size(path) == (1200, 600)


@settings(max_examples=10)  # a figure takes 0.2-0.7 s to lay out
@given(graph=graphs(), params_in_arena=st.booleans(), show_state=st.booleans())
def test_every_figure_draws_each_live_buffer_within_its_axes(
    graph, params_in_arena, show_state
) -> None:
    prog = tg.compile(graph, schedule="program", params_in_arena=params_in_arena)
    plan, graph = prog.plan, prog.graph
    order = plan.liveness.steps
    compute = [s for s, i in enumerate(order) if OPS[graph.node(i).op].category != "boundary"]
    first = compute[0] if compute else len(order)
    # A buffer is drawn when it is live at a compute step or loaded before the first.
    drawn = [
        b for b in plan.buffers if b.start < first or any(b.start <= s < b.end for s in compute)
    ]
    with figure_of(plan, graph, show_state=show_state) as figure:
        buffers, live = figure.axes
        boxes = rectangles(buffers)
        left, right = buffers.get_xlim()
        (curve,) = live.get_lines()
        legend = legend_labels(figure)
    segments = len(plan.liveness.constants) if show_state else 0
    assert len(boxes) == len(drawn) + segments
    assert right == max(len(compute), 1 if left == 0 else 0)
    for x0, y0, x1, y1 in boxes[: len(drawn)]:
        assert left <= x0 < x1 <= right and 0 <= y0 <= y1 <= plan.arena_size
    assert max(curve.get_ydata()) == plan.lower_bound
    kinds = {OPS[graph.node(owner(b.id)).op].category for b in drawn}
    assert set(legend[2:]) <= kinds | {"params and constants"}
