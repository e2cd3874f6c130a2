"""Graph rewrites, each one object with one signature, run in order by the planner.

::

    class MyPass(Pass):
        name = "my_pass"                 what ``Engine.load(..., passes_off={"my_pass"})`` names
        devices = frozenset({"cpu"})     where it applies (None: on any device)
        def run(self, program, specs, context) -> Rewrite   program in, program out

A rewrite returns the new program, the specs of the operands it adds, the operands it
removes (a run that extracts one of those takes the plan made without rewrites) and a
note of what it did, for the log. Passes run once per plan (per set of input shapes);
what a pass makes that the plans of other shapes can share (a merged convolution's
stacked weights) it keeps in ``context.kept``, its own dictionary.

The default list, in order (:data:`DEFAULT_PASSES`):

    fold_constants       steps computed from constants alone ->          constants.py
                         constants (once per engine)
    fuse_activations     producer + in-place activation -> one node      activations.py
    fuse_chains          producer + elementwise operators -> one node     chains.py
                         (on a device whose store applies them)
    fuse_excitations     squeeze-and-excitation blocks -> one node        excitation.py
    fold_gates           such a block + the convolution reading it ->     excitation.py
                         one node (on a device that folds the gate in)
    fold_preactivations  batch norm + ReLU before a 1x1 conv -> a floor   preactivation.py
    merge_siblings       convolutions of one input -> one product         siblings.py

Adding a rewrite is adding one Pass here.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from graphexec.errors import OptionError
from graphexec.layers.base import Layer
from graphexec.layers.specs import Spec
from graphexec.program import Program, Step


@dataclass(frozen=True)
class Rewrite:
    """What a pass gives back."""

    program: Program
    #: Specs of the operands the rewrite adds (the others keep theirs).
    added: Mapping[str, Spec] = field(default_factory=dict)
    #: Operands that no longer hold what the model computes there.
    removed: frozenset[str] = frozenset()
    #: What it did, for the log ("3 pairs fused").
    note: str = ""


@dataclass
class PassContext:
    """What a pass may know of the plan it rewrites for."""

    #: The kind of device the program will run on ("cpu", "opencl").
    device: str = "cpu"
    #: For rewrites that make one node of several: whether the device runs that node for
    #: these input specs (None: any); see :func:`graphexec.placement.fuses_on`.
    allow: Callable[[Layer, list[Spec]], bool] | None = None
    #: Which steps run alone, one at a time, in the runs of this program (None: all do).
    runs_alone: Callable[[Program, Mapping[str, Spec]], Callable[[Step], bool] | None] | None = None
    #: Each pass's own store, shared by the plans of every input shape of one engine.
    kept: dict[str, dict[Any, Any]] = field(default_factory=dict)

    def store(self, name: str) -> dict[Any, Any]:
        return self.kept.setdefault(name, {})


class Pass:
    """One graph rewrite (see the module docstring)."""

    name = ""
    devices: frozenset[str] | None = None

    def applies_to(self, device: str) -> bool:
        return self.devices is None or device in self.devices

    def run(self, program: Program, specs: Mapping[str, Spec], context: PassContext) -> Rewrite:
        raise NotImplementedError(f"{type(self).__name__} needs run")


def _default_passes() -> tuple[Pass, ...]:
    from graphexec.passes.activations import FuseActivations
    from graphexec.passes.chains import FuseChains
    from graphexec.passes.constants import FoldConstants
    from graphexec.passes.excitation import FoldGates, FuseExcitations
    from graphexec.passes.preactivation import FoldPreactivations
    from graphexec.passes.siblings import MergeSiblings

    return (FoldConstants(), FuseActivations(), FuseChains(), FuseExcitations(), FoldGates(), FoldPreactivations(),
            MergeSiblings())


#: The rewrites the planner runs, in order.
DEFAULT_PASSES: tuple[Pass, ...] = _default_passes()
#: Their names, as options name them.
PASS_NAMES: tuple[str, ...] = tuple(p.name for p in DEFAULT_PASSES)


def check_names(names: Collection[str]) -> frozenset[str]:
    """``names`` as a set of known pass names; an OptionError for a name no pass has."""
    unknown = sorted(set(names) - set(PASS_NAMES))
    if unknown:
        raise OptionError(f"passes_off names unknown pass(es) {unknown}; the passes are {list(PASS_NAMES)}")
    return frozenset(names)


def run_passes(program: Program, specs: Mapping[str, Spec], context: PassContext, off: Collection[str] = (),
               passes: Sequence[Pass] = DEFAULT_PASSES
               ) -> tuple[Program, dict[str, Spec], dict[str, frozenset[str]], list[str]]:
    """Every pass of ``passes`` not in ``off`` that applies to the context's device, in
    order: the program, its specs, the operands each pass removed (by its name) and what
    each pass did."""
    specs = dict(specs)
    removed: dict[str, frozenset[str]] = {}
    notes = []
    for rewrite_pass in passes:
        if rewrite_pass.name in off or not rewrite_pass.applies_to(context.device):
            continue
        done = rewrite_pass.run(program, specs, context)
        if done.program is not program:
            program = done.program
            specs.update(done.added)
            if done.removed:
                removed[rewrite_pass.name] = done.removed
            notes.append(f"{rewrite_pass.name}: {done.note}")
    return program, specs, removed, notes
