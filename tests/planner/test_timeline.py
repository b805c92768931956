"""The timeline plot is a real PNG of the requested size, for a zoo model and for a
2,000-buffer plan, its byte axis reads in binary units, and a missing matplotlib is
reported with the way to install it."""

import struct
import sys
from pathlib import Path

import pytest

import tensorgraph as tg
from tensorgraph.models import build_model
from tensorgraph.planner.timeline import byte_label, plot_timeline, timeline_figure

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
        (axes,) = figure.axes
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
