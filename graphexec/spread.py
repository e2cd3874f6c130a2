"""Sharing one node's work among threads: its layer's pieces run at once, one on the thread
that runs the node and the others on a pool's threads; or, for a kernel made for compiled
parts, one call on the node's thread whose parts run on numba's threads
(:meth:`Spreader.across`, no piece handed to any other Python thread).

Where the pool's workers are pinned to a core each (see :mod:`graphexec.affinity`) and
the node runs on the caller's thread, every piece goes to the workers and the caller
waits: run beside a pinned worker, the caller's own piece often shared that worker's core
until the kernel moved it (docs/design/threads.md, "Nodes shared out").

Why no deadlock is possible: a piece never waits on anything, and a worker that shares a
node out never waits on a piece that has not started: once its own piece is done it takes
back every piece still queued (a pool busy with another run's units may not have reached
them) and runs it itself. Only the caller, which is not one of the pool's workers, waits
for queued pieces; the workers always get to them, since none of them waits on the queue.

A run shares nodes out only while it is the process's only run in flight: one that began
alone took the cores, and where another begins meanwhile (which then runs on one thread,
see :mod:`graphexec.occupancy`), its later nodes' pieces run one after another on its own
thread. Two engines called side by side then keep to a thread each.

A piece writes into its node's outputs, which may lie in the run's arena: each piece
handed to a thread holds the run's arena lease (:class:`graphexec.memory.Lease`) until it
is over, so a caller that leaves on Ctrl-C never gives the arena back under a piece still
writing into it.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import TYPE_CHECKING, Any

from graphexec.affinity import CorePool, current_core, on_pinned_worker, usable_cores
from graphexec.blas import blas_threads
from graphexec.devices.base import Kernel, Piece
from graphexec.floats import quiet_floats
from graphexec.occupancy import occupancy

if TYPE_CHECKING:
    from graphexec.memory import Lease


def _nothing() -> None:
    pass


class Spreader:
    """Runs a node's pieces on ``executor`` beside the calling thread; on a
    :class:`~graphexec.affinity.CorePool`, each on a thread of a core the caller is not on.
    ``lease``: the arena lease of the run whose nodes it shares out, held by each handed piece."""

    def __init__(self, executor: Executor | CorePool, workers: int, pinned: bool = False,
                 lease: Lease | None = None, place: bool = False):
        self.executor = executor
        self.lease = lease
        #: How many pieces a node is cut into: one per worker.
        self.count = workers
        #: Whether the workers are pinned to a core each: then a caller hands every piece over.
        self.pinned = pinned
        #: Whether the engine places threads (``pin_workers``): then a node run across
        #: threads has its kernel's helper threads put off the caller's core first.
        self.place = place
        self._cores: frozenset[int] | None = None

    def run(self, pieces: list[Piece], stopped: Callable[[], None] = _nothing) -> None:
        """Run every piece, each on one BLAS thread (so that a piece gives the same bits
        wherever it runs); return once all are done. The first failure is raised after
        every piece that started has finished, so none still writes into the output.
        ``stopped`` is called on the thread of a piece that stopped midway (the kernel's
        :meth:`~graphexec.devices.base.Kernel.stopped`)."""
        with blas_threads(1):
            self._run_all(pieces, stopped)

    def across(self, kernel: Kernel, inputs: list[Any], outputs: list[Any]) -> bool:
        """Run the node on every thread through compiled parts (see
        :meth:`~graphexec.devices.base.Kernel.across`), unless another run in flight took
        the cores; whether it ran. BLAS is on one thread already: only runs of a policy with
        compiled parts (one BLAS thread for the whole run) have kernels made for them."""
        if occupancy().running > 1:
            return False
        if self.place:
            core = current_core()
            if core is not None:
                if self._cores is None:
                    self._cores = frozenset(usable_cores())
                kernel.place_helpers(core, self._cores)
        return kernel.across(inputs, outputs, self.count)

    def _run_all(self, pieces: list[Piece], stopped: Callable[[], None]) -> None:
        # Another run in flight in the process took the cores after this one began: the
        # pieces run here, one after another (their output is the whole node's either way).
        crowded = occupancy().running > 1
        hand_all = self.pinned and not on_pinned_worker() and not crowded
        mine = pieces if crowded else [] if hand_all else pieces[:1]
        handed = pieces[len(mine):]
        executors = (self.executor.away_from(current_core(), len(handed)) if isinstance(self.executor, CorePool)
                     else [self.executor] * len(handed))
        futures = [self._submit(executor, piece, stopped) for executor, piece in zip(executors, handed)]
        failure: BaseException | None = None
        for piece in mine:
            failure = _run(piece, stopped)
        for piece, future in zip(handed, futures):
            if future is None or (not hand_all and future.cancel()):  # not started: run it here
                if future is not None and self.lease is not None:
                    self.lease.let_go()  # cancelled: it never runs over there
                if failure is None:
                    failure = _run(piece, stopped)
                continue
            error = future.exception()  # waits for it to finish
            failure = failure or error
        if failure is not None:
            raise failure

    def _submit(self, executor: Executor, piece: Piece, stopped: Callable[[], None]) -> Future | None:
        if self.lease is None:
            try:
                return executor.submit(_quiet, piece, stopped)
            except RuntimeError:  # a pool shut down meanwhile: the piece runs on this thread
                return None
        self.lease.hold()
        try:
            return executor.submit(_holding, piece, stopped, self.lease)
        except RuntimeError:
            self.lease.let_go()
            return None


def _quiet(piece: Piece, stopped: Callable[[], None]) -> None:
    try:
        with quiet_floats():
            piece.run()
    except BaseException:
        stopped()  # midway, perhaps before writing what this thread keeps between runs
        raise


def _holding(piece: Piece, stopped: Callable[[], None], lease: Lease) -> None:
    try:
        _quiet(piece, stopped)
    finally:
        lease.let_go()


def _run(piece: Piece, stopped: Callable[[], None]) -> BaseException | None:
    try:
        _quiet(piece, stopped)
    except BaseException as exc:  # noqa: BLE001 - raised by Spreader.run once every piece is done
        return exc
    return None
