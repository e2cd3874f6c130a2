"""A producer and the elementwise operators chained after it
(:class:`~graphexec.layers.chain.Chain`) as one kernel: the producer's.

The producers are those that store each output element once, in one kernel: convolutions
(``kernels/gemm.cl``, ``kernels/depthwise.cl``) and matrix products (``nn.Linear``,
``F.linear``, ``torch.matmul``, the einsums the GEMM runs). Their stores call
``STORE_VALUE(v, i)`` on the value (after the bias) and the element's index in the
contiguous output; here that macro becomes a generated function applying every link in
turn, and ``STORE_ARGS`` the tensors the links read besides the running value, each one
read at the element's index (same shape) or through broadcast strides. The generated
source goes before the producer's kernel file; programs are cached by their whole source,
like the others.

A link is an activation of ``kernels/activations.cl`` (its params written into the source)
or a ``pnnx.Expression`` over the running value, other tensors and numbers (the C text of
:mod:`graphexec.devices.opencl.ops.expression`): residual adds, scales, biases.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from typing import Any

from graphexec.devices.opencl.ops.base import F32, Op, implements, op_for
from graphexec.devices.opencl.ops.conv import ConvOp
from graphexec.devices.opencl.ops.elementwise import ACTIVATIONS, activation_call
from graphexec.devices.opencl.ops.expression import (
    MAX_RANK,
    ExpressionOp,
    broadcast_strides,
    collapse,
)
from graphexec.devices.opencl.ops.linear import EinsumOp, FLinearOp, LinearOp, MatMulOp
from graphexec.devices.opencl.programs import kernel_source
from graphexec.layers.chain import Chain
from graphexec.layers.expression import Expression
from graphexec.layers.specs import TensorSpec

#: The producers whose one kernel stores through STORE_VALUE.
HEADS: tuple[type, ...] = (*ConvOp.layer_classes, *LinearOp.layer_classes, *FLinearOp.layer_classes,
                           *MatMulOp.layer_classes, *EinsumOp.layer_classes)


@dataclass(frozen=True)
class Store:
    """A chain's generated store for one set of input shapes: the source to put before the
    producer's kernel file, and which chain inputs its arguments read (and how)."""

    source: str
    #: (chain input, its element strides over the collapsed output dims, or None: read at i).
    extras: tuple[tuple[int, tuple[int, ...] | None], ...]
    #: The collapsed output dims 1..3 the strided reads decompose ``i`` by (empty: none do).
    dims: tuple[int, ...]

    def args(self, inputs: list[Any]) -> tuple[Any, ...]:
        found: list[Any] = []
        for k, strides in self.extras:
            found += [inputs[k].buffer, inputs[k].offset]
            if strides is not None:
                found += strides
        return tuple(found) + self.dims


def _link_reason(link: Any) -> str | None:
    """Why the store cannot apply ``link`` (None: it can): its op's own check."""
    layer = link.layer
    if type(layer) not in ACTIVATIONS and not isinstance(layer, Expression):
        return f"{layer.type} is not an elementwise operator a store applies"
    return op_for(layer).check(layer)  # type: ignore[union-attr]


def _link_code(link: Any, chain_inputs: dict[int, str]) -> str:
    """The C statements that apply ``link`` to ``r``."""
    layer = link.layer
    if type(layer) in ACTIVATIONS:
        return f"    r = {activation_call(layer, 'r')};\n"
    expression = op_for(layer)
    assert isinstance(expression, ExpressionOp)
    compiled = expression.compiled(layer)
    loads = " ".join(f"const float v{k} = {'r' if link.sources[k] is None else chain_inputs[link.sources[k]]};"
                     for k in compiled.used)
    return f"    {{ {loads} r = {compiled.text}; }}\n"


def make_store(layer: Chain, shapes: list[tuple[int, ...]]) -> Store:
    """The store of ``layer`` for inputs of ``shapes`` (see the module doc)."""
    out = tuple(layer.infer([_spec(s) for s in shapes])[0].shape)  # type: ignore[union-attr]
    read = sorted({s for link in layer.links for s in link.sources if s is not None})
    strided = [k for k in read if tuple(shapes[k]) != out]
    dims, strides = collapse(out, [broadcast_strides(tuple(shapes[k]), out) for k in strided])
    pad = MAX_RANK - len(dims)
    dims = (1,) * pad + dims
    by_input = {k: (0,) * pad + st for k, st in zip(strided, strides)}
    params, passed, names = [], [], {}
    for k in read:
        name = f"chain{k}"  # names no kernel the store goes into uses
        params += [f"__global const float* restrict {name}", f"const int {name}_off"]
        passed += [name, f"{name}_off"]
        if k in by_input:
            params += [f"const int {name}_s{j}" for j in range(MAX_RANK)]
            passed += [f"{name}_s{j}" for j in range(MAX_RANK)]
            index = " + ".join(f"i{j} * {name}_s{j}" for j in range(MAX_RANK))
            names[k] = f"{name}[{name}_off + {index}]"
        else:
            names[k] = f"{name}[{name}_off + i]"
    if strided:
        params += ["const int chain_d1", "const int chain_d2", "const int chain_d3"]
        passed += ["chain_d1", "chain_d2", "chain_d3"]
    body = ""
    if strided:
        body += ("    int q = i;\n    const int i3 = q % chain_d3; q /= chain_d3;\n"
                 "    const int i2 = q % chain_d2; q /= chain_d2;\n    const int i1 = q % chain_d1;\n"
                 "    const int i0 = q / chain_d1;\n")
    body += "".join(_link_code(link, names) for link in layer.links)
    source = (
        kernel_source("activations") + kernel_source("expression")
        + "\n// The store of a chain of elementwise operators (devices/opencl/ops/chain.py).\n"
        + "#define STORE_ARGS " + "".join(", " + p for p in params) + "\n"
        + "#define STORE_VALUE(v, i) chain_store((v), (i)" + "".join(", " + p for p in passed) + ")\n"
        + "inline float chain_store(float r, const int i" + "".join(", " + p for p in params) + ") {\n"
        + body + "    return r;\n}\n\n"
    )
    extras = tuple((k, tuple(by_input[k]) if k in by_input else None) for k in read)
    return Store(source, extras, tuple(dims[1:]) if strided else ())


def _spec(shape: tuple[int, ...]) -> TensorSpec:
    return TensorSpec(tuple(shape), F32)


@implements(Chain)
class ChainOp(Op):
    """A chain's producer, run through its op with the chain's store."""

    def __init__(self) -> None:
        self._stores: weakref.WeakKeyDictionary[Any, dict[tuple, Store]] = weakref.WeakKeyDictionary()

    def store(self, layer: Chain, shapes: list[tuple[int, ...]]) -> Store:
        per_layer = self._stores.get(layer)
        if per_layer is None:
            per_layer = self._stores[layer] = {}
        key = tuple(tuple(s) for s in shapes)
        found = per_layer.get(key)
        if found is None:
            found = per_layer[key] = make_store(layer, list(key))
        return found

    def check(self, layer):
        head = layer.head
        if type(head) not in HEADS:
            return f"{head.type} does not store each output once in one kernel; nothing is chained after it"
        reason = op_for(head).check(head)  # type: ignore[union-attr]
        if reason is not None:
            return reason
        for link in layer.links:
            reason = _link_reason(link)
            if reason is not None:
                return reason
        return None

    def check_inputs(self, layer, specs):
        reason = super().check_inputs(layer, specs)
        if reason is not None:
            return reason
        head = layer.head
        reason = op_for(head).check_inputs(head, specs[:layer.head_inputs])  # type: ignore[union-attr]
        if reason is not None:
            return reason
        try:
            out = tuple(layer.infer(list(specs))[0].shape)
        except ValueError as exc:
            return str(exc)
        extras = sorted({s for link in layer.links for s in link.sources if s is not None})
        if extras and isinstance(head, EinsumOp.layer_classes):
            einsum = op_for(head)
            assert isinstance(einsum, EinsumOp)
            if not einsum.stores_in_order(head, [s.shape for s in specs[:layer.head_inputs]]):
                return "the einsum stores its product in another order than its output's: links reading other tensors run after it"
        shapes = [specs[k].shape for k in extras if specs[k].shape != out]
        if len(collapse(out, [broadcast_strides(s, out) for s in shapes])[0]) > MAX_RANK:
            return f"the chain's broadcast needs more than {MAX_RANK} dims once merged"
        if math.prod(out) == 0:
            return "an empty output"
        return None

    def run(self, launch, layer, inputs):
        store = self.store(layer, [t.shape for t in inputs])
        head = layer.head
        launch.store_source, launch.store_args = store.source, store.args(inputs)
        try:
            return op_for(head).run(launch, head, inputs[:layer.head_inputs])  # type: ignore[union-attr]
        finally:
            launch.store_source, launch.store_args = "", ()
