"""Running one node, and the sequential executor: one thread, the program's topological
order, the reference every other executor must equal bit for bit."""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Iterable
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graphexec.errors import ExecutionError, GraphexecError, NonFiniteError, RunTimeoutError
from graphexec.floats import quiet_floats
from graphexec.layers.specs import spec_of
from graphexec.plan import Node, Plan
from graphexec.program import Step
from graphexec.replay import Replay
from graphexec.spread import Spreader


@dataclass(frozen=True)
class RunOptions:
    """Per-call choices shared by every node of one run."""

    #: The time (on ``clock``) after which no node may start (``None``: no limit).
    deadline: float | None = None
    #: The timeout the deadline came from, for the message.
    timeout: float | None = None
    #: Raise on the first operator whose output holds NaN or Inf.
    check_finite: bool = False
    #: Set when the run is abandoned (timeout, Ctrl-C): workers stop between nodes.
    cancelled: threading.Event = field(default_factory=threading.Event)
    #: Seconds, monotonic: what the deadline is measured on (``EngineOptions.clock``).
    clock: Callable[[], float] = time.monotonic

    def before_node(self, step: Step) -> None:
        """Raise instead of starting ``step`` when the run is out of time or abandoned."""
        if self.cancelled.is_set():
            raise RunTimeoutError(f"the run was abandoned before {step.name} ({step.layer.type})")
        if self.deadline is not None and self.clock() > self.deadline:
            self.cancelled.set()
            raise RunTimeoutError(
                f"forward ran past its timeout of {self.timeout:g} s; {step.name} ({step.layer.type}) was not started"
            )


NO_OPTIONS = RunOptions()


def _call(node: Node, inputs: list[Any], buffers: dict[str, np.ndarray] | None,
          spreader: Spreader | None) -> tuple[list[Any], int]:
    """The node's kernel on ``inputs``: its outputs, and how many pieces it ran in."""
    step, kernel = node.step, node.kernel
    if spreader is not None and kernel.crosses():
        outputs = ([buffers[name] for name in step.outputs] if buffers is not None and step.outputs
                   and step.outputs[0] in buffers else _fresh(kernel))
        if spreader.across(kernel, inputs, outputs):
            return outputs, spreader.count
    if buffers is not None and step.outputs and step.outputs[0] in buffers:
        outputs = [buffers[name] for name in step.outputs]
        pieces = kernel.pieces(inputs, outputs, spreader.count) if spreader is not None else None
        if pieces:
            spreader.run(pieces, kernel.stopped)
            return outputs, len(pieces)
        return kernel.run(inputs, outputs), 0
    return kernel.run(inputs), 0


def _fresh(kernel: Any) -> list[np.ndarray]:
    """New arrays for the outputs of a node that has no arena regions."""
    return [np.empty(spec.shape, spec.dtype) for spec in kernel.output_specs]


def run_step(
    node: Node, values: dict[str, Any], check_finite: bool = False, buffers: dict[str, np.ndarray] | None = None,
    spreader: Spreader | None = None, quiet: bool = False,
) -> int:
    """Run one node, reading its inputs from and writing its outputs into ``values``.

    With ``buffers`` (an arena's tensors, see :mod:`graphexec.memory`), a node whose
    outputs have arena regions writes straight into them; there a ``spreader`` shares the
    node's work out among idle workers when its kernel cuts it into pieces. ``quiet``: the
    caller already runs in :func:`~graphexec.floats.quiet_floats` on this thread. Returns
    how many pieces ran (0: the node ran whole).
    """
    step = node.step
    inputs = [values[name] for name in step.inputs]
    try:
        with nullcontext() if quiet else quiet_floats():
            outputs, shared = _call(node, inputs, buffers, spreader)
    except BaseException as exc:
        if node.kernel is not None:
            node.kernel.stopped()  # midway, perhaps before writing what a scratch slot keeps
        if isinstance(exc, GraphexecError) or not isinstance(exc, Exception):
            raise
        # a layer's own failure, wrapped with where it happened
        raise ExecutionError(step.name, step.layer.type, [str(spec_of(v)) for v in inputs], exc) from exc
    if len(outputs) != len(step.outputs):
        raise ExecutionError(
            step.name, step.layer.type, [str(spec_of(v)) for v in inputs],
            f"returned {len(outputs)} outputs, the graph expects {len(step.outputs)}",
        )
    if check_finite:
        for k, out in enumerate(outputs):
            if isinstance(out, np.ndarray) and out.dtype.kind in "fc" and not np.isfinite(out).all():
                raise NonFiniteError(
                    step.name, step.layer.type, [str(spec_of(v)) for v in inputs],
                    f"output {k} ({step.outputs[k]}) holds NaN or Inf",
                )
    values.update(zip(step.outputs, outputs))
    return shared


def run_sequential(
    plan: Plan,
    feeds: dict[str, np.ndarray],
    keep: Iterable[str],
    options: RunOptions = NO_OPTIONS,
    buffers: dict[str, np.ndarray] | None = None,
    shared: frozenset[int] = frozenset(),
    spreader: Spreader | None = None,
    replay: Replay | None = None,
) -> dict[str, Any]:
    """Run every node of ``plan`` in the program's order; return the values named in ``keep``.

    A value is dropped after its last reader, so peak memory follows the live set; with
    ``buffers`` the nodes that have arena regions write into them, and the nodes whose
    indices are in ``shared`` are cut into pieces that ``spreader`` runs at once. With
    ``buffers`` and a ``replay``, each of its device stretches is enqueued as one (see
    :mod:`graphexec.replay`).
    """
    keep = frozenset(keep)
    drops = _drops(plan.program, keep)
    values: dict[str, Any] = dict(feeds)
    plain = not options.check_finite
    nodes = plan.nodes
    calls = _calls(plan)
    bound = replay.bind(buffers) if replay is not None and buffers is not None and replay.usable(keep) else None
    starts = replay.starts if bound is not None else {}
    spans = _stretch_drops(replay, keep, drops) if bound is not None else ()
    position = 0
    with quiet_floats():  # once for the run: entering it costs about a microsecond a node
        while position < len(nodes):
            node = nodes[position]
            kernel, step, inputs, outputs = calls[position]
            options.before_node(step)
            stretch = starts.get(position)
            if stretch is not None:
                bound.run(stretch, values)
                for name in spans[stretch]:
                    values.pop(name, None)
                position = replay.ends[stretch]  # type: ignore[union-attr]
                continue
            elif plain:  # run_step's work, inline: a node's call costs a few microseconds less
                args = [values[name] for name in inputs]
                try:
                    if spreader is not None and node.index in shared:
                        results = _call(node, args, buffers, spreader)[0]
                    elif buffers is not None and outputs and outputs[0] in buffers:
                        results = kernel.run(args, [buffers[name] for name in outputs])
                    else:
                        results = kernel.run(args)
                except BaseException as exc:  # as run_step
                    if kernel is not None:
                        kernel.stopped()  # midway, perhaps before writing what a scratch slot keeps
                    if isinstance(exc, GraphexecError) or not isinstance(exc, Exception):
                        raise
                    raise ExecutionError(step.name, step.layer.type, [str(spec_of(v)) for v in args], exc) from exc
                if len(results) != len(outputs):
                    raise ExecutionError(step.name, step.layer.type, [str(spec_of(v)) for v in args],
                                         f"returned {len(results)} outputs, the graph expects {len(outputs)}")
                values.update(zip(outputs, results))
            else:
                run_step(node, values, options.check_finite, buffers, spreader if node.index in shared else None,
                         quiet=True)
            for name in drops[position]:
                values.pop(name, None)
            position += 1
    return {name: values[name] for name in keep}


#: By plan (forgotten with it): what :func:`_calls` found.
_CALLS: weakref.WeakKeyDictionary[Plan, tuple[tuple[Any, Step, tuple[str, ...], tuple[str, ...]], ...]] = (
    weakref.WeakKeyDictionary())


def _calls(plan: Plan) -> tuple[tuple[Any, Step, tuple[str, ...], tuple[str, ...]], ...]:
    """Each node's kernel, step, input and output names, looked up once per plan."""
    found = _CALLS.get(plan)
    if found is None:
        found = _CALLS[plan] = tuple((node.kernel, node.step, tuple(node.step.inputs), tuple(node.step.outputs))
                                     for node in plan.nodes)
    return found


#: By replay (forgotten with it), by set of kept names: what :func:`_stretch_drops` found.
_STRETCH_DROPS: weakref.WeakKeyDictionary[Replay, dict[frozenset[str], tuple[tuple[str, ...], ...]]] = (
    weakref.WeakKeyDictionary())


def _stretch_drops(replay: Replay, keep: frozenset[str],
                   drops: tuple[tuple[str, ...], ...]) -> tuple[tuple[str, ...], ...]:
    """For each of ``replay``'s stretches, the drops (see :func:`_drops`) of all its nodes
    in one tuple: a replayed stretch lets them go at once."""
    per_keep = _STRETCH_DROPS.get(replay)
    if per_keep is None:
        per_keep = _STRETCH_DROPS.setdefault(replay, {})
    found = per_keep.get(keep)
    if found is None:
        firsts = sorted(replay.starts, key=replay.starts.__getitem__)
        found = tuple(tuple(name for index in range(first, end) for name in drops[index])
                      for first, end in zip(firsts, replay.ends))
        if len(per_keep) >= 16:  # as in _drops
            per_keep.clear()
        per_keep[keep] = found
    return found


#: By program (its id, forgotten with it), by set of kept names: what :func:`_drops` found.
_DROPS: dict[int, dict[frozenset[str], tuple[tuple[str, ...], ...]]] = {}


def _drops(program: Any, keep: frozenset[str]) -> tuple[tuple[str, ...], ...]:
    """For each step, the values no later step reads and the caller does not keep: its
    outputs nobody reads, and the inputs it is the last reader of. Worked out once per
    program and ``keep``, not at every run."""
    per_keep = _DROPS.get(id(program))
    if per_keep is None:
        per_keep = _DROPS.setdefault(id(program), {})
        weakref.finalize(program, _DROPS.pop, id(program), None)
    found = per_keep.get(keep)
    if found is None:
        last_reader = {name: index for index, step in enumerate(program.steps) for name in step.inputs}
        found = tuple(
            tuple(dict.fromkeys(
                [name for name in step.outputs if name not in last_reader and name not in keep]
                + [name for name in step.inputs if last_reader[name] == index and name not in keep]))
            for index, step in enumerate(program.steps))
        if len(per_keep) >= 16:  # a caller extracting ever other values: keep the memory bounded
            per_keep.clear()
        per_keep[keep] = found
    return found
