"""What every operator family on the device shares: the registry, the Op contract and
:class:`Launch`, the state of one ``run`` call (queue, wait list, the events it enqueued).

::

    Op                          one family of layers, registered by layer class
    ├── check(layer)            reason it cannot run (params), or None
    ├── check_inputs(layer, specs)  float32 inputs by default; shapes per op (override)
    └── run(launch, layer, inputs) -> outputs     enqueue kernels through the launch
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from graphexec.devices.opencl.device import MAX_ELEMENTS, DeviceTensor, kernel_scalar
from graphexec.errors import DeviceError
from graphexec.layers.specs import TensorSpec

if TYPE_CHECKING:
    from graphexec.devices.opencl.device import OpenCLDevice
    from graphexec.devices.opencl.programs import Built

F32 = np.dtype(np.float32)

_OPS: dict[type, Op] = {}

O = TypeVar("O", bound="type[Op]")


def implements(*layer_classes: type) -> Callable[[O], O]:
    """Class decorator: the op runs layers of exactly these classes (not subclasses)."""

    def decorate(cls: O) -> O:
        op = cls()
        for layer_class in layer_classes:
            if layer_class in _OPS:
                raise ValueError(f"{layer_class.__name__} already has an OpenCL op: {type(_OPS[layer_class]).__name__}")
            _OPS[layer_class] = op
        cls.layer_classes = tuple(layer_classes)
        return cls

    return decorate


def op_for(layer: Any) -> Op | None:
    """The op that runs ``layer`` on the device, or None."""
    return _OPS.get(type(layer))


def supported_classes() -> list[type]:
    """Every layer class some op runs."""
    return sorted(_OPS, key=lambda c: c.__name__)


def as_pair(values: Sequence[int], spatial: int, fill: int) -> tuple[int, int]:
    """A 1-D or 2-D layer's sizes, strides or pads as a (rows, columns) pair: 1-D runs as 2-D
    with one row, whose value is ``fill``."""
    return (fill, values[0]) if spatial == 1 else (values[0], values[1])


def refused_shapes(layer: Any, shapes: Sequence[Sequence[int]]) -> str | None:
    """Why ``layer`` refuses inputs of ``shapes`` (its own message), or None."""
    try:
        layer.infer_shapes([tuple(shape) for shape in shapes])
    except ValueError as exc:
        return str(exc)
    return None


class Op:
    """How one family of layers runs on the device. Subclasses override ``run`` and, where
    some params or shapes are not implemented, ``check`` and ``check_shapes``."""

    layer_classes: tuple[type, ...] = ()
    #: Whether every input must be float32 (copies and views take any dtype).
    float_only = True

    def check(self, layer: Any) -> str | None:
        """Why this layer's params cannot run here, or None."""
        return None

    def check_inputs(self, layer: Any, specs: list[TensorSpec]) -> str | None:
        for i, spec in enumerate(specs):
            if not isinstance(spec, TensorSpec):
                return f"input {i} is not a tensor"
            if self.float_only and spec.dtype != F32:
                return f"input {i} is {spec.dtype}; the OpenCL kernels compute float32"
            if math.prod(spec.shape) > MAX_ELEMENTS:
                return f"input {i} has more than 2**31-1 elements"
        return self.check_shapes(layer, specs)

    def check_shapes(self, layer: Any, specs: list[TensorSpec]) -> str | None:
        """Why these input shapes cannot run here, or None."""
        return None

    def run(self, launch: Launch, layer: Any, inputs: list[DeviceTensor]) -> list[DeviceTensor]:
        raise NotImplementedError(f"{type(self).__name__} must implement run")


class Launch:
    """One ``run`` call: enqueues on ``queue``, every kernel after ``wait_for``.

    Outputs made with :meth:`output` get the last enqueued event when the run ends
    (:meth:`finish`); views keep the event of the tensor they view.
    """

    def __init__(self, device: OpenCLDevice, queue: Any, wait_for: list[Any], out: Sequence[DeviceTensor] | None):
        self.device = device
        self.cl = device._cl
        self.queue = queue
        self.wait_for = list(wait_for)
        self.out = list(out) if out is not None else None
        self.last_event: Any = None
        #: The first command enqueued (a node's start on its queue, for profiling).
        self.first_event: Any = None
        #: The kernel being enqueued, for error messages.
        self.kernel_name: str | None = None
        #: Source put before every program's and arguments after every kernel's, while a
        #: chain's producer enqueues (see :mod:`graphexec.devices.opencl.ops.chain`).
        self.store_source = ""
        self.store_args: tuple[Any, ...] = ()
        #: The same for the reads, while a convolution enqueues with an excitation gate folded
        #: in (see :mod:`graphexec.devices.opencl.ops.excitation`); its arguments go first.
        self.load_source = ""
        self.load_args: tuple[Any, ...] = ()
        self._fresh: set[int] = set()

    # -- tensors ---------------------------------------------------------------------------
    def output(self, index: int, shape: Sequence[int], dtype: Any = F32) -> DeviceTensor:
        """Output ``index``: the caller's ``out[index]`` if one was given, else a new buffer."""
        shape = tuple(int(d) for d in shape)
        dtype = np.dtype(dtype)
        if self.out is not None and index < len(self.out) and self.out[index] is not None:
            given = self.out[index]
            if given.size != math.prod(shape) or given.dtype != dtype:
                raise DeviceError(f"out[{index}] is {given.shape} {given.dtype}, the output is {shape} {dtype}")
            tensor = DeviceTensor(given.buffer, shape, dtype, None, given.offset, self.device)
        else:
            tensor = self.new_output(shape, dtype)
        self._fresh.add(id(tensor))
        return tensor

    def new_output(self, shape: tuple[int, ...], dtype: np.dtype) -> DeviceTensor:
        """Memory for an output no tensor was given for (a view's copied output)."""
        return self.device.alloc(shape, dtype)

    def alloc(self, shape: Sequence[int], dtype: Any = F32) -> DeviceTensor:
        """Working memory of the node, read by its own later commands only (attention's
        projections and scores)."""
        return self.device.alloc(shape, dtype)

    def view(self, source: DeviceTensor, shape: Sequence[int], offset: int = 0) -> DeviceTensor:
        """A contiguous view of ``source`` (its event included), ``offset`` elements further."""
        return DeviceTensor(source.buffer, tuple(shape), source.dtype, source.event, source.offset + offset,
                            self.device)

    # -- enqueueing ------------------------------------------------------------------------
    def program(self, name: str, *, prefix: str = "", **defines: Any) -> Built:
        """``kernels/<name>.cl`` with ``defines``, after ``prefix`` (the op's generated
        source), the reads' and the store's."""
        return self.device.program(name, defines, prefix + self.load_source + self.store_source)

    def row_program(self, name: str, kernel: str, length: int, *, prefix: str = "") -> tuple[Built, int]:
        """(program, LOCAL) for ``kernel`` of ``kernels/<name>.cl`` that gives each row of
        ``length`` elements one work-group of LOCAL work-items: a power of two, the device's
        :meth:`~graphexec.devices.opencl.device.OpenCLDevice.reduction_width` at most and no wider than
        the row needs, halved (and rebuilt) while the kernel allows less."""
        width = self.device.reduction_width()
        while width > 1 and width // 2 >= length:
            width //= 2
        while True:
            built = self.program(name, prefix=prefix, LOCAL=width)
            if width == 1 or self.device.kernel_info(built, kernel).max_work_group >= width:
                return built, width
            width //= 2

    def enqueue(self, built: Built, name: str, global_size: Sequence[int], local_size: Sequence[int] | None,
                *args: Any) -> Any:
        """Enqueue kernel ``name`` with ``args`` (ints as int32, floats as float32: see
        :meth:`OpenCLDevice.kernel`), and the reads' and the store's arguments."""
        self.kernel_name = name
        return self.submit(built, name, global_size, local_size, args + self.load_args + self.store_args)

    def submit(self, built: Built, name: str, global_size: Sequence[int], local_size: Sequence[int] | None,
               args: tuple[Any, ...]) -> Any:
        """Enqueue kernel ``name`` with all of its arguments."""
        kernel = self.device.cl_kernel(built, name, args)
        try:
            kernel.set_args(*args)
        except (RuntimeError, TypeError, ValueError, OverflowError):  # numpy bools; ints past 32 bits (DeviceError)
            kernel.set_args(*(kernel_scalar(value) for value in args))
        with self.device.host_calls:
            event = self.cl.enqueue_nd_range_kernel(
                self.queue, kernel, tuple(global_size), None if local_size is None else tuple(local_size),
                wait_for=self.wait_for or None,
            )
        self._enqueued(event)
        return event

    def _enqueued(self, event: Any) -> None:
        if self.first_event is None:
            self.first_event = event
        self.last_event = event

    def enqueue_1d(self, built: Built, name: str, n: int, *args: Any) -> Any:
        """Enqueue ``name`` over ``n`` work-items (rounded up to the work-group size)."""
        if n <= 0:
            return None
        local = self.device.local_size(built, name)
        return self.enqueue(built, name, (-(-n // local) * local,), (local,), *args)

    def copy(self, dst: DeviceTensor, src: DeviceTensor, count: int | None = None,
             dst_offset: int = 0, src_offset: int = 0) -> Any:
        """Copy ``count`` elements (default: all of ``src``) between buffers, offsets in elements."""
        count = src.size if count is None else count
        if count <= 0:
            return None
        item = src.dtype.itemsize
        wait = self.wait_for + ([src.event] if src.event is not None and src.event not in self.wait_for else [])
        with self.device.host_calls:
            event = self.cl.enqueue_copy(
                self.queue, dst.buffer, src.buffer, byte_count=count * item,
                src_offset=(src.offset + src_offset) * item, dst_offset=(dst.offset + dst_offset) * item,
                wait_for=wait or None,
            )
        self._enqueued(event)
        return event

    def finish(self, outputs: list[DeviceTensor]) -> list[DeviceTensor]:
        """Give every output made here the last event; copy into ``out`` what was not
        written there (a view's output); a run that enqueued nothing gets a marker."""
        if self.out is not None:
            for i, (tensor, given) in enumerate(zip(outputs, self.out)):
                if given is None or (tensor.buffer is given.buffer and tensor.offset == given.offset):
                    continue
                target = self.output(i, tensor.shape, tensor.dtype)
                self.copy(target, tensor)
                outputs[i] = target
        pending = [t for t in outputs if id(t) in self._fresh]
        if pending and self.last_event is None:
            self.mark()
        for tensor in pending:
            tensor.event = self.last_event
            tensor.started = self.first_event
        return outputs

    def mark(self) -> None:
        """Enqueue a marker, the event of outputs no command wrote (empty ones, joins in
        place). A node with only a marker has no device span, as a view has none: a
        marker's profiling stamps are not a command's (NVIDIA's driver gives one that waits
        on another queue the stamps of the previous command on its own queue)."""
        only = self.first_event is None
        with self.device.host_calls:
            marker = self.cl.enqueue_marker(self.queue, wait_for=self.wait_for or None)
        self._enqueued(marker)
        if only:
            self.first_event = None
