"""README.md as a newcomer follows it on a fresh clone: every fenced ```python block runs
as written, every `tensorgraph ...` line of a ```bash block runs and exits 0, and every
repository path the README names exists in the repository.

Each Python block runs alone, in a fresh namespace and an empty temporary folder as the
current directory (files it saves land there): a reader may copy any one block without
the others, so no block may lean on names or files from another. Command lines run
through `tensorgraph.cli.main` from a temporary folder too (their outputs land there),
with the repository paths they name made absolute, as run from the clone's root."""

import re
from pathlib import Path

import pytest

from tensorgraph import cli

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
# Options whose value is a file the command writes, not one it reads.
OUTPUT_OPTIONS = ("--plot", "--json", "--out")


def fenced(language: str) -> list[str]:
    """The bodies of README's ```language blocks, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```", README, re.MULTILINE | re.DOTALL)


def command_lines() -> list[list[str]]:
    """The arguments of every `tensorgraph ...` line of a bash block (comments cut)."""
    commands = []
    for block in fenced("bash"):
        for line in block.splitlines():
            words = line.split("#", 1)[0].split()
            if words[:1] == ["tensorgraph"]:
                commands.append(words[1:])
    return commands


def is_path(word: str) -> bool:
    return "/" in word or Path(word).suffix in (".csv", ".tgp", ".json", ".png", ".py", ".md")


def read_paths(args: list[str]) -> list[str]:
    """The path-like arguments a command reads (the values of OUTPUT_OPTIONS excluded)."""
    return [
        word
        for before, word in zip(["", *args[:-1]], args, strict=True)
        if before not in OUTPUT_OPTIONS and not word.startswith("-") and is_path(word)
    ]


PYTHON_BLOCKS = fenced("python")


def test_the_readme_has_the_blocks_this_file_runs() -> None:
    blocks = "the tour, the torch import, generation, quantization, training, symbolic dims"
    assert len(PYTHON_BLOCKS) == 6, blocks
    assert len(command_lines()) >= 6


@pytest.mark.parametrize("index", range(len(PYTHON_BLOCKS)))
def test_python_block_runs_as_written(index, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    code = compile(PYTHON_BLOCKS[index], f"README.md python block {index + 1}", "exec")
    exec(code, {"__name__": f"readme_block_{index + 1}"})


def test_command_examples_name_files_of_the_repository() -> None:
    # The plan-csv example pointed at ../shared/bench/..., which a clone does not have.
    named = [path for args in command_lines() for path in read_paths(args)]
    assert "examples/llama_decode_buffers.csv" in named
    missing = [path for path in named if not (REPO / path).is_file()]
    assert missing == []


def test_repository_paths_in_the_text_exist() -> None:
    # Every `folder/file.ext` or `.ci/run` written in backticks is a path of the clone.
    quoted = re.findall(r"`(\.?[\w.-]+(?:/[\w.-]+)+)`", README)
    assert "examples/llama_decode_buffers.csv" in quoted and ".ci/run" in quoted
    missing = [path for path in quoted if not (REPO / path).exists()]
    assert missing == []


@pytest.mark.parametrize("args", command_lines(), ids=lambda args: " ".join(args[:2]))
def test_command_example_runs(args, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    absolute = [str(REPO / w) if w in read_paths(args) else w for w in args]
    assert cli.main(absolute) == 0, capsys.readouterr().err
    if args[0] == "plan-csv":  # the arenas the README states for the example
        arena = "723,968" if "greedy_size" in args else "662,544"
        out = capsys.readouterr().out
        assert arena in out and "662,544" in out
