"""Matrix products on the device: ``nn.Linear``, ``F.linear``, ``torch.matmul`` (and its
stricter aliases mm, mv, bmm), ``addmm`` and ``baddbmm``, and the ``torch.einsum`` equations
that are batched matrix products, all through the tiled GEMM of ``kernels/gemm.cl``.

The tile is chosen per device and per problem: :func:`tiles_for` keeps the shapes whose
work-group fits the device (threads, local memory), then a product with few rows runs the
one-output-per-work-item kernel, a small one the 32x32 tile, a large one the 64x64 tile.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from graphexec.devices.opencl.device import DeviceTensor, contiguous_strides
from graphexec.devices.opencl.ops.base import Launch, Op, implements, refused_shapes
from graphexec.devices.opencl.ops.expression import enqueue_elementwise, float_literal
from graphexec.devices.opencl.ops.tensors import copy_strided
from graphexec.errors import DeviceError
from graphexec.layers.linear import (
    BMM,
    MM,
    MV,
    AddMM,
    BAddBMM,
    Einsum,
    FLinear,
    Linear,
    MatMul,
    broadcast,
    matmul_shape,
)

#: Products with at most this many rows (per group) run one output per work-item.
NAIVE_ROWS = 8


@dataclass(frozen=True)
class Tile:
    """A GEMM tile: tm x tn outputs per work-group, tk per step, wm x wn per work-item."""

    tm: int
    tn: int
    tk: int
    wm: int
    wn: int

    @property
    def local_size(self) -> tuple[int, int]:
        return (self.tn // self.wn, self.tm // self.wm)

    @property
    def threads(self) -> int:
        return math.prod(self.local_size)

    @property
    def local_bytes(self) -> int:
        return 4 * self.tk * (self.tm + 1 + self.tn)

    def defines(self) -> dict[str, int]:
        return {"TM": self.tm, "TN": self.tn, "TK": self.tk, "WM": self.wm, "WN": self.wn}


#: In order of preference. Each keeps THREADS a multiple of TN (the convolution's loader
#: relies on it) and a divisor of TN * TK.
TILES = (Tile(64, 64, 16, 4, 4), Tile(32, 32, 16, 2, 2), Tile(32, 32, 8, 4, 4), Tile(16, 16, 8, 2, 2))


def tiles_for(device: Any) -> list[Tile]:
    """The tiles whose work-group this device can run, best first."""
    usable = []
    for tile in TILES:
        lx, ly = tile.local_size
        if (tile.threads <= device.max_work_group_size and lx <= device.max_work_item_sizes[0]
                and ly <= device.max_work_item_sizes[1] and tile.local_bytes <= device.local_mem_size):
            usable.append(tile)
    return usable


def gemm_program(launch: Launch, rows: int, cols: int, groups: int, pad_mode: int, tiled_kernel: str,
                 act_defines: dict[str, Any] | None = None):
    """(program, tile) for a product of ``rows`` x ``cols`` outputs in each of ``groups``;
    tile None: run the naive kernel (of the same program, so no extra build).
    ``act_defines``: the activation a convolution applies in its store (none is left out of
    the defines, so every other product shares one build)."""
    device = launch.device
    defines = {"PAD_MODE": pad_mode, **(act_defines or {})}
    candidates = tiles_for(device)
    big = [t for t in candidates if t.tm >= 64]
    small = [t for t in candidates if t.tm <= 32]
    work_groups = -(-rows // 64) * -(-cols // 64) * groups
    if rows < 64 or cols < 64 or work_groups < 2 * device.compute_units:
        candidates = small + big
    if rows <= NAIVE_ROWS or not candidates:
        tile = candidates[0] if candidates else TILES[-1]
        return launch.program("gemm", **defines, **tile.defines()), None
    for tile in candidates:
        built = launch.program("gemm", **defines, **tile.defines())
        if device.kernel_info(built, tiled_kernel).max_work_group >= tile.threads:
            return built, tile
    return built, None


def naive_local(launch: Launch, built: Any, name: str, cols: int) -> tuple[int, int]:
    size = launch.device.local_size(built, name, target=64 if cols >= 64 else 32)
    return (size, 1)


def enqueue_matmul(
    launch: Launch,
    a: tuple[Any, int, int, int],
    b: tuple[Any, int, int, int],
    c: DeviceTensor,
    m: int, n: int, k: int,
    batch: tuple[int, int, int] = (1, 1, 1),
    a_batch: tuple[int, int, int] = (0, 0, 0),
    b_batch: tuple[int, int, int] = (0, 0, 0),
    bias: tuple[Any, int, int, int] | None = None,
) -> None:
    """C[z] (m x n, contiguous) = A[z] @ B[z] (+ bias) for every batch index z.

    ``a`` and ``b`` are (buffer, offset, row stride, column stride) in elements; the batch
    strides say where A and B of batch (i0, i1, i2) start (0 where a dim is broadcast).
    ``bias`` is (buffer, offset, stride along m, stride along n).
    """
    z = math.prod(batch)
    if m * n * z == 0:
        return
    built, tile = gemm_program(launch, m, n, z, 0, "matmul_tiled")
    bias_args = (None, 0, 0, 0, 0) if bias is None else (*bias, 1)
    args = (*a, *b, *bias_args, c.buffer, c.offset, m, n, k, batch[1], batch[2], *a_batch, *b_batch)
    if tile is None:
        local = naive_local(launch, built, "matmul_naive", n)
        launch.enqueue(built, "matmul_naive", (-(-n // local[0]) * local[0], m, z), (local[0], 1, 1), *args)
    else:
        lx, ly = tile.local_size
        grid = (-(-n // tile.tn) * lx, -(-m // tile.tm) * ly, z)
        launch.enqueue(built, "matmul_tiled", grid, (lx, ly, 1), *args)


@implements(Linear)
class LinearOp(Op):
    """``x @ weight.T + bias`` over the last dim; the weight stays (in, out) on the device."""

    def check_shapes(self, layer, specs):
        x = specs[0].shape
        if not x or x[-1] != layer.in_features:
            return f"input {x} does not end in {layer.in_features}"
        return None

    def run(self, launch, layer, inputs):
        x = inputs[0]
        k, n = layer.in_features, layer.out_features
        rows = math.prod(x.shape[:-1])
        out = launch.output(0, x.shape[:-1] + (n,))
        weight = launch.device.constant(layer, "weight_t", lambda: layer.weight_t.astype(np.float32))
        bias = None
        if layer.bias is not None:
            bias = (launch.device.constant(layer, "bias", lambda: layer.bias.astype(np.float32)), 0, 0, 1)
        enqueue_matmul(launch, (x.buffer, x.offset, k, 1), (weight, 0, n, 1), out, rows, n, k, bias=bias)
        return [out]


@implements(FLinear)
class FLinearOp(Op):
    """``F.linear(x, weight, bias)`` with a (out, in) or (in,) weight and a (out,) bias."""

    def check_shapes(self, layer, specs):
        x, w, b = layer._operands([s.shape for s in specs])
        if len(w) not in (1, 2) or not x or x[-1] != w[-1]:
            return f"input {x} and weight {w} do not make a linear product"
        n = w[0] if len(w) == 2 else 1
        if b is not None and tuple(b) not in ((n,), (1,), ()):
            return f"bias {b}: only a bias along the output features is implemented"
        return None

    def run(self, launch, layer, inputs):
        x, w, b = layer._operands(inputs)
        k = x.shape[-1]
        n = w.shape[0] if w.ndim == 2 else 1
        rows = math.prod(x.shape[:-1])
        out = launch.output(0, x.shape[:-1] + w.shape[:-1])
        bias = None if b is None else (b.buffer, b.offset, 0, 1 if b.size > 1 else 0)
        enqueue_matmul(launch, (x.buffer, x.offset, k, 1), (w.buffer, w.offset, 1, k), out, rows, n, k, bias=bias)
        return [out]


@implements(MatMul, MM, MV, BMM)
class MatMulOp(Op):
    """``torch.matmul``: 1-D operands promoted, batch dims broadcast (up to three)."""

    def check_shapes(self, layer, specs):
        a, b = specs[0].shape, specs[1].shape
        reason = refused_shapes(layer, [a, b])
        if reason is not None:
            return reason
        a2 = a if len(a) >= 2 else (1,) + a
        b2 = b if len(b) >= 2 else b + (1,)
        if len(broadcast(a2[:-2], b2[:-2], "batch")) > 3:
            return "more than three batch dims"
        return None

    def run(self, launch, layer, inputs):
        a, b = inputs
        out_shape = matmul_shape(a.shape, b.shape)
        a2 = a.shape if a.ndim >= 2 else (1,) + a.shape
        b2 = b.shape if b.ndim >= 2 else b.shape + (1,)
        m, k, n = a2[-2], a2[-1], b2[-1]
        batch = broadcast(a2[:-2], b2[:-2], "batch")
        out = launch.output(0, out_shape)
        if all(d == 1 for d in b2[:-2]):  # B shared by every batch: one product of all rows
            enqueue_matmul(launch, (a.buffer, a.offset, k, 1), (b.buffer, b.offset, n, 1), out,
                           math.prod(batch) * m, n, k)
            return [out]
        pad = (1,) * (3 - len(batch))
        full = pad + batch
        enqueue_matmul(
            launch, (a.buffer, a.offset, k, 1), (b.buffer, b.offset, n, 1), out, m, n, k,
            batch=full,  # type: ignore[arg-type]
            a_batch=_batch_strides(a2, full, m * k),
            b_batch=_batch_strides(b2, full, k * n),
        )
        return [out]


@implements(AddMM, BAddBMM)
class AddMMOp(Op):
    """``beta * input + alpha * (mat1 @ mat2)`` (``torch.addmm``: GPT-2's projections) and
    its batched form. With alpha 1 and beta 1 (or 0) and an input of at most two dims, the
    product's store adds the input wherever it broadcasts from (a bias row, a column, a
    matrix), as ``nn.Linear``'s bias is; otherwise one elementwise launch scales and adds
    after the product."""

    def check_shapes(self, layer, specs):
        return refused_shapes(layer, [s.shape for s in specs])

    def run(self, launch, layer, inputs):
        c, a, b = inputs
        m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
        shape = matmul_shape(a.shape, b.shape)
        in_store = layer.alpha == 1.0 and layer.beta in (0.0, 1.0) and c.ndim <= 2
        product = launch.output(0, shape) if in_store else launch.alloc(shape)
        bias = None
        if in_store and layer.beta == 1.0:
            rows, cols = (1,) * (2 - c.ndim) + tuple(c.shape)
            bias = (c.buffer, c.offset, cols if rows > 1 else 0, 1 if cols > 1 else 0)
        batch = {} if a.ndim == 2 else {"batch": (1, 1, a.shape[0]), "a_batch": (0, 0, m * k),
                                        "b_batch": (0, 0, k * n)}
        enqueue_matmul(launch, (a.buffer, a.offset, k, 1), (b.buffer, b.offset, n, 1), product, m, n, k, bias=bias,
                       **batch)  # type: ignore[arg-type]
        if in_store:
            return [product]
        alpha = float_literal(layer.alpha)
        if layer.beta == 0.0:  # the input is ignored, even its NaNs, as PyTorch does
            return [enqueue_elementwise(launch, f"(v0 * {alpha})", [0], [product], f"kernel for {layer.type}")]
        text = f"(v0 * {alpha} + v1 * {float_literal(layer.beta)})"
        return [enqueue_elementwise(launch, text, [0, 1], [product, c], f"kernel for {layer.type}")]


def _batch_strides(shape: tuple[int, ...], batch: tuple[int, ...], matrix: int) -> tuple[int, int, int]:
    """Element strides of the (padded to 3) batch dims of ``shape``; 0 where broadcast."""
    dims = (1,) * (3 - len(shape[:-2])) + tuple(shape[:-2])
    strides, step = [], matrix
    for size, want in zip(reversed(dims), reversed(batch)):
        strides.append(step if size == want and size > 1 else 0)
        step *= size
    return tuple(reversed(strides))  # type: ignore[return-value]


@dataclass(frozen=True)
class BatchedProduct:
    """An einsum of two operands read as C[batch] (m x n) = A[batch] (m x k) @ B[batch] (k x n):
    each operand's element strides along m or n, k and the (up to three) batch labels; C is
    contiguous in (batch, m, n) order, and ``out_strides`` says where each of those dims lies
    in the einsum's output when that order is not the output's (None: it is)."""

    m: int
    n: int
    k: int
    batch: tuple[int, int, int]
    a: tuple[int, int]
    b: tuple[int, int]
    a_batch: tuple[int, int, int]
    b_batch: tuple[int, int, int]
    shape: tuple[int, ...] = ()
    out_strides: tuple[int, ...] | None = None


def batched_product(layer: Einsum, shapes: list[tuple[int, ...]]) -> BatchedProduct | str:
    """The product an einsum is, or why it is not one the GEMM runs: two operands, no
    ``...``, every label once per term, one summed label, a label of the output that only
    the first operand has (the rows; the last such) and one only the second has (the
    columns), and at most three other output labels of more than one value (batch labels,
    broadcast where an operand lacks them or holds one value). The product is stored in
    (batch, rows, columns) order, then copied into the output's order where that differs:
    MaxViT's ``ijkln,ijkmn->ijklm`` is stored in place, MViT's relative positions
    ``ijklmo,mno->ijklmn`` are copied."""
    parsed = layer.parsed
    if len(parsed.terms) != 2 or "..." in parsed.equation:
        return "only einsums of two operands without '...' run here"
    (ta, tb), out = parsed.terms, parsed.output
    if any(len(set(t)) != len(t) for t in (ta, tb, out)):
        return "a label repeated within a term (a diagonal) is left to the CPU"
    summed = [c for c in ta if c in tb and c not in out]
    if any(c not in out and c not in summed for c in ta + tb):
        return f"{parsed.equation!r} sums a label over one operand alone"
    rows, cols = [c for c in out if c not in tb], [c for c in out if c not in ta]
    if not rows or not cols:
        return f"{parsed.equation!r} has no row label of the first operand alone and column label of the second"
    if len(summed) != 1:
        return f"{parsed.equation!r} is not a matrix product (it sums {len(summed)} labels, not one)"
    try:
        sizes, _ = parsed.sizes(shapes)
    except ValueError as exc:
        return str(exc)
    (row, col), k = (rows[-1], cols[-1]), summed[0]
    batch = [c for c in out if c not in (row, col) and sizes[c] > 1]
    if len(batch) > 3:
        return f"{parsed.equation!r} is batched over {len(batch)} labels (up to three run here)"
    strides = [dict(zip(t, contiguous_strides(shape))) for t, shape in zip((ta, tb), shapes)]
    dims = [dict(zip(t, shape)) for t, shape in zip((ta, tb), shapes)]
    if dims[0][k] != dims[1][k]:
        return f"the summed label {k!r} has sizes {dims[0][k]} and {dims[1][k]}"

    def along(which: int) -> tuple[int, int, int]:  # batch strides, 0 where absent or broadcast
        found = [strides[which][c] if dims[which].get(c) == sizes[c] else 0 for c in batch]
        return tuple([0] * (3 - len(found)) + found)  # type: ignore[return-value]

    stored = [*batch, row, col]
    shape = tuple(sizes[c] for c in stored)
    out_strides = None
    if [c for c in out if sizes[c] > 1] != [c for c in stored if sizes[c] > 1]:
        placed = dict(zip(out, contiguous_strides(tuple(sizes[c] for c in out))))
        out_strides = tuple(placed[c] for c in stored)
    full = tuple([1] * (3 - len(batch)) + [sizes[c] for c in batch])
    return BatchedProduct(sizes[row], sizes[col], sizes[k], full, (strides[0][row], strides[0][k]),  # type: ignore[arg-type]
                          (strides[1][k], strides[1][col]), along(0), along(1), shape, out_strides)


@implements(Einsum)
class EinsumOp(Op):
    """``torch.einsum`` where it is a batched matrix product (see :func:`batched_product`)."""

    def check_shapes(self, layer, specs):
        found = batched_product(layer, [s.shape for s in specs])
        return found if isinstance(found, str) else None

    def stores_in_order(self, layer: Einsum, shapes: list[tuple[int, ...]]) -> bool:
        """Whether the product's store (a chain's STORE_VALUE) indexes the output itself:
        not where the product is stored by (batch, rows, columns) and copied after."""
        product = batched_product(layer, shapes)
        return isinstance(product, str) or product.out_strides is None

    def run(self, launch, layer, inputs):
        a, b = inputs
        product = batched_product(layer, [a.shape, b.shape])
        if isinstance(product, str):  # check_shapes keeps such an einsum on the CPU
            raise DeviceError(product)
        out = launch.output(0, layer.infer_shapes([a.shape, b.shape])[0])
        stored = out if product.out_strides is None else launch.alloc(product.shape)
        enqueue_matmul(launch, (a.buffer, a.offset, *product.a), (b.buffer, b.offset, *product.b), stored,
                       product.m, product.n, product.k, batch=product.batch, a_batch=product.a_batch,
                       b_batch=product.b_batch)
        if product.out_strides is not None:  # into the output's order of labels
            copy_strided(launch, stored, 0, contiguous_strides(product.shape), out, 0, product.out_strides,
                         product.shape)
        return [out]
