"""Compiled max and average pooling of 1-D and 2-D float32 tensors, with the activations
fused after them applied to each output row as it is written."""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import numpy as np

from graphexec.devices.base import Piece
from graphexec.devices.cpu.jit.base import FLOAT32, BandKernel, bounds, fits
from graphexec.devices.cpu.kernel import cpu_kernel
from graphexec.layers._pool_math import outer_product, window_counts
from graphexec.layers.pooling import _AvgPool, _MaxPool
from graphexec.layers.specs import TensorSpec

#: A pool is shared out by bands of planes from this many input elements read.
SHARE_MIN_READS = 1_000_000


@cpu_kernel(_MaxPool, _AvgPool)
class JitPool(BandKernel):
    """A float32 max or average pool of the last one or two dims, by compiled loops."""

    band_axis = 0  # planes

    @classmethod
    def accepts(cls, layer, inputs, outputs, hints) -> bool:
        x, out = (inputs[0] if inputs else None), (outputs[0] if outputs else None)
        return (layer.spatial <= 2 and not getattr(layer, "return_indices", False) and isinstance(x, TensorSpec)
                and isinstance(out, TensorSpec) and x.dtype == FLOAT32 and out.dtype == FLOAT32
                and min(x.shape, default=1) > 0 and min(out.shape, default=1) > 0)

    def __init__(self, layer, inputs, outputs, hints, device) -> None:
        super().__init__(layer, inputs, outputs, hints, device)
        spatial = layer.spatial
        x, out = inputs[0].shape, outputs[0].shape
        window = layer.window
        lift = (1,) * (2 - spatial)
        self.planes = math.prod(x[:-spatial])
        self.shape = (self.planes, *lift, *x[-spatial:])
        self.out_shape = (self.planes, *lift, *out[-spatial:])
        self.average = isinstance(layer, _AvgPool)
        kernel, stride, dilation = lift + window.kernel, lift + window.stride, lift + window.dilation
        padding = (0,) * (2 - spatial) + window.padding
        after = (0,) * (2 - spatial) + window.pads_after(x[-spatial:], out[-spatial:])
        frame = (self.shape[1] + padding[0] + after[0], self.shape[2] + padding[1] + after[1])
        self.geometry = (*kernel, *stride, *dilation, *padding, *frame)
        self.divisor = self._divisor(layer, x[-spatial:], out[-spatial:]) if self.average else np.ones((1, 1), FLOAT32)
        self.reads = self.planes * math.prod(self.out_shape[1:]) * math.prod(kernel)
        self.name = "jit " + ("average" if self.average else "max")
        self.run_loop: Any = None

    def _divisor(self, layer: Any, sizes: tuple[int, ...], outs: tuple[int, ...]) -> np.ndarray:
        """Each output's divisor, as :func:`graphexec.layers.pooling.avg_pool` divides."""
        shape = self.out_shape[1:]
        if layer.divisor is not None:
            return np.full(shape, layer.divisor, FLOAT32)
        window = layer.window
        counts = outer_product([window_counts(size, o, k, s, p, layer.count_include_pad)
                                for size, o, k, s, p in zip(sizes, outs, window.kernel, window.stride, window.padding)])
        return np.asarray(counts.astype(FLOAT32).reshape(shape), order="C")

    fuses_activations = True

    def prepare(self) -> None:
        x = np.zeros((1, 1, 1), np.float32)
        self.run_loop = self.loop("pool", "pool", x, x, self.divisor, self.average, *self.geometry, 0, 0, self.codes,
                                  self.params)
        if self._parts():
            self.parts_loop = self.loop("pool", "pool_parts", 0, x, x, self.divisor, self.average, *self.geometry, 0,
                                        0, self.codes, self.params)

    def band(self, x: np.ndarray, out: np.ndarray, b0: int, b1: int) -> None:
        self.run_loop(x, out, self.divisor, self.average, *self.geometry, b0, b1, self.codes, self.params)

    def parts(self, x: np.ndarray, out: np.ndarray, count: int) -> None:
        self.parts_loop(count, x, out, self.divisor, self.average, *self.geometry, 0, self.planes, self.codes,
                        self.params)


    def splits(self) -> bool:
        return self.reads >= SHARE_MIN_READS and self.planes >= 2

    def pieces(self, inputs: list[Any], outputs: list[np.ndarray], count: int) -> list[Piece] | None:
        out = outputs[0]
        if count < 2 or not self.splits() or not fits(out) or out.ndim < 2:
            return None
        x, flat, _ = self._views(inputs, outputs)
        # bands of the planes, as regions of the output: of channels of one image, or of images
        lead = out.shape[:-self.layer.spatial]
        axis = 0 if lead[0] >= count or len(lead) == 1 else 1
        per = math.prod(lead[axis + 1:])
        every = slice(None)
        if axis == 1 and lead[0] != 1:
            return None
        return [Piece(partial(self.band, x, flat, a0 * per, a1 * per), (every,) * axis + (slice(a0, a1),))
                for a0, a1 in bounds(lead[axis], count)]
