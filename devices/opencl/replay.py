"""Device nodes recorded once and replayed: the OpenCL side of :mod:`graphexec.replay`.

::

    prepare(device, runs, regions, wanted) -> PreparedReplay      once per plan and memory plan
    ├── each node's op runs once through a Recorder               its launches noted, not enqueued
    └── each stretch: its commands, the waits across queues, what it exports
    PreparedReplay.bind(views) -> BoundReplay                     once per arena
    BoundReplay.run(k, values)                                    every run: enqueue, nothing else
    └── through pyopencl, or in one compiled call                 (replay_compiled.py, the jit extra)

**Recording.** A :class:`Recorder` is the :class:`~graphexec.devices.opencl.ops.base.Launch`
an op runs through, noting each kernel (program, name, sizes, arguments) and each copy
instead of enqueueing it; an upload is noted as a write from a staging array the binding
owns (the host value is copied there as the run enqueues it, so the caller's array is
not read later). The tensors it is given are templates: a tensor of the arena is
the :data:`ARENA` placeholder at the offset the memory plan gave it; memory a node asks for
beside the arena (a view's copied output, attention's working tensors) is a
:class:`Scratch` placeholder. A node that cannot be recorded (an input with no template, or
it did not write where it was told) ends its stretch and runs node by node.

**Ordering.** Queues are in order and the stretch is enqueued in the plan's (topological)
order, so a node waits only for what crosses queues: the last command of a producer on
another queue, or a tensor made outside the stretch (its event, read when the stretch
runs). Before such a wait the producer's queue is flushed, once, as OpenCL asks of an
event another queue waits on; a queue is also flushed after its first command and then
every :data:`FLUSH_EVERY`, so the device works while the host enqueues the rest, and every
queue the stretch used is flushed at its end. An operand read outside the stretch carries
the event of its last write on each queue, joined by a marker where there are several (a
join written in place from two queues). The
memory plan's reuse stays safe: it shares bytes only along paths of the DAG, and every
edge of a path is either a wait or the order of one queue.

**Binding.** Per arena, every recorded kernel gets a kernel object of its own with all its
arguments set, the placeholders replaced by the arena's buffer and the arena's own scratch
buffers. An arena serves one run at a time and no kernel object serves two arenas, so no
two threads ever set the arguments of one kernel object (``clSetKernelArg`` is not
thread-safe) and a run sets none at all.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from loguru import logger

from graphexec.devices.base import ReplayNode
from graphexec.devices.opencl._runtime import translated
from graphexec.devices.opencl.device import DeviceTensor, kernel_scalar
from graphexec.devices.opencl.ops.base import F32, Launch, op_for
from graphexec.devices.opencl.replay_compiled import CommandFailed, CompiledStretch
from graphexec.errors import DeviceError
from graphexec.layers.specs import Spec

if TYPE_CHECKING:
    from graphexec.devices.opencl.device import OpenCLDevice
    from graphexec.devices.opencl.programs import Built


class _Placeholder:
    """Stands for a buffer known only when a replay is bound to an arena."""

    def __init__(self, what: str):
        self.what = what

    def __repr__(self) -> str:
        return f"<{self.what}>"


#: The device arena's buffer, in recorded arguments and templates.
ARENA = _Placeholder("device arena")

#: What a bound command enqueues.
KERNEL, COPY, WRITE = "kernel", "copy", "write"


@dataclass(frozen=True)
class Scratch:
    """A buffer each arena's binding allocates beside the arena: ``("value", node, k)`` is
    the node's k-th output that no arena region holds (a view copied into memory of its
    own); ``("work", queue, k)`` the k-th working tensor of the nodes on a queue (shared
    by them: a queue runs its nodes one after another)."""

    key: tuple[Any, ...]


@dataclass(frozen=True)
class KernelCall:
    """One kernel launch as recorded: arguments typed as the kernels take them."""

    built: Built
    name: str
    global_size: tuple[int, ...]
    local_size: tuple[int, ...] | None
    args: tuple[Any, ...]


@dataclass(frozen=True)
class CopyCall:
    """One buffer-to-buffer copy as recorded (offsets and size in bytes)."""

    src: Any
    dst: Any
    nbytes: int
    src_offset: int
    dst_offset: int


class Recorder(Launch):
    """A Launch that notes the commands an op would enqueue (see the module doc)."""

    def __init__(self, device: OpenCLDevice, queue: int, out: Sequence[DeviceTensor] | None,
                 scratch: dict[Scratch, int], node: int):
        super().__init__(device, device.queue(queue), [], out)
        self.calls: list[KernelCall | CopyCall] = []
        self._scratch = scratch
        self._node = node
        self._queue = queue
        self._values = 0
        self._working = 0

    def submit(self, built: Built, name: str, global_size: Sequence[int], local_size: Sequence[int] | None,
               args: tuple[Any, ...]) -> Any:
        self.calls.append(KernelCall(built, name, tuple(int(g) for g in global_size),
                                     None if local_size is None else tuple(int(n) for n in local_size),
                                     tuple(kernel_scalar(a) for a in args)))
        return None

    def copy(self, dst: DeviceTensor, src: DeviceTensor, count: int | None = None,
             dst_offset: int = 0, src_offset: int = 0) -> Any:
        count = src.size if count is None else count
        if count > 0:
            item = src.dtype.itemsize
            self.calls.append(CopyCall(src.buffer, dst.buffer, count * item, (src.offset + src_offset) * item,
                                       (dst.offset + dst_offset) * item))
        return None

    def new_output(self, shape: tuple[int, ...], dtype: np.dtype) -> DeviceTensor:
        self._values += 1
        return self._placeholder(("value", self._node, self._values), shape, dtype)

    def alloc(self, shape: Sequence[int], dtype: Any = F32) -> DeviceTensor:
        self._working += 1
        return self._placeholder(("work", self._queue, self._working), tuple(int(d) for d in shape), np.dtype(dtype))

    def mark(self) -> None:
        """Nothing: outputs no command wrote take their inputs' events (see :func:`_stretch`)."""

    def _placeholder(self, key: tuple[Any, ...], shape: tuple[int, ...], dtype: np.dtype) -> DeviceTensor:
        scratch = Scratch(key)
        self._scratch[scratch] = max(self._scratch.get(scratch, 4), math.prod(shape) * dtype.itemsize)
        return DeviceTensor(scratch, shape, dtype, None, 0, self.device)


@dataclass(frozen=True)
class WriteCall:
    """A host value copied to the device (an upload node): the value of operand ``source``,
    through a staging array of the arena's own."""

    source: str
    dst: Any
    dst_offset: int
    shape: tuple[int, ...]
    dtype: np.dtype


@dataclass(frozen=True)
class _Recorded:
    """One node's commands and its outputs' templates."""

    node: ReplayNode
    queue: int
    calls: tuple[KernelCall | CopyCall | WriteCall, ...]
    outputs: tuple[DeviceTensor, ...]


@dataclass(frozen=True)
class _Command:
    """A recorded command in its stretch: ``waits`` index the run's events (the imports'
    first, then one per command); ``flushes`` are queues to flush before it."""

    node: int
    queue: int
    call: KernelCall | CopyCall | WriteCall
    waits: tuple[int, ...]
    flushes: tuple[int, ...]


@dataclass(frozen=True)
class _Export:
    """An operand a stretch makes and others read: the events (indices) that finish writing
    it, and the queue where a marker joins them when there are several."""

    name: str
    template: DeviceTensor
    events: tuple[int, ...]
    queue: int


@dataclass(frozen=True)
class _Stretch:
    nodes: tuple[int, ...]
    #: Operands read from outside the stretch, whose events the first readers wait for.
    imports: tuple[str, ...]
    commands: tuple[_Command, ...]
    exports: tuple[_Export, ...]
    queues: tuple[int, ...]
    layers: Mapping[int, Any]


def _template(device: OpenCLDevice, offset: int, spec: Spec) -> DeviceTensor:
    dtype = np.dtype(spec.dtype)  # type: ignore[attr-defined]
    return DeviceTensor(ARENA, spec.shape, dtype, None, offset // dtype.itemsize, device)  # type: ignore[attr-defined]


def _record(device: OpenCLDevice, node: ReplayNode, templates: dict[str, DeviceTensor],
            scratch: dict[Scratch, int]) -> _Recorded | None:
    """``node`` recorded over ``templates`` (its outputs' templates added there), or None."""
    kernel = node.kernel
    layer = kernel.layer
    if node.upload:
        target = templates.get(node.outputs[0])
        if target is None or target.buffer is not ARENA:
            return None
        call = WriteCall(node.inputs[0], ARENA, target.byte_offset, target.shape, target.dtype)
        return _Recorded(node, node.queue, (call,), (target,))
    op = op_for(layer)
    inputs = [templates.get(name) for name in node.inputs]
    if op is None or None in inputs:
        return None
    given = [templates.get(name) for name in node.outputs]
    writes = kernel.writes_into
    if writes and None in given:
        return None  # an output without an arena region: it gets fresh memory each run
    recorder = Recorder(device, kernel.queue, given if writes else None, scratch, node.index)  # type: ignore[attr-defined]
    try:
        made = recorder.finish(op.run(recorder, layer, list(inputs)))
    except Exception as exc:  # noqa: BLE001  (any failure: the node runs node by node, where it names itself)
        logger.debug("{} ({}) is not replayed: {}: {}", layer.name, layer.type, type(exc).__name__, exc)
        return None
    if len(made) != len(node.outputs):
        return None
    if writes and any(m.buffer is not g.buffer or m.offset != g.offset for m, g in zip(made, given)):  # type: ignore[union-attr]
        return None
    outputs = tuple(DeviceTensor(t.buffer, t.shape, t.dtype, None, t.offset, device) for t in made)
    templates.update(zip(node.outputs, outputs))
    return _Recorded(node, kernel.queue, tuple(recorder.calls), outputs)  # type: ignore[attr-defined]


#: Commands a queue gathers before the replay flushes it, so that the device starts on them
#: while the host enqueues the rest (a queue's first command goes at once): without it the
#: driver may hold them all until the stretch's end, and the device idles meanwhile.
FLUSH_EVERY = 4


def _flush_after(last_flushed: int) -> int:
    """How many unflushed commands a queue holds before it is flushed: 1 until its first
    flush (the device starts at once), then :data:`FLUSH_EVERY`."""
    return 1 if last_flushed < 0 else FLUSH_EVERY


def _stretch(recorded: list[_Recorded], exported: set[str]) -> _Stretch:
    """The commands of consecutive recorded nodes with their waits and flushes (see the
    module doc), and the operands of ``exported`` they make."""
    produced = {name for r in recorded for name in r.node.outputs}
    imports = tuple(dict.fromkeys(name for r in recorded if not r.node.upload
                                  for name in r.node.inputs if name not in produced))
    sources: dict[str, tuple[int, ...]] = {name: (k,) for k, name in enumerate(imports)}
    queue_of: list[int | None] = [None] * len(imports)  # None: made outside, always waited for
    flushed: dict[int, int] = {}  # queue -> the last event index flushed there
    unflushed: dict[int, int] = {}  # queue -> its commands since it was last flushed
    commands: list[_Command] = []
    for r in recorded:
        reads = () if r.node.upload else r.node.inputs  # an upload reads a host value
        read = sorted({e for name in reads for e in sources[name]})
        waits = tuple(e for e in read if queue_of[e] != r.queue)
        for k, call in enumerate(r.calls):
            index = len(queue_of)
            wanted = {q for e in waits if (q := queue_of[e]) is not None and flushed.get(q, -1) < e} if k == 0 else set()
            wanted |= {q for q, count in unflushed.items() if count >= _flush_after(flushed.get(q, -1))}
            flushes = tuple(sorted(wanted))
            for q in flushes:
                flushed[q] = index - 1  # every command enqueued there so far
                unflushed[q] = 0
            commands.append(_Command(r.node.index, r.queue, call, waits if k == 0 else (), flushes))
            queue_of.append(r.queue)
            unflushed[r.queue] = unflushed.get(r.queue, 0) + 1
        made = (len(queue_of) - 1,) if r.calls else tuple(read)
        for name in r.node.outputs:
            sources[name] = made
    templates = {name: t for r in recorded for name, t in zip(r.node.outputs, r.outputs)}
    exports = tuple(_Export(name, templates[name], *_last_writes(sources[name], queue_of))
                    for name in dict.fromkeys(n for r in recorded for n in r.node.outputs) if name in exported)
    return _Stretch(tuple(r.node.index for r in recorded), imports, tuple(commands), exports,
                    tuple(sorted({r.queue for r in recorded})), {r.node.index: r.node.kernel.layer for r in recorded})


def _last_writes(made_by: tuple[int, ...], queue_of: list[int | None]) -> tuple[tuple[int, ...], int]:
    """The events a reader outside the stretch must wait for, of an operand made by the
    events ``made_by``, and the queue of the last: the last on each queue (a queue runs in
    order) and every import. A join written in place by producers on two queues has two."""
    last: dict[int | None, int] = {}
    imported = [e for e in made_by if queue_of[e] is None]
    for event in made_by:
        if queue_of[event] is not None:
            last[queue_of[event]] = max(event, last.get(queue_of[event], -1))
    events = tuple(sorted([*last.values(), *imported]))
    queue = queue_of[events[-1]] if events else None
    return events, 0 if queue is None else queue


def prepare(device: OpenCLDevice, runs: Sequence[Sequence[ReplayNode]], regions: Mapping[str, tuple[int, Spec]],
            wanted: Collection[str]) -> PreparedReplay:
    """The runs recorded into stretches (see :meth:`~graphexec.devices.base.Device.prepare_replay`)."""
    templates = {name: _template(device, offset, spec) for name, (offset, spec) in regions.items()}
    scratch: dict[Scratch, int] = {}
    groups: list[list[_Recorded]] = []
    for run in runs:
        current: list[_Recorded] = []
        for node in run:
            recorded = _record(device, node, templates, scratch)
            if recorded is not None:
                current.append(recorded)
            elif current:
                groups.append(current)
                current = []
        if current:
            groups.append(current)
    readers: dict[str, set[int]] = {}
    for run in runs:
        for node in run:
            for name in node.inputs:
                readers.setdefault(name, set()).add(node.index)
    stretches = []
    for group in groups:
        inside = {r.node.index for r in group}
        exported = {name for r in group for name in r.node.outputs
                    if name in wanted or readers.get(name, set()) - inside}
        stretches.append(_stretch(group, exported))
    return PreparedReplay(device, tuple(stretches), scratch)


class PreparedReplay:
    """A plan's recorded stretches; :meth:`bind` gives them to one arena."""

    def __init__(self, device: OpenCLDevice, stretches: tuple[_Stretch, ...], scratch: dict[Scratch, int]):
        self.device = device
        self._stretches = stretches
        self._scratch = scratch
        self.stretches: tuple[tuple[int, ...], ...] = tuple(s.nodes for s in stretches)
        self.exported: frozenset[str] = frozenset(export.name for s in stretches for export in s.exports)

    def bind(self, views: Mapping[str, Any]) -> BoundReplay:
        """The stretches over the arena whose tensors are ``views``: a kernel object per
        launch with its arguments set, and this arena's own scratch buffers."""
        device = self.device
        buffers: dict[Any, Any] = {
            ARENA: next((t.buffer for t in views.values() if isinstance(t, DeviceTensor)), None)}
        for scratch, nbytes in self._scratch.items():
            buffers[scratch] = device.alloc((nbytes,), np.uint8).buffer
        compiled = device.enqueue == "compiled"
        bound = tuple(_Bound(device, s, buffers, compiled) for s in self._stretches)
        return BoundReplay(device, bound, buffers)


def _real(value: Any, buffers: Mapping[Any, Any]) -> Any:
    if isinstance(value, (_Placeholder, Scratch)):
        found = buffers.get(value)
        if found is None:
            raise DeviceError(f"no buffer for {value!r} in this arena")
        return found
    return value


class _Bound:
    """One stretch over one arena: what :meth:`BoundReplay.run` walks."""

    def __init__(self, device: OpenCLDevice, stretch: _Stretch, buffers: Mapping[Any, Any],
                 compiled: bool = False):
        cl = device._cl
        self.stretch = stretch
        self.imports = stretch.imports
        queues = device.queues
        program = []
        for command in stretch.commands:
            call = command.call
            layer = stretch.layers[command.node]
            flushes = tuple(queues[q] for q in command.flushes)
            queue = queues[command.queue]
            if isinstance(call, KernelCall):
                doing = f"preparing {layer.name} ({layer.type}) on {device.name}, kernel {call.name}"
                with translated(doing):
                    with device.host_calls:
                        kernel = cl.Kernel(call.built.program, call.name)
                    for k, value in enumerate(call.args):
                        kernel.set_arg(k, _real(value, buffers))
                program.append((KERNEL, queue, kernel, (call.global_size, call.local_size), command.waits, flushes))
            elif isinstance(call, CopyCall):
                copy = (_real(call.src, buffers), _real(call.dst, buffers), call.nbytes, call.src_offset,
                        call.dst_offset)
                program.append((COPY, queue, None, copy, command.waits, flushes))
            else:
                staging = device.staging(call.shape, call.dtype)  # the run's values, taken as it enqueues
                write = (call.source, staging, _real(call.dst, buffers), call.dst_offset)
                program.append((WRITE, queue, None, write, command.waits, flushes))
        self.program = tuple(program)
        self.flush = tuple(queues[q] for q in stretch.queues)
        self.exports = tuple((e.name, DeviceTensor(_real(e.template.buffer, buffers), e.template.shape,
                                                   e.template.dtype, None, e.template.offset, device),
                              e.events, queues[e.queue]) for e in stretch.exports)
        #: The stretch as the compiled loop's table, where the device enqueues that way.
        self.compiled = CompiledStretch(device, self) if compiled else None


class BoundReplay:
    """A plan's stretches bound to one arena (see the module doc)."""

    def __init__(self, device: OpenCLDevice, stretches: tuple[_Bound, ...], buffers: Mapping[Any, Any]):
        self.device = device
        self.stretches = stretches
        #: Kept while the kernels use them: setting a kernel's argument does not retain a buffer.
        self._buffers = buffers

    def run(self, k: int, values: dict[str, Any]) -> None:
        """Enqueue stretch ``k`` after its inputs (read from ``values``) and put the
        operands it exports into ``values``, each with the event that makes it."""
        bound = self.stretches[k]
        device = self.device
        sink = device.launch_events
        if bound.compiled is not None:
            try:
                events = bound.compiled.run(values, every_event=sink is not None)
            except CommandFailed as exc:
                raise self._failure(bound, exc.index, exc) from exc
        else:
            events = self._enqueue(bound, values)
        for name, tensor, made_by, queue in bound.exports:
            tensor.event = self._joined([e for k in made_by if (e := events[k]) is not None], queue)
            values[name] = tensor
        if sink is not None:
            stretch = bound.stretch
            sink.extend((stretch.layers[c.node], c.queue, e)
                        for c, e in zip(stretch.commands, events[len(bound.imports):]))

    def _joined(self, events: list[Any], queue: Any) -> Any:
        """One event for an export: its only one, or a marker on ``queue`` after them all
        (a join written in place on two queues: waiting for one alone read stale bytes)."""
        if len(events) <= 1:
            return events[0] if events else None
        with translated(f"joining the events of a tensor written on several queues of {self.device.name}"):
            with self.device.host_calls:
                return self.device._cl.enqueue_marker(queue, wait_for=events)

    def _enqueue(self, bound: _Bound, values: dict[str, Any]) -> list[Any]:
        """Enqueue ``bound`` through pyopencl: the events of its imports and commands."""
        device = self.device
        cl = device._cl
        enqueue = cl.enqueue_nd_range_kernel  # looked up per run, not per launch
        copy, write = _copy_buffer(cl), _write_buffer(cl)
        events = [values[name].event for name in bound.imports]
        try:
            with device.host_calls:
                for kind, queue, kernel, what, waits, flushes in bound.program:
                    for other in flushes:
                        other.flush()
                    wait = None
                    if waits:
                        wait = [e for w in waits if (e := events[w]) is not None] or None
                    if kind is KERNEL:
                        events.append(enqueue(queue, kernel, what[0], what[1], None, wait))
                    elif kind is COPY:
                        events.append(copy(queue, *what, wait))
                    else:
                        source, staging, buffer, offset = what
                        np.copyto(staging, values[source])
                        events.append(write(queue, buffer, staging, offset, wait))
                for queue in bound.flush:
                    queue.flush()
        except Exception as exc:
            raise self._failure(bound, len(events) - len(bound.imports), exc) from exc
        return events

    def _failure(self, bound: _Bound, index: int, exc: BaseException) -> DeviceError:
        """``exc``, raised enqueueing command ``index`` of a stretch, naming its node and kernel."""
        stretch = bound.stretch
        if index >= len(stretch.commands):
            return DeviceError(f"flushing the queues of {self.device.name}: {type(exc).__name__}: {exc}")
        command = stretch.commands[index]
        layer = stretch.layers[command.node]
        call = command.call
        if isinstance(call, KernelCall):
            what = f"kernel {call.name}"
        else:
            what = "a copy" if isinstance(call, CopyCall) else f"copying {call.source} to the device"
        text = str(exc) if isinstance(exc, DeviceError) else f"{type(exc).__name__}: {exc}"
        return self.device.node_failure(
            layer, DeviceError(f"running {layer.name} ({layer.type}) on {self.device.name}, {what}: {text}"))


def _write_buffer(cl: Any) -> Any:
    """pyopencl's non-blocking host-to-buffer copy, directly where it can (as :func:`_copy_buffer`)."""
    direct = getattr(getattr(cl, "_cl", None), "_enqueue_write_buffer", None)
    if direct is not None:
        return lambda queue, buffer, host, offset, wait: direct(queue, buffer, host, offset, wait, False)

    def write(queue: Any, buffer: Any, host: Any, offset: int, wait: Any) -> Any:
        return cl.enqueue_copy(queue, buffer, host, dst_offset=offset, wait_for=wait, is_blocking=False)

    return write


def _copy_buffer(cl: Any) -> Any:
    """pyopencl's buffer-to-buffer copy without its generic wrapper (~3 us instead of ~12
    on PoCL), or through the wrapper where this pyopencl lacks it."""
    direct = getattr(getattr(cl, "_cl", None), "_enqueue_copy_buffer", None)
    if direct is not None:
        return direct

    def copy(queue: Any, src: Any, dst: Any, nbytes: int, src_offset: int, dst_offset: int, wait: Any) -> Any:
        return cl.enqueue_copy(queue, dst, src, byte_count=nbytes, src_offset=src_offset, dst_offset=dst_offset,
                               wait_for=wait)

    return copy


@contextmanager
def collecting(device: OpenCLDevice) -> Iterator[list[tuple[Any, int, Any]]]:
    """While open, every replayed command's (layer, queue, event) is appended to the list
    it yields (for a benchmark's kernel times: open the device with ``profiling=True``)."""
    found: list[tuple[Any, int, Any]] = []
    device.launch_events = found
    try:
        yield found
    finally:
        device.launch_events = None
