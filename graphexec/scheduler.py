"""Run a plan's ready units on a ``concurrent.futures`` executor, longest chain first.

The calling thread owns the run's state (:class:`RunState`): how many producer units each
unit still waits for, the ready heap ordered by priority, and how many readers each tensor
still has. Workers only compute: each runs one unit (a chain of nodes) on the inputs it was
handed and reports back through a queue (``future.add_done_callback``), so the state needs
no locks and no worker ever waits on work queued to the same pool (no deadlock).

On the first failure nothing new starts, what is running finishes, and the failure is
raised to the caller; every tensor of the run is dropped with the state.
"""

from __future__ import annotations

import heapq
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Any

from graphexec.blas import blas_boost
from graphexec.errors import ExecutionError, GraphexecError, RunTimeoutError
from graphexec.executor import NO_OPTIONS, RunOptions, run_step
from graphexec.plan import Plan, Unit
from graphexec.regions import RegionChoice
from graphexec.trace import NodeEvent, Trace


@dataclass
class RunState:
    """Everything one run knows; touched only by the thread that called :func:`run_concurrent`."""

    waiting: list[int]
    remaining_readers: Counter[str]
    values: dict[str, Any]
    keep: frozenset[str]
    ready: list[tuple[float, int]] = field(default_factory=list)
    in_flight: int = 0
    failure: BaseException | None = None
    units_done: int = 0


class SynchronousExecutor(Executor):
    """An executor that runs each task at once in the submitting thread (for tests/debugging)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # handed to the caller through the future
            future.set_exception(exc)
        return future


def run_unit(
    plan: Plan, unit: Unit, inputs: dict[str, Any], keep: frozenset[str], record: bool, options: RunOptions,
    buffers: dict[str, Any] | None = None, blas: int = 0,
) -> tuple[dict[str, Any], list[NodeEvent]]:
    """Worker side: run the unit's nodes back to back; return what others need, and timings
    (``blas``: the BLAS threads it was given, when raised for it, for the trace)."""
    values = dict(inputs)
    events: list[NodeEvent] = []
    thread = threading.current_thread().name
    for index in unit.nodes:
        node = plan.nodes[index]
        options.before_node(node.step)
        start = time.perf_counter_ns() if record else 0
        run_step(node.step, values, options.check_finite, buffers)
        if record:
            end = time.perf_counter_ns()
            events.append(NodeEvent(index, node.name, node.type, thread, start, end, blas))
            device_span = getattr(node.step.layer, "device_span", None)  # the node's commands on a device queue
            if device_span is not None:
                span = device_span(index, [values[n] for n in node.step.outputs], start, end)
                if span is not None:
                    events.append(span)  # resolved by Trace.end, when the device is done
    wanted = set(unit.outputs) | keep
    return {n: values[n] for n in values.keys() & wanted if n not in inputs}, events


def _next_done(done: queue.SimpleQueue, options: RunOptions) -> tuple[int, Future]:
    """The next finished unit; wakes up regularly so a deadline or Ctrl-C is noticed."""
    while True:
        wait = 0.1
        if options.deadline is not None:
            wait = min(wait, max(0.0, options.deadline - time.monotonic()))
        try:
            return done.get(timeout=wait)
        except queue.Empty:
            if options.deadline is not None and time.monotonic() > options.deadline:
                raise RunTimeoutError(
                    f"forward ran past its timeout of {options.timeout:g} s with work still running"
                ) from None


#: Units estimated below this run on the calling thread: handing them to a worker would
#: cost more (two thread wake-ups, tens of microseconds) than running them.
INLINE_SECONDS = 30e-6
def run_concurrent(
    plan: Plan,
    feeds: dict[str, Any],
    keep: Iterable[str],
    executor: Executor,
    max_in_flight: int,
    trace: Trace | None = None,
    options: RunOptions = NO_OPTIONS,
    caller_works: bool = False,
    buffers: dict[str, Any] | None = None,
    boost: int | None = None,
    regions: RegionChoice | None = None,
) -> dict[str, Any]:
    """Run ``plan`` on ``executor`` with at most ``max_in_flight`` units at once there.

    The calling thread owns the state and also runs a ready unit itself when handing it
    over cannot gain anything: when it is the only work there is (nothing in flight, one
    unit ready) or when it is cheaper than the hand-over. With ``caller_works`` it is one
    of the workers: when the executor has ``max_in_flight`` units already, it runs the
    next ready unit itself instead of waiting.

    A timeout or a KeyboardInterrupt returns at once: the run is marked cancelled, so the
    units still on workers stop before their next node, and their results are dropped.
    ``buffers`` are the run's arena tensors (see :mod:`graphexec.memory`). The serial units
    of ``regions`` wait until nothing else runs, and with ``boost`` its boosted units get
    that many BLAS threads when they run alone (see :mod:`graphexec.regions`).
    """
    try:
        return _run(plan, feeds, keep, executor, max_in_flight, trace, options, caller_works, buffers, boost,
                    regions)
    except BaseException:
        options.cancelled.set()
        raise


def _run(plan, feeds, keep, executor, max_in_flight, trace, options, caller_works, buffers, boost,
         regions) -> dict[str, Any]:
    keep = frozenset(keep)
    state = RunState(
        waiting=list(plan.unit_predecessor_counts),
        remaining_readers=Counter(plan.readers),
        values=dict(feeds),
        keep=keep,
    )
    done: queue.SimpleQueue[tuple[int, Future]] = queue.SimpleQueue()
    serial_units = regions.serial if regions is not None else frozenset()
    boosted = regions.boosted if regions is not None and boost else frozenset()
    record = trace is not None
    if trace is not None:
        trace.begin(plan)
        trace.alone = frozenset(i for u in serial_units for i in plan.units[u].nodes)

    def make_ready(u: int) -> None:  # the longest remaining chain first
        heapq.heappush(state.ready, (-plan.priority[plan.units[u].nodes[0]], u))

    for unit in plan.units:
        if state.waiting[unit.index] == 0:
            make_ready(unit.index)

    def finish(u: int, outputs: dict[str, Any], events: list[NodeEvent]) -> None:
        if trace is not None:
            trace.events.extend(events)
        state.values.update(outputs)
        state.units_done += 1
        for name, count in plan.unit_reads[u].items():
            state.remaining_readers[name] -= count
            if state.remaining_readers[name] <= 0 and name not in keep:
                state.values.pop(name, None)
        for s in plan.unit_successors[u]:
            state.waiting[s] -= 1
            if state.waiting[s] == 0:
                make_ready(s)

    def collect(u: int, future: Future) -> None:
        state.in_flight -= 1
        try:
            outputs, events = future.result()
        except BaseException as exc:  # the first failure wins; the rest only finish
            if state.failure is None:
                state.failure = exc
            return
        finish(u, outputs, events)

    while True:
        while state.ready and state.failure is None:
            _, u = heapq.heappop(state.ready)
            unit = plan.units[u]
            serial = u in serial_units
            if serial and state.in_flight:
                make_ready(u)
                break  # it runs once what is running has finished
            inputs = {n: state.values[n] for n in unit.inputs}
            alone = state.in_flight == 0 and (serial or not state.ready)
            if alone or plan.unit_seconds[u] < INLINE_SECONDS or state.in_flight >= max_in_flight:
                if not alone and plan.unit_seconds[u] >= INLINE_SECONDS and not caller_works:
                    make_ready(u)
                    break  # every worker is busy: wait for one
                try:
                    if alone and u in boosted:
                        with blas_boost(boost) as raised:
                            outputs, events = run_unit(plan, unit, inputs, keep, record, options, buffers,
                                                       boost if raised else 0)
                    else:
                        outputs, events = run_unit(plan, unit, inputs, keep, record, options, buffers)
                except Exception as exc:  # a KeyboardInterrupt is not the unit's failure
                    state.failure = exc
                    break
                finish(u, outputs, events)
                while True:  # take in what finished meanwhile, so priorities stay current
                    try:
                        collect(*done.get_nowait())
                    except queue.Empty:
                        break
                continue
            future = executor.submit(run_unit, plan, unit, inputs, keep, record, options, buffers)
            state.in_flight += 1
            future.add_done_callback(lambda f, u=u: done.put((u, f)))
        if state.in_flight == 0:
            break
        collect(*_next_done(done, options))
    if trace is not None:
        trace.end()
    if state.failure is not None:
        if isinstance(state.failure, GraphexecError):
            raise state.failure
        raise ExecutionError("<scheduler>", "<worker>", [], state.failure) from state.failure
    if state.units_done != len(plan.units):
        raise ExecutionError("<scheduler>", "<plan>", [], f"{len(plan.units) - state.units_done} units never became ready")
    return {n: state.values[n] for n in keep}
