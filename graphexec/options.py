"""The engine's options: one typed, validated, immutable object.

``Engine.load(path, threads=2, device="opencl")`` builds an :class:`EngineOptions` from its
keywords; ``Engine.load(path, options=EngineOptions(...))`` takes one whole. A bad value
raises :class:`~graphexec.errors.OptionError` naming the option, the value and what it
takes, before anything is loaded.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

from graphexec.errors import OptionError

#: ``cpu_kernels`` values: which CPU kernels run (see :mod:`graphexec.devices.cpu`).
CPU_KERNELS = ("auto", "numpy", "jit", "reference")
#: The environment variable that sets ``cpu_kernels`` when the option is left at "auto".
CPU_KERNELS_ENV = "GRAPHEXEC_CPU_KERNELS"


@dataclass(frozen=True)
class EngineOptions:
    """How an engine plans and runs a model (the defaults suit most uses).

    threads: inter-op workers, independent nodes run at once (1: the sequential reference
        executor). None: chosen from the model's plan and the machine (see
        :mod:`graphexec.threads`), and used in a run only where the cores are free then
        (see :mod:`graphexec.occupancy`).
    intra_op_threads: BLAS threads inside one node during a run. None: 1 when ``threads``
        or ``executor`` is given, else chosen with ``threads``.
    executor: a ``concurrent.futures.Executor`` to run nodes on instead of the engine's own
        pool.
    memory_limit: bytes of tensors and working memory a run may need at once (default: the
        machine's RAM): larger input shapes are refused before anything is allocated.
    reuse_memory: intermediate tensors live in a preallocated arena, sharing bytes between
        tensors whose lives never overlap (see :mod:`graphexec.memory`).
    device: ``"cpu"``, ``"opencl"``, ``"opencl:1"``, ``"opencl:gpu"``, ``"opencl:<name>"``
        or an opened Device: nodes the device runs go there, the rest stays on the CPU.
    cpu_types: operator types kept on the CPU whatever the device.
    fallback: a node whose device warm-up fails moves to the CPU with a warning (else a
        DeviceError names it).
    pin_workers: pin the engine's own workers to a core each where there is one per core,
        and place a run's helper threads (BLAS's, numba's) on cores other than the run's
        own (see :mod:`graphexec.affinity`); False leaves every thread to the kernel.
    share_nodes: idle cores work inside a large node that runs alone (None: only where the
        engine chooses its threads; see :mod:`graphexec.regions`).
    batch_parts: a batch of several samples runs in this many parts side by side, one
        thread each, where every layer of the model computes each sample alone (see
        :mod:`graphexec.samples`); 1: always whole. None: one part per core where the
        engine chooses its threads, the cores are free and the process makes one call at a
        time, else whole.
    passes_off: graph rewrites not to run, by name (see :mod:`graphexec.passes`).
    cpu_kernels: ``"auto"`` (compiled kernels where the jit extra is installed, else
        numpy; the ``GRAPHEXEC_CPU_KERNELS`` environment variable may choose), ``"numpy"``,
        ``"jit"`` or ``"reference"`` (every layer's own forward).
    plan_for: input shapes to plan for when the engine loads, beside the exported ones
        (``[(1, 3, 320, 320)]``; a tuple of shapes per entry for a model of several inputs):
        their kernels are prepared then, compiled ones compiled or loaded from their cache,
        rather than in the first run of those shapes.
    clock: the monotonic clock, in seconds, that ``forward(..., timeout=)`` is measured on
        (tests give one they control).
    """

    threads: int | None = None
    intra_op_threads: int | None = None
    executor: Executor | None = None
    memory_limit: int | None = None
    reuse_memory: bool = True
    device: Any = "cpu"
    cpu_types: frozenset[str] = field(default_factory=frozenset)
    fallback: bool = False
    pin_workers: bool = True
    share_nodes: bool | None = None
    batch_parts: int | None = None
    passes_off: frozenset[str] = field(default_factory=frozenset)
    cpu_kernels: str = "auto"
    plan_for: tuple[tuple[tuple[int, ...], ...], ...] = ()
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        for name in ("threads", "intra_op_threads", "memory_limit", "batch_parts"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise OptionError(f"{name} must be a positive integer or None, got {value!r}")
        for name in ("reuse_memory", "fallback", "pin_workers"):
            if not isinstance(getattr(self, name), bool):
                raise OptionError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.share_nodes is not None and not isinstance(self.share_nodes, bool):
            raise OptionError(f"share_nodes must be True, False or None, got {self.share_nodes!r}")
        if not callable(self.clock):
            raise OptionError(f"clock must be a callable giving seconds, got {self.clock!r}")
        if self.executor is not None and not isinstance(self.executor, Executor):
            raise OptionError(f"executor must be a concurrent.futures.Executor, got {self.executor!r}")
        object.__setattr__(self, "cpu_types", _names("cpu_types", self.cpu_types, "operator type names"))
        from graphexec.passes import check_names

        object.__setattr__(self, "passes_off", check_names(_names("passes_off", self.passes_off, "pass names")))
        object.__setattr__(self, "plan_for", _shape_sets(self.plan_for))
        if self.cpu_kernels not in CPU_KERNELS:
            raise OptionError(f"cpu_kernels must be one of {', '.join(CPU_KERNELS)}, got {self.cpu_kernels!r}")

    @property
    def chooses_threads(self) -> bool:
        """Whether the engine chooses its threads (none of threads, intra_op_threads and
        executor given)."""
        return self.threads is None and self.intra_op_threads is None and self.executor is None

    def kernel_tiers(self) -> tuple[str, ...]:
        """The CPU kernel tiers this engine uses (see :mod:`graphexec.devices.cpu`)."""
        choice = self.cpu_kernels
        if choice == "auto":
            choice = os.environ.get(CPU_KERNELS_ENV, "auto").strip().lower() or "auto"
            if choice not in CPU_KERNELS:
                raise OptionError(f"{CPU_KERNELS_ENV}={choice!r}: expected one of {', '.join(CPU_KERNELS)}")
        if choice == "reference":
            return ()
        if choice == "numpy":
            return ("numpy",)
        from graphexec.devices.cpu.jit import available

        if choice == "jit":
            if not available():
                raise OptionError('cpu_kernels="jit" needs numba: pip install "graphexec[jit]"')
            return ("jit", "numpy")
        return ("jit", "numpy") if available() else ("numpy",)

    @staticmethod
    def from_keywords(options: EngineOptions | None = None, **keywords: Any) -> EngineOptions:
        """``options`` (or the defaults) with ``keywords`` replacing fields; the names
        ``merge_convs``, ``fold_preactivations`` and ``fuse_excitations`` (False) turn the
        pass of that name off. An unknown name is an OptionError listing the known ones."""
        base = options if options is not None else EngineOptions()
        if not isinstance(base, EngineOptions):
            raise OptionError(f"options must be an EngineOptions, got {base!r}")
        off = set(keywords.pop("passes_off", base.passes_off))
        for legacy, pass_name in _PASS_SWITCHES.items():
            if legacy in keywords:
                value = keywords.pop(legacy)
                if not isinstance(value, bool):
                    raise OptionError(f"{legacy} must be True or False, got {value!r}")
                (off.discard if value else off.add)(pass_name)
        known = {f.name for f in dataclasses.fields(EngineOptions)}
        unknown = sorted(set(keywords) - known)
        if unknown:
            raise OptionError(f"unknown engine option(s) {unknown}; the options are "
                              f"{sorted(known | set(_PASS_SWITCHES))}")
        return dataclasses.replace(base, passes_off=frozenset(off), **keywords)

    def as_keywords(self) -> Mapping[str, Any]:
        """The fields, for rebuilding an engine elsewhere (the executor and an opened device
        are not carried: the other side gets its own)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        fields["executor"] = None
        fields["clock"] = time.monotonic
        if not isinstance(self.device, str):
            fields["device"] = getattr(self.device, "spec", "cpu")
        return fields


#: Older boolean options, each the switch of one pass.
_PASS_SWITCHES = {"merge_convs": "merge_siblings", "fold_preactivations": "fold_preactivations",
                  "fuse_excitations": "fuse_excitations"}


def _names(option: str, value: Any, what: str) -> frozenset[str]:
    if isinstance(value, str) or not isinstance(value, Collection) or not all(isinstance(v, str) for v in value):
        raise OptionError(f"{option} takes a collection of {what}, got {value!r}")
    return frozenset(value)


def _shape_sets(value: Any) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """``plan_for`` as a tuple of shape sets: an entry that is one shape (ints) is the
    shape of a model's one input."""
    def is_shape(item: Any) -> bool:
        return (isinstance(item, (tuple, list)) and len(item) > 0
                and all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in item))

    bad = OptionError(f"plan_for takes input shapes, such as [(1, 3, 224, 224)] (or a tuple of shapes per "
                      f"entry for a model of several inputs), got {value!r}")
    if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, list)):
        raise bad
    sets: list[tuple[tuple[int, ...], ...]] = []
    for entry in value:
        if is_shape(entry):
            sets.append((tuple(entry),))
        elif isinstance(entry, (tuple, list)) and entry and all(is_shape(item) for item in entry):
            sets.append(tuple(tuple(item) for item in entry))
        else:
            raise bad
    return tuple(sets)
