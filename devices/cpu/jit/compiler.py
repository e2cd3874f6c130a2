"""Compiling the loops of the ``jit`` kernels with numba, once, and caching them on disk.

numba is imported here, and this module only when a ``jit`` kernel is prepared: importing
graphexec, and every engine on the numpy kernels, never loads it. A loop is a plain
function in one of the ``_loops_*`` modules beside this one, compiled with ``nogil=True``
(so the engine's threads run loops side by side), ``fastmath`` off (the same bits every
run, within rounding of the layers' numpy forwards) and numpy's error model (so
divisions vectorise). :meth:`Loop.ready` compiles it for the types of the arguments a
kernel will pass, at plan time, and logs a line when that means compiling (seconds)
rather than loading the cache (milliseconds).

The cache lives where ``NUMBA_CACHE_DIR`` says; else in the package's ``__pycache__``
when it is writable; else in the user's cache directory
(``$XDG_CACHE_HOME/graphexec/numba``, by default ``~/.cache/graphexec/numba``). Only
these loops are cached that way: nothing process-wide of numba's is changed.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from loguru import logger

from graphexec.errors import DeviceError

try:
    import numba
    from numba.core import caching
except ImportError as exc:  # numba's own check (numpy too new for it, a broken install)
    raise DeviceError(f'the compiled CPU kernels need numba, which cannot be imported here ({exc}): '
                      'pip install "graphexec[jit]" for a matching version, or use cpu_kernels="numpy"') from exc

#: How every loop is compiled (see the module docstring).
OPTIONS = dict(nogil=True, fastmath=False, error_model="numpy", boundscheck=False)


def user_cache_dir() -> str:
    """Where compiled loops are cached when neither NUMBA_CACHE_DIR nor the package's own
    folder can take them."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "graphexec", "numba")


class _LoopsStamp:
    """A cached loop stands only while every module of loops is as it was: a loop compiles
    in the helpers it calls from the others (the activations, the parts' cuts), where
    numba's own stamp looks at the loop's file alone, and would load a loop built with a
    helper since changed."""

    _py_file: str

    def get_source_stamp(self) -> tuple:
        folder, own = os.path.split(self._py_file)
        stamps = []
        for name in sorted(os.listdir(folder)):
            if name == own or name.endswith(".py") and (name.startswith("_loops_")
                                                       or name in ("_intrinsics.py", "compiler.py")):
                path = os.path.join(folder, name)
                st = os.stat(path)
                stamps.append((name, _digest(path, st.st_mtime_ns, st.st_size)))
        return tuple(stamps)


@functools.lru_cache(maxsize=None)
def _digest(path: str, mtime_ns: int, size: int) -> bytes:
    """The SHA-256 of a source file's bytes (read again when its time or size changes): a
    file written anew with the same text keeps its loops' cache, as in numba's own stamp."""
    with open(path, "rb") as source:
        return hashlib.sha256(source.read()).digest()


class _ProvidedCacheLocator(_LoopsStamp, caching.UserProvidedCacheLocator):
    """numba's locator for ``NUMBA_CACHE_DIR``, stamped as :class:`_LoopsStamp` says."""


class _InTreeCacheLocator(_LoopsStamp, caching.InTreeCacheLocator):
    """numba's locator for the package's own ``__pycache__``, stamped likewise."""


class _UserCacheLocator(_LoopsStamp, caching.UserWideCacheLocator):
    """numba's user-wide locator, in graphexec's own cache folder, stamped likewise."""

    def __init__(self, py_func: Callable, py_file: str):
        super().__init__(py_func, py_file)
        self._cache_path = os.path.join(user_cache_dir(), self.get_suitable_cache_subpath(py_file))


class _CacheImpl(caching.CompileResultCacheImpl):
    _locator_classes = [_ProvidedCacheLocator, _InTreeCacheLocator, _UserCacheLocator]


class _Cache(caching.FunctionCache):
    """A loop's cache, which says (at INFO) when a loop is not in it and is compiled."""

    _impl_class = _CacheImpl

    def load_overload(self, sig: Any, target_context: Any) -> Any:
        found = super().load_overload(sig, target_context)
        _COMPILING.missed = found is None
        _COMPILING.cache = self.cache_path
        if found is None:
            logger.info("compiling CPU loop {} for ({}): once, then cached in {}", self._py_func.__name__,
                        ", ".join(map(str, sig)), self.cache_path)
        return found


#: What the cache said of the loop this thread is compiling now.
_COMPILING = threading.local()


@dataclass(frozen=True)
class Readied:
    """A loop made ready in this process: compiled, or loaded from the cache."""

    name: str
    signature: str
    seconds: float
    compiled: bool
    cache: str


#: Every loop made ready in this process, in order (what ``graphexec compile`` reports).
READIED: list[Readied] = []


def loop(function: Callable, parallel: bool = False) -> Any:
    """Decorator for the functions of the ``_loops_*`` modules: a numba dispatcher, cached
    as the module docstring says (numba's own ``cache=True`` where that cannot be done)."""
    dispatcher = numba.njit(**OPTIONS, parallel=parallel)(function)
    try:
        dispatcher._cache = _Cache(function)
    except Exception:  # noqa: BLE001 - a numba without these internals: its own locators
        dispatcher.enable_caching()
    return dispatcher


def inline(function: Callable) -> Any:
    """Decorator for a helper of the loops: compiled into every loop that calls it, with
    the loops' options (never called from Python, so never cached on its own)."""
    return numba.njit(**OPTIONS, inline="always")(function)


def parallel_loop(function: Callable) -> Any:
    """Decorator for a loop that runs its parts (``numba.prange``) on numba's threads, in
    one call: see :func:`parts_supported`."""
    return loop(function, parallel=True)


@parallel_loop
def _touch(out):
    for k in numba.prange(out.shape[0]):
        out[k] = k


_PARTS: list[bool] = []


def parts_supported() -> bool:
    """Whether loops may run parts on several threads in one call here: numba has two
    threads or more, under a threading layer that lets several threads launch parallel
    loops at once (OpenMP or TBB; its own workqueue aborts the process then). Checked once
    a process, by launching a loop of two parts."""
    with _LOOPS_LOCK:
        if not _PARTS:
            supported = False
            if numba.config.NUMBA_NUM_THREADS >= 2:
                try:
                    _touch(np.zeros(2, np.int64))
                    supported = numba.threading_layer() in ("omp", "tbb")
                except Exception as exc:  # noqa: BLE001 - no layer could start
                    logger.debug("numba's threads cannot start: {}", exc)
            if not supported:
                logger.debug("compiled loops run whole: numba's threading layer is not omp or tbb, or it has one thread")
            _PARTS.append(supported)
        return _PARTS[0]


def parts_live() -> bool:
    """Whether loops readied for parts may launch them now (no lock: a kernel asks before
    each run of its parts)."""
    return bool(_PARTS) and _PARTS[0]


def _after_fork_in_child() -> None:
    # GNU OpenMP cannot start its threads again in a fork's child (numba stops the process
    # there), so a child of a process that ran parts runs every loop whole.
    if _PARTS:
        _PARTS[:] = [False]


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_after_fork_in_child)


class Loop:
    """One compiled loop, by module and name (the module is imported on first use)."""

    def __init__(self, module: str, name: str):
        self.module = module
        self.name = name
        self._lock = threading.Lock()
        self._ready: dict[tuple, Callable] = {}

    def dispatcher(self) -> Any:
        return getattr(importlib.import_module(f"graphexec.devices.cpu.jit.{self.module}"), self.name)

    def ready(self, *args: Any) -> Callable:
        """The loop compiled (or loaded from the cache) for the types of ``args``: its entry
        point for exactly those types, which skips numba's dispatch (0.4 us a call) but
        checks no type, so kernels call it only with arrays that :func:`fits` (the types
        prepared) and ints."""
        dispatcher = self.dispatcher()
        signature = tuple(numba.typeof(a) for a in args)
        with self._lock:
            entry = self._ready.get(signature)
            if entry is None:
                start = time.perf_counter()
                _COMPILING.missed, _COMPILING.cache = False, ""
                dispatcher.compile(signature)
                seconds = time.perf_counter() - start
                compiled = bool(getattr(_COMPILING, "missed", False))
                READIED.append(Readied(self.name, ", ".join(map(str, signature)), seconds, compiled,
                                       getattr(_COMPILING, "cache", "")))
                logger.log("INFO" if compiled else "DEBUG", "CPU loop {} {} in {:.2f} s", self.name,
                           "compiled" if compiled else "loaded from the cache", seconds)
                entry = self._ready[signature] = dispatcher.overloads[signature].entry_point
        return entry


_LOOPS: dict[tuple[str, str], Loop] = {}
_LOOPS_LOCK = threading.Lock()


def ready(module: str, name: str, *example: Any) -> Callable:
    """Loop ``name`` of ``_loops_<module>``, compiled for arguments like ``example``."""
    with _LOOPS_LOCK:
        found = _LOOPS.get((module, name))
        if found is None:
            found = _LOOPS[(module, name)] = Loop(f"_loops_{module}", name)
    return found.ready(*example)
