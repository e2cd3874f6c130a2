"""Fusing an elementwise activation into the node that produces its input.

A convolution followed by a ReLU is two pipeline nodes: two trips through the scheduler
and the GIL, and a second pass over the output after it has left the cache. When the
producer writes a fresh tensor that nothing else reads, and the activation can run in
place on a tensor of the same shape and dtype, the pair becomes one node
(:class:`~graphexec.layers.fused.Fused`) that applies the activation to the output while
it is still hot (``conv -> relu -> ...``, also a chain of several activations). The result
is the same bits: the same numpy calls on the same values.

Fusion is decided per input shape (the dtypes must match). The operand between the two
nodes disappears, so a run that extracts it uses the plan made without rewrites. With a
device, only what the device runs as one node fuses (``context.allow``; see
:func:`graphexec.placement.fuses_on`), so fusion never moves work off the device.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from graphexec.layers.base import Layer
from graphexec.layers.fused import Fused
from graphexec.layers.specs import Spec, TensorSpec
from graphexec.passes import Pass, PassContext, Rewrite
from graphexec.program import Program, Step


class FuseActivations(Pass):
    """Producer -> in-place activation pairs (and chains) as one node, on any device."""

    name = "fuse_activations"

    def run(self, program: Program, specs: Mapping[str, Spec], context: PassContext) -> Rewrite:
        fused, removed = fuse_activations(program, specs, context.allow)
        return Rewrite(fused, removed=removed, note=f"{len(program.steps) - len(fused.steps)} activations fused")


def _fusable_tail(layer: Layer) -> bool:
    return layer.in_place and layer.writes_into and layer.num_inputs == 1 and layer.num_outputs == 1


def _hosts_inputs(step: Step, specs: Mapping[str, Spec]) -> bool:
    """Whether ``step`` is a join whose inputs the memory plan may write inside its output
    (see :meth:`graphexec.layers.base.Layer.input_offsets`). Such a join is not fused with an
    activation: written over in place, its output would no longer hold those inputs for
    their other readers, and unfused the join copies nothing while the activation makes
    the same one pass."""
    if not all(n in specs for n in (*step.inputs, *step.outputs)):
        return False
    offsets = step.layer.input_offsets([specs[n] for n in step.inputs], [specs[n] for n in step.outputs])
    return offsets is not None and any(o is not None for o in offsets)


def fuse_activations(
    program: Program, specs: Mapping[str, Spec], allow: Callable[[Layer, list[Spec]], bool] | None = None,
) -> tuple[Program, frozenset[str]]:
    """``program`` with each producer -> in-place activation pair merged into one step, and
    the operand names that no longer exist (the producers' outputs that were fused away).

    ``allow(fused, input_specs)``, if given, must also accept each fused node (a chain is
    extended one activation at a time, as long as it accepts the longer one)."""
    readers = program.readers()
    outputs = set(program.outputs)

    def follower(k: int) -> int | None:
        """The activation step that may be fused after step ``k``, if any."""
        step = program.steps[k]
        if (len(step.outputs) != 1 or not step.layer.fresh_outputs or isinstance(step.layer, Fused)
                or step.outputs[0] in outputs):
            return None
        name = step.outputs[0]
        after = readers.get(name, [])
        if len(after) != 1:
            return None
        nxt = program.steps[after[0]]
        spec, out = specs.get(name), specs.get(nxt.outputs[0]) if nxt.outputs else None
        if not (_fusable_tail(nxt.layer) and nxt.inputs == (name,) and isinstance(spec, TensorSpec)
                and spec == out and spec.dtype.kind == "f"):
            return None
        if _hosts_inputs(step, specs):
            return None
        return after[0]

    absorbed: set[int] = set()
    fused_away: set[str] = set()
    steps: list[Step] = []
    for k, step in enumerate(program.steps):
        if k in absorbed:
            continue
        chain, tail, last = [], [], k
        while (nxt := follower(last)) is not None:
            after = program.steps[nxt].layer
            if allow is not None and not allow(Fused(step.layer, (*tail, after)), [specs[n] for n in step.inputs]):
                break
            chain.append(nxt)
            tail.append(after)
            last = nxt
        if not chain:
            steps.append(step)
            continue
        absorbed.update(chain)
        fused_away.update(program.steps[j].inputs[0] for j in chain)
        layer = Fused(step.layer, tuple(tail))
        steps.append(Step(layer, step.inputs, program.steps[chain[-1]].outputs))
    if not fused_away:
        return program, frozenset()
    return Program(program.graph, tuple(steps), program.inputs, program.outputs), frozenset(fused_away)
