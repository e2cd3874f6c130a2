"""``engine="local"``: the rows run in this process, on one engine.

With ``workers`` of 2 or more, that many chunks run at once on threads of this process, one
engine shared by all (``Engine.forward`` may be called from several threads), each call on
one thread and one BLAS thread; by default one chunk at a time, on the threads the engine
chooses for itself.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from itertools import islice
from typing import Any

from graphexec.batch.rows import Chunk, Reader
from graphexec.batch.worker import ChunkResult, WorkerEngine


class LocalBackend:
    def __init__(self, model: str, options: Mapping[str, Any] | None, reader: Reader | None,
                 workers: int | None):
        self.workers = workers or 1
        self.engine = WorkerEngine(model, options, reader, 1 if self.workers > 1 else None)
        self.description = f"this process, {self.workers} chunk(s) at a time"

    def results(self, chunks: Iterator[Chunk]) -> Iterator[ChunkResult]:
        if self.workers == 1:
            for chunk in chunks:
                yield self.engine.run(chunk)
            return
        with ThreadPoolExecutor(self.workers, thread_name_prefix="graphexec-batch") as pool:
            pending: set[Future] = {pool.submit(self.engine.run, c) for c in islice(chunks, 2 * self.workers)}
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    pending.update(pool.submit(self.engine.run, c) for c in islice(chunks, 1))
                    yield future.result()

    def close(self) -> None:
        self.engine.close()
