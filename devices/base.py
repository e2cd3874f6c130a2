"""The Device interface, and the kernel a device makes for each node it runs.

::

    Device                              one place nodes run: the CPU, an OpenCL device, null
    ├── kind, name                      "cpu", "opencl", "null"; a name for tables and logs
    ├── queues                          its command queues (none on the CPU)
    ├── unsupported_reason(layer, inputs)   why it cannot run a layer for these specs (None: it can)
    ├── kernel(layer, inputs, outputs, hints) -> Kernel   how it runs one node, made at plan time
    ├── upload(array, queue, out) / download(tensor, queue, out)   moving tensors to and from it
    ├── alloc(shape, dtype), region(...)   a tensor of its own (an arena), a tensor inside one
    ├── warm_up(kernel)                 build and try a kernel once, before any run
    ├── prepare_replay(runs, regions, wanted)   runs of its nodes prepared as launches over the
    │                                   memory plan's arena, replayed as one (None: node by node)
    ├── finish()                        wait until nothing it was given still runs
    └── release()

    Kernel                              one node on one device, for one set of input specs
    ├── prepare()                       make what runs read (at plan time, once)
    ├── run(inputs, outputs=None)       compute (into ``outputs`` when given); the node's work
    ├── stopped()                       a run stopped midway on this thread: forget what it kept
    ├── splits() / pieces(...)          its work cut into pieces that run at once (optional)
    └── writes_into, fresh_outputs, in_place, joins_in_place   what the memory plan may do

A kernel is made, and whatever it derives from its layer prepared, when the plan is built;
a run only reads it, so several runs may use one kernel at once. Devices know layers, the
IR and the errors, and nothing of the engine, the scheduler, the format or the passes.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence, Set
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np

from graphexec.errors import DeviceError, GraphexecError
from graphexec.layers.base import Layer
from graphexec.layers.specs import Spec


@dataclass(frozen=True)
class Piece:
    """A part of one node's work that may run on another thread beside the node's other
    pieces: ``run()`` writes ``region`` of output 0 and nothing another piece touches."""

    run: Callable[[], None]
    #: The part of output 0 it writes (an index into the array), for what is fused after it.
    region: tuple[slice, ...]


def element_bands(shape: tuple[int, ...], count: int) -> list[tuple[slice, ...]]:
    """Up to ``count`` nearly equal bands of an array of ``shape`` along its first axis
    that has ``count`` entries (contiguous when the axes before it have one): regions for
    pieces of elementwise work. One band (everything) when no axis is that long."""
    axis = next((k for k, size in enumerate(shape) if size >= count), None)
    if axis is None or count < 2:
        return [tuple(slice(None) for _ in shape)]
    size = shape[axis]
    cuts = [size * k // count for k in range(count + 1)]
    return [(slice(None),) * axis + (slice(a, b),) for a, b in pairwise(cuts)]


@dataclass(frozen=True)
class Span:
    """When one node's work ran on a device's lane (a command queue), on the host's
    ``perf_counter_ns`` clock: what a device gives a trace of the run."""

    node: int
    name: str
    type: str
    lane: str
    start_ns: int
    end_ns: int


@dataclass(frozen=True)
class ReplayNode:
    """One node of a run of consecutive device nodes, as :meth:`Device.prepare_replay` is
    given it: its index in the plan, its kernel, and the operands it reads and writes.
    ``upload``: the node copies a host value (its input) to the device, on ``queue``."""

    index: int
    kernel: Kernel
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    upload: bool = False
    queue: int = 0


@dataclass(frozen=True)
class Hints:
    """What the plan knows, when it makes a node's kernel, of how the node will run."""

    #: BLAS threads the node runs its matrix products on whenever it runs (a variant may
    #: suit several threads better).
    blas_threads: int = 1
    #: Threads the node may be shared out among when it runs alone (1: never).
    pieces: int = 1
    #: Whether it is shared out in compiled parts (:meth:`Kernel.across`) rather than as
    #: pieces on a pool's threads.
    parts: bool = False
    #: The command queue a device node's work goes to.
    queue: int = 0


class Kernel:
    """How a device runs one layer for one set of input specs: the reference kernel runs
    the layer's own numpy ``forward``; devices subclass it."""

    #: A short name for plans and traces (``reference``, ``winograd``, ``opencl``).
    name = "reference"

    def __init__(self, layer: Layer, inputs: Sequence[Spec], outputs: Sequence[Spec]):
        self.layer = layer
        self.input_specs = tuple(inputs)
        self.output_specs = tuple(outputs)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.layer.name!r}, {self.name!r})"

    # -- what the memory plan may do with the outputs (the layer's, on the host) -----------
    @property
    def writes_into(self) -> bool:
        """Whether :meth:`run` writes into outputs it is given (else it returns its own)."""
        return self.layer.writes_into

    @property
    def fresh_outputs(self) -> bool:
        """Whether every output is new memory, never an input or a view of one."""
        return self.layer.fresh_outputs

    @property
    def in_place(self) -> bool:
        """Whether output 0 may be written over input 0."""
        return self.layer.in_place

    #: Where the outputs live: ``"cpu"`` or a device's kind (each place has its own arena).
    home = "cpu"

    #: Whether :meth:`run` computes on the host's cores (and may call BLAS); False for a
    #: kernel that only enqueues device work or waits for it.
    computes_on_host = True

    @property
    def joins_in_place(self) -> bool:
        """Whether, for a join (``Layer.input_offsets``), an input its producer already
        wrote at its place inside the output is left there (so the memory plan may put it
        there): the layer's own ``forward_into`` does, on the host."""
        return self.home == "cpu"

    def prepare(self) -> None:
        """Make, before any run, whatever runs will read (a plan calls it once it is
        built; a kernel asked only what it would do is never prepared)."""

    # -- running ------------------------------------------------------------------------
    def run(self, inputs: list[Any], outputs: list[Any] | None = None) -> list[Any]:
        """The node's outputs: computed into ``outputs`` when given (arrays of the inferred
        shapes and dtypes; ``outputs[0]`` may be ``inputs[0]`` when :attr:`in_place`) and
        returned, else new values."""
        if outputs is None:
            return self.layer.forward(inputs)
        self.layer.forward_into(inputs, outputs)
        return outputs

    def stopped(self) -> None:
        """Called on the thread where :meth:`run` or one of its pieces stopped midway (an
        exception, Ctrl-C): forget what that thread keeps between runs and the run may have
        left half written. The reference kernel keeps nothing."""

    def splits(self) -> bool:
        """Whether :meth:`pieces` cuts this node's work, faster than BLAS threads would run it
        whole (the plan's cost model asks)."""
        return False

    def pieces(self, inputs: list[Any], outputs: list[np.ndarray], count: int) -> list[Piece] | None:
        """``run(inputs, outputs)`` as up to ``count`` pieces that may run at once, for a node
        that runs alone while threads idle; None: it runs whole."""
        return None

    def crosses(self) -> bool:
        """Whether :meth:`across` runs this node on several threads (asked of a kernel made
        for a node that may be shared out, ``Hints.pieces`` > 1); by default not."""
        return False

    def across(self, inputs: list[Any], outputs: list[np.ndarray], count: int) -> bool:
        """``run(inputs, outputs)`` on ``count`` threads in one call of compiled code, with no
        hand-over between Python threads; False where the kernel cannot (by default), and
        then nothing ran."""
        return False

    def place_helpers(self, core: int, cores: Set[int]) -> None:
        """Before :meth:`across`, where the engine places threads: put the threads that run
        its work beside the calling thread, now on ``core``, on the other ``cores`` the
        process may use (see :mod:`graphexec.affinity`); by default there are none."""

    def trace_span(self, node: int, outputs: list[Any], start_ns: int, end_ns: int) -> Any:
        """The node's span on a device queue for a trace (None: it ran on the host)."""
        return None


class DeviceKernel(Kernel):
    """A kernel that runs on a device other than the host: its outputs are new tensors of
    the device (a view's share its input's memory), never written over an input."""

    computes_on_host = False

    def __init__(self, device: Device, layer: Layer, inputs: Sequence[Spec], outputs: Sequence[Spec]):
        super().__init__(layer, inputs, outputs)
        self.device = device

    @property
    def writes_into(self) -> bool:
        return not self.layer.is_view

    @property
    def fresh_outputs(self) -> bool:
        return not self.layer.is_view

    @property
    def in_place(self) -> bool:
        return False

    @property
    def home(self) -> str:  # type: ignore[override]
        return self.device.kind


class Device:
    """One place nodes run. Subclasses implement what they can do and say why not."""

    kind = "device"
    name = "device"
    #: The device's command queues (empty where work runs on the host's threads).
    queues: Sequence[Any] = ()

    def unsupported_reason(self, layer: Layer, inputs: Sequence[Spec]) -> str | None:
        """Why this device cannot run ``layer`` on inputs of these specs; None when it can."""
        raise NotImplementedError(f"{type(self).__name__} needs unsupported_reason")

    def supports(self, layer: Layer, inputs: Sequence[Spec] | None = None) -> bool:
        return self.unsupported_reason(layer, inputs or []) is None

    def kernel(self, layer: Layer, inputs: Sequence[Spec], outputs: Sequence[Spec], hints: Hints = Hints()) -> Kernel:
        """The kernel that runs ``layer`` here for these specs, made and prepared now."""
        raise NotImplementedError(f"{type(self).__name__} needs kernel")

    def upload(self, array: np.ndarray, queue: int = 0, out: Any = None) -> Any:
        raise NotImplementedError(f"{type(self).__name__} needs upload")

    def download(self, tensor: Any, queue: int = 0, out: np.ndarray | None = None) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} needs download")

    def alloc(self, shape: tuple[int, ...], dtype: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} needs alloc")

    def region(self, arena: Any, byte_offset: int, shape: tuple[int, ...], dtype: Any) -> Any:
        """A tensor of ``shape`` and ``dtype`` inside ``arena`` (a byte tensor from
        :meth:`alloc`), ``byte_offset`` bytes in: where the memory plan puts a value. By
        default ``arena`` is a numpy array."""
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        return arena[byte_offset:byte_offset + count].view(dtype).reshape(shape)

    def warm_up(self, kernel: Kernel) -> None:
        """Build and try ``kernel`` once (raise DeviceError if it cannot run); by default
        there is nothing to build."""

    def prepare_replay(self, runs: Sequence[Sequence[ReplayNode]], regions: Mapping[str, tuple[int, Spec]],
                       wanted: Collection[str]) -> Any:
        """The ``runs`` (each consecutive nodes of a plan, in order) prepared to be replayed,
        once the memory plan has put each tensor of this device at a byte offset of its
        arena (``regions``: operand -> (offset, spec)); ``wanted``: the operands read by
        anything besides these nodes. None (the default): the device runs node by node.
        See :mod:`graphexec.replay` for what the result must offer."""
        return None

    def describe(self) -> str:
        return f"{self.kind} device {self.name!r}"

    def node_failure(self, layer: Layer, exc: BaseException, doing: str = "") -> DeviceError:
        """``exc``, raised while node ``layer`` ran here (``doing`` says what else), as a
        DeviceError naming the node, its type and this device."""
        text = str(exc) if isinstance(exc, GraphexecError) else f"{type(exc).__name__}: {exc}"
        said = f"running {layer.name} ({layer.type}) on {self.name}"
        text = text[len(said):] if text.startswith(said) else ": " + text  # the kernel is named already
        return DeviceError(f"node {layer.name} ({layer.type}) on {self.describe()}{doing}{text}")

    def finish(self) -> None:
        """Return once nothing this device was given still runs."""

    def release(self) -> None:
        """Give back what the device holds (an engine that opened it closes)."""
