"""Squeeze-and-excitation blocks run as one node.

MobileNet v3, EfficientNet and RegNet-Y gate their channels by what the whole image holds
(Hu et al.): ``x * gate(fc2(act(fc1(mean_hw(x)))))``, where ``fc1`` and ``fc2`` are 1x1
convolutions of a 1 x 1 image. pnnx writes that as four operators (the average pool, the
two convolutions with their fused activations, a ``mul`` expression), each a node whose
work is a few microseconds of numpy on a vector and tens of microseconds of Python and
dispatch around it: MobileNet v3 small runs nine such blocks, a third of its nodes.

:class:`SqueezeExcite` runs a block as one node: the mean is one matrix-vector product
(as the average pool computes it), each convolution one small product with its bias and
the activation layers the model named, and the gate one broadcast multiply. Its
intermediate operands (the pooled vector, the hidden vector and the gate) count as fused
away, so a run that extracts one takes the unfused plan. The sums run in another order than
the convolution kernels' (within float32 rounding; tested against PyTorch), and the
sequential and concurrent executors, which run the same plan, still agree bit for bit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from graphexec.layers.base import Layer, Shape, ShapeMismatch
from graphexec.layers.conv import Conv2d
from graphexec.layers.expression import Expression
from graphexec.layers.fused import head_and_tail
from graphexec.layers.pooling import AdaptiveAvgPool2d
from graphexec.layers.specs import Spec, TensorSpec
from graphexec.passes import Pass, PassContext, Rewrite
from graphexec.program import Program, Step

#: How pnnx writes the gate: ``scale * input``, either way round.
_PRODUCTS = ("mul(@0,@1)", "mul(@1,@0)")


class SqueezeExcite(Layer):
    """``x * gate(W2 act(W1 mean_hw(x) + b1) + b2)`` over an (N, C, H, W) float32 input."""

    fresh_outputs = True
    writes_into = True

    def __init__(self, name: str, reduce: Conv2d, reduce_tail: tuple[Layer, ...],
                 expand: Conv2d, expand_tail: tuple[Layer, ...]):  # no Operator: built by the rewrite
        self.name = name
        self.type = "graphexec.SqueezeExcite"
        self.num_inputs = 1
        self.num_outputs = 1
        self.input_names = ["input"]
        # Transposed, so that each product leaves one image's vector per contiguous row.
        self.reduce_weight = np.ascontiguousarray(reduce.weight[:, :, 0, 0].T)   # (C, Cr)
        self.reduce_bias = reduce.bias
        self.expand_weight = np.ascontiguousarray(expand.weight[:, :, 0, 0].T)   # (Cr, C)
        self.expand_bias = expand.bias
        self.reduce_tail, self.expand_tail = reduce_tail, expand_tail

    @property
    def channels(self) -> int:
        return self.reduce_weight.shape[0]

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, 1)
        shape = shapes[0]
        if len(shape) != 4 or shape[1] != self.channels:
            raise ShapeMismatch(f"expects (N, {self.channels}, H, W), got {shape}")
        return [shape]

    def forward(self, inputs: list[Any]) -> list[Any]:
        out = np.empty(inputs[0].shape, np.float32)
        self.forward_into(inputs, [out])
        return [out]

    def forward_into(self, inputs: list[Any], outputs: list[np.ndarray]) -> None:
        x = inputs[0]
        n, c, h, w = x.shape
        means = np.matmul(x.reshape(n, c, h * w), self._average(h * w))       # (N, C)
        hidden = self._linear(means, self.reduce_weight, self.reduce_bias)  # (N, Cr)
        self._activate(self.reduce_tail, hidden)
        gate = self._linear(hidden, self.expand_weight, self.expand_bias)   # (N, C)
        self._activate(self.expand_tail, gate)
        np.multiply(x, gate.reshape(n, c, 1, 1), out=outputs[0])

    @staticmethod
    def _average(count: int) -> np.ndarray:
        """The vector of ``1/count`` that averages a row (the average pool's own)."""
        return np.full(count, 1 / count, dtype=np.float32)

    @staticmethod
    def _linear(rows: np.ndarray, weight: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
        result = np.matmul(rows, weight)
        if bias is not None:
            result += bias
        return result

    @staticmethod
    def _activate(tail: tuple[Layer, ...], rows: np.ndarray) -> None:
        """The activations on (N, channels) in place, seen as the (N, channels, 1, 1) image
        the convolution gave them (a view: ``rows`` is contiguous)."""
        image = rows.reshape(rows.shape + (1, 1))
        for layer in tail:
            layer.forward_into([image], [image])

    def flops(self, inputs: list[Spec], outputs: list[Spec]) -> int:
        n, c, h, w = inputs[0].shape
        return 2 * n * c * h * w + self.blas_flops(inputs, outputs)

    def blas_flops(self, inputs: list[Spec], outputs: list[Spec]) -> int:
        return 2 * inputs[0].shape[0] * (self.reduce_weight.size + self.expand_weight.size)

    def work_bytes(self, inputs: list[Spec], outputs: list[Spec]) -> int:
        return 3 * inputs[0].nbytes + 4 * (self.reduce_weight.size + self.expand_weight.size)


class FuseExcitations(Pass):
    """Squeeze-and-excitation blocks as one node, on the CPU."""

    name = "fuse_excitations"
    devices = frozenset({"cpu"})

    def run(self, program: Program, specs: Mapping[str, Spec], context: PassContext) -> Rewrite:
        fused, removed = fuse_excitations(program, specs)
        return Rewrite(fused, removed=removed, note=f"{len(removed) // 3} blocks")


def fuse_excitations(program: Program, specs: Mapping[str, Spec]) -> tuple[Program, frozenset[str]]:
    """``program`` with each squeeze-and-excitation block (a 1 x 1 average pool of ``x`` read
    only by a 1x1 convolution, read only by another, read only by ``mul`` with ``x``) as one
    :class:`SqueezeExcite` step where the ``mul`` was, and the operands it removed."""
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
        block = SqueezeExcite(pool.name, reduce, reduce_tail, expand, expand_tail)  # type: ignore[arg-type]
        replaced.update({k: None, k1: None, k2: None, k3: Step(block, (x,), product.outputs)})
        removed.update((pool.outputs[0], reduce_step.outputs[0], expand_step.outputs[0]))
    if not replaced:
        return program, frozenset()
    steps = tuple(replaced.get(k, step) for k, step in enumerate(program.steps) if replaced.get(k, step) is not None)
    return Program(program.graph, steps, program.inputs, program.outputs), frozenset(removed)


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
