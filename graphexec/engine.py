"""The user's face of graphexec: load a pnnx model, run it, get its outputs.

::

    engine = Engine.load("m.pnnx.param")          # the bin defaults to m.pnnx.bin
    y = engine.forward(x)                          # one input: array in, array out
    y1, y2 = engine.forward(x1, x2)                # positional: a tuple when several outputs
    outs = engine.forward({"in0": x})              # by name: dict in, dict out
    y, inner = engine.forward(x, extract=["7"])    # intermediates by operand name

Threads: ``Engine.load(..., threads=N, intra_op_threads=M)`` runs up to N independent nodes
at once (N=1 is the sequential reference executor) with numpy's BLAS limited to M threads
during a run. Given N (or an executor) and no M, M is 1 and nothing is shared out: every
such engine gives the sequential one's very bits, whatever N (``share_nodes=True`` lets
idle cores work inside nodes all the same). Given neither, the engine chooses both from
the plan's regions (:mod:`graphexec.regions`): N is the cores when some stretch of the
plan is estimated faster with its branches side by side than one node at a time with
every core for BLAS, else 1; M = cores // N, so N x M never exceeds the cores (but
M = 1 for one worker where BLAS threads are estimated to save less than
:data:`graphexec.regions.MIN_BLAS_GAIN` of a run). It chooses from the plan with sibling
convolutions apart, and merges them (:mod:`graphexec.siblings`) only where they run alone.
With several workers, the other stretches run one node at a time and their large products
get every core for BLAS; traces record it. Either way, a node that runs alone and that its
layer can cut into pieces (a convolution on a large image: bands of output rows; a large
depthwise convolution or transcendental activation: bands of channels or elements) is
shared out among threads, one BLAS thread each (``share_nodes``). BLAS threads and
convolution bands round differently from one thread (OpenBLAS's own results change with
its thread count and a product's shape), so this chosen engine agrees with the sequential
one to rounding (~1e-6 relative), not bit for bit.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from typing import Any

import numpy as np
from loguru import logger

from graphexec.devices import resolve as resolve_device
from graphexec import dtypes, footprint, pnnx
from graphexec.affinity import CorePool, Pinner, cores_for, held_on_its_core
from graphexec.blas import blas_run, blas_workers_off, idle_threads_sleep
from graphexec.errors import InputError, InputShapeError, LayerConfigError
from graphexec.excitation import fuse_excitations
from graphexec.executor import RunOptions, run_sequential
from graphexec.floats import quiet_floats
from graphexec.fusion import fuse_activations, head_and_tail
from graphexec.ir import Dim, Graph
from graphexec.memory import ArenaPool, Lease, MemoryPlan
from graphexec.placement import Placement, cpu_placement, fuses_on, placed_plan
from graphexec.plan import Plan
from graphexec.preactivation import fold_preactivations
from graphexec.program import Program, Step
from graphexec.regions import (
    MIN_BLAS_GAIN,
    RegionChoice,
    blas_threads_gain,
    choose,
    shared_nodes,
    worth_workers,
)
from graphexec.scheduler import SynchronousExecutor, run_concurrent
from graphexec.shapes import InferenceFailure, infer_specs
from graphexec.siblings import merge_sibling_convs
from graphexec.spread import Spreader
from graphexec.trace import Trace
from graphexec.layers.registry import lookup
from graphexec.layers.specs import SequenceSpec, Spec, TensorSpec

#: How many distinct input-shape sets keep their plans.
PLAN_CACHE_SIZE = 16


def cpu_count() -> int:
    """Cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def physical_memory() -> int:
    """Bytes of RAM in this machine (a large fallback where the OS will not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return 1 << 40


def default_threads(plan: Plan, cores: int, mixing: bool | None = None,
                    shared: frozenset[int] = frozenset()) -> int:
    """Inter-op workers by default: every core when some region of the plan runs faster
    with its branches side by side than one unit at a time with every core for BLAS and
    the ``shared`` nodes shared out (see :mod:`graphexec.regions`), else one. ``mixing``:
    whether a run may switch between the two (default:
    :func:`graphexec.blas.idle_threads_sleep`).

    One worker when nodes run on a device: there a node's host work is an enqueue (tens of
    microseconds of Python, under the GIL) and the device's command queues already run
    branches side by side; more workers only contend for the GIL (GoogLeNet on an H100
    through OpenCL: 12 ms a run on one worker, 20 ms on two)."""
    if cores < 2 or any(node.device != "cpu" for node in plan.nodes):
        return 1
    if mixing is None:
        mixing = idle_threads_sleep()
    return cores if worth_workers(plan, cores, mixing, shared) else 1


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
    """A loaded model. Immutable after load, so many threads may call ``forward`` at once."""

    def __init__(
        self,
        graph: Graph,
        *,
        threads: int | None = None,
        intra_op_threads: int | None = None,
        executor: Executor | None = None,
        memory_limit: int | None = None,
        reuse_memory: bool = True,
        device: Any = "cpu",
        cpu_types: Collection[str] = (),
        fallback: bool = False,
        pin_workers: bool = True,
        share_nodes: bool | None = None,
        merge_convs: bool = True,
        fold_preactivations: bool = True,
        fuse_excitations: bool = True,
    ):
        for label, value in (("threads", threads), ("intra_op_threads", intra_op_threads),
                             ("memory_limit", memory_limit)):
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{label} must be a positive integer, got {value!r}")
        self.graph = graph
        #: Refuse to run input shapes whose tensors (and the working memory of the layer running
        #: then) would need more bytes than this at once, and models that would take more to load.
        self.memory_limit = memory_limit if memory_limit is not None else physical_memory()
        footprint.check_load(len(graph.operators), 0, self.memory_limit)
        self.program = Program.from_graph(graph)
        #: Plans kept, one per input shape (fewer for a model whose plans are large).
        self._plans_kept = footprint.plans_kept(len(self.program.steps), self.memory_limit, PLAN_CACHE_SIZE)
        operands = graph.operands
        self._input_operands = [operands[n] for n in self.program.inputs]
        self._output_operands = [operands[n] for n in self.program.outputs]
        #: Public names: ``in0, in1, ...`` and ``out0, out1, ...`` (the operand names work too).
        self.input_names = [f"in{i}" for i in range(len(self.program.inputs))]
        self._input_alias = {**dict(zip(self.input_names, self.program.inputs)),
                             **{n: n for n in self.program.inputs}}
        self._plans: OrderedDict[tuple, Plan] = OrderedDict()
        self._cache_lock = threading.Lock()
        #: Whether plans give the nodes that run whole on several BLAS threads their layers'
        #: variants for that (see :meth:`_with_blas_variants`); decided below, with the threads.
        self._tune = False
        #: Reuse intermediate tensors' memory between and within runs (see graphexec.memory).
        self.reuse_memory = reuse_memory
        #: Run convolutions of the same input as one (see graphexec.siblings; CPU only).
        self.merge_convs = merge_convs
        #: The merged convolutions, by their siblings' names: every plan shares them.
        self._merged_convs: dict[tuple[str, ...], Any] = {}
        #: Whether siblings merge only where they run alone (see :meth:`_mergeable`): where the
        #: engine chooses its threads, given none of threads, intra_op_threads and executor.
        #: Plans made before the threads are chosen merge none.
        self._merge_where_alone = threads is None and intra_op_threads is None and executor is None
        self.threads: int | None = None
        #: Run batch norm + ReLU before a 1x1 convolution as one floor (see
        #: graphexec.preactivation; CPU only), and the rewritten pairs, by the norm's name.
        self.fold_preactivations = fold_preactivations
        self.fuse_excitations = fuse_excitations
        self._folded: dict[str, Any] = {}
        self._use_device(device, cpu_types, fallback)
        #: Arenas per cached plan; they go when the plan leaves the cache.
        self._arena_pools: weakref.WeakKeyDictionary[Plan, ArenaPool] = weakref.WeakKeyDictionary()
        exported = self._exported_input_specs()
        first_plan = self._plan_for(exported, given_by_user=False) if exported is not None else None
        # An output that is a sequence (a model returning a list) is flattened into its
        # tensors, in order; how many there are is known from the exported shapes.
        self._output_specs: list[Spec] | None = None
        if first_plan is not None:
            self._output_specs = [leaf for n in self.program.outputs for leaf in _leaves(first_plan.specs[n])]
        count = len(self._output_specs) if self._output_specs is not None else len(self.program.outputs)
        self.output_names = [f"out{i}" for i in range(count)]
        cores = cpu_count()
        mixing = idle_threads_sleep()
        #: Whether idle cores may work inside a node (``share_nodes``): a large node that runs
        #: alone is shared out among threads or gets every core for BLAS, and without an
        #: explicit ``intra_op_threads`` each worker gets cores // threads BLAS threads. All of
        #: it rounds differently from one thread (OpenBLAS's results change with its thread
        #: count and a product's shape), so by default it is on only where the engine
        #: chooses its threads: given threads, every engine gives the sequential one's bits.
        asked_to_share = bool(share_nodes)
        if share_nodes is None:
            share_nodes = threads is None and intra_op_threads is None and executor is None
        # A node's pieces run on single-threaded BLAS beside BLAS threads that may still spin
        # on the other cores: unless asked, only where those sleep soon (numpy loaded first,
        # ResNet-50, GoogLeNet and Inception v3 ran 1.13-1.26x slower with nodes shared out).
        self._share = share_nodes and executor is None and cores > 1 and (mixing or asked_to_share)
        chosen = threads is None
        if chosen:
            shared = self.shared_nodes(first_plan) if first_plan is not None else frozenset()
            threads = default_threads(first_plan, cores, mixing, shared) if first_plan is not None else min(2, cores)
        #: Inter-op workers: how many independent nodes may run at once (1: sequential).
        self.threads = threads
        intra = intra_op_threads or (max(1, cores // threads) if share_nodes else 1)
        if (intra_op_threads is None and share_nodes and chosen and threads == 1 and first_plan is not None
                and blas_threads_gain(first_plan, cores) < MIN_BLAS_GAIN):
            intra = 1  # small products only: waking BLAS threads costs what they save
        #: BLAS threads inside one node during a run.
        self.intra_op_threads = intra
        #: BLAS threads for a large node that runs alone in a concurrent run (None: never
        #: raised). Not with an explicit ``intra_op_threads``, which holds for every node; and
        #: only where BLAS threads sleep soon after a call, else they would spin on the cores
        #: the branches after the node need (see graphexec.blas.idle_threads_sleep).
        self._boost = (cores if share_nodes and intra_op_threads is None and threads > 1
                       and cores > self.intra_op_threads and mixing else None)
        #: Serial and boosted units per cached plan (see :mod:`graphexec.regions`).
        self._choices: weakref.WeakKeyDictionary[Plan, RegionChoice] = weakref.WeakKeyDictionary()
        self._executor = executor
        self._tune = self.device is None and (self.intra_op_threads > 1 or self._boost is not None)
        if self._merge_where_alone and self.merge_convs and self.device is None and first_plan is not None:
            self._plans.clear()  # the plan made to choose the threads merged no siblings
            first_plan = self._plan_for(exported, given_by_user=False)
        elif self._tune:  # the plan made to choose the threads gets its variants now
            for key, plan in list(self._plans.items()):
                self._plans[key] = self._with_blas_variants(plan)
        if first_plan is not None and self.device is None:  # the load's plan, as tuned above
            self._forget_unused(next(iter(self._plans.values())))
        graph.drop_weight_pages()  # the layers have made their own copies of what they use
        #: The cores the engine's own workers are pinned to, one each (None: not pinned; see
        #: :mod:`graphexec.affinity`).
        self.worker_cores = cores_for(threads) if pin_workers and executor is None else None
        #: Whether the engine places its threads on cores (``pin_workers``), its own pools.
        self._pins = pin_workers and executor is None
        self._owned_executor: ThreadPoolExecutor | None = None
        #: Threads that run pieces of a shared node beside a one-worker run's thread.
        self._piece_pool: ThreadPoolExecutor | CorePool | None = None
        self._executor_lock = threading.Lock()

    @classmethod
    def load(
        cls,
        param_path: str | os.PathLike[str],
        bin_path: str | os.PathLike[str] | None = None,
        *,
        threads: int | None = None,
        intra_op_threads: int | None = None,
        executor: Executor | None = None,
        memory_limit: int | None = None,
        reuse_memory: bool = True,
        device: Any = "cpu",
        cpu_types: Collection[str] = (),
        fallback: bool = False,
        pin_workers: bool = True,
        share_nodes: bool | None = None,
        merge_convs: bool = True,
        fold_preactivations: bool = True,
        fuse_excitations: bool = True,
    ) -> Engine:
        """Load ``param_path`` (and its weights, by default the sibling ``.bin``).

        ``threads``: inter-op workers (1 = sequential); ``intra_op_threads``: BLAS threads
        per node (by default 1 when ``threads`` or ``executor`` is given; with neither, the
        engine chooses both, see the module docstring); ``executor``: run nodes on this
        ``concurrent.futures.Executor`` instead of the engine's own thread pool;
        ``memory_limit``: bytes of tensors and layers' working memory a run may need at once
        (default: the machine's RAM), so a hostile shape fails before allocating; a model
        whose own structures would take more to load is refused too (see :mod:`graphexec.footprint`);
        ``reuse_memory``: give intermediate tensors regions of a preallocated arena, shared
        between tensors whose lives never overlap (see :mod:`graphexec.memory`);
        ``pin_workers``: pin the engine's own worker threads to a core each when there is one
        for every usable core, on Linux (see :mod:`graphexec.affinity`, ``engine.worker_cores``),
        and in a one-worker run on several cores keep the calling thread on its core and
        OpenBLAS's threads and the shared nodes' pieces on the others;
        ``share_nodes``: idle cores work inside nodes: a large node that runs alone (a
        convolution on a large image, a large depthwise convolution or SiLU) is cut into
        pieces that run on every core at once, each on one BLAS thread (see
        :mod:`graphexec.regions`), or gets every core for BLAS; without ``intra_op_threads``
        each worker gets cores // threads BLAS threads. It rounds differently from one
        thread, so by default it is on only where the engine chooses its threads (none of
        ``threads``, ``intra_op_threads`` and ``executor`` given), and nodes are shared out
        by default only where BLAS threads sleep soon after a call (graphexec imported
        before numpy, see :mod:`graphexec.blas`).
        ``merge_convs``: convolutions of the same input with the same geometry run as one
        matrix product, each reading its channels of the result (see
        :mod:`graphexec.siblings`); on the CPU only.
        ``fold_preactivations``: a batch norm and ReLU read only by a 1x1 convolution
        (DenseNet's) run as one per-channel floor, the norm folded into the convolution's
        weights (see :mod:`graphexec.preactivation`); on the CPU only.
        ``fuse_excitations``: squeeze-and-excitation blocks (MobileNet v3's, EfficientNet's:
        average pool, two 1x1 convolutions, a product) run as one node (see
        :mod:`graphexec.excitation`); on the CPU only.

        ``device``: ``"cpu"`` (default), ``"opencl"``, ``"opencl:1"``, ``"opencl:gpu"``,
        ``"opencl:<name filter>"`` or an opened ``OpenCLDevice``: nodes the device runs go
        there, the others stay on the CPU (see :mod:`graphexec.placement` and
        ``engine.placement``); ``cpu_types``: operator types kept on the CPU regardless;
        ``fallback``: move a node whose device warm-up fails to the CPU with a warning.
        It is off by default, so that a device that cannot run what it claims to is
        reported (a DeviceError naming the node) rather than silently made slower.
        """
        limit = memory_limit if isinstance(memory_limit, int) and memory_limit > 0 else physical_memory()
        graph = pnnx.load(param_path, bin_path, memory_limit=limit)  # a bad limit: the engine says so
        engine = cls(graph, threads=threads, intra_op_threads=intra_op_threads, executor=executor,
                     memory_limit=memory_limit, reuse_memory=reuse_memory, device=device, cpu_types=cpu_types,
                     fallback=fallback, pin_workers=pin_workers, share_nodes=share_nodes,
                     merge_convs=merge_convs, fold_preactivations=fold_preactivations,
                     fuse_excitations=fuse_excitations)
        logger.debug(
            "loaded {}: {} operators, inputs {}, outputs {}, {} workers x {} BLAS threads",
            param_path, len(graph.operators), engine.input_shapes, engine.output_shapes,
            engine.threads, engine.intra_op_threads,
        )
        return engine

    def close(self) -> None:
        """Stop the engine's own worker threads (a later forward starts them again)."""
        with self._executor_lock:
            pools = [self._owned_executor, self._piece_pool]
            self._owned_executor = self._piece_pool = None
        for pool in pools:
            if pool is not None:
                pool.shutdown(wait=True)
        if self.device is not None and self._owns_device:
            self.device.release()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _pool(self) -> Executor:
        if self._executor is not None:
            return self._executor
        with self._executor_lock:
            if self._owned_executor is None:
                pinner = Pinner(self.worker_cores) if self.worker_cores is not None else None
                pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="graphexec",
                                          initializer=pinner)
                self._owned_executor = pool
                weakref.finalize(self, pool.shutdown, wait=False)
            return self._owned_executor

    def _spreader(self, lease: Lease | None = None) -> Spreader:
        """Runs a shared node's pieces in a one-worker run: the run's thread takes one, and
        a thread of a small pool of the engine's own each other: one thread per core, pinned
        to it, a piece going to a core the run's thread is not on (see
        :mod:`graphexec.affinity`); unpinned where the engine does not pin its threads."""
        with self._executor_lock:
            if self._piece_pool is None:
                cores = cores_for(cpu_count()) if self._pins else None
                pool: ThreadPoolExecutor | CorePool = (
                    CorePool(cores) if cores is not None
                    else ThreadPoolExecutor(max_workers=cpu_count() - 1, thread_name_prefix="graphexec-piece"))
                self._piece_pool = pool
                weakref.finalize(self, pool.shutdown, wait=False)
            return Spreader(self._piece_pool, cpu_count(), lease=lease)

    @contextmanager
    def _helpers_apart(self, wanted: bool) -> Iterator[None]:
        """For a one-worker run that uses several cores (BLAS threads, shared nodes): the
        run's thread held on its core and OpenBLAS's workers on the others, for the run
        (see :mod:`graphexec.affinity`); nothing where the engine does not pin threads."""
        if not (wanted and self._pins) or self.device is not None:  # a device's runtime may start threads
            yield
            return
        with held_on_its_core() as others, blas_workers_off(others):
            yield

    # -- what the model looks like -------------------------------------------------------
    @property
    def input_shapes(self) -> dict[str, tuple[Dim, ...] | None]:
        """Input shapes as exported (``None`` marks an unknown size, a string a symbol)."""
        return {n: o.shape for n, o in zip(self.input_names, self._input_operands)}

    @property
    def output_shapes(self) -> dict[str, tuple[Dim, ...] | None]:
        """Output shapes as exported."""
        if self._output_specs is not None:
            return {n: spec.shape for n, spec in zip(self.output_names, self._output_specs)}  # type: ignore[union-attr]
        return {n: o.shape for n, o in zip(self.output_names, self._output_operands)}

    @property
    def input_dtypes(self) -> dict[str, np.dtype]:
        """The dtype each input must have (float32 unless the model says otherwise)."""
        return {n: _dtype_of(o.dtype) for n, o in zip(self.input_names, self._input_operands)}

    def plan(self, *shapes: Sequence[int]) -> Plan:
        """The execution plan for the given input shapes (default: the exported ones)."""
        if not shapes:
            exported = self._exported_input_specs()
            if exported is None:
                raise InputError("the model's input shapes are not fixed; pass the shapes to plan for")
            return self._plan_for(exported, given_by_user=False)
        if len(shapes) != len(self.program.inputs):
            raise InputError(f"the model takes {len(self.program.inputs)} inputs, got {len(shapes)} shapes")
        given = {name: TensorSpec(tuple(shape), dtype) for name, shape, dtype in
                 zip(self.program.inputs, shapes, self.input_dtypes.values())}
        return self._plan_for(given, given_by_user=True)

    @property
    def placement(self) -> Placement:
        """Where each node of the exported shapes' plan runs, and why (print it for a table)."""
        placement = self.plan().placement
        return placement if placement is not None else cpu_placement(self.program)

    def _use_device(self, device: Any, cpu_types: Collection[str], fallback: bool) -> None:
        if isinstance(cpu_types, str) or not all(isinstance(t, str) for t in cpu_types):
            raise ValueError(f"cpu_types takes a collection of operator type names, got {cpu_types!r}")
        #: Operator types kept on the CPU whatever the device.
        self.cpu_types = frozenset(cpu_types)
        #: Whether a node whose device warm-up fails moves to the CPU instead of failing.
        self.fallback = bool(fallback)
        self._device_failures: dict[str, str] = {}
        #: The device nodes are placed on (None: the CPU only; pyopencl is never imported then).
        self.device = resolve_device(device)
        self._owns_device = isinstance(device, str) and self.device is not None
        unknown = self.cpu_types - {step.layer.type for step in self.program.steps}
        misspelt = sorted(t for t in unknown if not _known_type(t))
        if misspelt:  # a type no layer has: a typo would otherwise keep nothing on the CPU, silently
            raise ValueError(f"cpu_types {misspelt} name no operator type graphexec knows (this model has "
                             f"{', '.join(sorted({step.layer.type for step in self.program.steps}))})")
        if unknown:
            logger.warning("cpu_types {} name no operator of this model", sorted(unknown))

    def specs(self, *shapes: Sequence[int]) -> dict[str, Spec]:
        """Shape and dtype of every operand for the given input shapes (inferred, cached)."""
        return dict(self.plan(*shapes).specs)

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
        ``extract=[operand names]`` the result is ``(outputs, {name: array})``. A
        :class:`~graphexec.trace.Trace` passed as ``trace`` records when each node ran.
        ``timeout`` (seconds): no node starts after it and RunTimeoutError is raised;
        ``check_finite``: raise NonFiniteError at the first operator whose output holds
        NaN or Inf.
        """
        by_name = len(args) == 1 and isinstance(args[0], Mapping)
        feeds = self._feeds(args[0] if by_name else None, None if by_name else args)
        wanted = self._extractable(extract)
        given = {name: TensorSpec(v.shape, _dtype_of(self.graph.operands[name].dtype)) for name, v in feeds.items()}
        plan = self._plan_for(given, given_by_user=True)
        if plan.fused_away.intersection(wanted):  # an operand fusion removed: run unfused
            plan = self._plan_for(given, given_by_user=True, fuse=False)
        if plan.peak_bytes > self.memory_limit:
            shapes = ", ".join(f"{a}={tuple(feeds[n].shape)}" for a, n in zip(self.input_names, self.program.inputs))
            raise InputShapeError(
                f"inputs {shapes} need about {_mib(plan.peak_bytes)} MiB of tensors and working memory at once, "
                f"more than the engine's memory_limit of {_mib(self.memory_limit)} MiB"
            )
        with quiet_floats():  # cast only now (a float64 view of no memory becomes a float32 copy); 1e300 is inf
            feeds = {n: v if v.dtype == given[n].dtype else v.astype(given[n].dtype) for n, v in feeds.items()}
        keep = list(dict.fromkeys(list(self.program.outputs) + wanted))
        if plan.placement is not None:  # values left on the device are kept under their device name
            keep = plan.placement.stored_names(keep)
        options = self._options(timeout, check_finite, feeds)
        # extracted intermediates must outlive their arena regions: such a run allocates afresh
        arena = self._arenas(plan).lease() if self.reuse_memory and not wanted else nullcontext()
        with blas_run(self.intra_op_threads, self._boost is not None, options.deadline), arena as lease:
            buffers = lease.views if lease is not None else None
            if self.threads == 1 and self._executor is None and trace is None:
                choice = self._run_choice(plan)
                shared = choice.shared if choice is not None else frozenset()
                spreader = self._spreader(lease) if shared else None
                with self._helpers_apart(self.intra_op_threads > 1 or bool(shared)):
                    values = run_sequential(plan.program, feeds, keep, options, buffers, shared, spreader)
            else:
                values = self._run_concurrent(plan, feeds, keep, trace, options, lease)
        if plan.placement is not None:
            values = plan.placement.to_host(values)
        outputs = [leaf for n in self.program.outputs for leaf in _leaves(values[n])]
        if by_name:
            result: Any = dict(zip(self.output_names, outputs))
        else:
            result = outputs[0] if len(outputs) == 1 else tuple(outputs)
        if extract is not None:
            return result, {n: values[n] for n in wanted}
        return result

    __call__ = forward

    def _run_concurrent(self, plan: Plan, feeds: dict[str, np.ndarray], keep: list[str],
                        trace: Trace | None, options: RunOptions, lease: Lease | None) -> dict[str, Any]:
        buffers = lease.views if lease is not None else None
        if self._executor is not None:  # an injected executor: it does all the work
            return run_concurrent(plan, feeds, keep, self._executor, self.threads, trace, options, buffers=buffers,
                                  lease=lease)
        choice = self._run_choice(plan)
        if self.threads == 1:  # sequential, through the scheduler only to record a trace
            spreader = self._spreader(lease) if choice and choice.shared else None
            with self._helpers_apart(self.intra_op_threads > 1 or spreader is not None):
                return run_concurrent(plan, feeds, keep, SynchronousExecutor(), 1, trace, options, buffers=buffers,
                                      regions=choice, spreader=spreader, lease=lease)
        spreader = (Spreader(self._pool(), self.threads, pinned=self.worker_cores is not None, lease=lease)
                    if choice is not None and choice.shared else None)
        return run_concurrent(plan, feeds, keep, self._pool(), self.threads, trace, options, buffers=buffers,
                              boost=self._boost, regions=choice, spreader=spreader, cores=self.worker_cores or (),
                              lease=lease)

    def _run_choice(self, plan: Plan) -> RegionChoice | None:
        """The regions a run of ``plan`` follows; None: every node runs alike. With one
        worker, where nodes may be shared out; with several, only where BLAS threads may be
        raised (otherwise every unit goes to the workers); never with an injected executor."""
        if self._executor is not None:
            return None
        if self.threads == 1:
            return self._choice(plan) if self._share else None
        return self._choice(plan) if self._boost else None

    def _choice(self, plan: Plan) -> RegionChoice:
        return self._per_plan(self._choices, plan, self._new_choice)

    def _new_choice(self, plan: Plan) -> RegionChoice:
        choice = choose(plan, self.threads, cpu_count(), self.shared_nodes(plan))
        logger.debug("regions: {} of {} units run alone, {} nodes may get every core for BLAS, {} are shared out",
                     len(choice.serial), len(plan.units), len(choice.boosted), len(choice.shared))
        return choice

    def _with_blas_variants(self, plan: Plan) -> Plan:
        """``plan`` with each node that always runs whole on several BLAS threads given its
        layer's variant for them (:meth:`graphexec.layers.base.Layer.for_blas_threads`: a convolution
        takes im2col instead of Winograd). Costs do not depend on the variant, so the
        regions and shared nodes stay those of ``plan``."""
        steps = list(plan.program.steps)
        for index, count in self._blas_threads_per_node(plan).items():
            step = steps[index]
            variant = step.layer.for_blas_threads(count, [plan.specs[n] for n in step.inputs])
            if variant is not None:
                steps[index] = Step(variant, step.inputs, step.outputs)
        if all(a is b for a, b in zip(steps, plan.program.steps)):
            return plan
        tuned = Plan(dataclasses.replace(plan.program, steps=tuple(steps)), plan.specs)
        tuned.fused_away = plan.fused_away
        return tuned

    def _forget_unused(self, plan: Plan) -> None:
        """Free what layers prepared at load for a way of running that ``plan``, the load's
        own, does not take: the Winograd weights of convolutions that run as im2col
        variants or merged with their siblings (45 MiB of ResNet-50's, 24 of GoogLeNet's).
        A later plan that needs them makes them again, once."""
        running = set()
        for node in plan.nodes:
            head, tail = head_and_tail(node.step.layer)
            running.update(map(id, (node.step.layer, head, *tail)))
        folded = [layer for pair in self._folded.values() for layer in pair]
        for layer in [step.layer for step in self.program.steps] + list(self._merged_convs.values()) + folded:
            if id(layer) not in running:
                layer.forget_prepared()

    def _mergeable(self, program: Program, specs: dict[str, Spec]) -> Callable[[Step], bool] | None:
        """The steps whose siblings may merge (None: every one). A merged product gains where
        it runs alone with every core for BLAS; siblings that run side by side on the workers
        are faster apart (the wide net, 8 branches: 0.87-0.94x the time apart on two workers,
        against merged on one worker with two BLAS threads). So where the engine chooses its
        threads, siblings merge only in the units it runs one at a time (with one worker,
        all); given threads, BLAS threads or an executor, all merge, so that every such
        engine runs the sequential one's plan and gives its bits."""
        if not self._merge_where_alone or self.threads == 1:
            return None
        if self.threads is None:  # the threads are being chosen, from the plain plan
            return lambda step: False
        plan = Plan(program, specs)
        choice = self._run_choice(plan)
        alone = set() if choice is None else {id(plan.nodes[i].step) for u in choice.serial for i in plan.units[u].nodes}
        return lambda step: id(step) in alone

    def _blas_threads_per_node(self, plan: Plan) -> dict[int, int]:
        """The BLAS threads of each node that runs whole on more than one in every run of
        ``plan`` (as :meth:`forward` runs it): every node but the shared ones gets
        ``intra_op_threads``; in a run with several workers, the boosted nodes of units that
        run alone get the boost. Nodes of other units get it only when nothing runs beside
        them, which changes from run to run, so they are left out."""
        choice = self._run_choice(plan)
        found = {}
        for node in plan.nodes:
            if choice is not None and node.index in choice.shared:
                continue
            count = self.intra_op_threads
            if (self.threads > 1 and choice is not None and node.index in choice.boosted
                    and plan.unit_of[node.index] in choice.serial):
                count = self._boost or count
            if count > 1:
                found[node.index] = count
        return found

    def shared_nodes(self, plan: Plan) -> frozenset[int]:
        """The nodes of ``plan`` that are shared out among threads when they run alone
        (empty without ``share_nodes``; see :mod:`graphexec.regions`)."""
        return shared_nodes(plan, cpu_count()) if self._share else frozenset()

    def memory_plan(self, *shapes: Sequence[int]) -> MemoryPlan:
        """The arena layout for the given input shapes (default: the exported ones)."""
        return self._arenas(self.plan(*shapes)).memory

    def _arenas(self, plan: Plan) -> ArenaPool:
        return self._per_plan(self._arena_pools, plan, self._new_arenas)

    @staticmethod
    def _new_arenas(plan: Plan) -> ArenaPool:
        memory = MemoryPlan(plan)
        logger.debug(
            "memory plan: {} tensors in a {} MiB arena ({} MiB without reuse)",
            len(memory.regions), _mib(memory.arena_bytes, 2), _mib(memory.unshared_bytes, 2),
        )
        return ArenaPool(memory)

    def _per_plan(self, cache: weakref.WeakKeyDictionary, plan: Plan, make: Any) -> Any:
        """What ``make(plan)`` gives, made once per cached plan (it goes with the plan)."""
        with self._cache_lock:
            value = cache.get(plan)
        if value is None:
            value = make(plan)  # outside the lock: concurrent callers may both make it, one wins
            with self._cache_lock:
                value = cache.setdefault(plan, value)
        return value

    def _options(self, timeout: float | None, check_finite: bool, feeds: dict[str, np.ndarray]) -> RunOptions:
        if timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0):
            raise InputError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if check_finite:
            for alias, name in zip(self.input_names, self.program.inputs):
                if not _all_finite(feeds[name]):
                    raise InputError(f"input {alias} already holds NaN or Inf")
        deadline = None if timeout is None else time.monotonic() + timeout
        return RunOptions(deadline=deadline, timeout=timeout, check_finite=check_finite)

    # -- inputs ------------------------------------------------------------------------------
    def _extractable(self, extract: Sequence[str] | None) -> list[str]:
        if extract is None:
            return []
        if isinstance(extract, str):
            raise InputError(f"extract takes a list of operand names, got the string {extract!r}")
        wanted = list(extract)
        computed = set(self.program.inputs) | {o for step in self.program.steps for o in step.outputs}
        unknown = [n for n in wanted if n not in self.graph.operands]
        if unknown:
            raise InputError(f"cannot extract unknown operand(s) {unknown}; operands are named as in the param file")
        packed = [n for n in wanted if n not in computed]
        if packed:
            raise InputError(
                f"cannot extract {packed}: they only bundle the model's outputs into a tuple; "
                f"the outputs themselves are {list(self.program.outputs)}"
            )
        return wanted

    def _feeds(self, named: Mapping[str, Any] | None, positional: Sequence[Any] | None) -> dict[str, np.ndarray]:
        expected = len(self.program.inputs)
        if named is not None:
            unknown = [k for k in named if k not in self._input_alias]
            if unknown:
                raise InputError(f"unknown input name(s) {unknown}; the model's inputs are {self.input_names}")
            feeds: dict[str, Any] = {}
            given_as: dict[str, str] = {}
            for key, value in named.items():
                operand = self._input_alias[key]
                if operand in feeds:
                    raise InputError(f"input {operand!r} is given twice, as {given_as[operand]!r} and as {key!r}")
                feeds[operand], given_as[operand] = value, key
            missing = [a for a, n in zip(self.input_names, self.program.inputs) if n not in feeds]
            if missing:
                raise InputError(f"missing input(s) {missing}; the model's inputs are {self.input_names}")
        else:
            if len(positional) != expected:
                raise InputError(f"the model takes {expected} input(s) {self.input_names}, got {len(positional)}")
            feeds = dict(zip(self.program.inputs, positional))
        return {name: self._check_input(name, value) for name, value in feeds.items()}

    def _check_input(self, operand_name: str, value: Any) -> np.ndarray:
        """``value`` as an array of a dtype that casts to the input's without loss of kind
        (not cast yet: :meth:`forward` casts once the memory limit has been checked)."""
        alias = self.input_names[self.program.inputs.index(operand_name)]
        operand = self.graph.operands[operand_name]
        try:
            array = np.asarray(value)
        except Exception as exc:  # an object numpy cannot turn into an array
            raise InputError(f"input {alias}: cannot be read as an array ({exc})") from exc
        want = _dtype_of(operand.dtype)
        given = array.dtype
        if given != want and given.kind != want.kind and not (want.kind == "c" and given.kind == "f"):
            if want.kind == "f" and given.kind == "c":
                raise InputError(f"input {alias}: expected dtype {want}, given {given}: a real model would "
                                 f"drop the imaginary part (pass x.real if that is what you mean)")
            raise InputError(f"input {alias}: expected dtype {want}, given {given}")
        if want.kind in "iu" and given.kind == want.kind and given.itemsize > want.itemsize and array.size:
            low, high = array.min(), array.max()  # a narrower integer would wrap around silently
            if low < np.iinfo(want).min or high > np.iinfo(want).max:
                raise InputError(f"input {alias}: expected dtype {want}, given {given} holding {low}..{high}, "
                                 f"outside {want}'s range")
        if operand.shape is not None and array.ndim != len(operand.shape):
            raise InputShapeError(
                f"input {alias}: expected a tensor of rank {len(operand.shape)} "
                f"{_show_shape(operand.shape)}, given shape {tuple(array.shape)}"
            )
        return array

    def _exported_input_specs(self) -> dict[str, Spec] | None:
        specs: dict[str, Spec] = {}
        for operand in self._input_operands:
            if operand.shape is None or not all(isinstance(d, int) for d in operand.shape):
                return None
            specs[operand.name] = TensorSpec(operand.shape, _dtype_of(operand.dtype))  # type: ignore[arg-type]
        return specs

    def _first_divergence(self, known: dict[str, Spec]) -> str:
        """Where inference at the exported shapes first parts from a shape pnnx annotated, for
        a failure further on: pnnx may have written a wrong graph there (its own generated
        model_pnnx.py then fails too), or a layer computes the wrong shape."""
        for step in self.program.steps:
            for name in step.outputs:
                spec, operand = known.get(name), self.graph.operands.get(name)
                annotated = None if operand is None else operand.shape
                if not isinstance(spec, TensorSpec) or not annotated or not all(isinstance(d, int) for d in annotated):
                    continue
                if tuple(spec.shape) != tuple(annotated):
                    return (f" (the shapes first part from pnnx's annotations at operand {name}, output of "
                            f"{step.name} ({step.layer.type}): annotated {_show_shape(annotated)}, inferred "
                            f"{_show_shape(spec.shape)})")
        return ""

    def _plan_for(self, given: dict[str, Spec], *, given_by_user: bool, fuse: bool = True) -> Plan:
        key = (*given.items(), fuse)  # specs are frozen (hashable): no text built per call
        with self._cache_lock:
            cached = self._plans.get(key)
            if cached is not None:
                self._plans.move_to_end(key)
        if cached is not None:
            logger.opt(lazy=True).debug("reusing the plan for inputs {}", lambda: _shown(given))
            return cached
        try:
            specs = infer_specs(self.program, given)
        except InferenceFailure as exc:
            shown = ", ".join(str(s) for s in exc.inputs)
            if not given_by_user:
                raise LayerConfigError(exc.step_name, exc.step_type, f"cannot take its exported inputs [{shown}]: "
                                       f"{exc.reason}{self._first_divergence(exc.known)}") from exc
            exported = ", ".join(
                f"{a}={_show_shape(o.shape)}" for a, o in zip(self.input_names, self._input_operands)
            )
            given_text = ", ".join(
                f"{a}={given[n]}" for a, n in zip(self.input_names, self.program.inputs)
            )
            raise InputShapeError(
                f"the model cannot take inputs {given_text} (exported with {exported}): operator "
                f"{exc.step_name} ({exc.step_type}) refuses [{shown}]: {exc.reason}"
            ) from exc
        program, fused_away = self.program, frozenset[str]()
        if fuse:  # with a device, only what it runs as one node (nothing leaves the device)
            allow = None if self.device is None else fuses_on(self.device, self.cpu_types)
            program, fused_away = fuse_activations(self.program, specs, allow)
        if self.device is None:
            if fuse and self.fuse_excitations:
                program, blocks = fuse_excitations(program, specs)
                fused_away |= blocks
            if fuse and self.fold_preactivations:
                program, floors = fold_preactivations(program, specs, self._folded)
                fused_away |= floors
            if self.merge_convs:
                program, specs = merge_sibling_convs(program, specs, self._merged_convs,
                                                     self._mergeable(program, specs))
            plan = Plan(program, specs)
            if self._tune:
                plan = self._with_blas_variants(plan)
        else:
            plan = placed_plan(program, specs, self.device, cpu_types=self.cpu_types,
                               fallback=self.fallback, failed=self._device_failures)
        plan.fused_away = fused_away
        with self._cache_lock:
            self._plans[key] = plan
            while len(self._plans) > self._plans_kept:
                self._plans.popitem(last=False)
        logger.opt(lazy=True).debug("planned inputs {}: {} nodes in {} units, width {}", lambda: _shown(given),
                                    lambda: len(plan.nodes), lambda: len(plan.units), lambda: plan.width)
        return plan


def _shown(given: dict[str, Spec]) -> str:
    """Input specs as a log line shows them: ``0=(1,3,224,224)float32``."""
    return ", ".join(f"{name}={spec}" for name, spec in given.items())


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


def _all_finite(x: np.ndarray) -> bool:
    """Whether ``x`` holds no NaN or Inf, with no temporary as large as ``x`` (NaN
    propagates through min and max)."""
    if x.dtype.kind not in "fc" or x.size == 0:
        return True
    parts = (x.real, x.imag) if x.dtype.kind == "c" else (x,)
    return all(np.isfinite(p.min()) and np.isfinite(p.max()) for p in parts)


def _dtype_of(pnnx_type: str | None) -> np.dtype:
    if pnnx_type is None or not dtypes.is_known(pnnx_type):
        return np.dtype(np.float32)
    return dtypes.numpy_dtype(pnnx_type)


def _show_shape(shape: tuple[Dim, ...] | None) -> str:
    if shape is None:
        return "(unknown)"
    return "(" + ",".join("?" if d is None else str(d) for d in shape) + ")"
