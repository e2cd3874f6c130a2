"""How busy the cores are, as a run starts: the runs already in flight in this process, and
the load other processes put on the cores this process may use.

An engine that chose its own threads (:mod:`graphexec.threads`) runs on several only where
they are really free. Threads the machine cannot give slow a run down rather than speed it
up: a worker waits for a core, a BLAS thread spins while its partner is descheduled, and
a run that should take 10 ms took 30-300 ms at a load average of 6-10 on 2 cores. So each
run of such an engine is counted (:meth:`Occupancy.run`), then asks :meth:`Occupancy.room_for`
and, where the cores are taken, runs as ``threads=1, intra_op_threads=1`` would.

Other processes' load is read from ``/proc/stat`` (the busy time of the CPUs this
process may use) less this process's own CPU time, over the time since the last reading,
at most every :data:`SAMPLE_SECONDS`. A reading older than :data:`STALE_SECONDS` tells of
the past, not of now (a server idle between requests while its neighbours worked, or the
reverse): then, as before a first interval is over, the threads runnable at this moment
(``/proc/loadavg``) less this process's own say it; and where neither file is, the load
average. Runs in flight are counted here by every engine of
the process, whether it adapts or not.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

#: The shortest interval over which other processes' load is measured (``/proc/stat``
#: counts in ticks of 10 ms: over 0.1 s on 2 CPUs, to 5% of a core).
SAMPLE_SECONDS = 0.1
#: How much of a core other processes may take, beyond the cores the engine leaves free,
#: before it runs on one thread.
SPARE_CORE = 0.3
#: A busy-time reading older than this is not taken as the load of now.
STALE_SECONDS = 1.0
#: The threads runnable now are read up to this many times, this far apart, while they
#: include other processes' threads, and the fewest count: a thread runnable for some
#: microseconds as a call arrives (the process that sent it, on its way to wait for the
#: answer, or one of this process's own between two states) is not load
#: (docs/design/threads.md, "Compiled parts").
NOW_READINGS = 3
NOW_GAP_SECONDS = 50e-6

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class Occupancy:
    """The process's view of its cores (one per process: :func:`occupancy`)."""

    def __init__(self, stat_path: str = "/proc/stat", loadavg_path: str = "/proc/loadavg",
                 tasks_path: str = "/proc/self/task"):
        self.stat_path = stat_path
        self.loadavg_path = loadavg_path
        self.tasks_path = tasks_path
        self._lock = threading.Lock()
        #: Runs in flight in this process (every engine's).
        self.running = 0
        #: When a run last started while another was in flight (monotonic seconds).
        self.overlapped = -math.inf
        self._last: tuple[float, int, int, float] | None = None
        #: Cores' worth of other processes' work over the last interval (None: not yet known).
        self.foreign: float | None = None

    @contextmanager
    def run(self) -> Iterator[bool]:
        """Counts a run in flight for the duration of the block, and yields whether it is
        alone: no other run was in flight as it began. Counted and asked under one lock, so
        of runs that begin at the same moment only one is alone (asked before being counted,
        with a run's planning between the two, both could find the cores free)."""
        with self._lock:
            alone = not self.running
            if not alone:
                self.overlapped = time.monotonic()
            self.running += 1
        try:
            yield alone
        finally:
            with self._lock:
                self.running -= 1

    def room_for(self, threads: int, cores: int, alone: bool | None = None) -> bool:
        """Whether a run may use ``threads`` of the process's ``cores`` now: no other run in
        flight here (``alone``, as :meth:`run` yielded it, for a run already counted), and
        other processes leave that many cores (within :data:`SPARE_CORE`)."""
        if not (self.running == 0 if alone is None else alone):
            return False
        foreign = self.foreign_cores()
        return foreign <= cores - threads + SPARE_CORE

    def alone_for(self, seconds: float) -> bool:
        """Whether no two runs of this process have overlapped in the last ``seconds``: the
        process makes one call at a time, lately."""
        return time.monotonic() - self.overlapped > seconds

    def foreign_cores(self) -> float:
        """Cores' worth of work of other processes on this process's CPUs, lately."""
        now = time.monotonic()
        last = self._last
        if last is not None and now - last[0] < SAMPLE_SECONDS:
            return self.foreign if self.foreign is not None else self._now()
        sample = self._sample(now)
        if sample is None:
            return self._now()
        self._last = sample
        if last is None or now - last[0] > STALE_SECONDS:
            self.foreign = None  # no interval to speak of now
            return self._now()
        busy, total, ours = sample[1] - last[1], sample[2] - last[2], (sample[3] - last[3]) * _TICKS
        cpus = max(1, len(_cpus()))
        self.foreign = max(0.0, busy - ours) / max(1, total) * cpus
        return self.foreign

    def _now(self) -> float:
        """Threads runnable on the machine at this moment, less this process's own
        (``/proc/loadavg``'s fourth field, less the threads of ``/proc/self/task`` running
        now: the caller, and numba's threads still spinning after a run's compiled parts),
        the fewest of up to :data:`NOW_READINGS` readings; the load average where that file
        is not."""
        fewest = math.inf
        for reading in range(NOW_READINGS):
            if reading:
                time.sleep(NOW_GAP_SECONDS)
            try:
                with open(self.loadavg_path, "rb") as f:
                    runnable = int(f.read().split()[3].split(b"/")[0])
            except (OSError, ValueError, IndexError):
                return _load_average()
            fewest = min(fewest, max(0, runnable - self._own_runnable()))
            if not fewest:
                break
        return float(fewest)

    def _own_runnable(self) -> int:
        """This process's threads running or runnable now, the caller among them (1 where
        they cannot be read)."""
        found = 0
        try:
            tasks = os.listdir(self.tasks_path)
        except OSError:
            return 1
        for task in tasks:
            try:
                with open(os.path.join(self.tasks_path, task, "stat"), "rb") as f:
                    state = f.read().rpartition(b")")[2].split(maxsplit=1)[0]
            except (OSError, IndexError):
                continue
            found += state == b"R"
        return max(1, found)

    def _sample(self, now: float) -> tuple[float, int, int, float] | None:
        """(time, busy ticks, all ticks) of this process's CPUs, and its own CPU seconds."""
        wanted = _cpus()
        busy = total = 0
        try:
            with open(self.stat_path, "rb") as f:
                for line in f:  # the cpu lines come first; the long ones after them are never split
                    if not line.startswith(b"cpu"):
                        break
                    name, *fields = line.split(maxsplit=9)
                    if name == b"cpu" or int(name[3:]) not in wanted:
                        continue
                    ticks = [int(v) for v in fields[:8]]
                    idle = ticks[3] + ticks[4]  # idle, iowait
                    total += sum(ticks)
                    busy += sum(ticks) - idle
        except (OSError, ValueError):
            return None
        if total == 0:
            return None
        return now, busy, total, time.process_time()


def _cpus() -> set[int]:
    try:
        return os.sched_getaffinity(0)
    except (AttributeError, OSError):
        return set(range(os.cpu_count() or 1))


def _load_average() -> float:
    """The 1-minute load average (this process's own runs included), 0 where unknown."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return 0.0


_OCCUPANCY = Occupancy()


def occupancy() -> Occupancy:
    """The process's :class:`Occupancy`."""
    return _OCCUPANCY


def _after_fork_in_child() -> None:
    """A fork's child has no runs in flight, and its own CPU time starts again."""
    global _OCCUPANCY
    _OCCUPANCY = Occupancy()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
