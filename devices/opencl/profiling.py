"""A node's span on an OpenCL command queue, for a trace of the run.

The span is recorded while the run enqueues (the node's first and last commands) and
resolved after the run, when the commands are done. With profiling queues
(``open_device(..., profiling=True)``) it is the first command's START to the last one's
END, read from the events and moved onto the host's ``perf_counter_ns`` clock by the offset
:meth:`~graphexec.devices.opencl.device.OpenCLDevice.clock_offset_ns` measures. Without profiling
the events hold no timestamps, so the span is when the host enqueued the node: it shows
which queue ran what, not how long the kernels took (``timing`` says which of the two).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from graphexec.devices.opencl._runtime import translated
from graphexec.devices.base import Span

if TYPE_CHECKING:
    from graphexec.devices.opencl.device import OpenCLDevice

#: ``QueueSpan.timing`` values.
PROFILED = "opencl event profiling"
ENQUEUED = "host enqueue times"


def queue_lane(queue: int) -> str:
    """The trace lane (thread name) of command queue ``queue``."""
    return f"opencl queue {queue}"


@dataclass(frozen=True)
class QueueSpan:
    """One node's commands on one queue, until :meth:`resolve` turns it into a Span."""

    device: OpenCLDevice
    node: int
    name: str
    type: str
    queue: int
    first: Any  # pyopencl.Event
    last: Any  # pyopencl.Event
    host_start_ns: int
    host_end_ns: int

    @property
    def profiled(self) -> bool:
        return self.device.profiling

    @property
    def timing(self) -> str:
        return PROFILED if self.profiled else ENQUEUED

    def resolve(self) -> Span:
        """The span on the host clock (waits for the node's last command)."""
        lane = queue_lane(self.queue)
        if not self.device.profiling:
            return Span(self.node, self.name, self.type, lane, self.host_start_ns, self.host_end_ns)
        with translated(f"reading the profile of {self.name} ({self.type}) on {self.device.name}"):
            self.last.wait()
            start, end = int(self.first.profile.start), int(self.last.profile.end)
        offset = self.device.clock_offset_ns()
        return Span(self.node, self.name, self.type, lane, start + offset, max(start, end) + offset)
