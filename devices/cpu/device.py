"""The CPU device: every node runs on the host's threads, through the CPU kernels
registered for its layer where one applies (:mod:`graphexec.devices.cpu.kernel`), else
through the layer's own numpy ``forward``."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import numpy as np

from graphexec.devices.base import Device, Hints, Kernel
from graphexec.devices.cpu.kernel import TIERS, SharedState, registered
from graphexec.devices.cpu.scratch import Scratch
from graphexec.errors import DeviceError
from graphexec.layers.base import Layer
from graphexec.layers.specs import Spec

#: The order in which the tiers' kernels are tried.
PREFERRED = ("jit", "numpy")


class CpuDevice(Device):
    """The host. ``tiers``: which kinds of CPU kernel it uses (``"numpy"``, ``"jit"``);
    none at all runs every layer's reference ``forward``."""

    kind = "cpu"

    def __init__(self, tiers: Collection[str] = ("numpy",)):
        unknown = set(tiers) - set(TIERS)
        if unknown:
            raise DeviceError(f"unknown CPU kernel tier(s) {sorted(unknown)}: expected some of {list(TIERS)}")
        self.tiers = frozenset(tiers)
        self.name = "cpu (" + (", ".join(t for t in TIERS if t in self.tiers) or "reference") + " kernels)"
        #: Working memory lent to the kernels, one set of buffers per thread.
        self.scratch = Scratch()
        #: What kernels derive from a layer, shared by the plans of all input shapes.
        self.shared = SharedState()

    def unsupported_reason(self, layer: Layer, inputs: Sequence[Spec]) -> str | None:
        return None  # the backup device: every layer has its numpy forward

    def kernel(self, layer: Layer, inputs: Sequence[Spec], outputs: Sequence[Spec], hints: Hints = Hints()) -> Kernel:
        """The first registered kernel that accepts the node, compiled ones before numpy
        ones, else the layer's own forward."""
        found = registered(type(layer))
        for tier in PREFERRED:
            if tier in self.tiers:
                for kernel_class in found:
                    if kernel_class.tier == tier and kernel_class.accepts(layer, inputs, outputs, hints):
                        return kernel_class(layer, inputs, outputs, hints, self)
        return Kernel(layer, inputs, outputs)

    def upload(self, array: np.ndarray, queue: int = 0, out: Any = None) -> np.ndarray:
        return array

    def download(self, tensor: Any, queue: int = 0, out: np.ndarray | None = None) -> np.ndarray:
        return tensor

    def alloc(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        return np.empty(shape, dtype=dtype)
