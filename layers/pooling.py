"""Pooling over the trailing 1, 2 or 3 dims: max, average, power-average (LP) and adaptive.

::

    _Pool                       input (N,C,*spatial) or unbatched (C,*spatial)
    ├── _WindowPool             kernel/stride/padding/dilation/ceil_mode (a _Window)
    │   ├── MaxPool1d/2d/3d     -inf padding; indices on request
    │   ├── AvgPool1d/2d/3d     count_include_pad, divisor_override
    │   └── LPPool1d/2d         (avg of x**p * kernel area) ** (1/p)
    └── _AdaptivePool           output_size bins start=floor(i*in/out), end=ceil((i+1)*in/out)
        ├── AdaptiveAvgPool1d/2d/3d
        └── AdaptiveMaxPool1d/2d/3d

Window pooling's numpy kernels live in :mod:`graphexec.layers._pool_math`: separable, each tap one
shifted slice of many flattened channels. Indices (``return_indices``) need whole windows
and take the slower :func:`~numpy.lib.stride_tricks.sliding_window_view` path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from graphexec.layers._pool_math import (
    FRESH,
    copied_if_view,
    lowest,
    outer_product,
    pad_planes,
    pool_windows,
    reduce_windows,
    window_counts,
)
from graphexec.layers._samples import rows_kept
from graphexec.layers.base import Layer, Params, SequenceSpec, Shape, ShapeMismatch, Spec, TensorSpec
from graphexec.layers.registry import register
from graphexec.layers.shape import planned_ints, runtime_ints

_DIM_NAMES = {1: ("L",), 2: ("H", "W"), 3: ("D", "H", "W")}


# --------------------------------------------------------------------------------------
# geometry
# --------------------------------------------------------------------------------------
def pooled_size(size: int, kernel: int, stride: int, pad: int, dilation: int, ceil_mode: bool) -> int:
    """PyTorch's pooling output length; with ceil_mode the last window must start inside
    the input or the left padding."""
    span = size + 2 * pad - dilation * (kernel - 1) - 1
    out = (span + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def adaptive_bins(size: int, out: int) -> tuple[np.ndarray, np.ndarray]:
    """Start (inclusive) and end (exclusive) of each of PyTorch's ``out`` adaptive bins."""
    i = np.arange(out, dtype=np.int64)
    return (i * size) // out, ((i + 1) * size + out - 1) // out


def _optional_ints(params: Params, key: str, n: int) -> tuple[int, ...] | None:
    """``key`` as ``n`` ints, or None where pnnx wrote ``None``, ``()`` or nothing."""
    value = params.raw(key, None)
    if value is None or value == []:
        return None
    return params.ints(key, n)


@dataclass(frozen=True)
class _Window:
    """The sliding-window geometry shared by max, average and LP pooling."""

    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    ceil_mode: bool

    @staticmethod
    def read(params: Params, n: int, *, dilated: bool) -> _Window:
        kernel = params.ints("kernel_size", n)
        stride = _optional_ints(params, "stride", n) or kernel
        padding = params.ints("padding", n, (0,) * n)
        dilation = params.ints("dilation", n, (1,) * n) if dilated else (1,) * n
        try:
            return _Window.checked(kernel, stride, padding, dilation, params.bool("ceil_mode", False))
        except ValueError as exc:
            raise params.error(str(exc)) from None

    @staticmethod
    def checked(kernel: tuple[int, ...], stride: tuple[int, ...], padding: tuple[int, ...],
                dilation: tuple[int, ...], ceil_mode: bool) -> _Window:
        """The window, or ValueError naming the first value PyTorch would refuse."""
        for name, values, low in (("kernel_size", kernel, 1), ("stride", stride, 1),
                                  ("padding", padding, 0), ("dilation", dilation, 1)):
            if any(v < low for v in values):
                raise ValueError(f"{name}={values} must be >= {low}")
        for k, p, d in zip(kernel, padding, dilation):
            if p > (d * (k - 1) + 1) // 2:
                raise ValueError(
                    f"padding={padding} must be at most half the (dilated) kernel {kernel}"
                    + (f" with dilation {dilation}" if any(v != 1 for v in dilation) else "")
                )
        return _Window(kernel, stride, padding, dilation, ceil_mode)

    def out_sizes(self, sizes: Shape) -> tuple[int, ...]:
        """Output spatial sizes; ShapeMismatch when a window cannot fit."""
        outs = []
        names = _DIM_NAMES[len(sizes)]
        geometry = zip(names, sizes, self.kernel, self.stride, self.padding, self.dilation)
        for name, size, k, s, p, d in geometry:
            out = pooled_size(size, k, s, p, d, self.ceil_mode)
            if out < 1:
                span = d * (k - 1) + 1
                raise ShapeMismatch(
                    f"kernel {k}" + (f" (dilated to {span})" if d > 1 else "")
                    + f" is larger than the padded input along {name}: {size} + 2*{p} = {size + 2 * p}"
                )
            outs.append(out)
        return tuple(outs)

    def pads_after(self, sizes: Shape, outs: tuple[int, ...]) -> tuple[int, ...]:
        """Right padding so every window (ceil_mode's last one included) lies in the array."""
        return tuple(
            max(p, (o - 1) * s + d * (k - 1) + 1 - size - p)
            for size, o, k, s, p, d in zip(sizes, outs, self.kernel, self.stride, self.padding, self.dilation)
        )


# --------------------------------------------------------------------------------------
# layers
# --------------------------------------------------------------------------------------
class _Pool(Layer):
    """Pools the trailing ``spatial`` dims of a batched or unbatched input."""

    spatial = 2

    def batchwise(self, inputs, outputs) -> bool:
        return rows_kept(inputs, outputs, self.spatial + 2)

    def check_rank(self, shape: Shape) -> None:
        nd = self.spatial
        if len(shape) not in (nd + 1, nd + 2):
            dims = ",".join(_DIM_NAMES[nd])
            raise ShapeMismatch(f"expects an (N,C,{dims}) or (C,{dims}) input, given shape {shape}")


class _IndexedMax(_Pool):
    """A max pool that can also give the flat ``h*W + w`` input position of each max
    (int64), as two outputs or, where pnnx keeps ``nn.AdaptiveMaxPool*``'s tuple, as one
    ``(values, indices)`` tuple."""

    def read_return_indices(self, params: Params) -> None:
        self.return_indices = params.bool("return_indices", False)
        expected = (1, 2) if self.return_indices else (1,)
        if self.num_outputs not in expected:
            raise params.error(
                f"return_indices={self.return_indices} but the graph gives it {self.num_outputs} outputs"
            )
        self.as_tuple = self.return_indices and self.num_outputs == 1

    def infer(self, specs: list[Spec]) -> list[Spec]:
        produced = super().infer(specs)
        if not self.return_indices:
            return produced
        pair = (produced[0], TensorSpec(produced[0].shape, np.int64))  # type: ignore[union-attr]
        return [SequenceSpec(pair)] if self.as_tuple else list(pair)

    def pack(self, values: np.ndarray, indices: np.ndarray) -> list:
        return [(values, indices)] if self.as_tuple else [values, indices]


class _WindowPool(_Pool):
    dilated = False

    def build(self, params: Params) -> None:
        self.window = _Window.read(params, self.spatial, dilated=self.dilated)

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, 1)
        shape = shapes[0]
        self.check_rank(shape)
        out = shape[: -self.spatial] + self.window.out_sizes(shape[-self.spatial:])
        return [out]

    def scratch_bytes(self, inputs: list[Spec], outputs: list[Spec]) -> int:
        """The input padded on every side (as a whole, or block by block beside the two
        passes of a separable pool: three blocks at most that size)."""
        x, y = inputs[0], outputs[0]
        if not (isinstance(x, TensorSpec) and isinstance(y, TensorSpec)):
            return 0
        n = self.spatial
        sizes, outs = x.shape[-n:], y.shape[-n:]
        before = self.window.padding
        after = self.window.pads_after(sizes, outs)
        extents = [size + b + a for size, b, a in zip(sizes, before, after)]
        return 3 * math.prod(x.shape[:-n]) * math.prod(extents) * np.dtype(x.dtype).itemsize


class _MaxPool(_IndexedMax, _WindowPool):
    """Max over each window; padding never wins (it is -inf)."""

    dilated = True
    fresh_outputs = True
    writes_into = True

    def build(self, params: Params) -> None:
        super().build(params)
        self.read_return_indices(params)

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = inputs[0]
        nd, w = self.spatial, self.window
        if not self.return_indices:
            return [max_pool(x, w, nd)]
        sizes = x.shape[-nd:]
        outs = w.out_sizes(sizes)
        fill = lowest(x.dtype)
        xp = pad_planes(x, nd, w.padding, w.pads_after(sizes, outs), fill)
        return self.pack(*self._with_indices(xp, sizes, outs, fill))

    def forward_into(self, inputs: list[Any], outputs: list[np.ndarray]) -> None:
        x = inputs[0]
        if (self.return_indices or x.dtype.kind != "f" or not x.size or outputs[0].dtype != x.dtype
                or self.spatial > 2):
            super().forward_into(inputs, outputs)
            return
        sizes = x.shape[-self.spatial:]
        pool_windows(x, self.window, self.window.out_sizes(sizes), np.maximum, lowest(x.dtype), out=outputs[0])

    def _with_indices(self, xp, sizes, outs, fill) -> tuple[np.ndarray, np.ndarray]:
        nd, w = self.spatial, self.window
        spans = tuple(d * (k - 1) + 1 for k, d in zip(w.kernel, w.dilation))
        view = sliding_window_view(xp, spans, axis=tuple(range(xp.ndim - nd, xp.ndim)))
        view = view[(Ellipsis,)
                    + tuple(slice(0, s * (o - 1) + 1, s) for s, o in zip(w.stride, outs))
                    + tuple(slice(None, None, d) for d in w.dilation)]
        windows = view.reshape(xp.shape[:-nd] + outs + (math.prod(w.kernel),))
        tap = windows.argmax(axis=-1)
        values = np.take_along_axis(windows, tap[..., None], axis=-1)[..., 0]
        tap_pos = np.unravel_index(tap, w.kernel)
        flat = np.zeros(tap.shape, dtype=np.int64)
        first = np.zeros(outs, dtype=np.int64)
        for j, (size, o, s, p, d) in enumerate(zip(sizes, outs, w.stride, w.padding, w.dilation)):
            start = (np.arange(o, dtype=np.int64) * s - p).reshape((o,) + (1,) * (nd - 1 - j))
            flat = flat * size + start + tap_pos[j] * d
            # PyTorch's index where nothing beats -inf: the window's first real position.
            first = first * size + start + (np.maximum(-start, 0) + d - 1) // d * d
        indices = np.where(values == fill, first, flat)
        return values, indices


def max_pool(x: np.ndarray, window: _Window, spatial: int) -> np.ndarray:
    """The max pool of ``x`` (no indices); padding never wins."""
    sizes = x.shape[-spatial:]
    outs = window.out_sizes(sizes)
    fill = lowest(x.dtype)
    if x.dtype.kind == "f" and x.size and spatial <= 2:
        return pool_windows(x, window, outs, np.maximum, fill)
    xp = pad_planes(x, spatial, window.padding, window.pads_after(sizes, outs), fill)
    return copied_if_view(reduce_windows(xp, window, outs, np.maximum), x)


@register("nn.MaxPool1d", "F.max_pool1d")
class MaxPool1d(_MaxPool):
    spatial = 1


@register("nn.MaxPool2d", "F.max_pool2d")
class MaxPool2d(_MaxPool):
    spatial = 2


@register("nn.MaxPool3d", "F.max_pool3d")
class MaxPool3d(_MaxPool):
    spatial = 3


def avg_pool(
    x: np.ndarray, window: _Window, spatial: int, include_pad: bool, divisor: int | None,
    out: np.ndarray | None = None, memory: Any = FRESH,
) -> np.ndarray:
    """The average pool of ``x`` (into ``out`` when given); ``memory`` lends the working
    buffers (see :class:`~graphexec.layers._pool_math.FreshMemory`)."""
    sizes = x.shape[-spatial:]
    outs = window.out_sizes(sizes)
    if divisor is None:
        counts = outer_product([
            window_counts(size, o, k, s, p, include_pad)
            for size, o, k, s, p in zip(sizes, outs, window.kernel, window.stride, window.padding)
        ])
    if x.dtype.kind == "f" and x.size and spatial <= 2:  # the flat-slice path pools 1-D and 2-D
        if divisor is not None:
            by: float | np.ndarray = x.dtype.type(divisor)
        elif counts.min() == counts.max():  # every window is whole: one scalar divisor
            by = x.dtype.type(counts.flat[0])
        else:
            by = counts.astype(x.dtype)
        return pool_windows(x, window, outs, np.add, 0, by, out, memory)
    xp = pad_planes(x, spatial, window.padding, window.pads_after(sizes, outs), 0)
    sums = copied_if_view(reduce_windows(xp, window, outs, np.add), x)
    result = np.divide(sums, divisor if divisor is not None else counts.astype(sums.dtype), out=sums)
    if out is not None:
        np.copyto(out, result)
    return result


class _AvgPool(_WindowPool):
    """Mean of each window; ``count_include_pad`` and ``divisor_override`` pick the divisor
    the way PyTorch does (a window cut by ceil_mode counts only its input+padding part)."""

    fresh_outputs = True
    writes_into = True

    def build(self, params: Params) -> None:
        super().build(params)
        self.count_include_pad = params.bool("count_include_pad", True)
        divisor = params.raw("divisor_override", None)
        self.divisor = None if divisor is None else params.int("divisor_override")
        if self.divisor is not None and self.divisor == 0:
            raise params.error("divisor_override must not be 0")

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return [avg_pool(inputs[0], self.window, self.spatial, self.count_include_pad, self.divisor)]

    def forward_into(self, inputs: list[Any], outputs: list[np.ndarray]) -> None:
        if inputs[0].dtype != outputs[0].dtype:
            super().forward_into(inputs, outputs)
            return
        avg_pool(inputs[0], self.window, self.spatial, self.count_include_pad, self.divisor, outputs[0])


@register("nn.AvgPool1d", "F.avg_pool1d")
class AvgPool1d(_AvgPool):
    spatial = 1


@register("nn.AvgPool2d", "F.avg_pool2d")
class AvgPool2d(_AvgPool):
    spatial = 2


@register("nn.AvgPool3d", "F.avg_pool3d")
class AvgPool3d(_AvgPool):
    spatial = 3


class _LPPool(_WindowPool):
    """Power-average pooling: ``(sum over the window of x**p) ** (1/p)`` (no padding; a
    window cut by ceil_mode is averaged over its part, then scaled by the full kernel area,
    as PyTorch does). ``norm_type=inf`` is a max pool of ``|x|``."""

    def build(self, params: Params) -> None:
        super().build(params)
        self.norm = params.float("norm_type")
        if self.norm == 0 or math.isnan(self.norm):
            raise params.error(f"norm_type={self.norm} must be a non-zero number")
        if any(self.window.padding):
            raise params.error(f"takes no padding, got padding={self.window.padding}")

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x, w, nd = inputs[0], self.window, self.spatial
        if math.isinf(self.norm):
            sign = 1 if self.norm > 0 else -1
            outs = w.out_sizes(x.shape[-nd:])
            xp = pad_planes(sign * np.abs(x), nd, (0,) * nd, w.pads_after(x.shape[-nd:], outs), lowest(x.dtype))
            return [sign * reduce_windows(xp, w, outs, np.maximum)]
        with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN as PyTorch gives them
            mean = avg_pool(np.power(x, self.norm), w, nd, True, None)
            mean *= math.prod(w.kernel)
            return [np.power(mean, 1.0 / self.norm, out=mean)]


@register("nn.LPPool1d", "F.lp_pool1d")
class LPPool1d(_LPPool):
    spatial = 1


@register("nn.LPPool2d", "F.lp_pool2d")
class LPPool2d(_LPPool):
    spatial = 2


# --------------------------------------------------------------------------------------
# adaptive pooling
# --------------------------------------------------------------------------------------
def _read_output_size(params: Params, n: int) -> tuple[int | None, ...]:
    """``output_size`` with ``None`` (pnnx writes 0) meaning "keep that dim"."""
    raw = params.raw("output_size")
    if isinstance(raw, str):  # "(None,3)": the reader leaves lists holding None as text
        items = [t.strip() for t in raw.strip("()[]").split(",") if t.strip()]
        try:
            raw = [None if t == "None" else int(t) for t in items]
        except ValueError:
            raise params.error(f"param output_size={raw!r} should be a list of sizes") from None
    elif isinstance(raw, int) and not isinstance(raw, bool):
        raw = [raw]
    def is_size(v: object) -> bool:
        return v is None or (isinstance(v, int) and not isinstance(v, bool))

    if not isinstance(raw, list) or not all(is_size(v) for v in raw):
        raise params.error(f"param output_size={raw!r} should be a list of sizes")
    if len(raw) == 1:
        raw = raw * n
    if len(raw) != n:
        raise params.error(f"param output_size={raw!r} should have {n} values")
    if any(v is not None and v < 0 for v in raw):
        raise params.error(f"param output_size={raw!r} must not be negative")
    return tuple(None if not v else v for v in raw)


class _AdaptivePool(_Pool):
    """``output_size`` is a param, or an input where a dynamic export computes it from the
    input's sizes (``F.adaptive_avg_pool2d(x, (x.shape[2] // 2, ...))``); shape inference
    then reads it from the sizes it knows."""

    def build(self, params: Params) -> None:
        self.size_input = params.input_for("output_size")
        self.output_size = None if self.size_input is not None else _read_output_size(params, self.spatial)

    def _given_size(self, values: tuple[int, ...]) -> tuple[int, ...]:
        """A runtime ``output_size``: one size for every pooled dim, or one each."""
        n = self.spatial
        if len(values) == 1:
            values = values * n
        if len(values) != n or any(v < 1 for v in values):
            raise ShapeMismatch(f"output_size {values} should be {n} positive sizes")
        return values

    def out_sizes(self, sizes: Shape, given: tuple[int, ...] | None = None) -> tuple[int, ...]:
        wanted = self.output_size if given is None else given
        outs = tuple(size if o is None else o for size, o in zip(sizes, wanted))  # type: ignore[arg-type]
        for name, size in zip(_DIM_NAMES[self.spatial], sizes):
            if size < 1:
                raise ShapeMismatch(f"cannot pool an empty input: {name}={size}")
        return outs

    def runtime_size(self, inputs: list[Any]) -> tuple[int, ...] | None:
        """The output size a run was handed, or None where it is a param."""
        if self.size_input is None:
            return None
        return self._given_size(runtime_ints(inputs[self.size_input], "output_size"))

    def infer(self, specs: list[Spec]) -> list[Spec]:
        if self.size_input is None:
            return super().infer(specs)
        self.expect_inputs(specs, self.num_inputs)
        data = specs[0]
        if not isinstance(data, TensorSpec):
            raise ShapeMismatch(f"input 0 is a sequence {data}, expected a tensor")
        known = planned_ints(specs[self.size_input], "the output size")
        self.check_rank(data.shape)
        pooled = self.out_sizes(data.shape[-self.spatial:], self._given_size(known))
        return [TensorSpec(data.shape[: -self.spatial] + pooled, data.dtype)]

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        if self.size_input is not None:
            raise ShapeMismatch("the output size is an input, not a shape; use infer()")
        self.expect_inputs(shapes, 1)
        shape = shapes[0]
        self.check_rank(shape)
        return [shape[: -self.spatial] + self.out_sizes(shape[-self.spatial:])]


class _AdaptiveAvgPool(_AdaptivePool):
    """Mean over PyTorch's adaptive bins. Each axis is one matmul with a bin-averaging
    matrix (BLAS beats ``np.mean`` several times over on short rows); ``1x1`` is one
    matrix-vector product and ``out == in`` leaves the axis alone."""

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = inputs[0]
        nd = self.spatial
        sizes = x.shape[-nd:]
        outs = self.out_sizes(sizes, self.runtime_size(inputs))
        dtype = x.dtype if x.dtype.kind == "f" else np.dtype(np.float32)
        if all(o == 1 for o in outs):  # global average pooling: one matrix-vector product
            lead, n = x.shape[:-nd], math.prod(sizes)
            mean = np.matmul(x.reshape(lead + (n,)), np.full(n, 1 / n, dtype=dtype))
            return [mean.reshape(lead + (1,) * nd)]
        y = x
        for j in reversed(range(nd)):
            size, out = sizes[j], outs[j]
            if size == out:
                continue
            last = j == nd - 1
            start, end = adaptive_bins(size, out)
            cols = np.arange(size)
            inside = (cols >= start[:, None]) & (cols < end[:, None])
            weights = (inside / (end - start)[:, None]).astype(dtype)  # (out, in)
            if last:
                y = np.matmul(y, weights.T)
            elif j == nd - 2:
                y = np.matmul(weights, y)
            else:  # depth: contract that axis and put the bins back in its place
                axis = y.ndim - nd + j
                y = np.moveaxis(np.tensordot(weights, y, axes=([1], [axis])), 0, axis)
        return [copied_if_view(y, x)]


@register("nn.AdaptiveAvgPool1d", "F.adaptive_avg_pool1d")
class AdaptiveAvgPool1d(_AdaptiveAvgPool):
    spatial = 1


@register("nn.AdaptiveAvgPool2d", "F.adaptive_avg_pool2d")
class AdaptiveAvgPool2d(_AdaptiveAvgPool):
    spatial = 2


@register("nn.AdaptiveAvgPool3d", "F.adaptive_avg_pool3d")
class AdaptiveAvgPool3d(_AdaptiveAvgPool):
    spatial = 3


def _bin_taps(size: int, out: int) -> np.ndarray:
    """(out, widest bin) input positions of each bin; short bins repeat their last one."""
    start, end = adaptive_bins(size, out)
    width = int((end - start).max())
    return np.minimum(start[:, None] + np.arange(width), end[:, None] - 1)


class _AdaptiveMaxPool(_IndexedMax, _AdaptivePool):
    """Max over PyTorch's adaptive bins (pnnx's ``F.adaptive_max_pool*`` always asks for
    the indices too)."""

    def build(self, params: Params) -> None:
        super().build(params)
        self.read_return_indices(params)

    def forward(self, inputs: list[np.ndarray]) -> list:
        x = inputs[0]
        nd = self.spatial
        sizes = x.shape[-nd:]
        outs = self.out_sizes(sizes, self.runtime_size(inputs))
        taps = [_bin_taps(size, out) for size, out in zip(sizes, outs)]
        if not self.return_indices:
            y = x
            for j in reversed(range(nd)):
                axis = x.ndim - nd + j
                y = np.take(y, taps[j], axis=axis).max(axis=axis + 1)
            return [y]
        # Whole windows: (..., o1, .., ond, t1, .., tnd) by broadcast fancy indexing.
        index = []
        for j, t in enumerate(taps):
            shape = [1] * (2 * nd)
            shape[j], shape[nd + j] = t.shape
            index.append(t.reshape(shape))
        windows = x[(Ellipsis, *index)]
        windows = windows.reshape(windows.shape[: x.ndim] + (-1,))
        tap = windows.argmax(axis=-1)
        values = np.take_along_axis(windows, tap[..., None], axis=-1)[..., 0]
        flat = np.zeros(tap.shape, dtype=np.int64)
        for j, pos in enumerate(np.unravel_index(tap, tuple(t.shape[1] for t in taps))):
            rows = taps[j][np.arange(outs[j]).reshape((-1,) + (1,) * (nd - 1 - j)), pos]
            flat = flat * sizes[j] + rows
        return self.pack(values, flat)


@register("nn.AdaptiveMaxPool1d", "F.adaptive_max_pool1d")
class AdaptiveMaxPool1d(_AdaptiveMaxPool):
    spatial = 1


@register("nn.AdaptiveMaxPool2d", "F.adaptive_max_pool2d")
class AdaptiveMaxPool2d(_AdaptiveMaxPool):
    spatial = 2


@register("nn.AdaptiveMaxPool3d", "F.adaptive_max_pool3d")
class AdaptiveMaxPool3d(_AdaptiveMaxPool):
    spatial = 3
