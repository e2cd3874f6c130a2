"""``engine="ray"``: chunks run on a pool of Ray actors, one engine each.

Each actor loads the engine once (in its ``__init__``, run again when Ray restarts it) and
reads its own chunks' files: there is no separate read stage to compete with the actors for
CPUs (a Ray Data pipeline with a read stage and an actor pool holding every CPU was seen
to hang without an error). Each chunk carries its first row's index, so the order of
completion does not matter, and chunks go out a few per actor at a time, to actors that
have started. A dead actor is restarted and its unfinished chunks run again, up to
:data:`RESTARTS` times per actor.

An actor asks for one CPU, and its engine runs on the CPUs Ray assigned it (one thread,
one BLAS thread; unless ``options`` set the threads).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from itertools import islice
from typing import Any

from loguru import logger

from graphexec.batch.extras import require

ray = require("ray", "ray", 'batch.run(engine="ray")')

from graphexec.batch.rows import Chunk, Reader  # noqa: E402
from graphexec.batch.worker import ChunkResult, WorkerEngine, framework_cpus  # noqa: E402
from graphexec.engine import cpu_count  # noqa: E402
from graphexec.errors import WorkerError  # noqa: E402

#: How many times an actor is restarted after its process died (and its chunks retried).
RESTARTS = 3
#: Chunks queued per actor: one running, one waiting.
IN_FLIGHT = 2
#: Seconds to wait for the first actor to start before saying the cluster has no room.
START_TIMEOUT = 120


class EngineActor:
    """One worker of a job: an engine loaded from the model's path in the actor's process."""

    def __init__(self, model: str, options: Mapping[str, Any] | None, reader: Reader | None):
        self.engine = WorkerEngine(model, options, reader, cpus=framework_cpus() or 1)

    def ready(self) -> None:
        """Answers once the actor is up (its process started, graphexec imported)."""

    def run(self, chunk: Chunk) -> ChunkResult:
        return self.engine.run(chunk)


class RayBackend:
    def __init__(self, model: str, options: Mapping[str, Any] | None, reader: Reader | None,
                 workers: int | None, address: str | None):
        self.started = False
        if ray.is_initialized():
            if address is not None:
                logger.warning("address={} is not used: this process is already connected to a Ray instance", address)
        else:
            try:
                if address is None:
                    ray.init(num_cpus=workers or cpu_count(), include_dashboard=False, logging_level="warning")
                else:
                    ray.init(address=address, logging_level="warning")
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise WorkerError(f"cannot start or reach a Ray cluster{f' at {address}' if address else ''}: "
                                  f"{exc}") from exc
            self.started = True
        count = workers or max(1, math.floor(ray.cluster_resources().get("CPU", 1)))
        actor = ray.remote(EngineActor).options(num_cpus=1, max_restarts=RESTARTS, max_task_retries=RESTARTS)
        self.actors = [actor.remote(model, options, reader) for _ in range(count)]
        where = "a local instance" if address is None else address
        self.description = f"Ray ({where}, {count} actors)"

    def results(self, chunks: Iterator[Chunk]) -> Iterator[ChunkResult]:
        """Chunks go to each actor once it is up (an actor the cluster has no CPU for never
        gets one, so a busy cluster runs the job on fewer actors rather than hanging)."""
        starting = {actor.ready.remote(): actor for actor in self.actors}
        running: dict[Any, tuple[Any, Chunk]] = {}
        left = True  # chunks still to hand out

        def feed(actor: Any, count: int) -> None:
            nonlocal left
            given = list(islice(chunks, count))
            left = left and len(given) == count
            for chunk in given:
                running[actor.run.remote(chunk)] = (actor, chunk)

        while running or (left and starting):
            waiting_for_start = not running
            ready, _ = ray.wait([*running, *starting] if left else list(running), num_returns=1,
                                timeout=START_TIMEOUT if waiting_for_start else None)
            if not ready:
                raise WorkerError(f"no Ray actor started in {START_TIMEOUT} s (the cluster has "
                                  f"{ray.available_resources().get('CPU', 0):g} of "
                                  f"{ray.cluster_resources().get('CPU', 0):g} CPUs free)")
            if ready[0] in starting:
                actor = starting.pop(ready[0])
                self._get(ready[0], "an actor could not start")
                feed(actor, IN_FLIGHT)
                continue
            actor, chunk = running.pop(ready[0])
            result = self._get(ready[0], f"the actor running rows {chunk.start}-{chunk.start + len(chunk) - 1} "
                                         f"was lost (an actor is restarted {RESTARTS} times at most)")
            feed(actor, 1)
            yield result

    @staticmethod
    def _get(ref: Any, what: str) -> Any:
        try:
            return ray.get(ref)
        except ray.exceptions.RayActorError as exc:
            raise WorkerError(f"{what}: {exc}") from exc

    def close(self) -> None:
        for actor in getattr(self, "actors", ()):
            ray.kill(actor)
        if self.started:
            ray.shutdown()
