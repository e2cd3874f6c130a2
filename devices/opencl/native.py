"""The OpenCL library's own entry points, by address, for loops that enqueue without Python.

pyopencl wraps each call in Python objects: a launch returns an :class:`Event` whether
anyone waits on it or not, and the event is released when the object dies. A replayed
stretch needs neither (see :mod:`graphexec.devices.opencl.replay_compiled`): it calls
``clEnqueueNDRangeKernel`` and its kin directly, from compiled code, with the handles
pyopencl's objects hold (``int_ptr``). The library is the one pyopencl itself loaded (its
wheel carries an ICD loader of its own), found among the process's mapped files; any
loader would do, since every OpenCL object carries its own driver's dispatch table, so
the system's is the fallback.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
from dataclasses import dataclass

from graphexec.devices.opencl._runtime import load_pyopencl
from graphexec.errors import DeviceError

#: The functions the compiled loop calls, in :attr:`EntryPoints.addresses`' order.
NAMES = ("clEnqueueNDRangeKernel", "clEnqueueCopyBuffer", "clEnqueueWriteBuffer", "clFlush", "clReleaseEvent")


@dataclass(frozen=True)
class EntryPoints:
    """Where the OpenCL functions a loop calls live in this process."""

    library: str
    addresses: tuple[int, ...]


@functools.lru_cache(maxsize=1)
def entry_points() -> EntryPoints:
    """The addresses of :data:`NAMES` in the OpenCL library pyopencl uses (DeviceError
    where no such library can be opened)."""
    load_pyopencl()
    import pyopencl._cl  # noqa: F401  (maps its library into the process)

    path = _mapped_library() or ctypes.util.find_library("OpenCL")
    if path is None:
        raise DeviceError("the OpenCL library pyopencl loaded cannot be found in this process")
    try:
        library = ctypes.CDLL(path)
        addresses = tuple(ctypes.cast(getattr(library, name), ctypes.c_void_p).value or 0 for name in NAMES)
    except (OSError, AttributeError) as exc:
        raise DeviceError(f"the OpenCL library {path} cannot be called directly: {exc}") from exc
    return EntryPoints(path, addresses)


def _mapped_library() -> str | None:
    """The path of the OpenCL library mapped into this process (Linux), else None."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                path = line.split(maxsplit=5)[-1].strip()
                if os.path.basename(path).startswith("libOpenCL") and os.path.exists(path):
                    return path
    except OSError:
        return None
    return None


def status_name(status: int) -> str:
    """An OpenCL error code as its name (``CL_OUT_OF_RESOURCES``), as pyopencl spells them."""
    cl = load_pyopencl()
    for name in dir(cl.status_code):
        if not name.startswith("_") and getattr(cl.status_code, name) == status:
            return f"CL_{name}"
    return f"OpenCL error {status}"
