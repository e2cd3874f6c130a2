"""One core per worker: the engine's own pool pins each of its worker threads to a core.

Unpinned, a worker woken after the engine sat idle (calls that come now and then rather
than back to back) was often put by the kernel on the core of the thread that woke it,
and the two shared that core until the kernel moved one of them. Measured on this
project's 2-core VM, the wide net (two workers): 15 ms a forward back to back either way,
but 23-27 ms after 50 ms idle unpinned against 16-18 ms pinned.

Workers are pinned only when there is one for every core this process may use: then no
choice of cores is made that another engine or process could make too (eight processes
each pinning two workers to "the first two cores" would share two cores of sixteen).
Pinning also needs ``os.sched_setaffinity`` (Linux); otherwise workers are left where the
kernel puts them.
"""

from __future__ import annotations

import itertools
import os
import threading

from loguru import logger


def cores_for(workers: int) -> tuple[int, ...] | None:
    """The cores to pin ``workers`` threads to, one each: every core this process may use,
    when there are exactly ``workers`` of them (and at least two), else None."""
    if workers < 2 or not hasattr(os, "sched_setaffinity"):
        return None
    allowed = tuple(sorted(os.sched_getaffinity(0)))
    return allowed if len(allowed) == workers else None


_PINNED = threading.local()


def on_pinned_worker() -> bool:
    """Whether the calling thread is an engine worker pinned to a core."""
    return getattr(_PINNED, "core", None) is not None


class Pinner:
    """A ``ThreadPoolExecutor`` initializer: each worker thread it starts takes the next core."""

    def __init__(self, cores: tuple[int, ...]):
        self.cores = cores
        self._started = itertools.count()

    def __call__(self) -> None:
        core = self.cores[next(self._started) % len(self.cores)]
        try:
            os.sched_setaffinity(0, {core})  # 0: the calling thread
            _PINNED.core = core
        except OSError as exc:  # a container may forbid it: the worker runs unpinned
            logger.debug("worker thread not pinned to core {}: {}", core, exc)
