"""How a loop's range is cut into the parts numba's threads run (imported only by the
``_loops_*`` modules)."""

from __future__ import annotations

from graphexec.devices.cpu.jit.base import PARTS_ALIGN
from graphexec.devices.cpu.jit.compiler import inline


@inline
def aligned_part(total, part, count):
    """Part ``part`` of ``count`` of ``range(total)``, ``(start, stop)``, cut on multiples
    of :data:`~graphexec.devices.cpu.jit.base.PARTS_ALIGN` (a cache line of float32), so
    that no two threads write one line; empty where there are fewer lines than parts."""
    lines = (total + PARTS_ALIGN - 1) // PARTS_ALIGN
    return (min(total, lines * part // count * PARTS_ALIGN), min(total, lines * (part + 1) // count * PARTS_ALIGN))


@inline
def part_of(start, stop, part, count):
    """Part ``part`` of ``count`` of ``range(start, stop)``, ``(start, stop)``: the cuts of
    :func:`~graphexec.devices.cpu.jit.base.bounds`, so that a node's parts are its pieces'
    bands."""
    return start + (stop - start) * part // count, start + (stop - start) * (part + 1) // count
