"""The engine's own threads: the workers that run units of a concurrent run, the threads
that run a shared node's pieces beside a one-worker run (see :mod:`graphexec.spread`), and
those that run the parts of a batch beside the calling thread (see :mod:`graphexec.samples`).

All start on first use, may be pinned a core each (:mod:`graphexec.affinity`), and stop
with :meth:`Pools.close` or when the engine goes. A process forked while an engine lives
gets none of them (threads do not survive a fork, and a pool that thinks it has workers
would wait for them forever): after a fork the child's engines start fresh pools on first
use.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar

from graphexec.affinity import CorePool, Pinner, cores_for, held_on_its_core
from graphexec.blas import blas_workers_off
from graphexec.spread import Spreader
from graphexec.threads import ThreadPolicy

if TYPE_CHECKING:
    from graphexec.memory import Lease

T = TypeVar("T")

#: Every live Pools object, so that a fork's child can forget their threads.
_LIVE: weakref.WeakSet[Pools] = weakref.WeakSet()


class Pools:
    """The worker pool and the piece pool of one engine, made on first use."""

    def __init__(self, policy: ThreadPolicy, pin: bool):
        self.policy = policy
        #: The cores the workers are pinned to, one each (None: not pinned).
        self.worker_cores = cores_for(policy.threads) if pin else None
        self.pin = pin
        self._lock = threading.Lock()
        self._workers: ThreadPoolExecutor | None = None
        self._pieces: ThreadPoolExecutor | CorePool | None = None
        self._parts: ThreadPoolExecutor | None = None
        self._part_threads = 0
        _LIVE.add(self)

    def workers(self) -> Executor:
        """The pool of ``policy.threads`` workers."""
        with self._lock:
            if self._workers is None:
                pinner = Pinner(self.worker_cores) if self.worker_cores is not None else None
                pool = ThreadPoolExecutor(max_workers=self.policy.threads, thread_name_prefix="graphexec",
                                          initializer=pinner)
                self._workers = pool
                weakref.finalize(self, pool.shutdown, wait=False)
            return self._workers

    def spreader(self, lease: Lease | None = None) -> Spreader:
        """Runs a shared node's pieces in a one-worker run: the run's thread takes one, and
        a thread of a small pool each other: one thread per core, pinned to it, a piece
        going to a core the run's thread is not on; unpinned where the engine does not pin.
        ``lease``: the run's arena lease, held by each piece handed to another thread."""
        cores = self.policy.cores
        with self._lock:
            if self._pieces is None:
                pinned = cores_for(cores) if self.pin else None
                pool: ThreadPoolExecutor | CorePool = (
                    CorePool(pinned) if pinned is not None
                    else ThreadPoolExecutor(max_workers=max(1, cores - 1), thread_name_prefix="graphexec-piece"))
                self._pieces = pool
                weakref.finalize(self, pool.shutdown, wait=False)
            return Spreader(self._pieces, cores, lease=lease, place=self.pin)

    def worker_spreader(self, lease: Lease | None = None) -> Spreader:
        """Runs a shared node's pieces on the workers of a concurrent run (``lease``: as
        for :meth:`spreader`)."""
        return Spreader(self.workers(), self.policy.threads, pinned=self.worker_cores is not None, lease=lease,
                        place=self.pin)

    def run_parts(self, run: Callable[[int], T], count: int) -> list[T]:
        """``[run(0), ..., run(count - 1)]``, side by side: ``run(0)`` on the calling thread,
        each other on a thread of a pool of its own. Returns once every part is over (the
        first failure raised then), so no part still runs when the call has left."""
        executor = self._part_pool(count - 1)
        futures = [executor.submit(run, k) for k in range(1, count)]
        results: list[T] = []
        failure: BaseException | None = None
        try:
            results.append(run(0))
        except BaseException as exc:  # noqa: BLE001 - raised once the other parts are over
            failure = exc
        for future in futures:
            try:
                results.append(future.result())
            except BaseException as exc:  # noqa: BLE001
                failure = failure or exc
        if failure is not None:
            raise failure
        return results

    def _part_pool(self, threads: int) -> ThreadPoolExecutor:
        with self._lock:
            if self._parts is None or self._part_threads < threads:
                old, self._part_threads = self._parts, max(1, threads)
                self._parts = ThreadPoolExecutor(max_workers=self._part_threads, thread_name_prefix="graphexec-part")
                weakref.finalize(self, self._parts.shutdown, wait=False)
                if old is not None:
                    old.shutdown(wait=False)
            return self._parts

    @contextmanager
    def helpers_apart(self, wanted: bool, blas: bool = True) -> Iterator[None]:
        """For a one-worker run that uses several cores (BLAS threads, shared nodes): the
        run's thread held on its core and, where ``blas`` (the run may give BLAS several
        threads), OpenBLAS's workers on the others, for the run (see
        :mod:`graphexec.affinity`); nothing where the engine does not pin threads. A run
        that keeps BLAS on one thread leaves its idle workers where they are: pinning them
        and giving their CPU sets back is not free (docs/design/threads.md, "Threads
        placed for each run")."""
        if not (wanted and self.pin):
            yield
            return
        with held_on_its_core() as others, blas_workers_off(others if blas else None):
            yield

    def close(self) -> None:
        """Stop the threads (a later run starts them again)."""
        with self._lock:
            pools = [self._workers, self._pieces, self._parts]
            self._workers = self._pieces = self._parts = None
        for pool in pools:
            if pool is not None:
                pool.shutdown(wait=True)

    def _forget(self) -> None:
        """In a fork's child: the threads stayed with the parent, so drop the pools (and a
        lock another thread of the parent may have held) without waiting for anything."""
        self._lock = threading.Lock()
        self._workers = self._pieces = self._parts = None


def _after_fork_in_child() -> None:
    for pools in list(_LIVE):
        pools._forget()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
