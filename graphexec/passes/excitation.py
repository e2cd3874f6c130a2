"""Squeeze-and-excitation blocks run as one node.

MobileNet v3, EfficientNet and RegNet-Y gate their channels by what the whole image holds
(Hu et al.): ``x * gate(fc2(act(fc1(mean_hw(x)))))``, where ``fc1`` and ``fc2`` are 1x1
convolutions of a 1 x 1 image. pnnx writes that as four operators (the average pool, the
two convolutions with their fused activations, a ``mul`` expression), each a node whose
work is a few microseconds of numpy on a vector and tens of microseconds of Python and
dispatch around it: MobileNet v3 small runs nine such blocks, a third of its nodes.

A block runs as one node, a :class:`graphexec.layers.excitation.SqueezeExcite`. Its
intermediate operands (the pooled vector, the hidden vector and the gate) count as fused
away, so a run that extracts one takes the unfused plan. The sequential and concurrent
executors, which run the same plan, still agree bit for bit. On a device the block fuses
only where the device runs it as one node (``context.allow``): there its four launches
become two (:mod:`graphexec.devices.opencl.ops.excitation`). There, where a convolution
alone reads a block's output, the two become one node, a
:class:`~graphexec.layers.excitation.GatedConv` (``fold_gates``): the convolution multiplies
by the gate as it reads, one launch fewer again and no gated tensor stored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from graphexec.layers.base import Layer
from graphexec.layers.conv import Conv2d
from graphexec.layers.excitation import GatedConv, SqueezeExcite
from graphexec.layers.expression import Expression
from graphexec.layers.fused import head_and_tail
from graphexec.layers.pooling import AdaptiveAvgPool2d
from graphexec.layers.specs import Spec, TensorSpec
from graphexec.passes import Pass, PassContext, Rewrite
from graphexec.program import Program, Step

#: How pnnx writes the gate: ``scale * input``, either way round.
_PRODUCTS = ("mul(@0,@1)", "mul(@1,@0)")


class FuseExcitations(Pass):
    """Squeeze-and-excitation blocks as one node, on the CPU and where a device runs them."""

    name = "fuse_excitations"
    devices = frozenset({"cpu", "opencl"})

    def run(self, program: Program, specs: Mapping[str, Spec], context: PassContext) -> Rewrite:
        fused, removed = fuse_excitations(program, specs, context.allow)
        return Rewrite(fused, removed=removed, note=f"{len(removed) // 3} blocks")


def fuse_excitations(program: Program, specs: Mapping[str, Spec],
                     allow: Callable[[Layer, list[Spec]], bool] | None = None) -> tuple[Program, frozenset[str]]:
    """``program`` with each squeeze-and-excitation block (a 1 x 1 average pool of ``x`` read
    only by a 1x1 convolution, read only by another, read only by ``mul`` with ``x``) as one
    :class:`SqueezeExcite` step where the ``mul`` was, and the operands it removed;
    ``allow(block, input_specs)``, if given, must accept each block."""
    readers = program.readers()
    handed_out = set(program.outputs)

    def only_reader(step: Step) -> int | None:
        if len(step.outputs) != 1 or step.outputs[0] in handed_out:
            return None
        after = readers.get(step.outputs[0], [])
        return after[0] if len(after) == 1 else None

    replaced: dict[int, Step | None] = {}
    removed: set[str] = set()
    for k, pool in enumerate(program.steps):
        if not _averages_to_one_pixel(pool, specs):
            continue
        chain = [k]
        for _ in range(3):
            after = only_reader(program.steps[chain[-1]])
            if after is None or after in replaced:
                break
            chain.append(after)
        if len(chain) != 4:
            continue
        _, k1, k2, k3 = chain
        reduce_step, expand_step, product = (program.steps[i] for i in chain[1:])
        x = pool.inputs[0]
        channels = specs[x].shape[1]  # type: ignore[union-attr]
        reduce, reduce_tail = head_and_tail(reduce_step.layer)
        expand, expand_tail = head_and_tail(expand_step.layer)
        if not (_vector_conv(reduce, channels, None) and _vector_conv(expand, None, channels)
                and reduce.weight.shape[0] == expand.weight.shape[1]
                and reduce_step.inputs == pool.outputs and expand_step.inputs == reduce_step.outputs):
            continue
        if not (isinstance(product.layer, Expression) and product.layer.text.replace(" ", "") in _PRODUCTS
                and sorted(product.inputs) == sorted((x, expand_step.outputs[0]))
                and specs.get(product.outputs[0]) == specs[x]):
            continue
        block = SqueezeExcite(pool.name, reduce, reduce_tail, expand, expand_tail,  # type: ignore[arg-type]
                              tuple(layer.type for layer in (pool.layer, reduce, *reduce_tail,
                                                             expand, *expand_tail, product.layer)))
        if allow is not None and not allow(block, [specs[x]]):
            continue
        replaced.update({k: None, k1: None, k2: None, k3: Step(block, (x,), product.outputs)})
        removed.update((pool.outputs[0], reduce_step.outputs[0], expand_step.outputs[0]))
    return _with_steps_replaced(program, replaced), frozenset(removed)


class FoldGates(Pass):
    """A block and the convolution that alone reads its output as one node, where the
    device folds the gate into the convolution's reads."""

    name = "fold_gates"
    devices = frozenset({"opencl"})

    def run(self, program: Program, specs: Mapping[str, Spec], context: PassContext) -> Rewrite:
        if context.allow is None:
            return Rewrite(program)
        folded, removed = fold_gates(program, specs, context.allow)
        return Rewrite(folded, removed=removed, note=f"{len(removed)} gates folded")


def fold_gates(program: Program, specs: Mapping[str, Spec], allow: Callable[[Layer, list[Spec]], bool]
               ) -> tuple[Program, frozenset[str]]:
    """``program`` with each :class:`SqueezeExcite` step whose output only a step reading it
    as its first input (and nowhere else) reads, and that ``allow`` accepts together with
    it, as one :class:`GatedConv` step where the reader was; and the gated operands."""
    readers = program.readers()
    handed_out = set(program.outputs)
    replaced: dict[int, Step | None] = {}
    removed: set[str] = set()
    for k, step in enumerate(program.steps):
        if not isinstance(step.layer, SqueezeExcite) or step.outputs[0] in handed_out:
            continue
        gated = step.outputs[0]
        after = readers.get(gated, [])
        if len(after) != 1 or after[0] in replaced:
            continue
        reader = program.steps[after[0]]
        if len(reader.outputs) != 1 or reader.inputs[0] != gated or gated in reader.inputs[1:]:
            continue
        folded = GatedConv(step.layer, reader.layer)
        inputs = (*step.inputs, *reader.inputs[1:])
        if not allow(folded, [specs[name] for name in inputs]):
            continue
        replaced.update({k: None, after[0]: Step(folded, inputs, reader.outputs)})
        removed.add(gated)
    return _with_steps_replaced(program, replaced), frozenset(removed)


def _with_steps_replaced(program: Program, replaced: Mapping[int, Step | None]) -> Program:
    """``program`` with step k replaced by ``replaced[k]``, or left out where that is None."""
    if not replaced:
        return program
    steps = tuple(replaced.get(k, step) for k, step in enumerate(program.steps))
    return Program(program.graph, tuple(s for s in steps if s is not None), program.inputs, program.outputs)


def _averages_to_one_pixel(step: Step, specs: Mapping[str, Spec]) -> bool:
    """``step`` is an ``AdaptiveAvgPool2d`` to 1 x 1 of a float32 (N, C, H, W) tensor."""
    if type(step.layer) is not AdaptiveAvgPool2d or step.layer.output_size != (1, 1) or len(step.inputs) != 1:
        return False
    x = specs.get(step.inputs[0])
    return isinstance(x, TensorSpec) and x.dtype == np.float32 and len(x.shape) == 4


def _vector_conv(conv: Layer, cin: int | None, cout: int | None) -> bool:
    """``conv`` is a stored-weight, ungrouped, unpadded float32 1x1 Conv2d (of a 1 x 1 image
    any stride and dilation give the same), with ``cin`` / ``cout`` channels where given."""
    if type(conv) is not Conv2d or conv.kernel_size != (1, 1) or conv.groups != 1:
        return False
    if conv.geometry.pads(conv.kernel_size) != ((0, 0), (0, 0)) or conv.geometry.padding_mode != "zeros":
        return False
    if conv.weight.dtype != np.float32 or (conv.bias is not None and conv.bias.dtype != np.float32):
        return False
    out_channels, in_channels = conv.weight.shape[:2]
    return (cin is None or in_channels == cin) and (cout is None or out_channels == cout)
