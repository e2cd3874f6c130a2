"""``engine="dask"``: chunks run as tasks on a Dask cluster (``dask[distributed]``).

Each worker loads the engine once, through a worker plugin registered for the job (the
scheduler gives it to workers that join later, a dead worker's replacement among them)
and removed after it. A task is one chunk of rows, never one row (one sample per task ran
at a sixth of the batched speed), and only a few chunks per worker are in flight, so the
driver never holds more inputs than that. Each result is fetched and released as soon as
it is done, so a worker that dies holds no finished results to compute again; the scheduler
runs its unfinished tasks elsewhere (up to ``distributed.scheduler.allowed-failures`` deaths
per task).

A worker runs one task per thread and its threads stand for its cores, so each task's
engine runs on one thread with one BLAS thread (unless ``options`` set the threads).
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator, Mapping
from itertools import islice
from typing import Any

from loguru import logger

from graphexec.batch.extras import require

distributed = require("distributed", "dask", 'batch.run(engine="dask")')
import dask.config  # noqa: E402  (distributed's own dependency)

from graphexec.batch.rows import Chunk, Reader  # noqa: E402
from graphexec.batch.worker import ChunkResult, WorkerEngine  # noqa: E402
from graphexec.engine import cpu_count  # noqa: E402
from graphexec.errors import WorkerError  # noqa: E402

#: Chunks in flight per worker thread: one running, one waiting (its data already there).
IN_FLIGHT = 2


class EnginePlugin(distributed.WorkerPlugin):
    """Gives each worker of a job its engine, loaded on the first chunk it runs."""

    def __init__(self, model: str, options: Mapping[str, Any] | None, reader: Reader | None):
        self.model, self.options, self.reader = model, dict(options or {}), reader
        self.engine: WorkerEngine | None = None

    def setup(self, worker: Any) -> None:
        self.engine = WorkerEngine(self.model, self.options, self.reader, cpus=1)

    def teardown(self, worker: Any) -> None:
        if self.engine is not None:
            self.engine.close()


def run_chunk(plugin: str, chunk: Chunk) -> ChunkResult:
    """A task: ``chunk`` on this worker's engine for the job whose plugin is named ``plugin``."""
    return distributed.get_worker().plugins[plugin].engine.run(chunk)


class DaskBackend:
    def __init__(self, model: str, options: Mapping[str, Any] | None, reader: Reader | None,
                 workers: int | None, address: str | None):
        self.cluster = None
        self.pending: Any = None
        #: The variables a nanny sets in this process before spawning a worker (and leaves set).
        self.environ = {key: os.environ.get(key) for key in
                        dask.config.get("distributed.nanny.pre-spawn-environ", {})}
        try:
            if address is None:
                self.cluster = distributed.LocalCluster(
                    n_workers=workers or cpu_count(), threads_per_worker=1, processes=True,
                    dashboard_address=":0", silence_logs=logging.ERROR)
                self.client = distributed.Client(self.cluster)
            else:
                if workers is not None:
                    logger.warning("workers={} is not used: the Dask cluster at {} has workers of its own",
                                   workers, address)
                self.client = distributed.Client(address)
        except (OSError, TimeoutError) as exc:
            self.close()
            raise WorkerError(f"cannot reach the Dask scheduler at {address}: {exc}") from exc
        self.run_id = f"graphexec-batch-{uuid.uuid4().hex[:12]}"
        self.client.register_plugin(EnginePlugin(model, options, reader), name=self.run_id)
        self.slots = max(1, sum(self.client.nthreads().values()))
        where = "a local cluster" if address is None else address
        self.description = f"Dask ({where}, {len(self.client.nthreads())} workers, {self.slots} threads)"

    def _submit(self, chunk: Chunk) -> Any:
        return self.client.submit(run_chunk, self.run_id, chunk, key=f"{self.run_id}-{chunk.start}", pure=False)

    def results(self, chunks: Iterator[Chunk]) -> Iterator[ChunkResult]:
        pending = self.pending = distributed.as_completed(
            [self._submit(c) for c in islice(chunks, IN_FLIGHT * self.slots)])
        for future in pending:
            for chunk in islice(chunks, 1):
                pending.add(self._submit(chunk))
            try:
                result = future.result()
            except distributed.KilledWorker as exc:
                raise WorkerError(f"the workers running task {future.key} died too often to go on: {exc}") from exc
            future.release()
            yield result

    def close(self) -> None:
        client = getattr(self, "client", None)
        if client is not None:
            try:
                if self.pending is not None:  # a job stopped by an error: its other tasks are not wanted
                    client.cancel(list(self.pending.futures))
                if self.cluster is None and getattr(self, "run_id", None):  # a cluster that outlives the job
                    client.unregister_worker_plugin(self.run_id)
            finally:
                client.close()
        if self.cluster is not None:
            self.cluster.close()
            for key, value in self.environ.items():  # this process's environment as it was
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
