"""``pnnx.Expression`` on the device: the parsed tree (layers/_expr.py) becomes an OpenCL C
expression, and one kernel evaluates it over the broadcast inputs; ``addcmul``,
``addcdiv``, ``torch.where`` and ``masked_fill`` are such expressions too.

Supported: float32 tensor inputs (broadcasting to one output shape of at most four dims
once adjacent dims are merged) combined by the elementwise arithmetic and math functions
below, with number literals. Sub-expressions without an input are folded first with the
CPU layer's own evaluation (Python precision, as PyTorch does for scalars). Anything else
(comparisons, bit ops, casts, ``size()``, lists, integer or complex values) stays on the
CPU: :meth:`ExpressionOp.check` says why.
"""

from __future__ import annotations

import math
import weakref
from typing import Any

import numpy as np

from graphexec.devices.opencl.ops.base import F32, Op, implements
from graphexec.devices.opencl.programs import kernel_source
from graphexec.layers import _expr
from graphexec.layers.aten_math import AddCDiv, AddCMul
from graphexec.layers.elementwise import Where
from graphexec.layers.expression import Expression
from graphexec.layers.indexing import MaskedFill

#: pnnx function -> OpenCL C template over the arguments' C text.
FUNCTIONS: dict[str, str] = {
    # unary
    "abs": "fabs({0})", "neg": "(-{0})", "sign": "ge_sign({0})", "square": "ge_square({0})",
    "ceil": "ceil({0})", "floor": "floor({0})", "round": "rint({0})", "trunc": "trunc({0})",
    "acos": "acos({0})", "acosh": "acosh({0})", "asin": "asin({0})", "asinh": "asinh({0})",
    "atan": "atan({0})", "atanh": "atanh({0})", "cos": "cos({0})", "cosh": "cosh({0})",
    "sin": "sin({0})", "sinh": "sinh({0})", "tan": "tan({0})", "tanh": "tanh({0})",
    "exp": "exp({0})", "expm1": "expm1({0})", "log": "log({0})", "log10": "log10({0})",
    "log1p": "log1p({0})", "sqrt": "sqrt({0})", "rsqrt": "rsqrt({0})",
    "reciprocal": "ge_reciprocal({0})", "erf": "erf({0})",
    # binary
    "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "div": "({0} / {1})",
    "pow": "pow({0}, {1})", "max": "ge_maximum({0}, {1})", "maximum": "ge_maximum({0}, {1})",
    "min": "ge_minimum({0}, {1})", "minimum": "ge_minimum({0}, {1})", "atan2": "atan2({0}, {1})",
    "logaddexp": "ge_logaddexp({0}, {1})", "remainder": "ge_remainder({0}, {1})",
    "fmod": "fmod({0}, {1})", "floor_divide": "ge_floor_divide({0}, {1})",
}

BOOL = np.dtype(np.bool_)

#: Dims the generated kernel indexes (after merging adjacent dims).
MAX_RANK = 4


class Unsupported(Exception):
    """The tree uses something the device does not compute."""


def _has_input(node: _expr.Node) -> bool:
    if isinstance(node, _expr.Input):
        return True
    if isinstance(node, _expr.Call):
        return any(_has_input(a) for a in node.args)
    if isinstance(node, _expr.ListNode):
        return any(_has_input(i) for i in node.items)
    return False


def refused_number(value: Any) -> str | None:
    """Why ``value`` cannot be written into a kernel as a float32 literal, or None."""
    try:
        float_literal(value)
    except Unsupported as exc:
        return str(exc)
    return None


def float_literal(value: Any) -> str:
    """``value`` rounded to float32, as an exact OpenCL C literal."""
    if isinstance(value, complex) or not isinstance(value, (bool, int, float)):
        raise Unsupported(f"the constant {value!r} is not a real number")
    v = float(np.float32(value)) if math.isfinite(float(value)) and abs(float(value)) < 3.5e38 else float(value)
    if math.isnan(v):
        return "NAN"
    if math.isinf(v):
        return "INFINITY" if v > 0 else "(-INFINITY)"
    text = float.hex(v) + "f"
    return f"({text})" if v < 0 else text


def to_c(node: _expr.Node, used: set[int]) -> str:
    """The OpenCL C text of ``node`` over ``v0, v1, ...`` (the inputs it reads go in ``used``)."""
    if isinstance(node, _expr.Input):
        used.add(node.index)
        return f"v{node.index}"
    if not _has_input(node):
        if isinstance(node, _expr.ListNode):
            raise Unsupported("a list is not an elementwise value")
        try:
            value = _expr.evaluate(node, [])
        except (ArithmeticError, LookupError, TypeError, ValueError) as exc:  # the CPU layer's to raise
            raise Unsupported(f"{_expr.to_text(node)} cannot be folded: {exc}") from None
        return float_literal(value)
    if isinstance(node, _expr.Call):
        template = FUNCTIONS.get(node.name)
        if template is None:
            raise Unsupported(f"{node.name}() is not implemented on OpenCL")
        if node.name == "pow":
            exponent = node.args[1]
            if isinstance(exponent, _expr.Literal) and type(exponent.value) is int and abs(exponent.value) < 2**31:
                return f"pown({to_c(node.args[0], used)}, {exponent.value})"
            if not _has_input(exponent):  # a number: 0.5 and -0.5 are roots, as on the CPU
                return f"ge_pow_number({to_c(node.args[0], used)}, {to_c(exponent, used)})"
        return template.format(*(to_c(a, used) for a in node.args))
    raise Unsupported(f"{_expr.to_text(node)} is not an elementwise value")


def collapse(shape: tuple[int, ...], strides: list[tuple[int, ...]]) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """Drop unit dims and merge adjacent dims that every operand walks contiguously."""
    dims = [(d, [s[i] for s in strides]) for i, d in enumerate(shape) if d != 1]
    merged: list[tuple[int, list[int]]] = []
    for d, st in dims:
        if merged:
            pd, pst = merged[-1]
            if all(ps == s * d for ps, s in zip(pst, st)):
                merged[-1] = (pd * d, st)
                continue
        merged.append((d, st))
    out_shape = tuple(d for d, _ in merged)
    return out_shape, [tuple(st[k] for _, st in merged) for k in range(len(strides))]


def broadcast_strides(shape: tuple[int, ...], out: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides of a contiguous ``shape`` read as ``out`` (0 where broadcast)."""
    full = (1,) * (len(out) - len(shape)) + tuple(shape)
    strides, step = [], 1
    for d, o in zip(reversed(full), reversed(out)):
        strides.append(step if d == o and d != 1 else 0)
        step *= d
    return tuple(reversed(strides))


class _Compiled:
    """The C expression of one layer and the inputs it reads."""

    def __init__(self, layer: Expression):
        used: set[int] = set()
        self.error: str | None = None
        self.text = ""
        try:
            self.text = to_c(layer.tree, used)
        except Unsupported as exc:
            self.error = str(exc)
        if self.error is None and not used:
            self.error = "the expression reads no tensor"
        self.used = sorted(used)


def kernel_text(expr: str, used: list[int], full: list[bool], types: list[str] | None = None) -> str:
    """One kernel computing ``expr``: ``full[j]`` says input ``used[j]`` has the output's
    shape (read at the output's index), otherwise it is read through 4-D strides;
    ``types[j]`` is its C element type (float unless given: uchar for a bool mask)."""
    params = ["__global float* restrict out", "const int out_off", "const int n",
              "const int d1", "const int d2", "const int d3"]
    loads = []
    for k, is_full, ctype in zip(used, full, types or ["float"] * len(used)):
        params += [f"__global const {ctype}* restrict in{k}", f"const int off{k}"]
        if is_full:
            loads.append(f"    const {ctype} v{k} = in{k}[off{k} + i];")
        else:
            params += [f"const int s{k}_{j}" for j in range(MAX_RANK)]
            index = " + ".join(f"i{j} * s{k}_{j}" for j in range(MAX_RANK))
            loads.append(f"    const {ctype} v{k} = in{k}[off{k} + {index}];")
    decompose = ""
    if not all(full):
        decompose = ("    int r = i;\n    const int i3 = r % d3; r /= d3;\n    const int i2 = r % d2; r /= d2;\n"
                     "    const int i1 = r % d1;\n    const int i0 = r / d1;\n")
    return (
        kernel_source("expression")
        + "\n__kernel void expression(" + ", ".join(params) + ") {\n"
        + "    const int i = get_global_id(0);\n    if (i >= n) return;\n"
        + decompose + "\n".join(loads) + f"\n    out[out_off + i] = {expr};\n}}\n"
    )


@implements(Expression)
class ExpressionOp(Op):
    def __init__(self) -> None:
        self._compiled: weakref.WeakKeyDictionary[Any, _Compiled] = weakref.WeakKeyDictionary()

    def compiled(self, layer: Expression) -> _Compiled:
        found = self._compiled.get(layer)
        if found is None:
            found = self._compiled[layer] = _Compiled(layer)
        return found

    def check(self, layer):
        return self.compiled(layer).error

    def check_shapes(self, layer, specs):
        return unbroadcastable([specs[k].shape for k in self.compiled(layer).used])

    def run(self, launch, layer, inputs):
        compiled = self.compiled(layer)
        what = f"kernel for pnnx.Expression {layer.text}"
        return [enqueue_elementwise(launch, compiled.text, compiled.used, [inputs[k] for k in compiled.used], what)]


def unbroadcastable(shapes: list[tuple[int, ...]]) -> str | None:
    """Why tensors of ``shapes`` cannot be combined by :func:`enqueue_elementwise`, or None."""
    try:
        out = tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        return f"input shapes {shapes} do not broadcast"
    rank = len(collapse(out, [broadcast_strides(s, out) for s in shapes])[0])
    if rank > MAX_RANK:
        return f"the broadcast needs {rank} dims once merged; the kernel indexes {MAX_RANK}"
    return None


def enqueue_elementwise(launch, text: str, used: list[int], tensors: list[Any], what: str) -> Any:
    """The output of C expression ``text`` over ``v<k>`` (k in ``used``, read from the
    matching ``tensors``, broadcast together; a bool tensor is read as uchar): one
    generated kernel, built once per text."""
    out_shape = tuple(np.broadcast_shapes(*(t.shape for t in tensors)))
    out = launch.output(0, out_shape)
    n = out.size
    full = [t.shape == out_shape for t in tensors]
    shape, strides = collapse(out_shape, [broadcast_strides(t.shape, out_shape) for t in tensors])
    pad = MAX_RANK - len(shape)
    dims = (1,) * pad + shape
    types = ["uchar" if t.dtype == np.bool_ else "float" for t in tensors]
    built = launch.device.source_program(kernel_text(text, used, full, types), what=what)
    args: list[Any] = [out.buffer, out.offset, n, dims[1], dims[2], dims[3]]
    for t, is_full, st in zip(tensors, full, strides):
        args += [t.buffer, t.offset]
        if not is_full:
            args += [0] * pad + list(st)
    launch.enqueue_1d(built, "expression", n, *args)
    return out


@implements(AddCMul, AddCDiv)
class AddCOp(Op):
    """``x + value * (t1 * t2)`` (``addcmul``) or ``x + value * (t1 / t2)`` (``addcdiv``),
    broadcast together, as one generated elementwise kernel: ResMLP's and LayerScale's
    affine maps, ConvNeXt V2's response norm."""

    def check(self, layer):
        return refused_number(layer.value)

    def check_inputs(self, layer, specs):
        return super().check_inputs(layer, specs[:3])  # the value is a constant the layer holds

    def check_shapes(self, layer, specs):
        return unbroadcastable([s.shape for s in specs[:3]])

    def run(self, launch, layer, inputs):
        op = "*" if isinstance(layer, AddCMul) else "/"
        text = f"(v0 + (v1 {op} v2) * {float_literal(layer.value)})"
        return [enqueue_elementwise(launch, text, [0, 1, 2], inputs[:3], f"kernel for {layer.type}")]


@implements(Where)
class WhereOp(Op):
    """``torch.where(condition, input, other)``, either branch a float32 tensor or a number:
    GPT-Neo's causal mask, a mask's fill before a softmax."""

    float_only = False

    def check(self, layer):
        for name in ("input", "other"):
            kind, value = layer.args.sources[name]
            if kind == "param" and (reason := refused_number(value)) is not None:
                return reason
        return None

    def check_shapes(self, layer, specs):
        for name, allowed in (("condition", BOOL), ("input", F32), ("other", F32)):
            kind, at = layer.args.sources[name]
            if kind == "input" and specs[at].dtype != allowed:
                return f"{name} is {specs[at].dtype}; {allowed} runs here"
        if all(layer.args.sources[name][0] == "param" for name in ("input", "other")):
            return "two numbers make no float32 tensor here"
        return unbroadcastable([s.shape for s in specs])

    def run(self, launch, layer, inputs):
        terms, used = [], []
        for name in ("condition", "input", "other"):
            kind, value = layer.args.sources[name]
            if kind == "input":
                terms.append(f"v{value}")
                used.append(value)
            else:
                terms.append(float_literal(value))
        text = f"({terms[0]} ? {terms[1]} : {terms[2]})"
        return [enqueue_elementwise(launch, text, used, [inputs[k] for k in used], f"kernel for {layer.type}")]


@implements(MaskedFill)
class MaskedFillOp(Op):
    """``x.masked_fill(mask, value)`` with a float32 ``x`` and a number: attention masks
    filled with -inf (DeBERTa's, BERT's extended masks)."""

    float_only = False

    def check(self, layer):
        if layer.value_input is not None:
            return "a value given as a tensor is left to the CPU"
        return refused_number(layer.value)

    def check_shapes(self, layer, specs):
        if specs[0].dtype != F32 or specs[1].dtype != BOOL:
            return f"input {specs[0].dtype} and mask {specs[1].dtype}: float32 and bool run here"
        return unbroadcastable([specs[0].shape, specs[1].shape])

    def run(self, launch, layer, inputs):
        text = f"(v1 ? {float_literal(layer.value)} : v0)"
        return [enqueue_elementwise(launch, text, [0, 1], inputs[:2], f"kernel for {layer.type}")]
