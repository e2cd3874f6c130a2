"""numba's threads kept off the core of the thread that launches their parts.

A node in compiled parts is one launch of a loop whose parts run on the calling thread and
on numba's OpenMP threads, a team of them for each thread that launches. After the engine
sat idle, a team thread, asleep, was often woken onto its launcher's core, where the
launcher spun waiting for it until its time slice ran out: the first two loops after a
pause took milliseconds instead of microseconds (docs/design/threads.md, "Compiled parts";
the same trouble as in "Threads placed for each run"). So, where the engine places threads,
each team thread is pinned before a launch to a core its launcher is not on, one core each
in turn; the pins change only when the launcher is found on another core.

The team's system thread ids come from a loop of parts that asks ``gettid`` on each
thread, once per launching thread (a team lives as long as its launcher). Nothing is
pinned where libc has no ``gettid`` or the platform no ``sched_setaffinity``, where there
is no other core, under numba's TBB layer (one pool of threads for every launcher), or
after an attempt was refused (a container may forbid it).
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable, Set

import numba
import numpy as np
from loguru import logger

from graphexec.devices.cpu.jit.compiler import parts_live, ready


def _gettid_address() -> int | None:
    """The address of libc's ``gettid``, or None where there is none."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    try:
        return ctypes.cast(ctypes.CDLL(None).gettid, ctypes.c_void_p).value
    except (OSError, AttributeError):
        return None


_GETTID = _gettid_address()
_LOCAL = threading.local()
#: Set once pinning was refused: no thread tries again.
_REFUSED: list[bool] = []


class _Team:
    """The team of numba threads of one launching thread, and where they are pinned."""

    def __init__(self, ids: list[int]):
        self.ids = ids
        #: The core its launcher was on when the team was last pinned (None: not pinned).
        self.away_from: int | None = None


def keep_off(core: int, cores: Set[int]) -> None:
    """Pin the calling thread's team of numba threads to ``cores`` other than ``core``
    (where the caller runs now), before it launches a loop of parts; nothing to do where
    they are pinned so already."""
    team = getattr(_LOCAL, "team", None)
    if (team is not None and team.away_from == core) or _GETTID is None or _REFUSED or not parts_live():
        return
    if team is None:
        team = _LOCAL.team = _find_team()
    others = sorted(cores - {core})
    if not team.ids or not others:
        team.away_from = core  # nothing to move: asked again only if the caller moves
        return
    try:
        for k, tid in enumerate(team.ids):
            os.sched_setaffinity(tid, {others[k % len(others)]})
    except ProcessLookupError:  # the team changed (numba's thread count): found again next time
        _LOCAL.team = None
        return
    except OSError as exc:
        logger.debug("numba's threads not pinned away from core {}: {}", core, exc)
        _REFUSED.append(True)
        return
    team.away_from = core


def prepare() -> None:
    """Ready the loop that finds a team (compiled, or loaded from the cache) when a plan is
    made, rather than in its first run."""
    if _GETTID is not None:
        _thread_ids()


def _thread_ids() -> Callable:
    return ready("team", "thread_ids", np.int64(0), np.int64(1), np.zeros(1, np.int64))


def _find_team() -> _Team:
    """The calling thread's team: its threads' system ids, the caller's own left out (none
    under another threading layer than OpenMP's, whose threads are not a team per caller)."""
    if numba.threading_layer() != "omp":
        return _Team([])
    threads = numba.get_num_threads()
    ids = np.zeros(threads, np.int64)
    _thread_ids()(_GETTID, threads * 8, ids)
    own = threading.get_native_id()
    return _Team([int(t) for t in dict.fromkeys(ids.tolist()) if t and t != own])
