"""What a run did and when: per node, its worker thread, start and end.

A :class:`Trace` is passed to ``Engine.forward(..., trace=trace)`` and filled by the run.
It exports to the Chrome trace format (open the JSON in https://ui.perfetto.dev or
chrome://tracing) and summarises the run: time per op type, the measured critical path,
the achieved parallelism (busy time / wall time) and the idle gaps of each worker.

Nodes placed on a device appear twice: on the worker thread that enqueued them (host time,
short: enqueueing never waits) and in ``device_events`` on a lane per command queue
(``opencl queue 0``, ...), where their commands ran. Those device spans come from OpenCL
event profiling, mapped onto the host clock, when the device's queues were opened with
profiling (``open_device(..., profiling=True)``, as ``graphexec trace`` does); otherwise
they are the host's enqueue times, which show the queue but not the kernel's duration.
``device_timing`` says which (see :mod:`graphexec.devices.opencl.profiling`).

A run that plans part of its model once it has computed sizes known only then (see
:mod:`graphexec.stages`) runs several plans one after the other; its trace holds them all
(``stages``), their nodes numbered one after the other (the k-th plan's node i is
``offsets[k] + i``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from graphexec.plan import Plan

#: The type of the node where the host waits for a device (graphexec.devices.layers.Download).
DOWNLOAD_TYPE = "graphexec.Download"


@dataclass(frozen=True)
class NodeEvent:
    """One node's run: which plan node, on which thread, from when to when (ns)."""

    node: int
    name: str
    type: str
    thread: str
    start_ns: int
    end_ns: int
    #: BLAS threads the node ran with when the scheduler raised them for it (0: the run's).
    blas_threads: int = 0
    #: How many pieces the node's work was shared out in among the workers (0: run whole).
    pieces: int = 0

    @property
    def seconds(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9


@dataclass
class Summary:
    """The numbers a person wants from one run."""

    wall_seconds: float
    busy_seconds: float
    parallelism: float
    per_type: dict[str, tuple[int, float]]
    critical_path: list[tuple[str, str, float]]
    critical_path_seconds: float
    idle_seconds: dict[str, float]
    #: Busy time per device command queue (empty when nothing ran on a device).
    device_seconds: dict[str, float] = field(default_factory=dict)
    #: How the device spans were timed (None: no device).
    device_timing: str | None = None
    #: Nodes of the regions that ran one node at a time, and nodes given every BLAS thread.
    alone_nodes: int = 0
    raised_nodes: int = 0
    #: Nodes whose work was shared out among the workers (a shared node's span is on the
    #: thread that ran it; the pieces its workers ran are inside that span).
    shared_nodes: int = 0

    def __str__(self) -> str:
        lines = [
            f"wall {self.wall_seconds * 1e3:.2f} ms, busy {self.busy_seconds * 1e3:.2f} ms, "
            f"parallelism {self.parallelism:.2f}x, critical path {self.critical_path_seconds * 1e3:.2f} ms "
            f"({len(self.critical_path)} nodes)",
            "time per op type:",
        ]
        for op_type, (count, seconds) in sorted(self.per_type.items(), key=lambda kv: -kv[1][1]):
            share = seconds / self.busy_seconds if self.busy_seconds else 0.0
            lines.append(f"  {op_type:<28} {count:>5} x  {seconds * 1e3:8.3f} ms  {share:6.1%}")
        if self.alone_nodes or self.raised_nodes or self.shared_nodes:
            lines.append(f"regions: {self.alone_nodes} nodes ran alone (their regions one node at a time), "
                         f"{self.raised_nodes} with every core for BLAS, "
                         f"{self.shared_nodes} shared out among the workers")
        lines.append("idle time per worker:")
        for thread, idle in sorted(self.idle_seconds.items()):
            lines.append(f"  {thread:<28} {idle * 1e3:8.3f} ms")
        if self.device_seconds:
            lines.append(f"busy time per device queue ({self.device_timing}):")
            for lane, busy in sorted(self.device_seconds.items()):
                lines.append(f"  {lane:<28} {busy * 1e3:8.3f} ms")
        return "\n".join(lines)


@dataclass
class Trace:
    """Events of one run (``forward(..., trace=trace)``); reusable, each run replaces it."""

    events: list[NodeEvent] = field(default_factory=list)
    start_ns: int = 0
    end_ns: int = 0
    plan: Plan | None = None
    #: Spans of device nodes on their command queues (lanes ``opencl queue N``).
    device_events: list[NodeEvent] = field(default_factory=list)
    #: How ``device_events`` were timed: OpenCL event profiling or host enqueue times.
    device_timing: str | None = None
    #: Whether the device spans are the commands' own timestamps (not enqueue times).
    device_profiled: bool = False
    #: Plan nodes whose region ran one node at a time (see :mod:`graphexec.regions`).
    alone: frozenset[int] = frozenset()
    #: The plans the run ran, in order (one, unless it planned some once it had run).
    stages: list[Plan] = field(default_factory=list)
    #: The number of each stage's first node in ``events`` (0 for the first).
    offsets: list[int] = field(default_factory=list)
    #: The rows of the batch each part ran, when the run was a batch in parts side by side
    #: (see :mod:`graphexec.samples`: each part a stage); empty when it ran whole.
    samples: list[tuple[int, int]] = field(default_factory=list)

    def begin(self, plan: Plan) -> None:
        self.events = []
        self.device_events = []
        self.device_timing = None
        self.device_profiled = False
        self.alone = frozenset()
        self.plan = plan
        self.stages = [plan]
        self.offsets = [0]
        self.samples = []
        self.start_ns = time.perf_counter_ns()

    def join(self, parts: Sequence[Trace]) -> None:
        """This trace as one run made of ``parts``, the traces of the plans it ran one after
        the other (or side by side: a batch in parts): their events together, the nodes of
        each numbered after the last one's."""
        first = parts[0]
        self.begin(first.plan)  # type: ignore[arg-type]
        self.stages, self.offsets = [], []
        self.start_ns, self.end_ns = min(p.start_ns for p in parts), max(p.end_ns for p in parts)
        self.device_timing, self.device_profiled = first.device_timing, first.device_profiled
        offset = 0
        alone: set[int] = set()
        for part in parts:
            self.stages.append(part.plan)  # type: ignore[arg-type]
            self.offsets.append(offset)
            self.events += [_renumbered(e, offset) for e in part.events]
            self.device_events += [_renumbered(e, offset) for e in part.device_events]
            alone.update(offset + i for i in part.alone)
            offset += len(part.plan.nodes) if part.plan is not None else 0
        self.alone = frozenset(alone)

    def end(self) -> None:
        """Close the run; the device spans handed in with the host events are resolved here
        (waiting for the device where a node's commands are still running)."""
        self.end_ns = time.perf_counter_ns()
        pending: list[Any] = [e for e in self.events if not isinstance(e, NodeEvent)]
        if pending:
            self.events = [e for e in self.events if isinstance(e, NodeEvent)]
            self.device_events = [NodeEvent(s.node, s.name, s.type, s.lane, s.start_ns, s.end_ns)
                                  for s in (span.resolve() for span in pending)]
            self.device_timing = pending[0].timing
            self.device_profiled = bool(pending[0].profiled)
            self.end_ns = max([self.end_ns] + [e.end_ns for e in self.device_events])

    # -- export ---------------------------------------------------------------------------
    def to_chrome(self) -> dict:
        """The run as a Chrome trace-event document: one lane per worker thread (process
        "host") and, when nodes ran on a device, one lane per command queue (process
        "device")."""
        events: list[dict] = []
        for pid, process, spans in ((0, "host", self.events), (1, "device", self.device_events)):
            if not spans:
                continue
            lanes = {t: i for i, t in enumerate(sorted({e.thread for e in spans}))}
            label = process if pid == 0 else f"device ({self.device_timing})"
            events.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": label}})
            events += [
                {"name": "thread_name", "ph": "M", "pid": pid, "tid": lane, "args": {"name": thread}}
                for thread, lane in lanes.items()
            ]
            for e in sorted(spans, key=lambda e: e.start_ns):
                events.append({
                    "name": e.name, "cat": e.type, "ph": "X", "pid": pid, "tid": lanes[e.thread],
                    "ts": (e.start_ns - self.start_ns) / 1e3, "dur": (e.end_ns - e.start_ns) / 1e3,
                    "args": {"type": e.type, "node": e.node,
                             **({"blas_threads": e.blas_threads} if getattr(e, "blas_threads", 0) else {}),
                             **({"pieces": e.pieces} if getattr(e, "pieces", 0) else {}),
                             **({"region": "alone"} if pid == 0 and e.node in self.alone else {})},
                })
        return {"traceEvents": events, "displayTimeUnit": "ms"}

    def queues_used(self) -> dict[str, list[str]]:
        """For each device queue lane, the names of the nodes whose commands ran on it."""
        lanes: dict[str, list[str]] = defaultdict(list)
        for e in sorted(self.device_events, key=lambda e: e.start_ns):
            lanes[e.thread].append(e.name)
        return dict(lanes)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the Chrome trace JSON to ``path``."""
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_chrome(), f)

    # -- analysis -------------------------------------------------------------------------
    def summary(self) -> Summary:
        """Time per op type, the measured critical path, parallelism and idle gaps."""
        wall = max(self.end_ns - self.start_ns, 1) / 1e9
        busy = sum(e.seconds for e in self.events)
        per_type: dict[str, list] = defaultdict(lambda: [0, 0.0])
        for e in self.events:
            per_type[e.type][0] += 1
            per_type[e.type][1] += e.seconds
        idle: dict[str, float] = {}
        by_thread: dict[str, list[NodeEvent]] = defaultdict(list)
        for e in self.events:
            by_thread[e.thread].append(e)
        for thread, events in by_thread.items():
            idle[thread] = wall - sum(e.seconds for e in events)
        path = self._measured_critical_path()
        device: dict[str, float] = defaultdict(float)
        for e in self.device_events:
            device[e.thread] += e.seconds
        return Summary(
            wall_seconds=wall,
            busy_seconds=busy,
            parallelism=busy / wall,
            per_type={k: (v[0], v[1]) for k, v in per_type.items()},
            critical_path=[(e.name, e.type, e.seconds) for e in path],
            critical_path_seconds=sum(e.seconds for e in path),
            idle_seconds=idle,
            device_seconds=dict(device),
            device_timing=self.device_timing,
            alone_nodes=sum(e.node in self.alone for e in self.events),
            raised_nodes=sum(bool(e.blas_threads) for e in self.events),
            shared_nodes=sum(bool(getattr(e, "pieces", 0)) for e in self.events),
        )

    def _measured_critical_path(self) -> list[NodeEvent]:
        """The longest chain of dependent nodes by measured duration (through each plan of
        the run in turn: each starts once the one before has finished)."""
        if self.plan is None or not self.events:
            return []
        stages = list(zip(self.stages, self.offsets)) or [(self.plan, 0)]
        return [e for plan, offset in stages for e in self._critical_path_of(plan, offset)]

    def _critical_path_of(self, plan: Plan, offset: int) -> list[NodeEvent]:
        """The longest chain of dependent nodes of ``plan``, whose nodes the events number
        from ``offset``."""
        by_node = {e.node - offset: e for e in self.events if 0 <= e.node - offset < len(plan.nodes)}
        if not by_node:
            return []
        if self.device_profiled:  # a device node took the time its commands took, not the enqueue's
            by_node.update((e.node - offset, e) for e in self.device_events
                           if 0 <= e.node - offset < len(plan.nodes))
            for node, e in list(by_node.items()):  # a download's host time is mostly waiting for them
                if e.type == DOWNLOAD_TYPE:
                    by_node[node] = NodeEvent(e.node, e.name, e.type, e.thread, e.end_ns, e.end_ns)
        longest: dict[int, float] = {}
        best_pred: dict[int, int | None] = {}
        for i in plan.order:
            if i not in by_node:
                continue
            preds = [p for p in plan.predecessors[i] if p in longest]
            pred = max(preds, key=lambda p: longest[p], default=None)
            best_pred[i] = pred
            longest[i] = by_node[i].seconds + (longest[pred] if pred is not None else 0.0)
        step: int | None = max(longest, key=lambda k: longest[k])
        path = []
        while step is not None:
            path.append(by_node[step])
            step = best_pred[step]
        return path[::-1]


def _renumbered(event: NodeEvent, offset: int) -> NodeEvent:
    return event if not offset else dataclasses.replace(event, node=event.node + offset)
