"""docs/INTERFACES.md matches the code: every class and function it shows under a
`## tensorgraph.<module>` heading (or `## tensorgraph.<package>.<a>, <b> and <c>`)
exists in one of those modules, with the fields and parameters it lists, in that order
and of that kind (positional or keyword-only); and every file it names exists in the
repository. The documented names must be a subsequence of the real ones, so a parameter
added to the code without a line here is allowed, a renamed, removed or reordered one
is not (the attributes `view=True` and `inplace=k` it once described had left the IR
long before)."""

import ast
import importlib
import inspect
import re
from pathlib import Path

import attrs
import pytest

REPO = Path(__file__).resolve().parents[1]
DOC = (REPO / "docs" / "INTERFACES.md").read_text()


def sections() -> list[tuple[tuple[str, ...], str]]:
    """(module names, python source) of every python block under a module heading."""
    found = []
    for heading, body in re.findall(
        r"^## (tensorgraph\.[^\n]*)\n(.*?)(?=^## |\Z)", DOC, re.M | re.S
    ):
        # "tensorgraph.a.b, c and d (a note)": modules a.b, a.c and a.d
        names = re.split(r", | and ", heading.split(" (")[0])
        package = names[0].rsplit(".", 1)[0]
        modules = tuple(n if n.startswith("tensorgraph.") else f"{package}.{n}" for n in names)
        for block in re.findall(r"^```python\n(.*?)^```", body, re.M | re.S):
            found.append((modules, block))
    return found


def find(modules: tuple[str, ...], name: str) -> object:
    for module in modules:
        value = getattr(importlib.import_module(module), name, None)
        if value is not None:
            return value
    raise AssertionError(f"{name} is in none of {modules}")


def is_subsequence(documented: list, real: list) -> bool:
    rest = iter(real)
    return all(item in rest for item in documented)


def documented_parameters(function: ast.FunctionDef) -> list[tuple[str, str]]:
    args = function.args
    names = [(a.arg, "POSITIONAL_OR_KEYWORD") for a in args.args if a.arg != "self"]
    return names + [(a.arg, "KEYWORD_ONLY") for a in args.kwonlyargs]


def real_parameters(function: object) -> list[tuple[str, str]]:
    return [
        (p.name, p.kind.name)
        for p in inspect.signature(function).parameters.values()
        if p.name != "self"
    ]


def real_fields(cls: type) -> list[str]:
    if attrs.has(cls):
        return [f.name for f in attrs.fields(cls)]
    return list(inspect.get_annotations(cls))


SECTIONS = sections()


def test_the_document_shows_the_pipeline_modules() -> None:
    shown = {module for modules, _ in SECTIONS for module in modules}
    for module in ("planner.aliasing", "planner.liveness", "planner.plan", "runtime.arena"):
        assert f"tensorgraph.{module}" in shown


@pytest.mark.parametrize(("modules", "source"), SECTIONS, ids=lambda v: str(v)[:40])
def test_documented_signatures_match_the_code(modules, source) -> None:
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef):
            cls = find(modules, node.name)
            fields = [s.target.id for s in node.body if isinstance(s, ast.AnnAssign)]
            assert is_subsequence(fields, real_fields(cls)), (node.name, real_fields(cls))
            for method in (s for s in node.body if isinstance(s, ast.FunctionDef)):
                real = real_parameters(getattr(cls, method.name))
                assert is_subsequence(documented_parameters(method), real), method.name
        elif isinstance(node, ast.FunctionDef):
            real = real_parameters(find(modules, node.name))
            assert is_subsequence(documented_parameters(node), real), (node.name, real)


def test_named_files_exist() -> None:
    # It pointed at a DESIGN.md that is not in the repository.
    named = set(re.findall(r"[\w./-]+\.(?:md|py)\b", DOC))
    files = {p.relative_to(REPO).as_posix() for p in REPO.rglob("*") if ".git" not in p.parts}
    names = {Path(f).name for f in files}
    missing = sorted(n for n in named if n not in files and n not in names)
    assert missing == []
