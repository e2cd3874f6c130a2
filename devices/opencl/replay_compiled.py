"""A bound stretch enqueued by one compiled call: the replay's loop without Python.

Through pyopencl, each command of a replayed stretch costs the host a Python call, the
binding's conversions and an event object, made and later released, whether anything
waits on it or not. Here a bound stretch (:class:`~graphexec.devices.opencl.replay._Bound`)
becomes a table of handles, sizes and offsets, and a numba loop
(``graphexec.devices.cpu.jit._loops_enqueue``) calls the OpenCL library's enqueue
functions at their addresses (:mod:`graphexec.devices.opencl.native`) for the whole
stretch: the same commands, waits and flushes in the same order. A command gets an event
only where another queue waits on it or the stretch exports what it makes; while
launches are collected (profiling) every command gets one.

It needs the ``jit`` extra (numba); without it, or with ``enqueue="python"``, the replay
enqueues through pyopencl as before (:meth:`~graphexec.devices.opencl.replay.BoundReplay.run`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from loguru import logger

from graphexec.devices.opencl.native import entry_points, status_name
from graphexec.errors import DeviceError

if TYPE_CHECKING:
    from graphexec.devices.opencl.device import OpenCLDevice
    from graphexec.devices.opencl.replay import _Bound


def available() -> bool:
    """Whether stretches can be enqueued by the compiled loop here (numba is installed)."""
    from graphexec.devices.cpu import jit

    return jit.available()


ENQUEUE_MODES = ("auto", "compiled", "python")


def enqueue_mode(asked: str) -> str:
    """How a device enqueues its replayed stretches: ``"compiled"`` where asked, or for
    ``"auto"`` where numba is installed and the OpenCL library can be called directly
    (see the module doc); else ``"python"``."""
    if asked not in ENQUEUE_MODES:
        raise DeviceError(f"enqueue={asked!r}: expected one of {', '.join(map(repr, ENQUEUE_MODES))}")
    if asked == "python":
        return asked
    if not available():
        if asked == "compiled":
            raise DeviceError('enqueue="compiled" needs numba: pip install "graphexec[jit]"')
        return "python"
    try:
        entry_points()
    except DeviceError as exc:
        if asked == "compiled":
            raise
        logger.debug("replayed stretches enqueue through pyopencl: {}", exc)
        return "python"
    return "compiled"


def _loop() -> Callable[..., None]:
    """The compiled loop, ready for the table's types (compiled once, then cached on disk)."""
    from graphexec.devices.cpu.jit import _loops_enqueue as layout
    from graphexec.devices.cpu.jit.compiler import ready

    ints, table = np.zeros(1, np.int64), np.zeros((1, layout.COLUMNS), np.int64)
    return ready("enqueue", "enqueue", ints, table, ints, ints, ints, ints, ints, False, ints)


def kernel_row(table: np.ndarray, sizes: np.ndarray, i: int, kernel: Any, global_size: Sequence[int],
               local_size: Sequence[int] | None) -> None:
    """Row ``i`` of ``table``: a launch of ``kernel`` over ``global_size`` in groups of
    ``local_size`` (None: the driver's choice), its sizes kept in row ``i`` of ``sizes``
    (``size_t``: global, then local) for the loop to pass by address."""
    from graphexec.devices.cpu.jit import _loops_enqueue as layout

    sizes[i, :len(global_size)] = global_size
    table[i, [layout.KIND, layout.A, layout.B, layout.C]] = (layout.KERNEL, kernel.int_ptr, len(global_size),
                                                            sizes.ctypes.data + sizes.strides[0] * i)
    if local_size is not None:
        sizes[i, 3:3 + len(local_size)] = local_size
        table[i, layout.D] = sizes.ctypes.data + sizes.strides[0] * i + 3 * sizes.itemsize


class CompiledStretch:
    """One bound stretch as the compiled loop's table (see the module doc); serves one run
    at a time, as its arena does."""

    def __init__(self, device: OpenCLDevice, bound: _Bound):
        from graphexec.devices.cpu.jit import _loops_enqueue as layout  # the table's columns and codes
        from graphexec.devices.opencl.replay import COPY, KERNEL

        self.device = device
        self.bound = bound
        self._calls = np.array(entry_points().addresses, np.int64)
        self._enqueue = _loop()
        imports = len(bound.imports)
        program = bound.program
        waited = {w for *_, waits, _ in program for w in waits}
        exported = {event for _, _, made_by, _ in bound.exports for event in made_by}
        table = np.zeros((len(program), layout.COLUMNS), np.int64)
        self._sizes = sizes = np.zeros((len(program), 6), np.uint64)  # size_t global, then local sizes
        waits: list[int] = []
        flushes: list[int] = []
        self._writes: list[tuple[str, np.ndarray]] = []
        for i, (kind, queue, kernel, what, command_waits, command_flushes) in enumerate(program):
            row = table[i]
            row[layout.QUEUE] = queue.int_ptr
            if kind is KERNEL:
                kernel_row(table, sizes, i, kernel, *what)
            elif kind is COPY:
                src, dst, nbytes, src_offset, dst_offset = what
                row[[layout.KIND, layout.A, layout.B, layout.C, layout.D, layout.E]] = (
                    layout.COPY, src.int_ptr, dst.int_ptr, src_offset, dst_offset, nbytes)
            else:
                source, staging, buffer, offset = what
                self._writes.append((source, staging))
                row[[layout.KIND, layout.A, layout.B, layout.C, layout.D]] = (
                    layout.WRITE, buffer.int_ptr, offset, staging.nbytes, staging.ctypes.data)
            row[layout.WAIT_START], row[layout.WAIT_COUNT] = len(waits), len(command_waits)
            waits.extend(command_waits)
            row[layout.EVENT] = (layout.KEPT if imports + i in exported else
                                 layout.RELEASED if imports + i in waited else layout.NO_EVENT)
            row[layout.FLUSH_START], row[layout.FLUSH_COUNT] = len(flushes), len(command_flushes)
            flushes.extend(q.int_ptr for q in command_flushes)
        self._table = table
        self._waits = np.array(waits or [0], np.int64)
        self._flushes = np.array(flushes or [0], np.int64)
        self._final = np.array([q.int_ptr for q in bound.flush], np.int64)
        self._slots = np.zeros(imports + len(program), np.int64)
        self._wait_list = np.zeros(max([len(w) for *_, w, _ in program] + [1]), np.int64)
        self._failed = np.zeros(2, np.int64)
        #: Command indices whose events the caller takes: the exported ones.
        self._kept = sorted(e for e in exported if e >= imports)

    def run(self, values: dict[str, Any], every_event: bool) -> list[Any]:
        """Enqueue the stretch after its imports (read from ``values``): the events of the
        imports and commands, by index, where a command made one (None elsewhere; all of
        them where ``every_event``). Raises the failing command's index and status as
        :class:`CommandFailed`."""
        bound = self.bound
        cl = self.device._cl
        slots = self._slots
        imported = [values[name].event for name in bound.imports]
        for k, event in enumerate(imported):
            slots[k] = 0 if event is None else event.int_ptr
        for source, staging in self._writes:  # the run's values, taken before the copy is enqueued
            np.copyto(staging, values[source])
        failed = self._failed
        with self.device.host_calls:
            self._enqueue(self._calls, self._table, self._waits, self._flushes, self._final, slots,
                          self._wait_list, every_event, failed)
        if failed[0] >= 0:
            raise CommandFailed(int(failed[0]), int(failed[1]))
        events: list[Any] = imported + [None] * len(self._table)
        base = len(imported)
        owned = range(base, len(slots)) if every_event else self._kept
        for index in owned:  # the loop's references, handed to event objects that release them
            events[index] = cl.Event.from_int_ptr(int(slots[index]), retain=False)
        return events


class CommandFailed(DeviceError):
    """The compiled loop's command ``index`` (the stretch's length: its final flushes)
    returned OpenCL status ``status``."""

    def __init__(self, index: int, status: int):
        super().__init__(status_name(status))
        self.index = index
        self.status = status
