"""Operators whose number arguments the graph computes from sizes.

A dynamic export hands over an argument that depends on an input's size as an input of
its own: ``F.leaky_relu(x, x.size(1) / 10)`` becomes ``F.leaky_relu`` with ``$negative_slope``
bound to a ``pnnx.Expression``, ``torch.kthvalue(x, x.size(-1) // 2 + 1)`` an ``aten::kthvalue``
whose ``k`` is one. The layers read such arguments once, at build, as numbers. For these
operators :func:`layer_for` makes a :class:`ComputedArguments` instead, which builds the
operator's own layer for each set of values the plan knows (the sizes are known once the
input shapes are) and runs it on the values the run computed.

It runs on the CPU with numpy: the devices' kernels know only the layers' own classes.
"""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np

from graphexec.errors import LayerConfigError
from graphexec.ir import Operand, Operator
from graphexec.layers.activation import _Unary
from graphexec.layers.aten import NOT_CONSTANT, constant_input
from graphexec.layers.base import Layer, Params, ShapeMismatch, Spec, TensorSpec

#: Layers built for different values, kept per operator (one per input shape, in practice).
MAX_BUILT = 64


def layer_for(cls: type[Layer], op: Operator) -> Layer:
    """The layer computing ``op``: ``cls``'s own, or a :class:`ComputedArguments` where
    the graph computes number arguments the layer reads as constants."""
    if issubclass(cls, _Unary):
        named = [k for k, name in enumerate(op.input_names) if name and name != "input"]
        return ComputedArguments(op, cls, named) if named else cls(op)
    try:
        return cls(op)
    except LayerConfigError as exc:
        computed = _computed_numbers(op) if op.type.startswith("aten::") else []
        if not computed:
            raise
        return ComputedArguments(op, cls, computed, refusal=exc)


def _computed_numbers(op: Operator) -> list[int]:
    """The inputs after the first that a ``pnnx.Expression`` computes from other values
    (sizes, in practice), one number where the file annotates it."""
    params = Params(op)
    return [k for k, operand in enumerate(op.inputs)
            if k and operand.producer is not None and operand.producer.type == "pnnx.Expression"
            and operand.producer.inputs and constant_input(params, k) is NOT_CONSTANT
            and (operand.shape is None or _one_element(operand.shape))]


def _one_element(shape: tuple[Any, ...]) -> bool:
    return len(shape) <= 1 and all(isinstance(d, int) for d in shape) and math.prod(shape) == 1


class ComputedArguments(Layer):
    """``layer_class`` built anew for each set of values of the ``computed`` inputs: a
    ``$name`` input becomes the param ``name``, a positional one (``aten::*``) a constant."""

    def __init__(self, op: Operator, layer_class: type[Layer], computed: list[int],
                 refusal: LayerConfigError | None = None):
        self.op, self.layer_class, self.computed = op, layer_class, computed
        #: What the layer said when built on the graph's own arguments: raised again where
        #: a computed one turns out not to be one number.
        self.refusal = refusal
        self.by_name = bool(op.input_names[computed[0]])
        self.kept = [k for k in range(len(op.inputs)) if not (self.by_name and k in computed)]
        self.built: dict[tuple[Any, ...], Layer] = {}
        self.lock = threading.Lock()
        super().__init__(op)

    def __repr__(self) -> str:
        return f"{self.layer_class.__name__}({self.name!r}, {self.type!r}, computed arguments)"

    def infer(self, specs: list[Spec]) -> list[Spec]:
        self.expect_inputs(specs, len(self.op.inputs))
        values = []
        for k in self.computed:
            value = getattr(specs[k], "value", None)
            if self.refusal is not None and not (isinstance(specs[k], TensorSpec)
                                                 and _one_element(specs[k].shape)):  # type: ignore[union-attr]
                raise self.refusal
            if not isinstance(value, (bool, int, float)):
                raise ShapeMismatch(f"argument {self._argument(k)} is computed from values known only at run "
                                    f"time ({specs[k]}); graphexec needs it once the input shapes are known")
            values.append(value)
        try:
            layer = self._layer(tuple(values))
        except LayerConfigError as exc:
            raise ShapeMismatch(exc.reason) from None
        return layer.infer([specs[k] for k in self.kept])

    def forward(self, inputs: list[Any]) -> list[Any]:
        values = tuple(_number(inputs[k], self._argument(k)) for k in self.computed)
        return self._layer(values).forward([inputs[k] for k in self.kept])

    def _argument(self, k: int) -> str:
        return repr(self.op.input_names[k]) if self.op.input_names[k] else f"input {k}"

    def _layer(self, values: tuple[Any, ...]) -> Layer:
        layer = self.built.get(values)
        if layer is None:
            layer = self.layer_class(self._operator(values))
            with self.lock:
                if len(self.built) >= MAX_BUILT:
                    self.built.clear()
                self.built[values] = layer
        return layer

    def _operator(self, values: tuple[Any, ...]) -> Operator:
        """``op`` with the computed arguments given as the numbers ``values``."""
        op = self.op
        inputs, params = list(op.inputs), dict(op.params)
        for k, value in zip(self.computed, values):
            if self.by_name:
                params[op.input_names[k]] = value
            else:
                constant = Operator("pnnx.Expression", f"{op.name}.argument{k}", params={"expr": value})
                inputs[k] = Operand(inputs[k].name, inputs[k].shape, inputs[k].dtype, producer=constant)
        return Operator(op.type, op.name, [inputs[k] for k in self.kept], op.outputs, params, op.attrs,
                        [op.input_names[k] for k in self.kept], op.source)


def _number(value: Any, what: str) -> bool | int | float:
    array = np.asarray(value)
    if array.size != 1 or array.dtype.kind not in "biuf":
        raise ShapeMismatch(f"argument {what} should be one number, given {array.dtype} of shape {array.shape}")
    return array.reshape(-1)[0].item()  # type: ignore[no-any-return]
