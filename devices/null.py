"""A device that computes nothing and records what it is asked: for testing the scheduler,
the placement and the plan without a real device.

Each node it runs gets outputs of the right shapes and dtypes (zeros), so a whole model
runs through it; ``calls`` lists (what, node name) in the order the calls came.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Sequence
from typing import Any

import numpy as np

from graphexec.devices.base import Device, DeviceKernel, Hints, Kernel
from graphexec.layers.base import Layer
from graphexec.layers.specs import Spec, TensorSpec


class NullKernel(DeviceKernel):
    """Records the run and writes zeros."""

    name = "null"
    device: NullDevice

    def run(self, inputs: list[Any], outputs: list[Any] | None = None) -> list[Any]:
        self.device.record("run", self.layer.name)
        if outputs is None:
            outputs = [np.zeros(s.shape, s.dtype) for s in self.output_specs]  # type: ignore[union-attr]
        else:
            for out in outputs:
                out[...] = 0
        return outputs


class NullDevice(Device):
    """Runs every tensor layer whose type is not in ``refuse``; computes nothing."""

    kind = "null"
    name = "null device"

    def __init__(self, refuse: Collection[str] = (), queues: int = 2):
        self.refuse = frozenset(refuse)
        self.queues = tuple(range(queues))
        #: (what, name) for every call made, in order.
        self.calls: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def record(self, what: str, name: str) -> None:
        with self._lock:
            self.calls.append((what, name))

    def unsupported_reason(self, layer: Layer, inputs: Sequence[Spec]) -> str | None:
        if layer.type in self.refuse:
            return f"the null device was told to refuse {layer.type}"
        if not all(isinstance(s, TensorSpec) for s in inputs):
            return "an input is not a tensor"
        return None

    def kernel(self, layer: Layer, inputs: Sequence[Spec], outputs: Sequence[Spec], hints: Hints = Hints()) -> Kernel:
        self.record("kernel", layer.name)
        return NullKernel(self, layer, inputs, outputs)

    def upload(self, array: np.ndarray, queue: int = 0, out: Any = None) -> np.ndarray:
        self.record("upload", "")
        if out is not None:
            np.copyto(out, array)
            return out
        return np.array(array)

    def download(self, tensor: Any, queue: int = 0, out: np.ndarray | None = None) -> np.ndarray:
        self.record("download", "")
        if out is not None:
            np.copyto(out, tensor)
            return out
        return np.array(tensor)

    def alloc(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        return np.empty(shape, dtype=dtype)

    def warm_up(self, kernel: Kernel) -> None:
        self.record("warm_up", kernel.layer.name)
