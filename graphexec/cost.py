"""A rough cost model: how long a node should take, from its FLOPs and the bytes it moves.

Only ratios matter (priorities, the critical path, the ideal speedup), so the constants are
round numbers for one CPU core: ~50 GFLOP/s through BLAS, ~10 GB/s of memory traffic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from graphexec.layers.base import Layer
from graphexec.layers.specs import DynamicSpec, SequenceSpec, Spec, TensorSpec

FLOPS_PER_SECOND = 50e9
BYTES_PER_SECOND = 10e9
#: What running any node costs regardless of size (Python call, scheduling).
NODE_OVERHEAD_SECONDS = 5e-6
#: Counts are clamped here (2**62): a node that large never runs (the engine refuses its
#: plan for memory before a run starts), but the plan's priorities and region estimates are
#: floats, and an exact count of 1e308 elements would overflow them.
MAX_COUNT = 1 << 62


@dataclass(frozen=True)
class Cost:
    """Estimated work of one node."""

    flops: int
    bytes: int
    #: The part of ``flops`` done inside BLAS calls (the part more BLAS threads speed up).
    blas_flops: int = 0

    @property
    def seconds(self) -> float:
        return NODE_OVERHEAD_SECONDS + self.flops / FLOPS_PER_SECOND + self.bytes / BYTES_PER_SECOND

    @property
    def blas_seconds(self) -> float:
        return self.blas_flops / FLOPS_PER_SECOND


def nbytes(spec: Spec) -> int:
    """Bytes a value of this spec takes (a sequence: its items together); for a size known
    only at run time, the most it can take (0 where nothing bounds it: the plan that reads
    it counts it once the run has told it)."""
    if isinstance(spec, TensorSpec):
        return spec.nbytes
    if isinstance(spec, SequenceSpec):
        return spec.nbytes  # type: ignore[attr-defined]  # worked out when it was made
    if isinstance(spec, DynamicSpec):
        return spec.max_nbytes or 0
    return 0


def estimate(layer: Layer, inputs: list[Spec], outputs: list[Spec]) -> Cost:
    """The cost of ``layer`` on these specs: its ``flops`` and ``blas_flops`` hooks, and the
    bytes it touches (its inputs, outputs and ``work_bytes``)."""
    moved = 0 if layer.is_view else sum(nbytes(s) for s in inputs) + sum(nbytes(s) for s in outputs)
    moved = _count(moved + _count(layer.work_bytes(inputs, outputs)))
    flops = _count(layer.flops(inputs, outputs))
    return Cost(flops, moved, min(flops, _count(layer.blas_flops(inputs, outputs))))


def _count(value: float) -> int:
    """``value`` as an int of at most :data:`MAX_COUNT` (an infinite or NaN estimate too)."""
    if isinstance(value, float) and not math.isfinite(value):
        return MAX_COUNT
    return min(int(value), MAX_COUNT)
