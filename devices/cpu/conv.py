"""The CPU's convolution kernels: each 2-D convolution by the path that suits its shape
(:mod:`graphexec.devices.cpu._conv_math`: Winograd F(2x2, 3x3), banded or per-tap
depthwise, 1x1 as one product, im2col by positions or by channels), cut into bands of
rows or channels when it runs alone while threads idle; 3-D ones as 2-D ones per depth tap.

A stored weight is laid out once per layer and shared by the plans of every input shape;
what a path derives from it for a shape is made when the plan is built.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from graphexec.devices.base import Hints, Piece
from graphexec.devices.cpu._conv_math import Conv2dKernel
from graphexec.devices.cpu.kernel import CpuKernel, cpu_kernel
from graphexec.layers.conv import Conv1d, Conv2d, FConv1d, FConv2d, _Conv
from graphexec.layers.conv3d import Conv3d, FConv3d, conv3d_by_planes
from graphexec.layers.specs import Spec, TensorSpec


def _lifted(layer: _Conv, shape: tuple[int, ...]) -> tuple[int, ...]:
    """An input shape of ``layer`` as the (N, C, H, W) the 2-D kernel sees."""
    if len(shape) == layer.spatial + 1:
        shape = (1, *shape)
    return shape[:2] + (1,) + shape[2:] if layer.spatial == 1 else tuple(shape)


def _takes(layer: _Conv, inputs: Sequence[Spec]) -> bool:
    x = inputs[0] if inputs else None
    return isinstance(x, TensorSpec) and len(x.shape) in (layer.spatial + 1, layer.spatial + 2)


class _Conv2dRunner(CpuKernel):
    """What the 2-D kernels share: 1-D and unbatched inputs as 4-D views, and a computation
    dtype other than the output's (float16 inputs) through a temporary, as the layer does."""

    conv: Conv2dKernel

    def run(self, inputs: list[Any], outputs: list[Any] | None = None) -> list[Any]:
        layer = self.layer
        x = np.asarray(inputs[0])
        conv = self._conv_for(inputs)
        if outputs is None:
            outputs = [np.empty(self.output_specs[0].shape, dtype=x.dtype)]
        x4 = layer._as_4d(x)
        layer.compute_into(outputs, conv.output_dtype(x.dtype), lambda out: conv(x4, out=out))
        return outputs

    def _conv_for(self, inputs: list[Any]) -> Conv2dKernel:
        return self.conv


@cpu_kernel(Conv2d, Conv1d)
class StoredConv(_Conv2dRunner):
    """``nn.Conv1d`` / ``nn.Conv2d`` (and the convolutions graph rewrites derive from them)."""

    @classmethod
    def accepts(cls, layer, inputs, outputs, hints) -> bool:
        return _takes(layer, inputs)

    def __init__(self, layer, inputs, outputs, hints: Hints, device) -> None:
        super().__init__(layer, inputs, outputs, hints, device)
        conv = device.shared.get(layer, "conv2d", lambda: Conv2dKernel(
            layer.weight, layer.bias, layer.geometry, scratch=device.scratch, biased=layer.weight_and_bias))
        x = inputs[0]
        shape = _lifted(layer, x.shape)
        if hints.blas_threads > 1 and conv.path(shape, x.dtype) == "winograd":
            # Winograd's 16 small products barely gain from more BLAS threads; im2col's one
            # product does (see Conv2dKernel.without_winograd).
            conv = device.shared.get(layer, "conv2d without winograd", conv.without_winograd)
        self.conv = conv
        self.shape = shape
        self.name = conv.path(shape, x.dtype)

    def prepare(self) -> None:
        x, out = self.input_specs[0], self.output_specs[0]
        self.conv.prepare(self.shape, x.dtype, self.hints.pieces if self._bands() else 1)
        if self.conv.output_dtype(x.dtype) == out.dtype:  # no temporary of another dtype
            self._fast = self.conv.runner(self.shape, x.dtype)
            self._expected = (tuple(x.shape), np.dtype(x.dtype))
            self._out_4d = _lifted(self.layer, tuple(out.shape))

    #: What :meth:`run` calls for inputs of the planned shape and dtype (see prepare).
    _fast = None
    _expected: tuple = ((), None)
    _out_4d: tuple[int, ...] = ()

    def run(self, inputs: list[Any], outputs: list[Any] | None = None) -> list[Any]:
        x = inputs[0]
        if (outputs is not None and self._fast is not None and type(x) is np.ndarray
                and (x.shape, x.dtype) == self._expected and outputs[0].flags.c_contiguous):
            out = outputs[0]
            self._fast(x.reshape(self.shape), out.reshape(self._out_4d))
            return outputs
        return super().run(inputs, outputs)

    def _bands(self) -> bool:
        x = self.input_specs[0]
        return self.layer.spatial == 2 and len(x.shape) == 4

    def splits(self) -> bool:
        x = self.input_specs[0]
        return self._bands() and self.conv.splits(x.shape, x.dtype)

    def pieces(self, inputs: list[Any], outputs: list[np.ndarray], count: int) -> list[Piece] | None:
        x, out = inputs[0], outputs[0]
        if not self._bands() or not isinstance(x, np.ndarray) or x.ndim != 4:
            return None
        found = self.conv.pieces(x, out, count)
        return None if found is None else [Piece(run, region) for run, region in found]


@cpu_kernel(FConv2d, FConv1d)
class GivenWeightConv(_Conv2dRunner):
    """``F.conv1d`` / ``F.conv2d``: the weight arrives with the inputs, so each run lays it out."""

    name = "im2col"

    @classmethod
    def accepts(cls, layer, inputs, outputs, hints) -> bool:
        return _takes(layer, inputs)

    def _conv_for(self, inputs: list[Any]) -> Conv2dKernel:
        _, w, b = self.layer._operands(inputs)
        weight = self.layer._lift_weight(np.asarray(w))
        return Conv2dKernel(weight, None if b is None else np.asarray(b), self.layer.geometry, prepare=False,
                            scratch=self.device.scratch)


class _Planes(CpuKernel):
    """What the 3-D kernels share: batched inputs only, 2-D kernels per depth tap."""

    name = "planes"

    @classmethod
    def accepts(cls, layer, inputs, outputs, hints) -> bool:
        x = inputs[0] if inputs else None
        return isinstance(x, TensorSpec) and len(x.shape) == 5


@cpu_kernel(Conv3d)
class StoredConv3d(_Planes):
    """``nn.Conv3d`` as one prepared 2-D kernel per depth tap."""

    def __init__(self, layer, inputs, outputs, hints: Hints, device) -> None:
        super().__init__(layer, inputs, outputs, hints, device)
        self.planes = device.shared.get(layer, "planes", lambda: [
            Conv2dKernel(w, layer.bias if k == 0 else None, layer.plane_geometry, scratch=device.scratch)
            for k, w in enumerate(layer.plane_weights)])

    def prepare(self) -> None:
        n, c, _, h, w = self.input_specs[0].shape
        depth = self.output_specs[0].shape[2]
        for plane in self.planes:
            plane.prepare((n * depth, c, h, w), np.float32)

    def run(self, inputs: list[Any], outputs: list[Any] | None = None) -> list[Any]:
        layer = self.layer
        x = np.asarray(inputs[0]).astype(np.float32, copy=False)
        if outputs is None:
            outputs = [np.empty(self.output_specs[0].shape, dtype=self.output_specs[0].dtype)]
        depth = layer._depth(layer.kernel_size)
        layer.compute_into(outputs, np.dtype(np.float32),
                           lambda out: conv3d_by_planes(x, self.planes, depth, layer.padding_mode, out))
        return outputs


@cpu_kernel(FConv3d)
class GivenWeightConv3d(_Planes):
    """``F.conv3d``: 2-D kernels per depth tap, laid out at each run."""

    def run(self, inputs: list[Any], outputs: list[Any] | None = None) -> list[Any]:
        layer = self.layer
        x, w, b = layer._operands(inputs)
        w = np.asarray(w)
        kernel = tuple(w.shape[2:])
        geometry = layer._plane_geometry(kernel)
        planes = [Conv2dKernel(np.asarray(w[:, :, k], order="C"), None if b is None or k else np.asarray(b),
                               geometry, prepare=False, scratch=self.device.scratch) for k in range(kernel[0])]
        x = np.asarray(x)
        if outputs is None:
            outputs = [np.empty(self.output_specs[0].shape, dtype=self.output_specs[0].dtype)]
        depth = layer._depth(kernel)
        layer.compute_into(outputs, np.result_type(x.dtype, w.dtype),
                           lambda out: conv3d_by_planes(x, planes, depth, layer.padding_mode, out))
        return outputs
