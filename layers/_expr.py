"""pnnx's expression language: parsed once into a small tree, evaluated with numpy as PyTorch would.

pnnx folds scalar arithmetic, casts and ``x.size(d)`` into ``pnnx.Expression`` operators whose
``expr`` param is prefix notation over the operator's inputs::

    add(@0,mul(@1,2))   div(@0,3.0)   sqrt(add(@0,1.000000e-05))   [int(size(@0,0)),-1]

A token is ``@k`` (input k), a number (``2``, ``2.0``, ``1.000000e-05``, ``inf``, a complex
``1.000000e+00+2.000000e+00j``), ``True``/``False``/``None``, a function name, ``[``/``]``
around a list, or any other word, which is a string constant (``expr=ij``).

Parsing follows pnnx's own reader (pass_level5/eval_expression.cpp, the Python writer in
ir.cpp): parentheses and commas only separate tokens, and each function takes as many
arguments as its arity says. That matters because pnnx garbles functions its evaluation pass
does not know: ``log1p(@0)`` is written back as ``log1p,@0``; read as prefix notation with
arities it is the same tree again. Nothing here calls ``eval``: a model file is untrusted.

Types follow PyTorch's promotion (:mod:`graphexec.layers._promotion`): literals, ``size()`` and
``int()`` are Python scalars, so a float32 tensor times ``2.5`` stays float32 while an int64
tensor plus ``2.5`` is float32. Arithmetic among Python scalars alone is done at Python's
precision and stays a Python scalar; the expression's result, if a scalar, becomes a 0-d
array (int64, float32, bool or complex64), and inference reports its value when the shapes
alone decide it (:class:`ScalarSpec`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Union

import numpy as np

from graphexec.layers import _special
from graphexec.layers._promotion import (
    BOOL,
    BOOL_CAT,
    C128,
    COMPLEX_CAT,
    DIM,
    F32,
    F64,
    FLOAT_CAT,
    I64,
    INT_CAT,
    SCALAR,
    ZERO_DIM,
    Kind,
    cast,
    category,
    describe,
    kind_of,
    promote_types,
    python_scalar,
    result_type,
    scalar_output_dtype,
)
from graphexec.layers.base import ShapeMismatch
from graphexec.layers.specs import SequenceSpec, Spec, TensorSpec

#: Deepest nesting accepted; pnnx's real expressions are far shallower.
MAX_DEPTH = 200


class ExpressionError(ValueError):
    """The expression text is malformed, or uses something that does not exist."""


# ----------------------------------------------------------------------------------------
# functions
# ----------------------------------------------------------------------------------------
def _rule_same(common: np.dtype, weak: bool) -> tuple[np.dtype, np.dtype]:
    return common, common


def _rule_float(common: np.dtype, weak: bool) -> tuple[np.dtype, np.dtype]:
    """Integers and bools become the default float (Python's float for scalars)."""
    if category(common) >= FLOAT_CAT:
        return common, common
    out = F64 if weak else F32
    return out, out


def _rule_double(common: np.dtype, weak: bool) -> tuple[np.dtype, np.dtype]:
    """``torch.float_power``: always double precision (complex128 for complex operands)."""
    out = C128 if category(common) == COMPLEX_CAT else F64
    return out, out


def _rule_bool(common: np.dtype, weak: bool) -> tuple[np.dtype, np.dtype]:
    return common, BOOL


def _rule_bits(common: np.dtype, weak: bool) -> tuple[np.dtype, np.dtype]:
    if category(common) > INT_CAT:
        raise TypeError(f"needs integer or bool operands, got {common}")
    return common, common


def _rule_abs(common: np.dtype, weak: bool) -> tuple[np.dtype, np.dtype]:
    """The magnitude of a complex number is real."""
    if category(common) == COMPLEX_CAT:
        return common, (F64 if common == C128 else F32)
    return common, common


def _rule_square(common: np.dtype, weak: bool) -> tuple[np.dtype, np.dtype]:
    return (I64, I64) if common == BOOL else (common, common)


def _rule_rounding(common: np.dtype, weak: bool) -> tuple[np.dtype, np.dtype]:
    """Rounding a Python float gives a Python int (TorchScript's ``aten::floor.float -> int``)."""
    if weak and category(common) == FLOAT_CAT:
        return common, I64
    return common, common


def _keep_integers(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """Rounding leaves integer tensors alone (numpy's floor would make them float64)."""
    return lambda x: x if category(x.dtype) <= INT_CAT else fn(x)


def _sign(x: np.ndarray) -> np.ndarray:
    """PyTorch's sign: 0 for NaN and for -0.0; a bool stays itself."""
    if x.dtype == BOOL:
        return x
    return (x > 0).astype(x.dtype) - (x < 0).astype(x.dtype)


def _rsqrt(x: np.ndarray) -> np.ndarray:
    return np.reciprocal(np.sqrt(x))


def _sgn(x: np.ndarray) -> np.ndarray:
    """``torch.sgn``: the sign, and ``x / |x|`` (0 at 0) for complex numbers."""
    if x.dtype.kind != "c":
        return _sign(x)
    magnitude = np.abs(x)
    return np.where(magnitude == 0, 0, x / np.where(magnitude == 0, 1, magnitude)).astype(x.dtype)


def _trunc_divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Division rounded toward zero (ONNX's integer ``Div``, C's): the floor, one up where
    the signs differ and something remains; floats divided and truncated."""
    a, b = np.asarray(a), np.asarray(b)
    if np.result_type(a, b).kind not in "iu":
        return np.trunc(np.true_divide(a, b))
    with np.errstate(divide="ignore"):
        floor = np.floor_divide(a, b)
        behind = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
    return floor + behind.astype(floor.dtype)


def _heaviside(x: np.ndarray, values: np.ndarray) -> np.ndarray:
    """0 below zero, 1 above, ``values`` at zero (and 0 at NaN, as in PyTorch)."""
    return np.where(x == 0, values, x > 0).astype(np.result_type(x, values))


def _xlogy(log: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """``x * log(y)``, 0 where ``x`` is 0 unless ``y`` is NaN (``torch.xlogy``, ``xlog1py``)."""
    def apply(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.where((x == 0) & ~np.isnan(y), 0, x * log(y))
    return apply


@dataclass(frozen=True)
class Function:
    """An elementwise function: promote the operands, pick the compute dtype, apply numpy."""

    name: str
    arity: int
    apply: Callable[..., Any]
    rule: Callable[[np.dtype, bool], tuple[np.dtype, np.dtype]]

    def signature(self, kinds: Sequence[Kind]) -> tuple[np.dtype, np.dtype, bool]:
        """(compute dtype, result dtype, whether the result is a Python scalar)."""
        weak = all(tier == SCALAR for _, tier in kinds)
        if weak:
            common = python_scalar(kinds[0][0])
            for dtype, _ in kinds[1:]:
                common = promote_types(common, python_scalar(dtype))
        else:
            common = result_type(kinds)
        compute, out = self.rule(common, weak)
        return compute, (python_scalar(out) if weak else out), weak

    def __call__(self, *values: Any) -> Any:
        compute, out, weak = self.signature([kind_of(v) for v in values])
        with np.errstate(all="ignore"):
            result = np.asarray(self.apply(*(cast(v, compute) for v in values)))
        if weak and out.kind == "i":
            self._check_python_int(result, values)
        if result.dtype != out:
            with np.errstate(over="ignore"):  # a float64 result beyond float32 is inf, as in PyTorch
                result = result.astype(out)
        return result.item() if weak else result

    def _check_python_int(self, result: np.ndarray, values: Sequence[Any]) -> None:
        """A Python int result is kept in an int64: refuse one that it cannot hold (where
        numpy would turn a huge float into -2**63, or wrap around) rather than give another
        number. Integer arithmetic is checked against the same function in float64: a wrap
        moves the result by a multiple of 2**64, far more than float64 rounds."""
        if result.dtype.kind == "f":
            value = float(result)
            if not math.isfinite(value):
                raise ValueError(f"{self.name}({value}): cannot convert to an integer")
            if not -(2.0**63) <= value < 2.0**63:
                raise OverflowError(f"{self.name}(...) = {value:g} is beyond the range of int64")
            return
        try:
            with np.errstate(all="ignore"):
                estimate = float(self.apply(*(np.float64(v) for v in values)))
        except (TypeError, ValueError):  # bitwise functions take no floats: not checked
            return
        if not abs(estimate - float(result)) < 2.0**62:
            raise OverflowError(f"{self.name}(...) = {estimate:g} is beyond the range of int64")


_UNARY: dict[str, tuple[Callable[..., Any], Callable[[np.dtype, bool], tuple[np.dtype, np.dtype]]]] = {
    "abs": (np.abs, _rule_abs),
    "neg": (np.negative, _rule_same),
    "sign": (_sign, _rule_same),
    "square": (lambda x: x * x, _rule_square),
    "ceil": (_keep_integers(np.ceil), _rule_rounding),
    "floor": (_keep_integers(np.floor), _rule_rounding),
    "round": (_keep_integers(np.round), _rule_rounding),
    "trunc": (_keep_integers(np.trunc), _rule_rounding),
    "acos": (np.arccos, _rule_float),
    "acosh": (np.arccosh, _rule_float),
    "asin": (np.arcsin, _rule_float),
    "asinh": (np.arcsinh, _rule_float),
    "atan": (np.arctan, _rule_float),
    "atanh": (np.arctanh, _rule_float),
    "cos": (np.cos, _rule_float),
    "cosh": (np.cosh, _rule_float),
    "sin": (np.sin, _rule_float),
    "sinh": (np.sinh, _rule_float),
    "tan": (np.tan, _rule_float),
    "tanh": (np.tanh, _rule_float),
    "exp": (np.exp, _rule_float),
    "expm1": (np.expm1, _rule_float),
    "log": (np.log, _rule_float),
    "log10": (np.log10, _rule_float),
    "log1p": (np.log1p, _rule_float),
    "sqrt": (np.sqrt, _rule_float),
    "rsqrt": (_rsqrt, _rule_float),
    "reciprocal": (np.reciprocal, _rule_float),
    "erf": (_special.erf, _rule_float),
    "erfc": (_special.erfc, _rule_float),
    "erfinv": (_special.erfinv, _rule_float),
    "erfcx": (_special.erfcx, _rule_float),
    "ndtr": (_special.ndtr, _rule_float),
    "log_ndtr": (_special.log_ndtr, _rule_float),
    "entr": (_special.entr, _rule_float),
    "exp2": (np.exp2, _rule_float),
    "log2": (np.log2, _rule_float),
    "ndtri": (_special.ndtri, _rule_float),
    "lgamma": (_special.lgamma, _rule_float),
    "digamma": (_special.digamma, _rule_float),
    "i0e": (_special.i0e, _rule_float),
    "sinc": (_special.sinc, _rule_float),
    "sgn": (_sgn, _rule_same),
    "signbit": (np.signbit, _rule_bool),
    "logical_not": (np.logical_not, _rule_bool),
    "bitwise_not": (np.invert, _rule_bits),
}

_BINARY: dict[str, tuple[Callable[..., Any], Callable[[np.dtype, bool], tuple[np.dtype, np.dtype]]]] = {
    "add": (np.add, _rule_same),
    "sub": (np.subtract, _rule_same),
    "mul": (np.multiply, _rule_same),
    "div": (np.true_divide, _rule_float),
    "floor_divide": (np.floor_divide, _rule_same),
    "trunc_divide": (_trunc_divide, _rule_same),  # graphexec's own: ONNX's integer Div
    "remainder": (np.remainder, _rule_same),  # Python's sign rule, like torch.remainder
    "fmod": (np.fmod, _rule_same),  # C's sign rule, like torch.fmod
    "pow": (np.power, _rule_same),
    "max": (np.maximum, _rule_same),
    "maximum": (np.maximum, _rule_same),
    "min": (np.minimum, _rule_same),
    "minimum": (np.minimum, _rule_same),
    "atan2": (np.arctan2, _rule_float),
    "logaddexp": (np.logaddexp, _rule_float),
    "logaddexp2": (np.logaddexp2, _rule_float),
    "fmax": (np.fmax, _rule_same),  # NaN loses, unlike maximum
    "fmin": (np.fmin, _rule_same),
    "float_power": (np.power, _rule_double),
    "copysign": (np.copysign, _rule_float),
    "nextafter": (np.nextafter, _rule_float),
    "heaviside": (_heaviside, _rule_same),
    "xlogy": (_xlogy(np.log), _rule_float),
    "xlog1py": (_xlogy(np.log1p), _rule_float),
    "polygamma": (_special.polygamma, _rule_float),
    "mvlgamma": (_special.mvlgamma, _rule_float),
    "gcd": (np.gcd, _rule_bits),
    "lcm": (np.lcm, _rule_bits),
    "and": (np.bitwise_and, _rule_bits),
    "or": (np.bitwise_or, _rule_bits),
    "xor": (np.bitwise_xor, _rule_bits),
    "lshift": (np.left_shift, _rule_bits),
    "rshift": (np.right_shift, _rule_bits),
    "eq": (np.equal, _rule_bool),
    "ne": (np.not_equal, _rule_bool),
    "gt": (np.greater, _rule_bool),
    "ge": (np.greater_equal, _rule_bool),
    "lt": (np.less, _rule_bool),
    "le": (np.less_equal, _rule_bool),
    "logical_and": (np.logical_and, _rule_bool),
    "logical_or": (np.logical_or, _rule_bool),
    "logical_xor": (np.logical_xor, _rule_bool),
}


class _Power(Function):
    """``pow``: a tensor to a number exponent of 0.5 or -0.5 is its square root or reciprocal
    square root, as in PyTorch (``pow(-inf, -0.5)`` is NaN there, C's and numpy's 0); to a
    tensor exponent, C's ``pow``."""

    def __call__(self, *values: Any) -> Any:
        base, exponent = values
        root = isinstance(exponent, float) and exponent in (0.5, -0.5)
        if root and isinstance(base, np.ndarray) and base.dtype.kind == "f":
            return FUNCTIONS["sqrt" if exponent > 0 else "rsqrt"](base)
        return super().__call__(*values)


FUNCTIONS: dict[str, Function] = {
    **{name: Function(name, 1, fn, rule) for name, (fn, rule) in _UNARY.items()},
    **{name: Function(name, 2, fn, rule) for name, (fn, rule) in _BINARY.items() if name != "pow"},
    "pow": _Power("pow", 2, *_BINARY["pow"]),
}

#: ``torch.<dtype>(x)``, what pnnx writes for ``Tensor.to`` on a scalar.
TORCH_DTYPES: dict[str, np.dtype] = {
    f"torch.{name}": np.dtype(dtype)
    for names, dtype in (
        (("float", "float32"), np.float32),
        (("double", "float64"), np.float64),
        (("half", "float16"), np.float16),
        (("long", "int64"), np.int64),
        (("int", "int32"), np.int32),
        (("short", "int16"), np.int16),
        (("int8",), np.int8),
        (("uint8",), np.uint8),
        (("bool",), np.bool_),
        (("cfloat", "complex64"), np.complex64),
        (("cdouble", "complex128"), np.complex128),
    )
    for name in names
}

#: Python's own casts: ``int(x)`` is what pnnx writes for ``aten::Int``.
PYTHON_CASTS: dict[str, type] = {"int": int, "float": float, "bool": bool}

#: Every name that is a function (the rest are string constants).
KNOWN_NAMES = frozenset(FUNCTIONS) | frozenset(TORCH_DTYPES) | frozenset(PYTHON_CASTS) | {"size"}


# ----------------------------------------------------------------------------------------
# the tree
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Input:
    index: int


@dataclass(frozen=True)
class Literal:
    value: Union[bool, int, float, complex, str, None]


@dataclass(frozen=True)
class Call:
    name: str
    args: tuple[Node, ...]


@dataclass(frozen=True)
class ListNode:
    items: tuple[Node, ...]


Node = Union[Input, Literal, Call, ListNode]


def elementwise(node: Node) -> bool:
    """Whether ``node`` is elementwise arithmetic and casts over its inputs and literals:
    no ``size``, no list."""
    if isinstance(node, Call):
        return node.name != "size" and all(elementwise(arg) for arg in node.args)
    return isinstance(node, (Input, Literal))


def to_text(node: Node) -> str:
    """The canonical pnnx text of ``node`` (floats written so they read back as floats)."""
    if isinstance(node, Input):
        return f"@{node.index}"
    if isinstance(node, ListNode):
        return "[" + ",".join(to_text(i) for i in node.items) + "]"
    if isinstance(node, Call):
        return f"{node.name}(" + ",".join(to_text(a) for a in node.args) + ")"
    value = node.value
    if isinstance(value, float):
        if math.isfinite(value):
            return repr(value)
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, complex):
        return f"{value.real!r}{value.imag:+}j"
    return str(value)


def floor_divisions(node: Node, to: str = "floor_divide") -> Node:
    """``node`` with every ``div`` made a ``floor_divide`` (or ``to``; see
    :class:`graphexec.layers.expression.Expression`)."""
    if isinstance(node, Call):
        name = to if node.name == "div" else node.name
        return Call(name, tuple(floor_divisions(a, to) for a in node.args))
    if isinstance(node, ListNode):
        return ListNode(tuple(floor_divisions(i, to) for i in node.items))
    return node


# ----------------------------------------------------------------------------------------
# parsing
# ----------------------------------------------------------------------------------------
# pnnx writes NaN as "nan.0" (its float format adds ".0" to what has no point), inf as "inf"
_UNSIGNED = r"(?:(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?|(?:inf|nan)(?:\.0+)?)"
_NUMBER = rf"[+-]?{_UNSIGNED}"
_INT_RE = re.compile(r"[+-]?\d+")
_FLOAT_RE = re.compile(_NUMBER, re.IGNORECASE)
_COMPLEX_RE = re.compile(rf"(?:{_NUMBER})?[+-]{_UNSIGNED}j", re.IGNORECASE)
_INPUT_RE = re.compile(r"@(\d+)")
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_PIECES = re.compile(r"[\[\](),]|[^\[\](),]+")


def _float(text: str) -> float:
    """A float token, pnnx's ``nan.0`` included."""
    return float(text.split(".")[0] if text.lstrip("+-")[:1] in "iInN" else text)


@dataclass(frozen=True)
class _Token:
    text: str
    called: bool  # written as a call: directly followed by "("


def tokenize(text: str) -> list[_Token]:
    """Split like pnnx: ``(``, ``)`` and ``,`` separate; ``[`` and ``]`` are tokens."""
    if not text:
        raise ExpressionError("the expression is empty")
    pieces = _PIECES.findall(text)
    tokens: list[_Token] = []
    open_brackets: list[str] = []
    for i, piece in enumerate(pieces):
        if piece in "([":
            open_brackets.append(piece)
        elif piece in ")]":
            if not open_brackets or open_brackets.pop() != {")": "(", "]": "["}[piece]:
                raise ExpressionError(f"unbalanced {piece!r}")
        if piece in "[]":
            tokens.append(_Token(piece, False))
        elif piece not in "(),":
            called = i + 1 < len(pieces) and pieces[i + 1] == "("
            tokens.append(_Token(piece, called))
    if open_brackets:
        raise ExpressionError(f"unclosed {open_brackets[-1]!r}")
    return tokens


def parse(text: str, num_inputs: int) -> Node:
    """The tree of ``text``, checked: known functions, full arities, inputs ``@0..@num_inputs-1``."""
    return _Parser(tokenize(text), num_inputs).parse()


class _Parser:
    """Prefix notation: a function token is followed by its arguments, ``[`` ... ``]`` is a list."""

    def __init__(self, tokens: list[_Token], num_inputs: int):
        self.tokens = tokens
        self.position = 0
        self.num_inputs = num_inputs

    def parse(self) -> Node:
        node = self.expression(0)
        if self.position != len(self.tokens):
            extra = self.tokens[self.position].text
            raise ExpressionError(f"unexpected {extra!r} after a complete expression")
        return node

    def _at_end_of_group(self) -> bool:
        return self.position == len(self.tokens) or self.tokens[self.position].text == "]"

    def expression(self, depth: int) -> Node:
        if depth > MAX_DEPTH:
            raise ExpressionError(f"nested deeper than {MAX_DEPTH} levels")
        if self.position == len(self.tokens):
            raise ExpressionError("the expression ends where an argument was expected")
        token = self.tokens[self.position]
        self.position += 1
        text = token.text
        if text == "[":
            items = []
            while not self._at_end_of_group():
                items.append(self.expression(depth + 1))
            if self.position == len(self.tokens):
                raise ExpressionError("unclosed '['")
            self.position += 1
            return ListNode(tuple(items))
        if text == "]":
            raise ExpressionError("']' where an argument was expected")
        if text.startswith("@"):
            match = _INPUT_RE.fullmatch(text)
            if match is None:
                raise ExpressionError(f"bad input reference {text!r}")
            index = int(match.group(1))
            if index >= self.num_inputs:
                raise ExpressionError(
                    f"{text} refers to input {index}, but the operator has {self.num_inputs} input(s)"
                )
            return Input(index)
        literal = _literal(text)
        if literal is not None:
            return literal
        if text in KNOWN_NAMES and (token.called or not self._at_end_of_group()):
            return self.call(text, depth)
        if token.called or _NAME_RE.fullmatch(text) is None:
            what = "function" if token.called else "token"
            raise ExpressionError(f"unknown {what} {text!r}")
        return Literal(text)  # a string constant, like expr=ij for meshgrid's indexing

    def call(self, name: str, depth: int) -> Call:
        if name == "size":
            args = [self.expression(depth + 1)]
            if not self._at_end_of_group():  # size(x) (the whole shape) is legal last
                args.append(self.expression(depth + 1))
        else:
            arity = FUNCTIONS[name].arity if name in FUNCTIONS else 1
            args = []
            for i in range(arity):
                if self._at_end_of_group():
                    raise ExpressionError(f"{name}() takes {arity} argument(s), got {i}")
                args.append(self.expression(depth + 1))
        for i, arg in enumerate(args):
            not_a_number = isinstance(arg, Literal) and isinstance(arg.value, (str, type(None)))
            if isinstance(arg, ListNode) or not_a_number:
                raise ExpressionError(f"{name}() cannot take {_describe_node(arg)} as argument {i + 1}")
        return Call(name, tuple(args))


def _describe_node(node: Node) -> str:
    if isinstance(node, ListNode):
        return "a list"
    return describe(node.value) if isinstance(node, Literal) else "that"


def _literal(text: str) -> Literal | None:
    if text in ("True", "False"):
        return Literal(text == "True")
    if text == "None":
        return Literal(None)
    if _INT_RE.fullmatch(text):
        return Literal(int(text))
    if _FLOAT_RE.fullmatch(text):
        return Literal(_float(text))
    if _COMPLEX_RE.fullmatch(text):
        return Literal(complex(text))
    return None


# ----------------------------------------------------------------------------------------
# evaluation
# ----------------------------------------------------------------------------------------
def evaluate(node: Node, inputs: Sequence[Any]) -> Any:
    """Run the tree on input values; scalars stay Python scalars, lists are Python lists."""
    if isinstance(node, Input):
        value = inputs[node.index]
        return np.asarray(value) if isinstance(value, np.generic) else value
    if isinstance(node, Literal):
        return node.value
    if isinstance(node, ListNode):
        return [evaluate(item, inputs) for item in node.items]
    args = [evaluate(arg, inputs) for arg in node.args]
    return call(node.name, args)


def call(name: str, args: list[Any]) -> Any:
    """Apply function ``name`` to evaluated arguments."""
    function = FUNCTIONS.get(name)
    if function is not None:
        return function(*args)
    if name == "size":
        return _size(*args)
    if name in PYTHON_CASTS:
        return PYTHON_CASTS[name](_single(name, args[0]))
    dtype = TORCH_DTYPES[name]
    value = args[0]
    if isinstance(value, np.ndarray):
        return value.astype(dtype)
    return {BOOL_CAT: bool, INT_CAT: int, FLOAT_CAT: float, COMPLEX_CAT: complex}[category(dtype)](value)


def _single(name: str, value: Any) -> Any:
    """The one number in ``value`` (a scalar, or a tensor of one element)."""
    kind_of(value)
    if isinstance(value, np.ndarray):
        if value.size != 1:
            raise ValueError(f"{name}() of a tensor of shape {value.shape}: only one element converts")
        return value.reshape(()).item()
    return value


def _size(tensor: Any, dim: Any = None) -> Any:
    if not isinstance(tensor, np.ndarray):
        raise TypeError(f"size() of {describe(tensor)}: needs a tensor")
    return _size_of(tensor.shape, dim)


def _size_of(shape: tuple[int, ...], dim: Any) -> Any:
    """``size(x, dim)`` for a tensor of ``shape``: a Python int (the whole shape if no dim)."""
    if dim is None:
        return [int(d) for d in shape]
    d = _single("size", dim)
    if isinstance(d, bool) or not isinstance(d, int):
        raise TypeError(f"size(): the dim must be an integer, got {d!r}")
    if not -len(shape) <= d < len(shape):
        raise ShapeMismatch(f"size(): dim {d} is out of range for a tensor of rank {len(shape)}")
    return int(shape[d])


def to_output(value: Any) -> Any:
    """The value an operator hands on: a Python scalar becomes a 0-d array, lists recurse."""
    if isinstance(value, list):
        return [to_output(v) for v in value]
    if isinstance(value, (bool, int, float, complex)):
        with np.errstate(over="ignore"):  # a float past float32's range is inf, as in PyTorch
            return np.asarray(value, dtype=scalar_output_dtype(kind_of(value)[0]))
    if isinstance(value, np.generic):
        return np.asarray(value)
    return value


# ----------------------------------------------------------------------------------------
# shape and dtype inference
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ScalarSpec(TensorSpec):
    """A value of one element whose content inference already knows: a size, a folded
    constant (0-d, or of shape (1,) as pnnx writes a 0-d buffer).

    Consumers that need a value before running (``Tensor.reshape``'s ``shape`` list) can read
    ``value``; it is a Python scalar (or a string / None for pnnx's constant expressions).
    """

    value: Any


_UNKNOWN: Any = object()


@dataclass(frozen=True)
class _Abstract:
    """What inference knows of a value: shape, dtype, tier, and the value itself if computable."""

    shape: tuple[int, ...]
    dtype: np.dtype
    tier: int
    value: Any = _UNKNOWN

    @property
    def known(self) -> bool:
        return self.value is not _UNKNOWN


def _from_spec(spec: Spec) -> Any:
    if isinstance(spec, SequenceSpec):
        return [_from_spec(item) for item in spec.items]
    value = getattr(spec, "value", _UNKNOWN)
    if value is not _UNKNOWN and not isinstance(value, (bool, int, float, complex)):
        return value  # a string or None from a constant expression
    if value is not _UNKNOWN:  # a one-element tensor's value (a buffer pnnx writes as (1)i64) keeps its shape
        value = np.asarray(value, dtype=spec.dtype).reshape(spec.shape)
    return _Abstract(spec.shape, spec.dtype, DIM if spec.shape else ZERO_DIM, value)


def _literal_abstract(value: Any) -> Any:
    if isinstance(value, (str, type(None))):
        return value
    dtype, _ = kind_of(value)
    return _Abstract((), dtype, SCALAR, value)


def infer(node: Node, specs: Sequence[Spec]) -> Spec:
    """The spec of the expression's result for input specs (ShapeMismatch if it cannot run)."""
    return _to_spec(_infer(node, [_from_spec(s) for s in specs]))


def _to_spec(value: Any) -> Spec:
    if isinstance(value, list):
        return SequenceSpec(tuple(_to_spec(v) for v in value))
    if not isinstance(value, _Abstract):
        return ScalarSpec((), np.dtype(object), value)
    dtype = scalar_output_dtype(value.dtype) if value.tier == SCALAR else value.dtype
    if value.known and math.prod(value.shape) == 1:
        known = value.value
        return ScalarSpec(value.shape, dtype, known.item() if isinstance(known, np.ndarray) else known)
    return TensorSpec(value.shape, dtype)


def _infer(node: Node, inputs: list[Any]) -> Any:
    if isinstance(node, Input):
        return inputs[node.index]
    if isinstance(node, Literal):
        return _literal_abstract(node.value)
    if isinstance(node, ListNode):
        return [_infer(item, inputs) for item in node.items]
    args = [_infer(arg, inputs) for arg in node.args]
    for i, arg in enumerate(args):
        if not isinstance(arg, _Abstract):
            raise ShapeMismatch(
                f"{node.name}(): argument {i + 1} is {describe(arg)}, expected a number or a tensor"
            )
    if all(a.known and math.prod(a.shape) == 1 for a in args):
        try:
            value = call(node.name, [a.value for a in args])
        except (TypeError, ValueError, ArithmeticError) as exc:
            raise ShapeMismatch(f"{node.name}(): {exc}") from exc
        if isinstance(value, list):
            return [_literal_abstract(v) for v in value]
        kind = kind_of(value)
        return _Abstract(np.shape(value), kind[0], kind[1], value)
    return _infer_call(node.name, args)


def _infer_call(name: str, args: list[_Abstract]) -> Any:
    function = FUNCTIONS.get(name)
    if function is not None:
        try:
            shape = tuple(np.broadcast_shapes(*(a.shape for a in args)))
        except ValueError:
            shown = " with ".join(str(a.shape) for a in args)
            raise ShapeMismatch(f"{name}(): cannot broadcast {shown}") from None
        try:
            _, out, weak = function.signature([(a.dtype, a.tier) for a in args])
        except TypeError as exc:
            raise ShapeMismatch(f"{name}(): {exc}") from exc
        return _Abstract(shape, out, SCALAR if weak else (DIM if shape else ZERO_DIM))
    if name == "size":
        tensor = args[0]
        if tensor.tier == SCALAR:
            raise ShapeMismatch("size() of a Python scalar: needs a tensor")
        if len(args) == 1:
            return [_Abstract((), I64, SCALAR, int(d)) for d in tensor.shape]
        dim = args[1]
        if not dim.known:
            raise ShapeMismatch("size(): the dim is only known when the model runs")
        try:
            return _Abstract((), I64, SCALAR, _size_of(tensor.shape, dim.value))
        except (TypeError, ValueError) as exc:
            raise ShapeMismatch(str(exc)) from exc
    value = args[0]
    if name in PYTHON_CASTS:
        if math.prod(value.shape) != 1:
            raise ShapeMismatch(f"{name}() of a tensor of shape {value.shape}: only one element converts")
        dtype = {int: I64, float: F64, bool: BOOL}[PYTHON_CASTS[name]]
        return _Abstract((), dtype, SCALAR)
    dtype = TORCH_DTYPES[name]
    if value.tier == SCALAR:
        return _Abstract((), python_scalar(dtype), SCALAR)
    return _Abstract(value.shape, dtype, value.tier)
