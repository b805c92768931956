"""The package's import graph runs down the pipeline (STYLE.md, section 1): the IR
imports only the errors; the oracles (runtime/) never import the backend they judge
nor the driver; the planner, the passes and the backend never import the driver; the
importers build graphs from the IR, not through the package face (`import tensorgraph`
pulls in the driver and the backends). Every import counts, a lazy one inside a
function or one under `TYPE_CHECKING` included: a lazy import is still a dependency."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "tensorgraph"
# The driver's modules, those split out of compiler.py and cli.py included (what they
# hold was the driver's before the split, and no lower layer may import it now either).
DRIVER = {
    "compiler",
    "compile_options",
    "program",
    "multi",
    "program_io",
    "cli",
    "cli_args",
    "cli_generate",
    "cli_generate_models",
    "cli_plan_csv",
    "cli_precision",
    "cli_zoo",
    "calls",
}
# layer -> the layers of ours it may not import ("face" is `tensorgraph` itself)
FORBIDDEN = {
    "ir": {"face", "passes", "planner", "runtime", "codegen_mlx", "importers", "models", "nn"}
    | DRIVER,
    "nn": {"face", "passes", "planner", "runtime", "codegen_mlx", "importers", "models"} | DRIVER,
    "passes": {"face", "planner", "codegen_mlx", "importers", "models"} | DRIVER,
    "planner": {"face", "codegen_mlx", "importers", "models"} | DRIVER,
    "runtime": {"face", "codegen_mlx", "importers", "models"} | DRIVER,
    "codegen_mlx": {"face", "importers", "models"} | DRIVER,
    "importers": {"face", "planner", "runtime", "codegen_mlx", "models"} | DRIVER,
}


def _layer(module: str) -> str | None:
    """The layer of a dotted module name of ours (None for other packages)."""
    parts = module.split(".")
    if parts[0] != "tensorgraph":
        return None
    return "face" if len(parts) == 1 else parts[1]


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute import in `path`, at any depth."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
            # `from tensorgraph import compiler` names a layer in the imported names
            if node.module == "tensorgraph":
                found += [(node.lineno, f"tensorgraph.{a.name}") for a in node.names]
    return sorted(found)


def _violations(layer: str) -> list[str]:
    bad = []
    for path in sorted((PACKAGE / layer).rglob("*.py")):
        for line, module in _imports(path):
            target = _layer(module)
            if target in FORBIDDEN[layer]:
                bad.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {module}")
    return bad


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_run_down_the_pipeline(layer: str) -> None:
    assert _violations(layer) == []


def test_the_check_sees_lazy_and_type_checking_imports(tmp_path: Path) -> None:
    """The rule's own check: a lazy import inside a function and one under
    TYPE_CHECKING are both found."""
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from tensorgraph.compiler import Program\n"
        "def f():\n    from tensorgraph.codegen_mlx import run_mlx\n"
        "import tensorgraph as tg\n"
    )
    layers = [_layer(module) for _, module in _imports(source)]
    assert layers == [None, "compiler", "codegen_mlx", "face"]
