"""3-D convolutions: ``nn.Conv3d``, ``nn.ConvTranspose3d`` and their functional forms.

::

    Conv3d, FConv3d                     a sum of 2-D convolutions over the depth taps
    ConvTranspose3d, FConvTranspose3d   2-D transposed ones, scattered along the depth

Tap k of the kernel's depth reads input planes ``k * dilation + i * stride`` for output
plane i. With the output depth folded into the batch, each tap is one 2-D convolution, so
a 2-D convolution does the work (the reference one here; the CPU device's 2-D kernels,
:mod:`graphexec.devices.cpu.conv`, in the engine);
the transposed form runs each tap over every input plane at once and adds the planes at
depth ``i * stride + k * dilation - padding``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from graphexec.layers._conv_base import Geometry, out_size
from graphexec.layers._conv_reference import conv2d, conv_transpose2d, tap_span, transposed_kernel
from graphexec.layers.base import Params, Shape
from graphexec.layers.conv import _Conv, _ConvFunctional
from graphexec.layers.registry import register

#: numpy's np.pad mode for each padding_mode.
_PAD_MODES = {"zeros": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}


#: A 2-D convolution of one depth tap: (N, C, H, W) in, a new (N, Cout, Ho, Wo) array out.
Plane = Callable[[np.ndarray], np.ndarray]


class ReferencePlane:
    """One depth tap's 2-D convolution, computed by the reference :func:`conv2d`."""

    def __init__(self, weight: np.ndarray, bias: np.ndarray | None, geometry: Geometry):
        self.weight, self.bias, self.geometry = weight, bias, geometry

    def __call__(self, x: np.ndarray) -> np.ndarray:
        n, _, h, w = x.shape
        kh, kw = self.weight.shape[2:]
        (top_bottom, left_right), geo = self.geometry.pads((kh, kw)), self.geometry
        shape = (n, self.weight.shape[0], out_size(h, kh, geo.stride[0], geo.dilation[0], top_bottom),
                 out_size(w, kw, geo.stride[1], geo.dilation[1], left_right))
        out = np.empty(shape, dtype=np.result_type(x.dtype, self.weight.dtype))
        return conv2d(x, self.weight, self.bias, self.geometry, out)


def conv3d_by_planes(
    x: np.ndarray,
    planes: Sequence[Plane],
    depth: tuple[int, int, tuple[int, int]],
    padding_mode: str,
    out: np.ndarray,
) -> None:
    """``out`` (N, Cout, Do, Ho, Wo) from ``x`` (N, C, D, H, W) and one 2-D kernel per depth
    tap; ``depth`` is (stride, dilation, (front, back) padding) along D."""
    stride, dilation, pads = depth
    if any(pads):
        x = np.pad(x, ((0, 0), (0, 0), pads, (0, 0), (0, 0)), mode=_PAD_MODES[padding_mode])
    n, c, _, h, w = x.shape
    _, cout, do, ho, wo = out.shape
    total = None
    for k, plane in enumerate(planes):
        start = k * dilation
        slab = x[:, :, start : start + stride * (do - 1) + 1 : stride]
        y = plane(np.asarray(slab.transpose(0, 2, 1, 3, 4), order="C").reshape(n * do, c, h, w))
        total = y if total is None else np.add(total, y, out=total)
    np.copyto(out, total.reshape(n, do, cout, ho, wo).transpose(0, 2, 1, 3, 4))  # type: ignore[union-attr]


def conv_transpose3d_by_planes(
    x: np.ndarray,
    kernels: list[np.ndarray],
    bias: np.ndarray | None,
    kernel_hw: tuple[int, int],
    geometry: tuple,
    out: np.ndarray,
) -> None:
    """``out`` (N, Cout, Do, Ho, Wo) from ``x`` (N, Cin, D, H, W) and one
    :func:`~graphexec.layers._conv_reference.transposed_kernel` per depth tap; ``geometry`` is (stride,
    dilation, padding), three each."""
    stride, dilation, padding = geometry
    n, cin, d, h, w = x.shape
    _, cout, do, ho, wo = out.shape
    planes_in = np.asarray(x.transpose(0, 2, 1, 3, 4), order="C").reshape(n * d, cin, h, w)
    planes_out = np.empty((n * d, cout, ho, wo), dtype=out.dtype)
    out.fill(0)
    for k, kernel in enumerate(kernels):
        span = tap_span(d, stride[0], k * dilation[0] - padding[0], do)
        if span is None:
            continue
        conv_transpose2d(
            planes_in, kernel, None, kernel_hw, cout, stride[1:], dilation[1:], padding[1:], planes_out
        )
        out[:, :, span[0]] += planes_out.reshape(n, d, cout, ho, wo)[:, span[1]].transpose(0, 2, 1, 3, 4)
    if bias is not None:
        out += bias.reshape(cout, 1, 1, 1).astype(out.dtype, copy=False)


class _Conv3dBase(_Conv):
    spatial = 3

    def _plane_geometry(self, kernel: tuple[int, ...]) -> Geometry:
        """The H, W geometry of each depth tap's 2-D convolution."""
        pads = self._pads(kernel)
        return Geometry(
            self.stride[1:], self.dilation[1:], (pads[1], pads[2]), self.groups, self.padding_mode
        )

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        """The nn.* forms' shapes (the F.* forms take theirs from :class:`_ConvFunctional`)."""
        self.expect_inputs(shapes, 1)
        return [self._output_shape(shapes[0], self.in_channels, self.out_channels, self.kernel_size)]

    def _depth(self, kernel: tuple[int, ...]) -> tuple[int, int, tuple[int, int]]:
        return self.stride[0], self.dilation[0], self._pads(kernel)[0]

    def _compute_dtype(self, inputs: list[Any], x: np.ndarray) -> np.dtype:
        return np.result_type(x.dtype, np.float32)


@register("nn.Conv3d")
class Conv3d(_Conv3dBase):
    """3-D cross-correlation with a stored kernel (O, I/groups, kd, kh, kw)."""

    def build(self, params: Params) -> None:
        weight, self.bias = self._read_module(params, transposed=False)
        #: The 2-D weight of each depth tap, (O, I/groups, kh, kw).
        self.plane_weights = [np.asarray(weight[:, :, k], order="C") for k in range(self.kernel_size[0])]
        self.plane_geometry = self._plane_geometry(self.kernel_size)
        self.planes = [ReferencePlane(w, self.bias if k == 0 else None, self.plane_geometry)
                       for k, w in enumerate(self.plane_weights)]

    def _run(self, inputs: list[Any], x: np.ndarray, out: np.ndarray) -> None:
        conv3d_by_planes(
            x.astype(np.float32, copy=False),
            self.planes,
            self._depth(self.kernel_size),
            self.padding_mode,
            out,
        )


@register("F.conv3d")
class FConv3d(_ConvFunctional, _Conv3dBase):
    """``F.conv3d(input, weight, bias)`` with the weight as a graph value."""

    def _run(self, inputs: list[Any], x: np.ndarray, out: np.ndarray) -> None:
        _, w, b = self._operands(inputs)
        w = np.asarray(w)
        kernel = tuple(w.shape[2:])
        geometry = self._plane_geometry(kernel)
        planes = [ReferencePlane(np.asarray(w[:, :, k], order="C"), None if b is None or k else np.asarray(b),
                                 geometry)
                  for k in range(kernel[0])]
        conv3d_by_planes(x, planes, self._depth(kernel), self.padding_mode, out)


class _ConvTranspose3dBase(_Conv3dBase):
    transposed = True

    def _run_planes(
        self, x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, out: np.ndarray
    ) -> None:
        kernels = [
            transposed_kernel(np.asarray(weight[:, :, k], order="C"), self.groups)
            for k in range(weight.shape[2])
        ]
        conv_transpose3d_by_planes(
            x,
            kernels,
            bias,
            tuple(weight.shape[3:]),  # type: ignore[arg-type]
            (self.stride, self.dilation, self.padding),
            out,
        )


@register("nn.ConvTranspose3d")
class ConvTranspose3d(_ConvTranspose3dBase):
    """3-D transposed convolution with a stored kernel (I, O/groups, kd, kh, kw)."""

    def build(self, params: Params) -> None:
        weight, self.bias = self._read_module(params, transposed=True)
        self.kernels = [
            transposed_kernel(np.asarray(weight[:, :, k], order="C"), self.groups)
            for k in range(self.kernel_size[0])
        ]

    def _run(self, inputs: list[Any], x: np.ndarray, out: np.ndarray) -> None:
        conv_transpose3d_by_planes(
            x.astype(np.float32, copy=False),
            self.kernels,
            self.bias,
            self.kernel_size[1:],
            (self.stride, self.dilation, self.padding),
            out,
        )


@register("F.conv_transpose3d")
class FConvTranspose3d(_ConvFunctional, _ConvTranspose3dBase):
    """``F.conv_transpose3d(input, weight, bias)`` with the weight as a graph value."""

    def _run(self, inputs: list[Any], x: np.ndarray, out: np.ndarray) -> None:
        _, w, b = self._operands(inputs)
        self._run_planes(x, np.asarray(w), None if b is None else np.asarray(b), out)
