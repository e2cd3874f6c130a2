"""The contract every operator implements, and the helpers that read an operator's params.

::

    Layer                       built once from an ir.Operator
    ├── build(params)           read and check params/weights (raise -> LayerConfigError)
    ├── infer(specs)            shapes+dtypes in -> out; defaults to the two below
    │   ├── infer_shapes(shapes)    pure: input shapes -> output shapes   (override)
    │   └── infer_dtypes(dtypes)    defaults to "same as the first input"
    ├── forward(inputs)         pure numpy: input values -> output values  (override)
    ├── forward_into(in, out)   the same into given arrays (the memory plan's arenas)
    ├── what it costs, for the planner:
    │   ├── flops(in, out)          arithmetic, for the scheduler's priorities
    │   ├── blas_flops(in, out)     the part of it that matrix products do
    │   ├── work_bytes(in, out)     memory it streams through beyond inputs and outputs
    │   └── scratch_bytes(in, out)  working memory it holds at once (for the memory limit)
    ├── what its outputs are, for the memory plan:
    │   flags is_view, fresh_outputs, writes_into, in_place; input_offsets(in, out)
    └── batchwise(in, out)      whether each sample of a batch is computed alone

A new operator is one subclass and one ``@register("pnnx.Type")`` line. The forward is
the reference: faster ways to run a layer are kernels of a device
(:mod:`graphexec.devices.cpu`), each tested against it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from graphexec.dtypes import is_known, numpy_dtype
from graphexec.errors import LayerConfigError, quoted
from graphexec.ir import Operator
from graphexec.layers.specs import SequenceSpec, Shape, Spec, TensorSpec

_MISSING: Any = object()

#: ``int(160)``: a size pnnx computed from a traced ``aten::Int`` and wrote as its call.
_INT_CALL = re.compile(r"int\((-?\d+)\)")


def _as_integer(value: Any) -> Any:
    """``value``, or the integer an ``int(N)`` string names (pnnx writes a slice's end so
    when a traced size went through ``int``: torchaudio's resampling)."""
    if isinstance(value, str):
        found = _INT_CALL.fullmatch(value.strip())
        if found:
            return int(found.group(1))
    return value


class ShapeMismatch(ValueError):
    """Raised by ``infer_shapes`` when inputs cannot flow through the layer; says why."""


class Params:
    """Typed access to an operator's params and attrs; every failure names the operator."""

    def __init__(self, op: Operator):
        self.op = op

    def error(self, message: str) -> LayerConfigError:
        """A LayerConfigError about this operator."""
        return LayerConfigError(self.op.name, self.op.type, message, source=self.op.source)

    def has(self, key: str) -> bool:
        return key in self.op.params

    def input_for(self, key: str) -> int | None:
        """The position of the input bound to ``$key=`` where no ``key`` param is given (a
        dynamic export hands a size-dependent argument over as an input), else None."""
        names = list(self.op.input_names)
        if self.has(key) or key not in names[1:]:
            return None
        return names.index(key, 1)

    def raw(self, key: str, default: Any = _MISSING) -> Any:
        """The value as parsed, or ``default``; a missing required param is an error."""
        if key in self.op.params:
            return self.op.params[key]
        if default is _MISSING:
            raise self.error(f"missing param {key!r}")
        return default

    def int(self, key: str, default: Any = _MISSING) -> int:
        if key not in self.op.params:
            return self.raw(key, default)
        value = _as_integer(self.op.params[key])
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(f"param {key}={quoted(value)} should be an integer")
        return value

    def float(self, key: str, default: Any = _MISSING) -> float:
        if key not in self.op.params:
            return self.raw(key, default)
        value = self.op.params[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(f"param {key}={quoted(value)} should be a number")
        return float(value)

    def bool(self, key: str, default: Any = _MISSING) -> bool:
        if key not in self.op.params:
            return self.raw(key, default)
        value = self.op.params[key]
        if not isinstance(value, bool):
            raise self.error(f"param {key}={quoted(value)} should be True or False")
        return value

    def str(self, key: str, default: Any = _MISSING, choices: Sequence[str] | None = None) -> str:
        if key not in self.op.params:
            return self.raw(key, default)
        value = self.op.params[key]
        if not isinstance(value, str):
            raise self.error(f"param {key}={quoted(value)} should be a string")
        if choices is not None and value not in choices:
            raise self.error(f"param {key}={quoted(value)} should be one of {', '.join(choices)}")
        return value

    def ints(self, key: str, n: int | None = None, default: Any = _MISSING) -> tuple[int, ...]:
        """An int list; a single int is repeated ``n`` times (``stride=2`` -> ``(2, 2)``)."""
        if key not in self.op.params:
            return self.raw(key, default)
        value = self.op.params[key]
        value = [_as_integer(v) for v in value] if isinstance(value, list) else _as_integer(value)
        if isinstance(value, int) and not isinstance(value, bool):
            value = [value] * (n or 1)
        if isinstance(value, list) and n is not None and len(value) not in (1, n):  # before reading every item
            raise self.error(f"param {key}={quoted(value)} should have {n} values")
        if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            raise self.error(f"param {key}={quoted(value)} should be a list of integers")
        if n is not None and len(value) == 1 and n > 1:
            value = value * n
        if n is not None and len(value) != n:
            raise self.error(f"param {key}={quoted(value)} should have {n} values")
        return tuple(value)

    def floats(self, key: str, default: Any = _MISSING) -> tuple[float, ...]:
        """A number list; a single number becomes a one-element tuple."""
        if key not in self.op.params:
            return self.raw(key, default)
        value = self.op.params[key]
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = [value]
        if not isinstance(value, list) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in value
        ):
            raise self.error(f"param {key}={quoted(value)} should be a list of numbers")
        return tuple(float(v) for v in value)

    def dropped_dtype(self, natural: Callable[[np.dtype], np.dtype]) -> np.dtype | None:
        """The output's annotated dtype where the layer's own rule ``natural``, applied to the
        annotated input, makes another: pnnx drops a ``dtype=`` argument (``x.cumsum(1,
        dtype=torch.float32)``, ``softmax(x, 1, dtype=torch.float64)``) but annotates the
        traced output with it. None where they agree or either is not annotated."""
        op = self.op
        wrote = op.outputs[0].dtype if op.outputs else None
        read = op.inputs[0].dtype if op.inputs else None
        if not (wrote and read and is_known(wrote) and is_known(read)) or "bf16" in (wrote, read):
            return None
        made = numpy_dtype(wrote)
        return made if natural(numpy_dtype(read)) != made else None

    def has_attr(self, key: str) -> bool:
        attr = self.op.attrs.get(key)
        return attr is not None and attr.data is not None

    def weight(self, key: str, shape: Sequence[int] | None = None) -> np.ndarray:
        """Weight ``key`` in float32, or in float64 where the model stored it so (a
        model.double(), weights pnnx folded in float64): a float64 model then computes with
        the weights it has, not with float32's rounding of them."""
        attr = self.op.attrs.get(key)
        stored = None if attr is None or attr.data is None else attr.data.dtype
        return self.attr(key, shape, dtype=np.float64 if stored == np.float64 else np.float32)

    def attr(self, key: str, shape: Sequence[int] | None = None, dtype: Any = None) -> np.ndarray:
        """Weight ``key`` as an array (optionally checked against ``shape``, cast to ``dtype``)."""
        attr = self.op.attrs.get(key)
        if attr is None or attr.data is None:
            raise self.error(f"missing weight @{key}")
        data = attr.data
        if shape is not None and tuple(data.shape) != tuple(shape):
            raise self.error(f"weight @{key} has shape {tuple(data.shape)}, expected {tuple(shape)}")
        if dtype is not None:
            if data.dtype.kind == "c" and np.dtype(dtype).kind != "c":
                raise self.error(f"weight @{key} is {data.dtype}, where a real {np.dtype(dtype)} one is expected")
            data = np.asarray(data, dtype=dtype, order="C")
        return data


class Layer:
    """One operator, ready to run. Subclasses override ``build``, ``infer_shapes``, ``forward``."""

    #: The pnnx types this class computes; filled in by ``@register``.
    op_types: tuple[str, ...] = ()
    #: Whether ``forward`` only reorders or views its input (no arithmetic).
    is_view: bool = False
    #: Whether every output ``forward`` returns is newly allocated, never an input or a
    #: view of one. The memory plan lets a tensor's bytes be reused only once every reader
    #: is done with it; a layer that may return a view extends its input's life to the
    #: view's readers, so the safe default is False.
    fresh_outputs: bool = False
    #: Whether :meth:`forward_into` writes its results straight into the arrays it is given
    #: (the memory plan then gives this layer's outputs regions of its arena). Layers that
    #: do not only get the default, which copies.
    writes_into: bool = False
    #: Whether output 0 may be written over input 0 (one elementwise pass, same shape and
    #: dtype), so the memory plan may run it in place where nothing else reads input 0.
    in_place: bool = False
    #: Whether ``forward`` draws random numbers (:mod:`graphexec.layers.random`): its outputs
    #: differ from run to run, so the planner never folds them into a constant.
    random: bool = False

    def __init__(self, op: Operator):
        self.name = op.name
        self.type = op.type
        self.num_inputs = len(op.inputs)
        self.num_outputs = len(op.outputs)
        self.input_names = list(op.input_names)
        params = Params(op)
        try:
            self.build(params)
        except LayerConfigError:
            raise
        except Exception as exc:  # whatever a layer trips over in a hostile file is a config error
            raise params.error(f"{type(exc).__name__}: {exc}") from exc

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {self.type!r})"

    # -- override points ----------------------------------------------------------------
    def build(self, params: Params) -> None:
        """Read and check params and weights once. The default takes none."""

    def infer(self, specs: list[Spec]) -> list[Spec]:
        """Output specs from input specs. Layers over sequences override this."""
        for i, spec in enumerate(specs):
            if not isinstance(spec, TensorSpec):
                raise ShapeMismatch(f"input {i} is a sequence {spec}, expected a tensor")
        shapes = self.infer_shapes([s.shape for s in specs])  # type: ignore[union-attr]
        dtypes = self.infer_dtypes([s.dtype for s in specs])  # type: ignore[union-attr]
        return [TensorSpec(shape, dtype) for shape, dtype in zip(shapes, dtypes)]

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        """Output shapes from input shapes; raise :class:`ShapeMismatch` if they cannot flow."""
        raise NotImplementedError(f"{type(self).__name__} must implement infer_shapes")

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        """Output dtypes; by default every output has the first input's dtype."""
        first = dtypes[0] if dtypes else np.dtype(np.float32)
        return [first] * self.num_outputs

    def forward(self, inputs: list[Any]) -> list[Any]:
        """Compute the outputs from the inputs with numpy; never mutate an input."""
        raise NotImplementedError(f"{type(self).__name__} must implement forward")

    def forward_into(self, inputs: list[Any], outputs: list[np.ndarray]) -> None:
        """Compute ``forward(inputs)`` into ``outputs``: C-contiguous arrays of the inferred
        shapes and dtypes, which may be memory the engine reuses between calls. With
        ``in_place``, ``outputs[0]`` may be ``inputs[0]`` itself. The default copies."""
        for out, value in zip(outputs, self.forward(inputs)):
            np.copyto(out, value)

    def flops(self, inputs: list[Spec], outputs: list[Spec]) -> int:
        """Arithmetic work, for the scheduler's priorities; by default one per output element."""
        return sum(numel(s.shape) for s in outputs if isinstance(s, TensorSpec))

    def blas_flops(self, inputs: list[Spec], outputs: list[Spec]) -> int:
        """The part of :meth:`flops` done by BLAS (matrix products), which more BLAS threads
        speed up; elementwise numpy code runs on one thread whatever the setting."""
        return 0

    def work_bytes(self, inputs: list[Spec], outputs: list[Spec]) -> int:
        """Bytes of scratch memory the layer streams through beyond its inputs and outputs
        (a convolution's im2col columns), for the cost estimate."""
        return 0

    def scratch_bytes(self, inputs: list[Spec], outputs: list[Spec]) -> int:
        """Bytes of working memory a run holds at once beyond its inputs and outputs (a
        convolution's padded input and im2col columns), at most: the plan counts it in its
        peak, so that ``memory_limit`` refuses a model one of whose layers would need more
        (a damaged padding of 100000 pads a 64 x 64 input to 447 GiB for a 32 x 32 output)."""
        return 0

    def input_offsets(self, inputs: list[Spec], outputs: list[Spec]) -> list[int | None] | None:
        """For a layer whose output 0 holds its inputs side by side (a join): each input's
        element offset in output 0 where it is a contiguous run of the same layout and
        dtype, or None where it is not. The memory plan may then have the input's producer
        write it there, so :meth:`forward_into` must leave an input it finds inside
        ``outputs[0]`` as it is. None (the default): no input can lie in the output."""
        return None

    def batchwise(self, inputs: list[Spec], outputs: list[Spec]) -> bool:
        """Whether, for inputs of these specs, the layer computes each sample of a batch
        alone: row ``i`` (along dim 0) of every output depends only on row ``i`` of the
        inputs that carry the batch, and the other inputs are the same for every sample (a
        constant, a broadcast). A model whose layers all say so may run a batch in parts,
        one per core (:mod:`graphexec.samples`); the default, False, never lets it.
        :mod:`graphexec.layers._samples` holds the checks the layers that do share."""
        return False

    # -- helpers for subclasses ----------------------------------------------------------
    def bind_inputs(self, params: Params, names: Sequence[str]) -> list[int]:
        """The input index of each argument in ``names``: by its ``$name=`` binding, or by
        position in a graph written without them; a LayerConfigError if one is missing."""
        given = list(self.input_names) if any(self.input_names) else list(names)[: self.num_inputs]
        missing = [n for n in names if n not in given]
        if missing:
            raise params.error(f"expected the inputs {', '.join(names)}, given {given}")
        return [given.index(n) for n in names]

    def expect_inputs(self, shapes: Sequence[Any], *counts: int) -> None:
        """Raise ShapeMismatch unless the number of inputs is one of ``counts``."""
        if len(shapes) not in counts:
            raise ShapeMismatch(f"takes {' or '.join(map(str, counts))} inputs, got {len(shapes)}")


def normalize_axis(axis: int, rank: int) -> int:
    """``axis`` in ``[0, rank)`` (negative counts from the end); ShapeMismatch if out of range."""
    if not -rank <= axis < max(rank, 1):
        raise ShapeMismatch(f"dim {axis} is out of range for a tensor of rank {rank}")
    return axis % rank if rank else 0


def numel(shape: Shape) -> int:
    """Number of elements of ``shape``."""
    return math.prod(shape)


__all__ = [
    "Layer",
    "Params",
    "SequenceSpec",
    "Shape",
    "ShapeMismatch",
    "Spec",
    "TensorSpec",
    "normalize_axis",
    "numel",
]
