"""The compiled steps of ``nn.RNN``, ``nn.LSTM`` and ``nn.GRU`` (and of the ``aten::`` and
ONNX forms of them): the layer's own numpy for the input's products (one matmul a layer
and direction) and the layout, each direction's steps in one compiled call, where the
numpy cells make a dozen numpy calls a step of a few microseconds each (which is all of a
small recurrence's time). Taken only where numpy's OpenBLAS is found
(:mod:`graphexec.devices.cpu.jit.cblas`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from graphexec.devices.cpu.jit.base import FLOAT32, JitKernel, fitted
from graphexec.devices.cpu.jit.cblas import sgemm
from graphexec.devices.cpu.kernel import cpu_kernel
from graphexec.layers._recurrent_math import ElmanCell, GRUCell, LSTMCell, Weights
from graphexec.layers.onnx_recurrent import OnnxRecurrent
from graphexec.layers.recurrent import _AtenRecurrent, _Recurrent
from graphexec.layers.specs import TensorSpec


@cpu_kernel(_Recurrent, _AtenRecurrent, OnnxRecurrent)
class JitRecurrent(JitKernel):
    """A float32 ``nn.RNN`` / ``nn.LSTM`` / ``nn.GRU`` (its weights in the model), the
    ``aten::`` call of a bare one, padded or packed, or ONNX's ``LSTM`` / ``GRU`` / ``RNN``
    (these two take the weights their layers fold:
    :class:`~graphexec.layers._recurrent_math.FoldCache`)."""

    name = "jit recurrence"

    @classmethod
    def accepts(cls, layer, inputs, outputs, hints) -> bool:
        x = inputs[0] if inputs else None
        if not (isinstance(x, TensorSpec) and x.dtype == FLOAT32 and hints.blas_threads == 1
                and isinstance(layer.cell, (ElmanCell, LSTMCell, GRUCell)) and sgemm() is not None):
            return False
        if isinstance(layer, _Recurrent):
            return layer.dtype == FLOAT32 and all(isinstance(s, TensorSpec) and s.dtype == FLOAT32
                                                  for s in inputs[1:])
        return True  # weights and states of the input's dtype (the layers' infer)

    def __init__(self, layer, inputs, outputs, hints, device) -> None:
        super().__init__(layer, inputs, outputs, hints, device)
        self.layer = layer
        self.cell = layer.cell
        self.weights = [_row_major(w) for w in layer.weights] if isinstance(layer, _Recurrent) else None
        self.gemm: Any = sgemm()
        self.steps_loop: Any = None

    def prepare(self) -> None:
        """The loop of the layer's cell, compiled for the types it is called with."""
        seq, rows, vector = np.zeros((1, 1, 1), FLOAT32), np.zeros((1, 1), FLOAT32), np.zeros(1, FLOAT32)
        sizes = np.zeros(1, np.int64)
        blas = (self.gemm.address, self.gemm.gemv, self.gemm.ilp64)
        if isinstance(self.cell, LSTMCell):
            self.steps_loop = self.loop("recurrent", "lstm_steps", seq, rows, rows, rows, rows, False, False,
                                        sizes, False, seq, rows, rows, *blas)
        elif isinstance(self.cell, GRUCell):
            self.steps_loop = self.loop("recurrent", "gru_steps", seq, rows, rows, vector, False, sizes,
                                        False, seq, rows, *blas)
        else:
            self.steps_loop = self.loop("recurrent", "elman_steps", seq, rows, rows, False, False, sizes,
                                        False, seq, *blas)

    def _steps(self, projected: np.ndarray, weights: Weights, h: np.ndarray, c: np.ndarray | None,
               reverse: bool, out: np.ndarray, sizes: np.ndarray | None) -> None:
        """:meth:`graphexec.layers._recurrent_math.Stack.steps`, compiled."""
        rows = projected.shape[1]
        if rows == 0:  # an empty batch: no product to call the BLAS for
            return
        weights = _row_major(weights)  # no copy where the kernel made them so at load
        packed = sizes is not None
        state = fitted(h)
        steps = np.full(len(out), rows, np.int64) if sizes is None else sizes.astype(np.int64)
        blas = (self.gemm.address, self.gemm.gemv, self.gemm.ilp64)
        projected = fitted(projected)
        if isinstance(self.cell, LSTMCell):
            projection = weights.w_hr is not None
            hr = weights.w_hr if projection else np.zeros((1, 1), FLOAT32)
            hidden = projected.shape[2] // 4
            self.steps_loop(projected, state, c, weights.w_hh, hr, projection, reverse, steps, packed, out,
                            np.empty((rows, 4 * hidden), FLOAT32), np.empty((rows, hidden), FLOAT32), *blas)
        elif isinstance(self.cell, GRUCell):
            self.steps_loop(projected, state, weights.w_hh, weights.b_hh, reverse, steps, packed, out,
                            np.empty((rows, projected.shape[2]), FLOAT32), *blas)
        else:
            self.steps_loop(projected, state, weights.w_hh, self.cell.relu, reverse, steps, packed, out,
                            *blas)
        if packed and state is not h:
            h[...] = state  # the rows' last states, where the loop ran on a copy

    def run(self, inputs: list[Any], outputs: list[Any] | None = None) -> list[Any]:
        if self.weights is None:
            results = self.layer.compute(inputs, self._steps)
        else:
            states = self.layer.initial_states(inputs[1:])
            results = self.layer.stack.run(inputs[0], self.weights, states, FLOAT32, self._steps)
            results = self.layer.returned(results)
        if outputs is None:
            return results
        for given, result in zip(outputs, results):
            np.copyto(given, result)
        return outputs


def _row_major(w: Weights) -> Weights:
    """The matrices the loops read row-major (the layer's may be transposed views), a bias
    not given as zeros."""
    return Weights(w.w_ih, _rows(w.w_hh), w.b_ih, _rows(w.b_hh, w.w_hh.shape[1]),
                   None if w.w_hr is None else _rows(w.w_hr))


def _rows(w: np.ndarray | None, size: int = 0) -> np.ndarray:
    """``w`` C-contiguous in float32 (zeros of ``size`` where None: a bias not given)."""
    return np.zeros(size, FLOAT32) if w is None else np.asarray(w, FLOAT32, order="C")
