"""Moving data without arithmetic: concat and stack (each input copied straight into its
slice of the output), channel shuffle, roll, repeat_interleave, unfold's windows, the
model's constants, and every view layer (chunk, split, slice, select, narrow, reshape,
flatten, squeeze, permute, transpose, flip, expand, ...).

A view layer runs the CPU layer's own ``forward`` on a *phantom*: a numpy array of the
input's shape and strides over a one-byte buffer, whose result's offset and strides say
where each output lives, without numpy ever touching the data (every layer listed in
:data:`VIEW_LAYERS` only slices, reshapes a contiguous array, or transposes). An output
that is contiguous there is the same buffer at another offset (no kernel, the input's
event); any other is gathered by one strided copy (``kernels/copy.cl``) into a new buffer.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from graphexec.devices.opencl.device import DeviceTensor, contiguous_strides
from graphexec.devices.opencl.ops.base import Launch, Op, implements, refused_shapes
from graphexec.devices.opencl.ops.expression import collapse
from graphexec.errors import DeviceError
from graphexec.layers import plumbing, slicing
from graphexec.layers import shape as shape_layers
from graphexec.layers.aten_shape import Windows
from graphexec.layers.base import normalize_axis

#: The copy kernel's element type per itemsize (copies are bit-exact for any dtype).
ELEM_TYPES = {1: "uchar", 2: "ushort", 4: "uint", 8: "ulong"}
#: Dims the copy kernel indexes (after merging adjacent dims).
COPY_RANK = 6


def copy_strided(launch: Launch, src: DeviceTensor, src_offset: int, src_strides: Sequence[int],
                 dst: DeviceTensor, dst_offset: int, dst_strides: Sequence[int], shape: Sequence[int]) -> None:
    """dst[dst_offset + i . dst_strides] = src[src_offset + i . src_strides] over ``shape``
    (offsets in elements, relative to each tensor's own offset)."""
    if math.prod(shape) == 0:
        return
    dims, (ss, ds) = collapse(tuple(shape), [tuple(src_strides), tuple(dst_strides)])
    if not dims or (len(dims) == 1 and ss[0] == 1 and ds[0] == 1):
        launch.copy(dst, src, math.prod(dims), dst_offset=dst_offset, src_offset=src_offset)
        return
    if len(dims) > COPY_RANK:
        raise DeviceError(f"a strided copy over {len(dims)} dims (more than {COPY_RANK})")
    pad = COPY_RANK - len(dims)
    dims, ss, ds = (1,) * pad + dims, (0,) * pad + ss, (0,) * pad + ds
    n = math.prod(dims)
    built = launch.program("copy", ELEM=ELEM_TYPES[src.dtype.itemsize])
    launch.enqueue_1d(built, "copy_strided", n, src.buffer, src.offset + src_offset, dst.buffer,
                      dst.offset + dst_offset, n, *dims, *ss, *ds)


def _copyable(specs) -> str | None:
    for i, spec in enumerate(specs):
        if spec.dtype.itemsize not in ELEM_TYPES:
            return f"input {i} has dtype {spec.dtype}, which the copy kernel does not move"
    return None


# ------------------------------------------------------------------------------------------
# joining
# ------------------------------------------------------------------------------------------
@implements(slicing.Cat, slicing.Stack)
class JoinOp(Op):
    """torch.cat / torch.stack: one copy per input into its place in the output, but for
    an input of a cat that its producer already wrote there."""

    float_only = False

    def check_shapes(self, layer, specs):
        if any(s.dtype != specs[0].dtype for s in specs):
            return "inputs of different dtypes (promotion) are left to the CPU"
        if len(specs[0].shape) + isinstance(layer, slicing.Stack) > COPY_RANK:
            return f"rank above {COPY_RANK}"
        return refused_shapes(layer, [s.shape for s in specs]) or _copyable(specs)

    def run(self, launch, layer, inputs):
        (out_shape,) = layer.infer_shapes([t.shape for t in inputs])
        out = launch.output(0, out_shape, inputs[0].dtype)
        strides = contiguous_strides(out_shape)
        stack = isinstance(layer, slicing.Stack)
        if not stack:  # torch.cat leaves 1-d empty inputs out
            inputs = [t for t in inputs if not slicing.legacy_empty(t.shape)]
            if not inputs:
                return [out]
        axis = normalize_axis(layer.dim, len(out_shape))
        start = 0
        for t in inputs:
            if stack:
                dst_strides = strides[:axis] + strides[axis + 1:]
                copy_strided(launch, t, 0, contiguous_strides(t.shape), out, start * strides[axis], dst_strides,
                             t.shape)
                start += 1
            else:
                place = start * strides[axis]
                if not _lies_at(t, out, place, out_shape[:axis]):  # else its producer wrote it there
                    copy_strided(launch, t, 0, contiguous_strides(t.shape), out, place, strides, t.shape)
                start += t.shape[axis]
        return [out]


def _lies_at(tensor: DeviceTensor, out: DeviceTensor, place: int, before: Sequence[int]) -> bool:
    """Whether ``tensor`` already is its part of ``out``, ``place`` elements in (the memory
    plan put it there, see ``Cat.input_offsets``): one contiguous run, at that offset."""
    return tensor.buffer is out.buffer and tensor.offset == out.offset + place and math.prod(before) == 1


@implements(slicing.ChannelShuffle)
class ChannelShuffleOp(Op):
    """(N, g*k, *) -> (N, k*g, *): one strided copy."""

    float_only = False

    def check_shapes(self, layer, specs):
        return refused_shapes(layer, [specs[0].shape]) or _copyable(specs)

    def run(self, launch, layer, inputs):
        x = inputs[0]
        n, c = x.shape[:2]
        rest = math.prod(x.shape[2:])
        g = layer.groups
        k = c // g
        out = launch.output(0, x.shape, x.dtype)
        # dst walked as (n, j, i, r) -> channel j*g + i, read from channel i*k + j
        copy_strided(launch, x, 0, (c * rest, rest, k * rest, 1), out, 0, (c * rest, g * rest, rest, 1),
                     (n, k, g, rest))
        return [out]


@implements(shape_layers.Clone)
class CloneOp(Op):
    float_only = False

    def check_shapes(self, layer, specs):
        return _copyable(specs)

    def run(self, launch, layer, inputs):
        x = inputs[0]
        out = launch.output(0, x.shape, x.dtype)
        launch.copy(out, x)
        return [out]


@implements(shape_layers.Roll)
class RollOp(Op):
    """torch.roll: a shift cuts each rolled dim in two, so 2**k strided copies (k rolled dims)
    move the pieces to their places; Swin's shifted windows roll two dims, four copies."""

    float_only = False

    def check(self, layer):
        return "shifts given at run time are left to the host" if layer.shifts is None else None

    def check_shapes(self, layer, specs):
        shape = specs[0].shape
        if len(shape) > COPY_RANK:
            return f"rank above {COPY_RANK}"
        return refused_shapes(layer, [shape]) or _copyable(specs)

    def run(self, launch, layer, inputs):
        x = inputs[0]
        out = launch.output(0, x.shape, x.dtype)
        shape = (x.size,) if layer.dims is None else x.shape
        shifts = [0] * len(shape)
        for dim, shift in zip(layer.dims or (0,), layer.shifts):
            shifts[normalize_axis(dim, len(shape))] += shift  # a dim named twice rolls by the sum
        strides = contiguous_strides(shape)
        cuts = []  # per dim: (source start, target start, length) of each piece
        for size, shift in zip(shape, shifts):
            k = shift % size if size else 0
            cuts.append([(0, 0, size)] if k == 0 else [(0, k, size - k), (size - k, 0, k)])
        for pieces in itertools.product(*cuts):
            source = sum(start * stride for (start, _, _), stride in zip(pieces, strides))
            target = sum(start * stride for (_, start, _), stride in zip(pieces, strides))
            copy_strided(launch, x, source, strides, out, target, strides, [length for _, _, length in pieces])
        return [out]


@implements(shape_layers.RepeatInterleave)
class RepeatInterleaveOp(Op):
    """torch.repeat_interleave by one count (GC ViT's global queries, one a window): each
    element read ``repeats`` times along its dim by a zero stride, in one strided copy.
    Counts that differ per element stay on the CPU."""

    float_only = False

    def check(self, layer):
        if layer.repeats is None:
            return "counts the graph computes are left to the CPU"
        if not isinstance(layer.repeats, int) and len(layer.repeats) != 1:
            return "a count per element is left to the CPU"
        return None

    def check_shapes(self, layer, specs):
        return refused_shapes(layer, [s.shape for s in specs]) or _copyable(specs[:1])

    def run(self, launch, layer, inputs):
        x = inputs[0]
        repeats = layer.repeats if isinstance(layer.repeats, int) else layer.repeats[0]
        shape = (x.size,) if layer.dim is None else x.shape
        axis = normalize_axis(0 if layer.dim is None else layer.dim, len(shape))
        outer, n, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])
        out = launch.output(0, shape[:axis] + (n * repeats,) + shape[axis + 1:], x.dtype)
        grid = (outer, n, repeats, inner)
        copy_strided(launch, x, 0, (n * inner, inner, 0, 1), out, 0, contiguous_strides(grid), grid)
        return [out]


@implements(Windows)
class WindowsOp(Op):
    """``x.unfold(dimension, size, step)`` (halo attention's neighbourhoods): the windows
    gathered by one strided copy, the window a new last dim."""

    float_only = False

    def check_inputs(self, layer, specs):
        return super().check_inputs(layer, specs[:1])  # dimension, size and step: constants the layer holds

    def check_shapes(self, layer, specs):
        return refused_shapes(layer, [s.shape for s in specs]) or _copyable(specs[:1])

    def run(self, launch, layer, inputs):
        x = inputs[0]
        shape = layer.infer_shapes([x.shape])[0]
        out = launch.output(0, shape, x.dtype)
        axis = normalize_axis(layer.dim, x.ndim)
        strides = list(contiguous_strides(x.shape))
        source = strides[:axis] + [strides[axis] * layer.step] + strides[axis + 1:] + [strides[axis]]
        copy_strided(launch, x, 0, source, out, 0, contiguous_strides(shape), shape)
        return [out]


@implements(plumbing.Attribute)
class ConstantOp(Op):
    """A float32 or bool constant of the model (``pnnx.Attribute``: ConvNeXt's layer scales,
    Swin's attention masks, a causal mask for ``torch.where``), uploaded once and copied on
    the device into each run's output, so that a run uploads nothing for it and its readers
    cannot change the kept copy."""

    def check(self, layer):
        if layer.value.dtype not in (np.float32, np.bool_):
            return f"a {layer.value.dtype} constant stays on the CPU (the kernels read float32 values and bool masks)"
        if layer.value.size == 0:
            return "an empty constant stays on the CPU"
        return None

    def run(self, launch, layer, inputs):
        value = layer.value
        kept = DeviceTensor(launch.device.constant(layer, "value", lambda: value), value.shape, value.dtype,
                            device=launch.device)
        out = launch.output(0, value.shape, value.dtype)
        launch.copy(out, kept)
        return [out]


# ------------------------------------------------------------------------------------------
# views
# ------------------------------------------------------------------------------------------
VIEW_LAYERS: tuple[type, ...] = (
    slicing.Chunk, slicing.Split, slicing.TensorSplit, slicing.Unbind,
    slicing.Slice, slicing.Select, slicing.Narrow,
    shape_layers.Reshape, shape_layers.ReshapeAs, shape_layers.Flatten, shape_layers.Unflatten,
    shape_layers.Squeeze, shape_layers.Unsqueeze,
    shape_layers.Permute, shape_layers.Transpose, shape_layers.T, shape_layers.Flip,
    shape_layers.Expand, shape_layers.ExpandAs,
)

_PHANTOM_BASE = np.zeros(1, dtype=np.uint8)


def _phantom(shape: Sequence[int]) -> np.ndarray:
    """A read-only uint8 array of ``shape`` with element strides, over one byte: its
    views' byte offsets and strides are element offsets and strides."""
    return as_strided(_PHANTOM_BASE, shape=tuple(shape), strides=contiguous_strides(shape), writeable=False)


def view_geometry(layer: Any, shapes: Sequence[Sequence[int]]) -> list[tuple[int, tuple[int, ...], tuple[int, ...]]]:
    """(offset, shape, strides) in elements of each output of a view layer, relative to
    its first input."""
    phantoms = [_phantom(s) for s in shapes]
    geometry = []
    for r in layer.forward(phantoms):
        r = np.asarray(r)
        if r.dtype != np.uint8 or r.base is None:
            raise DeviceError(f"{layer.type} did not return a view")
        geometry.append(_placed(r, phantoms[0]))
    return geometry


def _placed(view: np.ndarray, phantom: np.ndarray) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """(offset, shape, strides) in elements of a view of ``phantom``."""
    offset = view.__array_interface__["data"][0] - phantom.__array_interface__["data"][0]
    return offset, tuple(view.shape), tuple(view.strides)


def is_contiguous(shape: Sequence[int], strides: Sequence[int]) -> bool:
    want = contiguous_strides(shape)
    return math.prod(shape) == 0 or all(d == 1 or s == w for d, s, w in zip(shape, strides, want))


def _runtime_bound(layer: Any) -> bool:
    """Whether a view layer takes a bound or a target from an input at run time."""
    if isinstance(layer, slicing.Slice):
        return any(bound.input is not None for bound in layer.bounds)
    if isinstance(layer, slicing.Select):
        return layer.index_input is not None
    if isinstance(layer, slicing.Narrow):
        return layer.start_input is not None or layer.length_input is not None
    if isinstance(layer, (shape_layers.Reshape, shape_layers.Expand, shape_layers.Unflatten)):
        return layer.target is None
    if isinstance(layer, slicing.Split):
        return layer.sizes_at is not None
    return False


@implements(*VIEW_LAYERS)
class ViewOp(Op):
    """Outputs that stay contiguous share the input's buffer; others are copied."""

    float_only = False

    def check(self, layer):
        if _runtime_bound(layer):
            return "its bounds or target are runtime values, known on the host only"
        if isinstance(layer, slicing.Select) and layer.constant is not None:
            return "an element of a number the file holds is a host value"
        return None

    def check_shapes(self, layer, specs):
        try:
            geometry = view_geometry(layer, [s.shape for s in specs])
        except (ValueError, IndexError, TypeError, DeviceError) as exc:
            return str(exc)
        for _, shape, strides in geometry:
            if not is_contiguous(shape, strides):
                if len(collapse(shape, [strides, contiguous_strides(shape)])[0]) > COPY_RANK:
                    return f"a copy over more than {COPY_RANK} dims"
                reason = _copyable(specs[:1])
                if reason:
                    return reason
        return None

    def run(self, launch, layer, inputs):
        x = inputs[0]
        outputs = []
        for i, (offset, shape, strides) in enumerate(view_geometry(layer, [t.shape for t in inputs])):
            if is_contiguous(shape, strides):
                outputs.append(launch.view(x, shape, offset))
            else:
                out = launch.output(i, shape, x.dtype)
                copy_strided(launch, x, offset, strides, out, 0, contiguous_strides(shape), shape)
                outputs.append(out)
        return outputs


@implements(slicing.SliceCopy)
class SliceCopyOp(Op):
    """Slice assignment ``y[:, 1:] = z`` (``Tensor.slice_copy``; MViT's relative-position
    terms added into the attention scores): the input copied whole, then the values copied
    over its slice, broadcast by zero strides."""

    def check(self, layer):
        if _runtime_bound(layer):
            return "its bounds are runtime values, known on the host only"
        return None

    def check_shapes(self, layer, specs):
        target, values = specs[0], specs[1]
        if values.dtype != target.dtype:
            return f"values of dtype {values.dtype} cast to {target.dtype} stay on the CPU"
        reason = _copyable(specs[:1])
        if reason:
            return reason
        _, shape, strides = self._region(layer, target.shape)
        if len(collapse(shape, [strides, contiguous_strides(shape)])[0]) > COPY_RANK:
            return f"a copy over more than {COPY_RANK} dims"
        return None

    @staticmethod
    def _region(layer, shape):
        """(offset, shape, strides) in elements of the slice written, in the output."""
        phantom = _phantom(shape)
        return _placed(np.asarray(slicing.Slice.forward(layer, [phantom])[0]), phantom)

    def run(self, launch, layer, inputs):
        x, values = inputs[0], inputs[1]
        out = launch.output(0, x.shape, x.dtype)
        launch.copy(out, x)
        offset, shape, strides = self._region(layer, x.shape)
        lead = len(shape) - values.ndim  # values broadcast from the right, as torch's copy_
        source = [0] * lead + [0 if n == 1 else s for n, s in zip(values.shape, contiguous_strides(values.shape))]
        copy_strided(launch, values, 0, source, out, offset, strides, shape)
        return [out]
