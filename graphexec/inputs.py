"""What ``Engine.forward`` accepts: the model's inputs by position or by name, each checked
for rank and dtype before anything runs (and before anything is allocated for them: the
engine casts an input only once its plan fits the memory limit), and the operands a caller
may extract."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from graphexec import dtypes
from graphexec.errors import InputError, InputShapeError
from graphexec.executor import RunOptions
from graphexec.extracting import resolve_extract
from graphexec.ir import Dim
from graphexec.layers.specs import Spec, TensorSpec
from graphexec.program import Program


def dtype_of(pnnx_type: str | None) -> np.dtype:
    """The numpy dtype of a pnnx type (float32 where the file says nothing usable)."""
    if pnnx_type is None or not dtypes.is_known(pnnx_type):
        return np.dtype(np.float32)
    return dtypes.numpy_dtype(pnnx_type)


def show_shape(shape: tuple[Dim, ...] | None) -> str:
    if shape is None:
        return "(unknown)"
    return "(" + ",".join("?" if d is None else str(d) for d in shape) + ")"


class Inputs:
    """The model's inputs: ``in0, in1, ...`` (their operand names work too)."""

    def __init__(self, program: Program):
        self.program = program
        operands = program.graph.operands
        self.operands = [operands[n] for n in program.inputs]
        #: Public names: ``in0, in1, ...``.
        self.names = [f"in{i}" for i in range(len(program.inputs))]
        self._alias = {**dict(zip(self.names, program.inputs)), **{n: n for n in program.inputs}}
        self._computed = set(program.inputs) | {o for step in program.steps for o in step.outputs}

    @property
    def shapes(self) -> dict[str, tuple[Dim, ...] | None]:
        return {n: o.shape for n, o in zip(self.names, self.operands)}

    @property
    def dtypes(self) -> dict[str, np.dtype]:
        return {n: dtype_of(o.dtype) for n, o in zip(self.names, self.operands)}

    def exported_specs(self) -> dict[str, Spec] | None:
        """The input specs the model was exported with, or None where a size is unknown."""
        specs: dict[str, Spec] = {}
        for operand in self.operands:
            if operand.shape is None or not all(isinstance(d, int) for d in operand.shape):
                return None
            specs[operand.name] = TensorSpec(operand.shape, dtype_of(operand.dtype))  # type: ignore[arg-type]
        return specs

    def feeds(self, named: Mapping[str, Any] | None, positional: Sequence[Any] | None) -> dict[str, np.ndarray]:
        """Operand name -> array, from ``forward``'s arguments, each checked."""
        expected = len(self.program.inputs)
        if named is not None:
            unknown = [k for k in named if k not in self._alias]
            if unknown:
                raise InputError(f"unknown input name(s) {unknown}; the model's inputs are {self.names}")
            feeds: dict[str, Any] = {}
            given_as: dict[str, str] = {}
            for key, value in named.items():
                operand = self._alias[key]
                if operand in feeds:
                    raise InputError(f"input {operand!r} is given twice, as {given_as[operand]!r} and as {key!r}")
                feeds[operand], given_as[operand] = value, key
            missing = [a for a, n in zip(self.names, self.program.inputs) if n not in feeds]
            if missing:
                raise InputError(f"missing input(s) {missing}; the model's inputs are {self.names}")
        else:
            assert positional is not None
            if len(positional) != expected:
                raise InputError(f"the model takes {expected} input(s) {self.names}, got {len(positional)}")
            feeds = dict(zip(self.program.inputs, positional))
        return {name: self._checked(name, value) for name, value in feeds.items()}

    def _checked(self, operand_name: str, value: Any) -> np.ndarray:
        """``value`` as an array of a dtype that casts to the input's without loss of kind
        (not cast yet: ``Engine.forward`` casts once the memory limit has been checked)."""
        alias = self.names[self.program.inputs.index(operand_name)]
        operand = self.program.graph.operands[operand_name]
        try:
            array = np.asarray(value)
        except Exception as exc:  # an object numpy cannot turn into an array
            raise InputError(f"input {alias}: cannot be read as an array ({exc})") from exc
        want = dtype_of(operand.dtype)
        given = array.dtype
        if given != want and given.kind != want.kind and not (want.kind == "c" and given.kind == "f"):
            if want.kind == "f" and given.kind == "c":
                raise InputError(f"input {alias}: expected dtype {want}, given {given}: a real model would "
                                 f"drop the imaginary part (pass x.real if that is what you mean)")
            raise InputError(f"input {alias}: expected dtype {want}, given {given}")
        if want.kind in "iu" and given.kind == want.kind and given.itemsize > want.itemsize and array.size:
            low, high = array.min(), array.max()  # a narrower integer would wrap around silently
            if low < np.iinfo(want).min or high > np.iinfo(want).max:
                raise InputError(f"input {alias}: expected dtype {want}, given {given} holding {low}..{high}, "
                                 f"outside {want}'s range")
        if operand.shape is not None and array.ndim != len(operand.shape):
            raise InputShapeError(
                f"input {alias}: expected a tensor of rank {len(operand.shape)} "
                f"{show_shape(operand.shape)}, given shape {tuple(array.shape)}"
            )
        return array

    def extractable(self, extract: Sequence[str] | None) -> dict[str, tuple[str, ...]]:
        """Each name ``extract`` asks for (an operand id, or an operator's name for its
        outputs) with the operands it stands for, checked (see :mod:`graphexec.extracting`)."""
        if extract is None:
            return {}
        return resolve_extract(self.program.graph, self._computed, self.program.outputs, extract)

    def run_options(self, timeout: float | None, check_finite: bool, feeds: Mapping[str, np.ndarray],
                    clock: Callable[[], float] = time.monotonic) -> RunOptions:
        """The per-run choices, checked: a positive ``timeout`` (seconds on ``clock``) and,
        with ``check_finite``, inputs free of NaN and Inf."""
        if timeout is not None and not (isinstance(timeout, (int, float)) and not isinstance(timeout, bool)
                                        and timeout > 0):
            raise InputError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if check_finite:
            for alias, name in zip(self.names, self.program.inputs):
                if not _all_finite(feeds[name]):
                    raise InputError(f"input {alias} already holds NaN or Inf")
        deadline = None if timeout is None else clock() + timeout
        return RunOptions(deadline=deadline, timeout=timeout, check_finite=check_finite, clock=clock)


def _all_finite(x: np.ndarray) -> bool:
    """Whether ``x`` holds no NaN or Inf, with no temporary as large as ``x`` (NaN
    propagates through min and max)."""
    if x.dtype.kind not in "fc" or x.size == 0:
        return True
    parts = (x.real, x.imag) if x.dtype.kind == "c" else (x,)
    return all(np.isfinite(p.min()) and np.isfinite(p.max()) for p in parts)
