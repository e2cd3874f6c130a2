"""Who may import whom: the layers know nothing of devices or the engine; devices know the
layers, the IR and the errors, nothing of the engine, the scheduler, the format or the
passes (read from the sources' import statements)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.paths import REPO

#: graphexec modules each folder may import, beyond its own.
ALLOWED = {
    "layers": {"graphexec.errors", "graphexec.ir", "graphexec.dtypes"},
    "devices": {"graphexec.errors", "graphexec.ir", "graphexec.dtypes", "graphexec.layers"},
}
OWN = {"layers": "graphexec.layers", "devices": "graphexec.devices"}


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "graphexec":  # from graphexec import dtypes: the module named
                found.update(f"graphexec.{alias.name}" for alias in node.names)
            else:
                found.add(node.module)
    return {name for name in found if name == "graphexec" or name.startswith("graphexec.")}


@pytest.mark.parametrize("folder", sorted(ALLOWED))
def test_a_folder_imports_only_what_it_may(folder):
    allowed = ALLOWED[folder] | {OWN[folder]}
    for path in sorted((REPO / folder).rglob("*.py")):
        for name in _imports(path):
            assert any(name == ok or name.startswith(ok + ".") for ok in allowed), \
                f"{path.relative_to(REPO)} imports {name}"


def test_the_imports_are_read():  # the reader finds what a module really imports
    found = _imports(REPO / "devices" / "cpu" / "conv.py")
    assert "graphexec.layers.conv" in found and "graphexec.devices.cpu.kernel" in found
