"""What a batch job reads: the inputs a user gives, cut into chunks of rows.

A chunk is what travels to a worker. An :class:`ArrayChunk` carries its rows' data (sliced
from the user's arrays, or from a memory-mapped ``.npy`` of samples); a :class:`FileChunk`
carries only paths, and the worker reads the files, so the driver never holds a dataset of
files. Both are plain picklable data and know nothing of the engine.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from graphexec.errors import InputError

#: One sample: one array per model input.
Sample = tuple[np.ndarray, ...]
#: Reads one file into a sample: an array for a one-input model, a tuple of arrays for several.
Reader = Callable[[str], np.ndarray | Sequence[np.ndarray]]
#: File names a folder of samples is read from.
SAMPLE_SUFFIXES = (".npy", ".npz")


def read_sample(path: str) -> Sample:
    """A sample from ``path``: an ``.npy`` holds the one input; an ``.npz`` holds ``in0``,
    ``in1``, ... (as ``graphexec.export``'s ``.io.npz`` files do)."""
    try:
        loaded = np.load(path, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            return (loaded,)
        with loaded:
            names = sorted((k for k in loaded.files if k.startswith("in") and k[2:].isdigit()),
                           key=lambda k: int(k[2:]))
            if not names:
                raise InputError(f"{path}: the .npz holds no arrays named in0, in1, ...")
            return tuple(loaded[k] for k in names)
    except InputError:
        raise
    except (OSError, ValueError, EOFError, KeyError) as exc:  # missing, truncated, not .npy at all
        raise InputError(f"{path}: cannot read it as a sample: {type(exc).__name__}: {exc}") from exc


def as_sample(value: Any, source: str) -> Sample:
    """What a reader returned, as a tuple of arrays (one per model input)."""
    parts = value if isinstance(value, (tuple, list)) else (value,)
    try:
        return tuple(np.asarray(part) for part in parts)
    except Exception as exc:  # noqa: BLE001  (a reader may return anything)
        raise InputError(f"{source}: the reader returned something that is not arrays ({exc})") from exc


@dataclass(frozen=True)
class ArrayChunk:
    """Rows ``start .. start + len`` given as data: one array per model input, rows on axis 0."""

    start: int
    arrays: tuple[np.ndarray, ...]

    def __len__(self) -> int:
        return len(self.arrays[0])

    def samples(self, reader: Reader | None) -> Iterator[tuple[str | None, Sample | InputError]]:
        for i in range(len(self)):
            yield None, tuple(a[i] for a in self.arrays)


@dataclass(frozen=True)
class FileChunk:
    """Rows ``start .. start + len`` given as files, one sample each, read where they run."""

    start: int
    paths: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.paths)

    def samples(self, reader: Reader | None) -> Iterator[tuple[str | None, Sample | InputError]]:
        for path in self.paths:
            try:
                yield path, (read_sample(path) if reader is None else as_sample(reader(path), path))
            except InputError as exc:
                yield path, exc
            except Exception as exc:  # noqa: BLE001  (a user's reader: its error names the file)
                yield path, InputError(f"{path}: the reader failed: {type(exc).__name__}: {exc}")


@dataclass(frozen=True)
class SampleChunk:
    """Rows given as a list of samples (a Dask bag's partition), each its own shapes."""

    start: int
    rows: tuple[Sample, ...]

    def __len__(self) -> int:
        return len(self.rows)

    def samples(self, reader: Reader | None) -> Iterator[tuple[str | None, Sample | InputError]]:
        for row in self.rows:
            yield None, row


Chunk = ArrayChunk | FileChunk | SampleChunk


class Rows:
    """The rows of a job, from whatever the user passed as ``inputs``:

    - an array whose axis 0 is the samples, or a tuple of such arrays (one per model input);
    - the path of one ``.npy`` file holding such an array (memory-mapped, read a chunk at a time);
    - a list of ``.npy``/``.npz`` paths, one sample each;
    - a folder of such files, in sorted order of their names;
    - a list of samples: arrays, or tuples of arrays (one per model input).
    """

    def __init__(self, inputs: Any):
        self.arrays: tuple[np.ndarray, ...] | None = None
        self.paths: list[str] | None = None
        self.samples: list[Sample] | None = None
        if isinstance(inputs, (str, os.PathLike)):
            path = Path(inputs)
            if path.is_dir():
                self.paths = sorted(str(p) for p in path.iterdir() if p.suffix in SAMPLE_SUFFIXES)
                if not self.paths:
                    raise InputError(f"{path}: the folder holds no {' or '.join(SAMPLE_SUFFIXES)} files")
            elif path.suffix == ".npy":
                self.arrays = (_memory_mapped(path),)
            else:
                raise InputError(f"{path}: expected a folder of samples or an .npy file of them")
        elif isinstance(inputs, np.ndarray):
            self.arrays = (inputs,)
        elif isinstance(inputs, tuple) and inputs and all(isinstance(x, np.ndarray) for x in inputs):
            self.arrays = inputs
        elif isinstance(inputs, Sequence) and all(isinstance(x, (str, os.PathLike)) for x in inputs):
            self.paths = [os.fspath(x) for x in inputs]
        elif isinstance(inputs, Sequence) and all(_is_sample(x) for x in inputs):
            self.samples = [as_sample(x, f"sample {i}") for i, x in enumerate(inputs)]
        else:
            raise InputError("inputs must be an array of samples (or a tuple of them, one per model input), "
                             "an .npy file, a folder, a list of file paths or a list of samples; "
                             f"got {type(inputs).__name__}")
        if self.arrays is not None:
            if any(a.ndim == 0 for a in self.arrays):
                raise InputError("an input array has no axis of samples (it is a scalar)")
            lengths = {len(a) for a in self.arrays}
            if len(lengths) != 1:
                raise InputError(f"the input arrays hold different numbers of samples: {[len(a) for a in self.arrays]}")
        if len(self) == 0:
            raise InputError("inputs hold no samples")

    def __len__(self) -> int:
        if self.arrays is not None:
            return len(self.arrays[0])
        return len(self.paths if self.paths is not None else self.samples)  # type: ignore[arg-type]

    def chunks(self, size: int) -> Iterator[Chunk]:
        """The rows in order, ``size`` at a time (made as they are asked for)."""
        for start in range(0, len(self), size):
            if self.paths is not None:
                yield FileChunk(start, tuple(self.paths[start:start + size]))
            elif self.samples is not None:
                yield SampleChunk(start, tuple(self.samples[start:start + size]))
            else:  # a copy: a slice of a memory map would drag the whole map into the pickle
                yield ArrayChunk(start, tuple(np.array(a[start:start + size]) for a in self.arrays))


def _is_sample(value: Any) -> bool:
    return isinstance(value, np.ndarray) or (
        isinstance(value, (tuple, list)) and bool(value) and all(isinstance(x, np.ndarray) for x in value))


def _memory_mapped(path: Path) -> np.ndarray:
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise InputError(f"{path}: cannot read it as an array of samples: {type(exc).__name__}: {exc}") from exc
