"""From input specs to a frozen plan: shapes, rewrites, placement, kernels; cached by specs.

::

    Planner.plan(given specs)
    ├── infer every operand's spec          (graphexec.shapes; errors name the operator)
    ├── run the passes                       (graphexec.passes, those not turned off)
    ├── place on the device, beside the CPU  (graphexec.placement: transfers, queues)
    ├── make each node's kernel              (its device's; the CPU's by the thread policy)
    ├── warm device kernels up               (a failure moves the node to the CPU, or raises)
    └── Plan(...)                            frozen; the last PLAN_CACHE_SIZE kept (fewer if large)

Where a value's size is known only once it has been computed (a DynamicSpec), the plan
holds the steps before it and marks the rest (:mod:`graphexec.stages`); once a run has
computed it, :meth:`Planner.continuation` plans the rest for the sizes found, all the steps
above again, by a planner of the rest's own (cached by those sizes, as plans are by input
specs; see docs/design/runtime-sizes.md).

The thread policy (:mod:`graphexec.threads`) is decided once, from :meth:`Planner.draft`:
the plan at the exported shapes with sibling convolutions apart and kernels that are
asked what they would do but not prepared. A planner made without a policy makes only
such drafts (:meth:`Planner.with_policy` gives the one that makes plans).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from loguru import logger

from graphexec import footprint
from graphexec.devices.base import Device, Hints, Kernel
from graphexec.devices.cpu import CpuDevice
from graphexec.errors import (
    ExecutionError,
    ExportMismatchWarning,
    GraphexecError,
    InputShapeError,
    LayerConfigError,
    warn_the_caller,
)
from graphexec.layers.specs import Spec, TensorSpec
from graphexec.options import EngineOptions
from graphexec.passes import PassContext, run_passes
from graphexec.placement import CPU, Placement, assign_queues, cpu_placement, fuses_on, place, warm_up
from graphexec.plan import Analysis, Plan
from graphexec.program import Program, Step
from graphexec.shapes import InferenceFailure, infer_specs
from graphexec.stages import Unadmitted, split
from graphexec.threads import ThreadPolicy
from graphexec.transfers import TransferKernel, _Transfer

#: How many distinct input-shape sets keep their plans (and how many rests of a program,
#: each with the plans of the sizes runs found for it, are kept).
PLAN_CACHE_SIZE = 16

#: Made once: ``logger.opt`` per call cost a run a few microseconds even with logging off.
_lazy_logger = logger.opt(lazy=True)


class _Shared:
    """What the planners of one engine share: each pass's store, the nodes whose device
    warm-up failed, the planners of the rests plans leave for the run, and how many plans
    were built."""

    def __init__(self) -> None:
        self.kept: dict[str, dict[Any, Any]] = {}
        self.failed: dict[str, str] = {}
        self.rests: OrderedDict[tuple, Planner] = OrderedDict()
        self.built = 0
        #: Whether the shapes inferred have been held against pnnx's annotations (at load
        #: for a static export; at the first plan of a dynamic one).
        self.export_checked = False
        self.lock = threading.Lock()


class Planner:
    """The plans of one program on one CPU device and, optionally, one other device."""

    def __init__(self, program: Program, cpu: CpuDevice, device: Device | None, options: EngineOptions,
                 policy: ThreadPolicy | None = None, *, memory_limit: int | None = None,
                 shared: _Shared | None = None, after_run: bool = False):
        self.program = program
        #: Whether ``program`` is the rest of one, planned for sizes a run computed (its
        #: inference failures are then the run's, an ExecutionError).
        self.after_run = after_run
        #: A plan needing more bytes at once than this is never run: its kernels are not
        #: prepared (preparing runs them once), and the engine refuses it.
        self.memory_limit = memory_limit
        self.cpu = cpu
        self.device = device
        self.options = options
        self.policy = policy
        self._shared = shared if shared is not None else _Shared()
        #: Each pass's store, shared by the plans of every input shape.
        self._kept = self._shared.kept
        #: Nodes whose device warm-up failed (with ``fallback``): node name -> why.
        self.failed = self._shared.failed
        self._plans: OrderedDict[tuple, Plan] = OrderedDict()
        #: Plans kept, one per input shape (fewer for a program whose plans are large).
        self._plans_kept = (PLAN_CACHE_SIZE if memory_limit is None
                            else footprint.plans_kept(len(program.steps), memory_limit, PLAN_CACHE_SIZE))
        self._lock = threading.Lock()

    def with_policy(self, policy: ThreadPolicy) -> Planner:
        """A planner that makes plans for ``policy``, sharing this one's passes' stores."""
        return Planner(self.program, self.cpu, self.device, self.options, policy, memory_limit=self.memory_limit,
                       shared=self._shared)

    @property
    def built(self) -> int:
        """How many plans this planner and those of its rests have built: a run with input
        specs, and sizes found at run time, that were planned before builds none."""
        return self._shared.built

    # -- the public steps --------------------------------------------------------------------
    def plan(self, given: Mapping[str, Spec], *, given_by_user: bool = True,
             off: frozenset[str] = frozenset()) -> Plan:
        """The plan for inputs of ``given`` specs (cached). ``off``: passes not to run beyond
        the options' (for a run that extracts an operand one of them removes)."""
        if self.policy is None:
            raise RuntimeError("a Planner without a thread policy makes drafts only")
        key = (*given.items(), off)  # specs are frozen (hashable): no text built per call
        with self._lock:
            cached = self._plans.get(key)
            if cached is not None:
                self._plans.move_to_end(key)
        if cached is not None:
            _lazy_logger.debug("reusing the plan for inputs {}", lambda: _shown(given))
            return cached
        plan = self._build(given, given_by_user, off)
        with self._shared.lock:
            self._shared.built += 1
        with self._lock:
            plan = self._plans.setdefault(key, plan)  # two callers may have made it at once
            while len(self._plans) > self._plans_kept:
                self._plans.popitem(last=False)
        _lazy_logger.debug("planned inputs {}: {} nodes in {} units, width {}", lambda: _shown(given),
                                    lambda: len(plan.nodes), lambda: len(plan.units), lambda: plan.width)
        return plan

    def continuation(self, plan: Plan, values: Mapping[str, Any], *, off: frozenset[str] = frozenset()) -> Plan:
        """The plan of ``plan.rest`` for the values a run of ``plan`` computed (those its
        rest reads): its sizes taken from them, the rest planned as any program is, by a
        planner of its own, cached by those sizes. An ExecutionError naming the operator
        where a value breaks the promise of its inferred spec."""
        rest = plan.rest
        if rest is None:
            raise ValueError("the plan leaves nothing for the run to plan")
        try:
            given = rest.given(plan.specs, values)
        except Unadmitted as exc:
            step = next(s for s in plan.program.steps if exc.name in s.outputs)
            raise ExecutionError(step.name, step.layer.type, [str(plan.specs[n]) for n in step.inputs],
                                 f"its output {exc}") from exc
        shared = self._shared
        key = (rest.key, self.policy)  # a rest is planned for the threads its run has
        with shared.lock:
            planner = shared.rests.get(key)
            if planner is None:
                planner = Planner(rest.program, self.cpu, self.device, self.options, self.policy,
                                  memory_limit=self.memory_limit, shared=shared, after_run=True)
                shared.rests[key] = planner
                while len(shared.rests) > PLAN_CACHE_SIZE:
                    shared.rests.popitem(last=False)
            shared.rests.move_to_end(key)
        _lazy_logger.debug("sizes found at run time: {}",
                                    lambda: _shown({n: given[n] for n in rest.dynamic}))
        return planner.plan(given, off=off)

    def draft(self, given: Mapping[str, Spec], pieces: int) -> Plan:
        """The plan for ``given`` as the thread policy is decided from: every pass but the
        merging of siblings, kernels chosen for ``pieces`` threads and not prepared."""
        specs = self.specs(given, given_by_user=False)
        program, rest = split(self.program, specs)
        program, specs, removed, _ = self._rewritten(program, specs, frozenset({"merge_siblings"}))
        placement, analysis, kernels, queues = self._placed(program, specs, pieces, warm=False)
        return Plan(analysis, kernels, queues=queues, placement=placement, removed=removed, rest=rest)

    def specs(self, given: Mapping[str, Spec], *, given_by_user: bool) -> dict[str, Spec]:
        """The spec of every operand known before the run for inputs of ``given`` specs
        (those computed from a value whose size the run decides are left out, see
        :func:`graphexec.shapes.infer_specs`); a shape the model cannot take is an
        InputShapeError naming the operator (a LayerConfigError when the model cannot take
        the shapes it was exported with, an ExecutionError for the rest of a program,
        planned with the sizes a run computed)."""
        try:
            specs = infer_specs(self.program, dict(given), defer_dynamic=True)
        except InferenceFailure as exc:
            shown = ", ".join(str(s) for s in exc.inputs)
            if self.after_run:
                raise ExecutionError(exc.step_name, exc.step_type, [str(s) for s in exc.inputs],
                                     f"cannot take the sizes the run computed: {exc.reason}") from exc
            if not given_by_user:
                raise LayerConfigError(exc.step_name, exc.step_type, f"cannot take its exported inputs [{shown}]: "
                                       f"{exc.reason}{_parting(self.program, exc.known)}") from exc
            inputs = self.program.graph.operands
            exported = ", ".join(f"in{k}={_show_shape(inputs[n].shape)}" for k, n in enumerate(self.program.inputs))
            given_text = ", ".join(f"in{k}={given[n]}" for k, n in enumerate(self.program.inputs))
            raise InputShapeError(
                f"the model cannot take inputs {given_text} (exported with {exported}): operator "
                f"{exc.step_name} ({exc.step_type}) refuses [{shown}]: {exc.reason}"
                f"{_fixed_at_export(self.program, given)}"
            ) from exc
        if given_by_user and not self.after_run and not self._shared.export_checked:
            # a dynamic export, held against its annotations at the first shapes given
            self.hold_against_the_export(specs, ranks_only=True)
        return specs

    def hold_against_the_export(self, specs: Mapping[str, Spec], *, ranks_only: bool = False) -> None:
        """Once for the engine: the shapes inferred held against pnnx's annotations, an
        ExportMismatchWarning where they part (:func:`first_divergence`)."""
        self._shared.export_checked = True
        found = first_divergence(self.program, specs, ranks_only=ranks_only)
        if found:
            at = "the given" if ranks_only else "the exported"
            warn_the_caller(f"the shapes inferred at {at} input shapes part from pnnx's annotations {found}: "
                            "the graph pnnx wrote computes something other than what PyTorch traced there, "
                            "so the outputs may differ from PyTorch's", ExportMismatchWarning)

    # -- building ----------------------------------------------------------------------------
    def _build(self, given: Mapping[str, Spec], given_by_user: bool, off: frozenset[str]) -> Plan:
        policy = self.policy
        assert policy is not None
        specs = self.specs(given, given_by_user=given_by_user)
        program, rest = split(self.program, specs)
        program, specs, removed, notes = self._rewritten(program, specs, off)
        if notes:
            logger.debug("rewrites: {}", "; ".join(notes))
        pieces = policy.cores if policy.threads == 1 else policy.threads
        placement, analysis, kernels, queues = self._placed(program, specs, pieces, warm=True, parts=policy.parts)
        draft = Plan(analysis, kernels, queues=queues, placement=placement)
        regions = policy.regions(draft)
        blas = policy.blas_threads(draft, regions) if policy.tune else {}
        shared = regions.shared if regions is not None else frozenset()
        runnable = self.memory_limit is None or analysis.peak_bytes <= self.memory_limit
        final: list[Kernel] = []
        for node, kernel in zip(analysis.nodes, kernels):  # the drafts were asked what they would do
            if node.device == CPU and not isinstance(node.step.layer, _Transfer):
                hints = Hints(blas_threads=blas.get(node.index, 1), pieces=pieces if node.index in shared else 1,
                              parts=policy.parts and node.index in shared)
                kernel = self._cpu_kernel(node.step, analysis.specs, hints)
                if runnable:
                    _prepare(kernel, node, analysis.specs)
            final.append(kernel)
        return Plan(analysis, final, queues=queues, placement=placement, removed=removed, regions=regions,
                    blas_threads=blas, rest=rest)

    def _rewritten(self, program: Program, specs: dict[str, Spec], off: frozenset[str]
                   ) -> tuple[Program, dict[str, Spec], dict[str, frozenset[str]], list[str]]:
        device = self.device
        context = PassContext(
            device=device.kind if device is not None else CPU,
            allow=fuses_on(device, self.options.cpu_types) if device is not None else None,
            runs_alone=self._runs_alone,
            kept=self._kept,
        )
        return run_passes(program, specs, context, self.options.passes_off | off)

    def _runs_alone(self, program: Program, specs: Mapping[str, Spec]) -> Callable[[Step], bool] | None:
        """Which steps of ``program`` run alone under the policy (for merging siblings)."""
        policy = self.policy
        if policy is None or not policy.merge_where_alone or policy.threads == 1:
            return None
        analysis = Analysis(program, specs)
        kernels = [self._cpu_kernel(node.step, specs, Hints(pieces=policy.cores)) for node in analysis.nodes]
        return policy.merges(Plan(analysis, kernels))

    def _placed(self, program: Program, specs: dict[str, Spec], pieces: int, warm: bool, parts: bool = False
                ) -> tuple[Placement, Analysis, list[Kernel], list[int]]:
        """The program placed, its analysis, each node's kernel (CPU ones chosen for nodes
        shared among ``pieces`` threads, in compiled ``parts`` or not; none prepared) and
        queue; device kernels warmed up where ``warm`` (failures move the node to the CPU
        with ``fallback``)."""
        device = self.device
        while True:
            if device is not None:
                placement = place(program, specs, device, cpu_types=self.options.cpu_types, failed=self.failed)
                analysis = Analysis(placement.program, placement.specs, placement.sides)
                queues = assign_queues(analysis, len(device.queues))
            else:
                placement = cpu_placement(program, specs)
                analysis = Analysis(program, specs)
                queues = [0] * len(analysis.nodes)
            kernels: list[Kernel] = []
            on_device: list[Kernel] = []
            for node, queue in zip(analysis.nodes, queues):
                step = node.step
                ins = [analysis.specs[n] for n in step.inputs]
                if isinstance(step.layer, _Transfer):
                    kernels.append(TransferKernel(step.layer, ins, device, queue))
                elif node.device == CPU:
                    kernels.append(self._cpu_kernel(step, analysis.specs, Hints(pieces=pieces, parts=parts)))
                else:
                    outs = [analysis.specs[n] for n in step.outputs]
                    kernel = device.kernel(step.layer, ins, outs, Hints(queue=queue))  # type: ignore[union-attr]
                    kernels.append(kernel)
                    on_device.append(kernel)
            newly = warm_up(on_device, device, self.options.fallback) if warm and device is not None else {}
            if not newly:
                if device is not None:
                    logger.debug("placed: {}", placement.summary())
                return placement, analysis, kernels, queues
            self.failed.update(newly)

    def _cpu_kernel(self, step: Step, specs: Mapping[str, Spec], hints: Hints) -> Kernel:
        return self.cpu.kernel(step.layer, [specs[n] for n in step.inputs], [specs[n] for n in step.outputs], hints)


def _prepare(kernel: Kernel, node: Any, specs: Mapping[str, Spec]) -> None:
    """Prepare ``kernel`` (it runs once on zeros); its failure is the node's ExecutionError."""
    try:
        kernel.prepare()
    except GraphexecError:
        raise
    except Exception as exc:
        shapes = [str(specs[n]) for n in node.step.inputs]
        raise ExecutionError(node.name, node.type, shapes, f"while preparing its kernel: {type(exc).__name__}: "
                                                           f"{exc}") from exc


def first_divergence(program: Program, known: Mapping[str, Spec], *, ranks_only: bool = False) -> str:
    """Where inference first parts from a shape pnnx annotated on an operand that is read
    ("" if nowhere): at the exported shapes, a size it knew (an annotation of ints), or a
    rank where it left sizes unknown (``?``: they differed between its two traced inputs);
    at other shapes (``ranks_only``), a rank. pnnx may have written a wrong graph there (its
    own generated model_pnnx.py then fails or differs too), or a layer computes the wrong
    shape."""
    operands = program.graph.operands
    outputs = set(program.outputs)
    for step in program.steps:
        for name in step.outputs:
            spec, operand = known.get(name), operands.get(name)
            annotated = None if operand is None or not (operand.consumers or name in outputs) else operand.shape
            if not isinstance(spec, TensorSpec) or not annotated:
                continue
            sized = not ranks_only and all(isinstance(d, int) for d in annotated)
            parts = tuple(spec.shape) != tuple(annotated) if sized else len(spec.shape) != len(annotated)
            if parts and not reshaped_in_place(operand):
                return (f"at operand {name}, output of {step.name} ({step.layer.type}): annotated "
                        f"{_show_shape(annotated)}, inferred {_show_shape(spec.shape)}")
    return ""


#: The shape changes a model may make in place (``x.unsqueeze_(1)``), as pnnx writes them.
_IN_PLACE_RESHAPES = frozenset({"torch.unsqueeze", "torch.squeeze", "torch.transpose", "torch.t"})


def reshaped_in_place(operand: Any) -> bool:
    """Whether pnnx annotated ``operand`` with the shape an in-place change of its shape
    left it (``x.permute(0, 2, 1).unsqueeze_(1)``): one that reads it gives that shape."""
    return any(op.type in _IN_PLACE_RESHAPES and len(op.outputs) == 1 and op.outputs[0].shape == operand.shape
               for op in operand.consumers)


def _parting(program: Program, known: Mapping[str, Spec]) -> str:
    found = first_divergence(program, known)
    return f" (the shapes first part from pnnx's annotations {found})" if found else ""


def _shown(given: Mapping[str, Spec]) -> str:
    """Input specs as a log line shows them: ``0=(1,3,224,224)float32``."""
    return ", ".join(f"{name}={spec}" for name, spec in given.items())


def _fixed_at_export(program: Program, given: Mapping[str, Spec]) -> str:
    """A hint where an input's size differs from one the export fixed: pnnx writes the
    sizes it traced into reshapes and views unless it saw a second input shape."""
    operands = program.graph.operands
    for name in program.inputs:
        exported, spec = operands[name].shape, given.get(name)
        if not exported or not isinstance(spec, TensorSpec) or len(spec.shape) != len(exported):
            continue
        differ = [k for k, (e, g) in enumerate(zip(exported, spec.shape)) if isinstance(e, int) and e != g]
        if differ:
            batch = " (or run one sample at a time)" if differ == [0] and exported[0] == 1 else ""
            return ("; the export fixed the sizes it traced: export again with a second input "
                    "shape (`graphexec.export(..., dynamic_inputs=...)`, pnnx's `inputs2`) to keep "
                    f"them dynamic{batch}, or, for a model converted from ONNX, convert it at these "
                    "shapes (`graphexec.convert(..., input_shapes=...)`)")
    return ""


def _show_shape(shape: Any) -> str:
    if shape is None:
        return "(unknown)"
    return "(" + ",".join("?" if d is None else str(d) for d in shape) + ")"


def cpu_plan(program: Program, specs: Mapping[str, Spec], device: CpuDevice | None = None) -> Plan:
    """``program`` as it stands, every node on the CPU with its kernel prepared: no rewrite,
    no thread policy (for running a program one has built or rewritten by hand)."""
    device = device if device is not None else CpuDevice()
    analysis = Analysis(program, specs)
    kernels = [device.kernel(node.step.layer, [specs[n] for n in node.step.inputs],
                             [specs[n] for n in node.step.outputs]) for node in analysis.nodes]
    for kernel in kernels:
        kernel.prepare()
    return Plan(analysis, kernels)
