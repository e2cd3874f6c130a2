"""Large transcendental activations shared out among idle threads, as bands of elements.

Each element is computed alone, so the bands give the bits of a whole run.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import numpy as np

from graphexec.devices.base import Piece, element_bands
from graphexec.devices.cpu.kernel import CpuKernel, cpu_kernel
from graphexec.layers.activation import BLOCKED_MIN_ELEMENTS, _Unary
from graphexec.layers.specs import TensorSpec

#: A transcendental activation (exp, tanh, erf per element: ~1.5-3 ns each here, as numpy
#: has no SIMD exp on this build) is shared out among idle threads from this many
#: elements. SiLU in two bands on two cores against one thread: 200 K elements ran 1.33x
#: as fast, 450 K 1.50x, 1.2 M 1.76x; 100 K 0.96x (waking the other thread costs ~50 us).
SHARE_MIN_ELEMENTS = 200_000


def worth_sharing(layer: _Unary, elements: int) -> bool:
    """Whether an activation of this many elements gains from bands on several threads:
    transcendental, from :data:`SHARE_MIN_ELEMENTS`, and below the layer's
    ``BLOCKED_MIN_ELEMENTS`` unless it is one pass. Run in blocks, one thread was as fast as
    two bands (SiLU, 450 K and 1.2 M elements), whose many small numpy calls contend for the
    GIL, and GELU much faster (ConvNeXt-T: 0.67x the time unshared against 0.78x shared,
    both blocked)."""
    return (layer.transcendental and elements >= SHARE_MIN_ELEMENTS
            and (layer.one_pass or elements < BLOCKED_MIN_ELEMENTS))


@cpu_kernel(_Unary)
class ActivationBands(CpuKernel):
    """The layer's own forward, and bands of it when the node runs alone."""

    name = "bands"

    @classmethod
    def accepts(cls, layer, inputs, outputs, hints) -> bool:
        out = outputs[0] if outputs else None
        return (hints.pieces > 1 and layer.writes_into and isinstance(out, TensorSpec) and out.dtype.kind == "f"
                and worth_sharing(layer, math.prod(out.shape)))

    def splits(self) -> bool:
        return True

    def pieces(self, inputs: list[Any], outputs: list[np.ndarray], count: int) -> list[Piece] | None:
        x, out = inputs[0], outputs[0]
        if count < 2 or not isinstance(x, np.ndarray) or x.shape != out.shape or out.dtype.kind != "f":
            return None
        return [Piece(partial(self.layer.forward_into, [x[band]], [out[band]]), band)
                for band in element_bands(out.shape, count)]
