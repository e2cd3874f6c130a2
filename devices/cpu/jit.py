"""Whether compiled CPU kernels can run here: numba, from the ``jit`` extra."""

from __future__ import annotations

import importlib.util


def available() -> bool:
    """Whether numba is installed (it is imported only when a compiled kernel is made)."""
    return importlib.util.find_spec("numba") is not None
