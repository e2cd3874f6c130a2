"""Choosing an OpenCL device from a spec string.

=================  ============================================================
``"opencl"``       the first GPU of any platform, else the first device
``"opencl:1"``     device 1, counting every device of every platform in order
``"opencl:gpu"``   the first device of that type (``gpu``, ``cpu``, ``accelerator``)
``"opencl:pocl"``  the first device whose platform, vendors or name contain the word
=================  ============================================================

Nothing matching, pyopencl missing, or no OpenCL platform at all: a :class:`DeviceError`
that says which, and lists the devices there are.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphexec.devices.opencl._runtime import INSTALL_HINT, load_pyopencl, translated
from graphexec.errors import DeviceError

if TYPE_CHECKING:
    from graphexec.devices.opencl.device import OpenCLDevice

_TYPE_WORDS = {"gpu": "GPU", "cpu": "CPU", "accelerator": "ACCELERATOR", "acc": "ACCELERATOR"}


@dataclass(frozen=True)
class DeviceInfo:
    """One OpenCL device as :func:`list_devices` finds it."""

    index: int
    platform: str
    platform_vendor: str
    vendor: str
    name: str
    type: str  # "GPU", "CPU", "ACCELERATOR", ... (pyopencl's device_type names, "|"-joined)
    version: str
    handle: Any = None  # the pyopencl.Device

    def __str__(self) -> str:
        return f"opencl:{self.index}  {self.name} ({self.type}, {self.platform})"


def list_devices() -> list[DeviceInfo]:
    """Every device of every OpenCL platform, numbered in order (empty: no platform).

    Raises DeviceError when pyopencl is missing.
    """
    cl = load_pyopencl()
    try:
        platforms = cl.get_platforms()
    except cl.Error:  # PLATFORM_NOT_FOUND_KHR: the loader found no installed platform
        return []
    found: list[DeviceInfo] = []
    for platform in platforms:
        try:
            devices = platform.get_devices()
        except cl.Error:  # a platform with no devices says DEVICE_NOT_FOUND
            continue
        for device in devices:
            found.append(DeviceInfo(
                index=len(found),
                platform=platform.name.strip(),
                platform_vendor=platform.vendor.strip(),
                vendor=device.vendor.strip(),
                name=device.name.strip(),
                type=cl.device_type.to_string(device.type),
                version=device.version.strip(),
                handle=device,
            ))
    return found


def _describe(devices: list[DeviceInfo]) -> str:
    return "; ".join(str(d) for d in devices)


def select(spec: str | int | None, devices: list[DeviceInfo]) -> DeviceInfo:
    """The device ``spec`` names among ``devices`` (an int is an index, as in
    ``opencl:<index>``); DeviceError listing them otherwise."""
    if isinstance(spec, int) and not isinstance(spec, bool):
        spec = f"opencl:{spec}"
    if spec is not None and not isinstance(spec, str):
        raise DeviceError(f"an OpenCL device spec is a string or an index, given {type(spec).__name__} {spec!r}")
    text = "opencl" if spec is None else spec.strip()
    head, _, rest = text.partition(":")
    if head.lower() != "opencl":
        raise DeviceError(f"{spec!r} is not an OpenCL device spec: expected 'opencl', 'opencl:<index>' "
                          "or 'opencl:<name or type>'")
    if not devices:
        raise DeviceError(f"no OpenCL device: no OpenCL platform is installed ({INSTALL_HINT})")
    rest = rest.strip()
    if not rest:
        gpus = [d for d in devices if "GPU" in d.type]
        return (gpus or devices)[0]
    if rest.isdigit():
        index = int(rest)
        if index >= len(devices):
            raise DeviceError(f"there is no OpenCL device {index} ({len(devices)} device(s): "
                              f"{_describe(devices)})")
        return devices[index]
    word = rest.lower()
    if word in _TYPE_WORDS:
        matches = [d for d in devices if _TYPE_WORDS[word] in [t.strip() for t in d.type.split("|")]]
    else:
        matches = [d for d in devices
                   if word in f"{d.platform} {d.platform_vendor} {d.vendor} {d.name}".lower()]
    if not matches:
        raise DeviceError(f"no OpenCL device matches {rest!r}; there are: {_describe(devices)}")
    return matches[0]


def open_device(
    spec: str | int | None = None,
    *,
    queues: int = 2,
    cache_dir: str | Path | None | bool = None,
    profiling: bool = False,
    enqueue: str = "auto",
) -> OpenCLDevice:
    """Open the OpenCL device ``spec`` names (see the module doc) with ``queues`` in-order
    command queues.

    ``cache_dir``: where built program binaries are kept between processes (default
    ``~/.cache/graphexec/opencl``, or under ``$XDG_CACHE_HOME``, except on PoCL, which
    keeps its own; ``True``: there on every driver); ``False`` keeps them in memory only.
    ``profiling`` enables event timestamps on the queues. ``enqueue``: how replayed
    stretches reach the queues, ``"compiled"`` (one numba call a stretch, the ``jit``
    extra), ``"python"`` (a pyopencl call a command) or ``"auto"`` (compiled where numba
    is installed).
    """
    from graphexec.devices.opencl.device import OpenCLDevice

    if queues < 1:
        raise DeviceError(f"queues={queues}: an OpenCL device needs at least one command queue")
    info = select(spec, list_devices())
    with translated(f"opening OpenCL device {info.name}"):
        return OpenCLDevice(info, queues=queues, cache_dir=cache_dir, profiling=profiling, enqueue=enqueue)
