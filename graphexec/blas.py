"""How many threads numpy's BLAS may use while graphexec runs.

Inter-op workers (branches) times intra-op threads (BLAS) should not exceed the cores.
BLAS thread limits are process-wide, so concurrent runs share one limit: it is set when
the first run starts, lowered if a later one asks for fewer, and restored when the last
run ends. Changes are made under one lock from whichever thread runs ``forward``
(threadpoolctl would otherwise let only the first thread that ever set an OpenBLAS limit
change it, and silently ignore the others).

OpenBLAS rounds a product differently with another thread count, so a run that *steers*
the count (several BLAS threads for some of its nodes, one for others) would give other
bits whenever a concurrent run changed the count under it. Runs therefore take turns
(:func:`blas_run`): a steering run has BLAS to itself; runs on one BLAS thread throughout
may overlap one another.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from loguru import logger

from graphexec.errors import RunTimeoutError

try:
    from threadpoolctl import ThreadpoolController
except ImportError:  # threadpoolctl is a dependency, but a broken install must not break runs
    ThreadpoolController = None  # type: ignore[assignment,misc]


#: ``_BlasLimiter._applied`` while a change may be half made (Ctrl-C inside threadpoolctl):
#: the next change is then made in full.
_UNSURE = -1


class _BlasLimiter:
    """The process's BLAS thread limit: the smallest one any active block asks for.

    Each block's entry is added and removed under one key, in a ``try`` that covers the
    adding, so that Ctrl-C at any point of entering or leaving a block (the main thread's
    run may be interrupted anywhere) never leaves a limit behind for the process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: What each active block asks for, by its key.
        self._active: dict[int, int] = {}
        self._keys = itertools.count()
        self._libraries: list[Any] | None = None
        self._setters: list[Any] = []
        self._original: list[int] = []
        self._applied: int | None = None

    def _blas(self) -> list[Any]:
        if self._libraries is None:
            found = ThreadpoolController().select(user_api="blas") if ThreadpoolController else None
            self._libraries = list(found.lib_controllers) if found is not None else []
            self._setters = [_openblas_setter(library) for library in self._libraries]
        return self._libraries

    def _set(self, threads: list[int] | int) -> None:
        libraries = self._blas()
        counts = threads if isinstance(threads, list) else [threads] * len(libraries)
        for library, setter, count in zip(libraries, self._setters, counts):
            if setter is not None:
                setter(count)
                continue
            clear = getattr(type(library), "clear_controlling_thread", None)
            if clear is not None:  # we serialise changes ourselves; any thread may make them
                clear(force=True)
            library.set_num_threads(count)

    @contextmanager
    def limit(self, threads: int | None) -> Iterator[None]:
        """Limit BLAS to ``threads`` for the duration of the block (``None``: leave it)."""
        if threads is None:
            yield
            return
        key = next(self._keys)
        try:
            with self._lock:
                if not self._active:
                    self._original = [library.get_num_threads() for library in self._blas()]
                self._active[key] = threads
                self._apply()
            yield
        finally:
            with self._lock:
                if self._active.pop(key, None) is not None:
                    self._apply()

    @contextmanager
    def boost(self, threads: int) -> Iterator[bool]:
        """Raise the limit to ``threads`` for the block when exactly one run is active (the
        caller's): a node that runs alone may use every core. Yields whether it did; a run
        that starts meanwhile lowers the limit again at once."""
        raised = False
        try:
            with self._lock:
                if len(self._active) == 1 and threads > next(iter(self._active.values())):
                    raised = True
                    self._applied = _UNSURE
                    self._set(threads)
                    self._applied = threads
            yield raised
        finally:
            if raised:
                with self._lock:
                    self._apply()

    def _apply(self) -> None:
        want = min(self._active.values()) if self._active else None
        if want == self._applied:
            return
        self._applied = _UNSURE
        if want is None:
            self._set(self._original)
        else:
            self._set(want)
            logger.trace("BLAS threads limited to {}", want)
        self._applied = want


def _openblas_symbol(library: Any, name: str) -> Any:
    """``name`` from an OpenBLAS built with its own threads (not OpenMP), under any of the
    prefixes and suffixes wheels give it; None for other libraries."""
    if getattr(library, "internal_api", None) != "openblas" or getattr(library, "threading_layer", None) == "openmp":
        return None
    dynlib = getattr(library, "dynlib", None)
    for prefix in ("", "scipy_"):
        for suffix in ("", "64_", "_64"):
            found = getattr(dynlib, f"{prefix}{name}{suffix}", None)
            if found is not None:
                return found
    return None


def _openblas_setter(library: Any) -> Any:
    """OpenBLAS's own ``openblas_set_num_threads``, to call straight: through threadpoolctl
    a change costs ~10 us of Python, and a node given every core for BLAS makes two. None
    for other libraries, and for OpenBLAS built with OpenMP (limits per thread there)."""
    return _openblas_symbol(library, "openblas_set_num_threads")


#: Bytes of glibc's ``cpu_set_t`` (1024 CPUs), as OpenBLAS's affinity calls take it.
_CPU_SET_BYTES = 128


def _cpu_set(cores: tuple[int, ...]) -> ctypes.Array:
    mask = (ctypes.c_ubyte * _CPU_SET_BYTES)()
    for core in cores:
        if 0 <= core < 8 * _CPU_SET_BYTES:
            mask[core // 8] |= 1 << (core % 8)
    return mask


class _WorkerPins:
    """OpenBLAS's ``openblas_setaffinity`` / ``openblas_getaffinity`` for its worker threads.
    OpenBLAS numbers them by the thread count in use at the call: of ``n``, threads
    ``0 .. n - 2`` are workers and ``n - 1`` is the calling thread, so a call is made only
    for a worker of the count in use then."""

    def __init__(self, library: Any):
        self.set = _openblas_symbol(library, "openblas_setaffinity")
        self.get = _openblas_symbol(library, "openblas_getaffinity")
        self.count = _openblas_symbol(library, "openblas_get_num_threads")
        for function in (self.set, self.get):
            if function is not None:
                function.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p]
                function.restype = ctypes.c_int
        #: Each worker's CPU set as first seen, which :meth:`restore` gives back.
        self.original: dict[int, ctypes.Array] = {}

    @property
    def usable(self) -> bool:
        return self.set is not None and self.get is not None and self.count is not None

    def _workers(self) -> int:
        return max(0, int(self.count()) - 1)

    def move(self, cores: tuple[int, ...]) -> list[int]:
        """Pin the workers now in use to ``cores`` (round robin); the workers moved."""
        moved = []
        for index in range(self._workers()):
            if index not in self.original:
                before = (ctypes.c_ubyte * _CPU_SET_BYTES)()
                if self.get(index, _CPU_SET_BYTES, ctypes.byref(before)) != 0:
                    break
                self.original[index] = before
            if self.set(index, _CPU_SET_BYTES, ctypes.byref(_cpu_set((cores[index % len(cores)],)))) != 0:
                break
            moved.append(index)
        return moved

    def restore(self, moved: list[int]) -> None:
        """Give the ``moved`` workers their first CPU sets back; one that is no worker of
        the count in use now (another run lowered it meanwhile) keeps its pin until a
        later restore."""
        workers = self._workers()
        for index in moved:
            if index < workers:
                self.set(index, _CPU_SET_BYTES, ctypes.byref(self.original[index]))


_LIMITER = _BlasLimiter()
_PINS_LOCK = threading.Lock()
_pins: list[_WorkerPins] | None = None


def _worker_pins() -> list[_WorkerPins]:
    global _pins
    with _PINS_LOCK:
        if _pins is None:
            _pins = [pins for pins in map(_WorkerPins, _LIMITER._blas()) if pins.usable]
        return _pins


@contextmanager
def blas_workers_off(cores: tuple[int, ...] | None) -> Iterator[None]:
    """OpenBLAS's worker threads pinned to ``cores`` for the block, one each (their CPU sets
    are restored after): where a held run's thread does not run (see
    :func:`graphexec.affinity.held_on_its_core`). Nothing for None or no cores, other
    BLAS libraries, or an OpenBLAS without these calls."""
    if not cores:
        yield
        return
    moved = [(pins, pins.move(cores)) for pins in _worker_pins()]
    try:
        yield
    finally:
        for pins, workers in moved:
            pins.restore(workers)

#: OPENBLAS_THREAD_TIMEOUT (log2 of the cycles an idle BLAS thread spins) up to which its
#: threads are asleep within about a millisecond of a call (2^20 cycles).
SHORT_SPIN = 20


def ask_for_short_spins() -> bool:
    """For an application's entry point (the CLI, the examples), before numpy is imported:
    ask OpenBLAS, through OPENBLAS_THREAD_TIMEOUT, which it reads once when numpy loads it,
    to let its idle threads spin 2^SHORT_SPIN cycles (under a millisecond) instead of its
    default 2^28 (~0.1 s), so that a node given every core for BLAS takes no core from the
    branches that run side by side after it. Not shorter: a thread that sleeps at once
    must be woken for every product (docs/design/threads.md, "Short spins of BLAS threads").
    The library itself never sets it: importing graphexec changes nothing in the process.
    A value the user set is kept; returns whether the variable holds a short spin now."""
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", str(SHORT_SPIN))
    return _short_spin_asked()


def _short_spin_asked() -> bool:
    try:
        return int(os.environ.get("OPENBLAS_THREAD_TIMEOUT", "")) <= SHORT_SPIN
    except ValueError:
        return False


def idle_threads_sleep() -> bool:
    """Whether BLAS threads sleep soon after a call, so that giving one node every core
    costs nothing to the branches that run side by side after it. True for OpenBLAS loaded
    with a short OPENBLAS_THREAD_TIMEOUT (see :func:`ask_for_short_spins`); by
    default OpenBLAS spins ~0.1 s, and other BLAS libraries are not assumed to do better."""
    libraries = _LIMITER._blas()
    if not libraries or any(getattr(library, "internal_api", None) != "openblas" for library in libraries):
        return False
    return _short_spin_asked()


class _Turns:
    """Who may use BLAS now: one steering run alone, or any number of runs that keep to one
    BLAS thread. A waiting steering run goes before runs that arrive after it, so a
    stream of one-thread runs cannot hold it off. A thread already inside a turn (a run
    started from a layer of another run) goes on without waiting, so it cannot deadlock."""

    def __init__(self) -> None:
        self._changed = threading.Condition(threading.Lock())
        self._steering = False
        self._plain = 0
        self._waiting_to_steer = 0
        self._inside = threading.local()

    @contextmanager
    def joined(self) -> Iterator[None]:
        """This thread works inside the turn of a run that holds one (see :func:`joined_turn`)."""
        depth = getattr(self._inside, "depth", 0)
        self._inside.depth = depth + 1
        try:
            yield
        finally:
            self._inside.depth = depth

    @contextmanager
    def take(self, steer: bool, deadline: float | None = None) -> Iterator[None]:
        """The calling thread's turn (``steer``: alone); RunTimeoutError when ``deadline``
        (``time.monotonic()``) passes first."""
        if getattr(self._inside, "depth", 0):
            with self.joined():
                yield
            return
        taken = False  # set with the count, in the try: Ctrl-C anywhere leaves no turn held
        try:
            with self._changed:
                if steer:
                    self._waiting_to_steer += 1
                    try:
                        got = self._changed.wait_for(lambda: not self._steering and not self._plain,
                                                     _left(deadline))
                    finally:
                        self._waiting_to_steer -= 1
                        if not self._waiting_to_steer:
                            self._changed.notify_all()  # one-thread runs may have waited for this one
                else:
                    got = self._changed.wait_for(lambda: not self._steering and not self._waiting_to_steer,
                                                 _left(deadline))
                if not got:
                    raise RunTimeoutError(
                        "forward ran past its timeout waiting for its turn at BLAS (another run gives "
                        "its nodes several BLAS threads meanwhile); no node was started"
                    )
                if steer:
                    self._steering = True
                else:
                    self._plain += 1
                taken = True
            self._inside.depth = 1
            yield
        finally:
            if taken:
                self._inside.depth = 0
                with self._changed:
                    if steer:
                        self._steering = False
                    else:
                        self._plain -= 1
                    self._changed.notify_all()


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


_TURNS = _Turns()


def joined_turn():
    """Context manager for a worker thread running a run's units: it works inside that run's
    turn, so a run that one of its layers starts there goes on rather than wait for the
    turn of the run it is part of."""
    return _TURNS.joined()


@contextmanager
def blas_run(threads: int, steer: bool, deadline: float | None = None) -> Iterator[None]:
    """Context manager for one run: its turn at BLAS (see the module's docstring), with
    BLAS limited to ``threads`` threads. ``steer``: the run gives some nodes more BLAS
    threads than others (or than ``threads``), so no other run may share its turn.
    RunTimeoutError if the turn has not come by ``deadline`` (``time.monotonic()``)."""
    with _TURNS.take(steer or threads > 1, deadline), _LIMITER.limit(threads):
        yield


def blas_threads(threads: int | None):
    """Context manager: BLAS uses at most ``threads`` threads inside it (within a run, such
    as a shared node's pieces on one thread each)."""
    return _LIMITER.limit(threads)


def blas_boost(threads: int):
    """Context manager, inside a ``blas_threads`` block: up to ``threads`` BLAS threads for
    a node that runs alone, when no other run is active (yields whether it applied)."""
    return _LIMITER.boost(threads)


def _after_fork_in_child() -> None:
    """A fork's child starts with no run: forget the parent's turns and limits (a thread of
    the parent may have held their locks, and its runs will never end here)."""
    global _TURNS, _PINS_LOCK
    _TURNS = _Turns()
    _PINS_LOCK = threading.Lock()
    _LIMITER._lock = threading.Lock()
    _LIMITER._active = {}
    _LIMITER._applied = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
