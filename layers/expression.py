"""``pnnx.Expression``: scalar arithmetic, casts and sizes pnnx fused into one operator.

The language, its parser and PyTorch's promotion rules live in :mod:`graphexec.layers._expr`; this is
the layer around them. The expression is parsed once at build; a scalar result is a 0-d
array, a list result (``[int(size(@0,0)),-1]``) a Python list of them, and inference
reports known scalar values (sizes) as :class:`graphexec.layers._expr.ScalarSpec`.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from graphexec import dtypes
from graphexec.ir import INPUT_TYPE, Operator
from graphexec.layers import _expr, _promotion
from graphexec.layers._samples import broadcast_rows
from graphexec.layers.base import Layer, Params, ShapeMismatch
from graphexec.layers.registry import register
from graphexec.layers.specs import Spec

#: Root functions that are one numpy ufunc over their arguments: their result is always a
#: new array, and it can be written into given memory, even over an input (elementwise).
_UFUNC_ROOTS = frozenset(
    name for name, function in _expr.FUNCTIONS.items()
    if isinstance(function.apply, np.ufunc) and name not in ("floor_divide", "remainder", "fmod")
)


def expression_text(value: Any) -> str:
    """The ``expr`` param as text again (the param reader turns ``expr=2`` into an int,
    ``expr=[@0,@1]`` into a list)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "[" + ",".join(expression_text(v) for v in value) + "]"
    return _expr.to_text(_expr.Literal(value))


#: How pnnx names the inputs of a model it traced with TorchScript; one it converted from
#: ONNX keeps the ONNX graph's input names.
_TRACED_INPUT = re.compile(r"pnnx_input_\d+")


def converted_from_onnx(op: Operator) -> bool:
    """Whether the graph ``op`` belongs to came from ONNX, as the names of the model inputs
    it reads (through any chain of operators) say."""
    seen: set[int] = set()
    todo = [operand.producer for operand in op.inputs]
    while todo:
        producer = todo.pop()
        if producer is None or id(producer) in seen:
            continue
        seen.add(id(producer))
        if producer.type == INPUT_TYPE:
            return _TRACED_INPUT.fullmatch(producer.name) is None
        todo.extend(operand.producer for operand in producer.inputs)
    return False


@register("aten::IntImplicit")
class IntImplicit(Layer):
    """TorchScript's implicit conversion of a one-element tensor to an int (a scripted
    function's tensor used as a slice bound): ``int(@0)``, as an expression computes it, its
    value known to inference where the tensor's is."""

    def build(self, params: Params) -> None:
        if self.num_inputs != 1:
            raise params.error(f"takes 1 input, given {self.num_inputs}")
        self.tree = _expr.parse("int(@0)", 1)

    def infer(self, specs: list[Spec]) -> list[Spec]:
        self.expect_inputs(specs, 1)
        return [_expr.infer(self.tree, specs)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        return [_expr.to_output(_expr.evaluate(self.tree, inputs))]


@register("pnnx.Expression")
class Expression(Layer):
    """Evaluates ``expr`` (``add(@0,mul(@1,2))``) over the inputs with PyTorch's semantics.

    One repair of what pnnx loses: it writes ``torch.div(a, b, rounding_mode='floor')`` as a
    plain ``div``. True division never gives an integer tensor, so when pnnx annotated the
    result as an integer, its divisions were floor divisions, and are computed as such.
    (``rounding_mode='trunc'`` it writes as ``floor_divide``: that one cannot be told apart.)
    In a model pnnx converted from ONNX such a ``div`` is ONNX's integer ``Div``, which
    rounds toward zero, and is computed so.
    """

    def build(self, params: Params) -> None:
        if self.num_outputs != 1:
            raise params.error(f"an expression has one output, this one declares {self.num_outputs}")
        self.text = expression_text(params.raw("expr"))
        try:
            self.tree = _expr.parse(self.text, self.num_inputs)
        except _expr.ExpressionError as exc:
            raise params.error(f"expr={self.text}: {exc}") from None
        annotated = params.op.outputs[0].dtype or ""
        if dtypes.is_known(annotated) and dtypes.numpy_dtype(annotated).kind in "iu":
            rounding = "trunc_divide" if converted_from_onnx(params.op) else "floor_divide"
            self.tree = _expr.floor_divisions(self.tree, rounding)
        root = self.tree
        #: Whether the result is one ufunc applied last (``add(@0,@1)``): then it is always
        #: a new array (``@0`` alone is the input itself), and it can be written into memory given.
        self.fresh_outputs = self.writes_into = self.in_place = (
            isinstance(root, _expr.Call) and root.name in _UFUNC_ROOTS
        )

    def infer(self, specs: list[Spec]) -> list[Spec]:
        self.expect_inputs(specs, self.num_inputs)
        return [_expr.infer(self.tree, specs)]

    def batchwise(self, inputs, outputs) -> bool:
        # elementwise arithmetic over broadcast tensors; a size (of the batch, perhaps) or
        # a list of them is not
        return _expr.elementwise(self.tree) and broadcast_rows(inputs, outputs)

    def forward(self, inputs: list[Any]) -> list[Any]:
        if len(inputs) != self.num_inputs:
            raise ShapeMismatch(f"takes {self.num_inputs} inputs, got {len(inputs)}")
        return [_expr.to_output(_expr.evaluate(self.tree, inputs))]

    def forward_into(self, inputs: list[Any], outputs: list[np.ndarray]) -> None:
        out = outputs[0]
        if self.writes_into and len(inputs) == self.num_inputs:
            function = _expr.FUNCTIONS[self.tree.name]
            args = [_expr.evaluate(arg, inputs) for arg in self.tree.args]
            compute, result, weak = function.signature([_promotion.kind_of(a) for a in args])
            if not weak and compute == result == out.dtype:
                with np.errstate(all="ignore"):
                    function.apply(*(_promotion.cast(a, compute) for a in args), out=out)
                return
        super().forward_into(inputs, outputs)
