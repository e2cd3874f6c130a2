"""Elementwise operators pnnx keeps as calls: comparisons, logical and bitwise ops, clamp, where
(and the ``aten::clamp_min/clamp_max/zero`` it leaves unconverted), and the special and
sign functions it leaves as ``aten::`` calls (``erfinv``, ``lgamma``, ``xlogy``, ``copysign``
..., computed by :mod:`graphexec.layers._special` and :mod:`graphexec.layers._expr`).

Plain arithmetic (``+``, ``torch.maximum``, ``abs``, ``exp``, ``>>`` ...) never reaches
here: pnnx folds it into ``pnnx.Expression``. What stays a call binds each argument either
to an input (``$input=0 $other=1``) or to a scalar param (``other=0.5``, ``min=None``), and
promotes them the PyTorch way (a scalar param is a Python number, so ``int64 > 0.5``
compares in float32) with :mod:`graphexec.layers._promotion`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from graphexec.layers import _expr
from graphexec.layers._promotion import BOOL, cast, kind_of, result_type
from graphexec.layers.aten import constant_input
from graphexec.layers.base import Layer, Params, ShapeMismatch
from graphexec.layers.registry import register
from graphexec.layers.specs import Shape, Spec, TensorSpec


class _Arguments:
    """Where each named argument comes from: ``("input", k)``, ``("param", value)`` or missing."""

    def __init__(self, layer: Layer, params: Params, names: Sequence[str], optional: Sequence[str] = ()):
        unnamed = [i for i, name in enumerate(layer.input_names) if not name]
        self.sources: dict[str, tuple[str, Any]] = {}
        for name in names:
            if name in layer.input_names:
                self.sources[name] = ("input", layer.input_names.index(name))
            elif params.has(name):
                value = params.raw(name)
                if value is None and name not in optional:
                    raise params.error(f"{name}=None: {layer.type} needs a value for it")
                if value is not None and not isinstance(value, (bool, int, float)):
                    raise params.error(f"param {name}={value!r} should be a number")
                self.sources[name] = ("param", value)
            elif unnamed:  # a graph built without $name bindings: inputs in signature order
                self.sources[name] = ("input", unnamed.pop(0))
            elif name not in optional:
                raise params.error(f"needs {name!r}, as an input or a param")
        if unnamed:
            raise params.error(f"has {len(unnamed)} input(s) that match no argument of {', '.join(names)}")

    def values(self, inputs: list[Any], names: Sequence[str]) -> list[Any]:
        """The given arguments among ``names`` (None params and missing ones left out)."""
        found = []
        for name in names:
            source = self.sources.get(name)
            if source is None or (source[0] == "param" and source[1] is None):
                continue
            found.append(inputs[source[1]] if source[0] == "input" else source[1])
        return found

    def specs(self, specs: list[Spec], names: Sequence[str]) -> list[Any]:
        """Like :meth:`values`, with input specs in place of inputs (scalars as themselves)."""
        for spec in specs:
            if not isinstance(spec, TensorSpec):
                raise ShapeMismatch(f"takes tensors, got a sequence {spec}")
        return self.values(specs, names)


def _broadcast(name: str, operands: list[Any]) -> Shape:
    shapes = [o.shape for o in operands if isinstance(o, TensorSpec)]
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ShapeMismatch(f"{name}: cannot broadcast {' with '.join(map(str, shapes))}") from None


class _Function(Layer):
    """A function of :mod:`graphexec.layers._expr` over arguments ``arguments`` (``input``, ``other``)."""

    function: str = ""
    arguments: tuple[str, ...] = ("input", "other")

    def build(self, params: Params) -> None:
        self.args = _Arguments(self, params, self.arguments)
        self.fn = _expr.FUNCTIONS[self.function]

    def infer(self, specs: list[Spec]) -> list[Spec]:
        operands = self.args.specs(specs, self.arguments)
        shape = _broadcast(self.type, operands)
        try:
            _, dtype, _ = self.fn.signature([kind_of(o) for o in operands])
        except TypeError as exc:
            raise ShapeMismatch(f"{self.type}: {exc}") from exc
        return [TensorSpec(shape, dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        return [np.asarray(self.fn(*self.args.values(inputs, self.arguments)))]


def _function_layer(op_type: str, function: str, arguments: tuple[str, ...] = ("input", "other")) -> type:
    name = op_type.split(".", 1)[-1].split("::", 1)[-1].removeprefix("special_")
    cls = type(name.title().replace("_", ""), (_Function,), {
        "function": function,
        "arguments": arguments,
        "__doc__": f"``{op_type}``: elementwise {function}, with PyTorch's promotion.",
        "__module__": __name__,
    })
    return register(op_type)(cls)


Eq = _function_layer("torch.eq", "eq")
Ne = _function_layer("torch.ne", "ne")
Gt = _function_layer("torch.gt", "gt")
Ge = _function_layer("torch.ge", "ge")
Lt = _function_layer("torch.lt", "lt")
Le = _function_layer("torch.le", "le")
LogicalAnd = _function_layer("torch.logical_and", "logical_and")
LogicalOr = _function_layer("torch.logical_or", "logical_or")
LogicalXor = _function_layer("torch.logical_xor", "logical_xor")
LogicalNot = _function_layer("torch.logical_not", "logical_not", ("input",))
BitwiseAnd = _function_layer("torch.bitwise_and", "and")
BitwiseOr = _function_layer("torch.bitwise_or", "or")
BitwiseXor = _function_layer("torch.bitwise_xor", "xor")
BitwiseNot = _function_layer("torch.bitwise_not", "bitwise_not", ("input",))
# a shift by a negative count or by the width or more gives 0 (and -1 shifting a negative
# number right) in numpy as in PyTorch
BitwiseLeftShift = _function_layer("torch.bitwise_left_shift", "lshift")
BitwiseRightShift = _function_layer("torch.bitwise_right_shift", "rshift")

# what pnnx leaves as TorchScript calls, their arguments inputs in signature order
ErfInv = _function_layer("aten::erfinv", "erfinv", ("input",))
Erfc = _function_layer("aten::erfc", "erfc", ("input",))
ErfcX = _function_layer("aten::special_erfcx", "erfcx", ("input",))
LogNdtr = _function_layer("aten::special_log_ndtr", "log_ndtr", ("input",))
Entr = _function_layer("aten::special_entr", "entr", ("input",))
Exp2 = _function_layer("aten::exp2", "exp2", ("input",))
Log2 = _function_layer("aten::log2", "log2", ("input",))
FMax = _function_layer("aten::fmax", "fmax")
FMin = _function_layer("aten::fmin", "fmin")
FloatPower = _function_layer("aten::float_power", "float_power")
Ndtr = _function_layer("aten::special_ndtr", "ndtr", ("input",))
Ndtri = _function_layer("aten::special_ndtri", "ndtri", ("input",))
I0e = _function_layer("aten::special_i0e", "i0e", ("input",))
LGamma = _function_layer("torch.lgamma", "lgamma", ("input",))
Digamma = _function_layer("aten::digamma", "digamma", ("input",))
Polygamma = _function_layer("aten::polygamma", "polygamma", ("n", "input"))
MvLGamma = _function_layer("aten::mvlgamma", "mvlgamma", ("input", "p"))
Sinc = _function_layer("aten::sinc", "sinc", ("input",))
Sgn = _function_layer("aten::sgn", "sgn", ("input",))
SignBit = _function_layer("aten::signbit", "signbit", ("input",))
CopySign = _function_layer("aten::copysign", "copysign")
NextAfter = _function_layer("aten::nextafter", "nextafter")
Heaviside = _function_layer("aten::heaviside", "heaviside", ("input", "values"))
Gcd = _function_layer("aten::gcd", "gcd")
Lcm = _function_layer("aten::lcm", "lcm")
LogAddExp2 = _function_layer("aten::logaddexp2", "logaddexp2")
XLogY = _function_layer("aten::xlogy", "xlogy")
XLog1pY = _function_layer("aten::special_xlog1py", "xlog1py")


@register("aten::logit")
class Logit(Layer):
    """``torch.logit(x, eps)``: ``log(x / (1 - x))``, ``x`` first clamped to ``[eps, 1 - eps]``
    when ``eps`` is given (None: not clamped, so 0 and 1 give -inf and inf)."""

    def build(self, params: Params) -> None:
        if self.num_inputs != 2:
            raise params.error(f"takes 2 inputs (x, eps), given {self.num_inputs}")
        eps = constant_input(params, 1)
        if eps is not None and (isinstance(eps, bool) or not isinstance(eps, (int, float))):
            raise params.error("eps (input 1) must be a constant number or None")
        self.eps = eps
        self.log = _expr.FUNCTIONS["log"]

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x = specs[0]
        if not isinstance(x, TensorSpec):
            raise ShapeMismatch(f"takes a tensor, got a sequence {x}")
        _, dtype, _ = self.log.signature([kind_of(x)])
        return [TensorSpec(x.shape, dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        _, dtype, _ = self.log.signature([kind_of(x)])
        x = x.astype(dtype, copy=False)
        if self.eps is not None:
            x = np.clip(x, self.eps, 1 - self.eps)
        with np.errstate(divide="ignore", invalid="ignore"):
            return [np.asarray(np.log(x / (1 - x)), dtype=dtype)]


@register("torch.clamp")
class Clamp(Layer):
    """``min(max(x, min), max)``; each bound a tensor input, a number, ``inf`` or None.

    NaN in ``x`` stays NaN; a lower bound above the upper gives the upper, as in PyTorch.
    """

    def build(self, params: Params) -> None:
        self.args = _Arguments(self, params, ("input", "min", "max"), optional=("min", "max"))
        sources = self.args.sources
        given = [n for n in ("min", "max") if n in sources and sources[n] != ("param", None)]
        if not given:
            raise params.error("needs at least one of min and max")
        self.bounds = tuple(given)

    def infer(self, specs: list[Spec]) -> list[Spec]:
        operands = self.args.specs(specs, ("input",) + self.bounds)
        return [TensorSpec(_broadcast(self.type, operands), result_type([kind_of(o) for o in operands]))]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x, *bounds = self.args.values(inputs, ("input",) + self.bounds)
        dtype = result_type([kind_of(v) for v in (x, *bounds)])
        result = cast(x, dtype)
        with np.errstate(invalid="ignore"):
            for name, bound in zip(self.bounds, bounds):
                limit = cast(bound, dtype)
                result = np.maximum(result, limit) if name == "min" else np.minimum(result, limit)
        return [np.asarray(result)]


@register("aten::clamp_min", "aten::clamp_max")
class AtenClamp(Clamp):
    """TorchScript's ``clamp_min(x, bound)`` / ``clamp_max(x, bound)``, which pnnx leaves
    unconverted (Swin V2's cosine attention clamps a norm this way)."""

    def build(self, params: Params) -> None:
        bound = "min" if self.type.endswith("min") else "max"
        self.args = _Arguments(self, params, ("input", bound))
        self.bounds = (bound,)


@register("aten::zero")
class AtenZero(Layer):
    """TorchScript's ``zero_`` (pnnx leaves it unconverted): zeros shaped and typed as the input."""

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, 1)
        return [shapes[0]]

    def forward(self, inputs: list[Any]) -> list[Any]:
        return [np.zeros_like(np.asarray(inputs[0]))]


@register("Tensor.fill")
class Fill(Layer):
    """``x.fill_(value)``: the input's shape and dtype, every element ``value`` (a number or
    a 0-d tensor input)."""

    def build(self, params: Params) -> None:
        self.args = _Arguments(self, params, ("input", "value"))

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x, value = self.args.specs(specs, ("input", "value"))
        if isinstance(value, TensorSpec) and value.shape:
            raise ShapeMismatch(f"the fill value must be a single number, given shape {value.shape}")
        return [TensorSpec(x.shape, x.dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x, value = self.args.values(inputs, ("input", "value"))
        return [np.full(np.shape(x), np.asarray(value), dtype=np.asarray(x).dtype)]


@register("torch.where")
class Where(Layer):
    """``condition ? input : other``, either branch a tensor or a number, promoted together."""

    def build(self, params: Params) -> None:
        self.args = _Arguments(self, params, ("condition", "input", "other"))
        if self.args.sources["condition"][0] != "input":
            raise params.error("the condition must be a tensor input")

    def infer(self, specs: list[Spec]) -> list[Spec]:
        condition, *branches = self.args.specs(specs, ("condition", "input", "other"))
        if condition.dtype != BOOL:
            raise ShapeMismatch(f"the condition must be bool, got {condition.dtype}")
        shape = _broadcast(self.type, [condition, *branches])
        return [TensorSpec(shape, result_type([kind_of(b) for b in branches]))]

    def forward(self, inputs: list[Any]) -> list[Any]:
        condition, *branches = self.args.values(inputs, ("condition", "input", "other"))
        dtype = result_type([kind_of(b) for b in branches])
        a, b = (cast(v, dtype) for v in branches)
        return [np.asarray(np.where(condition, a, b))]


@register("torch.positive")
class Positive(Layer):
    """``torch.positive(x)``: ``x`` itself (PyTorch returns the same tensor); bool has no
    sign, so PyTorch refuses it, and so does this."""

    is_view = True

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x = specs[0] if len(specs) == 1 else None
        if not isinstance(x, TensorSpec):
            raise ShapeMismatch(f"takes one tensor, given {', '.join(map(str, specs))}")
        if x.dtype == BOOL:
            raise ShapeMismatch("positive is not defined for bool tensors")
        return [x]

    def forward(self, inputs: list[Any]) -> list[Any]:
        return [inputs[0]]
