"""What a run did and when: per node, its worker thread, start and end.

A :class:`Trace` is passed to ``Engine.forward(..., trace=trace)`` and filled by the run.
It exports to the Chrome trace format (open the JSON in https://ui.perfetto.dev or
chrome://tracing) and summarises the run: time per op type, the measured critical path,
the achieved parallelism (busy time / wall time) and the idle gaps of each worker.
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from graphexec.plan import Plan


@dataclass(frozen=True)
class NodeEvent:
    """One node's run: which plan node, on which thread, from when to when (ns)."""

    node: int
    name: str
    type: str
    thread: str
    start_ns: int
    end_ns: int

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
        lines.append("idle time per worker:")
        for thread, idle in sorted(self.idle_seconds.items()):
            lines.append(f"  {thread:<28} {idle * 1e3:8.3f} ms")
        return "\n".join(lines)


@dataclass
class Trace:
    """Events of one run (``forward(..., trace=trace)``); reusable, each run replaces it."""

    events: list[NodeEvent] = field(default_factory=list)
    start_ns: int = 0
    end_ns: int = 0
    plan: Plan | None = None

    def begin(self, plan: Plan) -> None:
        self.events = []
        self.plan = plan
        self.start_ns = time.perf_counter_ns()

    def end(self) -> None:
        self.end_ns = time.perf_counter_ns()

    # -- export ---------------------------------------------------------------------------
    def to_chrome(self) -> dict:
        """The run as a Chrome trace-event document (one lane per worker thread)."""
        lanes = {t: i for i, t in enumerate(sorted({e.thread for e in self.events}))}
        events = [
            {"name": "thread_name", "ph": "M", "pid": 0, "tid": lane, "args": {"name": thread}}
            for thread, lane in lanes.items()
        ]
        for e in sorted(self.events, key=lambda e: e.start_ns):
            events.append({
                "name": e.name, "cat": e.type, "ph": "X", "pid": 0, "tid": lanes[e.thread],
                "ts": (e.start_ns - self.start_ns) / 1e3, "dur": (e.end_ns - e.start_ns) / 1e3,
                "args": {"type": e.type, "node": e.node},
            })
        return {"traceEvents": events, "displayTimeUnit": "ms"}

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
        return Summary(
            wall_seconds=wall,
            busy_seconds=busy,
            parallelism=busy / wall,
            per_type={k: (v[0], v[1]) for k, v in per_type.items()},
            critical_path=[(e.name, e.type, e.seconds) for e in path],
            critical_path_seconds=sum(e.seconds for e in path),
            idle_seconds=idle,
        )

    def _measured_critical_path(self) -> list[NodeEvent]:
        """The longest chain of dependent nodes by measured duration."""
        if self.plan is None or not self.events:
            return []
        by_node = {e.node: e for e in self.events}
        longest: dict[int, float] = {}
        best_pred: dict[int, int | None] = {}
        for i in self.plan.order:
            if i not in by_node:
                continue
            preds = [p for p in self.plan.predecessors[i] if p in longest]
            pred = max(preds, key=lambda p: longest[p], default=None)
            best_pred[i] = pred
            longest[i] = by_node[i].seconds + (longest[pred] if pred is not None else 0.0)
        node: int | None = max(longest, key=longest.get)  # type: ignore[arg-type]
        path = []
        while node is not None:
            path.append(by_node[node])
            node = best_pred[node]
        return path[::-1]
