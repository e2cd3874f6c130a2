"""Compiled activations: a chain of them as codes one loop applies, row by row, while
each row is in cache (also to the output of the node they are fused into: see
:mod:`graphexec.devices.cpu.jit.fused`)."""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import numpy as np

from graphexec.devices.base import Piece, element_bands
from graphexec.devices.cpu.jit.base import FLOAT32, JitKernel, fits, fitted
from graphexec.devices.cpu.kernel import cpu_kernel
from graphexec.layers.activation import (
    GELU,
    Hardsigmoid,
    Hardswish,
    Hardtanh,
    LeakyReLU,
    ReLU,
    ReLU6,
    RReLU,
    Sigmoid,
    SiLU,
)
from graphexec.layers.base import Layer
from graphexec.layers.specs import TensorSpec

# The codes of graphexec.devices.cpu.jit._loops_activation (which imports numba).
RELU, CLAMP, LEAKY, HARDSWISH, HARDSIGMOID, SIGMOID, SILU, GELU_ERF = 1, 2, 3, 4, 5, 6, 7, 8

#: The activations whose compiled pass beats numpy's on its own (after a BLAS convolution, or
#: as a node): those numpy computes in several passes (measured in docs/benchmarks.md,
#: "Compiled CPU kernels"); ReLU's one clip pass is as fast either way. Inside a compiled
#: kernel's own loops (a depthwise convolution's) every code runs, as it saves the pass
#: over memory.
WINS_ALONE = frozenset({LEAKY, HARDSWISH, HARDSIGMOID, SIGMOID, SILU, GELU_ERF})
#: Codes a chain may also hold and still run compiled on its own (no slower than numpy).
EVEN_ALONE = frozenset({RELU, CLAMP})

#: An activation is shared out among idle threads from this many elements: its loop
#: releases the GIL, so its pieces run side by side.
SHARE_MIN_ELEMENTS = 100_000
#: Rows of at least this many numbers (the loops' inner loops).
ROW_MIN = 256


def code_of(layer: Layer) -> tuple[int, float, float] | None:
    """(code, parameter, parameter) of an activation the loops compute; None for others."""
    kind = type(layer)
    if kind is ReLU:  # the bound above the loop reads: +inf (see _loops_activation.activate)
        return RELU, 0.0, math.inf
    if kind is ReLU6:
        return CLAMP, 0.0, 6.0
    if kind is Hardtanh:
        return CLAMP, layer.low, layer.high
    if kind in (LeakyReLU, RReLU):  # and the factor it reads: 1 (as ReLU's bound)
        return LEAKY, layer.slope, 1.0
    if kind is Hardswish:
        return HARDSWISH, 0.0, 0.0
    if kind is Hardsigmoid:
        return HARDSIGMOID, 0.0, 0.0
    if kind is Sigmoid:
        return SIGMOID, 0.0, 0.0
    if kind is SiLU:
        return SILU, 0.0, 0.0
    if kind is GELU and not layer.tanh:
        return GELU_ERF, 0.0, 0.0
    return None


def wins_alone(codes: np.ndarray) -> bool:
    """Whether a chain's compiled pass beats numpy's passes where it runs on its own."""
    found = set(codes.tolist())
    return bool(found & WINS_ALONE) and found <= WINS_ALONE | EVEN_ALONE


def chain_of(layers: tuple[Layer, ...] | list[Layer]) -> tuple[np.ndarray, np.ndarray] | None:
    """The codes and parameters of ``layers`` applied in order; None if one has no code."""
    found = [code_of(layer) for layer in layers]
    if any(f is None for f in found):
        return None
    codes = np.array([f[0] for f in found], np.int64)  # type: ignore[index]
    params = np.array([f[1:] for f in found], np.float32).reshape(len(found), 2)  # type: ignore[index]
    return codes, params


def row_shape(shape: tuple[int, ...]) -> tuple[int, int]:
    """A C-contiguous array of ``shape`` as 2-D rows of at least :data:`ROW_MIN` numbers
    where it has them: the shape of those rows."""
    width = 1
    for k in range(len(shape) - 1, -1, -1):
        width *= shape[k]
        if width >= ROW_MIN:
            break
    if width == 0:
        return (0, 1)
    return (math.prod(shape) // width, width)


def as_rows(a: np.ndarray) -> np.ndarray:
    """A C-contiguous ``a`` as its :func:`row_shape` (a view)."""
    return a.reshape(row_shape(a.shape))


def float32_elementwise(inputs: Any, outputs: Any) -> bool:
    x, out = (inputs[0] if inputs else None), (outputs[0] if outputs else None)
    return (isinstance(x, TensorSpec) and isinstance(out, TensorSpec) and x.dtype == FLOAT32
            and out.dtype == FLOAT32 and tuple(x.shape) == tuple(out.shape) and len(x.shape) >= 1)


class Activations:
    """An activation chain's loop: ``apply(x, out)`` over whole rows of C-contiguous float32
    arrays (``out`` may be ``x``), cut into rows once for the ``shape`` planned."""

    def __init__(self, codes: np.ndarray, params: np.ndarray, shape: tuple[int, ...] = ()):
        self.codes = codes
        self.params = params
        self.shape = tuple(shape)
        self.rows = row_shape(self.shape) if shape else None
        self.run: Any = None

    def prepare(self, parts: bool = False) -> None:
        example = np.zeros((1, 1), np.float32)
        self.run = JitKernel.loop("activation", "activate_rows", example, example, self.codes, self.params, 0, 0)
        if parts:
            self.run_parts = JitKernel.loop("activation", "activate_rows_parts", 0, example, example, self.codes,
                                            self.params, 0, 0)

    #: The loop of :meth:`apply_parts` (readied by ``prepare(parts=True)``).
    run_parts: Any = None

    def apply_parts(self, x: np.ndarray, out: np.ndarray, count: int) -> None:
        """:meth:`apply` on ``count`` threads, each a band of the rows (the same bits)."""
        rows = self.rows if x.shape == self.shape else row_shape(x.shape)
        self.run_parts(count, x.reshape(rows), out.reshape(rows), self.codes, self.params, 0, rows[0])  # type: ignore[arg-type]

    def apply(self, x: np.ndarray, out: np.ndarray, r0: int = 0, r1: int | None = None) -> None:
        if x.shape == self.shape:
            rows = self.rows
            rows_x, rows_out = x.reshape(rows), out.reshape(rows)  # type: ignore[arg-type]
        else:
            rows_x, rows_out = as_rows(x), as_rows(out)
        self.run(rows_x, rows_out, self.codes, self.params, r0, rows_x.shape[0] if r1 is None else r1)

    def apply_band(self, x: np.ndarray, out: np.ndarray, band: tuple[slice, ...]) -> None:
        """On ``x[band]`` into ``out[band]``: whole when contiguous, else each of its
        contiguous parts (a band of channels of every image)."""
        xs, outs = x[band], out[band]
        if xs.flags.c_contiguous and outs.flags.c_contiguous:
            self.apply(xs, outs)
            return
        for k in range(xs.shape[0]):
            self.apply_band(xs, outs, (k,))


@cpu_kernel(ReLU, ReLU6, Hardtanh, LeakyReLU, RReLU, Hardswish, Hardsigmoid, Sigmoid, SiLU, GELU)
class JitActivation(JitKernel):
    """One activation over a float32 tensor, in bands of rows when it runs alone."""

    name = "jit"

    @classmethod
    def accepts(cls, layer, inputs, outputs, hints) -> bool:
        code = code_of(layer)
        return code is not None and code[0] in WINS_ALONE and float32_elementwise(inputs, outputs)

    def __init__(self, layer, inputs, outputs, hints, device) -> None:
        super().__init__(layer, inputs, outputs, hints, device)
        self.chain = Activations(*chain_of([layer]), outputs[0].shape)  # type: ignore[misc]

    def prepare(self) -> None:
        self.chain.prepare(self._parts())

    def run(self, inputs: list[Any], outputs: list[Any] | None = None) -> list[Any]:
        out = self._target(outputs)
        self.chain.apply(fitted(inputs[0]), out)
        return self._handed(outputs, out)

    def _can_cross(self) -> bool:
        return (self.chain.rows or (0,))[0] >= 2 and self._parts()

    def across(self, inputs: list[Any], outputs: list[np.ndarray], count: int) -> bool:
        x = inputs[0]
        if not (self._crossing(count, outputs, self.chain.run_parts) and fits(x) and x.shape == outputs[0].shape):
            return False
        self.chain.apply_parts(x, outputs[0], count)
        return True

    def splits(self) -> bool:
        return math.prod(self.output_specs[0].shape) >= SHARE_MIN_ELEMENTS

    def pieces(self, inputs: list[Any], outputs: list[np.ndarray], count: int) -> list[Piece] | None:
        x, out = inputs[0], outputs[0]
        if count < 2 or not self.splits() or not (fits(x) and fits(out)) or x.shape != out.shape:
            return None
        return [Piece(partial(self.chain.apply_band, x, out, band), band) for band in element_bands(out.shape, count)]
