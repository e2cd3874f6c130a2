"""``batch.Predictor``: a model as a callable for pipelines a user runs on Dask or Ray.

It pickles as its model's path and options; the engine is loaded where it is first called
(once per Ray actor, once per Dask worker process), within that worker's CPUs.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from graphexec.batch.rows import ArrayChunk, Chunk, SampleChunk, as_sample
from graphexec.batch.worker import ChunkRunner, framework_cpus, load_engine
from graphexec.errors import GraphexecError, InputError, RowError


class Predictor:
    """``Predictor("m.pnnx.param")(batch)``: the model's outputs for a batch of samples.

    ``batch`` may be

    - an array whose axis 0 is the samples (Dask's ``map_blocks``; Ray Data with
      ``batch_format="numpy"`` on a one-column dataset): the outputs as ``Engine.forward``
      gives them (an array, or a tuple for several outputs), a row per sample;
    - a dict of arrays (Ray Data's batches): the columns named like the model's inputs
      (``in0``, ...; ``input_columns`` names others) are read, and the result holds the
      other columns unchanged and one column per output (``out0``, ...; or
      ``output_columns``); a one-input model reads the only column there is;
    - a list of samples (a Dask bag's partition, for ``map_partitions``): a list with the
      outputs of each sample.

    ``options`` are ``Engine.load``'s; without thread options, inside a Ray actor or Dask
    worker the engine keeps to the CPUs it was given. Models exported with a fixed batch run
    the samples one at a time. A failing sample raises :class:`~graphexec.errors.RowError`
    with its index in the batch.

    In Ray Data::

        ds.map_batches(Predictor, fn_constructor_args=("m.pnnx.param",), batch_size=32, concurrency=2)
    """

    def __init__(self, model: str | os.PathLike[str], options: Mapping[str, Any] | None = None, *,
                 input_columns: Sequence[str] | None = None, output_columns: Sequence[str] | None = None):
        self.model = os.fspath(model)
        self.options = dict(options or {})
        self.input_columns = None if input_columns is None else list(input_columns)
        self.output_columns = None if output_columns is None else list(output_columns)
        self._runner: ChunkRunner | None = None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_runner"] = state["_lock"] = None  # the engine stays where it was loaded
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def runner(self) -> ChunkRunner:
        with self._lock:
            if self._runner is None:
                self._runner = ChunkRunner(load_engine(self.model, self.options, framework_cpus()))
            return self._runner

    def __call__(self, batch: Any) -> Any:
        if isinstance(batch, Mapping):
            return self._columns(batch)
        if isinstance(batch, np.ndarray):
            outputs = self._run(ArrayChunk(0, (batch,)))
            return outputs[0] if len(outputs) == 1 else outputs
        if isinstance(batch, (list, tuple)):
            return self._samples(batch)
        raise InputError(f"Predictor takes an array, a dict of arrays or a list of samples, got {type(batch).__name__}")

    def _run(self, chunk: Chunk) -> tuple[np.ndarray, ...]:
        if len(chunk) == 0:  # what Dask's map_blocks asks to learn the outputs' type
            return self._empty()
        result = self.runner().run(chunk)
        if result.failed:
            first = result.failed[0]
            raise RowError(first.offset, first.source, first.reason)
        return result.outputs

    def _empty(self) -> tuple[np.ndarray, ...]:
        """Outputs of no rows: the exported outputs' shapes past axis 0, and their dtypes."""
        engine = self.runner().engine
        try:
            specs = engine.specs()
            return tuple(np.empty((0, *specs[n].shape[1:]), specs[n].dtype) for n in engine.program.outputs)
        except GraphexecError:  # shapes not fixed at export: rows of nothing
            return tuple(np.empty((0,), np.float32) for _ in engine.output_names)

    def _columns(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        runner = self.runner()
        inputs = self.input_columns or list(runner.engine.input_names)
        if not all(name in batch for name in inputs):
            if self.input_columns is None and len(inputs) == 1 and len(batch) == 1:
                inputs = list(batch)
            else:
                raise InputError(f"the batch has columns {list(batch)}, not the model's inputs {inputs}; "
                                 f"name them with Predictor(..., input_columns=[...])")
        outputs = self._run(ArrayChunk(0, tuple(np.asarray(batch[name]) for name in inputs)))
        names = self.output_columns or list(runner.names)
        if len(names) != len(outputs):
            raise InputError(f"output_columns names {len(names)} columns, the model has {len(outputs)} outputs")
        kept = {key: value for key, value in batch.items() if key not in inputs}
        return {**kept, **dict(zip(names, outputs))}

    def _samples(self, samples: Sequence[Any]) -> list[Any]:
        rows = tuple(as_sample(s, f"sample {i}") for i, s in enumerate(samples))
        outputs = self._run(SampleChunk(0, rows)) if rows else ()
        return [outputs[0][i] if len(outputs) == 1 else tuple(o[i] for o in outputs) for i in range(len(rows))]
