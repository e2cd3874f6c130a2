"""One core per worker: the engine's own pool pins each of its worker threads to a core.

Unpinned, a worker woken after the engine sat idle (calls that come now and then rather
than back to back) was often put by the kernel on the core of the thread that woke it,
and the two shared that core until the kernel moved one of them (measured in
docs/design/threads.md, "Pinned workers").

Workers are pinned only when there is one for every core this process may use: then no
choice of cores is made that another engine or process could make too (eight processes
each pinning two workers to "the first two cores" would share two cores of sixteen).
Pinning also needs ``os.sched_setaffinity`` (Linux); otherwise workers are left where the
kernel puts them.

A one-worker run that uses every core (BLAS threads, nodes shared out) gets the same
treatment for the duration of the run (:func:`held_on_its_core`): the calling thread
stays on the core it is on, OpenBLAS's worker threads go to the other cores (see
:func:`graphexec.blas.blas_workers_off`), and the threads that run shared pieces are one
per core, pinned, and a piece goes to a core other than the caller's (:class:`CorePool`).
Left to the kernel, a helper woken after the engine sat idle was again put on the
caller's core, where OpenBLAS's waker spins until its time slice ends (measured in
docs/design/threads.md, "Threads placed for each run"; ``benchmarks/idle.py``).
"""

from __future__ import annotations

import ctypes
import itertools
import os
import threading
from collections.abc import Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import contextmanager

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


def usable_cores() -> set[int]:
    """The cores the calling thread may use as the process gave them: its CPU set, or the
    one it had before the engine pinned it as a worker or held it for a run."""
    if not hasattr(os, "sched_getaffinity"):
        return set()
    saved = getattr(_PINNED, "cores", None)
    return set(saved) if saved is not None else os.sched_getaffinity(0)


class Pinner:
    """A ``ThreadPoolExecutor`` initializer: each worker thread it starts takes the next core."""

    def __init__(self, cores: tuple[int, ...]):
        self.cores = cores
        self._started = itertools.count()

    def __call__(self) -> None:
        core = self.cores[next(self._started) % len(self.cores)]
        try:
            cores = os.sched_getaffinity(0)
            os.sched_setaffinity(0, {core})  # 0: the calling thread
            _PINNED.core, _PINNED.cores = core, cores
        except OSError as exc:  # a container may forbid it: the worker runs unpinned
            logger.debug("worker thread not pinned to core {}: {}", core, exc)


def _sched_getcpu():
    """libc's ``sched_getcpu``, or None where there is none."""
    try:
        getcpu = ctypes.CDLL(None, use_errno=True).sched_getcpu
    except (OSError, AttributeError):
        return None
    getcpu.restype = ctypes.c_int
    getcpu.argtypes = []
    return getcpu


_GETCPU = _sched_getcpu()


def current_core() -> int | None:
    """The core the calling thread runs on at this moment, or None where that is unknown."""
    if _GETCPU is None:
        return None
    core = _GETCPU()
    return core if core >= 0 else None


_HOLD_LOCK = threading.Lock()
_holding = False


@contextmanager
def held_on_its_core(wanted: bool = True) -> Iterator[tuple[int, ...] | None]:
    """Keep the calling thread on the core it is on for the block, and yield the thread's
    other cores, for its helpers (None: not held). Only one run in the process is held at
    a time, and only where the thread may use two cores or more and the platform can pin
    threads: a run that starts meanwhile runs where the kernel puts it. The thread's own
    CPU set is restored."""
    core = current_core() if wanted else None
    own = _hold(core) if core is not None else None
    try:
        yield tuple(sorted(own - {core})) if own is not None else None
    finally:
        if own is not None:
            _release(own)


def _hold(core: int) -> set[int] | None:
    """Pin the calling thread to ``core``; its CPU set before, or None if it was not pinned."""
    global _holding
    if not hasattr(os, "sched_setaffinity"):
        return None
    with _HOLD_LOCK:
        if _holding:
            return None
        try:
            own = os.sched_getaffinity(0)
            if len(own) < 2 or core not in own:
                return None
            os.sched_setaffinity(0, {core})
        except OSError as exc:  # a container may forbid it: the run goes on unheld
            logger.debug("caller not held on core {}: {}", core, exc)
            return None
        _holding = True
        _PINNED.cores = own
        return own


def _release(own: set[int]) -> None:
    global _holding
    with _HOLD_LOCK:
        try:
            os.sched_setaffinity(0, own)
        except OSError as exc:
            logger.debug("caller's CPU set not restored: {}", exc)
        _holding = False
        _PINNED.cores = None


class CorePool:
    """One worker thread per core, each pinned to its core, for the pieces of a shared node:
    :meth:`away_from` gives the executors of the cores other than the caller's."""

    def __init__(self, cores: tuple[int, ...], name: str = "graphexec-piece"):
        self.cores = cores
        self._executors = {core: ThreadPoolExecutor(1, thread_name_prefix=f"{name}-{core}", initializer=Pinner((core,)))
                           for core in cores}

    def away_from(self, core: int | None, count: int) -> list[Executor]:
        """``count`` executors (repeating when there are fewer cores), the caller's core last."""
        order = [c for c in self.cores if c != core] + [c for c in self.cores if c == core]
        return [self._executors[order[k % len(order)]] for k in range(count)]

    def shutdown(self, wait: bool = True) -> None:
        for executor in self._executors.values():
            executor.shutdown(wait=wait)
