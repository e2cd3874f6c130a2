"""The plan's transfer nodes: a value copied to a device, and back to the host.

Placement (:mod:`graphexec.placement`) inserts one :class:`Upload` where a host value is
first read on a device and one :class:`Download` where a device value is read on the host
(a CPU node, or the caller), so transfers are nodes of the plan and of traces. Their
kernels call the device's ``upload`` and ``download``: an upload only enqueues (its
readers wait on its event), a download is where the host waits for the device.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from graphexec.devices.base import Device, Kernel
from graphexec.errors import GraphexecError
from graphexec.layers.base import Layer
from graphexec.layers.specs import Spec
from graphexec.trace import DOWNLOAD_TYPE

UPLOAD_TYPE = "graphexec.Upload"


class _Transfer(Layer):
    """A copy between the host and a device: same spec out as in, no arithmetic."""

    fresh_outputs = writes_into = True

    def __init__(self, name: str, op_type: str, operand: str):  # no Operator: made by the placement
        self.name = name
        self.type = op_type
        self.operand = operand
        self.num_inputs = self.num_outputs = 1
        self.input_names = [""]

    def infer(self, specs: list[Spec]) -> list[Spec]:
        return list(specs)

    def flops(self, inputs: list[Spec], outputs: list[Spec]) -> int:
        return 0

    def forward(self, inputs: list[Any]) -> list[Any]:
        raise GraphexecError(f"{self.name} ({self.type}) runs only through its device's kernel")


class Upload(_Transfer):
    """A host value copied to the device."""

    def __init__(self, operand: str):
        super().__init__(f"upload:{operand}", UPLOAD_TYPE, operand)


class Download(_Transfer):
    """A device value brought to the host, produced by node ``producer``."""

    def __init__(self, operand: str, producer: str):
        super().__init__(f"download:{operand}", DOWNLOAD_TYPE, operand)
        self.producer = producer


class TransferKernel(Kernel):
    """An upload or download through ``device`` on command queue ``queue``."""

    computes_on_host = False

    def __init__(self, layer: _Transfer, inputs: Sequence[Spec], device: Device, queue: int):
        super().__init__(layer, inputs, inputs)
        self.device = device
        self.queue = queue
        self.upload = isinstance(layer, Upload)
        self.name = "upload" if self.upload else "download"
        self.doing = (f" copying {layer.operand} to the device" if self.upload
                      else f" waiting for {layer.operand} from {getattr(layer, 'producer', '?')}")

    @property
    def home(self) -> str:  # type: ignore[override]
        return self.device.kind if self.upload else "cpu"

    def run(self, inputs: list[Any], outputs: list[Any] | None = None) -> list[Any]:
        out = None if outputs is None else outputs[0]
        try:
            if self.upload:
                moved = self.device.upload(inputs[0], self.queue, out=out)
            else:
                moved = self.device.download(inputs[0], self.queue, out=out)
        except Exception as exc:  # a kernel that failed late shows up at a download's wait
            raise self.device.node_failure(self.layer, exc, self.doing) from exc
        return [moved] if outputs is None else outputs

    def trace_span(self, node: int, outputs: list[Any], start_ns: int, end_ns: int) -> Any:
        span = getattr(self.device, "pending_span", None)
        tensor = outputs[0]
        if not self.upload or span is None or getattr(tensor, "started", None) is None:
            return None
        return span(node, self.layer.name, self.layer.type, self.queue, tensor.started, tensor.event, start_ns, end_ns)

