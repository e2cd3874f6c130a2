"""``graphexec.layers`` and ``graphexec.devices`` wherever graphexec is imported from.

The repository keeps ``layers/`` and ``devices/`` beside ``graphexec/``; the wheel puts them
inside it (``pyproject.toml`` maps the folders). In a source checkout (the repository root on
``sys.path``, or ``pip install -e .``) :func:`install` adds a finder that resolves exactly
these two names to the sibling folders, so code imports them by one name everywhere and
there is one operator registry. A user's own top-level ``layers`` or ``devices`` package is
never looked at, nor shadowed.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from pathlib import Path

#: The subpackages that live beside ``graphexec/`` in the repository.
SUBPACKAGES = ("layers", "devices")


class _SiblingFinder(importlib.abc.MetaPathFinder):
    """Finds ``graphexec.<name>`` in ``<root>/<name>`` for the names of :data:`SUBPACKAGES`;
    their own submodules are then found through the package's ``__path__`` as usual."""

    def __init__(self, root: Path):
        self.root = root

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        package, _, name = fullname.partition(".")
        if package != "graphexec" or name not in SUBPACKAGES:
            return None
        folder = self.root / name
        return importlib.util.spec_from_file_location(
            fullname, folder / "__init__.py", submodule_search_locations=[str(folder)])


def install() -> None:
    """Add the finder when graphexec runs from a source checkout (nothing in a wheel)."""
    here = Path(__file__).resolve().parent
    if all((here / name).is_dir() for name in SUBPACKAGES):
        return  # installed from the wheel: the subpackages are real folders of graphexec
    root = here.parent
    if not all((root / name / "__init__.py").is_file() for name in SUBPACKAGES):
        return
    if not any(isinstance(finder, _SiblingFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _SiblingFinder(root))
