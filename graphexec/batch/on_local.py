"""``engine="local"``: the rows run in this process, on one engine.

``workers`` chunks run at once (by default one per core), on threads of this process that
share the engine (``Engine.forward`` may be called from several threads at once), each
call on its share of the cores with one BLAS thread. Chunks side by side gain more than
threads inside one chunk: on the project's busy 2-core VM, two chunks at once on one
thread each ran inception_mini 2.6-5.8x as fast as one chunk at a time on the threads the
engine chooses for itself (see docs/benchmarks.md, "Batch jobs on Dask and Ray").
``workers=1`` runs one chunk at a time on the engine's own choice of threads.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from itertools import islice
from typing import Any

from graphexec.batch.rows import Chunk, Reader
from graphexec.batch.worker import ChunkResult, WorkerEngine
from graphexec.engine import cpu_count


class LocalBackend:
    def __init__(self, model: str, options: Mapping[str, Any] | None, reader: Reader | None,
                 workers: int | None):
        self.workers = workers or cpu_count()
        share = max(1, cpu_count() // self.workers) if self.workers > 1 else None
        self.engine = WorkerEngine(model, options, reader, share)
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
