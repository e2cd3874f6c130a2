"""The edge between graphexec and pyopencl: importing it, and translating its errors.

pyopencl is imported here and only when a device is asked for, so a CPU user without it
never notices; every pyopencl failure reaching a caller is a :class:`DeviceError`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType

from graphexec.errors import DeviceError

INSTALL_HINT = "pip install 'graphexec[opencl]' (pyopencl, and pocl-binary-distribution for a CPU device)"


def load_pyopencl() -> ModuleType:
    """The pyopencl module, or a DeviceError saying how to install it."""
    try:
        import pyopencl
    except ImportError as exc:
        raise DeviceError(f"the OpenCL device needs pyopencl, which cannot be imported ({exc}): "
                          f"{INSTALL_HINT}") from exc
    except OSError as exc:  # the OpenCL loader library itself is missing or broken
        raise DeviceError(f"pyopencl is installed but cannot load OpenCL ({exc})") from exc
    return pyopencl


@contextmanager
def translated(where: str | Callable[[], str]) -> Iterator[None]:
    """Re-raise pyopencl's errors (and out-of-memory) as DeviceError naming ``where`` (a
    callable is asked only on failure, so it may name what was being done at that moment)."""
    cl = load_pyopencl()
    try:
        yield
    except DeviceError:
        raise
    except cl.Error as exc:
        text = where() if callable(where) else where
        raise DeviceError(f"{text}: {type(exc).__name__}: {exc}") from exc
