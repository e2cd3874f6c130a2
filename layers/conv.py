"""Convolutions: ``nn.Conv1d/2d``, ``nn.ConvTranspose1d/2d`` and their functional forms
(3-D ones: :mod:`graphexec.layers.conv3d`).

::

    _Conv                        geometry params, 1-D as 2-D, unbatched inputs
    ├── Conv1d, Conv2d           nn.Conv*: weight and bias are attributes, prepared once
    ├── FConv1d, FConv2d         F.conv*: weight (and bias) arrive as inputs
    ├── ConvTranspose1d/2d       nn.ConvTranspose*
    └── FConvTranspose1d/2d      F.conv_transpose*

pnnx writes ``padding`` as a list or as ``same`` / ``valid``; a non-``zeros``
``padding_mode`` usually stays on the nn.Conv* (``circular`` it turns into an ``F.pad``
first, which this layer also accepts). The reference computations are in
:mod:`graphexec.layers._conv_reference`; the CPU device's faster kernels for the same layers
(Winograd, banded depthwise products, im2col variants) are in :mod:`graphexec.devices.cpu.conv`.

Every convolution computes straight into the output array it is given
(:meth:`~graphexec.layers.base.Layer.forward_into`, for the engine's memory plan); ``forward``
allocates that array and runs the same code, so both give the same bits.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
from graphexec.layers._conv_base import (
    Geometry,
    aligned,
    out_size,
    same_padding,
    transposed_out_size,
    view_of,
)
from graphexec.layers._conv_reference import conv2d, conv_transpose2d, transposed_kernel
from graphexec.layers._samples import rows_kept
from graphexec.layers.base import Layer, Params, Shape, ShapeMismatch
from graphexec.layers.registry import register
from graphexec.layers.specs import TensorSpec

PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


class _Conv(Layer):
    """What every convolution shares: geometry params and the 1-D/unbatched plumbing."""

    #: Spatial dims: 1 for Conv1d, 2 for Conv2d (3 in :mod:`graphexec.layers.conv3d`).
    spatial = 2
    #: Whether this is a transposed convolution.
    transposed = False
    #: The output is always a new array, computed straight into the memory given.
    fresh_outputs = True
    writes_into = True

    def batchwise(self, inputs, outputs) -> bool:
        # a batched input and a stored weight (F.conv*'s weight is an input of its own)
        return len(inputs) == 1 and rows_kept(inputs, outputs, self.spatial + 2)

    def flops(self, inputs, outputs) -> int:
        """2 x MACs: each output (each input, when transposed) meets C/groups x kernel weights."""
        x, y = inputs[0].shape, outputs[0].shape
        kernel = inputs[1].shape if len(inputs) > 1 else None
        taps = math.prod(kernel[2:]) if kernel is not None else math.prod(self.kernel_size)
        if self.transposed:
            return 2 * math.prod(x) * (y[-(self.spatial + 1)] // self.groups) * taps
        return 2 * math.prod(y) * (x[-(self.spatial + 1)] // self.groups) * taps

    def blas_flops(self, inputs, outputs) -> int:
        """All of it goes through matmul, but for depthwise convolutions (a tap loop)."""
        return 0 if self._depthwise(inputs) else self.flops(inputs, outputs)

    def work_bytes(self, inputs, outputs) -> int:
        """Depthwise: a multiply and an add over the output per tap. Others: the im2col
        columns (taps x input channels per output position), written and read once."""
        x, y = inputs[0], outputs[0]
        kernel = inputs[1].shape[2:] if len(inputs) > 1 else self.kernel_size
        taps = math.prod(kernel)
        if self._depthwise(inputs):
            return 2 * taps * y.nbytes
        if taps == 1 and all(s == 1 for s in self.stride):
            return 0
        channels = -(self.spatial + 1)
        if self.transposed:
            return 2 * taps * y.shape[channels] * x.nbytes // max(1, x.shape[channels])
        return 2 * taps * x.shape[channels] * y.nbytes // max(1, y.shape[channels])

    def scratch_bytes(self, inputs, outputs) -> int:
        """The padded input, bounded from the output's size (each spatial dim padded to at
        most ``out * stride + dilation * (k - 1)``), and the im2col columns (a transposed
        convolution: every tap's contribution before col2im); depthwise ones hold the
        padded input and its stride phases."""
        x, y = inputs[0], outputs[0]
        if not (isinstance(x, TensorSpec) and isinstance(y, TensorSpec)):
            return 0
        n = self.spatial
        kernel = inputs[1].shape[2:] if len(inputs) > 1 and isinstance(inputs[1], TensorSpec) else self.kernel_size
        item = np.dtype(y.dtype).itemsize
        columns = self.work_bytes(inputs, outputs) // 2
        if self.transposed:
            return columns
        extents = [o * s + d * (k - 1) for o, s, d, k in zip(y.shape[-n:], self.stride, self.dilation, kernel)]
        padded = math.prod(x.shape[:-n]) * math.prod(extents) * item
        return 2 * padded if self._depthwise(inputs) else padded + columns

    def _depthwise(self, inputs) -> bool:
        return not self.transposed and self.groups > 1 and inputs[0].shape[-(self.spatial + 1)] == self.groups

    # -- params ----------------------------------------------------------------------------
    def _read_geometry(self, params: Params) -> None:
        n = self.spatial
        self.stride = params.ints("stride", n, default=(1,) * n)
        self.dilation = params.ints("dilation", n, default=(1,) * n)
        self.groups = params.int("groups", 1)
        if any(s < 1 for s in self.stride):
            raise params.error(f"stride={self.stride} must be positive")
        if any(d < 1 for d in self.dilation):
            raise params.error(f"dilation={self.dilation} must be positive")
        if self.groups < 1:
            raise params.error(f"groups={self.groups} must be positive")
        padding = params.raw("padding", (0,) * n)
        if isinstance(padding, str):
            if self.transposed or padding not in ("same", "valid"):
                raise params.error(f"padding={padding!r} should be a list of integers"
                                   + ("" if self.transposed else ", 'same' or 'valid'"))
            if padding == "same" and any(s != 1 for s in self.stride):
                raise params.error(f"padding='same' needs stride 1, got stride={self.stride}")
            self.padding: tuple[int, ...] | str = padding if padding == "same" else (0,) * n
        else:
            self.padding = params.ints("padding", n, default=(0,) * n)
            if any(p < 0 for p in self.padding):
                raise params.error(f"padding={self.padding} must not be negative")
        self.padding_mode = params.str("padding_mode", "zeros", choices=PADDING_MODES)
        if self.transposed:
            self.output_padding = params.ints("output_padding", n, default=(0,) * n)
            for op, s, d in zip(self.output_padding, self.stride, self.dilation):
                if not 0 <= op < max(s, d):
                    raise params.error(
                        f"output_padding={self.output_padding} must be smaller than stride "
                        f"{self.stride} or dilation {self.dilation}"
                    )
            if self.padding_mode != "zeros":
                raise params.error(
                    f"padding_mode={self.padding_mode!r}: transposed convolutions only pad with zeros"
                )

    def _read_module(self, params: Params, *, transposed: bool) -> tuple[np.ndarray, np.ndarray | None]:
        """An nn.Conv*'s geometry, channels and kernel size; returns its (weight, bias)."""
        n = self.spatial
        self._read_geometry(params)
        self.in_channels = params.int("in_channels")
        self.out_channels = params.int("out_channels")
        self.kernel_size = params.ints("kernel_size", n)
        if self.in_channels % self.groups or self.out_channels % self.groups:
            raise params.error(
                f"in_channels={self.in_channels} and out_channels={self.out_channels} "
                f"must be divisible by groups={self.groups}"
            )
        if any(k < 1 for k in self.kernel_size):
            raise params.error(f"kernel_size={self.kernel_size} must be positive")
        if transposed:
            shape = (self.in_channels, self.out_channels // self.groups) + self.kernel_size
        else:
            shape = (self.out_channels, self.in_channels // self.groups) + self.kernel_size
        weight = params.weight("weight", shape=shape)
        bias = None
        if params.bool("bias", params.has_attr("bias")):
            bias = params.weight("bias", shape=(self.out_channels,))
        return weight, bias

    def _pads(self, kernel: tuple[int, ...]) -> list[tuple[int, int]]:
        """(before, after) padding per spatial dim."""
        if self.padding == "same":
            return [same_padding(k, d) for k, d in zip(kernel, self.dilation)]
        return [(p, p) for p in self.padding]  # type: ignore[union-attr]

    def _geometry(self) -> Geometry:
        """The 2-D geometry (1-D convolutions get a unit first dim)."""
        lift = (1,) * (2 - self.spatial)
        if self.padding == "same":
            padding: Any = "same"
        else:
            pairs = [(p, p) for p in self.padding]  # type: ignore[union-attr]
            padding = tuple([(0, 0)] * (2 - self.spatial) + pairs)
        return Geometry(lift + self.stride, lift + self.dilation, padding, self.groups, self.padding_mode)

    def _lift_weight(self, weight: np.ndarray) -> np.ndarray:
        """A 1-D kernel (O, I, k) as a 2-D one (O, I, 1, k); a view."""
        return weight[:, :, None, :] if self.spatial == 1 else weight

    # -- shapes ----------------------------------------------------------------------------
    def _split_batch(self, shape: Shape) -> tuple[Shape, Shape, int]:
        """``(batch dims, spatial dims, channels)`` of an input; batch is () when unbatched."""
        n = self.spatial
        if len(shape) not in (n + 1, n + 2):
            raise ShapeMismatch(
                f"expected a ({n + 2}-D) batched or ({n + 1}-D) unbatched input, given shape {shape}"
            )
        batch = shape[: len(shape) - n - 1]
        return batch, shape[len(shape) - n:], shape[len(shape) - n - 1]

    def _output_shape(self, shape: Shape, cin: int, cout: int, kernel: tuple[int, ...]) -> Shape:
        batch, size, channels = self._split_batch(shape)
        if channels != cin:
            raise ShapeMismatch(f"expected {cin} input channels, given shape {shape} with {channels}")
        out = []
        if self.transposed:
            for i, n in enumerate(size):
                o = transposed_out_size(n, kernel[i], self.stride[i], self.dilation[i],
                                        self.padding[i], self.output_padding[i])  # type: ignore[index]
                if o < 1:
                    raise ShapeMismatch(
                        f"input {shape} is too small: the output would have size {o} on dim {i}"
                    )
                out.append(o)
            return batch + (cout,) + tuple(out)
        for i, (n, pads) in enumerate(zip(size, self._pads(kernel))):
            limit = {"reflect": n - 1, "circular": n}.get(self.padding_mode)
            if limit is not None and max(pads) > limit:
                raise ShapeMismatch(
                    f"{self.padding_mode} padding {pads} is too large for size {n} of input {shape}"
                )
            o = out_size(n, kernel[i], self.stride[i], self.dilation[i], pads)
            if o < 1:
                raise ShapeMismatch(
                    f"input {shape} is too small for kernel {kernel} with dilation {self.dilation} "
                    f"and padding {self._pads(kernel)}"
                )
            out.append(o)
        return batch + (cout,) + tuple(out)

    # -- running -----------------------------------------------------------------------------
    def _as_4d(self, x: np.ndarray) -> np.ndarray:
        """(N, C, H, W) view of a batched or unbatched 1-D or 2-D array (input or output)."""
        if x.ndim == self.spatial + 1:
            x = x[None]
        return x[:, :, None, :] if self.spatial == 1 else x

    def forward(self, inputs: list[Any]) -> list[Any]:
        """Allocate the output (of the input's dtype) and :meth:`forward_into` it."""
        x = np.asarray(inputs[0])
        out = np.empty(self._output_shape_of(inputs), dtype=x.dtype)
        self.forward_into(inputs, [out])
        return [out]

    def _output_shape_of(self, inputs: list[Any]) -> Shape:
        """The output's shape for these input values."""
        return self.infer_shapes([np.shape(v) for v in inputs])[0]

    def forward_into(self, inputs: list[Any], outputs: list[np.ndarray]) -> None:
        x = self._as_4d(np.asarray(inputs[0]))
        self.compute_into(outputs, self._compute_dtype(inputs, x), lambda out: self._run(inputs, x, out))

    def compute_into(self, outputs: list[np.ndarray], compute: np.dtype, run: Any) -> None:
        """``run(out)`` computes into ``out`` (``outputs[0]`` as 4-D, or 5-D for 3-D
        convolutions) of dtype ``compute``: straight into ``outputs[0]``, or through a
        temporary when ``compute`` (that of input and weight together) is not its dtype,
        e.g. a float16 input. The CPU device's kernels run this way too."""
        out = self._as_4d(outputs[0])
        if compute == out.dtype and out.flags.c_contiguous:
            run(out)
        else:
            result = np.empty(out.shape, dtype=compute)
            run(result)
            np.copyto(out, result, casting="unsafe")

    def _compute_dtype(self, inputs: list[Any], x: np.ndarray) -> np.dtype:
        """The dtype the kernel computes in for these inputs (``x``: input 0 as 4-D)."""
        raise NotImplementedError

    def _run(self, inputs: list[Any], x: np.ndarray, out: np.ndarray) -> None:
        """Compute the convolution of ``x`` (N, C, H, W) into ``out`` (N, Cout, Ho, Wo)."""
        raise NotImplementedError

    def _input_index(self, name: str, position: int) -> int | None:
        """Which input carries argument ``name`` (``$weight=``), else ``position`` if present."""
        if name in self.input_names:
            return self.input_names.index(name)
        return position if position < self.num_inputs and not any(self.input_names) else None


# ----------------------------------------------------------------------------------------
# nn.Conv1d / nn.Conv2d
# ----------------------------------------------------------------------------------------
class _ConvModule(_Conv):
    def build(self, params: Params) -> None:
        weight, bias = self._read_module(params, transposed=False)
        self.geometry = self._geometry()
        self._store(self._lift_weight(weight), bias)
        exported = params.op.inputs[0].shape if params.op.inputs else None
        #: The input shape pnnx exported with, as (N, C, H, W), where known: the CPU device
        #: prepares its kernel for it when the engine loads.
        self.exported_input = None
        if self.spatial == 2 and exported is not None and len(exported) in (3, 4) \
                and all(isinstance(d, int) for d in exported):
            self.exported_input = (1,) * (4 - len(exported)) + tuple(exported)

    def _store(self, weight: np.ndarray, bias: np.ndarray | None) -> None:
        """Keep the weight once, aligned. With a bias, as the first columns of a
        (G, Cout/G, K + 1) matrix whose last column is the bias (``weight_and_bias``), the
        layout in which the CPU's kernels fold the bias into their matrix product, so that
        neither they nor this layer hold the weight twice (ResNet-50's 3x3 weights: 45 MB)."""
        dtype = weight.dtype  # float32, or a float64 model's float64
        self.bias = None if bias is None else aligned(bias, dtype)
        self.weight_and_bias = None
        if bias is None:
            self.weight = aligned(weight, dtype)
            return
        cout, per_group = weight.shape[:2]
        groups = self.geometry.groups
        depth = per_group * math.prod(weight.shape[2:])
        matrix = np.concatenate([weight.reshape(groups, cout // groups, depth),
                                 bias.reshape(groups, cout // groups, 1)], axis=2)
        self.weight_and_bias = aligned(matrix, dtype)
        self.weight = view_of(self.weight_and_bias[:, :, :-1], weight.shape)

    def with_weights(self, weight: np.ndarray, bias: np.ndarray | None) -> _ConvModule:
        """This convolution with another weight (O', I/groups, kh, kw as stored) and bias:
        what a graph rewrite makes when it merges or folds convolutions."""
        changed = copy.copy(self)
        changed.out_channels = weight.shape[0]
        dtype = self.weight.dtype
        changed._store(np.asarray(weight, dtype=dtype), None if bias is None else np.asarray(bias, dtype))
        return changed

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, 1)
        return [self._output_shape(shapes[0], self.in_channels, self.out_channels, self.kernel_size)]

    def _compute_dtype(self, inputs: list[Any], x: np.ndarray) -> np.dtype:
        return np.result_type(x.dtype, self.weight.dtype)

    def _run(self, inputs: list[Any], x: np.ndarray, out: np.ndarray) -> None:
        conv2d(x, self.weight, self.bias, self.geometry, out)


@register("nn.Conv1d")
class Conv1d(_ConvModule):
    """1-D cross-correlation with a stored kernel (O, I/groups, k)."""

    spatial = 1


@register("nn.Conv2d")
class Conv2d(_ConvModule):
    """2-D cross-correlation with a stored kernel (O, I/groups, kh, kw)."""

    spatial = 2


# ----------------------------------------------------------------------------------------
# F.conv1d / F.conv2d
# ----------------------------------------------------------------------------------------
class _ConvFunctional(_Conv):
    def build(self, params: Params) -> None:
        self._read_geometry(params)
        if self.padding_mode != "zeros":
            raise params.error("F.conv* pads with zeros only")
        self._weight_at = self._input_index("weight", 1)
        self._bias_at = self._input_index("bias", 2)
        if self._weight_at is None:
            raise params.error("needs the weight as an input")
        if params.raw("bias", None) is not None:
            raise params.error(f"bias={params.raw('bias')!r}: expected None or a bias input")
        self.geometry = self._geometry()

    def _operands(self, values: list[Any]) -> tuple[Any, Any, Any]:
        bias = values[self._bias_at] if self._bias_at is not None else None
        return values[0], values[self._weight_at], bias  # type: ignore[index]

    def _check_weight(self, x: Shape, w: Shape, b: Shape | None) -> tuple[int, int]:
        """(in_channels, out_channels) the weight implies; ShapeMismatch if it cannot be."""
        n = self.spatial
        if len(w) != n + 2:
            raise ShapeMismatch(f"weight should be {n + 2}-D, given shape {w}")
        if self.transposed:
            cin, cout = w[0], w[1] * self.groups
            if cin % self.groups:
                raise ShapeMismatch(
                    f"weight {w}: {cin} input channels not divisible by groups={self.groups}"
                )
        else:
            cin, cout = w[1] * self.groups, w[0]
            if cout % self.groups:
                raise ShapeMismatch(
                    f"weight {w}: {cout} output channels not divisible by groups={self.groups}"
                )
        if b is not None and tuple(b) != (cout,):
            raise ShapeMismatch(f"bias should have shape ({cout},), given {b}")
        return cin, cout

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, 2, 3)
        x, w, b = self._operands(shapes)
        cin, cout = self._check_weight(x, w, b)
        return [self._output_shape(x, cin, cout, tuple(w[2:]))]

    def _compute_dtype(self, inputs: list[Any], x: np.ndarray) -> np.dtype:
        return np.result_type(x.dtype, np.asarray(inputs[self._weight_at]).dtype)  # type: ignore[index]

    def _run(self, inputs: list[Any], x: np.ndarray, out: np.ndarray) -> None:
        _, w, b = self._operands(inputs)
        weight = self._lift_weight(np.asarray(w))
        bias = None if b is None else np.asarray(b)
        conv2d(x, weight, bias, self.geometry, out)


@register("F.conv1d")
class FConv1d(_ConvFunctional):
    """``F.conv1d(input, weight, bias)`` with the weight as a graph value."""

    spatial = 1


@register("F.conv2d")
class FConv2d(_ConvFunctional):
    """``F.conv2d(input, weight, bias)`` with the weight as a graph value."""

    spatial = 2


# ----------------------------------------------------------------------------------------
# Transposed convolutions
# ----------------------------------------------------------------------------------------
class _ConvTransposeMixin(_Conv):
    transposed = True

    def _run_transposed(self, x4: np.ndarray, kernel: np.ndarray, bias: np.ndarray | None,
                        kernel_size: tuple[int, ...], out_channels: int, out: np.ndarray) -> None:
        lift = (1,) * (2 - self.spatial)
        k = lift + tuple(kernel_size)
        stride, dilation = lift + self.stride, lift + self.dilation
        padding = (0,) * (2 - self.spatial) + self.padding  # type: ignore[operator]
        conv_transpose2d(x4, kernel, bias, k, out_channels, stride, dilation, padding, out)  # type: ignore[arg-type]


class _ConvTransposeModule(_ConvTransposeMixin):
    def build(self, params: Params) -> None:
        weight, bias = self._read_module(params, transposed=True)
        self.kernel = aligned(transposed_kernel(weight, self.groups), weight.dtype)
        self.bias = None if bias is None else aligned(bias, weight.dtype)

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, 1)
        return [self._output_shape(shapes[0], self.in_channels, self.out_channels, self.kernel_size)]

    def _compute_dtype(self, inputs: list[Any], x: np.ndarray) -> np.dtype:
        return np.result_type(x.dtype, self.kernel.dtype)

    def _run(self, inputs: list[Any], x: np.ndarray, out: np.ndarray) -> None:
        self._run_transposed(x, self.kernel, self.bias, self.kernel_size, self.out_channels, out)


@register("nn.ConvTranspose1d")
class ConvTranspose1d(_ConvTransposeModule):
    """1-D transposed convolution with a stored kernel (I, O/groups, k)."""

    spatial = 1


@register("nn.ConvTranspose2d")
class ConvTranspose2d(_ConvTransposeModule):
    """2-D transposed convolution with a stored kernel (I, O/groups, kh, kw)."""

    spatial = 2


class _ConvTransposeFunctional(_ConvTransposeMixin, _ConvFunctional):
    def _run(self, inputs: list[Any], x: np.ndarray, out: np.ndarray) -> None:
        _, w, b = self._operands(inputs)
        w = np.asarray(w)
        kernel = transposed_kernel(w, self.groups)
        bias = None if b is None else np.asarray(b)
        self._run_transposed(x, kernel, bias, w.shape[2:], w.shape[1] * self.groups, out)


@register("F.conv_transpose1d")
class FConvTranspose1d(_ConvTransposeFunctional):
    """``F.conv_transpose1d(input, weight, bias)`` with the weight as a graph value."""

    spatial = 1


@register("F.conv_transpose2d")
class FConvTranspose2d(_ConvTransposeFunctional):
    """``F.conv_transpose2d(input, weight, bias)`` with the weight as a graph value."""

    spatial = 2
