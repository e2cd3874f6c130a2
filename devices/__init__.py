"""Where tensors live and how a node runs there: ``cpu`` (numpy, the reference) and, loaded
only when asked for, ``opencl``.

:func:`resolve` turns what a user passes as ``Engine.load(..., device=...)`` into a device
object (None for the CPU); pyopencl is imported only when an OpenCL device is asked for.
"""

from __future__ import annotations

if __name__ != "graphexec.devices":
    raise ImportError(f"import graphexec.devices, not {__name__}")

from typing import Any

from graphexec.errors import DeviceError

SPEC_HELP = "'cpu', 'opencl', 'opencl:<index>', 'opencl:gpu' or 'opencl:<name filter>'"


def resolve(device: Any) -> Any:
    """None for the CPU; an opened device for an ``opencl[:...]`` spec; an already opened
    device (anything with ``run``, ``upload``, ``download`` and ``queues``) as it is."""
    if device is None:
        return None
    if isinstance(device, str):
        text = device.strip()
        if text.lower() == "cpu":
            return None
        if text.lower().partition(":")[0] == "opencl":
            from graphexec.devices.opencl import open_device

            return open_device(text)
        raise DeviceError(f"unknown device {device!r}: expected {SPEC_HELP}, or an opened OpenCLDevice")
    if all(hasattr(device, a) for a in ("run", "upload", "download", "queues", "supports")):
        return device
    raise DeviceError(f"device={device!r} is neither a device spec ({SPEC_HELP}) nor an opened device")


def is_device(device: Any) -> bool:
    """Whether ``device`` names or is something other than the CPU (no device is opened)."""
    if device is None:
        return False
    return not (isinstance(device, str) and device.strip().lower() == "cpu")
