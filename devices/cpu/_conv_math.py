"""The CPU's numpy convolution kernels (private to :mod:`graphexec.devices.cpu.conv`).

Everything works on 2-D spatial data ``(N, C, H, W)``; 1-D convolutions are run as 2-D
ones with ``H == 1`` (a view, no copy). :class:`Conv2dKernel` holds a stored weight laid
out once (aligned, contiguous) for the path that runs it:

* **1x1** convolutions: the input *is* the column matrix (a reshape, no copy when the
  input is contiguous, unpadded and the stride is 1); one matmul. One that widens the
  channels (:data:`ONES_ROW_MIN_EXPANSION`) copies its input below a row of ones, as
  im2col does (next), where the bias would cost a pass over a larger output.
* **3x3, stride 1, dense** convolutions wide enough to pay for it (:func:`winograd_tile`):
  Winograd F(2x2, 3x3), 2.25x fewer multiplications than direct and as accurate as
  im2col (:mod:`graphexec.devices.cpu._winograd_math`).
* **depthwise** (one input channel per group): a multiply-add per kernel tap over every
  channel at once (:mod:`graphexec.devices.cpu._depthwise_math`).
* **k x k, dense, few output channels for many input ones** (DenseNet's 128 -> 32):
  im2col *by positions*, ``(L, K) @ (K, Cout)``, from a channels-last copy of the padded
  input; BLAS splits the long dimension of positions among its threads where the short
  one of output channels gives it little to split, and the transposing copy into the
  output adds the bias.
* **everything else**: im2col from a strided view of the padded input, then one
  (group-batched) matmul ``(G, Cout/G, K) @ (N, G, K, L)``. The columns carry a row of
  ones and the stored weight matrix the bias as its last column, so the bias costs the
  matmul one more step of K instead of a pass over the output.

Every path writes its result into an ``out`` array it is given (C-contiguous, of the
output's shape; its old contents are never read), so a caller that owns the memory gets
the result there with no copy: :meth:`Conv2dKernel.__call__` allocates only when no
``out`` is given, and both ways run the same code.

Transposed convolutions are one matmul ``weight^T @ x`` giving every tap's contribution,
then a col2im scatter-add, one vectorised add per kernel tap, clipped to the output.
"""

from __future__ import annotations

import copy
import math
import threading
from collections.abc import Callable, Hashable
from dataclasses import replace
from functools import partial
from itertools import pairwise

import numpy as np
from graphexec.devices.cpu._depthwise_math import (
    PhaseGroup,
    bandable,
    banded_weights,
    depthwise,
    depthwise_channels_last,
    phase_groups_of,
)
from graphexec.devices.cpu._frames import fill_frame, framed, stride_phases
from graphexec.devices.cpu._winograd_math import winograd_conv, winograd_weight
from graphexec.devices.cpu.scratch import Scratch
from graphexec.layers._conv_base import Geometry, Pair, aligned, out_size, pad_input, strided, view_of

#: Winograd runs when a convolution has at least this many 2x2 output tiles over the batch
#: (16 is a 7 x 7 output) ...
WINOGRAD_MIN_TILES = 16
#: ... and ``c * cout / (c + cout)`` reaches this: Winograd saves multiplications in
#: proportion to ``c * cout`` per tile but transforms ``c`` inputs and ``cout`` outputs per
#: tile, each one more numpy pass, so what pays is their ratio. Measured on the 3x3
#: convolutions of GoogLeNet, ResNet-50, Inception v3, DenseNet-121, SqueezeNet 1.1 and
#: VGG-11, one OpenBLAS thread, 2-core AMD EPYC (F(2x2) time over im2col time): ratio 24
#: and up 0.58-0.93 (32 -> 96 on 28 x 28 0.77, 128 -> 32 on 56 x 56 0.88); below it even
#: or lost (32 -> 64 on 147 x 147, ratio 21: 1.26; 16 -> 64 on 55 x 55: 1.18; 32 -> 64 on
#: 14 x 14: 0.90, 24 -> 64: 1.10).
WINOGRAD_MIN_REDUCED_CHANNELS = 24
#: On fewer tiles than this (an output under 12 x 12) the products are bound by reading the
#: transformed weight, 16/9 of the kernel's, so Winograd runs there only for kernels of
#: fewer than :data:`WINOGRAD_MAX_WEIGHTS_FEW_TILES` channel pairs ``c * cout``: 160 -> 320
#: on 7 x 7 took 0.61x im2col's time, 448 -> 384 on 8 x 8 0.63x, 512 -> 512 on 7 x 7 1.13x.
WINOGRAD_MANY_TILES = 36
WINOGRAD_MAX_WEIGHTS_FEW_TILES = 1 << 18

#: A convolution that runs alone may be shared among idle threads by bands of its output
#: rows (:meth:`Conv2dKernel.pieces`), each band on one BLAS thread. That pays where BLAS
#: threads do not: Winograd's many small products and transforms, and an im2col whose
#: copy is as large as its product. Measured on two cores against the whole convolution
#: on two BLAS threads (interleaved runs of GoogLeNet, Inception v3, ResNet-50 and
#: SqueezeNet): Winograd on 28 x 28 to 147 x 147 ran 1.1-1.6x as fast in two bands, im2col
#: on 112 x 112 and up 1.1-1.25x. SqueezeNet's 32 -> 128 Winograd on 27 x 27 (13 M
#: multiply-adds a band) gained nothing or lost (0.75-1.1x), and so did 1x1 and small
#: im2col convolutions split by output channels instead: two BLAS threads do as well.
#: A band gets at least this many multiply-adds (counted as direct convolution) ...
SPLIT_MIN_MACS = 16_000_000
#: ... and, for Winograd, this many 2x2 tiles (384 outputs), for im2col this many output
#: positions.
SPLIT_MIN_TILES = 96
SPLIT_MIN_POSITIONS = 2048
#: Winograd on too few tiles for bands of rows (a 14 x 14 output has 49) is shared out by
#: bands of its output channels instead, from this many multiply-adds a band: each band
#: transforms the whole input again but reads only its share of the transformed weight,
#: which is the larger part there (4.2 MB for 256 -> 256). Measured with F(4x4, 3x3),
#: whose transformed weight was 2.25x larger, against the whole convolution on one thread
#: and on two BLAS threads (which keep these products on one, or gain 1.5x), 2-core AMD
#: EPYC: ResNet-50's 256 -> 256 on 14 x 14 (58 M a band) ran
#: 1.96x as fast in two bands, GoogLeNet's 160 -> 320 (45 M) 1.28x and 144 -> 288 (37 M)
#: 1.21x; 128 -> 256 (29 M) 1.14x and 96 -> 208 (18 M) 1.01x, too little for a hand-over.
#: Such nodes keep their Winograd weights, which the im2col they ran as before gave back:
#: after a run, ResNet-50's process held 248 MiB where it held 230.
SPLIT_MIN_CHANNEL_MACS = 32_000_000
#: A depthwise convolution is shared out by channels (by images in a batch) from this many
#: multiply-adds (outputs x taps): no BLAS thread helps it, so one core did all of it. The
#: bands add each output's taps in the whole convolution's order, so they give its bits.
#: Measured on EfficientNet-B0's depthwise layers with their SiLU, two threads against one:
#: on a 2-core AMD EPYC, 2.7-4.7 M multiply-adds ran 1.24-1.68x as fast; on a 2-core Xeon
#: (AVX-512, where a thread wake-up takes ~35 us and each of the bands' many small numpy
#: calls may wait for the GIL) the whole network ran 1.37x as fast with none of its layers
#: (at most 4.7 M) shared out, and MobileNet v2 and v3 no slower (21 interleaved rounds).
SPLIT_MIN_DEPTHWISE_MACS = 5_000_000


#: A 1x1 convolution with a stored bias folds the bias into its matmul (its input copied
#: under a row of ones, like im2col's columns) when it has at least this many times as
#: many output channels as input ones: the copy, a plain one of C rows, then costs less
#: than adding the bias over the Cout rows of the output. Measured per convolution on a
#: 2-core AMD EPYC, 1 and 2 BLAS threads: 4x wider (ResNet-50's 64 -> 256 to 512 -> 2048,
#: SqueezeNet's 16 -> 64, MobileNet's 16 -> 72) took 0.70-0.96x the time, 2-3x (48 -> 96,
#: 40 -> 120, 160 -> 320) 0.87-1.01x; as wide (ShuffleNet's 58 -> 58) 0.88-1.20x and
#: narrower (256 -> 64, 1024 -> 256) 1.03-1.16x lose.
ONES_ROW_MIN_EXPANSION = 2

#: A k x k convolution (groups 1, zero padding, float32) takes im2col by positions when its
#: input has at least this many times its output channels. Measured on two cores against
#: im2col by channels (whole convolution, 1 and 2 BLAS threads): 128 -> 32 ran 0.53-0.94x
#: the time (0.60-0.87x on two threads, 7 x 7 to 56 x 56), 512 -> 512 and 128 -> 128 even
#: (0.93-1.05x), 64 -> 64 and 48 -> 64 1.05-1.11x: the channels-last copy and the output's
#: transpose then cost more than BLAS gains.
BY_POSITIONS_MIN_RATIO = 4

#: im2col reads a strided convolution's input through its stride phases (copied apart
#: once, each then read with unit steps) when every input element lands in this many
#: columns or more (``kh * kw >= this * sh * sw``). Measured against gathering each column
#: with the stride, one thread, 2-core AMD EPYC: ResNet's and GoogLeNet's 7 x 7 stride-2
#: stems took 0.35-0.5x the time, AlexNet's 11 x 11 stride 4 0.7x, 5 x 5 stride 2 0.8-0.9x;
#: 3 x 3 stride 2 (2.25 columns per element) ran from 0.6x to 1.15x, so it is left alone.
PHASE_SPLIT_MIN_REUSE = 4



class Conv2dKernel:
    """A 2-D cross-correlation with its weight (Cout, C/G, kh, kw) laid out for its path.

    ``prepare=True`` (stored weights) keeps the weight in aligned memory and lets 3x3
    convolutions use Winograd; ``prepare=False`` (weights that arrive as graph values) uses
    the weight as given unless it is misaligned. ``biased``: the layer's own (G, Cout/G,
    K + 1) matrix holding the weight and, as its last column, the bias, used as it is
    (the weight given is then its view) so the weight is never held twice.

    What a path derives from the weight (Winograd's transformed weight, banded depthwise
    weights, kernels of bands of channels) is made by :meth:`prepare` for each input shape
    the plan will run, before any run; a run only reads it. ``scratch`` lends the
    working memory (one set of buffers per thread).
    """

    def __init__(self, weight: np.ndarray, bias: np.ndarray | None, geo: Geometry, *, prepare: bool = True,
                 scratch: Scratch | None = None, biased: np.ndarray | None = None):
        self.scratch = scratch if scratch is not None else Scratch()
        if not _is_aligned(weight) and not (biased is not None and np.may_share_memory(weight, biased)):
            weight = aligned(weight, weight.dtype)  # numpy's matmul skips BLAS on misaligned data
        if bias is not None and not _is_aligned(bias):
            bias = aligned(bias, bias.dtype)
        self.weight = weight
        self.bias = bias
        self.geo = geo
        cout, cg, kh, kw = weight.shape
        groups = geo.groups
        self.kernel_size = (kh, kw)
        self.pads = geo.pads((kh, kw))
        #: (G, Cout/G, C/G * kh * kw): the im2col matrix, a view.
        self.matrix = weight.reshape(groups, cout // groups, cg * kh * kw)
        self.depthwise = cg == 1 and groups > 1 and cout % groups == 0
        #: The im2col matrix with the bias as an extra last column (stored weights of the
        #: paths that fold their bias into the matmul: not depthwise, not a narrowing 1x1).
        self.biased = None
        widens = cout // groups >= ONES_ROW_MIN_EXPANSION * cg
        if biased is not None and biased.shape == (groups, cout // groups, cg * kh * kw + 1):
            self.matrix = biased[:, :, :-1]
            if not self.depthwise and ((kh, kw) != (1, 1) or widens):
                self.biased = biased
        elif prepare and bias is not None and not self.depthwise and ((kh, kw) != (1, 1) or widens):
            biased = np.concatenate([self.matrix, bias.reshape(groups, cout // groups, 1)], axis=2)
            self.biased = aligned(biased, np.result_type(weight.dtype, bias.dtype))
            if self.biased.dtype == weight.dtype:
                # The weight as a view of the biased matrix (rows K + 1 apart), not a second
                # copy: ResNet-50 held 45 MB of its 3x3 convolutions' weights twice.
                self.weight = weight = view_of(self.biased[:, :, :-1], weight.shape)
                self.matrix = self.biased[:, :, :-1]
        self.winograd = (
            prepare and (kh, kw) == (3, 3) and groups == 1 and geo.stride == (1, 1)
            and geo.dilation == (1, 1) and geo.padding_mode == "zeros" and weight.dtype == np.float32
        )
        #: Whether im2col by positions may run (see :data:`BY_POSITIONS_MIN_RATIO`).
        self._by_positions = (
            prepare and groups == 1 and kh * kw > 1 and geo.padding_mode == "zeros" and weight.dtype == np.float32
        )
        if self.depthwise:
            #: (C, multiplier, kh * kw) and, for channels-last runs, (kh * kw, C).
            self.taps = weight.reshape(groups, cout // groups, kh * kw)
            self.taps_last = aligned(self.taps[:, 0, :].T, weight.dtype) if cout == groups else None
        #: Whether a depthwise convolution may run as banded matrix products (stored weights,
        #: one output channel per input one: see :func:`~graphexec.devices.cpu._depthwise_math.depthwise_banded`).
        self.banded = prepare and self.depthwise and cout == groups and bandable((kh, kw), geo)
        #: What the paths derive from the weight, by what it is (see :meth:`derived`).
        self._derived: dict[Hashable, object] = {}
        #: The thread running :meth:`prepare` (the only one that adds to ``_derived``).
        self._preparing: int | None = None
        self._prepare_lock = threading.Lock()

    def derived(self, key: Hashable, make: Callable[[], object]) -> object:
        """What ``make()`` derives from the weight, kept under ``key`` when it is made while
        :meth:`prepare` runs, else (a shape no plan prepared for) made for this call only."""
        found = self._derived.get(key)
        if found is None:
            found = make()
            if self._preparing == threading.get_ident():
                self._derived[key] = found
        return found

    def prepare(self, shape: tuple[int, ...], dtype: np.dtype | type = np.float32, pieces: int = 1) -> None:
        """Make what runs of inputs of ``shape`` (N, C, H, W) and ``dtype`` need, whole and,
        with ``pieces`` > 1, cut into that many pieces (:meth:`pieces`), by running them once
        on zeros: every path then finds what it derives from the weight already made."""
        x = np.zeros(shape, dtype=dtype)
        out_shape, out_dtype, _, _ = self.plan(tuple(shape), np.dtype(dtype))
        if min(out_shape) < 1:
            return
        out = np.empty(out_shape, dtype=out_dtype)
        with self._prepare_lock:
            self._preparing = threading.get_ident()
            try:
                self(x, out)
                for run, _ in self.pieces(x, out, pieces) or []:
                    run()
            finally:
                self._preparing = None

    @property
    def phase_groups(self) -> tuple[PhaseGroup, ...]:
        """The channels-last taps grouped by stride phase (see :func:`phase_groups_of`)."""
        return self.derived("phase groups", lambda: phase_groups_of(self.taps_last, self.kernel_size, self.geo))

    def along_row(self, group: PhaseGroup, width: int, dtype: np.dtype) -> np.ndarray:
        """``group``'s weights repeated along a row of ``width`` (see :meth:`PhaseGroup.along_row`)."""
        return self.derived(("along row", group.phase, width, np.dtype(dtype)), lambda: group.along_row(width, dtype))

    def banded_weights(self, tile: int, dtype: np.dtype) -> np.ndarray:
        """The taps as :func:`~graphexec.devices.cpu._depthwise_math.banded_weights` for bands of
        ``tile`` output columns."""
        return self.derived(("banded", tile, np.dtype(dtype)),
                            lambda: banded_weights(self.taps, self.kernel_size, tile, dtype))

    @property
    def by_positions(self) -> np.ndarray:
        """The weight as (kh * kw * C, Cout), taps outermost: im2col by positions' right operand."""
        def make() -> np.ndarray:
            cout, c, kh, kw = self.weight.shape
            return aligned(self.weight.transpose(2, 3, 1, 0).reshape(kh * kw * c, cout), self.weight.dtype)
        return self.derived("by positions", make)

    def output_shape(self, shape: tuple[int, ...]) -> tuple[int, int, int, int]:
        """(N, Cout, Ho, Wo) for an input of ``shape`` (N, C, H, W); Ho or Wo may be < 1."""
        n, _, h, w = shape
        (kh, kw), (top_bottom, left_right) = self.kernel_size, self.pads
        (sh, sw), (dh, dw) = self.geo.stride, self.geo.dilation
        return (n, self.weight.shape[0], out_size(h, kh, sh, dh, top_bottom), out_size(w, kw, sw, dw, left_right))

    def output_dtype(self, dtype: np.dtype) -> np.dtype:
        """The dtype the kernel computes in for an input of ``dtype``."""
        return np.result_type(dtype, self.weight.dtype)

    def path(self, shape: tuple[int, ...], dtype: np.dtype | type = np.float32) -> str:
        """Which path runs an input of ``shape``: depthwise, winograd, 1x1, positions or im2col."""
        if self.depthwise and shape[1] == self.geo.groups:
            return "depthwise"
        if self.winograd and np.dtype(dtype) == np.float32 and winograd_tile(shape, self.pads, self.weight.shape[0]):
            return "winograd"
        if self.kernel_size == (1, 1) and self.geo.stride == (1, 1) and not any(map(any, self.pads)):
            return "1x1"
        if self._by_positions and np.dtype(dtype) == np.float32 and shape[1] >= BY_POSITIONS_MIN_RATIO * self.weight.shape[0]:
            return "positions"
        return "im2col"

    def plan(self, shape: tuple[int, ...], dtype: np.dtype) -> tuple:
        """(output shape, output dtype, path, Winograd tile or None) for an input."""
        def make() -> tuple:
            path = self.path(shape, dtype)
            tile = winograd_tile(shape, self.pads, self.weight.shape[0]) if path == "winograd" else None
            return self.output_shape(shape), self.output_dtype(dtype), path, tile
        return self.derived(("plan", shape, dtype), make)  # type: ignore[return-value]

    def __call__(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """``x`` (N, C, H, W) -> (N, Cout, Ho, Wo), written into ``out`` when given.

        ``out`` must be C-contiguous, of the output's shape and of :meth:`output_dtype`;
        whatever it held is overwritten. Returns ``out`` (or the new array).
        """
        shape, dtype, path, m = self.plan(x.shape, x.dtype)
        if out is None:
            out = np.empty(tuple(max(d, 0) for d in shape), dtype=dtype)
        elif out.shape != shape or out.dtype != dtype or not out.flags.c_contiguous:
            raise ValueError(f"out should be a C-contiguous {dtype} array of shape {shape}, "
                             f"given {out.dtype} {out.shape}{'' if out.flags.c_contiguous else ' (not contiguous)'}")
        if min(shape) < 1:
            return out
        geo = self.geo
        if path == "depthwise":
            self._depthwise(x, out, self)
        elif path == "winograd":
            winograd_conv(self.scratch, x, self._winograd(m), self.bias, self.pads, m, out)  # type: ignore[arg-type]
        elif path == "positions":
            positions_conv(self.scratch, x, self.by_positions, self.bias, self.kernel_size, self.pads, geo, out)
        else:
            im2col_conv(self.scratch, x, self.matrix, self.bias, self.kernel_size, self.pads, geo, out, self.biased)
        return out

    def splits(self, shape: tuple[int, ...], dtype: np.dtype | type = np.float32) -> bool:
        """Whether :meth:`pieces` shares out an input of ``shape`` (see :data:`SPLIT_MIN_TILES`)."""
        out_shape, _, path, m = self.plan(tuple(shape), np.dtype(dtype))
        n, _, ho, wo = out_shape
        if min(out_shape) < 1:
            return False
        if path == "depthwise":
            kh, kw = self.kernel_size
            return math.prod(out_shape) * kh * kw >= SPLIT_MIN_DEPTHWISE_MACS and (n >= 2 or shape[1] >= 4)
        macs = math.prod(out_shape) * self.matrix.shape[2]  # counted as direct convolution
        if self.geo.groups != 1 or macs < 2 * SPLIT_MIN_MACS:
            return False
        if path == "winograd":
            return self._row_bands(out_shape, m) or macs >= 2 * SPLIT_MIN_CHANNEL_MACS
        return path in ("im2col", "positions") and ho >= 2 and n * ho * wo >= 2 * SPLIT_MIN_POSITIONS

    def pieces(self, x: np.ndarray, out: np.ndarray, count: int) -> list[tuple[Callable[[], None], tuple[slice, ...]]] | None:
        """``self(x, out)`` as up to ``count`` bands of output rows (Winograd on few tiles: of
        output channels; depthwise: of channels, or of images in a batch), (run, region of
        ``out``) pairs that may run on different threads at once; None where :meth:`splits`
        says the convolution runs whole."""
        shape, dtype, path, m = self.plan(x.shape, x.dtype)
        if count < 2 or not self.splits(x.shape, x.dtype) or out.shape != shape or out.dtype != dtype \
                or not out.flags.c_contiguous:
            return None
        if path == "depthwise":
            return self._depthwise_pieces(x, out, count)
        every = slice(None)
        if path == "winograd" and not self._row_bands(shape, m):
            return [(partial(self._out_channels, x, out, m, c0, c1), (every, slice(c0, c1)))
                    for c0, c1 in _bounds(shape[1], count)]
        step = m if path == "winograd" else 1  # Winograd's bands are whole rows of tiles
        ho = shape[2]
        return [(partial(self._rows, x, out, r0 * step, min(ho, r1 * step)), (every, every, slice(r0 * step, r1 * step)))
                for r0, r1 in _bounds(-(-ho // step), count)]

    @staticmethod
    def _row_bands(out_shape: tuple[int, ...], m: int) -> bool:
        """Whether Winograd's output has tiles enough for two bands of rows."""
        n, _, ho, wo = out_shape
        return ho >= 2 * m and n * -(-ho // m) * -(-wo // m) >= 2 * SPLIT_MIN_TILES

    def _out_channels(self, x: np.ndarray, out: np.ndarray, m: int, c0: int, c1: int) -> None:
        """Output channels ``c0:c1`` of ``self(x, out)`` by Winograd: the whole input's tiles,
        that band's rows of the transformed weight."""
        bias = None if self.bias is None else self.bias[c0:c1]
        winograd_conv(self.scratch, x, self._winograd(m)[:, c0:c1], bias, self.pads, m, out[:, c0:c1])

    def _rows(self, x: np.ndarray, out: np.ndarray, r0: int, r1: int) -> None:
        """Output rows ``r0:r1`` of ``self(x, out)``."""
        _, _, path, m = self.plan(x.shape, x.dtype)
        if path == "winograd":  # the band's own input rows, padded as the band needs
            (top, _), (left, right) = self.pads
            h = x.shape[2]
            i0, i1 = r0 - top, r1 + 2 - top
            pads = ((max(0, -i0), max(0, i1 - h)), (left, right))
            winograd_conv(self.scratch, x[:, :, max(0, i0):min(h, i1)], self._winograd(m), self.bias, pads, m,
                          out[:, :, r0:r1])
        elif path == "positions":
            positions_conv(self.scratch, x, self.by_positions, self.bias, self.kernel_size, self.pads, self.geo, out,
                           rows=(r0, r1))
        else:
            im2col_conv(self.scratch, x, self.matrix, self.bias, self.kernel_size, self.pads, self.geo, out, self.biased,
                        rows=(r0, r1))

    def _depthwise_pieces(self, x: np.ndarray, out: np.ndarray, count: int
                          ) -> list[tuple[Callable[[], None], tuple[slice, ...]]]:
        """Whole images when the batch has two or more (each band contiguous in ``x`` and
        ``out``), else bands of channels, each run by a kernel of its channels' taps in the
        layout the whole convolution would use (so the bands add their taps in its order)."""
        n, c = x.shape[:2]
        if n >= 2:
            return [(partial(self, x[i0:i1], out[i0:i1]), (slice(i0, i1),)) for i0, i1 in _bounds(n, count)]
        last = self._depthwise_layout(x.shape)
        mult = self.taps.shape[1]
        every = slice(None)
        return [(partial(self._depthwise, x[:, c0:c1], out[:, c0 * mult:c1 * mult], self._channels(c0, c1), last),
                 (every, slice(c0 * mult, c1 * mult)))
                for c0, c1 in _bounds(c, min(count, c // 2))]  # a band of one channel is no depthwise kernel

    def _channels(self, c0: int, c1: int) -> Conv2dKernel:
        """The depthwise kernel of input channels ``c0:c1`` (what it derives is made as this
        kernel's is: while :meth:`prepare` runs on this thread)."""
        def make() -> Conv2dKernel:
            mult = self.taps.shape[1]
            bias = None if self.bias is None else self.bias[c0 * mult:c1 * mult]
            kernel = Conv2dKernel(self.weight[c0 * mult:c1 * mult], bias, replace(self.geo, groups=c1 - c0),
                                  scratch=self.scratch)
            kernel._preparing = self._preparing
            return kernel
        return self.derived(("channels", c0, c1), make)  # type: ignore[return-value]

    def _depthwise(self, x: np.ndarray, out: np.ndarray, kernel: Conv2dKernel,
                   channels_last: bool | None = None) -> None:
        """``kernel``'s depthwise convolution of ``x`` into ``out``, padded as this one pads."""
        if self.geo.padding_mode == "zeros":
            depthwise(x, kernel, self.pads, out, channels_last)
        else:
            depthwise(pad_input(x, self.pads, self.geo.padding_mode), kernel, ((0, 0), (0, 0)), out, channels_last)

    def _depthwise_layout(self, shape: tuple[int, ...]) -> bool:
        """Whether :func:`depthwise` runs an input of ``shape`` channels-last."""
        pads = self.pads
        if self.geo.padding_mode != "zeros":
            (top, bottom), (left, right) = pads
            shape = (*shape[:2], shape[2] + top + bottom, shape[3] + left + right)
            pads = ((0, 0), (0, 0))
        return depthwise_channels_last(shape, self, pads)

    def _winograd(self, m: int) -> np.ndarray:
        """The weight transformed for F(m x m, 3x3)."""
        return self.derived(("winograd", m), lambda: winograd_weight(self.weight, m))  # type: ignore[return-value]

    def without_winograd(self) -> Conv2dKernel:
        """This kernel with the same weights, taking im2col where it would take Winograd.

        Winograd's 16 per-frequency products are small, and more BLAS threads barely speed
        them up, where the one im2col product scales nearly with the threads: a 3x3
        convolution that runs whole on several BLAS threads is faster by im2col (measured in
        docs/design/threads.md, "Nodes shared out")."""
        kernel = copy.copy(self)
        kernel.winograd = False
        kernel._derived = {}
        kernel._prepare_lock = threading.Lock()
        return kernel


def _is_aligned(a: np.ndarray, align: int = 64) -> bool:
    return a.flags.c_contiguous and a.ctypes.data % align == 0


def _bounds(total: int, count: int) -> list[Pair]:
    """``range(total)`` cut into ``count`` (at most ``total``) runs of nearly equal length."""
    count = max(1, min(count, total))
    cuts = [total * k // count for k in range(count + 1)]
    return list(pairwise(cuts))


def conv2d(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, geo: Geometry,
           scratch: Scratch | None = None) -> np.ndarray:
    """Cross-correlation of ``x`` (N, C, H, W) with ``weight`` (Cout, C/G, kh, kw), plus bias."""
    return Conv2dKernel(weight, bias, geo, prepare=False, scratch=scratch)(x)


# ----------------------------------------------------------------------------------------
# im2col (and 1x1)
# ----------------------------------------------------------------------------------------
def im2col_conv(scratch: Scratch, x: np.ndarray, matrix: np.ndarray, bias: np.ndarray | None, kernel: Pair,
                pads: tuple[Pair, Pair], geo: Geometry, out: np.ndarray,
                biased: np.ndarray | None = None, rows: Pair | None = None) -> np.ndarray:
    """One (group-batched) matmul of the weight matrix with the input's columns, into ``out``
    (N, Cout, Ho, Wo). ``biased``, the matrix with the bias as a last column, folds the
    bias into the matmul (the columns then get a row of ones); else the bias is added.
    ``rows`` (r0, r1): compute only those output rows (the rest of ``out`` is untouched)."""
    n, _, ho, wo = out.shape
    groups, per_group, depth = matrix.shape
    cout = groups * per_group
    r0, r1 = rows if rows is not None else (0, ho)
    fold = biased is not None and biased.dtype == np.result_type(x.dtype, biased.dtype)
    cols = im2col_columns(scratch, x, depth, groups, kernel, pads, geo, (ho, wo), fold, (r0, r1))
    band = out.reshape(n, groups, per_group, ho * wo)[..., r0 * wo:r1 * wo]  # a view: out is contiguous
    if fold:
        _matmul_into(biased, cols, band)  # type: ignore[arg-type]
    else:
        _matmul_into(matrix, cols, band)
        if bias is not None:
            np.add(out[:, :, r0:r1], bias.reshape(cout, 1, 1), out=out[:, :, r0:r1])
    return out


def im2col_columns(scratch: Scratch, x: np.ndarray, depth: int, groups: int, kernel: Pair, pads: tuple[Pair, Pair],
                   geo: Geometry, size: Pair, fold: bool, rows: Pair) -> np.ndarray:
    """The columns (N, G, depth [+ 1 row of ones when ``fold``], positions) of output rows
    ``rows`` of a convolution giving ``size`` (Ho, Wo): a view of ``x`` for an unpadded 1x1
    stride-1 one, else a copy in this thread's scratch."""
    n, c, h, w = x.shape
    (kh, kw), (ho, wo), (r0, r1) = kernel, size, rows
    (top, bottom), (left, right) = pads
    (sh, sw), (dh, dw) = geo.stride, geo.dilation
    padded = bool(top or bottom or left or right)
    if kh == kw == 1 and (sh, sw) == (1, 1) and not padded:
        # The input is the column matrix: (N, G, C/G, H * W), a view when contiguous ...
        matrix = x.reshape(n, groups, depth, ho * wo)[..., r0 * wo:r1 * wo]
        if not fold:
            return matrix
        cols, fresh = scratch.kept("cols", (n, groups, depth + 1, (r1 - r0) * wo), x.dtype, "ones")
        if fresh:
            cols[:, :, depth] = 1
        np.copyto(cols[:, :, :depth], matrix)  # ... copied whole rows at a time under the ones
        return cols
    positions = (r1 - r0) * wo
    if fold:  # the row of ones after the columns is kept between calls
        cols, fresh = scratch.kept("cols", (n, groups, depth + 1, positions), x.dtype, "ones")
        if fresh:
            cols[:, :, depth] = 1
    else:
        cols = scratch.take("cols", (n, groups, depth, positions), x.dtype)
    target = cols[:, :, :depth].reshape(n, groups, c // groups, kh, kw, r1 - r0, wo)
    if phase_split_pays((kh, kw), geo) and (not padded or geo.padding_mode == "zeros"):
        _copy_windows_by_phase(scratch, x, (top, left), geo.stride, (r0, r1), target)
        return cols
    if not padded:
        xp = x
    elif geo.padding_mode != "zeros":
        xp = pad_input(x, pads, geo.padding_mode)
    else:
        xp = framed(scratch, "pad", x, (n, c, h + top + bottom, w + left + right), top, left)
    s_n, s_c, s_h, s_w = xp.strides
    window = strided(xp[:, :, r0 * sh:] if r0 else xp, (n, groups, c // groups, kh, kw, r1 - r0, wo),
                     (s_n, s_c * (c // groups), s_c, s_h * dh, s_w * dw, s_h * sh, s_w * sw))
    np.copyto(target, window)
    return cols


def phase_split_pays(kernel: Pair, geo: Geometry) -> bool:
    """Whether im2col reads a strided convolution's input through its stride phases: when
    each input element lands in :data:`PHASE_SPLIT_MIN_REUSE` or more columns, one strided
    gather of the input costs less than gathering every column with the stride."""
    (kh, kw), (sh, sw) = kernel, geo.stride
    return sh * sw > 1 and geo.dilation == (1, 1) and kh * kw >= PHASE_SPLIT_MIN_REUSE * sh * sw


def _copy_windows_by_phase(scratch: Scratch, x: np.ndarray, offset: Pair, stride: Pair, rows: Pair, target: np.ndarray) -> None:
    """im2col's columns of output rows ``rows`` into ``target`` (N, G, C/G, kh, kw, rows, Wo)
    from the stride phases of ``x`` zero-padded at ``offset`` (dilation 1). Tap (i, j) reads
    phase (i % sh, j % sw) at shift (i // sh, j // sw): one unit-step window per phase
    fills the taps of that phase, a strided slice of ``target``."""
    n, groups, per_group, kh, kw, count, wo = target.shape
    (sh, sw), (r0, r1) = stride, rows
    size = (r1 + (kh - 1) // sh, wo + (kw - 1) // sw)
    phases = stride_phases(scratch, "im2col phases", x, offset, stride, size, x.dtype)
    for a in range(min(sh, kh)):
        for b in range(min(sw, kw)):
            phase = phases[a, b]
            s_n, s_c, s_h, s_w = phase.strides
            taps = (len(range(a, kh, sh)), len(range(b, kw, sw)))
            window = strided(phase.reshape(-1)[r0 * size[1]:], (n, groups, per_group) + taps + (count, wo),
                             (s_n, s_c * per_group, s_c, s_h, s_w, s_h, s_w))
            np.copyto(target[:, :, :, a::sh, b::sw], window)


def _matmul_into(matrix: np.ndarray, cols: np.ndarray, out: np.ndarray) -> None:
    """``out`` (N, G, Cout/G, L) = ``matrix`` (G, Cout/G, K) @ ``cols`` (N, G, K, L); one BLAS
    call when N == G == 1. ``out`` may be a view whose rows are apart (a band of rows)."""
    if out.shape[0] == 1 and out.shape[1] == 1:
        np.matmul(matrix[0], cols[0, 0], out=out[0, 0])
    else:
        np.matmul(matrix, cols, out=out)


def positions_conv(scratch: Scratch, x: np.ndarray, matrix: np.ndarray, bias: np.ndarray | None, kernel: Pair,
                   pads: tuple[Pair, Pair], geo: Geometry, out: np.ndarray, rows: Pair | None = None) -> np.ndarray:
    """im2col by positions into ``out`` (N, Cout, Ho, Wo): the zero-padded input copied
    channels-last once, its windows copied as rows (one per output position, kh * kw * C
    long, C contiguous), ``(L, K) @ matrix (K, Cout)``, and the result transposed into
    ``out`` with the bias added on the way. ``rows`` (r0, r1): only those output rows."""
    n, c, h, w = x.shape
    _, cout, ho, wo = out.shape
    (kh, kw), ((top, bottom), (left, right)) = kernel, pads
    (sh, sw), (dh, dw) = geo.stride, geo.dilation
    r0, r1 = rows if rows is not None else (0, ho)
    hp, wp = h + top + bottom, w + left + right
    last, fresh = scratch.kept("last", (n, hp, wp, c), x.dtype, ("frame", x.shape, top, left))
    if fresh:
        fill_frame(last, (top, top + h), (left, left + w), axis=1)
    y0, y1 = max(0, r0 * sh - top), min(h, (r1 - 1) * sh + (kh - 1) * dh + 1 - top)  # the input rows used
    if y1 > y0:
        last[:, top + y0:top + y1, left:left + w, :] = x[:, :, y0:y1, :].transpose(0, 2, 3, 1)
    s_n, s_h, s_w, s_c = last.strides
    count = r1 - r0
    window = strided(last[:, r0 * sh:], (n, count, wo, kh, kw, c), (s_n, s_h * sh, s_w * sw, s_h * dh, s_w * dw, s_c))
    depth = kh * kw * c
    cols = scratch.take("cols", (n, count * wo, depth), x.dtype)
    np.copyto(cols.reshape(n, count, wo, kh, kw, c), window)
    product = scratch.take("product", (n, count * wo, cout), out.dtype)
    np.matmul(cols, matrix, out=product)
    transposed = product.reshape(n, count, wo, cout).transpose(0, 3, 1, 2)
    band = out[:, :, r0:r1]
    if bias is None:
        np.copyto(band, transposed)
    else:
        np.add(transposed, bias.reshape(cout, 1, 1), out=band)
    return out


# ----------------------------------------------------------------------------------------
# Winograd F(2x2, 3x3): which tile (the math is in graphexec.devices.cpu._winograd_math)
# ----------------------------------------------------------------------------------------
def _tiles(size: int, pads: Pair, m: int) -> int:
    return -(-(size + pads[0] + pads[1] - 2) // m)


def winograd_tile(shape: tuple[int, ...], pads: tuple[Pair, Pair], cout: int) -> int | None:
    """The output tile size m of the Winograd F(m x m, 3x3) worth running on an input of
    ``shape`` (N, C, H, W) giving ``cout`` channels, or None when the im2col matmul is the
    better choice (see :data:`WINOGRAD_MIN_REDUCED_CHANNELS`)."""
    n, c, h, w = shape
    tiles = n * _tiles(h, pads[0], 2) * _tiles(w, pads[1], 2)
    if tiles < WINOGRAD_MIN_TILES or c * cout < WINOGRAD_MIN_REDUCED_CHANNELS * (c + cout):
        return None
    if tiles < WINOGRAD_MANY_TILES and c * cout >= WINOGRAD_MAX_WEIGHTS_FEW_TILES:
        return None
    return 2


# ----------------------------------------------------------------------------------------
# transposed
# ----------------------------------------------------------------------------------------
