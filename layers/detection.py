"""torchvision's region and box operators, as detection and segmentation models use them.

::

    RoIAlign     torchvision.ops.RoIAlign, torchvision::roi_align       bilinear samples averaged per bin
    RoIPool      torchvision::roi_pool       the max of each bin (and where it was, int32)
    PSRoIAlign   torchvision::ps_roi_align   position-sensitive RoIAlign (and the channel read, int32)
    PSRoIPool    torchvision::ps_roi_pool    position-sensitive average pooling (and the channel read)
    NMS          torchvision::nms            the boxes non-maximum suppression keeps (a size known at run time)

pnnx keeps ``torchvision.ops.RoIAlign`` as a module and writes the others, and the
functional forms, as ``pnnx.custom_op.torchvision.<name>`` with the op's positional
arguments as ``arg_<k>`` (inputs ``$arg_0``, ``$arg_1``; the numbers as params).
``batched_nms`` has no operator of its own: it offsets each class's boxes apart and calls
``nms`` (exported directly, its empty-input test becomes a ``prim::If`` whose branches pnnx
drops).

The boxes are ``(K, 5)`` rows ``(batch index, x1, y1, x2, y2)`` in input coordinates,
scaled by ``spatial_scale``. Every coordinate is computed in the input's dtype, operation
by operation in torchvision's CPU kernels' order, so that which pixels a sample reads and
which box survives are the same as there; only the order of the sums differs.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from graphexec.layers.base import Layer, Params, ShapeMismatch, Spec, TensorSpec
from graphexec.layers.registry import register
from graphexec.layers.specs import DynamicSpec

_INT32 = np.dtype(np.int32)
_FLT_MAX = float(np.finfo(np.float32).max)


class _RoIOp(Layer):
    """What the region ops share: a (N, C, H, W) input, (K, 5) boxes, and an output per box
    of ``pooled`` bins, read from params named either as the module's or ``arg_<k>``."""

    #: Whether the output has a second tensor (the max's position, the channel read), int32.
    second_output = False
    #: Whether each output channel reads its own input channel per bin (position-sensitive).
    position_sensitive = False

    def read_boxes_op(self, params: Params, names: tuple[str, ...]) -> dict[str, Any]:
        """The custom op's ``arg_2..`` params under ``names``, and its two inputs."""
        self.x_at, self.rois_at = self.bind_inputs(params, ["arg_0", "arg_1"])
        return {name: params.raw(f"arg_{k + 2}") for k, name in enumerate(names)}

    def check(self, params: Params, scale: Any, pooled: tuple[Any, Any]) -> None:
        self.spatial_scale = float(scale)
        if any(isinstance(p, bool) or not isinstance(p, int) or p < 1 for p in pooled):
            raise params.error(f"the output size {pooled} must be positive integers")
        self.pooled = (int(pooled[0]), int(pooled[1]))
        outputs = (1, 2) if self.second_output else (1,)
        if self.num_outputs not in outputs:
            raise params.error(f"gives {' or '.join(map(str, outputs))} outputs, the graph has {self.num_outputs}")

    def infer(self, specs: list[Spec]) -> list[Spec]:
        self.expect_inputs(specs, 2)
        x, rois = specs[self.x_at], specs[self.rois_at]
        if not isinstance(x, TensorSpec) or not isinstance(rois, TensorSpec):
            raise ShapeMismatch("takes two tensors: the feature map and the boxes")
        if len(x.shape) != 4 or x.dtype.kind != "f":
            raise ShapeMismatch(f"the input must be a (N, C, H, W) float tensor, given {x}")
        if len(rois.shape) != 2 or rois.shape[1] != 5:
            raise ShapeMismatch(f"the boxes must be (K, 5): batch index, x1, y1, x2, y2; given {rois.shape}")
        if rois.dtype != x.dtype:
            raise ShapeMismatch(f"the boxes must have the input's dtype {x.dtype}, given {rois.dtype}")
        channels = x.shape[1]
        ph, pw = self.pooled
        if self.position_sensitive:
            if channels % (ph * pw):
                raise ShapeMismatch(f"{channels} input channels are not a multiple of the {ph} x {pw} bins")
            channels //= ph * pw
        shape = (rois.shape[0], channels, ph, pw)
        produced: list[Spec] = [TensorSpec(shape, x.dtype)]
        return produced + [TensorSpec(shape, _INT32)] * (self.num_outputs - 1)

    def boxes(self, inputs: list[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The input, the boxes scaled in its dtype (K, 4), and each box's batch index."""
        x, rois = np.asarray(inputs[self.x_at]), np.asarray(inputs[self.rois_at])
        batch = rois[:, 0].astype(np.int64)  # C++'s (int): toward zero
        if batch.size and (batch.min() < 0 or batch.max() >= x.shape[0]):
            bad = int(batch.min()) if batch.min() < 0 else int(batch.max())
            raise IndexError(f"a box's batch index {bad} is out of range for a batch of {x.shape[0]}")
        return x, rois[:, 1:] * x.dtype.type(self.spatial_scale), batch


def _grid(size: np.floating, pooled: int, sampling_ratio: int) -> int:
    """Samples per bin along one side: the ratio, or ceil(size / pooled) in the box's dtype
    (none for a box with a NaN or infinite side, whose count C++ leaves undefined)."""
    if sampling_ratio > 0:
        return sampling_ratio
    per_bin = size / size.dtype.type(pooled)
    return int(math.ceil(per_bin)) if math.isfinite(per_bin) else 0


def _sample_points(start: np.floating, bin_size: np.floating, pooled: int, grid: int) -> np.ndarray:
    """(pooled, grid) coordinates of the samples: start + p * bin + (i + .5) * bin / grid."""
    t = start.dtype.type
    p = np.arange(pooled).astype(start.dtype)[:, None]
    i = (np.arange(grid) + np.float32(0.5)).astype(start.dtype)[None, :]
    return (start + p * bin_size) + i * bin_size / t(grid)


def _corners(coord: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """RoIAlign's bilinear taps along one axis: inside (the sample is read at all), low and
    high indices, and the weight of the high one (``l``; the low one's is ``1 - l``)."""
    inside = (coord >= -1.0) & (coord <= size)
    c = np.where(coord <= 0, coord.dtype.type(0), coord)
    low = np.where(inside, c, 0).astype(np.int64)
    last = low >= size - 1
    low = np.where(last, size - 1, low)
    high = np.where(last, size - 1, low + 1)
    c = np.where(last, low.astype(coord.dtype), c)
    weight = c - low.astype(coord.dtype)
    return inside, low, high, weight


class _Aligned(_RoIOp):
    """RoIAlign's sampling, shared by the position-sensitive form."""

    aligned = True

    def sample_box(self, plane: Any, box: np.ndarray, height: int, width: int) -> np.ndarray:
        """The (..., ph, pw) averages of one box; ``plane(ys, xs)`` reads the input at
        integer index arrays broadcast as (ph, pw)."""
        t = box.dtype.type
        offset = t(0.5) if self.aligned else t(0)
        x1, y1, x2, y2 = (v - offset for v in box)
        roi_w, roi_h = x2 - x1, y2 - y1
        if not self.aligned:  # malformed boxes become 1 x 1
            roi_w, roi_h = max(roi_w, t(1)), max(roi_h, t(1))
        ph, pw = self.pooled
        bin_h, bin_w = roi_h / t(ph), roi_w / t(pw)
        grid_h, grid_w = _grid(roi_h, ph, self.sampling_ratio), _grid(roi_w, pw, self.sampling_ratio)
        ys, xs = _sample_points(y1, bin_h, ph, max(grid_h, 0)), _sample_points(x1, bin_w, pw, max(grid_w, 0))
        in_y, y_lo, y_hi, ly = _corners(ys, height)
        in_x, x_lo, x_hi, lx = _corners(xs, width)
        hy, hx = t(1) - ly, t(1) - lx
        total = None
        for iy in range(max(grid_h, 0)):
            for ix in range(max(grid_w, 0)):
                value = self.bilinear(plane, in_y[:, iy, None] & in_x[None, :, ix],
                                      (y_lo[:, iy, None], y_hi[:, iy, None], hy[:, iy, None], ly[:, iy, None]),
                                      (x_lo[None, :, ix], x_hi[None, :, ix], hx[None, :, ix], lx[None, :, ix]))
                total = value if total is None else total + value
        if total is None:  # no samples: nothing read
            total = np.zeros(plane(np.zeros((ph, 1), np.int64), np.zeros((1, pw), np.int64)).shape, box.dtype)
        with np.errstate(invalid="ignore", divide="ignore"):
            return total / self.count(grid_h, grid_w, t)

    def bilinear(self, plane: Any, inside: np.ndarray, along_y: tuple, along_x: tuple) -> np.ndarray:
        """w1 v1 + w2 v2 + w3 v3 + w4 v4 at each (ph, pw) sample; outside the map, RoIAlign
        reads pixel (0, 0) with weight 0 (so a NaN there spreads, as in torchvision)."""
        y_lo, y_hi, hy, ly = along_y
        x_lo, x_hi, hx, lx = along_x
        y_lo, y_hi = np.where(inside, y_lo, 0), np.where(inside, y_hi, 0)
        x_lo, x_hi = np.where(inside, x_lo, 0), np.where(inside, x_hi, 0)
        zero = hy.dtype.type(0)
        w1, w2 = np.where(inside, hy * hx, zero), np.where(inside, hy * lx, zero)
        w3, w4 = np.where(inside, ly * hx, zero), np.where(inside, ly * lx, zero)
        return w1 * plane(y_lo, x_lo) + w2 * plane(y_lo, x_hi) + w3 * plane(y_hi, x_lo) + w4 * plane(y_hi, x_hi)

    def count(self, grid_h: int, grid_w: int, t: type) -> np.floating:
        return t(max(grid_h * grid_w, 1))


@register("torchvision.ops.RoIAlign", "pnnx.custom_op.torchvision.roi_align")
class RoIAlign(_Aligned):
    """``roi_align(input, boxes, output_size, spatial_scale, sampling_ratio, aligned)``:
    per box and bin, the average of ``sampling_ratio`` x ``sampling_ratio`` bilinear
    samples (<= 0: ``ceil(bin size)`` per side); ``aligned`` shifts the box by half a pixel
    (without it a box is at least 1 x 1)."""

    def build(self, params: Params) -> None:
        if self.type == "torchvision.ops.RoIAlign":
            self.x_at, self.rois_at = 0, 1
            size = params.ints("output_size", 2)
            args = {"scale": params.float("spatial_scale"), "ph": size[0], "pw": size[1],
                    "ratio": params.int("sampling_ratio", -1), "aligned": params.bool("aligned", False)}
        else:
            args = self.read_boxes_op(params, ("scale", "ph", "pw", "ratio", "aligned"))
        self.check(params, args["scale"], (args["ph"], args["pw"]))
        if isinstance(args["ratio"], bool) or not isinstance(args["ratio"], int):
            raise params.error(f"sampling_ratio={args['ratio']!r} must be an integer")
        if not isinstance(args["aligned"], bool):
            raise params.error(f"aligned={args['aligned']!r} must be True or False")
        self.sampling_ratio, self.aligned = args["ratio"], args["aligned"]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x, boxes, batch = self.boxes(inputs)
        _, channels, height, width = x.shape
        out = np.zeros((len(boxes), channels) + self.pooled, x.dtype)
        for k, box in enumerate(boxes):
            image = x[batch[k]]
            out[k] = self.sample_box(lambda ys, xs: image[:, ys, xs], box, height, width)
        return [out]


@register("pnnx.custom_op.torchvision.ps_roi_align")
class PSRoIAlign(_Aligned):
    """``ps_roi_align(input, boxes, output_size, spatial_scale, sampling_ratio)``: RoIAlign
    (always half-pixel aligned, a box never enlarged) where output channel ``c``'s bin
    ``(i, j)`` reads input channel ``(c * ph + i) * pw + j``; the second output names it.
    A bin with no samples divides 0 by 0, as torchvision's kernel does."""

    second_output = True
    position_sensitive = True

    def build(self, params: Params) -> None:
        args = self.read_boxes_op(params, ("scale", "ph", "pw", "ratio"))
        self.check(params, args["scale"], (args["ph"], args["pw"]))
        if isinstance(args["ratio"], bool) or not isinstance(args["ratio"], int):
            raise params.error(f"sampling_ratio={args['ratio']!r} must be an integer")
        self.sampling_ratio = args["ratio"]

    def bilinear(self, plane: Any, inside: np.ndarray, along_y: tuple, along_x: tuple) -> np.ndarray:
        """A sample outside the map is 0 here (nothing is read)."""
        value = super().bilinear(plane, inside, along_y, along_x)
        return np.where(inside, value, value.dtype.type(0))

    def count(self, grid_h: int, grid_w: int, t: type) -> np.floating:
        return t(grid_h * grid_w)

    def forward(self, inputs: list[Any]) -> list[Any]:
        x, boxes, batch = self.boxes(inputs)
        ph, pw = self.pooled
        n, channels, height, width = x.shape
        c_out = channels // (ph * pw)
        bins = (np.arange(ph)[:, None], np.arange(pw)[None, :])
        out = np.zeros((len(boxes), c_out, ph, pw), x.dtype)
        for k, box in enumerate(boxes):
            image = x[batch[k]].reshape(c_out, ph, pw, height, width)
            out[k] = self.sample_box(lambda ys, xs: image[:, bins[0], bins[1], ys, xs], box, height, width)
        mapping = np.broadcast_to(np.arange(c_out * ph * pw, dtype=_INT32).reshape(c_out, ph, pw), out.shape)
        return [out, np.asarray(mapping, order="C")][: self.num_outputs]


def _round(value: np.floating) -> int:
    """C's ``round``: to the nearest integer, halves away from zero."""
    magnitude = abs(float(value))
    whole = math.floor(magnitude)
    whole += 1 if magnitude - whole >= 0.5 else 0
    return int(math.copysign(whole, float(value)))


class _Pooled(_RoIOp):
    """The integer bins of RoIPool and PSRoIPool: box corners rounded to pixels."""

    #: What a box's side adds to (x2 - x1) in pixels: 1 for RoIPool, 0 for PSRoIPool.
    extent = 1
    #: Bins are clipped to [0, size - edge]: RoIPool's to the map, PSRoIPool's short of its
    #: last row and column (as torchvision's forward kernel clips them).
    edge = 0

    def build(self, params: Params) -> None:
        args = self.read_boxes_op(params, ("scale", "ph", "pw"))
        self.check(params, args["scale"], (args["ph"], args["pw"]))

    def bins(self, box: np.ndarray, height: int, width: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """Each bin's [start, end) rows and columns."""
        t = box.dtype.type
        x1, y1, x2, y2 = (_round(v) for v in box)
        roi_w, roi_h = max(x2 - x1 + self.extent, 1), max(y2 - y1 + self.extent, 1)
        ph, pw = self.pooled
        return (self.cuts(t(roi_h) / t(ph), ph, y1, height), self.cuts(t(roi_w) / t(pw), pw, x1, width))

    def cuts(self, bin_size: np.floating, pooled: int, start: int, size: int) -> list[tuple[int, int]]:
        t = bin_size.dtype.type
        limit = size - self.edge
        found = []
        for p in range(pooled):
            lo = int(math.floor(t(p) * bin_size)) + start
            hi = int(math.ceil(t(p + 1) * bin_size)) + start
            found.append((min(max(lo, 0), limit), min(max(hi, 0), limit)))
        return found


@register("pnnx.custom_op.torchvision.roi_pool")
class RoIPool(_Pooled):
    """``roi_pool(input, boxes, output_size, spatial_scale)``: per box and bin the largest
    value (box corners rounded half away from zero, a box at least one pixel), 0 for an
    empty bin; the second output is its flat ``h * W + w`` position (-1: none). A NaN is
    never taken, and nothing at or below -FLT_MAX, as in torchvision's kernel."""

    second_output = True

    def forward(self, inputs: list[Any]) -> list[Any]:
        x, boxes, batch = self.boxes(inputs)
        _, channels, height, width = x.shape
        ph, pw = self.pooled
        out = np.zeros((len(boxes), channels, ph, pw), x.dtype)
        where = np.full(out.shape, -1, _INT32)
        for k, box in enumerate(boxes):
            rows, cols = self.bins(box, height, width)
            for i, (h0, h1) in enumerate(rows):
                for j, (w0, w1) in enumerate(cols):
                    if h1 <= h0 or w1 <= w0:
                        continue  # an empty bin: 0, and no position
                    region = x[batch[k], :, h0:h1, w0:w1].reshape(channels, -1)
                    taken = np.where(np.isnan(region), -np.inf, region)
                    best = taken.max(axis=1)
                    found = best > -_FLT_MAX
                    at = taken.argmax(axis=1)  # the first of equal maxima, as the kernel's strict >
                    out[k, :, i, j] = np.where(found, best, x.dtype.type(-_FLT_MAX))
                    flat = (h0 + at // (w1 - w0)) * width + w0 + at % (w1 - w0)
                    where[k, :, i, j] = np.where(found, flat, -1)
        return [out, where][: self.num_outputs]


@register("pnnx.custom_op.torchvision.ps_roi_pool")
class PSRoIPool(_Pooled):
    """``ps_roi_pool(input, boxes, output_size, spatial_scale)``: position-sensitive
    average pooling: output channel ``c``'s bin ``(i, j)`` averages input channel
    ``(c * ph + i) * pw + j`` over the bin (clipped to the map less its last row and
    column, as torchvision's kernel clips it), 0 for an empty bin; the second output names
    the channel."""

    second_output = True
    position_sensitive = True
    extent = 0
    edge = 1

    def forward(self, inputs: list[Any]) -> list[Any]:
        x, boxes, batch = self.boxes(inputs)
        ph, pw = self.pooled
        _, channels, height, width = x.shape
        c_out = channels // (ph * pw)
        out = np.zeros((len(boxes), c_out, ph, pw), x.dtype)
        for k, box in enumerate(boxes):
            image = x[batch[k]].reshape(c_out, ph, pw, height, width)
            rows, cols = self.bins(box, height, width)
            for i, (h0, h1) in enumerate(rows):
                for j, (w0, w1) in enumerate(cols):
                    if h1 > h0 and w1 > w0:
                        area = x.dtype.type((h1 - h0) * (w1 - w0))
                        out[k, :, i, j] = image[:, i, j, h0:h1, w0:w1].sum(axis=(1, 2), dtype=x.dtype) / area
        mapping = np.broadcast_to(np.arange(c_out * ph * pw, dtype=_INT32).reshape(c_out, ph, pw), out.shape)
        return [out, np.asarray(mapping, order="C")][: self.num_outputs]


@register("pnnx.custom_op.torchvision.nms")
class NMS(Layer):
    """``nms(boxes, scores, iou_threshold)``: the int64 indices of the boxes kept, by
    decreasing score (a stable sort: equal scores keep their order). A box is dropped when
    its intersection over union with a kept one is above the threshold, computed in the
    boxes' dtype as torchvision's kernel computes it. How many are kept is known only when
    it runs: at most one per box."""

    def build(self, params: Params) -> None:
        self.boxes_at, self.scores_at = self.bind_inputs(params, ["arg_0", "arg_1"])
        self.threshold = params.float("arg_2")

    def infer(self, specs: list[Spec]) -> list[Spec]:
        self.expect_inputs(specs, 2)
        boxes, scores = specs[self.boxes_at], specs[self.scores_at]
        if not isinstance(boxes, TensorSpec) or not isinstance(scores, TensorSpec):
            raise ShapeMismatch("takes two tensors: boxes and scores")
        if len(boxes.shape) != 2 or boxes.shape[1] != 4:
            raise ShapeMismatch(f"the boxes must be (N, 4), given {boxes.shape}")
        if scores.shape != boxes.shape[:1]:
            raise ShapeMismatch(f"the scores must be ({boxes.shape[0]},), one per box, given {scores.shape}")
        if boxes.dtype.kind != "f" or scores.dtype != boxes.dtype:
            raise ShapeMismatch(f"boxes and scores must be floats of one dtype, given {boxes.dtype} and {scores.dtype}")
        return [DynamicSpec((None,), np.int64, (boxes.shape[0],))]

    def forward(self, inputs: list[Any]) -> list[Any]:
        boxes, scores = np.asarray(inputs[self.boxes_at]), np.asarray(inputs[self.scores_at])
        return [nms_keep(boxes, scores, self.threshold)]


def nms_keep(boxes: np.ndarray, scores: np.ndarray, threshold: float) -> np.ndarray:
    """torchvision's CPU non-maximum suppression, one kept box's overlaps at a time."""
    if boxes.size == 0:
        return np.zeros(0, np.int64)
    x1, y1, x2, y2 = (np.asarray(boxes[:, k], order="C") for k in range(4))
    areas = (x2 - x1) * (y2 - y1)
    order = _descending(scores)
    alive = np.ones(len(boxes), bool)
    keep = []
    zero = boxes.dtype.type(0)
    for position, i in enumerate(order):
        if not alive[i]:
            continue
        keep.append(i)
        rest = order[position + 1:]
        rest = rest[alive[rest]]
        w = np.maximum(zero, np.minimum(x2[i], x2[rest]) - np.maximum(x1[i], x1[rest]))
        h = np.maximum(zero, np.minimum(y2[i], y2[rest]) - np.maximum(y1[i], y1[rest]))
        inter = w * h
        with np.errstate(invalid="ignore", divide="ignore"):
            overlap = inter / (areas[i] + areas[rest] - inter)
        alive[rest[overlap.astype(np.float64) > threshold]] = False  # as C++ compares a float with a double
    return np.asarray(keep, np.int64)


def _descending(scores: np.ndarray) -> np.ndarray:
    """The boxes by decreasing score as torchvision 0.29's kernel orders them: a stable
    descending sort (equal scores keep their order), NaN first."""
    nan = np.isnan(scores)
    order = np.argsort(-np.where(nan, np.inf, scores), kind="stable")
    return order[np.argsort(~nan[order], kind="stable")]
