"""Where nodes run: the Device interface (:mod:`~graphexec.devices.base`) and its
implementations, ``cpu`` (numpy kernels, compiled ones with the jit extra; the backup
device that runs everything), ``opencl`` (loaded only when asked for) and ``null``
(computes nothing; for tests).

:func:`resolve` turns what a user passes as ``Engine.load(..., device=...)`` into the
device nodes are placed on beside the CPU (None: the CPU alone); pyopencl is imported only
when an OpenCL device is asked for.
"""

from __future__ import annotations

if __name__ != "graphexec.devices":
    raise ImportError(f"import graphexec.devices, not {__name__}")

from typing import Any

from graphexec.devices.base import Device, Hints, Kernel, Piece
from graphexec.errors import DeviceError

SPEC_HELP = "'cpu', 'opencl', 'opencl:<index>', 'opencl:gpu' or 'opencl:<name filter>'"


def resolve(device: Any) -> Device | None:
    """None for the CPU alone; an opened device for an ``opencl[:...]`` spec; a Device (an
    opened OpenCLDevice, a NullDevice) as it is."""
    if device is None:
        return None
    if isinstance(device, str):
        text = device.strip()
        if text.lower() == "cpu":
            return None
        if text.lower().partition(":")[0] == "opencl":
            from graphexec.devices.opencl import open_device

            return open_device(text)
        raise DeviceError(f"unknown device {device!r}: expected {SPEC_HELP}, or an opened device")
    if isinstance(device, Device):
        return None if device.kind == "cpu" else device
    raise DeviceError(f"device={device!r} is neither a device spec ({SPEC_HELP}) nor an opened device")


def is_device(device: Any) -> bool:
    """Whether ``device`` names or is something other than the CPU (no device is opened)."""
    if device is None:
        return False
    if isinstance(device, Device):
        return device.kind != "cpu"
    return not (isinstance(device, str) and device.strip().lower() == "cpu")


__all__ = ["SPEC_HELP", "Device", "DeviceError", "Hints", "Kernel", "Piece", "is_device", "resolve"]
