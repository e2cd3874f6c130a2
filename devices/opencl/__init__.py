"""The OpenCL device: pyopencl contexts, command queues, buffers and one kernel family per
operator type. Nothing here imports pyopencl until a device is opened, so importing
:mod:`devices` (or this package) never needs it::

    from graphexec.devices.opencl import open_device
    device = open_device("opencl:gpu")            # or "opencl", "opencl:1", "opencl:pocl"
    x = device.upload(array, device.queues[0])
    (y,) = device.run(layer, [x], device.queues[0], wait_for=[x.event])
    out = device.download(y)

::

    open_device(spec) / list_devices()      selection.py   which device, clear errors
    OpenCLDevice                            device.py      context, queues, caches, run()
    ├── DeviceTensor                        device.py      buffer + offset, shape, dtype, event
    ├── ProgramCache                        programs.py    built once per context, binaries on disk
    ├── ops/                                one module per family, registered by layer class
    │   kernels/*.cl                        the OpenCL C sources
    └── replay.py                           device stretches recorded once and replayed
        replay_compiled.py, native.py       a stretch enqueued by one compiled call (jit extra)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from graphexec.devices.opencl.selection import DeviceInfo, list_devices, open_device

if TYPE_CHECKING:
    from graphexec.devices.opencl.device import DeviceTensor, OpenCLDevice

__all__ = ["DeviceInfo", "DeviceTensor", "OpenCLDevice", "list_devices", "open_device"]


def __getattr__(name: str) -> Any:
    # device.py needs no pyopencl at import either, but keep the package import minimal.
    if name in ("DeviceTensor", "OpenCLDevice"):
        from graphexec.devices.opencl import device

        return getattr(device, name)
    raise AttributeError(f"module 'graphexec.devices.opencl' has no attribute {name!r}")
