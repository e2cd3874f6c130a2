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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _rebuild(cls: type, args: tuple, kwargs: dict[str, Any]) -> BaseException:
    return cls(*args, **kwargs)


class GraphexecError(Exception):
    """Base of every error graphexec raises on purpose.

    Every subclass pickles (so it can cross a process pool): one whose ``__init__`` takes
    more than a message says how to rebuild itself in ``__reduce__``.
    """


class ModelFormatError(GraphexecError):
    """A model file is malformed; says which file and, for the param file, which line."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None):
        self.path = path
        self.line = line
        #: The message without the ``file:line:`` in front.
        self.reason = message
        where = path or "<model>"
        if line is not None:
            where = f"{where}:{line}"
        super().__init__(f"{where}: {message}")

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
        for op_type, names in sorted(self.unsupported.items()):
            shown = ", ".join(names[:5]) + (f", ... ({len(names)} in all)" if len(names) > 5 else "")
            lines.append(f"  {op_type}: used by {shown}")
        super().__init__(
            f"{len(self.unsupported)} unsupported operator type(s):\n" + "\n".join(lines)
        )

    def __reduce__(self) -> tuple:
        return _rebuild, (type(self), (self.unsupported,), {}), self.__dict__


class LayerConfigError(GraphexecError):
    """An operator's params or weights are invalid; names the operator and its type."""

    def __init__(self, op_name: str, op_type: str, message: str):
        self.op_name = op_name
        self.op_type = op_type
        self.reason = message
        super().__init__(f"operator {op_name} ({op_type}): {message}")

    def __reduce__(self) -> tuple:
        return _rebuild, (type(self), (self.op_name, self.op_type, self.reason), {}), self.__dict__


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
        shapes = ", ".join(str(s) for s in self.input_shapes) or "no inputs"
        #: What went wrong, as text (the exception itself, if any, is ``__cause__``).
        self.reason = cause if isinstance(cause, str) else f"{type(cause).__name__}: {cause}"
        super().__init__(f"while executing {op_name} ({op_type}) on inputs [{shapes}]: {self.reason}")

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
