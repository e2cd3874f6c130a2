"""Run a plan's ready units on a ``concurrent.futures`` executor, longest chain first.

The workers drive the run. A worker that finishes a unit (a chain of nodes) records it in
the run's state (:class:`RunState`, under the run's one lock), makes its successors ready
and goes straight on with the ready unit of highest priority; it hands a unit to another
worker through the executor only when more units are ready than workers are busy. While
no worker runs, the calling thread runs the units that have nothing beside them or cost
less than a hand-over; otherwise it sleeps until the last worker is done. No worker ever
waits on work queued to the same pool, so no deadlock is possible.

Why not one thread that owns the state and hands out every unit: it must wake for each
finished unit and wake a worker for each new one, and on a machine whose cores the
workers keep busy those wake-ups and its turns with the GIL slow the branches down
(measured in docs/design/threads.md, "How the workers drive a run").

On the first failure nothing new starts, what is running finishes, and the failure is
raised to the caller; every tensor of the run is dropped with the state. A timeout or
Ctrl-C returns to the caller at once; each worker holds the run's arena lease
(:class:`graphexec.memory.Lease`) while it runs units, so the arena is given to no other
run before the last unit still writing into it is over.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Any

from graphexec.affinity import current_core
from graphexec.blas import blas_boost, blas_workers_off, joined_turn
from graphexec.errors import ExecutionError, GraphexecError, RunTimeoutError
from graphexec.executor import NO_OPTIONS, RunOptions, run_step
from graphexec.memory import Lease
from graphexec.plan import Plan, Unit
from graphexec.regions import RegionChoice
from graphexec.spread import Spreader
from graphexec.trace import NodeEvent, Trace

#: Units estimated below this are never handed to an idle worker: the hand-over (a thread
#: wake-up, tens of microseconds) would cost more than running them after the current one.
INLINE_SECONDS = 30e-6


@dataclass
class RunState:
    """Everything one run knows; read and written only under the run's lock."""

    waiting: list[int]
    remaining_readers: Counter[str]
    values: dict[str, Any]
    ready: list[tuple[float, int]] = field(default_factory=list)
    #: Units started and not yet recorded as finished.
    running: int = 0
    failure: BaseException | None = None
    units_done: int = 0
    events: list[NodeEvent] = field(default_factory=list)


class SynchronousExecutor(Executor):
    """An executor that runs each task at once in the submitting thread (for tests/debugging)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # handed to the caller through the future
            future.set_exception(exc)
        return future


@dataclass(frozen=True)
class AloneHelp:
    """How a unit that runs alone uses the cores the idle workers leave (see
    :mod:`graphexec.regions`): its boosted nodes get ``boost`` BLAS threads, its shared
    nodes are cut into pieces that ``spreader`` runs on the workers. With the workers
    pinned to ``cores``, OpenBLAS's threads go to the cores other than the boosted node's
    for the node (see :mod:`graphexec.affinity`)."""

    boost: int = 0
    boosted: frozenset[int] = frozenset()
    shared: frozenset[int] = frozenset()
    spreader: Spreader | None = None
    cores: tuple[int, ...] = ()

    def helper_cores(self) -> tuple[int, ...] | None:
        """The cores for OpenBLAS's threads while this thread runs a boosted node."""
        if not self.cores:
            return None
        here = current_core()
        return tuple(c for c in self.cores if c != here) if here in self.cores else None


def run_unit(
    plan: Plan, unit: Unit, inputs: dict[str, Any], keep: frozenset[str], record: bool, options: RunOptions,
    buffers: dict[str, Any] | None = None, assist: AloneHelp | None = None,
) -> tuple[dict[str, Any], list[NodeEvent]]:
    """Run the unit's nodes back to back; return what others need, and timings (with
    ``assist``, the unit runs alone: see :class:`AloneHelp`)."""
    values = dict(inputs)
    events: list[NodeEvent] = []
    thread = threading.current_thread().name
    for index in unit.nodes:
        node = plan.nodes[index]
        options.before_node(node.step)
        start = time.perf_counter_ns() if record else 0
        blas = 0
        if assist is not None and assist.boost and index in assist.boosted:
            # A shared node's pieces run on one BLAS thread each; what its layer runs whole
            # before them (a head whose activation alone is shared out) gets the boost.
            spreader = assist.spreader if index in assist.shared else None
            with blas_boost(assist.boost) as raised, blas_workers_off(assist.helper_cores() if raised else None):
                pieces = run_step(node, values, options.check_finite, buffers, spreader)
            blas = assist.boost if raised else 0
        elif assist is not None and index in assist.shared:
            pieces = run_step(node, values, options.check_finite, buffers, assist.spreader)
        else:
            pieces = run_step(node, values, options.check_finite, buffers)
        if record:
            end = time.perf_counter_ns()
            events.append(NodeEvent(index, node.name, node.type, thread, start, end, blas, pieces))
            span = node.kernel.trace_span(index, [values[n] for n in node.step.outputs], start, end)
            if span is not None:  # the node's commands on a device queue
                events.append(span)  # resolved by Trace.end, when the device is done
    needed = frozenset(unit.outputs)
    return {n: v for n, v in values.items() if n not in inputs and (n in needed or n in keep)}, events


def run_concurrent(
    plan: Plan,
    feeds: dict[str, Any],
    keep: Iterable[str],
    executor: Executor,
    workers: int,
    trace: Trace | None = None,
    options: RunOptions = NO_OPTIONS,
    buffers: dict[str, Any] | None = None,
    boost: int | None = None,
    regions: RegionChoice | None = None,
    spreader: Spreader | None = None,
    cores: tuple[int, ...] = (),
    lease: Lease | None = None,
) -> dict[str, Any]:
    """Run ``plan`` with at most ``workers`` units at once on ``executor``.

    While no worker runs, the calling thread runs a unit itself when nothing can run beside
    it (one unit ready) or when the unit costs less than handing it over; otherwise units go
    to the executor, whose workers go on from unit to unit (see the module docstring) while
    the caller waits.

    A timeout or a KeyboardInterrupt returns at once: the run is marked cancelled, so the
    units still on workers stop before their next node, and their results are dropped.
    ``buffers`` are the run's arena tensors (see :mod:`graphexec.memory`). The serial units
    of ``regions`` wait until nothing else runs, and with ``boost`` its boosted nodes get
    that many BLAS threads when they run alone; its shared nodes are cut into pieces that
    run at once through ``spreader`` (see :mod:`graphexec.regions`). ``cores``: the cores
    the workers are pinned to, if they are (see :class:`AloneHelp`). ``lease``: the lease
    on the arena ``buffers`` belong to, held by every worker while it runs units of this run.
    """
    run = _Run(plan, feeds, frozenset(keep), executor, max(1, workers), trace, options, buffers, boost,
               regions, spreader, cores, lease)
    try:
        return run.drive()
    except BaseException:
        options.cancelled.set()
        raise


class _Run:
    """One call of :func:`run_concurrent`: the state, its lock and the loop each worker runs."""

    def __init__(self, plan: Plan, feeds: dict[str, Any], keep: frozenset[str], executor: Executor,
                 workers: int, trace: Trace | None, options: RunOptions, buffers: dict[str, Any] | None,
                 boost: int | None, regions: RegionChoice | None, spreader: Spreader | None = None,
                 cores: tuple[int, ...] = (), lease: Lease | None = None):
        self.plan = plan
        self.lease = lease
        self.keep = keep
        self.executor = executor
        self.workers = workers
        self.trace = trace
        self.options = options
        self.buffers = buffers
        self.serial_units = regions.serial if regions is not None else frozenset()
        boosted = regions.boosted if regions is not None and boost else frozenset()
        shared = regions.shared if regions is not None and spreader is not None else frozenset()
        #: What a unit that runs alone does with the idle cores; a serial unit (always alone,
        #: so its nodes run the same way every run) also shares nodes out.
        self.alone_help = AloneHelp(boost or 0, boosted, cores=cores) if boosted else None
        self.serial_help = AloneHelp(boost or 0, boosted, shared, spreader, cores) if shared else self.alone_help
        self.lock = threading.Lock()
        #: Set by the worker that leaves nothing running behind it.
        self.over = threading.Event()
        self.state = RunState(
            waiting=list(plan.unit_predecessor_counts),
            remaining_readers=Counter(plan.readers),
            values=dict(feeds),
        )
        for unit in plan.units:
            if self.state.waiting[unit.index] == 0:
                self._make_ready(unit.index)

    # -- the caller ---------------------------------------------------------------------
    def drive(self) -> dict[str, Any]:
        if self.trace is not None:
            self.trace.begin(self.plan)
            self.trace.alone = frozenset(i for u in self.serial_units for i in self.plan.units[u].nodes)
        state = self.state
        with self.lock:
            mine, handed = self._start(caller=True)
        self._hand_over(handed)
        while mine is not None:  # nothing beside it: the caller runs it, no hand-over
            done = self._run_unit(mine)
            if done[2] is not None and not isinstance(done[2], Exception):
                raise done[2]  # Ctrl-C in the caller is not the unit's failure
            with self.lock:
                self._record(mine, *done)
                mine, handed = self._start(caller=True)
            self._hand_over(handed)
        self._wait()
        if self.trace is not None:
            self.trace.events.extend(state.events)
            self.trace.end()
        if state.failure is not None:
            if isinstance(state.failure, GraphexecError) or not isinstance(state.failure, Exception):
                raise state.failure  # ours, or Ctrl-C in a unit the caller's executor ran
            raise ExecutionError("<scheduler>", "<worker>", [], state.failure) from state.failure
        if state.units_done != len(self.plan.units):
            raise ExecutionError("<scheduler>", "<plan>", [],
                                 f"{len(self.plan.units) - state.units_done} units never became ready")
        return {n: state.values[n] for n in self.keep}

    def _wait(self) -> None:
        """Until no unit runs; wakes up regularly so a deadline or Ctrl-C is noticed."""
        options = self.options
        with self.lock:
            if self.state.running == 0:
                return
        while True:
            wait = 0.1
            if options.deadline is not None:
                wait = min(wait, max(0.0, options.deadline - options.clock()))
            if self.over.wait(wait):
                return
            if options.deadline is not None and options.clock() > options.deadline:
                raise RunTimeoutError(
                    f"forward ran past its timeout of {options.timeout:g} s with work still running")

    # -- workers ------------------------------------------------------------------------
    def _worker(self, u: int | None) -> None:
        """A worker's loop: run ``u``, then whatever ready unit is next for this worker.
        It holds the arena lease taken for it in :meth:`_hand_over` until it has nothing
        more to run, and lets go before the run can be seen over, so that a finished run's
        arena is back in its pool when ``forward`` returns."""
        holding = True
        try:
            with joined_turn():
                while u is not None:
                    done = self._run_unit(u)
                    with self.lock:
                        self._record(u, *done)
                        u, handed = self._start(caller=False)
                        if u is None:
                            holding = False
                            self._let_go()
                            if self.state.running == 0:
                                self.over.set()
                    self._hand_over(handed)
        except BaseException as exc:  # a fault of the scheduler itself: end the run, never hang it
            with self.lock:
                self.state.failure = self.state.failure or exc
            self.over.set()
        finally:
            if holding:
                self._let_go()

    def _let_go(self) -> None:
        if self.lease is not None:
            self.lease.let_go()

    def _run_unit(self, u: int) -> tuple[dict[str, Any] | None, list[NodeEvent], BaseException | None]:
        plan = self.plan
        unit = plan.units[u]
        record = self.trace is not None
        try:
            with self.lock:
                inputs = {n: self.state.values[n] for n in unit.inputs}
                alone = self.state.running == 1 and (u in self.serial_units or not self.state.ready)
            assist = (self.serial_help if u in self.serial_units else self.alone_help) if alone else None
            outputs, events = run_unit(plan, unit, inputs, self.keep, record, self.options, self.buffers, assist)
        except BaseException as exc:  # recorded: the first failure wins, the rest only finish
            return None, [], exc
        return outputs, events, None

    # -- under the lock -----------------------------------------------------------------
    def _make_ready(self, u: int) -> None:  # the longest remaining chain first
        heapq.heappush(self.state.ready, (-self.plan.priority[self.plan.units[u].nodes[0]], u))

    def _record(self, u: int, outputs: dict[str, Any] | None, events: list[NodeEvent],
                failure: BaseException | None) -> None:
        state, plan = self.state, self.plan
        state.running -= 1
        if failure is not None:
            if state.failure is None:
                state.failure = failure
            return
        state.events.extend(events)
        state.values.update(outputs)  # type: ignore[arg-type]
        state.units_done += 1
        for name, count in plan.unit_reads[u].items():
            state.remaining_readers[name] -= count
            if state.remaining_readers[name] <= 0 and name not in self.keep:
                state.values.pop(name, None)
        for s in plan.unit_successors[u]:
            state.waiting[s] -= 1
            if state.waiting[s] == 0:
                self._make_ready(s)

    def _start(self, caller: bool) -> tuple[int | None, list[int]]:
        """The unit this thread runs next (or None) and the units to hand to idle workers.

        A worker takes the ready unit of highest priority; the caller only one that has
        nothing beside it, or one cheaper than handing it over, while no worker runs. A
        serial unit waits until nothing else runs."""
        state = self.state
        if state.failure is not None or not state.ready:
            return None, []
        top = state.ready[0][1]
        serial = top in self.serial_units
        if serial and state.running:
            return None, []  # it starts once what runs now has finished
        mine = None
        cheap = self.plan.unit_seconds[top] < INLINE_SECONDS
        if not caller or (state.running == 0 and (serial or cheap or len(state.ready) == 1)):
            mine = heapq.heappop(state.ready)[1]
            state.running += 1
            if serial:
                return mine, []
        handed = []
        while state.ready and state.running < self.workers:
            u = state.ready[0][1]
            if u in self.serial_units or (mine is not None and self.plan.unit_seconds[u] < INLINE_SECONDS):
                break
            heapq.heappop(state.ready)
            state.running += 1
            handed.append(u)
        return mine, handed

    def _refused(self, u: int, exc: Exception) -> ExecutionError:
        """The error for unit ``u``, which the executor would not take (``Engine.close()``
        while this run went on, or an executor given to the engine shut down)."""
        node = self.plan.nodes[self.plan.units[u].nodes[0]]
        refused = ExecutionError(
            node.name, node.type, [str(self.plan.specs.get(n, "?")) for n in node.step.inputs],
            "not started: the engine's workers were shut down while this forward ran (Engine.close(), "
            f"or the executor given to the engine shut down: {type(exc).__name__}: {exc})")
        refused.__cause__ = exc
        return refused

    def _hand_over(self, units: list[int]) -> None:
        """Give ``units`` to idle workers, then let go of the GIL for a moment: a woken
        worker needs it to start, and this thread would otherwise hold it until its own
        next numpy call (the wide net on two workers: 1.56-1.62x -> 1.59-1.65x the
        sequential speed, three runs of 30 rounds interleaved in one process)."""
        if not units:
            return
        for k, u in enumerate(units):
            if self.lease is not None:
                self.lease.hold()  # let go by the worker (see _worker)
            try:
                self.executor.submit(self._worker, u)
            except Exception as exc:  # a shut-down executor: this unit and the rest never run
                self._let_go()  # (Ctrl-C in the caller goes on up; a unit it stopped holds on)
                refused = self._refused(u, exc)
                with self.lock:
                    for never_run in units[k:]:
                        self._record(never_run, None, [], refused)
                    if self.state.running == 0:
                        self.over.set()
                return
        time.sleep(0)
