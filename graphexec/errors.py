"""The one exception hierarchy of graphexec.

Every failure a user can cause (a bad file, a bad input, an operator we cannot run)
reaches them as a subclass of :class:`GraphexecError`, never as a raw ``KeyError``,
``zipfile.BadZipFile`` or numpy traceback::

    GraphexecError
    ├── ModelFormatError          the .pnnx.param / .pnnx.bin cannot be read (file:line)
    │   └── WeightError           a weight is missing, of the wrong size or undecodable
    ├── GraphStructureError       names clash, an input is never produced, a cycle
    ├── UnsupportedOperatorError  operator types with no registered layer (all listed)
    ├── LayerConfigError          an operator's params or weights are invalid
    ├── InputError                wrong inputs to forward: count, name, rank, dtype
    │   └── InputShapeError       a shape the model cannot take
    ├── ExecutionError            a layer failed while running (node, type, shapes)
    │   └── NonFiniteError        check_finite: the first operator that produced NaN/Inf
    ├── RunTimeoutError           forward(..., timeout=s) ran out of time
    ├── DeviceError               a device failed or is not available
    ├── OptionError               an engine option has a bad value
    ├── RowError                  batch.run: one row (sample, file) could not be read or run
    ├── WorkerError               batch.run: workers died or a cluster could not be reached
    └── MissingExtraError         an optional dependency is not installed (says which extra)

One warning, a ``UserWarning`` rather than a failure, shown by default because nothing
else would say that the answers may be wrong: :class:`ExportMismatchWarning`, where the graph
pnnx wrote computes other shapes than it annotated.

Every message is bounded: a longer one (a damaged file's 30 MB list param, an expression
nested 50,000 deep, a cycle through every operator) keeps its head and tail around a note
of how much was left out and, where known, the ``file:line`` that holds all of it.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence
from types import FrameType
from typing import Any


#: Characters of free text a message holds at most (a longer one is cut in the middle, see
#: :func:`excerpt`); with the names and places an error adds, a message stays under twice it.
MESSAGE_LIMIT = 2000


def excerpt(text: str, limit: int = MESSAGE_LIMIT, where: str | None = None) -> str:
    """``text``, or where it is longer than ``limit`` its head and tail around a note of
    how many characters were left out and, given ``where``, where the whole text is."""
    if len(text) <= limit:
        return text
    place = f"; all of it is at {excerpt(where, 300)}" if where else ""
    room = max(limit - len(place) - 50, 20)  # the note takes the rest
    head, tail = text[: room * 3 // 4], text[len(text) - room // 4:]
    return f"{head} [... {len(text) - len(head) - len(tail):,} characters left out{place} ...] {tail}"


def quoted(value: object, limit: int = 200) -> str:
    """``repr(value)`` for a message, at most about ``limit`` characters, made without the
    repr of all of a long list or string (a damaged file's list param may hold 10^7 items)."""
    if isinstance(value, (list, tuple)) and len(value) > 16:
        head = ", ".join(quoted(v, 40) for v in value[:8])
        return excerpt(f"[{head}, ... ({len(value):,} items in all)]", limit)
    if isinstance(value, str) and len(value) > limit:
        return f"{value[: limit // 2]!r}... ({len(value):,} characters in all)"
    return excerpt(repr(value), limit)


def _rebuild(cls: type, args: tuple, kwargs: dict[str, Any]) -> BaseException:
    return cls(*args, **kwargs)


class GraphexecError(Exception):
    """Base of every error graphexec raises on purpose.

    Every subclass pickles (so it can cross a process pool): one whose ``__init__`` takes
    more than a message says how to rebuild itself in ``__reduce__``. A message is cut to an
    :func:`excerpt` (see :data:`MESSAGE_LIMIT`).
    """

    def __init__(self, *args: object):
        if args and isinstance(args[0], str):  # twice the limit: a subclass bounds the parts it adds
            args = (excerpt(args[0], 2 * MESSAGE_LIMIT), *args[1:])
        super().__init__(*args)


class ModelFormatError(GraphexecError):
    """A model file is malformed; says which file and, for the param file, which line."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None):
        self.path = path
        self.line = line
        where = excerpt(path, 300) if path else "<model>"
        if line is not None:
            where = f"{where}:{line}"
        #: The message without the ``file:line:`` in front.
        self.reason = excerpt(message, where=where if line is not None else None)
        super().__init__(f"{where}: {self.reason}")

    def __reduce__(self) -> tuple:
        return _rebuild, (type(self), (self.reason,), {"path": self.path, "line": self.line}), self.__dict__


class WeightError(ModelFormatError):
    """A weight the param file declares is missing from the bin, or does not fit."""


class GraphStructureError(GraphexecError):
    """The graph is not a well-formed dataflow graph (duplicate names, dangling input, cycle)."""


class UnsupportedOperatorError(GraphexecError):
    """The model uses operator types that have no registered layer.

    ``unsupported`` maps each missing type to the names of the operators that use it, so
    one error lists everything a user has to provide.
    """

    def __init__(self, unsupported: dict[str, list[str]]):
        self.unsupported = dict(unsupported)
        lines = []
        for op_type, names in sorted(self.unsupported.items())[:20]:
            shown = ", ".join(excerpt(n, 100) for n in names[:5])
            if len(names) > 5:
                shown += f", ... ({len(names)} in all)"
            lines.append(f"  {excerpt(op_type, 100)}: used by {shown}")
        if len(self.unsupported) > 20:
            lines.append(f"  ... and {len(self.unsupported) - 20} more types")
        super().__init__(
            f"{len(self.unsupported)} unsupported operator type(s):\n" + "\n".join(lines)
        )

    def __reduce__(self) -> tuple:
        return _rebuild, (type(self), (self.unsupported,), {}), self.__dict__


class LayerConfigError(GraphexecError):
    """An operator's params or weights are invalid; names the operator and its type."""

    def __init__(self, op_name: str, op_type: str, message: str, *, source: str | None = None):
        self.op_name = op_name
        self.op_type = op_type
        #: Where the operator is defined (``file:line``), if known.
        self.source = source
        self.reason = excerpt(message)
        where = f" (defined at {excerpt(source, 300)})" if source else ""
        super().__init__(f"operator {excerpt(op_name, 300)} ({excerpt(op_type, 300)}): {self.reason}{where}")

    def __reduce__(self) -> tuple:
        args = (self.op_name, self.op_type, self.reason)
        return _rebuild, (type(self), args, {"source": self.source}), self.__dict__


class InputError(GraphexecError):
    """The inputs given to ``forward`` do not match what the model expects."""


class InputShapeError(InputError):
    """An input's shape cannot flow through the model; says expected and given."""


class ExecutionError(GraphexecError):
    """A layer failed while running; names the node, its type and its input shapes."""

    def __init__(
        self,
        op_name: str,
        op_type: str,
        input_shapes: Sequence[object],
        cause: BaseException | str,
    ):
        self.op_name = op_name
        self.op_type = op_type
        self.input_shapes = list(input_shapes)
        shown = self.input_shapes
        if len(shown) > 16:  # a join of 10^5 tensors
            shown = [*shown[:12], f"... ({len(shown)} in all)", *shown[-2:]]
        shapes = ", ".join(str(s) for s in shown) or "no inputs"
        #: What went wrong, as text (the exception itself, if any, is ``__cause__``).
        self.reason = excerpt(cause if isinstance(cause, str) else f"{type(cause).__name__}: {cause}")
        super().__init__(f"while executing {excerpt(op_name, 300)} ({excerpt(op_type, 300)}) on inputs "
                         f"[{excerpt(shapes, 800)}]: {self.reason}")

    def __reduce__(self) -> tuple:
        args = (self.op_name, self.op_type, self.input_shapes, self.reason)
        return _rebuild, (type(self), args, {}), self.__dict__


class NonFiniteError(ExecutionError):
    """``forward(..., check_finite=True)`` found NaN or Inf in an operator's output."""


class RunTimeoutError(GraphexecError):
    """A ``forward`` call ran past its ``timeout``; no new node was started after it."""


class DeviceError(GraphexecError):
    """A device is unavailable or failed; names the device and, when known, the kernel."""


class OptionError(GraphexecError):
    """An option of ``Engine.load`` (or of the planner) has a value it cannot take; names
    the option, the value and what it takes."""


class RowError(GraphexecError):
    """One row of a batch job failed: names its index, its file (if it came from one) and why."""

    def __init__(self, index: int, source: str | None, reason: str):
        self.index = index
        self.source = source
        self.reason = reason
        where = f"row {index}" + (f" ({source})" if source is not None else "")
        super().__init__(f"{where}: {reason}")

    def __reduce__(self) -> tuple:
        return _rebuild, (type(self), (self.index, self.source, self.reason), {}), self.__dict__


class WorkerError(GraphexecError):
    """A batch job lost its workers beyond their retries, or could not reach its cluster."""


class MissingExtraError(GraphexecError):
    """An optional dependency is missing; the message gives the ``pip install`` line."""


class ExportMismatchWarning(UserWarning):
    """The graph pnnx wrote is not what PyTorch traced, so the outputs may differ from
    PyTorch's: it computes other shapes, at the exported input shapes, than the ones pnnx
    annotated on it, or none of its outputs reads an input. A warning (shown once per
    place, by default), not a log line, because nothing else would tell the user that the
    answers may be wrong."""


def warn_the_caller(message: str, category: type[Warning]) -> None:
    """``warnings.warn`` at the first frame outside graphexec: the user's own line
    (``Engine.load(...)``), however deep inside the package the warning arises."""
    frame: FrameType | None = sys._getframe(1)
    level = 2  # warn_the_caller's caller
    while frame is not None and frame.f_globals.get("__name__", "").partition(".")[0] == "graphexec":
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)
