"""Resizing: interpolation (nearest, linear, cubic), padding, pixel (un)shuffle.

::

    Interpolate                 F.interpolate / F.upsample / nn.Upsample / ...
    │                           size or scale_factor over the trailing 1-3 dims
    │   └── UpsamplingBilinear2d    mode bilinear, align_corners=True
    Pad                         F.pad: constant(value) / reflect / replicate / circular
    ├── ConstantPad             nn.ZeroPad2d, nn.ConstantPad1d/2d/3d
    ├── ReflectionPad           nn.ReflectionPad1d/2d
    └── ReplicationPad          nn.ReplicationPad1d/2d/3d
    PixelShuffle, PixelUnshuffle
    AntialiasResize             aten::_upsample_bilinear2d_aa / _bicubic2d_aa (antialias=True)

Interpolation is separable: each resized axis gathers a few source taps per output
position and sums them with weights (:func:`axis_taps`), following PyTorch's CPU kernels
to the float32 rounding of their source coordinates.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from graphexec.layers.aten import NOT_CONSTANT, constant_input
from graphexec.layers._samples import rows_kept
from graphexec.layers.base import Layer, Params, Shape, ShapeMismatch, Spec, TensorSpec
from graphexec.layers.registry import register
from graphexec.layers.shape import planned_ints, runtime_ints

_NEAREST = ("nearest", "nearest-exact")
#: How many trailing dims each mode resizes (None: any of 1, 2, 3).
_MODE_DIMS = {
    "nearest": None, "nearest-exact": None, "linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3,
}
_LINEAR = ("linear", "bilinear", "trilinear")
_CUBIC_A = -0.75


# --------------------------------------------------------------------------------------
# interpolation
# --------------------------------------------------------------------------------------
def _kernel_scale(size: int, out: int, align_corners: bool, scale: float | None,
                  real: type = np.float32) -> np.floating:
    """The source step per output step, as PyTorch computes it (in float32, or float64 for a
    float64 input: its opmath type, ``real``)."""
    if align_corners:
        return real(size - 1) / real(out - 1) if out > 1 else real(0)
    if scale is not None and scale > 0:
        return real(1.0 / scale)
    return real(size) / real(out)


def cubic_weights(t: np.ndarray) -> np.ndarray:
    """(n, 4) Keys cubic-convolution weights (A=-0.75) for fractional offsets ``t``, in
    ``t``'s float dtype."""
    real = t.dtype.type if t.dtype == np.float64 else np.float32
    a = real(_CUBIC_A)

    def near(x):  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    one = real(1)
    return np.stack([far(t + one), near(t), near(one - t), far(2 - t)], axis=1)


@lru_cache(maxsize=512)
def axis_taps(
    mode: str, size: int, out: int, align_corners: bool, scale: float | None, nearest_2d: bool = False,
    double: bool = False,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Source indices ``(out, taps)`` and weights ``(out, taps)`` (None for nearest) that
    resize one axis from ``size`` to ``out``. ``scale`` is the user's scale factor when
    PyTorch passes it to the kernel (not recomputed), else None. The coordinates are
    float32 arithmetic, as PyTorch's for float32 (and float16) inputs; ``double``: float64,
    as for a float64 input.

    ``nearest_2d``: PyTorch's 2-d ``nearest`` kernel (unlike its 1-d and 3-d ones) maps an
    axis that keeps its size to itself and one that doubles to ``dst // 2`` whatever the
    scale factor says (measured on torch 2.14: 4 rows at scale 1.2 stay ``0,1,2,3``).
    """
    real = np.float64 if double else np.float32
    dst = np.arange(out, dtype=real)
    half = real(0.5)
    step = _kernel_scale(size, out, align_corners and mode not in _NEAREST, scale, real)
    if mode == "nearest" and nearest_2d and out in (size, 2 * size):
        index = (np.arange(out) // (out // size))[:, None]
        weights = None
    elif mode in _NEAREST:
        offset = real(0.5 if mode == "nearest-exact" else 0.0)
        index = np.minimum(np.floor((dst + offset) * step).astype(np.int64), size - 1)[:, None]
        weights = None
    elif mode in _LINEAR:
        if size == out:  # PyTorch copies an axis that keeps its size
            index, weights = np.arange(out)[:, None], np.ones((out, 1), real)
        else:
            src = step * dst if align_corners else np.maximum(step * (dst + half) - half, 0)
            low = np.minimum(np.floor(src).astype(np.int64), size - 1)
            frac = np.clip(src - low, 0, 1).astype(real)
            index = np.stack([low, np.minimum(low + 1, size - 1)], axis=1)
            weights = np.stack([real(1) - frac, frac], axis=1)
    else:  # bicubic
        src = step * dst if align_corners else step * (dst + half) - half
        low = np.minimum(np.floor(src).astype(np.int64), size - 1)
        frac = np.clip(src - low, 0, 1).astype(real)
        index = np.clip(low[:, None] + np.arange(-1, 3), 0, size - 1)
        weights = cubic_weights(frac)
    index.setflags(write=False)
    if weights is not None:
        weights = weights.astype(real)
        weights.setflags(write=False)
    return index, weights


def _resize_axis(x: np.ndarray, axis: int, index: np.ndarray, weights: np.ndarray | None) -> np.ndarray:
    """``x`` resized along ``axis`` by gathering ``index`` taps and summing with ``weights``."""
    if weights is None:
        return np.take(x, index[:, 0], axis=axis)
    trailing = (1,) * (x.ndim - axis - 1)
    dtype = x.dtype if x.dtype.kind == "f" else np.dtype(np.float32)
    result = None
    for t in range(index.shape[1]):
        w = weights[:, t].astype(dtype, copy=False).reshape((-1,) + trailing)
        term = np.take(x, index[:, t], axis=axis)
        if term.dtype != dtype:
            term = term.astype(dtype)
        term *= w
        if result is None:
            result = term
        else:
            result += term
    return result


@register(
    "F.interpolate", "F.upsample", "F.upsample_nearest",
    "nn.Upsample", "nn.UpsamplingNearest2d",
)
class Interpolate(Layer):
    """Resize the trailing dims to ``size`` or by ``scale_factor`` (output floor(in*scale)).

    With a scale factor PyTorch maps output to source positions with ``1/scale`` unless
    ``recompute_scale_factor=True``, which uses ``in/out`` (as ``size`` does); nearest takes
    ``floor(dst*scale)``, nearest-exact ``floor((dst+0.5)*scale)``. A dynamic export whose
    size comes from a shape (``size=x.shape[-2:]``, ``size=(h * 2, w * 2)``) gives the size
    as input 1 (``$size``), computed from the shapes at run time.
    """

    default_mode = "nearest"
    default_align_corners = False

    def build(self, params: Params) -> None:
        self.mode = params.str("mode", self.default_mode, choices=tuple(_MODE_DIMS))
        align = params.raw("align_corners", None)
        self.align_corners = self.default_align_corners if align is None else params.bool("align_corners")
        if self.align_corners and self.mode in _NEAREST:
            raise params.error(f"align_corners=True is not allowed with mode={self.mode}")
        if params.raw("antialias", False) is not False:
            raise params.error("antialias=True is not supported")
        size = params.raw("size", None)
        scale = params.raw("scale_factor", None)
        #: Whether the size is input 1 rather than a param.
        self.size_input = size is None and scale is None and self.num_inputs == 2
        if size is None and scale is None and not self.size_input:
            raise params.error("needs size or scale_factor (both are None or missing), or a size input")
        if self.num_inputs != (2 if self.size_input else 1):
            raise params.error(f"takes one input with a size= or scale_factor= param, got {self.num_inputs} inputs")
        self.size: tuple[int, ...] | None = params.ints("size") if size is not None else None
        self.scale_factor: tuple[float, ...] | None = params.floats("scale_factor") if scale is not None and size is None else None
        if self.size is not None and any(s < 1 for s in self.size):
            raise params.error(f"size={self.size} must be positive")
        if self.scale_factor is not None and any(not s > 0 or math.isinf(s) for s in self.scale_factor):
            raise params.error(f"scale_factor={self.scale_factor} must be positive and finite")
        recompute = params.raw("recompute_scale_factor", None)
        self.recompute = recompute is not None and params.bool("recompute_scale_factor")
        #: The size or scale values as written (one value stands for every resized dim).
        self.given: tuple = self.size or self.scale_factor or ()
        need = _MODE_DIMS[self.mode]
        if need is not None and not self.size_input and len(self.given) not in (1, need):
            raise params.error(f"mode={self.mode} resizes {need} dims, got {len(self.given)} sizes/scales")

    def _plan(self, shape: Shape, sizes: tuple[int, ...] | None = None) -> list[tuple[int, int, float | None]]:
        """(input size, output size, kernel scale) for each resized trailing dim; ``sizes``:
        the size input's value, when the size is an input."""
        given = self.given if sizes is None else sizes
        if sizes is not None:
            need = _MODE_DIMS[self.mode]
            if not sizes or (need is not None and len(sizes) not in (1, need)) or any(s < 1 for s in sizes):
                raise ShapeMismatch(f"mode={self.mode} cannot resize to size {list(sizes)}")
        nd = len(given) if len(given) > 1 else (_MODE_DIMS[self.mode] or len(shape) - 2)
        if len(shape) != nd + 2 or nd > 3:
            raise ShapeMismatch(
                f"mode={self.mode} with {len(given)} size/scale value(s) expects a rank-{nd + 2} "
                f"(N,C,*{nd} dims) input, given shape {shape}"
            )
        values = given * nd if len(given) == 1 else given
        plan = []
        for size, value in zip(shape[2:], values):
            if self.size is not None or sizes is not None:
                plan.append((size, int(value), None))
                continue
            out = math.floor(float(size) * value)
            if out < 1:
                raise ShapeMismatch(f"scale_factor {value} turns a dim of {size} into {out}")
            plan.append((size, out, None if self.recompute else float(value)))
        return plan

    def batchwise(self, inputs, outputs) -> bool:
        # the trailing dims of (N, C, *) resized; a size input comes from shapes, not values
        return rows_kept(inputs, outputs) and len(inputs[0].shape) >= 3

    def infer(self, specs: list[Spec]) -> list[Spec]:
        if not self.size_input:
            return super().infer(specs)
        self.expect_inputs(specs, 2)
        data = specs[0]
        if not isinstance(data, TensorSpec):
            raise ShapeMismatch(f"input 0 is a sequence {data}, expected a tensor")
        sizes = planned_ints(specs[1], "the size")
        return [TensorSpec(self._out_shape(data.shape, sizes), data.dtype)]

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        if self.size_input:
            raise ShapeMismatch("the size is an input, not a shape; use infer()")
        self.expect_inputs(shapes, 1)
        return [self._out_shape(shapes[0])]

    def _out_shape(self, shape: Shape, sizes: tuple[int, ...] | None = None) -> Shape:
        return shape[:2] + tuple(out for _, out, _ in self._plan(shape, sizes))

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = y = inputs[0]
        plan = self._plan(x.shape, runtime_ints(inputs[1], "the size") if self.size_input else None)
        nearest_2d = self.mode == "nearest" and len(plan) == 2
        for j in reversed(range(len(plan))):
            size, out, scale = plan[j]
            if size == out and (scale is None or self.align_corners or self.mode in _LINEAR or nearest_2d):
                continue  # the identity (PyTorch copies a linear axis that keeps its size)
            index, weights = axis_taps(self.mode, size, out, self.align_corners, scale, nearest_2d,
                                       double=y.dtype == np.float64)
            y = _resize_axis(y, 2 + j, index, weights)
        return [y.copy() if y is x else y]


@register("nn.UpsamplingBilinear2d")
class UpsamplingBilinear2d(Interpolate):
    """Bilinear with align_corners=True."""

    default_mode = "bilinear"
    default_align_corners = True


# --------------------------------------------------------------------------------------
# padding
# --------------------------------------------------------------------------------------
_NUMPY_PAD_MODES = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}


class _PadBase(Layer):
    """Pads the last dims; ``pads`` come last-dim-first as ``(left, right, top, bottom, ..)``.
    Negative pads crop: after reflect/replicate padding of the whole input, before constant
    and circular padding, as PyTorch does."""

    mode = "constant"
    pad_key = "padding"

    def read_pads(self, params: Params) -> None:
        raw = params.raw(self.pad_key)
        if isinstance(raw, int) and not isinstance(raw, bool) and self.type[-2:] in ("1d", "2d", "3d"):
            pads = (raw,) * (2 * int(self.type[-2]))
        else:
            pads = params.ints(self.pad_key)
        if len(pads) % 2 or not pads:
            raise params.error(f"{self.pad_key}={pads} should hold (before, after) pairs")
        self.pads = pads

    def batchwise(self, inputs, outputs) -> bool:
        pads = getattr(self, "pads", None)
        return pads is not None and rows_kept(inputs, outputs) and len(pads) // 2 < len(inputs[0].shape)

    def _pairs(self, shape: Shape, pads: tuple[int, ...] | None = None) -> list[tuple[int, int, int]]:
        """(axis, before, after) for each padded axis (``pads``: this call's, else the layer's)."""
        pads = self.pads if pads is None else pads
        n = len(pads) // 2
        if n > len(shape) or len(pads) % 2:
            raise ShapeMismatch(
                f"{self.pad_key}={pads} pads {n} dims in (before, after) pairs, the input {shape} has {len(shape)}"
            )
        pairs = []
        for i in range(n):
            axis = len(shape) - 1 - i
            before, after = pads[2 * i], pads[2 * i + 1]
            size = shape[axis]
            kept = size + min(before, 0) + min(after, 0)
            if kept < 0 or kept + max(before, 0) + max(after, 0) < 0:
                raise ShapeMismatch(f"pads ({before},{after}) crop more than dim {axis} of size {size}")
            if self.mode == "reflect" and max(before, after) >= size and max(before, after) > 0:
                raise ShapeMismatch(
                    f"reflect pads ({before},{after}) must be smaller than dim {axis} (size {size})"
                )
            if self.mode == "circular" and max(before, after) > kept:
                raise ShapeMismatch(
                    f"circular pads ({before},{after}) wrap more than once around dim {axis} (size {kept})"
                )
            if self.mode == "replicate" and size == 0 and max(before, after) > 0:
                raise ShapeMismatch(f"cannot replicate-pad the empty dim {axis}")
            pairs.append((axis, before, after))
        return pairs

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, 1)
        return [self._padded(shapes[0])]

    def _padded(self, shape: Shape, pads: tuple[int, ...] | None = None) -> Shape:
        out = list(shape)
        for axis, before, after in self._pairs(shape, pads):
            out[axis] += before + after
        return tuple(out)

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return [self._pad(inputs[0])]

    def _pad(self, x: np.ndarray, pads: tuple[int, ...] | None = None) -> np.ndarray:
        pairs = self._pairs(x.shape, pads)
        crop = [slice(None)] * x.ndim
        widths = [(0, 0)] * x.ndim
        for axis, before, after in pairs:
            crop[axis] = slice(max(-before, 0), x.shape[axis] - max(-after, 0))
            widths[axis] = (max(before, 0), max(after, 0))
        if self.mode in ("reflect", "replicate"):  # as PyTorch: pad the whole input, then crop
            y = np.pad(x, widths, mode=_NUMPY_PAD_MODES[self.mode])
            for axis, before, after in pairs:
                crop[axis] = slice(max(-before, 0), y.shape[axis] - max(-after, 0))
            return y[tuple(crop)]
        x = x[tuple(crop)]
        if self.mode != "constant":
            return np.pad(x, widths, mode=_NUMPY_PAD_MODES[self.mode])
        out = np.full(tuple(n + b + a for n, (b, a) in zip(x.shape, widths)), self.value, dtype=x.dtype)
        out[tuple(slice(b, b + n) for n, (b, _) in zip(x.shape, widths))] = x
        return out


@register("F.pad")
class Pad(_PadBase):
    """F.pad(input, pad, mode, value); a dynamic export may hand the pads over as an input
    computed from sizes (a U-Net padding its upsampled map to the skip's size)."""

    pad_key = "pad"

    def build(self, params: Params) -> None:
        self.pad_input = self.input_names.index("pad") if "pad" in self.input_names else None
        if self.pad_input is None:
            self.read_pads(params)
        self.mode = params.str("mode", "constant", choices=("constant", *_NUMPY_PAD_MODES))
        value = params.raw("value", None)
        self.value = 0.0 if value is None else params.float("value")
        if self.mode != "constant" and self.value != 0:
            raise params.error(f"value={self.value} only applies to mode=constant, not {self.mode}")

    def infer(self, specs: list[Spec]) -> list[Spec]:
        if self.pad_input is None:
            return super().infer(specs)
        x = specs[0]
        if not isinstance(x, TensorSpec):
            raise ShapeMismatch(f"input 0 is a sequence {x}, expected a tensor")
        pads = planned_ints(specs[self.pad_input], "the pads")
        return [TensorSpec(self._padded(x.shape, pads), x.dtype)]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        pads = None if self.pad_input is None else runtime_ints(inputs[self.pad_input], "the pads")
        return [self._pad(inputs[0], pads)]


@register("nn.ZeroPad2d", "nn.ConstantPad1d", "nn.ConstantPad2d", "nn.ConstantPad3d")
class ConstantPad(_PadBase):
    def build(self, params: Params) -> None:
        self.read_pads(params)
        self.value = params.float("value", 0.0)


@register("nn.ReflectionPad1d", "nn.ReflectionPad2d")
class ReflectionPad(_PadBase):
    mode = "reflect"

    def build(self, params: Params) -> None:
        self.read_pads(params)


@register("nn.ReplicationPad1d", "nn.ReplicationPad2d", "nn.ReplicationPad3d")
class ReplicationPad(_PadBase):
    mode = "replicate"

    def build(self, params: Params) -> None:
        self.read_pads(params)


# --------------------------------------------------------------------------------------
# pixel shuffle
# --------------------------------------------------------------------------------------
def _fresh(result: np.ndarray, source: np.ndarray) -> np.ndarray:
    """``result``, copied if it is still a view of the caller's ``source``."""
    return result.copy() if np.shares_memory(result, source) else result


def _factor(params: Params, key: str) -> int:
    factor = params.int(key)
    if factor < 1:
        raise params.error(f"{key}={factor} must be >= 1")
    return factor


@register("nn.PixelShuffle", "F.pixel_shuffle")
class PixelShuffle(Layer):
    """(*, C*r*r, H, W) -> (*, C, H*r, W*r)."""

    def build(self, params: Params) -> None:
        self.r = _factor(params, "upscale_factor")

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, 1)
        shape, r = shapes[0], self.r
        if len(shape) < 3 or shape[-3] % (r * r):
            raise ShapeMismatch(
                f"expects (*, C*{r * r}, H, W) with channels divisible by {r * r}, given shape {shape}"
            )
        return [shape[:-3] + (shape[-3] // (r * r), shape[-2] * r, shape[-1] * r)]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x, r = inputs[0], self.r
        *lead, c, h, w = x.shape
        lead = tuple(lead)
        n = len(lead)
        y = x.reshape(lead + (c // (r * r), r, r, h, w))
        axes = tuple(range(n)) + tuple(n + a for a in (0, 3, 1, 4, 2))
        return [_fresh(y.transpose(axes).reshape(lead + (c // (r * r), h * r, w * r)), x)]


@register("nn.PixelUnshuffle", "F.pixel_unshuffle")
class PixelUnshuffle(Layer):
    """(*, C, H*r, W*r) -> (*, C*r*r, H, W)."""

    def build(self, params: Params) -> None:
        self.r = _factor(params, "downscale_factor")

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, 1)
        shape, r = shapes[0], self.r
        if len(shape) < 3 or shape[-2] % r or shape[-1] % r:
            raise ShapeMismatch(f"expects (*, C, H, W) with H and W divisible by {r}, given shape {shape}")
        return [shape[:-3] + (shape[-3] * r * r, shape[-2] // r, shape[-1] // r)]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x, r = inputs[0], self.r
        *lead, c, h, w = x.shape
        lead = tuple(lead)
        n = len(lead)
        y = x.reshape(lead + (c, h // r, r, w // r, r))
        axes = tuple(range(n)) + tuple(n + a for a in (0, 2, 4, 1, 3))
        return [_fresh(y.transpose(axes).reshape(lead + (c * r * r, h // r, w // r)), x)]


# --------------------------------------------------------------------------------------
# antialiased resizing (F.interpolate(..., antialias=True), as TorchScript leaves it)
# --------------------------------------------------------------------------------------
def _triangle(x: np.ndarray) -> np.ndarray:
    return np.maximum(0.0, 1.0 - np.abs(x))


def _keys_cubic(x: np.ndarray) -> np.ndarray:
    """Keys' cubic with a = -0.5, the antialiased bicubic filter (PIL's)."""
    a, x = -0.5, np.abs(x)
    return np.where(x < 1, ((a + 2) * x - (a + 3)) * x * x + 1,
                    np.where(x < 2, (((x - 5) * x + 8) * x - 4) * a, 0.0))


@lru_cache(maxsize=256)
def antialias_weights(size: int, out: int, scale: float, cubic: bool) -> np.ndarray:
    """(out, size) float64 weights of one axis: output ``i`` averages the inputs under a
    filter centred on ``scale * (i + 0.5)``, widened by ``scale`` when shrinking so that
    every input contributes (what PyTorch's antialiased kernels and PIL compute)."""
    filt, half = (_keys_cubic, 2.0) if cubic else (_triangle, 1.0)
    support = half * scale if scale >= 1.0 else half
    inverse = 1.0 / scale if scale >= 1.0 else 1.0
    weights = np.zeros((out, size))
    for i in range(out):
        center = scale * (i + 0.5)
        low = max(int(center - support + 0.5), 0)
        high = min(int(center + support + 0.5), size)
        w = filt((np.arange(low, high) - center + 0.5) * inverse)
        total = w.sum()
        weights[i, low:high] = w / total if total != 0 else w
    return weights


@register("aten::_upsample_bilinear2d_aa", "aten::_upsample_bicubic2d_aa")
class AntialiasResize(Layer):
    """``F.interpolate(x, size or scale_factor, mode='bilinear'/'bicubic', antialias=True)``
    on (N, C, H, W): per axis, a weight matrix from :func:`antialias_weights` (inputs:
    x, output_size, align_corners and scale_h, scale_w or one scale_factors list). The
    output size may be computed from sizes in the graph (DINOv2's position embeddings
    resized to the image's patches)."""

    def build(self, params: Params) -> None:
        if self.num_inputs not in (4, 5):
            raise params.error(f"takes 4 inputs (x, output_size, align_corners, scale_factors) or 5 "
                               f"(x, output_size, align_corners, scale_h, scale_w), given {self.num_inputs}")
        size = constant_input(params, 1)
        self.align_corners = constant_input(params, 2)
        if self.num_inputs == 5:
            scales = [constant_input(params, 3), constant_input(params, 4)]
        else:  # the list overload: scale_factors as one constant list, or None
            producer = params.op.inputs[3].producer
            listed = producer.params.get("expr", NOT_CONSTANT) if producer is not None and not producer.inputs \
                else NOT_CONSTANT
            if listed is None:
                scales = [None, None]
            elif isinstance(listed, list) and len(listed) == 2 and all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) for v in listed):
                scales = list(listed)
            else:
                scales = [NOT_CONSTANT, NOT_CONSTANT]
        if NOT_CONSTANT in scales or not isinstance(self.align_corners, bool):
            raise params.error("align_corners and the scales must be constants")
        if size is None and None in scales:
            raise params.error("needs an output_size or both scales")
        #: Whether the output size is computed in the graph: input 1's value, not a constant.
        self.size_computed = size is NOT_CONSTANT
        self.size = None if size is None or self.size_computed else tuple(size)
        self.scales = None if None in scales else tuple(float(s) for s in scales)
        self.cubic = "bicubic" in self.type

    def _output(self, shape: Shape, size: tuple[int, ...] | None = None) -> tuple[int, int]:
        size = size if self.size_computed else self.size
        if size is not None:
            if len(size) != 2:
                raise ShapeMismatch(f"the output size should hold 2 sizes, given {size}")
            return size  # type: ignore[return-value]
        return tuple(math.floor(n * s) for n, s in zip(shape[-2:], self.scales))  # type: ignore[return-value]

    def _scale(self, size: int, out: int, given: float | None) -> float:
        """PyTorch's area_pixel_compute_scale: input pixels per output pixel."""
        if self.align_corners:
            return (size - 1) / (out - 1) if out > 1 else 0.0
        return 1.0 / given if given else size / out

    def infer(self, specs: list[Spec]) -> list[Spec]:  # the size arrives as a sequence
        x = specs[0]
        if len(x.shape) != 4 or x.dtype.kind != "f":
            raise ShapeMismatch(f"antialiased resizing takes a floating point (N, C, H, W), given {x}")
        out = self._output(x.shape, planned_ints(specs[1], "the output size") if self.size_computed else None)
        if min(out) < 1:
            raise ShapeMismatch(f"resizing {x.shape} gives an empty output {out}")
        return [TensorSpec(tuple(x.shape[:2]) + tuple(out), x.dtype)]

    def forward(self, inputs: list[object]) -> list[object]:
        x = np.asarray(inputs[0])
        size = runtime_ints(inputs[1], "the output size") if self.size_computed else None
        (h, w), (oh, ow) = x.shape[-2:], self._output(x.shape, size)
        if min(oh, ow) < 1:
            raise ShapeMismatch(f"resizing {x.shape} gives an empty output {(oh, ow)}")
        given = self.scales or (None, None)
        rows = antialias_weights(h, oh, self._scale(h, oh, given[0]), self.cubic)
        cols = antialias_weights(w, ow, self._scale(w, ow, given[1]), self.cubic)
        y = np.matmul(np.matmul(rows, x.astype(np.float64)), cols.T)
        return [y.astype(x.dtype)]


@register("aten::_upsample_nearest_exact2d")
class NearestExactResize(Layer):
    """``F.interpolate(x, size, mode='nearest-exact')`` as TorchScript keeps it (inputs: x,
    output_size, scale_h, scale_w): source pixel ``floor((dst + 0.5) * scale)`` per axis."""

    def build(self, params: Params) -> None:
        if self.num_inputs != 4:
            raise params.error(f"takes 4 inputs (x, output_size, scale_h, scale_w), given {self.num_inputs}")
        size, *scales = (constant_input(params, i) for i in (1, 2, 3))
        if not isinstance(size, tuple) or len(size) != 2 or any(
                s is not None and (isinstance(s, bool) or not isinstance(s, (int, float))) for s in scales):
            raise params.error("output_size (a pair) and the scales (numbers or None) must be constants")
        self.size = size
        self.scales = scales

    def infer(self, specs: list[Spec]) -> list[Spec]:  # the size arrives as a sequence
        x = specs[0]
        if not isinstance(x, TensorSpec) or len(x.shape) != 4 or min(self.size) < 1:
            raise ShapeMismatch(f"nearest-exact resizing takes (N, C, H, W) to a non-empty size, given {x} "
                                f"to {self.size}")
        return [TensorSpec(tuple(x.shape[:2]) + tuple(self.size), x.dtype)]

    def forward(self, inputs: list[object]) -> list[object]:
        x = np.asarray(inputs[0])
        (h, w), (oh, ow) = x.shape[-2:], self.size
        rows, _ = axis_taps("nearest-exact", h, oh, False, None if self.scales[0] is None else float(self.scales[0]))
        cols, _ = axis_taps("nearest-exact", w, ow, False, None if self.scales[1] is None else float(self.scales[1]))
        return [np.asarray(x[:, :, rows[:, 0]][:, :, :, cols[:, 0]], order="C")]
