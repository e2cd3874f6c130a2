"""Compiled convolutions: depthwise ones (``nn.Conv1d``/``nn.Conv2d`` with one input
channel per group), with the activations fused after them applied as each output plane is
written; dense 3x3 stride-1 ones by Winograd with compiled transforms; 1x1 ones as one
product; the other dense ones by im2col with compiled columns. The products are BLAS's,
called from the compiled loops where numpy's OpenBLAS is found
(:mod:`graphexec.devices.cpu.jit.cblas`), so that a node runs in one call, whole or in
compiled parts.

Which depthwise layout runs (see :mod:`graphexec.devices.cpu.jit._loops_conv`) is chosen per input
shape when the kernel is made (:func:`channels_last`; the measurements are in
docs/benchmarks.md, "Compiled CPU kernels").
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from graphexec.devices.base import Hints, Piece
from graphexec.devices.cpu._depthwise_math import wide_grid
from graphexec.devices.cpu.conv import _lifted
from graphexec.devices.cpu.jit.base import FLOAT32, BandKernel, bounds, fits
from graphexec.devices.cpu.jit.cblas import sgemm
from graphexec.devices.cpu.kernel import cpu_kernel
from graphexec.layers.conv import Conv1d, Conv2d
from graphexec.layers.specs import TensorSpec

#: Channels last on output planes of at most this many positions (8 x 8), where the input
#: it transposes takes at most ``LAST_MAX_INPUT_BYTES`` (a band of channels of one image):
#: on larger planes channels first is faster, and from a larger input, which channels last
#: transposes whole, too (docs/benchmarks.md, "Compiled CPU kernels").
LAST_MAX_POSITIONS = 64
LAST_MAX_INPUT_BYTES = 256 << 10


def channels_last(channels: int, in_positions: int, out_positions: int) -> bool:
    """Whether a depthwise layer of one output channel per input one runs channels last."""
    return out_positions <= LAST_MAX_POSITIONS and channels * in_positions * 4 <= LAST_MAX_INPUT_BYTES


#: A depthwise convolution is shared out by bands of channels from this many
#: multiply-adds (outputs x taps): its loops release the GIL, so the bands run side by side,
#: but below it a band's hand-over costs more than the band saves (docs/design/threads.md,
#: "Nodes shared out"); the numpy kernel's floor too.
SHARE_MIN_MACS = 5_000_000
#: The compiled Winograd runs a 3x3 stride-1 convolution of ``c`` to ``cout`` channels on
#: one BLAS thread when ``c * cout`` exceeds this times ``c + cout`` (the numpy kernel's
#: Winograd, whose transforms are numpy passes, asks 24): 32 -> 32 and 16 -> 64 gain,
#: 16 -> 32 and 16 -> 48 lose; on several BLAS threads im2col's one product gains more
#: (docs/design/convolutions.md, "Compiled Winograd").
JIT_WINOGRAD_MIN_REDUCED_CHANNELS = 12
#: About how many tiles the compiled Winograd transforms and multiplies at a time (its
#: chunks of tile rows, an even count of them where there are several): the transformed
#: tiles and the products stay in the cache between the three steps.
WINOGRAD_CHUNK_TILES = 256


def worth_winograd(shape: tuple[int, ...], out_shape: tuple[int, ...], blas_threads: int) -> bool:
    """Whether the compiled Winograd runs a 3x3 stride-1 convolution of input ``shape`` (N,
    C, H, W) into ``out_shape`` on ``blas_threads`` BLAS threads."""
    from graphexec.devices.cpu._conv_math import WINOGRAD_MIN_TILES

    n, c = shape[:2]
    _, cout, ho, wo = out_shape
    if blas_threads > 1 or n * -(-ho // 2) * -(-wo // 2) < WINOGRAD_MIN_TILES:
        return False
    return c * cout > JIT_WINOGRAD_MIN_REDUCED_CHANNELS * (c + cout)


#: A convolution in compiled parts whose products have fewer columns than this many times
#: their rows (its output channels) is cut by output channels (:func:`by_channels`) ...
CHANNELS_MAX_COLUMNS_PER_ROW = 2
#: ... and a 1x1 convolution, whose columns are its input itself (no copy), with fewer than
#: this many.
POINTWISE_CHANNELS_MAX_COLUMNS_PER_ROW = 16


def by_channels(columns: int, cout: int, per_row: int = CHANNELS_MAX_COLUMNS_PER_ROW) -> bool:
    """Whether a convolution in compiled parts whose products are ``cout`` rows (output
    channels) by ``columns`` (output positions, or Winograd's tiles) is cut into bands of
    its output channels rather than of its columns: with few columns the weight is about
    as large as the columns or larger, and parts by columns would each read all of it
    (docs/design/convolutions.md, "Parts by output channels")."""
    return columns < per_row * cout


class _Weights:
    """A depthwise layer's weight as its loops read it: (Cout, kh, kw) and, with one output
    channel per input one, (kh, kw, C); the bias (zeros where there is none)."""

    def __init__(self, layer: Any):
        weight = np.asarray(layer.weight, np.float32)
        cout, _, kh, kw = weight.shape
        self.first = np.asarray(weight.reshape(cout, kh, kw), order="C")
        first_last = self.first.transpose(1, 2, 0)
        self.last = np.asarray(first_last, order="C") if cout == layer.geometry.groups else None
        bias = np.zeros(cout, np.float32) if layer.bias is None else layer.bias
        self.bias = np.asarray(bias, np.float32, order="C")


def _depthwise_layer(layer: Any) -> bool:
    weight = layer.weight
    geo = layer.geometry
    return (weight.dtype == FLOAT32 and weight.shape[1] == 1 and geo.groups > 1 and weight.shape[0] % geo.groups == 0
            and geo.padding_mode == "zeros")


@cpu_kernel(Conv2d, Conv1d)
class JitDepthwiseConv(BandKernel):
    """A float32 depthwise convolution by compiled loops."""

    @classmethod
    def accepts(cls, layer, inputs, outputs, hints) -> bool:
        x = inputs[0] if inputs else None
        return (isinstance(x, TensorSpec) and x.dtype == FLOAT32 and len(x.shape) in (layer.spatial + 1, layer.spatial + 2)
                and _depthwise_layer(layer) and _lifted(layer, x.shape)[1] == layer.geometry.groups
                and min(outputs[0].shape, default=1) > 0)

    def __init__(self, layer, inputs, outputs, hints: Hints, device) -> None:
        super().__init__(layer, inputs, outputs, hints, device)
        self.weights: _Weights = device.shared.get(layer, "jit depthwise", lambda: _Weights(layer))
        self.shape = _lifted(layer, inputs[0].shape)
        n, c, h, w = self.shape
        _, cout, ho, wo = self.out_shape = _lifted(layer, outputs[0].shape)
        _, _, kh, kw = layer.weight.shape
        (top, _), (left, _) = layer.geometry.pads((kh, kw))
        geo = layer.geometry
        self.geometry = (*geo.stride, *geo.dilation, top, left)
        self.channels_last = self.weights.last is not None and channels_last(c, h * w, ho * wo)
        self.name = "jit depthwise " + ("last" if self.channels_last else "first")
        if not self.channels_last:
            self.grid = wide_grid((h, w), (ho, wo), (kh, kw), geo.stride, geo.dilation, top, left)
        self.macs = n * cout * ho * wo * kh * kw
        self.run_loop: Any = None

    fuses_activations = True

    def prepare(self) -> None:
        x = np.zeros((1, 1, 1, 1), np.float32)
        weights = self.weights
        if self.channels_last:
            self.run_loop = self.loop("conv", "depthwise_last", x, weights.last, weights.bias, x, *self.geometry, 0, 0,
                                      self.codes, self.params)
        else:
            self.run_loop = self.loop("conv", "depthwise_first", x, weights.first, weights.bias, x, *self.geometry,
                                      *self.grid, 0, 0, self.codes, self.params)
        if self._parts():
            if self.channels_last:
                self.parts_loop = self.loop("conv", "depthwise_last_parts", 0, x, weights.last, weights.bias, x,
                                            *self.geometry, 0, 0, self.codes, self.params)
            else:
                self.parts_loop = self.loop("conv", "depthwise_first_parts", 0, x, weights.first, weights.bias, x,
                                            *self.geometry, *self.grid, 0, 0, self.codes, self.params)

    def band(self, x: np.ndarray, out: np.ndarray, c0: int, c1: int) -> None:
        weights = self.weights
        if self.channels_last:
            self.run_loop(x, weights.last, weights.bias, out, *self.geometry, c0, c1, self.codes, self.params)
        else:
            self.run_loop(x, weights.first, weights.bias, out, *self.geometry, *self.grid, c0, c1, self.codes,
                          self.params)

    def parts(self, x: np.ndarray, out: np.ndarray, count: int) -> None:
        weights, channels = self.weights, self.out_shape[1]
        if self.channels_last:
            self.parts_loop(count, x, weights.last, weights.bias, out, *self.geometry, 0, channels, self.codes,
                            self.params)
        else:
            self.parts_loop(count, x, weights.first, weights.bias, out, *self.geometry, *self.grid, 0, channels,
                            self.codes, self.params)


    def splits(self) -> bool:
        return self.macs >= SHARE_MIN_MACS and self.out_shape[1] >= 2

    def pieces(self, inputs: list[Any], outputs: list[np.ndarray], count: int) -> list[Piece] | None:
        if count < 2 or not self.splits() or not fits(outputs[0]) or len(outputs[0].shape) != 4:
            return None
        x, out, _ = self._views(inputs, outputs)
        every = slice(None)
        return [Piece(partial(self.band, x, out, c0, c1), (every, slice(c0, c1)))
                for c0, c1 in bounds(self.out_shape[1], count)]


@cpu_kernel(Conv2d)
class JitWinogradConv(BandKernel):
    """A dense 3x3 stride-1 float32 convolution by Winograd F(2x2, 3x3): the input and
    output transforms compiled loops (one pass each, the output's with the bias and the
    activations), the 16 per-frequency products numpy's batched matmul on the weight the
    numpy kernel transforms. The transforms compute the numpy path's sums in its order (see
    :mod:`graphexec.devices.cpu.jit._loops_winograd`): where the numpy kernel takes
    Winograd too, the same bits. Compiled, the transforms cost less, so it runs on more
    convolutions than the numpy kernel's Winograd does (:func:`worth_winograd`). It runs
    in chunks of tile rows, and is shared out in bands of them; or, in compiled parts with
    few tiles (:func:`by_channels`), every tile at once in bands of the output channels."""

    name = "jit winograd"
    band_axis = 2  # rows of the output, two to a tile row
    fuses_activations = True

    @classmethod
    def accepts(cls, layer, inputs, outputs, hints) -> bool:
        x = inputs[0] if inputs else None
        if not (isinstance(x, TensorSpec) and x.dtype == FLOAT32 and len(x.shape) in (3, 4) and layer.spatial == 2):
            return False
        geo = layer.geometry
        dense_3x3 = (layer.weight.shape[2:] == (3, 3) and geo.groups == 1 and geo.stride == (1, 1)
                     and geo.dilation == (1, 1) and geo.padding_mode == "zeros")
        if not dense_3x3 or layer.weight.dtype != FLOAT32 or min(outputs[0].shape, default=1) < 1:
            return False
        return worth_winograd(_lifted(layer, x.shape), _lifted(layer, outputs[0].shape), hints.blas_threads)

    def __init__(self, layer, inputs, outputs, hints: Hints, device) -> None:
        super().__init__(layer, inputs, outputs, hints, device)
        self.conv = _Conv2dKernel.stored(layer, device)
        self.shape = _lifted(layer, inputs[0].shape)
        self.out_shape = _lifted(layer, outputs[0].shape)
        _, _, ho, wo = self.out_shape
        (self.top, _), (self.left, _) = self.conv.pads
        self.tiles = (-(-ho // 2), -(-wo // 2))
        #: Tile rows a run transforms and multiplies at a time; pieces are whole chunks, so
        #: that every product is the same call whatever the pieces (BLAS may round a
        #: product of other sizes otherwise): the same bits. A kernel made for a node shared
        #: among ``hints.pieces`` threads has a multiple of that many chunks.
        chunks = max(1, round(self.shape[0] * self.tiles[0] * self.tiles[1] / WINOGRAD_CHUNK_TILES))
        share = hints.pieces if hints.pieces > 1 else 2 if chunks > 1 else 1
        chunks = min(self.tiles[0], -(-chunks // share) * share)  # pieces of equal work
        self.chunk = -(-self.tiles[0] // chunks)
        #: Whether it runs every tile at once by bands of its output channels, in parts and whole.
        self.by_channels = self._bands() > 1 and by_channels(self.shape[0] * self.tiles[0] * self.tiles[1],
                                                              self.out_shape[1])
        self.weight = self.conv._winograd(2)  # (16, Cout, C), shared with the numpy kernel
        bias = self.conv.bias
        self.biased = bias is not None
        self.bias = (np.asarray(bias, FLOAT32, order="C") if bias is not None
                     else np.zeros(self.out_shape[1], FLOAT32))
        self.input_loop: Any = None
        self.output_loop: Any = None

    def prepare(self) -> None:
        x = np.zeros((1, 1, 1, 1), np.float32)
        v = np.zeros((1, 1, 1), np.float32)
        gemm = sgemm()
        if gemm is None:  # transforms compiled, products through numpy
            self.input_loop = self.loop("winograd", "winograd_input", x, v, 0, 0, 0, 0, 0, 0, 0, 0)
            self.output_loop = self.loop("winograd", "winograd_output", v, self.bias, x, 0, 0, 0, 0, 0, 0, False,
                                         self.codes, self.params)
            return
        self.gemm = (gemm.address, gemm.ilp64)
        flat, rows = np.zeros(1, np.float32), np.zeros((1, 1), np.float32)
        if self.by_channels:
            tail = (x, flat, flat, self.weight, self.bias, x, *(0,) * 4, False, self.codes, self.params, *self.gemm)
            self.channels_loop = self.loop("winograd", "winograd_channels_whole", 0, *tail)
            if self._parts():
                self.parts_loop = self.loop("winograd", "winograd_channels_parts", 0, *tail)
            return
        self.rows_loop = self.loop("winograd", "winograd_rows", x, flat, flat, self.weight, self.bias, x,
                                   *(0,) * 7, False, self.codes, self.params, *self.gemm)
        if self._parts():
            self.parts_loop = self.loop("winograd", "winograd_parts", 0, x, rows, rows, self.weight, self.bias, x,
                                        *(0,) * 7, False, self.codes, self.params, *self.gemm)

    #: The compiled loops of the whole node and of its parts, with the products inside
    #: (None without numpy's OpenBLAS: then a chunk is three calls, see :meth:`_chunk`).
    rows_loop: Any = None
    parts_loop: Any = None
    #: The loop of the whole node by bands of its output channels (see :attr:`by_channels`).
    channels_loop: Any = None
    gemm: tuple[int, bool] = (0, False)

    def _scratch(self, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Room for ``count`` chunks' transformed tiles and products at once."""
        n, c = self.shape[:2]
        t = n * self.chunk * self.tiles[1]
        scratch = self.device.scratch
        return (scratch.take("jit winograd tiles", (count, 16 * c * t), FLOAT32),
                scratch.take("jit winograd products", (count, 16 * self.weight.shape[1] * t), FLOAT32))

    def _every_tile(self) -> tuple[np.ndarray, np.ndarray]:
        """Room for every tile's transform and products at once (by channels)."""
        n, c = self.shape[:2]
        t = n * self.tiles[0] * self.tiles[1]
        scratch = self.device.scratch
        return (scratch.take("jit winograd tiles", (16 * c * t,), FLOAT32),
                scratch.take("jit winograd products", (16 * self.weight.shape[1] * t,), FLOAT32))

    def band(self, x: np.ndarray, out: np.ndarray, r0: int, r1: int) -> None:
        """Output rows ``r0:r1``, as the tile rows that hold them; by channels (never cut
        into pieces) the whole node as its parts, one after another: one result however it
        runs."""
        if self.channels_loop is not None:
            self.channels_loop(self._bands(), x, *self._every_tile(), self.weight, self.bias, out, self.top,
                               self.left, *self.tiles, self.biased, self.codes, self.params, *self.gemm)
            return
        self.rows(x, out, r0 // 2, -(-r1 // 2))

    def rows(self, x: np.ndarray, out: np.ndarray, y0: int, y1: int) -> None:
        """Tile rows ``y0:y1`` (whole chunks, see :data:`WINOGRAD_CHUNK_TILES`)."""
        if self.rows_loop is not None:
            v, products = self._scratch(1)
            self.rows_loop(x, v[0], products[0], self.weight, self.bias, out, self.top, self.left, *self.tiles, y0, y1,
                           self.chunk, self.biased, self.codes, self.params, *self.gemm)
            return
        for a0 in range(y0, y1, self.chunk):
            self._chunk(x, out, a0, min(y1, a0 + self.chunk))

    def _can_cross(self) -> bool:
        bands = self.weight.shape[1] if self.by_channels else -(-self.tiles[0] // self.chunk)
        return bands >= 2 and sgemm() is not None and self._parts()

    def parts(self, x: np.ndarray, out: np.ndarray, count: int) -> None:
        if self.by_channels:
            self.parts_loop(count, x, *self._every_tile(), self.weight, self.bias, out, self.top, self.left,
                            *self.tiles, self.biased, self.codes, self.params, *self.gemm)
            return
        v, products = self._scratch(count)
        self.parts_loop(count, x, v, products, self.weight, self.bias, out, self.top, self.left, *self.tiles, 0,
                        self.tiles[0], self.chunk, self.biased, self.codes, self.params, *self.gemm)

    def _chunk(self, x: np.ndarray, out: np.ndarray, y0: int, y1: int) -> None:
        n, c = self.shape[:2]
        th, tw = self.tiles
        cout = self.weight.shape[1]
        t = n * (y1 - y0) * tw
        scratch = self.device.scratch
        v = scratch.take("jit winograd tiles", (16, c, t), FLOAT32)
        self.input_loop(x, v, self.top, self.left, th, tw, y0, y1, 0, c)
        products = scratch.take("jit winograd products", (16, cout, t), FLOAT32)
        np.matmul(self.weight, v, out=products)
        self.output_loop(products, self.bias, out, th, tw, y0, y1, 0, cout, self.biased, self.codes, self.params)

    def splits(self) -> bool:
        return (len(self.input_specs[0].shape) == 4 and -(-self.tiles[0] // self.chunk) >= 2 and not self.by_channels
                and self.conv.splits(self.shape, FLOAT32))

    def pieces(self, inputs: list[Any], outputs: list[np.ndarray], count: int) -> list[Piece] | None:
        if count < 2 or not self.splits() or not fits(outputs[0]):
            return None
        x, out, _ = self._views(inputs, outputs)
        every = slice(None)
        ho, chunk = self.out_shape[2], self.chunk
        return [Piece(partial(self.rows, x, out, k0 * chunk, min(self.tiles[0], k1 * chunk)),
                      (every, every, slice(2 * k0 * chunk, min(ho, 2 * k1 * chunk))))
                for k0, k1 in bounds(-(-self.tiles[0] // chunk), count)]


def _dense_path(layer: Any, inputs: Any, outputs: Any, hints: Hints) -> str | None:
    """The numpy kernel's path for a float32 convolution of one group (None for another)."""
    x = inputs[0] if inputs else None
    if not (isinstance(x, TensorSpec) and x.dtype == FLOAT32 and len(x.shape) in (layer.spatial + 1,
                                                                                      layer.spatial + 2)):
        return None
    if layer.geometry.groups != 1 or layer.weight.dtype != FLOAT32 or min(outputs[0].shape, default=1) < 1:
        return None
    conv = _Conv2dKernel.shared(layer, hints)
    return None if conv is None else conv.path(_lifted(layer, x.shape), x.dtype)


@cpu_kernel(Conv2d, Conv1d)
class JitIm2colConv(BandKernel):
    """A dense float32 convolution by im2col: the columns filled by a compiled loop, then
    the numpy kernel's own product (with the bias folded into it where the numpy kernel
    folds it), so the same bits; where numpy's OpenBLAS is found, the product is called from
    the same compiled loop and the activations are fused after it. In bands of output rows
    when it runs alone while threads idle. numpy's copy from a 7-D strided view of the
    padded input took 2-4x the loop's time (see docs/benchmarks.md)."""

    name = "jit im2col"
    band_axis = 2  # rows of the output

    @classmethod
    def accepts(cls, layer, inputs, outputs, hints) -> bool:
        return layer.geometry.padding_mode == "zeros" and _dense_path(layer, inputs, outputs, hints) == "im2col"

    def __init__(self, layer, inputs, outputs, hints: Hints, device) -> None:
        super().__init__(layer, inputs, outputs, hints, device)
        self.conv = _Conv2dKernel.shared(layer, hints, device)
        self.shape = _lifted(layer, inputs[0].shape)
        self.out_shape = _lifted(layer, outputs[0].shape)
        n, c, h, w = self.shape
        _, cout, ho, wo = self.out_shape
        kh, kw = self.conv.kernel_size
        (top, _), (left, _) = self.conv.pads
        geo = layer.geometry
        self.geometry = (kh, kw, *geo.stride, *geo.dilation, top, left)
        self.fold = self.conv.biased is not None and self.conv.biased.dtype == FLOAT32
        self.matrix = self.conv.biased[0] if self.fold else self.conv.matrix[0]
        self.column = None if self.fold or self.conv.bias is None else self.conv.bias.reshape(cout, 1)
        self.bias = (np.asarray(self.conv.bias, FLOAT32, order="C") if self.column is not None
                     else np.zeros(cout, FLOAT32))
        self.depth = c * kh * kw + (1 if self.fold else 0)
        self.gemm = sgemm()
        #: Whether it runs each image's product in bands of its output channels, in parts
        #: and whole (else in bands of output rows).
        self.by_channels = self._bands() > 1 and by_channels(ho * wo, cout)
        self.run_loop: Any = None
        self.rows_loop: Any = None
        self.whole_loop: Any = None
        self.parts_loop: Any = None

    fuses_activations = True  # in its compiled call, where numpy's OpenBLAS is found

    def activations(self, codes: np.ndarray, params: np.ndarray) -> bool:
        return self.gemm is not None and super().activations(codes, params)

    def prepare(self) -> None:
        x = np.zeros((1, 1, 1), np.float32)
        if self.gemm is None:  # the columns compiled, the product numpy's
            self.run_loop = self.loop("conv", "im2col", x, x[0], *self.geometry, 0, 0, 0, False)
            return
        x4, flat, rows = np.zeros((1, 1, 1, 1), np.float32), np.zeros(1, np.float32), np.zeros((1, 1), np.float32)
        common = (self.matrix, 0, self.bias, x4, *self.geometry)
        tail = (False, False, self.codes, self.params, self.gemm.address, self.gemm.ilp64)
        self.rows_loop = self.loop("conv", "im2col_rows", x4, flat, *common, 0, 0, *tail)
        way, cols = ("im2col_channels", flat) if self.by_channels else ("im2col", rows)
        self.whole_loop = self.loop("conv", f"{way}_whole", 0, x4, cols, *common, *tail)
        if self._parts():
            self.parts_loop = self.loop("conv", f"{way}_parts", 0, x4, cols, *common, *tail)

    def _lda(self) -> int:
        return self.matrix.strides[0] // FLOAT32.itemsize

    def band(self, x: np.ndarray, out: np.ndarray, r0: int, r1: int) -> None:
        """Output rows ``r0:r1`` of every image: the whole as the parts a node shared out
        runs in, one after another, so that it gives one result however it runs."""
        _, cout, ho, wo = self.out_shape
        if self.rows_loop is not None and (r0, r1) == (0, ho):
            count = min(self._bands(), cout if self.by_channels else ho)
            self.whole_loop(count, x, self._cols(count), self.matrix, self._lda(), self.bias, out, *self.geometry,
                            self.fold, self.column is not None, self.codes, self.params, self.gemm.address,
                            self.gemm.ilp64)
            return
        if self.rows_loop is not None:
            cols = self.device.scratch.take("jit cols", (self.depth * (r1 - r0) * wo,), FLOAT32)
            self.rows_loop(x, cols, self.matrix, self._lda(), self.bias, out, *self.geometry, r0, r1, self.fold,
                           self.column is not None, self.codes, self.params, self.gemm.address, self.gemm.ilp64)
            return
        cols = self.device.scratch.take("jit cols", (self.depth, (r1 - r0) * wo), FLOAT32)
        for image in range(self.shape[0]):
            self.run_loop(x[image], cols, *self.geometry, r0, r1, wo, self.fold)
            band = out[image].reshape(cout, ho * wo)[:, r0 * wo:r1 * wo]
            np.matmul(self.matrix, cols, out=band)
            if self.column is not None:
                np.add(band, self.column, out=band)

    def _can_cross(self) -> bool:
        if self.by_channels:
            return self.gemm is not None and self.out_shape[1] >= 2 and self._parts()
        return self.gemm is not None and super()._can_cross()

    def _cols(self, count: int) -> np.ndarray:
        """Room for the columns of ``count`` bands of output rows at once (by channels:
        of an image's whole output plane)."""
        _, _, ho, wo = self.out_shape
        if self.by_channels:
            return self.device.scratch.take("jit cols", (self.depth * ho * wo,), FLOAT32)
        return self.device.scratch.take("jit cols", (count, self.depth * -(-ho // count) * wo), FLOAT32)

    def parts(self, x: np.ndarray, out: np.ndarray, count: int) -> None:
        cols = self._cols(count)
        self.parts_loop(count, x, cols, self.matrix, self._lda(), self.bias, out, *self.geometry, self.fold,
                        self.column is not None, self.codes, self.params, self.gemm.address, self.gemm.ilp64)

    def splits(self) -> bool:
        x = self.input_specs[0]
        return len(x.shape) == 4 and not self.by_channels and self.conv.splits(self.shape, x.dtype)

    def pieces(self, inputs: list[Any], outputs: list[np.ndarray], count: int) -> list[Piece] | None:
        if count < 2 or not self.splits() or not fits(outputs[0]):
            return None
        x, out, _ = self._views(inputs, outputs)
        every = slice(None)
        return [Piece(partial(self.band, x, out, r0, r1), (every, every, slice(r0, r1)))
                for r0, r1 in bounds(self.out_shape[2], count)]


@cpu_kernel(Conv2d, Conv1d)
class JitPointwiseConv(BandKernel):
    """A float32 1x1 convolution (stride 1, no padding, one group) as one product an image by
    numpy's OpenBLAS called from a compiled loop, the bias and the activations fused after
    it on each channel's run while it is in cache. Taken only where that BLAS is found
    (:mod:`graphexec.devices.cpu.jit.cblas`); on several threads, in bands of the output
    channels, or of the positions where they far outnumber the channels
    (:func:`by_channels`)."""

    name = "jit 1x1"
    band_axis = 1  # output channels
    fuses_activations = True

    @classmethod
    def accepts(cls, layer, inputs, outputs, hints) -> bool:
        return (hints.blas_threads == 1 and sgemm() is not None
                and _dense_path(layer, inputs, outputs, hints) == "1x1")

    def __init__(self, layer, inputs, outputs, hints: Hints, device) -> None:
        super().__init__(layer, inputs, outputs, hints, device)
        conv = _Conv2dKernel.shared(layer, hints, device)
        n, c, h, w = _lifted(layer, inputs[0].shape)
        _, cout, _, _ = _lifted(layer, outputs[0].shape)
        self.shape = (n, c, h * w)
        self.out_shape = (n, cout, h * w)
        self.weight = conv.matrix[0]  # (Cout, C), perhaps a view of the matrix with the bias beside it
        self.lda = self.weight.strides[0] // FLOAT32.itemsize
        self.added = conv.bias is not None
        self.bias = np.asarray(conv.bias, FLOAT32, order="C") if self.added else np.zeros(cout, FLOAT32)
        self.by_rows = by_channels(h * w, cout, POINTWISE_CHANNELS_MAX_COLUMNS_PER_ROW)
        self.gemm: Any = sgemm()
        self.run_loop: Any = None
        self.parts_loop: Any = None

    def prepare(self) -> None:
        x = np.zeros((1, 1, 1), np.float32)
        tail = (self.added, self.codes, self.params, self.gemm.address, self.gemm.ilp64)
        self.run_loop = self.loop("conv", "pointwise_whole", 0, False, x, self.weight, 0, self.bias, x, *tail)
        if self._parts():
            self.parts_loop = self.loop("conv", "pointwise_parts", 0, False, x, self.weight, 0, self.bias, x, *tail)

    def band(self, x: np.ndarray, out: np.ndarray, r0: int, r1: int) -> None:
        """The whole node (it is never cut into pieces), as the parts a node shared out runs
        in, one after another: one result however it runs."""
        self.run_loop(self._bands(), self.by_rows, x, self.weight, self.lda, self.bias, out, self.added,
                      self.codes, self.params, self.gemm.address, self.gemm.ilp64)

    def _can_cross(self) -> bool:
        return (self.out_shape[1] if self.by_rows else self.shape[2]) >= 2 and self._parts()

    def parts(self, x: np.ndarray, out: np.ndarray, count: int) -> None:
        self.parts_loop(count, self.by_rows, x, self.weight, self.lda, self.bias, out, self.added, self.codes,
                        self.params, self.gemm.address, self.gemm.ilp64)


class _Conv2dKernel:
    """The numpy kernel's laid-out weight a stored convolution's kernels share (the one
    :class:`graphexec.devices.cpu.conv.StoredConv` uses), as it runs with ``hints``."""

    @staticmethod
    def stored(layer: Any, device: Any) -> Any:
        """The layout itself, as the numpy kernel with one BLAS thread runs it."""
        from graphexec.devices.cpu._conv_math import Conv2dKernel

        return device.shared.get(layer, "conv2d", lambda: Conv2dKernel(
            layer.weight, layer.bias, layer.geometry, scratch=device.scratch, biased=layer.weight_and_bias))

    @staticmethod
    def shared(layer: Any, hints: Hints, device: Any = None) -> Any:
        from graphexec.devices.cpu._conv_math import Conv2dKernel

        if device is None:  # only asked which path it takes: a layout of its own (views of the layer's weight)
            conv = Conv2dKernel(layer.weight, layer.bias, layer.geometry, biased=layer.weight_and_bias)
            return conv.without_winograd() if hints.blas_threads > 1 else conv
        conv = _Conv2dKernel.stored(layer, device)
        if hints.blas_threads > 1:
            conv = device.shared.get(layer, "conv2d without winograd", conv.without_winograd)
        return conv
