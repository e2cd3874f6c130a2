"""Recurrent layers: ``nn.RNN``, ``nn.LSTM``, ``nn.GRU`` (PyTorch's gate order and equations).

::

    _Recurrent      the stack: layers x directions, time steps in order (or reversed)
    ├── RNN             h = act(x W_ih^T + b_ih + h W_hh^T + b_hh), act tanh or relu
    ├── LSTM            gates i, f, g, o; a cell state; an optional projection of h
    └── GRU             gates r, z, n; n sees r * (h W_hn^T + b_hn)

The input's product with ``W_ih`` is one matmul over every time step; only the hidden
state's product runs step by step. Inputs: the sequence, then the initial states (h0, and
c0 for an LSTM) when given; outputs: the sequence, then the final states, as exported.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from layers.base import Layer, Params, Shape, ShapeMismatch
from layers.registry import register


def sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)) in place, without overflow warnings for large negative x."""
    np.negative(x, out=x)
    np.exp(x, out=x)
    x += 1
    return np.reciprocal(x, out=x)


class _Recurrent(Layer):
    #: Gate blocks stacked in the weights (RNN 1, LSTM 4, GRU 3).
    gates = 1
    #: Hidden states carried between steps (LSTM 2: h and c).
    states = 1

    def build(self, params: Params) -> None:
        self.input_size = params.int("input_size")
        self.hidden = params.int("hidden_size")
        self.layers = params.int("num_layers", 1)
        self.batch_first = params.bool("batch_first", False)
        self.directions = 2 if params.bool("bidirectional", False) else 1
        self.proj = params.int("proj_size", 0)
        if min(self.input_size, self.hidden, self.layers) <= 0 or self.proj < 0:
            raise params.error(
                f"input_size={self.input_size}, hidden_size={self.hidden}, num_layers={self.layers} "
                "must be positive"
            )
        self.output_size = self.proj or self.hidden
        has_bias = params.bool("bias", True)
        self.weights = []  # per (layer, direction): (W_ih^T, W_hh^T, b_ih, b_hh, W_hr^T or None)
        width = self.gates * self.hidden
        #: float64 for a float64 model (``model.double()``), else float32.
        self.dtype = np.dtype(np.float64 if params.attr("weight_ih_l0").dtype == np.float64 else np.float32)
        dtype = self.dtype
        for layer in range(self.layers):
            inputs = self.input_size if layer == 0 else self.output_size * self.directions
            for direction in range(self.directions):
                suffix = f"_l{layer}" + ("_reverse" if direction else "")
                w_ih = params.attr(f"weight_ih{suffix}", shape=(width, inputs), dtype=dtype)
                w_hh = params.attr(f"weight_hh{suffix}", shape=(width, self.output_size), dtype=dtype)
                b_ih = b_hh = np.zeros(width, dtype)
                if has_bias:
                    b_ih = params.attr(f"bias_ih{suffix}", shape=(width,), dtype=dtype)
                    b_hh = params.attr(f"bias_hh{suffix}", shape=(width,), dtype=dtype)
                w_hr = None
                if self.proj:
                    w_hr = np.ascontiguousarray(
                        params.attr(f"weight_hr{suffix}", shape=(self.proj, self.hidden), dtype=dtype).T
                    )
                self.weights.append(
                    (np.ascontiguousarray(w_ih.T), np.ascontiguousarray(w_hh.T), b_ih, b_hh, w_hr)
                )

    # -- shapes ------------------------------------------------------------------------
    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, 1, 1 + self.states)
        x = shapes[0]
        if len(x) not in (2, 3) or x[-1] != self.input_size:
            raise ShapeMismatch(
                f"expected a sequence (L, N, {self.input_size}), (N, L, {self.input_size}) with "
                f"batch_first, or (L, {self.input_size}), given shape {x}"
            )
        batched = len(x) == 3
        steps, batch = (x[1], x[0]) if batched and self.batch_first else (x[0], x[1] if batched else None)
        stack = self.layers * self.directions
        state_shapes = [(stack, batch, self.output_size) if batched else (stack, self.output_size)]
        if self.states == 2:
            state_shapes.append((stack, batch, self.hidden) if batched else (stack, self.hidden))
        for given, wanted in zip(shapes[1:], state_shapes):
            if tuple(given) != wanted:
                raise ShapeMismatch(f"an initial state should have shape {wanted}, given {given}")
        width = self.output_size * self.directions
        if not batched:
            out: Shape = (steps, width)
        else:
            out = (batch, steps, width) if self.batch_first else (steps, batch, width)
        return ([out] + state_shapes)[: self.num_outputs]

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        return [self.dtype] * self.num_outputs

    # -- computation -------------------------------------------------------------------
    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0], dtype=self.dtype)
        batched = x.ndim == 3
        if not batched:
            x = x[:, None]
        elif self.batch_first:
            x = np.swapaxes(x, 0, 1)
        batch = x.shape[1]
        stack = self.layers * self.directions
        given = [np.asarray(s, dtype=self.dtype).reshape(stack, batch, -1) for s in inputs[1:]]
        h0 = given[0] if given else np.zeros((stack, batch, self.output_size), self.dtype)
        c0 = given[1] if len(given) > 1 else np.zeros((stack, batch, self.hidden), self.dtype)
        finals_h, finals_c = [], []
        for layer in range(self.layers):
            outputs = []
            for direction in range(self.directions):
                k = layer * self.directions + direction
                y, h, c = self.run_direction(x, self.weights[k], h0[k], c0[k], reverse=direction == 1)
                outputs.append(y)
                finals_h.append(h)
                finals_c.append(c)
            x = outputs[0] if len(outputs) == 1 else np.concatenate(outputs, axis=-1)
        if not batched:
            x = x[:, 0]
        elif self.batch_first:
            x = np.swapaxes(x, 0, 1)
        results = [np.ascontiguousarray(x), np.stack(finals_h), np.stack(finals_c)]
        if not batched:
            results[1:] = [r[:, 0] for r in results[1:]]
        return results[: self.num_outputs]

    def run_direction(
        self, x: np.ndarray, weights: tuple, h: np.ndarray, c: np.ndarray, reverse: bool
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One layer in one direction over ``x`` (T, N, I): (outputs (T, N, H), last h, last c)."""
        w_ih, w_hh, b_ih, b_hh, w_hr = weights
        projected = np.matmul(x, w_ih) + b_ih  # every step's input product at once
        steps = range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0])
        out = np.empty(x.shape[:2] + (h.shape[-1],), self.dtype)
        h, c = h.copy(), c.copy()
        for t in steps:
            h, c = self.step(projected[t], h, c, w_hh, b_hh, w_hr)
            out[t] = h
        return out, h, c

    def step(
        self,
        xw: np.ndarray,
        h: np.ndarray,
        c: np.ndarray,
        w_hh: np.ndarray,
        b_hh: np.ndarray,
        w_hr: np.ndarray | None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """One time step from the input's product ``xw`` (N, gates * H): (new h, new c)."""
        raise NotImplementedError

    def flops(self, inputs, outputs) -> int:
        x = inputs[0].shape
        tokens = math.prod(x[:-1])
        width = self.gates * self.hidden
        per_token = 2 * width * (self.input_size + self.output_size * self.layers * self.directions)
        return tokens * self.directions * (per_token + 4 * width)

    def blas_flops(self, inputs, outputs) -> int:
        return self.flops(inputs, outputs)


@register("nn.RNN")
class RNN(_Recurrent):
    """Elman RNN: ``h = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh)`` (or relu)."""

    def build(self, params: Params) -> None:
        super().build(params)
        self.relu = params.str("nonlinearity", "tanh", choices=("tanh", "relu")) == "relu"

    def step(self, xw, h, c, w_hh, b_hh, w_hr):
        pre = xw + np.matmul(h, w_hh) + b_hh
        return (np.maximum(pre, 0, out=pre) if self.relu else np.tanh(pre, out=pre)), c


@register("nn.LSTM")
class LSTM(_Recurrent):
    """``c = f*c + i*g``, ``h = o*tanh(c)`` (projected by ``W_hr`` with ``proj_size``)."""

    gates = 4
    states = 2

    def step(self, xw, h, c, w_hh, b_hh, w_hr):
        pre = xw + np.matmul(h, w_hh) + b_hh
        i, f, g, o = np.split(pre, 4, axis=-1)
        sigmoid(i), sigmoid(f), np.tanh(g, out=g), sigmoid(o)
        c = f * c + i * g
        h = o * np.tanh(c)
        return (h if w_hr is None else np.matmul(h, w_hr)), c


@register("nn.GRU")
class GRU(_Recurrent):
    """``h = (1 - z) * n + z * h`` with ``n = tanh(x_n + r * (h W_hn^T + b_hn))``."""

    gates = 3

    def step(self, xw, h, c, w_hh, b_hh, w_hr):
        hw = np.matmul(h, w_hh) + b_hh
        x_r, x_z, x_n = np.split(xw, 3, axis=-1)
        h_r, h_z, h_n = np.split(hw, 3, axis=-1)
        r, z = sigmoid(x_r + h_r), sigmoid(x_z + h_z)
        n = np.tanh(x_n + r * h_n)
        return n + z * (h - n), c
