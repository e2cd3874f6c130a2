"""Optional dependencies, imported only when a job asks for them."""

from __future__ import annotations

import importlib
from types import ModuleType

from graphexec.errors import MissingExtraError


def require(module: str, extra: str, what: str) -> ModuleType:
    """``module`` imported, or an error that says which extra to install for ``what``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(f"{what} needs {module}, which is not installed: "
                                f'pip install "graphexec[{extra}]"') from exc
