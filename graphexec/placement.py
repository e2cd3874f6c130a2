"""Which device each node runs on, and the placed program that carries it out.

For one set of input specs, :func:`place` puts each node on the device when the device
runs its operator for those specs (``device.supports``), else on the CPU, the backup
device that runs everything. Then it writes a new :class:`~graphexec.program.Program`:

- a node on the device reads and writes device tensors, named ``<operand>@<kind>``
  (``12@opencl``), so the host and the device copies of a value are different operands
  of the plan; the planner gives it the device's kernel;
- where a value crosses sides an explicit :class:`~graphexec.transfers.Upload` or
  :class:`~graphexec.transfers.Download` step is inserted, once per value (a CPU value read
  by two device nodes is uploaded once), so transfers are nodes of the plan and of traces;
- the model's outputs are downloaded: the caller always gets numpy arrays.

Rules, in order: a type in ``cpu_types`` stays on the CPU; so does a node whose device run
failed (``fallback``); a node whose output's size only running it tells (the nodes reading
that output are placed when the run has computed it, see :mod:`graphexec.stages`); a node
the device cannot run (the reason is its
``unsupported_reason``); a view (reshape, flatten, chunk: no arithmetic) goes where its
input already is, so that no value is moved only to be viewed; a constant that only CPU
nodes read stays on the CPU; everything else runs on the device. :func:`assign_queues` then
gives each chain of the plan a command queue, and the planner warms every device node's
kernel up (:func:`warm_up`), moving the ones that fail to the CPU when the engine allows
it. Before placing, the planner fuses the producer -> activation pairs that
:func:`fuses_on` accepts (see :mod:`graphexec.passes.activations`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from loguru import logger

from graphexec.devices.base import Device, Kernel
from graphexec.errors import DeviceError
from graphexec.layers.base import Layer
from graphexec.layers.specs import Spec, TensorSpec, is_dynamic
from graphexec.plan import Analysis
from graphexec.program import Program, Step
from graphexec.transfers import Download, Upload

CPU = "cpu"
FORCED = "forced to CPU by cpu_types"
RUNS_THERE = "the device runs it"
CONSTANT_FOR_HOST = "a constant only CPU nodes read stays on the CPU"
SIZED_BY_RUN = "the size of its output is known only once it has run: the run plans what reads it then"


@dataclass(frozen=True)
class Where:
    """One node's place: the device kind it runs on and why."""

    node: str
    type: str
    device: str
    reason: str


class Placement:
    """The placed program for one set of input specs, and the table of where each node runs."""

    def __init__(self, program: Program, specs: dict[str, Spec], rows: tuple[Where, ...], device: Device | None,
                 resident: dict[str, str], sides: tuple[str, ...] | None = None):
        self.program = program
        self.specs = specs
        #: The device kind of each step of the placed program, transfers included.
        self.sides = sides if sides is not None else tuple(CPU for _ in program.steps)
        #: One row per node of the model (transfers are not rows: they follow from these).
        self.rows = rows
        self.device = device
        #: Values that live only on the device: host operand name -> device operand name.
        self.resident = resident
        self._host_name = {v: k for k, v in resident.items()}

    @property
    def transfers(self) -> tuple[int, int]:
        """How many uploads and downloads the placed program has."""
        kinds = [type(step.layer) for step in self.program.steps]
        return kinds.count(Upload), kinds.count(Download)

    def where(self, node: str) -> Where:
        """The row of node ``node``."""
        for row in self.rows:
            if row.node == node:
                return row
        raise KeyError(node)

    def on(self, device: str) -> list[Where]:
        """The rows of the nodes placed on ``device`` (``"cpu"``, ``"opencl"``)."""
        return [row for row in self.rows if row.device == device]

    # -- values the caller asks for --------------------------------------------------------
    def stored_names(self, names: Iterable[str]) -> list[str]:
        """The operand names under which ``names`` are found after a run (device-only values
        keep their device name until :meth:`to_host`)."""
        return [self.resident.get(n, n) for n in names]

    def to_host(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """``values`` with device tensors downloaded and renamed to their host names."""
        out: dict[str, Any] = {}
        for name, value in values.items():
            host = self._host_name.get(name)
            out[name if host is None else host] = value if host is None else self.device.download(value)
        return out

    # -- showing it --------------------------------------------------------------------------
    def summary(self) -> str:
        """One line: how many nodes run where, and the transfers."""
        counts: dict[str, int] = {}
        for row in self.rows:
            counts[row.device] = counts.get(row.device, 0) + 1
        ups, downs = self.transfers
        where = ", ".join(f"{n} on {d}" for d, n in sorted(counts.items(), key=lambda kv: kv[0] == CPU))
        name = getattr(self.device, "name", None)
        return f"{len(self.rows)} nodes: {where}" + (f" ({name})" if name else "") + \
            f"; {ups} upload(s), {downs} download(s)"

    def __str__(self) -> str:
        width = max([len(r.node) for r in self.rows] + [4])
        type_width = max([len(r.type) for r in self.rows] + [4])
        lines = [self.summary(), f"{'node':<{width}}  {'type':<{type_width}}  {'device':<7} why"]
        lines += [f"{r.node:<{width}}  {r.type:<{type_width}}  {r.device:<7} {r.reason}" for r in self.rows]
        return "\n".join(lines)


def cpu_placement(program: Program, specs: Mapping[str, Spec] | None = None,
                  reason: str = "the engine runs on the cpu") -> Placement:
    """The placement of an engine without a device: every node on the CPU."""
    rows = tuple(Where(s.name, s.layer.type, CPU, reason) for s in program.steps)
    return Placement(program, dict(specs or {}), rows, None, {})


def _choose(step: Step, specs: Mapping[str, Spec], device: Any, home: Mapping[str, str],
            cpu_types: Collection[str], failed: Mapping[str, str]) -> tuple[str, str]:
    layer = step.layer
    if layer.type in cpu_types:
        return CPU, FORCED
    if step.name in failed:
        return CPU, f"moved to the CPU after its device run failed: {failed[step.name]}"
    produced = [specs[n] for n in step.outputs]
    if any(is_dynamic(s) for s in produced):
        return CPU, SIZED_BY_RUN
    if not all(isinstance(s, TensorSpec) for s in produced):
        return CPU, "an output is not a tensor"
    reason = device.unsupported_reason(layer, [specs[n] for n in step.inputs])
    if reason is not None:
        return CPU, reason
    if layer.is_view and step.inputs and home[step.inputs[0]] == CPU:
        return CPU, "a view of a CPU value stays on the CPU (nothing to compute, nothing to move)"
    return device.kind, RUNS_THERE


def _keep_host_constants(program: Program, sides: list[str], rows: list[Where], home: dict[str, str]) -> None:
    """Move back to the CPU each constant (a node with no inputs) placed on the device that
    only CPU nodes read: there it would be downloaded every run instead of read in place."""
    readers: dict[str, list[int]] = {}
    for index, step in enumerate(program.steps):
        for name in step.inputs:
            readers.setdefault(name, []).append(index)
    outputs = set(program.outputs)
    for index, step in enumerate(program.steps):
        if step.inputs or sides[index] == CPU or any(name in outputs for name in step.outputs):
            continue
        if all(sides[r] == CPU for name in step.outputs for r in readers.get(name, ())):
            sides[index] = CPU
            home.update((name, CPU) for name in step.outputs)
            rows[index] = Where(step.name, step.layer.type, CPU, CONSTANT_FOR_HOST)


def fuses_on(device: Device, cpu_types: Collection[str] = ()) -> Callable[[Layer, list[Spec]], bool]:
    """The test of a fused node for ``device`` (``PassContext.allow`` of
    :mod:`graphexec.passes.activations`): it keeps every part where it would run unfused.
    The device must run the fused node for those input specs (else fusing would pull a
    device node onto the CPU, between two more transfers), and no part's type may be one
    ``cpu_types`` keeps on the CPU (the fused node has a type of its own)."""

    def allow(fused: Layer, inputs: list[Spec]) -> bool:
        parts = (getattr(fused, "head", fused), *getattr(fused, "tail", ()))
        types = {layer.type for layer in parts} | set(getattr(fused, "part_types", ()))
        if types & set(cpu_types):
            return False
        return device.supports(fused, inputs)

    return allow


def place(program: Program, specs: Mapping[str, Spec], device: Device, *, cpu_types: Collection[str] = (),
          failed: Mapping[str, str] | None = None) -> Placement:
    """Place ``program``'s nodes for these operand specs on ``device`` or the CPU (see the
    module doc); ``failed`` maps node names whose device run failed to why."""
    failed = failed or {}
    kind = device.kind
    home: dict[str, str] = {name: CPU for name in program.inputs}  # the side each value is made on
    rows: list[Where] = []
    sides: list[str] = []
    for step in program.steps:
        side, reason = _choose(step, specs, device, home, cpu_types, failed)
        sides.append(side)
        home.update((name, side) for name in step.outputs)
        rows.append(Where(step.name, step.layer.type, side, reason))
    _keep_host_constants(program, sides, rows, home)

    steps: list[Step] = []
    placed_sides: list[str] = []
    placed_specs: dict[str, Spec] = dict(specs)
    on_device: dict[str, str] = {}  # value -> its device operand (made there or uploaded)
    on_host: set[str] = {name for name, side in home.items() if side == CPU}
    producer: dict[str, str] = {name: step.name for step in program.steps for name in step.outputs}

    def device_name(value: str) -> str:
        name = f"{value}@{kind}"
        while name in specs:  # an operand of the model already has that name
            name += "_"
        return name

    def for_device(value: str) -> str:
        if value not in on_device:  # a host value read on the device: uploaded once
            on_device[value] = device_name(value)
            placed_specs[on_device[value]] = specs[value]
            steps.append(Step(Upload(value), (value,), (on_device[value],)))
            placed_sides.append(kind)
        return on_device[value]

    def for_host(value: str) -> str:
        if value not in on_host:  # a device value read on the host: downloaded once
            on_host.add(value)
            steps.append(Step(Download(value, producer[value]), (on_device[value],), (value,)))
            placed_sides.append(kind)
        return value

    for step, side in zip(program.steps, sides):
        if side == CPU:
            steps.append(Step(step.layer, tuple(for_host(n) for n in step.inputs), step.outputs))
            placed_sides.append(CPU)
            continue
        inputs = tuple(for_device(n) for n in step.inputs)
        for name in step.outputs:
            on_device[name] = device_name(name)
            placed_specs[on_device[name]] = specs[name]
        steps.append(Step(step.layer, inputs, tuple(on_device[n] for n in step.outputs)))
        placed_sides.append(kind)
    for name in program.outputs:
        for_host(name)
    resident = {name: on_device[name] for name in on_device if name not in on_host}
    placed = Program(program.graph, tuple(steps), program.inputs, program.outputs)
    return Placement(placed, placed_specs, tuple(rows), device, resident, tuple(placed_sides))


def assign_queues(analysis: Analysis, queues: int) -> list[int]:
    """A command queue for each node of ``analysis`` (0 for host nodes): the device nodes of
    each unit (chain) share one.

    Units are taken in topological order. A unit continues the queue of a device unit that
    feeds it, if no other unit has continued that one yet (a chain stays on its queue; of
    the branches leaving a fork, the first keeps the queue); any other unit starts on the
    queue with the least estimated work so far, so independent branches spread over the
    queues. Across queues the order is kept by the tensors' events, never by the host."""
    feeds: list[list[int]] = [[] for _ in analysis.units]
    for u, successors in enumerate(analysis.unit_successors):
        for s in successors:
            feeds[s].append(u)
    queue_of: dict[int, int] = {}
    continued: set[int] = set()
    load = [0.0] * max(1, queues)
    found = [0] * len(analysis.nodes)
    for unit in analysis.units:
        on_device = [i for i in unit.nodes if analysis.nodes[i].device != CPU]
        if not on_device:
            continue
        free = [u for u in feeds[unit.index] if u in queue_of and u not in continued]
        if free:
            chosen = max(free, key=lambda u: analysis.unit_seconds[u])
            continued.add(chosen)
            queue = queue_of[chosen]
        else:
            queue = min(range(len(load)), key=lambda q: (load[q], q))
        queue_of[unit.index] = queue
        load[queue] += analysis.unit_seconds[unit.index]
        for i in on_device:
            found[i] = queue
    return found


def warm_up(kernels: list[Kernel], device: Device, fallback: bool) -> dict[str, str]:
    """Warm every device node's kernel up (build its programs, upload its weights, run it
    once).

    A failure raises DeviceError naming the node, or with ``fallback`` is logged as a
    warning and returned: node name -> why, for placing it on the CPU instead."""
    failures: dict[str, str] = {}
    for kernel in kernels:
        layer = kernel.layer
        try:
            device.warm_up(kernel)
        except DeviceError as exc:
            if not fallback:
                raise DeviceError(f"{exc} (Engine.load(..., fallback=True) runs such a node on the CPU "
                                  f"instead; cpu_types={{{layer.type!r}}} keeps its type there)") from exc
            logger.warning("{} ({}) moves to the CPU: its device run failed: {}", layer.name, layer.type, exc)
            failures[layer.name] = str(exc)
    return failures
