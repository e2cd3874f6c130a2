"""Sharing one node's work among threads: its layer's pieces run at once, one on the thread
that runs the node and the others on a pool's threads.

Where the pool's workers are pinned to a core each (see :mod:`graphexec.affinity`) and
the node runs on the caller's thread, every piece goes to the workers and the caller
waits: run beside a pinned worker, the caller's own piece often shared that worker's core
until the kernel moved it (docs/design/threads.md, "Nodes shared out").

Why no deadlock is possible: a piece never waits on anything, and a worker that shares a
node out never waits on a piece that has not started: once its own piece is done it takes
back every piece still queued (a pool busy with another run's units may not have reached
them) and runs it itself. Only the caller, which is not one of the pool's workers, waits
for queued pieces; the workers always get to them, since none of them waits on the queue.
"""

from __future__ import annotations

from concurrent.futures import Executor, Future

from graphexec.affinity import CorePool, current_core, on_pinned_worker
from graphexec.blas import blas_threads
from graphexec.floats import quiet_floats
from graphexec.devices.base import Piece


class Spreader:
    """Runs a node's pieces on ``executor`` beside the calling thread; on a
    :class:`~graphexec.affinity.CorePool`, each on a thread of a core the caller is not on."""

    def __init__(self, executor: Executor | CorePool, workers: int, pinned: bool = False):
        self.executor = executor
        #: How many pieces a node is cut into: one per worker.
        self.count = workers
        #: Whether the workers are pinned to a core each: then a caller hands every piece over.
        self.pinned = pinned

    def run(self, pieces: list[Piece]) -> None:
        """Run every piece, each on one BLAS thread (so that a piece gives the same bits
        wherever it runs); return once all are done. The first failure is raised after
        every piece that started has finished, so none still writes into the output."""
        with blas_threads(1):
            self._run_all(pieces)

    def _run_all(self, pieces: list[Piece]) -> None:
        hand_all = self.pinned and not on_pinned_worker()
        mine = [] if hand_all else pieces[:1]
        handed = pieces[len(mine):]
        executors = (self.executor.away_from(current_core(), len(handed)) if isinstance(self.executor, CorePool)
                     else [self.executor] * len(handed))
        futures = [self._submit(executor, piece) for executor, piece in zip(executors, handed)]
        failure: BaseException | None = None
        for piece in mine:
            failure = _run(piece)
        for piece, future in zip(handed, futures):
            if future is None or (not hand_all and future.cancel()):  # not started: run it here
                if failure is None:
                    failure = _run(piece)
                continue
            error = future.exception()  # waits for it to finish
            failure = failure or error
        if failure is not None:
            raise failure

    @staticmethod
    def _submit(executor: Executor, piece: Piece) -> Future | None:
        try:
            return executor.submit(_quiet, piece)
        except RuntimeError:  # a pool shut down meanwhile: the piece runs on this thread
            return None


def _quiet(piece: Piece) -> None:
    with quiet_floats():
        piece.run()


def _run(piece: Piece) -> BaseException | None:
    try:
        _quiet(piece)
    except BaseException as exc:  # noqa: BLE001 - raised by Spreader.run once every piece is done
        return exc
    return None
