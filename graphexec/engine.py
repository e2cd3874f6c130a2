"""The user's face of graphexec: load a pnnx model, run it, get its outputs.

::

    engine = Engine.load("m.pnnx.param")          # the bin defaults to m.pnnx.bin
    y = engine.forward(x)                          # one input: array in, array out
    y1, y2 = engine.forward(x1, x2)                # positional: a tuple when several outputs
    outs = engine.forward({"in0": x})              # by name: dict in, dict out
    y, inner = engine.forward(x, extract=["7"])    # intermediates by operand name

The engine strings the stages together and owns none of them: the options
(:mod:`graphexec.options`), the inputs' checks (:mod:`graphexec.inputs`), the thread policy
(:mod:`graphexec.threads`), the planner with its passes and plan cache
(:mod:`graphexec.planner`), the threads it runs on (:mod:`graphexec.pools`) and the
executors (:mod:`graphexec.executor`, :mod:`graphexec.scheduler`).
"""

from __future__ import annotations

import dataclasses
import os
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from typing import Any

import numpy as np
from loguru import logger

from graphexec import footprint, pnnx
from graphexec.blas import blas_run
from graphexec.converting import loadable
from graphexec.cost import nbytes
from graphexec.devices import resolve as resolve_device
from graphexec.devices.cpu import CpuDevice
from graphexec.errors import (ExportMismatchWarning, GraphexecError, InputError, InputShapeError, OptionError,
                              warn_the_caller)
from graphexec.executor import RunOptions, run_sequential
from graphexec.floats import quiet_floats
from graphexec.inputs import Inputs, dtype_of
from graphexec.ir import Dim, Graph
from graphexec.layers.registry import lookup
from graphexec.layers.specs import SequenceSpec, Spec, TensorSpec, spec_of
from graphexec.memory import ArenaPool, Lease, MemoryPlan
from graphexec.occupancy import occupancy
from graphexec.options import EngineOptions
from graphexec.placement import Placement
from graphexec.plan import Plan
from graphexec.planner import Planner
from graphexec.pools import Pools
from graphexec.program import Program
from graphexec.replay import Replay
from graphexec.samples import ALONE_SECONDS, batch_of, batchwise, leads_with, row_bounds
from graphexec.scheduler import SynchronousExecutor, run_concurrent
from graphexec.threads import ThreadPolicy, cpu_count
from graphexec.trace import Trace

__all__ = ["Engine", "EngineOptions", "cpu_count"]


def physical_memory() -> int:
    """Bytes of RAM in this machine (a large fallback where the OS will not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return 1 << 40


def _mib(count: int, decimals: int = 0) -> str:
    """``count`` bytes in MiB for a message; as a power of ten past what a float holds (a
    damaged model's shapes can ask for 1e600 bytes)."""
    if count < 1 << 1000:
        return f"{count / 2**20:,.{decimals}f}"
    return f"10^{len(str(count >> 20)) - 1}"


def _known_type(op_type: str) -> bool:
    """A layer's type, graphexec's own node types (``graphexec.SqueezeExcite``) and fused
    ones as traces name them (``nn.Conv2d+nn.ReLU``)."""
    if op_type.startswith("graphexec."):
        return True
    return all(lookup(part) is not None for part in op_type.split("+"))


class Engine:
    """A loaded model. Immutable after load, so many threads may call ``forward`` at once.

    ``Engine(graph, options)`` runs an in-memory :class:`~graphexec.ir.Graph`;
    :meth:`load` reads one from files (and such an engine pickles: it loads again from the
    same files, with the same options, on the other side)."""

    def __init__(self, graph: Graph, options: EngineOptions | None = None, *,
                 source: tuple[str, str | None] | None = None, **keywords: Any):
        options = EngineOptions.from_keywords(options, **keywords)
        self.options = options
        self.graph = graph
        self._source = source
        #: Refuse to run input shapes whose tensors (and the working memory of the layer running
        #: then) would need more bytes than this at once, and models that would take more to load.
        self.memory_limit = options.memory_limit if options.memory_limit is not None else physical_memory()
        footprint.check_load(len(graph.operators), 0, self.memory_limit)
        self.program = Program.from_graph(graph)
        self._inputs = Inputs(self.program)
        self.input_names = self._inputs.names
        self._check_cpu_types()
        self._warn_of_unread_inputs()
        #: The device nodes are placed on beside the CPU (None: the CPU alone).
        self.device = resolve_device(options.device)
        self._owns_device = isinstance(options.device, str) and self.device is not None
        #: The CPU device: the backup that runs every node no other device takes.
        self.cpu = CpuDevice(options.kernel_tiers())
        drafting = Planner(self.program, self.cpu, self.device, options, memory_limit=self.memory_limit)
        exported = self._inputs.exported_specs()
        draft = (lambda pieces: drafting.draft(exported, pieces)) if exported is not None else None
        #: How many threads runs use, decided once (see :mod:`graphexec.threads`).
        self.policy = ThreadPolicy.decide(options, draft, on_device=self.device is not None)
        self.planner = drafting.with_policy(self.policy)
        self._alone: tuple[ThreadPolicy, Planner] | None = None
        #: Per input specs, extracted operands and part count: the rows of each part a
        #: batch runs in, or None where it runs whole (see :mod:`graphexec.samples`).
        self._parted: dict[tuple, list[tuple[int, int]] | None] = {}
        first_plan = self.planner.plan(exported, given_by_user=False) if exported is not None else None
        for shapes in options.plan_for:  # kernels prepared (compiled loops ready) now, not in a run
            self.plan(*shapes)
        # An output that is a sequence (a model returning a list) is flattened into its
        # tensors, in order; how many there are is known from the exported shapes (an output
        # computed after a size only the run tells is one tensor, of its annotated shape).
        self._output_shapes: list[tuple[Dim | None, ...] | None] | None = None
        if first_plan is not None:
            self._warn_of_shapes_unlike_the_export(first_plan)
            operands = graph.operands
            self._output_shapes = [leaf.shape if leaf is not None else operands[n].shape
                                   for n in self.program.outputs for leaf in _leaves(first_plan.specs.get(n))]
        count = len(self._output_shapes) if self._output_shapes is not None else len(self.program.outputs)
        self.output_names = [f"out{i}" for i in range(count)]
        graph.drop_weight_pages()  # the layers have made their own copies of what they use
        self.pools = Pools(self.policy, pin=options.pin_workers and options.executor is None)
        #: Arenas per cached plan; they go when the plan leaves the cache.
        self._arena_pools: weakref.WeakKeyDictionary[Plan, ArenaPool] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        if self.device is not None and first_plan is not None and self.reuse_memory \
                and first_plan.peak_bytes <= self.memory_limit:
            self._arenas(first_plan)  # the device's launches are prepared at load, not in the first run

    @classmethod
    def load(cls, param_path: str | os.PathLike[str], bin_path: str | os.PathLike[str] | None = None, *,
             options: EngineOptions | None = None, **keywords: Any) -> Engine:
        """Load ``param_path`` (and its weights, by default the sibling ``.bin``).

        The keywords are the fields of :class:`~graphexec.options.EngineOptions` (threads,
        intra_op_threads, executor, memory_limit, reuse_memory, device, cpu_types, fallback,
        pin_workers, share_nodes, batch_parts, passes_off, cpu_kernels, plan_for, clock), or
        ``options`` gives them whole.

        An ONNX model (``model.onnx``) is converted with pnnx first, into a cache folder and
        reused (see :func:`graphexec.convert`, which also fixes sizes left dynamic).
        """
        built = EngineOptions.from_keywords(options, **keywords)  # a bad option fails before the file is read
        param_path = pnnx.path_text(param_path, "param file")  # bytes, or no path at all: said as such
        bin_path = None if bin_path is None else pnnx.path_text(bin_path, "weight file")
        limit = built.memory_limit if built.memory_limit is not None else physical_memory()
        graph = pnnx.load(loadable(param_path) if bin_path is None else param_path, bin_path, memory_limit=limit)
        source = (param_path, bin_path)
        engine = cls(graph, built, source=source)
        logger.info(
            "loaded {}: {} operators, inputs {}, outputs {}, {} workers x {} BLAS threads",
            param_path, len(graph.operators), engine.input_shapes, engine.output_shapes,
            engine.threads, engine.intra_op_threads,
        )
        return engine

    def close(self) -> None:
        """Stop the engine's own worker threads (a later forward starts them again)."""
        self.pools.close()
        if self.device is not None and self._owns_device:
            self.device.release()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __reduce__(self) -> tuple:
        """Pickled as its files and options: the other side loads the model again, so the
        files must be reachable there under the same paths."""
        if self._source is None:
            raise GraphexecError("an Engine made from an in-memory Graph cannot be pickled; one from "
                                 "Engine.load(path) can (it loads again from its files)")
        if self.options.device is not None and not isinstance(self.options.device, str):
            raise OptionError("an Engine on a device object cannot be pickled: give the device as a string "
                              "(device='opencl:gpu') so that the other side opens its own")
        return _reload, (*self._source, dict(self.options.as_keywords()))

    # -- what the model looks like -------------------------------------------------------
    @property
    def threads(self) -> int:
        """Inter-op workers: how many independent nodes may run at once (1: sequential)."""
        return self.policy.threads

    @property
    def intra_op_threads(self) -> int:
        """BLAS threads inside one node during a run."""
        return self.policy.intra_op_threads

    @property
    def worker_cores(self) -> tuple[int, ...] | None:
        """The cores the engine's own workers are pinned to, one each (None: not pinned)."""
        return self.pools.worker_cores

    @property
    def cpu_types(self) -> frozenset[str]:
        return self.options.cpu_types

    @property
    def fallback(self) -> bool:
        return self.options.fallback

    @property
    def reuse_memory(self) -> bool:
        return self.options.reuse_memory

    @property
    def input_shapes(self) -> dict[str, tuple[Dim, ...] | None]:
        """Input shapes as exported (``None`` marks an unknown size, a string a symbol)."""
        return self._inputs.shapes

    @property
    def output_shapes(self) -> dict[str, tuple[Dim, ...] | None]:
        """Output shapes as exported."""
        if self._output_shapes is not None:
            return dict(zip(self.output_names, self._output_shapes))
        operands = self.graph.operands
        return {n: operands[o].shape for n, o in zip(self.output_names, self.program.outputs)}

    @property
    def input_dtypes(self) -> dict[str, np.dtype]:
        """The dtype each input must have (float32 unless the model says otherwise)."""
        return self._inputs.dtypes

    def plan(self, *shapes: Sequence[int]) -> Plan:
        """The execution plan for the given input shapes (default: the exported ones)."""
        if not shapes:
            exported = self._inputs.exported_specs()
            if exported is None:
                raise InputError("the model's input shapes are not fixed; pass the shapes to plan for")
            return self.planner.plan(exported, given_by_user=False)
        if len(shapes) != len(self.program.inputs):
            raise InputError(f"the model takes {len(self.program.inputs)} inputs, got {len(shapes)} shapes")
        given = {name: TensorSpec(tuple(shape), dtype) for name, shape, dtype in
                 zip(self.program.inputs, shapes, self.input_dtypes.values())}
        return self.planner.plan(given)

    @property
    def placement(self) -> Placement:
        """Where each node of the exported shapes' plan runs, and why (print it for a table)."""
        return self.plan().placement

    def specs(self, *shapes: Sequence[int]) -> dict[str, Spec]:
        """Shape and dtype of every operand for the given input shapes (inferred, cached):
        those known before a run (see :attr:`Plan.rest <graphexec.plan.Plan.rest>`)."""
        return dict(self.plan(*shapes).specs)

    def shared_nodes(self, plan: Plan) -> frozenset[int]:
        """The nodes of ``plan`` that are shared out among threads when they run alone."""
        return self.policy.shared(plan)

    def memory_plan(self, *shapes: Sequence[int]) -> MemoryPlan:
        """The arena layout for the given input shapes (default: the exported ones); where
        a size is known only at run time, of the plan made before the run (the rest has
        one per size found, leased as this one)."""
        return self._arenas(self.plan(*shapes)).memory

    def _arenas(self, plan: Plan) -> ArenaPool:
        with self._lock:
            pool = self._arena_pools.get(plan)
        if pool is None:
            memory = MemoryPlan(plan)  # outside the lock: concurrent callers may both make it, one wins
            logger.debug("memory plan: {} tensors in a {} MiB arena ({} MiB without reuse)",
                         len(memory.regions), _mib(memory.arena_bytes, 2), _mib(memory.unshared_bytes, 2))
            replay = Replay.prepare(plan, memory)  # the device's launches, now that offsets are known
            with self._lock:
                pool = self._arena_pools.setdefault(plan, ArenaPool(memory, replay=replay))
        return pool

    def _check_cpu_types(self) -> None:
        types = {step.layer.type for step in self.program.steps}
        unknown = self.options.cpu_types - types
        misspelt = sorted(t for t in unknown if not _known_type(t))
        if misspelt:  # a type no layer has: a typo would otherwise keep nothing on the CPU, silently
            raise OptionError(f"cpu_types {misspelt} name no operator type graphexec knows (this model has "
                              f"{', '.join(sorted(types))})")
        if unknown:
            logger.warning("cpu_types {} name no operator of this model", sorted(unknown))

    def _warn_of_unread_inputs(self) -> None:
        """An input no operator reads cannot change the outputs. A model may read only its
        shape, but an export may also have lost what read it (pnnx drops a causal mask
        PyTorch traced as ``is_causal``), and then the answers are not PyTorch's. Where no
        input is read at all, every output is a constant: pnnx folded the model (it does so
        around a function compiled with ``torch.jit.script`` inside the trace), a warning."""
        unread = [name for name, operand in zip(self.input_names, self.graph.input_operands) if not operand.consumers]
        if unread and len(unread) == len(self.input_names):
            warn_the_caller(f"no operator reads the inputs {unread}: every output is the same whatever they "
                            "hold, so pnnx has folded the model into constants (as it does around a function "
                            "compiled with torch.jit.script inside the trace), and the outputs are PyTorch's "
                            "for the inputs it traced only", ExportMismatchWarning)
        elif unread:
            logger.warning("inputs {} are read by no operator: the outputs do not depend on their values "
                           "(right if the model reads only their shapes; else the export lost what reads them)",
                           unread)

    def _warn_of_shapes_unlike_the_export(self, plan: Plan) -> None:
        """A shape inferred at the exported input shapes that is not the one pnnx annotated
        means the graph computes something other than what PyTorch traced (pnnx's own
        model_pnnx.py gives the same): an index pnnx folded into the wrong constant can still
        broadcast, and then every answer is quietly wrong. (A dynamic export is held against
        its annotations' ranks at the first shapes a run gives.)"""
        self.planner.hold_against_the_export(plan.specs)

    # -- running ---------------------------------------------------------------------------
    def forward(
        self,
        *args: Any,
        extract: Sequence[str] | None = None,
        trace: Trace | None = None,
        timeout: float | None = None,
        check_finite: bool = False,
    ) -> Any:
        """Run the model.

        ``forward(x)`` / ``forward(x1, x2)`` return an array, or a tuple when the model has
        several outputs; ``forward({"in0": x})`` returns ``{"out0": y, ...}``. With
        ``extract=[names]`` (operand ids as in the param file, or operator names for their
        outputs: an array, a tuple for several) the result is ``(outputs, {name: value})``.
        A :class:`~graphexec.trace.Trace` passed as ``trace`` records when each node ran.
        ``timeout`` (seconds): no node starts after it and RunTimeoutError is raised;
        ``check_finite``: raise NonFiniteError at the first operator whose output holds
        NaN or Inf.
        """
        by_name = len(args) == 1 and isinstance(args[0], Mapping)
        feeds = self._inputs.feeds(args[0] if by_name else None, None if by_name else args)
        asked = self._inputs.extractable(extract)
        wanted = list(dict.fromkeys(o for operands in asked.values() for o in operands))
        given = {name: TensorSpec(v.shape, dtype_of(self.graph.operands[name].dtype)) for name, v in feeds.items()}
        with occupancy().run() as alone:  # counted before the threads are chosen: see Occupancy.run
            rows = self._batch_rows(given, wanted, alone)
            if rows is not None:
                values = self._run_in_parts(rows, feeds, given, wanted, trace, timeout, check_finite)
            else:
                values = self._run_whole(feeds, given, wanted, trace, timeout, check_finite, alone)
        outputs = [leaf for n in self.program.outputs for leaf in _leaves(values[n])]
        if by_name:
            result: Any = dict(zip(self.output_names, outputs))
        else:
            result = outputs[0] if len(outputs) == 1 else tuple(outputs)
        if extract is not None:
            return result, {name: values[ops[0]] if len(ops) == 1 else tuple(values[o] for o in ops)
                            for name, ops in asked.items()}
        return result

    def _run_whole(self, feeds: dict[str, Any], given: dict[str, TensorSpec], wanted: list[str],
                   trace: Trace | None, timeout: float | None, check_finite: bool, alone: bool) -> dict[str, Any]:
        """One run of the whole inputs: the values of the outputs and of ``wanted``; ``alone``:
        no other run was in flight as this one began."""
        policy, planner = (self.policy, self.planner) if self.policy.room(alone) else self._one_thread()
        plan = self._keeping(wanted, planner.plan(given), lambda off: planner.plan(given, off=off))
        self._check_memory(plan.peak_bytes, feeds)
        feeds = self._cast(feeds, given)
        options = self._inputs.run_options(timeout, check_finite, feeds, self.options.clock)
        parts: list[Trace] = []
        values: dict[str, Any] = dict(feeds)
        # a run that only feeds a device (its plan whole) leaves BLAS's threads as they are
        turn = (blas_run(policy.intra_op_threads, policy.boost is not None, options.deadline)
                if plan.host_work or plan.rest is not None else nullcontext())
        with turn:
            while True:  # a plan, then the plans of what it left until the run told its sizes
                part = Trace() if trace is not None else None
                values.update(self._run_plan(policy, plan, values, wanted, part, options))
                if part is not None:
                    parts.append(part)
                if plan.rest is None:
                    break
                plan = self._continuation(planner, plan, values, wanted)
                needed = {*self.program.outputs, *wanted, *plan.program.inputs}
                values = {name: value for name, value in values.items() if name in needed}
        if trace is not None:
            trace.join(parts)
        return values

    def _check_memory(self, peak_bytes: int, feeds: dict[str, Any]) -> None:
        if peak_bytes > self.memory_limit:
            shapes = ", ".join(f"{a}={tuple(feeds[n].shape)}" for a, n in zip(self.input_names, self.program.inputs))
            raise InputShapeError(
                f"inputs {shapes} need about {_mib(peak_bytes)} MiB of tensors and working memory at once, "
                f"more than the engine's memory_limit of {_mib(self.memory_limit)} MiB"
            )

    @staticmethod
    def _cast(feeds: dict[str, Any], given: dict[str, TensorSpec]) -> dict[str, Any]:
        """The inputs in the dtypes the model takes, cast only now (a float64 view of no
        memory becomes a float32 copy; 1e300 becomes inf)."""
        with quiet_floats():
            return {n: v if v.dtype == given[n].dtype else v.astype(given[n].dtype) for n, v in feeds.items()}

    # -- a batch in parts (see graphexec.samples) ------------------------------------------
    def _part_count(self, alone: bool) -> int:
        """How many parts a batch may run in now: ``batch_parts``, else one per core where
        the engine chooses its threads on the CPU, the cores are free (``alone``: no other
        run was in flight as this one began) and the process has made one call at a time
        lately (see :mod:`graphexec.samples`)."""
        if self.device is not None:
            return 1
        if self.options.batch_parts is not None:
            return self.options.batch_parts
        cores = self.policy.cores
        if not self.options.chooses_threads or cores < 2:
            return 1
        machine = occupancy()
        return cores if machine.alone_for(ALONE_SECONDS) and machine.room_for(cores, cores, alone) else 1

    def _batch_rows(self, given: dict[str, TensorSpec], wanted: list[str],
                    alone: bool) -> list[tuple[int, int]] | None:
        """The rows of each part a call of inputs ``given`` runs in, or None: whole."""
        batch = batch_of(spec.shape for spec in given.values())
        count = self._part_count(alone) if batch is not None and batch >= 2 else 1
        if batch is None or count < 2:
            return None
        key = (*given.items(), tuple(wanted), count)
        with self._lock:
            if key in self._parted:
                return self._parted[key]
        bounds = row_bounds(batch, count)
        rows = bounds if self._runs_in_parts(given, wanted, batch, bounds) else None
        with self._lock:
            if len(self._parted) >= 64:
                self._parted.clear()
            self._parted[key] = rows
        logger.debug("a batch of {} runs {}", batch, f"in {len(rows)} parts" if rows else "whole")
        return rows

    def _runs_in_parts(self, given: dict[str, TensorSpec], wanted: list[str], batch: int,
                       rows: list[tuple[int, int]]) -> bool:
        """Whether the model computes each sample alone for ``given`` and each part's own
        plan gives outputs of its rows (see :mod:`graphexec.samples`)."""
        try:
            specs = self.planner.specs(given, given_by_user=True)
        except GraphexecError:
            return False  # the whole run says why
        if not batchwise(self.program, specs, batch, wanted):
            return False
        _, planner = self._one_thread()
        for start, stop in rows:
            try:
                plan = self._part_plan(planner, given, wanted, stop - start)
            except GraphexecError:
                return False
            if plan.rest is not None or not all(leads_with(plan.specs.get(n), stop - start)
                                                for n in (*self.program.outputs, *wanted)):
                return False
        return True

    def _part_plan(self, planner: Planner, given: dict[str, TensorSpec], wanted: list[str], rows: int) -> Plan:
        part = {name: TensorSpec((rows, *spec.shape[1:]), spec.dtype) for name, spec in given.items()}
        return self._keeping(wanted, planner.plan(part), lambda off: planner.plan(part, off=off))

    def _run_in_parts(self, rows: list[tuple[int, int]], feeds: dict[str, Any], given: dict[str, TensorSpec],
                      wanted: list[str], trace: Trace | None, timeout: float | None,
                      check_finite: bool) -> dict[str, Any]:
        """The batch as ``rows`` run side by side, each part on one thread as
        ``threads=1, intra_op_threads=1`` runs it; the outputs stacked."""
        policy, planner = self._one_thread()
        plans = [self._part_plan(planner, given, wanted, stop - start) for start, stop in rows]
        self._check_memory(sum(plan.peak_bytes for plan in plans), feeds)
        feeds = self._cast(feeds, given)
        options = self._inputs.run_options(timeout, check_finite, feeds, self.options.clock)
        traces: list[Trace | None] = [Trace() if trace is not None else None for _ in rows]

        def run(k: int) -> dict[str, Any]:
            start, stop = rows[k]
            part = {name: value[start:stop] for name, value in feeds.items()}
            return self._run_plan(policy, plans[k], part, wanted, traces[k], options)

        with blas_run(1, False, options.deadline):
            found = self.pools.run_parts(run, len(rows))
        if trace is not None:
            trace.join([part for part in traces if part is not None])
            trace.samples = rows
        return {name: np.concatenate([values[name] for values in found]) for name in found[0]}

    def _keeping(self, wanted: list[str], plan: Plan, replan: Callable[[frozenset[str]], Plan]) -> Plan:
        """``plan``, or where rewrites removed an operand the caller extracts, the plan
        ``replan(off)`` makes without those rewrites (a later pass may remove one again once an
        earlier one is off: each round turns one more off)."""
        off: frozenset[str] = frozenset()
        while plan.fused_away.intersection(wanted):
            off |= frozenset(name for name, gone in plan.removed.items() if gone.intersection(wanted))
            plan = replan(off)
        return plan

    def _continuation(self, planner: Planner, plan: Plan, values: dict[str, Any], wanted: list[str]) -> Plan:
        """The plan of what ``plan`` (made by ``planner``) left for the run, for the sizes of
        ``values`` (cached by them), refused when it needs more than ``memory_limit`` beside
        what the run holds for later."""
        after = self._keeping(wanted, planner.continuation(plan, values),
                              lambda off: planner.continuation(plan, values, off=off))
        reads = set(after.program.inputs)
        held = sum(nbytes(spec_of(values[n]))
                   for n in {*self.program.outputs, *wanted} - reads if n in values)
        if held + after.peak_bytes > self.memory_limit:
            sizes = ", ".join(f"{n}={after.specs[n]}" for n in plan.rest.dynamic)
            raise InputShapeError(
                f"with the sizes this run computed ({sizes}), the rest of the model needs about "
                f"{_mib(held + after.peak_bytes)} MiB of tensors and working memory at once, more than the "
                f"engine's memory_limit of {_mib(self.memory_limit)} MiB"
            )
        return after

    def _run_plan(self, policy: ThreadPolicy, plan: Plan, values: dict[str, Any], wanted: list[str],
                  trace: Trace | None, options: RunOptions) -> dict[str, Any]:
        """Run ``plan`` on the values it reads, with ``policy``'s threads: the host values of
        its outputs and of the operands among ``wanted`` it computes."""
        feeds = {name: values[name] for name in plan.program.inputs}
        keep = plan.placement.stored_names(
            dict.fromkeys([*plan.program.outputs, *(n for n in wanted if n in plan.specs)]))
        # extracted intermediates must outlive their arena regions: such a run allocates afresh
        pool = self._arenas(plan) if self.reuse_memory and not wanted else None
        arena = pool.lease() if pool is not None else nullcontext()
        with arena as lease:
            buffers = lease.views if lease is not None else None
            if policy.threads == 1 and self.options.executor is None and trace is None:
                shared = plan.regions.shared if plan.regions is not None else frozenset()
                spreader = self.pools.spreader(lease) if shared else None
                with self._helpers_apart(policy, bool(shared)):
                    found = run_sequential(plan, feeds, keep, options, buffers, shared, spreader,
                                           replay=pool.replay if pool is not None else None)
            else:
                found = self._run_concurrent(policy, plan, feeds, keep, trace, options, lease)
        if plan.placement.resident:  # values left on the device: downloaded, under their own names
            found = plan.placement.to_host(found)
        return found

    __call__ = forward

    def _helpers_apart(self, policy: ThreadPolicy, shared: bool) -> Any:
        """A one-worker run's threads placed (see :meth:`Pools.helpers_apart`): where BLAS may
        use several threads, or nodes are shared out."""
        if self.device is not None:  # a device's runtime may start threads of its own
            return nullcontext()
        blas = policy.intra_op_threads > 1 or policy.boost is not None
        return self.pools.helpers_apart(blas or shared, blas=blas)

    def _one_thread(self) -> tuple[ThreadPolicy, Planner]:
        """The policy and planner of this engine as ``threads=1, intra_op_threads=1``: what
        a run of an engine that adapts its threads uses when the cores are not free (see
        :mod:`graphexec.occupancy`); made on first use."""
        with self._lock:
            if self._alone is None:
                one = dataclasses.replace(self.options, threads=1, intra_op_threads=1, share_nodes=False)
                policy = ThreadPolicy.decide(one, None, on_device=self.device is not None)
                self._alone = (policy, self.planner.with_policy(policy))
                logger.debug("the cores are busy: runs go on one thread while they are")
            return self._alone

    def _run_concurrent(self, policy: ThreadPolicy, plan: Plan, feeds: dict[str, np.ndarray], keep: list[str],
                        trace: Trace | None, options: RunOptions, lease: Lease | None) -> dict[str, Any]:
        executor = self.options.executor
        buffers = lease.views if lease is not None else None
        if executor is not None:  # an injected executor: it does all the work
            return run_concurrent(plan, feeds, keep, executor, policy.threads, trace, options, buffers=buffers,
                                  lease=lease)
        choice = plan.regions
        if policy.threads == 1:  # sequential, through the scheduler only to record a trace
            spreader = self.pools.spreader(lease) if choice and choice.shared else None
            with self._helpers_apart(policy, spreader is not None):
                return run_concurrent(plan, feeds, keep, SynchronousExecutor(), 1, trace, options, buffers=buffers,
                                      regions=choice, spreader=spreader, lease=lease)
        spreader = self.pools.worker_spreader(lease) if choice is not None and choice.shared else None
        return run_concurrent(plan, feeds, keep, self.pools.workers(), policy.threads, trace, options,
                              buffers=buffers, boost=policy.boost, regions=choice, spreader=spreader,
                              cores=self.pools.worker_cores or (), lease=lease)


def _reload(param_path: str, bin_path: str | None, options: dict[str, Any]) -> Engine:
    return Engine.load(param_path, bin_path, **options)


def _leaves(value: Any) -> list[Any]:
    """A value's tensors in order: itself, or the flattened items of a sequence (or spec of
    one), however deep (no recursion)."""
    leaves, stack = [], [value]
    while stack:
        item = stack.pop()
        if isinstance(item, (list, tuple)):
            stack.extend(reversed(item))
        elif isinstance(item, SequenceSpec):
            stack.extend(reversed(item.items))
        else:
            leaves.append(item)
    return leaves


