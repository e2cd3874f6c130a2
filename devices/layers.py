"""The pipeline nodes that put work on a device: a layer run there, and the two transfers.

:class:`OnDevice` wraps a CPU layer whose operator the device runs: its ``forward`` takes
and returns device tensors and only enqueues (``device.run``), so the host never waits
between kernels; ordering across queues is the tensors' events. :class:`Upload` copies a
host array to the device without waiting; :class:`Download` is where the host waits, for
a CPU node or the caller. All three are ordinary steps of a placed program, so they show
in the plan, in ``graphexec graph`` and in traces.

Each has a ``queue_index`` set once the plan is known (see
:func:`graphexec.placement.assign_queues`), and ``placed_on``, the device's kind.
"""

from __future__ import annotations

from typing import Any

from graphexec.errors import DeviceError, GraphexecError
from graphexec.trace import DOWNLOAD_TYPE
from graphexec.layers.base import Layer
from graphexec.layers.specs import Spec, TensorSpec

UPLOAD_TYPE = "graphexec.Upload"


def _describe(device: Any) -> str:
    return f"{getattr(device, 'kind', 'device')} device {getattr(device, 'name', device)!r}"


class DeviceStep(Layer):
    """What the three node kinds share: a device, a queue, and no Operator of their own."""

    def __init__(self, name: str, op_type: str, device: Any, num_inputs: int, num_outputs: int):
        # Layer.__init__ reads an Operator's params; these nodes are made by the placement.
        self.name = name
        self.type = op_type
        self.device = device
        self.num_inputs = num_inputs
        self.num_outputs = num_outputs
        self.input_names = [""] * num_inputs
        self.queue_index = 0

    @property
    def placed_on(self) -> str:
        return str(getattr(self.device, "kind", "device"))

    def _failed(self, exc: BaseException, doing: str = "") -> DeviceError:
        """``exc`` as a DeviceError naming this node, its type and the device."""
        text = str(exc) if isinstance(exc, GraphexecError) else f"{type(exc).__name__}: {exc}"
        said = f"running {self.name} ({self.type}) on {getattr(self.device, 'name', '')}"
        if text.startswith(said):  # the device's own message names the node already: keep its kernel
            text = text[len(said):]
        else:
            text = ": " + text
        return DeviceError(f"node {self.name} ({self.type}) on {_describe(self.device)}{doing}{text}")


class OnDevice(DeviceStep):
    """A layer run on the device; the wrapped CPU layer stays the reference and the spec."""

    def __init__(self, layer: Layer, device: Any):
        super().__init__(layer.name, layer.type, device, layer.num_inputs, layer.num_outputs)
        self.layer = layer
        self.is_view = layer.is_view
        # A kernel writes new tensors, into given ones as well (``device.run(out=...)``);
        # a view shares its input's buffer.
        self.fresh_outputs = self.writes_into = not layer.is_view
        #: Where the outputs live, for the memory plan's arenas.
        self.output_home = self.placed_on

    def infer(self, specs: list[Spec]) -> list[Spec]:
        return self.layer.infer(specs)

    def flops(self, inputs: list[Spec], outputs: list[Spec]) -> int:
        return self.layer.flops(inputs, outputs)

    def forward(self, inputs: list[Any]) -> list[Any]:
        try:
            return self.device.run(self.layer, inputs, self.queue_index)
        except Exception as exc:  # a DeviceError names the kernel; this adds the node
            raise self._failed(exc) from exc

    def forward_into(self, inputs: list[Any], outputs: list[Any]) -> None:
        try:
            made = self.device.run(self.layer, inputs, self.queue_index, out=outputs)
        except Exception as exc:
            raise self._failed(exc) from exc
        for given, result in zip(outputs, made):  # the consumers wait on these events
            if result.buffer is not given.buffer or result.offset != given.offset:
                raise DeviceError(f"node {self.name} ({self.type}) on {_describe(self.device)} did not write "
                                  "into the memory it was given")
            given.event, given.started = result.event, result.started

    def warm_up(self, specs: list[TensorSpec]) -> None:
        """Build this node's programs and upload its weights (runs it once and waits)."""
        try:
            self.device.warm_up(self.layer, specs, self.queue_index)
        except Exception as exc:
            raise self._failed(exc, " while warming up") from exc

    def device_span(self, node: int, outputs: list[Any], start_ns: int, end_ns: int) -> Any:
        """The node's span on its queue for a trace, or None when it enqueued nothing (a view)."""
        made = [t for t in outputs if getattr(t, "started", None) is not None]
        if not made:
            return None
        return self.device.pending_span(node, self.name, self.type, self.queue_index, made[0].started,
                                        made[0].event, start_ns, end_ns)


class _Transfer(DeviceStep):
    """A copy between the host and the device: same spec out as in, no arithmetic.

    Subclasses define :meth:`move`; ``forward`` and ``forward_into`` (a region of an arena)
    both go through it."""

    fresh_outputs = writes_into = True

    def infer(self, specs: list[Spec]) -> list[Spec]:
        return list(specs)

    def flops(self, inputs: list[Spec], outputs: list[Spec]) -> int:
        return 0

    def forward(self, inputs: list[Any]) -> list[Any]:
        return [self._moved(inputs[0])]

    def forward_into(self, inputs: list[Any], outputs: list[Any]) -> None:
        self._moved(inputs[0], outputs[0])

    def _moved(self, value: Any, out: Any = None) -> Any:
        try:
            return self.move(value, out)
        except Exception as exc:  # a kernel that failed late shows up at a download's wait
            raise self._failed(exc, self.doing) from exc

    #: What the copy was, for an error message (set by each subclass).
    doing = ""

    def move(self, value: Any, out: Any) -> Any:
        """Copy ``value`` across (into ``out`` when given) and return the copy."""
        raise NotImplementedError


class Upload(_Transfer):
    """A host array copied to the device (not waited for: consumers wait on its event)."""

    def __init__(self, operand: str, device: Any):
        super().__init__(f"upload:{operand}", UPLOAD_TYPE, device, 1, 1)
        self.operand = operand
        self.output_home = self.placed_on
        self.doing = f" copying {operand} to the device"

    def move(self, value: Any, out: Any) -> Any:
        return self.device.upload(value, self.queue_index, out=out)

    def device_span(self, node: int, outputs: list[Any], start_ns: int, end_ns: int) -> Any:
        tensor = outputs[0]
        if getattr(tensor, "started", None) is None:
            return None
        return self.device.pending_span(node, self.name, self.type, self.queue_index, tensor.started,
                                        tensor.event, start_ns, end_ns)


class Download(_Transfer):
    """A device tensor brought to the host: the one place the host waits for the device."""

    def __init__(self, operand: str, producer: str, device: Any):
        super().__init__(f"download:{operand}", DOWNLOAD_TYPE, device, 1, 1)
        self.operand = operand
        self.producer = producer
        self.doing = f" waiting for {operand} from {producer}"

    def move(self, value: Any, out: Any) -> Any:
        return self.device.download(value, self.queue_index, out=out)
