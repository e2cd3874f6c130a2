"""What runs where the rows are computed: one engine per worker, and a chunk of rows through it.

Engines are loaded where they run, from the model's path and the ``Engine.load`` options
(never shipped as objects), each within the CPUs its worker was given
(:func:`worker_options`). A model exported with a fixed batch (a reshape to ``(1, ...)``)
cannot take a batch of rows: :class:`ChunkRunner` asks the engine's planner whether it
can before running one, and otherwise runs the rows one at a time.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from graphexec.batch.rows import Chunk, Reader, Sample
from graphexec.errors import GraphexecError, InputError, InputShapeError, LayerConfigError

#: The ``Engine.load`` options that decide its threads: given any, the user's choice holds.
THREAD_OPTIONS = ("threads", "intra_op_threads", "executor")


def model_path(model: str | os.PathLike[str]) -> str:
    """The ``.pnnx.param`` that ``model`` names: itself, or a folder's one model."""
    path = Path(model)
    if path.is_dir():
        found = sorted(path.glob("*.pnnx.param"))
        if len(found) != 1:
            raise InputError(f"{path}: expected one .pnnx.param in the folder, found {len(found)}")
        return str(found[0])
    return str(path)


def cpu_allotment(given: float | None) -> int:
    """The CPUs this worker may keep busy: what its framework gave it (``given``), no more
    than the cores it may run on (affinity) and ``OMP_NUM_THREADS`` when a host framework
    set it (Dask's nannies and Ray's workers do)."""
    limits = [len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)]
    if given is not None:
        limits.append(max(1, int(given)))
    omp = os.environ.get("OMP_NUM_THREADS", "")
    if omp.isdigit() and int(omp) > 0:
        limits.append(int(omp))
    return min(limits)


def framework_cpus() -> float | None:
    """The CPUs the framework running this code gave it: 1 in a Dask worker (it runs one
    task per thread, one thread per core), the ``CPU`` resource of a Ray actor or task;
    None outside both. Neither framework is imported here: only looked for."""
    distributed = sys.modules.get("distributed")
    if distributed is not None:
        try:
            distributed.get_worker()
            return 1
        except ValueError:
            pass
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        cpus = ray.get_runtime_context().get_assigned_resources().get("CPU")
        if cpus:
            return cpus
    return None


def worker_options(options: Mapping[str, Any] | None, cpus: float | None) -> dict[str, Any]:
    """``Engine.load`` options for a worker given ``cpus`` CPUs (None: not in a framework's
    worker, the engine chooses): ``threads`` workers of one BLAS thread each, so that
    workers side by side never ask for more cores than they hold (a default engine in each
    of two one-CPU workers took two BLAS threads and ran 3-5x slower). Options that set
    the threads themselves are kept as given."""
    chosen = dict(options or {})
    if cpus is None or any(key in chosen for key in THREAD_OPTIONS):
        return chosen
    chosen["threads"] = cpu_allotment(cpus)
    chosen["intra_op_threads"] = 1
    return chosen


def load_engine(model: str, options: Mapping[str, Any] | None, cpus: float | None) -> Any:
    from graphexec.engine import Engine

    return Engine.load(model_path(model), **worker_options(options, cpus))


@dataclass(frozen=True)
class RowFailure:
    """One row that did not run: its offset in the chunk, its file, and why (as text, so it
    crosses any process boundary)."""

    offset: int
    source: str | None
    reason: str


@dataclass(frozen=True)
class ChunkResult:
    """What a worker sends back for a chunk: the outputs of the rows that ran (in order of
    ``done``), and the rows that failed."""

    start: int
    size: int
    #: Offsets (in the chunk) of the rows that ran, in the order of the outputs' axis 0.
    done: tuple[int, ...]
    #: One array per model output, a row per entry of ``done``.
    outputs: tuple[np.ndarray, ...]
    names: tuple[str, ...]
    failed: tuple[RowFailure, ...]
    #: Rows ran one at a time: the model takes no batch of their number.
    singly: bool = False
    #: The worker could run nothing (the model did not load): the job stops with this error.
    error: GraphexecError | None = None


def _reason(exc: BaseException, source: str | None = None) -> str:
    """``exc`` as text, without the file's name in front (the RowError shows it)."""
    text = str(exc)
    if source is not None:
        text = text.removeprefix(f"{source}: ")
    return f"{type(exc).__name__}: {text}"


def as_graphexec_error(exc: BaseException) -> GraphexecError:
    """``exc`` if it is one of ours (they pickle), else ours with its text."""
    return exc if isinstance(exc, GraphexecError) else GraphexecError(_reason(exc))


class ChunkRunner:
    """Runs chunks of rows on one engine: reads them, stacks rows of the same shapes into a
    batch where the model takes one, and isolates the rows that fail."""

    def __init__(self, engine: Any, reader: Reader | None = None):
        self.engine = engine
        self.reader = reader
        self.names = tuple(engine.output_names)
        self._ranks = [None if s is None else len(s) for s in engine.input_shapes.values()]
        self._takes: dict[tuple[int, tuple[tuple[int, ...], ...]], bool] = {}
        self._lock = threading.Lock()

    def run(self, chunk: Chunk) -> ChunkResult:
        failed: list[RowFailure] = []
        sources: list[str | None] = []
        groups: dict[tuple[tuple[int, ...], ...], list[tuple[int, Sample]]] = {}
        for offset, (source, sample) in enumerate(chunk.samples(self.reader)):
            sources.append(source)
            try:
                if isinstance(sample, Exception):
                    raise sample
                row = self._row(sample)
            except GraphexecError as exc:
                failed.append(RowFailure(offset, source, _reason(exc, source)))
                continue
            groups.setdefault(tuple(x.shape for x in row), []).append((offset, row))
        results: dict[int, tuple[np.ndarray, ...]] = {}
        singly = False
        for shapes, rows in groups.items():
            ran, one_by_one = self._run_group(shapes, rows, sources, failed)
            results.update(ran)
            singly |= one_by_one
        done = sorted(results)
        shapes_of = {o: [r.shape for r in results[o]] for o in done}
        keep = [o for o in done if shapes_of[o] == shapes_of[done[0]]]
        for o in sorted(set(done) - set(keep)):  # rows of other shapes gave outputs of other shapes
            failed.append(RowFailure(o, sources[o], f"its outputs' shapes {shapes_of[o]} differ from "
                                     f"row {chunk.start + done[0]}'s {shapes_of[done[0]]}"))
        outputs = tuple(np.stack([results[o][k] for o in keep]) for k in range(len(self.names))) if keep else ()
        return ChunkResult(chunk.start, len(chunk), tuple(keep), outputs, self.names,
                           tuple(sorted(failed, key=lambda f: f.offset)), singly)

    def _row(self, sample: Sample) -> Sample:
        """``sample`` as one row per input, without a leading batch dimension of 1."""
        if len(sample) != len(self._ranks):
            raise InputError(f"the model takes {len(self._ranks)} input(s), the sample holds {len(sample)}")
        row = []
        for name, rank, x in zip(self.engine.input_names, self._ranks, sample):
            if rank is not None and x.ndim == rank and x.shape[:1] == (1,):
                x = x[0]
            elif rank is not None and x.ndim != rank - 1:
                raise InputShapeError(f"input {name}: expected a sample of rank {rank - 1} "
                                      f"(or {rank} with a leading 1), given shape {tuple(x.shape)}")
            row.append(x)
        return tuple(row)

    def takes_batch(self, size: int, shapes: tuple[tuple[int, ...], ...]) -> bool:
        """Whether the engine can run ``size`` rows of these shapes as one batch, each output
        keeping one row per input row on axis 0 (asked of its planner, nothing run)."""
        key = (size, shapes)
        with self._lock:
            known = self._takes.get(key)
        if known is None:
            try:
                specs = self.engine.specs(*[(size, *s) for s in shapes])
                known = all(getattr(specs.get(name), "shape", ())[:1] == (size,)
                            for name in self.engine.program.outputs)
            except (InputError, LayerConfigError):  # InputShapeError: a fixed batch dimension
                known = False
            with self._lock:
                self._takes[key] = known
        return known

    def _run_group(self, shapes: tuple[tuple[int, ...], ...], rows: list[tuple[int, Sample]],
                   sources: Sequence[str | None], failed: list[RowFailure],
                   ) -> tuple[dict[int, tuple[np.ndarray, ...]], bool]:
        """Outputs per row of rows that share their shapes; a failing batch is run again a
        row at a time, so that only the rows that fail are reported."""
        if len(rows) > 1 and self.takes_batch(len(rows), shapes):
            batch = [np.stack([row[k] for _, row in rows]) for k in range(len(shapes))]
            try:
                outs = self._forward(batch)
                return {offset: tuple(o[i] for o in outs) for i, (offset, _) in enumerate(rows)}, False
            except GraphexecError:
                pass  # a row of it fails: find which
        ran = {}
        for offset, row in rows:
            try:
                outs = self._forward([x[None] for x in row])
            except GraphexecError as exc:
                failed.append(RowFailure(offset, sources[offset], _reason(exc, sources[offset])))
                continue
            ran[offset] = tuple(o[0] if o.shape[:1] == (1,) else o for o in outs)
        return ran, len(rows) > 1 and not self.takes_batch(len(rows), shapes)

    def _forward(self, batch: list[np.ndarray]) -> tuple[np.ndarray, ...]:
        result = self.engine.forward(*batch)
        return tuple(np.asarray(o) for o in (result if isinstance(result, tuple) else (result,)))


class WorkerEngine:
    """The engine of one worker process, loaded on first use (in the thread that runs the
    first chunk, not in a framework's event loop), and the error if it failed to load."""

    def __init__(self, model: str, options: Mapping[str, Any] | None, reader: Reader | None,
                 cpus: float | None):
        self.model, self.options, self.reader, self.cpus = model, dict(options or {}), reader, cpus
        self._runner: ChunkRunner | None = None
        self._error: GraphexecError | None = None
        self._lock = threading.Lock()

    def runner(self) -> ChunkRunner:
        with self._lock:
            if self._runner is None and self._error is None:
                try:
                    self._runner = ChunkRunner(load_engine(self.model, self.options, self.cpus), self.reader)
                except Exception as exc:  # noqa: BLE001  (sent back to the driver, which raises it)
                    self._error = as_graphexec_error(exc)
            if self._error is not None:
                raise self._error
            return self._runner  # type: ignore[return-value]

    def run(self, chunk: Chunk) -> ChunkResult:
        """``chunk``'s result; a model that fails to load gives a result carrying the error."""
        try:
            runner = self.runner()
        except GraphexecError as exc:
            return ChunkResult(chunk.start, len(chunk), (), (), (), (), error=exc)
        return runner.run(chunk)

    def close(self) -> None:
        with self._lock:
            if self._runner is not None:
                self._runner.engine.close()
                self._runner = None
