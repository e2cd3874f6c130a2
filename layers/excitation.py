"""A squeeze-and-excitation block as one layer (built by
:mod:`graphexec.passes.excitation`, never read from a param file).

MobileNet v3, EfficientNet and RegNet-Y gate their channels by what the whole image holds
(Hu et al.): ``x * gate(fc2(act(fc1(mean_hw(x)))))``, where ``fc1`` and ``fc2`` are 1x1
convolutions of a 1 x 1 image. This layer's forward computes the mean as one
matrix-vector product (as the average pool computes it), each convolution as one small
product with its bias and the activation layers the model named, and the gate as one
broadcast multiply. The sums run in another order than the convolution kernels' (within
float32 rounding; tested against PyTorch).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from graphexec.layers.base import Layer, Shape, ShapeMismatch
from graphexec.layers.conv import Conv2d
from graphexec.layers.specs import Spec


class SqueezeExcite(Layer):
    """``x * gate(W2 act(W1 mean_hw(x) + b1) + b2)`` over an (N, C, H, W) float32 input."""

    fresh_outputs = True
    writes_into = True

    def __init__(self, name: str, reduce: Conv2d, reduce_tail: tuple[Layer, ...],
                 expand: Conv2d, expand_tail: tuple[Layer, ...],
                 part_types: tuple[str, ...] = ()):  # no Operator: built by the rewrite
        self.name = name
        self.type = "graphexec.SqueezeExcite"
        #: The types of the operators it stands for (a device keeps it on the CPU where
        #: the options keep one of them there).
        self.part_types = part_types
        self.num_inputs = 1
        self.num_outputs = 1
        self.input_names = ["input"]
        # Transposed, so that each product leaves one image's vector per contiguous row.
        self.reduce_weight = np.asarray(reduce.weight[:, :, 0, 0].T, order="C")   # (C, Cr)
        self.reduce_bias = reduce.bias
        self.expand_weight = np.asarray(expand.weight[:, :, 0, 0].T, order="C")   # (Cr, C)
        self.expand_bias = expand.bias
        self.reduce_tail, self.expand_tail = reduce_tail, expand_tail

    @property
    def channels(self) -> int:
        return self.reduce_weight.shape[0]

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, 1)
        shape = shapes[0]
        if len(shape) != 4 or shape[1] != self.channels:
            raise ShapeMismatch(f"expects (N, {self.channels}, H, W), got {shape}")
        return [shape]

    def forward(self, inputs: list[Any]) -> list[Any]:
        out = np.empty(inputs[0].shape, np.float32)
        self.forward_into(inputs, [out])
        return [out]

    def forward_into(self, inputs: list[Any], outputs: list[np.ndarray]) -> None:
        x = inputs[0]
        n, c, h, w = x.shape
        means = np.matmul(x.reshape(n, c, h * w), self._average(h * w))       # (N, C)
        hidden = self._linear(means, self.reduce_weight, self.reduce_bias)  # (N, Cr)
        self._activate(self.reduce_tail, hidden)
        gate = self._linear(hidden, self.expand_weight, self.expand_bias)   # (N, C)
        self._activate(self.expand_tail, gate)
        np.multiply(x, gate.reshape(n, c, 1, 1), out=outputs[0])

    @staticmethod
    def _average(count: int) -> np.ndarray:
        """The vector of ``1/count`` that averages a row (the average pool's own)."""
        return np.full(count, 1 / count, dtype=np.float32)

    @staticmethod
    def _linear(rows: np.ndarray, weight: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
        result = np.matmul(rows, weight)
        if bias is not None:
            result += bias
        return result

    @staticmethod
    def _activate(tail: tuple[Layer, ...], rows: np.ndarray) -> None:
        """The activations on (N, channels) in place, seen as the (N, channels, 1, 1) image
        the convolution gave them (a view: ``rows`` is contiguous)."""
        image = rows.reshape(rows.shape + (1, 1))
        for layer in tail:
            layer.forward_into([image], [image])

    def flops(self, inputs: list[Spec], outputs: list[Spec]) -> int:
        n, c, h, w = inputs[0].shape
        return 2 * n * c * h * w + self.blas_flops(inputs, outputs)

    def blas_flops(self, inputs: list[Spec], outputs: list[Spec]) -> int:
        return 2 * inputs[0].shape[0] * (self.reduce_weight.size + self.expand_weight.size)

    def work_bytes(self, inputs: list[Spec], outputs: list[Spec]) -> int:
        return 3 * inputs[0].nbytes + 4 * (self.reduce_weight.size + self.expand_weight.size)


class GatedConv(Layer):
    """A squeeze-and-excitation block and the convolution that alone reads its gated output
    (a :class:`~graphexec.layers.conv.Conv2d`, with its fused activation or chain), as one
    layer: built by :mod:`graphexec.passes.excitation` for a device that multiplies by the
    gate as the convolution reads its input, so the gated tensor is never stored. Its
    forward is the two forwards in turn: the reference the device is tested against, and
    what the CPU runs if the device cannot. The convolution's other inputs (a chain's) follow
    the block's input."""

    fresh_outputs = True

    def __init__(self, block: SqueezeExcite, conv: Layer):  # no Operator: built from layers
        self.block = block
        self.conv = conv
        self.name = conv.name
        self.type = f"{block.type}+{conv.type}"
        self.num_inputs = conv.num_inputs
        self.num_outputs = 1
        self.input_names = ["input", *list(conv.input_names)[1:]]
        parts = (getattr(conv, "head", conv), *getattr(conv, "tail", ()))
        self.part_types = (*block.part_types, *(layer.type for layer in parts))

    def infer(self, specs: list[Spec]) -> list[Spec]:
        gated = self.block.infer(specs[:1])
        return self.conv.infer([*gated, *specs[1:]])

    def forward(self, inputs: list[Any]) -> list[Any]:
        gated = self.block.forward(inputs[:1])
        return self.conv.forward([*gated, *inputs[1:]])

    def flops(self, inputs: list[Spec], outputs: list[Spec]) -> int:
        gated = self.block.infer(inputs[:1])
        return self.block.flops(inputs[:1], gated) + self.conv.flops([*gated, *inputs[1:]], outputs)

    def blas_flops(self, inputs: list[Spec], outputs: list[Spec]) -> int:
        gated = self.block.infer(inputs[:1])
        return self.block.blas_flops(inputs[:1], gated) + self.conv.blas_flops([*gated, *inputs[1:]], outputs)

    def work_bytes(self, inputs: list[Spec], outputs: list[Spec]) -> int:
        gated = self.block.infer(inputs[:1])
        return self.block.work_bytes(inputs[:1], gated) + self.conv.work_bytes([*gated, *inputs[1:]], outputs)

    def scratch_bytes(self, inputs: list[Spec], outputs: list[Spec]) -> int:
        """The gated tensor the forward holds, and the convolution's own."""
        gated = self.block.infer(inputs[:1])
        held = gated[0].nbytes  # type: ignore[union-attr]
        return held + self.conv.scratch_bytes([*gated, *inputs[1:]], outputs)
