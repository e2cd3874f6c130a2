"""Where a batch job's outputs land on the driver: in input order, each row exactly once.

Chunks come back in any order, and a chunk that a dead worker had started may come back
twice; :class:`Results` keeps the first and counts every row, so a finished job holds each
row once or says which never came. With ``out=`` the outputs are written to ``.npy`` files
memory-mapped as they arrive, so a job larger than memory works.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from loguru import logger

from graphexec.batch.worker import ChunkResult
from graphexec.errors import GraphexecError, RowError


@dataclass
class BatchResult:
    """What ``batch.run(..., on_error="skip")`` returns: the outputs as without it (an
    array, or a tuple of arrays for several outputs) with the failed rows' entries NaN
    (zero for integer outputs; ``ok`` tells them apart), and the failures themselves."""

    outputs: Any
    #: One RowError per failed row, in row order: ``index``, ``source`` (the file), ``reason``.
    failed: list[RowError] = field(default_factory=list)
    #: Per row: True where it ran (False where it failed).
    ok: np.ndarray | None = None


def output_paths(out: str | os.PathLike[str], names: tuple[str, ...]) -> list[Path]:
    """``ys.npy`` for one output; ``ys.out0.npy``, ``ys.out1.npy``, ... for several."""
    path = Path(out)
    if len(names) == 1:
        return [path]
    stem = path.name.removesuffix(".npy")
    return [path.with_name(f"{stem}.{name}.npy") for name in names]


class Results:
    """The job's outputs, filled in as chunks arrive."""

    def __init__(self, total: int, out: str | os.PathLike[str] | None = None, skip: bool = False):
        self.total = total
        self.out = out
        self.skip = skip
        self.arrays: list[np.ndarray] | None = None
        self.names: tuple[str, ...] = ()
        self.seen = np.zeros(total, dtype=bool)
        self.ok = np.zeros(total, dtype=bool)
        self.failed: list[RowError] = []
        self.singly = False

    def add(self, result: ChunkResult) -> int:
        """Take one chunk's result; return how many rows it newly settled (0 for a repeat).
        Raises the first failure unless failures are skipped."""
        if result.error is not None:
            raise result.error
        rows = slice(result.start, result.start + result.size)
        if self.seen[rows].all():
            logger.debug("rows {}-{} came back again (a worker was lost): kept once", rows.start, rows.stop - 1)
            return 0
        if result.singly and not self.singly:
            self.singly = True
            logger.info("the model takes no batch of {} rows (exported with a fixed batch?): rows run one at a time",
                        result.size)
        failures = [RowError(result.start + f.offset, f.source, f.reason) for f in result.failed]
        if result.done:
            failures += self._write(result)
        for error in sorted(failures, key=lambda e: e.index):
            if not self.skip:
                raise error
            self.failed.append(error)
            self._blank(error.index)
        self.seen[rows] = True
        return result.size

    def _write(self, result: ChunkResult) -> list[RowError]:
        if self.arrays is None:
            self._allocate(result)
        index = result.start + np.asarray(result.done)
        wrong = [k for k, (a, o) in enumerate(zip(self.arrays, result.outputs)) if a.shape[1:] != o.shape[1:]]
        if wrong:  # a model whose outputs follow its inputs' shapes, given rows of another shape
            k = wrong[0]
            return [RowError(int(i), None, f"output {self.names[k]} has shape {result.outputs[k].shape[1:]}, "
                             f"where earlier rows gave {self.arrays[k].shape[1:]}") for i in index]
        for array, output in zip(self.arrays, result.outputs):
            array[index] = output
        self.ok[index] = True
        return []

    def _allocate(self, result: ChunkResult) -> None:
        self.names = result.names
        shapes = [(self.total, *o.shape[1:]) for o in result.outputs]
        if self.out is None:
            self.arrays = [np.empty(s, o.dtype) for s, o in zip(shapes, result.outputs)]
        else:
            self.arrays = [np.lib.format.open_memmap(path, mode="w+", dtype=o.dtype, shape=s)
                           for path, s, o in zip(output_paths(self.out, self.names), shapes, result.outputs)]
        for error in self.failed:  # rows that failed before the outputs' shapes were known
            self._blank(error.index)

    def _blank(self, index: int) -> None:
        for array in self.arrays or ():
            array[index] = np.nan if array.dtype.kind in "fc" else 0

    def finish(self) -> Any:
        """The outputs (a BatchResult when failures are skipped); every row must have come."""
        missing = np.flatnonzero(~self.seen)
        if len(missing):
            raise GraphexecError(f"{len(missing)} row(s) never came back from the workers (first: row {missing[0]})")
        if self.arrays is None:  # every row failed: nothing says what the outputs look like
            outputs = None
        else:
            for array in self.arrays:
                if isinstance(array, np.memmap):
                    array.flush()
            outputs = self.arrays[0] if len(self.arrays) == 1 else tuple(self.arrays)
        if self.skip:
            return BatchResult(outputs, self.failed, self.ok)
        return outputs
