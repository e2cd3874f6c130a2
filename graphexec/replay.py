"""Stretches of device nodes, prepared once and replayed as one.

Run node by node, a device node costs the host its trip through the executor, the op's
Python (shapes, programs, arguments) and setting every kernel argument again; on a fast
GPU that host time, not the device, bounds the run. Once the memory plan has put every
device tensor at a known offset of the device arena, nothing about a node's launches
changes between runs but the arena's buffer. So, once per plan and memory plan, each
*stretch* (consecutive nodes of the plan that run on the device, the uploads that feed
them included) is prepared by the device
(:meth:`~graphexec.devices.base.Device.prepare_replay`): its launches recorded with their
sizes and arguments, and the waits between queues worked out. Once per arena its kernels
get their arguments (:meth:`Replay.bind`, kept with the arena); each run then only
enqueues them, in a tight loop. A plan whose nodes all run on the device is one stretch;
one that mixes the CPU in replays each device stretch between the CPU's nodes.

The sequential executor replays (:func:`graphexec.executor.run_sequential`); the
concurrent scheduler and runs without an arena (extracting intermediates, ``reuse_memory``
off) run node by node, as before.

What the device's prepared object offers::

    prepared.stretches      tuple of tuples of node indices (each consecutive in the plan)
    prepared.exported       the operands its stretches hand to the rest of the plan
    prepared.bind(views)    -> bound, for one arena (``views``: its tensors by operand)
    bound.run(k, values)    enqueue stretch k: read its inputs from ``values`` and put in
                            the operands it exports (the host does not wait)
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from loguru import logger

from graphexec.devices.base import ReplayNode
from graphexec.transfers import Upload, _Transfer

if TYPE_CHECKING:
    from graphexec.memory import MemoryPlan
    from graphexec.plan import Plan

CPU = "cpu"


class Replay:
    """A plan's device stretches, prepared by its device for one memory plan."""

    def __init__(self, prepared: Any, produced: frozenset[str]):
        self.prepared = prepared
        #: The position (node index) each stretch starts at -> its number.
        self.starts: dict[int, int] = {nodes[0]: k for k, nodes in enumerate(prepared.stretches)}
        #: The position after each stretch.
        self.ends: tuple[int, ...] = tuple(nodes[-1] + 1 for nodes in prepared.stretches)
        #: Operands a stretch makes and keeps to itself (a run that keeps one runs node by node).
        self.hidden: frozenset[str] = produced - prepared.exported

    @classmethod
    def prepare(cls, plan: Plan, memory: MemoryPlan) -> Replay | None:
        """The replay of ``plan``'s device stretches over ``memory``'s arenas, or None when
        its device replays nothing (no device, or none of its nodes)."""
        device = memory.device
        if device is None:
            return None
        runs: list[list[ReplayNode]] = []
        current: list[ReplayNode] = []
        for node in plan.nodes:
            layer = node.step.layer
            if node.device != CPU and (isinstance(layer, Upload) or not isinstance(layer, _Transfer)):
                current.append(ReplayNode(node.index, node.kernel, node.step.inputs, node.step.outputs,
                                          upload=isinstance(layer, Upload), queue=node.queue))
            elif current:
                runs.append(current)
                current = []
        if current:
            runs.append(current)
        if not runs:
            return None
        inside = {n.index for run in runs for n in run}
        wanted = {name for node in plan.nodes if node.index not in inside for name in node.step.inputs}
        wanted.update(plan.program.outputs)
        regions = {name: region for name, region in memory.regions.items() if memory.homes[name] == device.kind}
        prepared = device.prepare_replay(runs, regions, wanted)
        if prepared is None or not prepared.stretches:
            return None
        replayed = {i for nodes in prepared.stretches for i in nodes}
        produced = frozenset(name for node in plan.nodes if node.index in replayed for name in node.step.outputs)
        logger.debug("replay: {} of {} device nodes in {} stretch(es)", len(replayed), len(inside),
                     len(prepared.stretches))
        return cls(prepared, produced)

    def usable(self, keep: Collection[str]) -> bool:
        """Whether a run that keeps ``keep`` may replay (it keeps nothing a stretch hides)."""
        return self.hidden.isdisjoint(keep)

    def bind(self, views: Any) -> Any:
        """The stretches bound to the arena whose tensors are ``views`` (made on first use
        and kept with the arena, see :class:`graphexec.memory.ArenaViews`)."""
        bound = views.bound.get(self)
        if bound is None:
            bound = views.bound[self] = self.prepared.bind(views)
        return bound
