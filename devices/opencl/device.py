"""The OpenCL device: a context, in-order command queues, buffers, cached programs and weights.

::

    OpenCLDevice(Device)
    ├── queues                  in-order command queues (a configurable count)
    ├── upload(array, queue)    -> DeviceTensor (non-blocking; its .event is the copy)
    ├── download(tensor)        -> np.ndarray (waits for tensor.event)
    ├── supports(layer, specs)  by the layer's class and params (and input specs if given)
    ├── kernel(layer, ...)      -> OpenCLKernel: the plan's node, on one queue
    ├── run(layer, inputs, queue, wait_for, out=None) -> [DeviceTensor]
    │                           enqueues the kernels; each output's .event is the last one;
    │                           never waits on the host
    ├── warm_up(kernel)         builds its programs and uploads its weights ahead of time
    ├── prepare_replay(...)     stretches of nodes recorded once, replayed as launches (replay.py)
    ├── programs                ProgramCache: built once per context, binaries on disk
    └── constant(layer, key)    weights uploaded once per layer, freed with the layer

A kernel object belongs to one thread (``clSetKernelArg`` is not thread-safe): each
thread that enqueues gets its own, created on first use. The calls that create runtime
objects or enqueue commands are made one at a time per device (``host_calls``): PoCL
crashed when one thread created a kernel while another enqueued a copy, and these calls
only queue work, so taking turns costs little. Waits happen outside the lock.

Queues are in-order, so the kernels one ``run`` enqueues need only the first to wait for
``wait_for``; every kernel is nonetheless given the list (harmless) and the queue is
flushed at the end, so another queue may wait on the returned events at once.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from graphexec.devices.base import Device, DeviceKernel, Hints, Kernel
from graphexec.devices.opencl._runtime import load_pyopencl, translated
from graphexec.devices.opencl.programs import Built, ProgramCache, caches_itself, default_cache_dir, kernel_source
from graphexec.devices.opencl.replay_compiled import enqueue_mode
from graphexec.errors import DeviceError
from graphexec.layers.specs import TensorSpec

if TYPE_CHECKING:
    from graphexec.devices.opencl.selection import DeviceInfo
    from graphexec.layers.base import Layer

#: Element counts and offsets are passed to kernels as 32-bit ints.
MAX_ELEMENTS = 2**31 - 1


@lru_cache(maxsize=256)
def prefixed_source(prefix: str, name: str) -> str:
    """``prefix`` then ``kernels/<name>.cl``, one string per pair (its hash is then worked
    out once, not at every launch that looks its program up)."""
    return prefix + kernel_source(name) if prefix else kernel_source(name)


def kernel_scalar(value: Any) -> Any:
    """A kernel argument as the kernels take it: bools and ints as int32, floats as float32,
    anything else (buffers, local memory, None for a null pointer) as it is."""
    if isinstance(value, (bool, np.bool_)):
        return np.int32(value)
    if isinstance(value, (int, np.integer)):
        if not -(2**31) <= int(value) < 2**31:
            raise DeviceError(f"kernel argument {value} does not fit in 32 bits")
        return np.int32(value)
    if isinstance(value, (float, np.floating)):
        return np.float32(value)
    return value


def packed_ints(*values: Any) -> np.ndarray:
    """``values`` as one kernel argument, a struct of ``int`` fields in this order (the
    kernels that take one declare it): a launch costs the driver for each argument it has."""
    return np.array([kernel_scalar(int(v)) for v in values], np.int32)


def scalar_dtype(value: Any) -> np.dtype | None:
    """How pyopencl packs a kernel argument: int32 or float32 for a scalar, None (as it is)
    for buffers, local memory and null pointers."""
    value = kernel_scalar(value)
    return value.dtype if isinstance(value, np.generic) else None


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Element strides of a C-contiguous array of ``shape``."""
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= max(int(d), 1)
    return tuple(reversed(strides))


@dataclass(eq=False)
class DeviceTensor:
    """A C-contiguous tensor in an OpenCL buffer, starting ``offset`` elements in.

    Views that stay contiguous (a reshape, a chunk of channels of one image) share the
    buffer at another offset instead of copying; ``event`` is the command that produces
    the data (None: ready). Offsets are passed to kernels as arguments rather than made
    into sub-buffers, which would need ``CL_DEVICE_MEM_BASE_ADDR_ALIGN`` alignment.
    """

    buffer: Any  # pyopencl.Buffer
    shape: tuple[int, ...]
    dtype: np.dtype
    event: Any = None  # pyopencl.Event
    offset: int = 0
    device: OpenCLDevice | None = field(default=None, repr=False)
    #: The first command of the ``run`` (or upload) that made this tensor, for profiling a
    #: node's span on its queue; None for views, which enqueue nothing of their own.
    started: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.shape = tuple(int(d) for d in self.shape)
        self.dtype = np.dtype(self.dtype)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def byte_offset(self) -> int:
        return self.offset * self.dtype.itemsize

    def spec(self) -> TensorSpec:
        return TensorSpec(self.shape, self.dtype)

    def reshape(self, shape: Sequence[int]) -> DeviceTensor:
        """The same data with another shape (one dim may be -1); no copy, same event."""
        shape = tuple(int(d) for d in shape)
        if shape.count(-1) == 1:
            known = math.prod(d for d in shape if d != -1)
            if known == 0 or self.size % known:
                raise DeviceError(f"cannot reshape {self.shape} into {shape}")
            shape = tuple(self.size // known if d == -1 else d for d in shape)
        if math.prod(shape) != self.size or any(d < 0 for d in shape):
            raise DeviceError(f"cannot reshape {self.shape} into {shape}")
        return DeviceTensor(self.buffer, shape, self.dtype, self.event, self.offset, self.device)

    def narrow(self, dim: int, start: int, length: int) -> DeviceTensor:
        """``x[.., start:start+length, ..]`` on ``dim`` as a view; only where that view is
        contiguous (every dim before ``dim`` has size 1), else DeviceError. A plan can give
        such views as ``out=`` to producers so that a concat costs no copy."""
        dim = dim % self.ndim
        if any(d != 1 for d in self.shape[:dim]):
            raise DeviceError(f"narrowing dim {dim} of {self.shape} is not contiguous")
        if not 0 <= start <= start + length <= self.shape[dim]:
            raise DeviceError(f"narrow({dim}, {start}, {length}) is out of range for {self.shape}")
        inner = math.prod(self.shape[dim + 1:])
        shape = self.shape[:dim] + (length,) + self.shape[dim + 1:]
        return DeviceTensor(self.buffer, shape, self.dtype, self.event, self.offset + start * inner, self.device)


@dataclass(frozen=True)
class KernelInfo:
    """What the device says of one kernel: its largest work-group and preferred multiple."""

    max_work_group: int
    multiple: int


class OpenCLKernel(DeviceKernel):
    """A node on the device: its layer's commands enqueued on one queue (no host wait)."""

    name = "opencl"
    device: OpenCLDevice

    def __init__(self, device: OpenCLDevice, layer: Layer, inputs: Sequence[TensorSpec],
                 outputs: Sequence[TensorSpec], queue: int):
        super().__init__(device, layer, inputs, outputs)
        from graphexec.devices.opencl.ops import op_for

        self.queue = queue
        self.op = op_for(layer)

    @property
    def joins_in_place(self) -> bool:  # JoinOp leaves an input that lies in place alone
        return True

    def run(self, inputs: list[Any], outputs: list[Any] | None = None) -> list[Any]:
        try:
            if self.op is None:  # a layer the device does not run: its own error
                made = self.device.run(self.layer, inputs, self.queue, out=outputs)
            else:  # the plan checked the specs when it placed the node
                made = self.device.enqueue_node(self.op, self.layer, inputs, self.queue, out=outputs)
        except Exception as exc:  # a DeviceError names the kernel; this adds the node
            raise self.device.node_failure(self.layer, exc) from exc
        if outputs is None:
            return made
        for given, result in zip(outputs, made):  # the consumers wait on these events
            if result.buffer is not given.buffer or result.offset != given.offset:
                raise DeviceError(f"node {self.layer.name} ({self.layer.type}) on {self.device.describe()} did not "
                                  "write into the memory it was given")
            given.event, given.started = result.event, result.started
        return outputs

    def trace_span(self, node: int, outputs: list[Any], start_ns: int, end_ns: int) -> Any:
        """The node's span on its queue, or None when it enqueued nothing (a view)."""
        made = [t for t in outputs if getattr(t, "started", None) is not None]
        if not made:
            return None
        return self.device.pending_span(node, self.layer.name, self.layer.type, self.queue, made[0].started,
                                        made[0].event, start_ns, end_ns)


class OpenCLDevice(Device):
    """One OpenCL device with its own context; see the module doc for the interface."""

    kind = "opencl"

    def __init__(self, info: DeviceInfo, *, queues: int = 2, cache_dir: str | Path | None | bool = None,
                 profiling: bool = False, enqueue: str = "auto"):
        cl = self._cl = load_pyopencl()
        #: How replayed stretches are enqueued: ``"compiled"`` (one numba call a stretch) or
        #: ``"python"`` (a pyopencl call a command); see
        #: :func:`~graphexec.devices.opencl.replay_compiled.enqueue_mode`.
        self.enqueue = enqueue_mode(enqueue)
        self.info = info
        self.cl_device = dev = info.handle
        self.name = info.name
        self.context = cl.Context([dev])
        qp = cl.command_queue_properties
        #: Whether the device could run an out-of-order queue (the queues made here are in-order).
        self.out_of_order = bool(dev.queue_properties & qp.OUT_OF_ORDER_EXEC_MODE_ENABLE)
        self._profiling = bool(profiling)
        properties = qp.PROFILING_ENABLE if profiling else 0
        self.queues: tuple[Any, ...] = tuple(
            cl.CommandQueue(self.context, dev, properties=properties) for _ in range(queues)
        )
        self.max_work_group_size = int(dev.max_work_group_size)
        self.max_work_item_sizes = tuple(int(s) for s in dev.max_work_item_sizes)
        self.local_mem_size = int(dev.local_mem_size)
        self.compute_units = int(dev.max_compute_units)
        if cache_dir is None:
            directory: Path | None = None if caches_itself(info.platform) else default_cache_dir()
        elif cache_dir is True:
            directory = default_cache_dir()
        elif cache_dir is False:
            directory = None
        else:
            directory = Path(cache_dir)
        #: Held around every call that creates a runtime object or enqueues a command.
        self.host_calls = threading.Lock()
        self.programs = ProgramCache(self.context, dev, directory, self.host_calls)
        self._local = threading.local()
        self._kernel_info: dict[tuple[str, str], KernelInfo] = {}
        self._constants: weakref.WeakKeyDictionary[Any, dict[Any, Any]] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        #: Where replays note their commands' events, while :meth:`collect_launches` is open.
        self.launch_events: list[tuple[Any, int, Any]] | None = None

    def __repr__(self) -> str:
        return f"OpenCLDevice({self.name!r}, {self.info.platform!r}, queues={len(self.queues)})"

    # -- queues and memory ------------------------------------------------------------------
    def queue(self, which: int | Any | None = None) -> Any:
        """Queue ``which`` (an index, a queue of this device, or None for the first)."""
        if which is None:
            return self.queues[0]
        if isinstance(which, int):
            if not 0 <= which < len(self.queues):
                raise DeviceError(f"{self.name} has {len(self.queues)} queue(s), there is no queue {which}")
            return self.queues[which]
        return which

    def alloc(self, shape: Sequence[int], dtype: Any = np.float32) -> DeviceTensor:
        """An uninitialised tensor (its event is None)."""
        shape = tuple(int(d) for d in shape)
        dtype = np.dtype(dtype)
        size = math.prod(shape)
        if size > MAX_ELEMENTS:
            raise DeviceError(f"a tensor of shape {shape} has more than 2**31-1 elements")
        with translated(f"allocating {shape} {dtype} on {self.name}"), self.host_calls:
            buffer = self._cl.Buffer(self.context, self._cl.mem_flags.READ_WRITE, max(size * dtype.itemsize, 4))
        return DeviceTensor(buffer, shape, dtype, None, 0, self)

    def staging(self, shape: Sequence[int], dtype: Any = np.float32) -> np.ndarray:
        """A host array in memory the device allocated and mapped (``ALLOC_HOST_PTR``), kept
        mapped while the array lives: a write to the device from it is a DMA from page-locked
        memory, where one from a numpy array of its own first goes through the driver's
        staging copy (NVIDIA's OpenCL guide recommends this for repeated uploads)."""
        shape = tuple(int(d) for d in shape)
        dtype = np.dtype(dtype)
        cl = self._cl
        nbytes = max(math.prod(shape) * dtype.itemsize, 4)
        with translated(f"allocating a {shape} {dtype} host staging array for {self.name}"), self.host_calls:
            buffer = cl.Buffer(self.context, cl.mem_flags.READ_WRITE | cl.mem_flags.ALLOC_HOST_PTR, nbytes)
            array, _ = cl.enqueue_map_buffer(self.queues[0], buffer, cl.map_flags.WRITE | cl.map_flags.READ, 0,
                                             shape, dtype, is_blocking=True)
        return array

    def region(self, arena: DeviceTensor, byte_offset: int, shape: tuple[int, ...], dtype: Any) -> DeviceTensor:
        """A tensor inside ``arena``'s buffer, ``byte_offset`` bytes in (no sub-buffer: the
        offset goes to the kernels as an argument)."""
        dtype = np.dtype(dtype)
        return DeviceTensor(arena.buffer, shape, dtype, None, byte_offset // dtype.itemsize, self)

    def upload(self, array: Any, queue: int | Any | None = None, out: DeviceTensor | None = None) -> DeviceTensor:
        """Copy ``array`` to the device without waiting; the tensor's event is the copy.
        The values are taken now (a private host copy is kept until the transfer ends).
        ``out`` (e.g. a region of an arena) receives the copy instead of a new buffer."""
        host = np.array(array, order="C", copy=True)
        if host.dtype.kind not in "biufc":
            raise DeviceError(f"cannot upload an array of dtype {host.dtype}")
        if out is None:
            tensor = self.alloc(host.shape, host.dtype)
        elif out.size != host.size or out.dtype != host.dtype:
            raise DeviceError(f"cannot upload {host.shape} {host.dtype} into a tensor of {out.shape} {out.dtype}")
        else:
            tensor = out
        if host.nbytes:
            q = self.queue(queue)
            with translated(lambda: f"uploading {host.shape} {host.dtype} to {self.name}"), self.host_calls:
                tensor.event = tensor.started = self._cl.enqueue_copy(
                    q, tensor.buffer, host, dst_offset=tensor.byte_offset, is_blocking=False)
                q.flush()  # another queue may wait on this copy at once
        return tensor

    def download(self, tensor: DeviceTensor, queue: int | Any | None = None, out: np.ndarray | None = None,
                 ) -> np.ndarray:
        """The tensor's values on the host (in ``out`` if given), once its event has completed."""
        if out is None:
            out = np.empty(tensor.shape, dtype=tensor.dtype)
        elif out.size != tensor.size or out.dtype != tensor.dtype or not out.flags.c_contiguous:
            raise DeviceError(f"cannot download {tensor.shape} {tensor.dtype} into an array of {out.shape} {out.dtype}")
        if out.nbytes:
            wait = [tensor.event] if tensor.event is not None else None
            with translated(lambda: f"downloading {tensor.shape} {tensor.dtype} from {self.name}"):
                with self.host_calls:
                    copied = self._cl.enqueue_copy(self.queue(queue), out, tensor.buffer,
                                                   src_offset=tensor.byte_offset, wait_for=wait, is_blocking=False)
                copied.wait()
        return out

    def finish(self) -> None:
        """Wait until every queue is empty."""
        with translated(f"waiting for {self.name}"):
            for q in self.queues:
                q.finish()

    # -- programs and kernels --------------------------------------------------------------
    def program(self, name: str, defines: dict[str, Any] | None = None, prefix: str = "") -> Built:
        """``kernels/<name>.cl`` built with ``-DKEY=value`` for each define, after the
        source ``prefix`` (generated: a chain's store)."""
        options = tuple(f"-D{k}={v}" for k, v in sorted((defines or {}).items()))
        what = f"kernels/{name}.cl {' '.join(options)}" + (" with a generated store" if prefix else "")
        return self.programs.get(prefixed_source(prefix, name), options, what=what)

    def source_program(self, source: str, what: str) -> Built:
        """A program from generated source."""
        return self.programs.get(source, (), what=what)

    def cl_kernel(self, built: Built, name: str, args: Sequence[Any] | None = None) -> Any:
        """This thread's kernel object ``name`` of ``built`` (created on first use).

        ``args``, the arguments about to be set, declare the kernel's scalar arguments the
        first time they are given (ints as int32, floats as float32, by position): pyopencl
        then packs plain Python scalars itself, where an undeclared numpy scalar goes
        through its generic path, a convolution's ~20 arguments costing more than its
        kernel (docs/design/opencl.md)."""
        kernels = getattr(self._local, "kernels", None)
        if kernels is None:
            kernels = self._local.kernels = {}
        key = (built.key, name)
        entry = kernels.get(key)
        if entry is None:
            with translated(f"creating kernel {name} on {self.name}"), self.host_calls:
                entry = kernels[key] = [self._cl.Kernel(built.program, name), False]
        kernel, typed = entry
        if args is not None and not typed:
            kernel.set_scalar_arg_dtypes([scalar_dtype(v) for v in args])
            entry[1] = True
        return kernel

    def kernel_info(self, built: Built, name: str) -> KernelInfo:
        """The work-group limits of kernel ``name`` on this device (queried once)."""
        key = (built.key, name)
        info = self._kernel_info.get(key)
        if info is None:
            cl = self._cl
            kernel = self.cl_kernel(built, name)
            with translated(f"querying kernel {name} on {self.name}"):
                wg = kernel.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, self.cl_device)
                multiple = kernel.get_work_group_info(
                    cl.kernel_work_group_info.PREFERRED_WORK_GROUP_SIZE_MULTIPLE, self.cl_device)
            info = self._kernel_info[key] = KernelInfo(int(wg), max(1, int(multiple)))
        return info

    def local_size(self, built: Built, name: str, target: int = 256) -> int:
        """A 1-D work-group size for kernel ``name``: about ``target``, a multiple of the
        device's preferred multiple, within the kernel's limit."""
        info = self.kernel_info(built, name)
        limit = min(info.max_work_group, self.max_work_item_sizes[0])
        size = min(target, limit)
        if size >= info.multiple:
            size -= size % info.multiple
        return max(1, size)

    def reduction_width(self) -> int:
        """The work-group size of the reduction kernels: the largest power of two <= 256
        the device allows (a kernel that allows less is rebuilt narrower)."""
        width = 1
        while width * 2 <= min(256, self.max_work_group_size, self.max_work_item_sizes[0]):
            width *= 2
        return width

    # -- constants (weights) ---------------------------------------------------------------
    def constant(self, layer: Any, key: Any, make: Callable[[], np.ndarray]) -> Any:
        """The buffer holding ``make()`` for ``(layer, key)``, uploaded on first use and kept
        while the layer lives (weights, folded batch norms, interpolation tables)."""
        with self._lock:
            per_layer = self._constants.get(layer)
            if per_layer is None:
                per_layer = self._constants[layer] = {}
            buffer = per_layer.get(key)
            if buffer is None:
                host = np.asarray(make(), order="C")
                cl = self._cl
                with translated(f"uploading weights of {getattr(layer, 'name', layer)} to {self.name}"):
                    flags = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
                    with self.host_calls:
                        buffer = cl.Buffer(self.context, flags, hostbuf=host) if host.nbytes else \
                            cl.Buffer(self.context, cl.mem_flags.READ_ONLY, 4)
                per_layer[key] = buffer
            return buffer

    # -- what runs here ----------------------------------------------------------------------
    def unsupported_reason(self, layer: Layer, inputs: Sequence[TensorSpec] | None = None) -> str | None:
        """Why ``layer`` cannot run here (None: it can). With ``inputs`` (their specs), the
        shapes and dtypes are checked too; without, only the layer's class and params."""
        from graphexec.devices.opencl.ops import op_for

        op = op_for(layer)
        if op is None:
            return f"no OpenCL kernel for {type(layer).__name__} ({layer.type})"
        reason = op.check(layer)
        if reason is None and inputs is not None:
            reason = op.check_inputs(layer, list(inputs))
        return reason

    def supports(self, layer: Layer, inputs: Sequence[TensorSpec] | None = None) -> bool:
        """Whether ``layer`` can run here (see :meth:`unsupported_reason`)."""
        return self.unsupported_reason(layer, inputs) is None

    def kernel(self, layer: Layer, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec],
               hints: Hints = Hints()) -> OpenCLKernel:
        return OpenCLKernel(self, layer, inputs, outputs, hints.queue)

    def warm_up(self, kernel: Kernel) -> None:
        """Build the programs ``kernel``'s layer needs for its input specs and upload its
        weights, by running it once on uninitialised inputs and waiting: afterwards
        :meth:`run` only enqueues (a first run otherwise compiles on the host)."""
        layer, queue = kernel.layer, getattr(kernel, "queue", 0)
        tensors = [self.alloc(spec.shape, spec.dtype) for spec in kernel.input_specs]  # type: ignore[union-attr]
        try:
            made = self.run(layer, tensors, queue, wait_for=[])
            for tensor in made:
                if tensor.event is not None:
                    with translated(f"warming up {layer.name} on {self.name}"):
                        tensor.event.wait()
        except Exception as exc:
            raise self.node_failure(layer, exc, " while warming up") from exc



    def run(
        self,
        layer: Layer,
        inputs: Sequence[DeviceTensor],
        queue: int | Any | None = None,
        wait_for: Sequence[Any] | None = None,
        out: Sequence[DeviceTensor] | None = None,
    ) -> list[DeviceTensor]:
        """Enqueue ``layer`` on ``queue`` after the events ``wait_for`` (default: the
        inputs' own events); return its outputs, whose ``.event`` is the last kernel's.

        ``out`` optionally gives tensors (e.g. :meth:`DeviceTensor.narrow` views of a
        concat's output) for the outputs to be written into. No host wait happens here.
        """
        from graphexec.devices.opencl.ops import op_for

        reason = self.unsupported_reason(layer, [t.spec() for t in inputs])
        if reason is not None:
            raise DeviceError(f"{layer.name} ({layer.type}) cannot run on {self.name}: {reason}")
        op = op_for(layer)
        assert op is not None  # checked above
        return self.enqueue_node(op, layer, inputs, queue, wait_for, out)

    def enqueue_node(self, op: Any, layer: Layer, inputs: Sequence[DeviceTensor], queue: int | Any | None = None,
                     wait_for: Sequence[Any] | None = None, out: Sequence[DeviceTensor] | None = None,
                     ) -> list[DeviceTensor]:
        """:meth:`run` for a layer whose support for these inputs was checked when its
        plan was made (``op``: its op)."""
        from graphexec.devices.opencl.ops import Launch

        if wait_for is None:
            events = [t.event for t in inputs if t.event is not None]
        else:
            events = [e for e in wait_for if e is not None]
        q = self.queue(queue)
        launch = Launch(self, q, events, out)

        def where() -> str:
            kernel = f", kernel {launch.kernel_name}" if launch.kernel_name else ""
            return f"running {layer.name} ({layer.type}) on {self.name}{kernel}"

        with translated(where):
            outputs = launch.finish(op.run(launch, layer, list(inputs)))
            with self.host_calls:
                q.flush()
        return outputs

    # -- replay ------------------------------------------------------------------------------
    def prepare_replay(self, runs: Sequence[Sequence[Any]], regions: Mapping[str, tuple[int, Any]],
                       wanted: Collection[str]) -> Any:
        """The runs recorded as launches over the arena (see
        :mod:`graphexec.devices.opencl.replay`)."""
        from graphexec.devices.opencl.replay import prepare

        return prepare(self, runs, regions, wanted)

    def collect_launches(self) -> Any:
        """A context in which every replayed command's (layer, queue, event) is collected
        into the list it gives (kernel times, with ``profiling=True``)."""
        from graphexec.devices.opencl.replay import collecting

        return collecting(self)

    # -- profiling ---------------------------------------------------------------------------
    @property
    def profiling(self) -> bool:
        """Whether the queues record event timestamps (``open_device(..., profiling=True)``)."""
        return self._profiling

    def clock_offset_ns(self) -> int:
        """Host ``perf_counter_ns`` minus the device's profiling clock, measured with a
        marker's QUEUED timestamp (taken while the host enqueues it); cached for a while."""
        import time

        cached = getattr(self, "_clock", None)
        now = time.perf_counter_ns()
        if cached is not None and now - cached[1] < 10 * 10**9:
            return cached[0]
        with translated(f"reading the profiling clock of {self.name}"):
            with self.host_calls:
                before = time.perf_counter_ns()
                marker = self._cl.enqueue_marker(self.queues[0])
                after = time.perf_counter_ns()
            marker.wait()
            offset = (before + after) // 2 - int(marker.profile.queued)
        self._clock = (offset, after)
        return offset

    def pending_span(self, node: int, name: str, op_type: str, queue: int, first: Any, last: Any,
                     host_start_ns: int, host_end_ns: int) -> Any:
        """A trace span of one node on lane ``opencl queue <queue>``, resolved once the run is
        over (see :mod:`graphexec.devices.opencl.profiling`)."""
        from graphexec.devices.opencl.profiling import QueueSpan

        return QueueSpan(self, node, name, op_type, queue, first, last, host_start_ns, host_end_ns)

    def release(self) -> None:
        """Wait for the queues and free the uploaded weights (uploaded again on next use)."""
        self.finish()
        with self._lock:
            self._constants = weakref.WeakKeyDictionary()
