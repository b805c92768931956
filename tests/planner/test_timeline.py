"""The timeline plot is a real PNG of the requested size, for a zoo model and for a
2,000-buffer plan, and a missing matplotlib is reported with the way to install it."""

import struct
import sys
from pathlib import Path

import pytest

import tensorgraph as tg
from tensorgraph.models import build_model
from tensorgraph.planner.timeline import plot_timeline

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
