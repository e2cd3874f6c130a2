"""The user's face of graphexec: load a pnnx model, run it, get its outputs.

::

    engine = Engine.load("m.pnnx.param")          # the bin defaults to m.pnnx.bin
    y = engine.forward(x)                          # one input: array in, array out
    y1, y2 = engine.forward(x1, x2)                # positional: a tuple when several outputs
    outs = engine.forward({"in0": x})              # by name: dict in, dict out
    y, inner = engine.forward(x, extract=["7"])    # intermediates by operand name
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from loguru import logger

from graphexec import dtypes, pnnx
from graphexec.errors import InputError, InputShapeError, LayerConfigError
from graphexec.executor import run_sequential
from graphexec.ir import Dim, Graph
from graphexec.program import Program
from graphexec.shapes import InferenceFailure, infer_specs
from layers.specs import Spec, TensorSpec

#: How many distinct input-shape sets keep their inferred specs.
SPEC_CACHE_SIZE = 16


class Engine:
    """A loaded model. Immutable after load, so many threads may call ``forward`` at once."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.program = Program.from_graph(graph)
        operands = graph.operands
        self._input_operands = [operands[n] for n in self.program.inputs]
        self._output_operands = [operands[n] for n in self.program.outputs]
        #: Public names: ``in0, in1, ...`` and ``out0, out1, ...`` (the operand names work too).
        self.input_names = [f"in{i}" for i in range(len(self.program.inputs))]
        self.output_names = [f"out{i}" for i in range(len(self.program.outputs))]
        self._input_alias = {**dict(zip(self.input_names, self.program.inputs)),
                             **{n: n for n in self.program.inputs}}
        self._spec_cache: OrderedDict[tuple, dict[str, Spec]] = OrderedDict()
        self._cache_lock = threading.Lock()
        exported = self._exported_input_specs()
        if exported is not None:
            self._specs_for(exported, given_by_user=False)

    @classmethod
    def load(cls, param_path: str | os.PathLike[str], bin_path: str | os.PathLike[str] | None = None) -> Engine:
        """Load ``param_path`` (and its weights, by default the sibling ``.bin``)."""
        graph = pnnx.load(param_path, bin_path)
        engine = cls(graph)
        logger.debug(
            "loaded {}: {} operators, inputs {}, outputs {}",
            param_path, len(graph.operators), engine.input_shapes, engine.output_shapes,
        )
        return engine

    # -- what the model looks like -------------------------------------------------------
    @property
    def input_shapes(self) -> dict[str, tuple[Dim, ...] | None]:
        """Input shapes as exported (``None`` marks an unknown size, a string a symbol)."""
        return {n: o.shape for n, o in zip(self.input_names, self._input_operands)}

    @property
    def output_shapes(self) -> dict[str, tuple[Dim, ...] | None]:
        """Output shapes as exported."""
        return {n: o.shape for n, o in zip(self.output_names, self._output_operands)}

    @property
    def input_dtypes(self) -> dict[str, np.dtype]:
        """The dtype each input must have (float32 unless the model says otherwise)."""
        return {n: _dtype_of(o.dtype) for n, o in zip(self.input_names, self._input_operands)}

    def specs(self, *shapes: Sequence[int]) -> dict[str, Spec]:
        """Shape and dtype of every operand for the given input shapes (inferred, cached)."""
        given = {name: TensorSpec(tuple(shape), dtype) for name, shape, dtype in
                 zip(self.program.inputs, shapes, self.input_dtypes.values())}
        if len(given) != len(self.program.inputs):
            raise InputError(f"the model takes {len(self.program.inputs)} inputs, got {len(shapes)} shapes")
        return dict(self._specs_for(given, given_by_user=True))

    # -- running ---------------------------------------------------------------------------
    def forward(self, *args: Any, extract: Sequence[str] | None = None) -> Any:
        """Run the model.

        ``forward(x)`` / ``forward(x1, x2)`` return an array, or a tuple when the model has
        several outputs; ``forward({"in0": x})`` returns ``{"out0": y, ...}``. With
        ``extract=[operand names]`` the result is ``(outputs, {name: array})``.
        """
        by_name = len(args) == 1 and isinstance(args[0], Mapping)
        feeds = self._feeds(args[0] if by_name else None, None if by_name else args)
        wanted = list(extract or ())
        unknown = [n for n in wanted if n not in self.graph.operands]
        if unknown:
            raise InputError(f"cannot extract unknown operand(s) {unknown}; operands are named as in the param file")
        given = {name: TensorSpec(v.shape, v.dtype) for name, v in feeds.items()}
        self._specs_for(given, given_by_user=True)
        keep = list(dict.fromkeys(list(self.program.outputs) + wanted))
        values = run_sequential(self.program, feeds, keep)
        outputs = [values[n] for n in self.program.outputs]
        if by_name:
            result: Any = dict(zip(self.output_names, outputs))
        else:
            result = outputs[0] if len(outputs) == 1 else tuple(outputs)
        if extract is not None:
            return result, {n: values[n] for n in wanted}
        return result

    __call__ = forward

    # -- inputs ------------------------------------------------------------------------------
    def _feeds(self, named: Mapping[str, Any] | None, positional: Sequence[Any] | None) -> dict[str, np.ndarray]:
        expected = len(self.program.inputs)
        if named is not None:
            unknown = [k for k in named if k not in self._input_alias]
            if unknown:
                raise InputError(f"unknown input name(s) {unknown}; the model's inputs are {self.input_names}")
            feeds = {self._input_alias[k]: v for k, v in named.items()}
            missing = [a for a, n in zip(self.input_names, self.program.inputs) if n not in feeds]
            if missing or len(feeds) != len(named):
                raise InputError(f"missing input(s) {missing or 'given twice'}; the model's inputs are {self.input_names}")
        else:
            if len(positional) != expected:
                raise InputError(f"the model takes {expected} input(s) {self.input_names}, got {len(positional)}")
            feeds = dict(zip(self.program.inputs, positional))
        return {name: self._check_input(name, value) for name, value in feeds.items()}

    def _check_input(self, operand_name: str, value: Any) -> np.ndarray:
        alias = self.input_names[self.program.inputs.index(operand_name)]
        operand = self.graph.operands[operand_name]
        try:
            array = np.asarray(value)
        except Exception as exc:  # an object numpy cannot turn into an array
            raise InputError(f"input {alias}: cannot be read as an array ({exc})") from exc
        want = _dtype_of(operand.dtype)
        if array.dtype != want:
            if array.dtype.kind != want.kind and not (want.kind in "fc" and array.dtype.kind in "fc"):
                raise InputError(f"input {alias}: expected dtype {want}, given {array.dtype}")
            array = array.astype(want)
        if operand.shape is not None and array.ndim != len(operand.shape):
            raise InputShapeError(
                f"input {alias}: expected a tensor of rank {len(operand.shape)} "
                f"{_show_shape(operand.shape)}, given shape {tuple(array.shape)}"
            )
        return array

    def _exported_input_specs(self) -> dict[str, Spec] | None:
        specs: dict[str, Spec] = {}
        for operand in self._input_operands:
            if operand.shape is None or not all(isinstance(d, int) for d in operand.shape):
                return None
            specs[operand.name] = TensorSpec(operand.shape, _dtype_of(operand.dtype))  # type: ignore[arg-type]
        return specs

    def _specs_for(self, given: dict[str, Spec], *, given_by_user: bool) -> dict[str, Spec]:
        key = tuple((n, str(s)) for n, s in given.items())
        with self._cache_lock:
            cached = self._spec_cache.get(key)
            if cached is not None:
                self._spec_cache.move_to_end(key)
                return cached
        try:
            specs = infer_specs(self.program, given)
        except InferenceFailure as exc:
            shown = ", ".join(str(s) for s in exc.inputs)
            if not given_by_user:
                raise LayerConfigError(exc.step_name, exc.step_type, f"cannot take its exported inputs [{shown}]: {exc.reason}") from exc
            exported = ", ".join(
                f"{a}={_show_shape(o.shape)}" for a, o in zip(self.input_names, self._input_operands)
            )
            given_text = ", ".join(
                f"{a}={given[n]}" for a, n in zip(self.input_names, self.program.inputs)
            )
            raise InputShapeError(
                f"the model cannot take inputs {given_text} (exported with {exported}): operator "
                f"{exc.step_name} ({exc.step_type}) refuses [{shown}]: {exc.reason}"
            ) from exc
        with self._cache_lock:
            self._spec_cache[key] = specs
            while len(self._spec_cache) > SPEC_CACHE_SIZE:
                self._spec_cache.popitem(last=False)
        logger.debug("inferred specs for inputs {}", key)
        return specs


def _dtype_of(pnnx_type: str | None) -> np.dtype:
    if pnnx_type is None or not dtypes.is_known(pnnx_type):
        return np.dtype(np.float32)
    return dtypes.numpy_dtype(pnnx_type)


def _show_shape(shape: tuple[Dim, ...] | None) -> str:
    if shape is None:
        return "(unknown)"
    return "(" + ",".join("?" if d is None else str(d) for d in shape) + ")"
