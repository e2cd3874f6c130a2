"""Batch inference over a dataset, in this process or on a Dask or Ray cluster, from one call.

::

    from graphexec import batch

    ys = batch.run("m.pnnx.param", inputs, engine="dask", workers=2, batch_size=32)
    ys = batch.run("m.pnnx.param", "samples/", engine="ray", address="auto", out="ys.npy")

Dask and Ray are optional (``pip install "graphexec[dask]"``, ``"graphexec[ray]"``) and
imported only by a job that uses them. Engines are never shipped to workers: each worker
loads its own from the model's path (which workers must be able to read) and runs it
within the CPUs it was given. See docs/batch.md for jobs on an existing cluster.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from loguru import logger

from graphexec.batch.predictor import Predictor
from graphexec.batch.progress import ProgressOption, progress_bar
from graphexec.batch.results import BatchResult, Results
from graphexec.batch.rows import Reader, Rows, read_sample
from graphexec.errors import InputError

#: What ``engine=`` takes.
ENGINES = ("local", "dask", "ray")

__all__ = ["ENGINES", "BatchResult", "Predictor", "read_sample", "run"]


def run(
    model: str | os.PathLike[str],
    inputs: Any,
    *,
    engine: str = "local",
    workers: int | None = None,
    batch_size: int = 32,
    address: str | None = None,
    options: Mapping[str, Any] | None = None,
    out: str | os.PathLike[str] | None = None,
    progress: ProgressOption = None,
    on_error: str = "raise",
    reader: Reader | None = None,
) -> Any:
    """Run ``model`` (a ``.pnnx.param``, or a folder holding one) on every sample of ``inputs``.

    ``inputs``: an array whose axis 0 is the samples (a tuple of them for several model
    inputs); the path of an ``.npy`` holding such an array (memory-mapped); a list of
    ``.npy``/``.npz`` paths, one sample each, with or without a leading batch dimension of 1
    (an ``.npz`` holds ``in0``, ``in1``, ...), read on the workers; a folder of such
    files, in sorted order; or a list of samples (arrays, or tuples of arrays).
    ``reader(path)`` reads a file instead (it must pickle).

    Returns the outputs in input order: an array (a row per sample) for a one-output model,
    a tuple of arrays for several. ``out="ys.npy"`` writes them there as they arrive
    (``ys.out0.npy``, ``ys.out1.npy``, ... for several outputs) and returns them
    memory-mapped.

    ``engine``: ``"local"`` (this process; ``workers`` chunks at once on threads, by
    default one per core), ``"dask"`` or ``"ray"``. ``address``: an existing cluster (``tcp://host:8786`` for
    Dask; ``"auto"`` or ``ray://host:10001`` for Ray; a Ray instance already started in
    this process is used as it is); without it a local cluster of ``workers`` (default: the
    cores) is started and stopped around the call. ``batch_size``: rows per chunk sent to a
    worker and run as one batch where the model takes one; models exported with a fixed
    batch run the rows one at a time (a log line says so). ``options``: ``Engine.load``'s;
    without thread options, each worker's engine runs on one thread per CPU it was given
    (``engine="local", workers=1``: on the threads the engine chooses).

    ``on_error="raise"`` stops at the first row that fails with a RowError naming it (and
    its file); ``"skip"`` runs every other row and returns a :class:`BatchResult`: the
    outputs with NaN in the failed rows, the list of failures and a mask of the rows that
    ran. A worker that dies mid-run is replaced and its rows run again; each row is in the
    result once. ``progress``: a bar on stderr (None: when stderr is a terminal; True;
    False) or a callable given ``(rows done, rows in all)``.
    """
    if engine not in ENGINES:
        raise InputError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if on_error not in ("raise", "skip"):
        raise InputError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    for name, value in (("batch_size", batch_size), ("workers", workers)):
        if value is not None and not (isinstance(value, int) and value >= 1):
            raise InputError(f"{name} must be a positive integer, got {value!r}")
    if address is not None and engine == "local":
        raise InputError("address= names a cluster: use it with engine='dask' or engine='ray'")
    rows = Rows(inputs)
    backend = _backend(engine, os.fspath(model), options, reader, workers, address)
    results = Results(len(rows), out, skip=on_error == "skip")
    bar = progress_bar(progress, len(rows))
    logger.info("{} rows of {} in chunks of {} on {}", len(rows), model, batch_size, backend.description)
    try:
        for result in backend.results(rows.chunks(batch_size)):
            bar.update(results.add(result))
    finally:
        bar.close()
        backend.close()
    return results.finish()


def _backend(engine: str, model: str, options: Mapping[str, Any] | None, reader: Reader | None,
             workers: int | None, address: str | None) -> Any:
    if engine == "dask":
        from graphexec.batch.on_dask import DaskBackend

        return DaskBackend(model, options, reader, workers, address)
    if engine == "ray":
        from graphexec.batch.on_ray import RayBackend

        return RayBackend(model, options, reader, workers, address)
    from graphexec.batch.on_local import LocalBackend

    return LocalBackend(model, options, reader, workers)
