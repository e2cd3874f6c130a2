"""Sliding patches: ``nn.Unfold`` / ``F.unfold`` (im2col) and ``nn.Fold`` / ``F.fold`` (col2im).

::

    Unfold      (N, C, H, W) -> (N, C*kh*kw, L): every kernel window as a column
    Fold        (N, C*kh*kw, L) -> (N, C, H, W): columns summed back where windows overlap

A column's rows run channel first, then kernel row, then kernel column, as in PyTorch;
``L`` counts the windows row by row.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from graphexec.layers.base import Layer, Params, Shape, ShapeMismatch, Spec, TensorSpec
from graphexec.layers.registry import register
from graphexec.layers.shape import planned_ints, runtime_ints


class _Patches(Layer):
    def build(self, params: Params) -> None:
        self.kernel = params.ints("kernel_size", 2)
        self.dilation = params.ints("dilation", 2, (1, 1))
        self.padding = params.ints("padding", 2, (0, 0))
        self.stride = params.ints("stride", 2, (1, 1))
        for name, values, low in (
            ("kernel_size", self.kernel, 1),
            ("dilation", self.dilation, 1),
            ("padding", self.padding, 0),
            ("stride", self.stride, 1),
        ):
            if any(v < low for v in values):
                raise params.error(f"{name}={values} must be >= {low}")

    def windows(self, size: tuple[int, int]) -> tuple[int, int]:
        """How many windows fit along H and W of an image of ``size``."""
        counts = []
        for n, k, d, p, s in zip(size, self.kernel, self.dilation, self.padding, self.stride):
            count = (n + 2 * p - d * (k - 1) - 1) // s + 1
            if count < 1:
                raise ShapeMismatch(
                    f"a {self.kernel} kernel (dilation {self.dilation}, padding {self.padding}) "
                    f"does not fit an image of size {size}"
                )
            counts.append(count)
        return counts[0], counts[1]

    def taps(self, rows: int, cols: int):
        """For each kernel position (i, j): the padded image's rows and columns it reads."""
        (kh, kw), (dh, dw), (sh, sw) = self.kernel, self.dilation, self.stride
        for i in range(kh):
            for j in range(kw):
                yield (
                    i,
                    j,
                    slice(i * dh, i * dh + sh * (rows - 1) + 1, sh),
                    slice(j * dw, j * dw + sw * (cols - 1) + 1, sw),
                )


@register("nn.Unfold", "F.unfold")
class Unfold(_Patches):
    """Every kernel window of a (N, C, H, W) or (C, H, W) image as one column."""

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, 1)
        x = shapes[0]
        if len(x) not in (3, 4):
            raise ShapeMismatch(f"expected an (N, C, H, W) or (C, H, W) input, given shape {x}")
        rows, cols = self.windows(x[-2:])
        return [x[:-3] + (x[-3] * math.prod(self.kernel), rows * cols)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        batched = x.ndim == 4
        x = x if batched else x[None]
        (ph, pw), (n, c) = self.padding, x.shape[:2]
        padded = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
        rows, cols = self.windows(x.shape[2:])
        out = np.empty((n, c, *self.kernel, rows, cols), dtype=x.dtype)
        for i, j, r, s in self.taps(rows, cols):
            out[:, :, i, j] = padded[:, :, r, s]
        out = out.reshape(n, -1, rows * cols)
        return [out if batched else out[0]]


@register("nn.Fold", "F.fold")
class Fold(_Patches):
    """Columns of kernel windows summed back into a (N, C, H, W) image of ``output_size``,
    a param or an input (a dynamic export computes it from the input's sizes)."""

    def build(self, params: Params) -> None:
        super().build(params)
        self.size_input = params.input_for("output_size")
        self.output_size = params.ints("output_size", 2) if self.size_input is None else None

    def _given_size(self, values: tuple[int, ...]) -> tuple[int, int]:
        """A runtime ``output_size``: one size for both dims, or (H, W)."""
        if len(values) == 1:
            values = values * 2
        if len(values) != 2 or any(v < 1 for v in values):
            raise ShapeMismatch(f"output_size {values} should be one or two positive sizes")
        return values[0], values[1]

    def _out_shape(self, x: Shape, size: tuple[int, int]) -> Shape:
        taps = math.prod(self.kernel)
        rows, cols = self.windows(size)
        if len(x) not in (2, 3) or x[-2] % taps or x[-1] != rows * cols:
            raise ShapeMismatch(
                f"expected (N, C*{taps}, {rows * cols}) columns for an output of size {size}, given shape {x}"
            )
        return x[:-2] + (x[-2] // taps, *size)

    def infer(self, specs: list[Spec]) -> list[Spec]:
        if self.size_input is None:
            return super().infer(specs)
        self.expect_inputs(specs, self.num_inputs)
        x = specs[0]
        if not isinstance(x, TensorSpec):
            raise ShapeMismatch(f"input 0 is a sequence {x}, expected a tensor")
        known = planned_ints(specs[self.size_input], "the output size")
        return [TensorSpec(self._out_shape(x.shape, self._given_size(known)), x.dtype)]

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        if self.output_size is None:
            raise ShapeMismatch("the output size is an input, not a shape; use infer()")
        self.expect_inputs(shapes, 1)
        return [self._out_shape(shapes[0], self.output_size)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        size = self.output_size
        if size is None:
            size = self._given_size(runtime_ints(inputs[self.size_input], "output_size"))  # type: ignore[index]
        self._out_shape(x.shape, size)
        batched = x.ndim == 3
        x = x if batched else x[None]
        (h, w), (ph, pw) = size, self.padding
        rows, cols = self.windows(size)
        n = x.shape[0]
        c = x.shape[1] // math.prod(self.kernel)
        patches = x.reshape(n, c, *self.kernel, rows, cols)
        padded = np.zeros((n, c, h + 2 * ph, w + 2 * pw), dtype=x.dtype)
        for i, j, r, s in self.taps(rows, cols):
            padded[:, :, r, s] += patches[:, :, i, j]
        out = np.asarray(padded[:, :, ph : ph + h, pw : pw + w], order="C")
        return [out if batched else out[0]]
