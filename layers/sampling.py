"""Sampling at coordinates: ``F.affine_grid`` and ``F.grid_sample`` (spatial transformers).

::

    AffineGrid      theta (N, 2, 3) or (N, 3, 4) -> a grid of (x, y[, z]) in [-1, 1]
    GridSample      input (N, C, H, W) read at a grid (N, Ho, Wo, 2): bilinear, nearest or bicubic;
                    input (N, C, D, H, W) at a grid (N, Do, Ho, Wo, 3): trilinear or nearest;
                    zeros / border / reflection outside

Coordinates follow PyTorch: -1 and 1 are the centres of the corner pixels with
``align_corners=True``, their outer edges otherwise.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

import numpy as np

from graphexec.layers.base import Layer, Params, Shape, ShapeMismatch
from graphexec.layers.creation import _sized
from graphexec.layers.registry import register
from graphexec.layers.resize import cubic_weights
from graphexec.layers.shape import runtime_ints
from graphexec.layers.specs import DynamicSpec, Spec, TensorSpec


def base_coordinates(size: int, align_corners: bool, dtype: np.dtype) -> np.ndarray:
    """The normalised coordinate of each of ``size`` pixel centres along one axis."""
    if align_corners:
        return np.linspace(-1, 1, size, dtype=np.float64).astype(dtype) if size > 1 else np.zeros(1, dtype)
    return ((np.arange(size, dtype=np.float64) * 2 + 1) / size - 1).astype(dtype)


@register("F.affine_grid")
class AffineGrid(Layer):
    """``F.affine_grid(theta, size)``: each output pixel's (x, y[, z]) = theta @ (x, y[, z], 1).

    ``size`` is a param, or the ``$size`` input where the export computes it from a dynamic
    dim (a warp's grid sized by the image it warps)."""

    def build(self, params: Params) -> None:
        self.align_corners = params.bool("align_corners", False)
        self.size: tuple[int, ...] | None = None
        self.theta_at, self.size_at = 0, None
        if params.has("size"):
            try:
                self.size = _checked_size(params.ints("size"))
            except ShapeMismatch as exc:
                raise params.error(str(exc)) from None
        else:
            self.theta_at, self.size_at = self.bind_inputs(params, ["theta", "size"])

    def infer(self, specs: list[Spec]) -> list[Spec]:
        self.expect_inputs(specs, 1 if self.size_at is None else 2)
        theta = specs[self.theta_at]
        if not isinstance(theta, TensorSpec):
            raise ShapeMismatch(f"theta should be a tensor, given {theta}")
        dtype = np.result_type(theta.dtype, np.float32)
        if self.size is not None:
            return [TensorSpec(self._grid_shape(theta.shape, self.size), dtype)]
        size = _sized(specs[self.size_at], "size", dtype)  # type: ignore[index]
        if isinstance(size, TensorSpec):
            return [TensorSpec(self._grid_shape(theta.shape, _checked_size(size.shape)), dtype)]
        spatial = len(size.shape) - 2
        if spatial not in (2, 3) or len(theta.shape) != 3 or theta.shape[1:] != (spatial, spatial + 1):
            raise ShapeMismatch(f"theta should have shape (N, {spatial}, {spatial + 1}) for a size of "
                                f"{spatial + 2} dims, given {theta.shape}")
        return [DynamicSpec((theta.shape[0], *size.shape[2:], spatial), dtype,
                            (theta.shape[0], *size.bound[2:], spatial))]  # type: ignore[union-attr]

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        """The grid's shape where ``size`` is a param (the OpenCL op's check)."""
        self.expect_inputs(shapes, 1)
        if self.size is None:
            raise ShapeMismatch("the size is an input: only the run knows the grid's shape")
        return [self._grid_shape(shapes[0], self.size)]

    @staticmethod
    def _grid_shape(theta: Shape, size: tuple[int, ...]) -> Shape:
        spatial = len(size) - 2
        wanted = (size[0], spatial, spatial + 1)
        if tuple(theta) != wanted:
            raise ShapeMismatch(f"theta should have shape {wanted} for size {size}, given {tuple(theta)}")
        return (size[0], *size[2:], spatial)

    def forward(self, inputs: list[Any]) -> list[Any]:
        theta = np.asarray(inputs[self.theta_at])
        size = self.size
        if size is None:
            size = _checked_size(runtime_ints(inputs[self.size_at], "size"))  # type: ignore[index]
        self._grid_shape(theta.shape, size)
        dtype = np.result_type(theta.dtype, np.float32)
        sizes = size[2:]
        # (x, y[, z]) runs along (W, H[, D]): the last size first
        axes = [base_coordinates(s, self.align_corners, dtype) for s in reversed(sizes)]
        mesh = np.meshgrid(*axes[::-1], indexing="ij")[::-1]  # each of shape sizes
        base = np.stack([*mesh, np.ones(sizes, dtype)], axis=-1).reshape(-1, len(sizes) + 1)
        grid = np.matmul(base, np.swapaxes(theta.astype(dtype, copy=False), 1, 2))
        return [grid.reshape((theta.shape[0], *sizes, len(sizes)))]


def _checked_size(size: tuple[int, ...]) -> tuple[int, ...]:
    if len(size) not in (4, 5) or min(size) < 1:
        raise ShapeMismatch(f"size={size} should be (N, C, H, W) or (N, C, D, H, W), all positive")
    return size


def _unnormalize(coord: np.ndarray, size: int, align_corners: bool) -> np.ndarray:
    """Normalised [-1, 1] coordinates -> pixel positions."""
    if align_corners:
        return (coord + 1) / 2 * (size - 1)
    return ((coord + 1) * size - 1) / 2


def _clamp(position: np.ndarray, size: int) -> np.ndarray:
    """Positions held inside [0, size - 1]; a NaN one goes to 0, as PyTorch's clamp does (a
    flow's warp grid divided by the width less one is NaN on a one-pixel pyramid level)."""
    return np.fmin(np.fmax(position, 0), size - 1)


def _reflect(position: np.ndarray, size: int, align_corners: bool) -> np.ndarray:
    """Positions folded back into the image, as padding_mode='reflection' does."""
    low, span = (0.0, size - 1.0) if align_corners else (-0.5, float(size))
    if span <= 0:
        return np.zeros_like(position)
    distance = np.abs(position - low)  # an infinite or NaN position folds to NaN
    flips, extra = np.divmod(distance, span)
    folded = np.where(flips % 2 == 0, low + extra, low + span - extra)
    return _clamp(folded, size)  # within already where finite; NaN goes to 0 as in PyTorch


@register("F.grid_sample")
class GridSample(Layer):
    """``F.grid_sample(input, grid)`` over 2-D images (bilinear, nearest or bicubic) or 3-D
    volumes (trilinear, named bilinear as in PyTorch, or nearest)."""

    MODES = ("bilinear", "nearest", "bicubic")
    PADDING = ("zeros", "border", "reflection")

    def build(self, params: Params) -> None:
        self.mode = params.str("mode", "bilinear")
        if self.mode not in self.MODES:
            raise params.error(f"mode={self.mode!r} is not supported (only {', '.join(self.MODES)})")
        self.padding_mode = params.str("padding_mode", "zeros", choices=self.PADDING)
        self.align_corners = params.bool("align_corners", False)
        self.image_at, self.grid_at = self.bind_inputs(params, ("input", "grid"))

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, 2)
        image, grid = shapes[self.image_at], shapes[self.grid_at]
        if len(image) not in (4, 5):
            raise ShapeMismatch(
                f"only 4-D (N, C, H, W) or 5-D (N, C, D, H, W) inputs are sampled, not {image}"
            )
        if self.mode == "bicubic" and len(image) == 5:
            # PyTorch refuses it too: "bicubic interpolation only supports 4D input"
            raise ShapeMismatch(f"mode='bicubic' samples only 4-D inputs (N, C, H, W), given {image}")
        spatial = len(image) - 2
        if len(grid) != len(image) or grid[-1] != spatial or grid[0] != image[0]:
            wanted = "Ho, Wo, 2" if spatial == 2 else "Do, Ho, Wo, 3"
            raise ShapeMismatch(f"the grid should be ({image[0]}, {wanted}) for input {image}, not {grid}")
        return [(image[0], image[1], *grid[1:-1])]

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        return [np.result_type(dtypes[self.image_at], dtypes[self.grid_at])]

    def forward(self, inputs: list[Any]) -> list[Any]:
        image, grid = np.asarray(inputs[self.image_at]), np.asarray(inputs[self.grid_at])
        dtype = np.result_type(image.dtype, grid.dtype)
        grid = grid.astype(dtype, copy=False)
        sizes = image.shape[2:]
        # the grid's (x, y[, z]) run along (W, H[, D]): reversed, they follow the image's axes
        coords = [grid[..., i] for i in reversed(range(len(sizes)))]
        with np.errstate(invalid="ignore"):  # a NaN or infinite grid point gives NaN or 0, as in PyTorch
            out = self._sample(image, coords, sizes)
        return [out.astype(dtype, copy=False)]

    def _sample(self, image: np.ndarray, coords: list[np.ndarray], sizes: tuple[int, ...]) -> np.ndarray:
        if self.mode == "bicubic":
            out = self._bicubic(image, coords)
        else:
            positions = [self._source(coord, size) for coord, size in zip(coords, sizes)]
            if self.mode == "nearest":
                # round half to even, as PyTorch's nearbyint does
                out = self._gather(image, [np.rint(p) for p in positions])
            else:
                out = self._linear(image, positions)
        return out

    def _linear(self, image: np.ndarray, positions: list[np.ndarray]) -> np.ndarray:
        """Bilinear (2 axes) or trilinear (3 axes): the 2**k pixels around each position,
        each weighed by the product of its per-axis weights (t - floor(t) or 1 minus it)."""
        lows = [np.floor(p) for p in positions]
        fractions = [p - low for p, low in zip(positions, lows)]
        out = 0
        for corner in itertools.product((0, 1), repeat=len(positions)):
            weight = functools.reduce(
                np.multiply, [f if step else 1 - f for f, step in zip(fractions, corner)]
            )
            indices = [low + step for low, step in zip(lows, corner)]
            out = out + self._gather(image, indices) * weight[:, None]
        return out

    def _bicubic(self, image: np.ndarray, coords: list[np.ndarray]) -> np.ndarray:
        """Keys' cubic (A = -0.75) over the 4 x 4 pixels around each point, as PyTorch does:
        the point is not folded by the padding mode, each of the 16 pixels is (so a point
        just outside still weighs the pixels inside)."""
        h, w = image.shape[2:]
        y = _unnormalize(coords[0], h, self.align_corners)
        x = _unnormalize(coords[1], w, self.align_corners)
        x0, y0 = np.floor(x), np.floor(y)
        wx, wy = (cubic_weights((t - t0).reshape(-1)).reshape(*t.shape, 4) for t, t0 in ((x, x0), (y, y0)))
        out = 0
        for i in range(4):
            rows = self._pixel(y0 + (i - 1), h)
            row = 0
            for j in range(4):
                row = row + self._gather(image, [rows, self._pixel(x0 + (j - 1), w)]) * wx[:, None, ..., j]
            out = out + row * wy[:, None, ..., i]
        return out

    def _pixel(self, index: np.ndarray, size: int) -> np.ndarray:
        """Integer pixel indices along one axis, folded by the padding mode (zeros: left
        outside, where :meth:`_gather` reads 0)."""
        if self.padding_mode == "border":
            return _clamp(index, size)
        if self.padding_mode == "reflection":
            return _reflect(index, size, self.align_corners)
        return index

    def _source(self, coord: np.ndarray, size: int) -> np.ndarray:
        """Pixel positions to read along one axis, after the padding mode's folding."""
        position = _unnormalize(coord, size, self.align_corners)
        if self.padding_mode == "border":
            return _clamp(position, size)
        if self.padding_mode == "reflection":
            return _reflect(position, size, self.align_corners)
        return position

    @staticmethod
    def _gather(image: np.ndarray, indices: list[np.ndarray]) -> np.ndarray:
        """``image`` (N, C, *spatial) at integer indices per sample, one (N, *out) array per
        spatial axis -> (N, C, *out); zero outside, and at a NaN index. One gather of flat
        indices into the flattened spatial axes, whatever their count."""
        n, c, *sizes = image.shape
        inside = np.ones(indices[0].shape, bool)
        flat = np.zeros(indices[0].shape, np.intp)
        for index, size in zip(indices, sizes):
            inside &= (index >= 0) & (index < size)
            flat = flat * size + np.where(inside, index, 0).astype(np.intp)  # in range wherever read
        values = np.take_along_axis(image.reshape(n, c, -1), flat.reshape(n, 1, -1), axis=2)
        return np.where(inside[:, None], values.reshape(n, c, *flat.shape[1:]), 0)
