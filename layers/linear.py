"""Products: ``nn.Linear``, ``F.linear``, ``torch.matmul/mm/mv/bmm``, ``torch.addmm/baddbmm``,
``torch.einsum``, ``torch.cross``.

::

    Linear          nn.Linear: weight stored, transposed once to (in, out)
    FLinear         F.linear: weight (and bias) arrive as inputs
    MatMul          torch.matmul: every broadcasting case (1-D x 1-D, 1-D x N-D, batched)
    ├── MM              torch.mm: 2-D x 2-D only
    ├── MV              torch.mv: 2-D x 1-D only
    └── BMM             torch.bmm: 3-D x 3-D, equal batches
    AddMM           torch.addmm: beta * input + alpha * (mat1 @ mat2)
    └── BAddBMM         torch.baddbmm: the same over a batch of 3-D matrices
    Einsum          torch.einsum: any equation, by np.einsum
    Cross           torch.cross: 3-vector cross products
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np

from graphexec.layers._conv_base import aligned
from graphexec.layers._samples import rows_kept
from graphexec.layers.base import Layer, Params, Shape, ShapeMismatch, normalize_axis
from graphexec.layers.registry import register


def broadcast(a: Shape, b: Shape, what: str) -> Shape:
    """NumPy/PyTorch broadcasting of two shapes; ShapeMismatch naming ``what`` if impossible."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x != y and 1 not in (x, y):
            raise ShapeMismatch(f"{what}: shapes {a} and {b} do not broadcast")
        out.append(y if x == 1 else x)
    return tuple(reversed(out))


def matmul_shape(a: Shape, b: Shape) -> Shape:
    """The shape of ``torch.matmul(a, b)``."""
    if not a or not b:
        raise ShapeMismatch(f"matmul needs tensors of rank >= 1, given shapes {a} and {b}")
    k_a = a[-1]
    k_b = b[0] if len(b) == 1 else b[-2]
    if k_a != k_b:
        raise ShapeMismatch(
            f"matmul: the inner sizes differ, {a} has {k_a} columns and {b} has {k_b} rows"
        )
    if len(a) == 1 and len(b) == 1:
        return ()
    if len(a) == 1:
        return b[:-2] + b[-1:]
    if len(b) == 1:
        return a[:-1]
    return broadcast(a[:-2], b[:-2], "matmul batch dims") + (a[-2], b[-1])


def _matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.matmul`` returning an array (not a numpy scalar) for 1-D x 1-D."""
    return np.asarray(np.matmul(a, b))


def _linear(x: np.ndarray, weight_t: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """``x @ weight_t + bias`` over the last dim of ``x``, as one 2-D matmul."""
    if x.ndim > 2:  # rows counted, not -1: a row of no features (in_features=0) has no size to divide
        out = np.matmul(x.reshape(math.prod(x.shape[:-1]), x.shape[-1]), weight_t)
        out = out.reshape(x.shape[:-1] + weight_t.shape[1:])
    else:
        out = _matmul(x, weight_t)
    if bias is not None:
        out += bias
    return out.astype(x.dtype, copy=False)


class _Product(Layer):
    """Matrix products cost 2 x (output elements) x (the contracted length)."""

    def flops(self, inputs, outputs) -> int:
        contracted = inputs[0].shape[-1] if inputs[0].shape else 1
        return 2 * math.prod(outputs[0].shape) * contracted

    def blas_flops(self, inputs, outputs) -> int:
        return self.flops(inputs, outputs)


@register("nn.Linear")
class Linear(_Product):
    """``x @ weight.T + bias`` with a stored (out, in) weight."""

    def batchwise(self, inputs, outputs) -> bool:
        return rows_kept(inputs, outputs) and len(inputs[0].shape) >= 2  # rows of (N, ..., in)

    def build(self, params: Params) -> None:
        self.in_features = params.int("in_features")
        self.out_features = params.int("out_features")
        if self.in_features < 0 or self.out_features < 0:
            raise params.error(f"in_features={self.in_features} and out_features={self.out_features} "
                               "must not be negative")
        weight = params.weight("weight", shape=(self.out_features, self.in_features))
        # Copied once, aligned: the .bin's views can be misaligned, and numpy's matmul then
        # leaves BLAS for a loop several times slower.
        self.weight_t = aligned(weight.T, weight.dtype)
        self.bias = None
        if params.bool("bias", params.has_attr("bias")):
            self.bias = aligned(params.weight("bias", shape=(self.out_features,)), weight.dtype)

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, 1)
        x = shapes[0]
        if not x or x[-1] != self.in_features:
            raise ShapeMismatch(f"expected an input whose last dim is {self.in_features}, given shape {x}")
        return [x[:-1] + (self.out_features,)]

    fresh_outputs = True
    writes_into = True

    def forward(self, inputs: list[Any]) -> list[Any]:
        return [_linear(inputs[0], self.weight_t, self.bias)]

    def forward_into(self, inputs: list[Any], outputs: list[np.ndarray]) -> None:
        x, out = inputs[0], outputs[0]
        if x.dtype != np.float32 or out.dtype != np.float32 or x.ndim < 2:
            super().forward_into(inputs, outputs)
            return
        rows = math.prod(x.shape[:-1])
        np.matmul(x.reshape(rows, x.shape[-1]), self.weight_t, out=out.reshape(rows, out.shape[-1]))
        if self.bias is not None:
            out += self.bias


@register("F.linear")
class FLinear(_Product):
    """``F.linear(input, weight, bias)`` with the weight (out, in) as a graph value."""

    def build(self, params: Params) -> None:
        names = self.input_names
        positional = not any(names)
        self._weight_at = names.index("weight") if "weight" in names else (1 if positional else None)
        self._bias_at = names.index("bias") if "bias" in names else (
            2 if positional and self.num_inputs > 2 else None)
        if self._weight_at is None or self._weight_at >= self.num_inputs:
            raise params.error("needs the weight as an input")
        if params.raw("bias", None) is not None:
            raise params.error(f"bias={params.raw('bias')!r}: expected None or a bias input")

    def _operands(self, values: list[Any]) -> tuple[Any, Any, Any]:
        bias = values[self._bias_at] if self._bias_at is not None else None
        return values[0], values[self._weight_at], bias  # type: ignore[index]

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, 2, 3)
        x, w, b = self._operands(shapes)
        if len(w) not in (1, 2):
            raise ShapeMismatch(f"weight should be 2-D (out, in) or 1-D, given shape {w}")
        if not x or x[-1] != w[-1]:
            raise ShapeMismatch(f"input {x} and weight {w} disagree on in_features")
        out = x[:-1] + w[:-1]
        if b is not None and (len(b) > len(out) or broadcast(out, b, "bias") != out):
            raise ShapeMismatch(f"bias {b} does not broadcast to the output {out}")
        return [out]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x, w, b = self._operands(inputs)
        w = np.asarray(w)
        if not w.flags.aligned:  # a misaligned matrix makes numpy's matmul skip BLAS
            w = aligned(w, w.dtype)
        return [_linear(x, w.T, None if b is None else np.asarray(b))]


@register("torch.matmul")
class MatMul(_Product):
    """``torch.matmul``: numpy's matmul has the same broadcasting rules."""

    def _check(self, a: Shape, b: Shape) -> None:
        """Extra rank rules of the stricter aliases (torch.mm, torch.bmm, torch.mv)."""

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, 2)
        self._check(shapes[0], shapes[1])
        return [matmul_shape(shapes[0], shapes[1])]

    def forward(self, inputs: list[Any]) -> list[Any]:
        return [_matmul(inputs[0], inputs[1])]


@register("torch.mm")
class MM(MatMul):
    """``torch.mm``: a 2-D matrix product."""

    def _check(self, a: Shape, b: Shape) -> None:
        if len(a) != 2 or len(b) != 2:
            raise ShapeMismatch(f"torch.mm needs two 2-D matrices, given shapes {a} and {b}")


@register("torch.mv")
class MV(MatMul):
    """``torch.mv``: matrix times vector."""

    def _check(self, a: Shape, b: Shape) -> None:
        if len(a) != 2 or len(b) != 1:
            raise ShapeMismatch(f"torch.mv needs a 2-D matrix and a 1-D vector, given shapes {a} and {b}")


@register("torch.bmm")
class BMM(MatMul):
    """``torch.bmm``: batched 3-D matrix product, no broadcasting."""

    def _check(self, a: Shape, b: Shape) -> None:
        if len(a) != 3 or len(b) != 3:
            raise ShapeMismatch(f"torch.bmm needs two 3-D tensors, given shapes {a} and {b}")
        if a[0] != b[0]:
            raise ShapeMismatch(f"torch.bmm needs equal batch sizes, given shapes {a} and {b}")


@register("torch.addmm")
class AddMM(_Product):
    """``beta * input + alpha * (mat1 @ mat2)``; ``input`` broadcasts to the product's shape."""

    #: Rank of mat1 and mat2.
    rank = 2

    def build(self, params: Params) -> None:
        self.alpha = params.float("alpha", 1.0)
        self.beta = params.float("beta", 1.0)

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, 3)
        c, a, b = shapes
        if len(a) != self.rank or len(b) != self.rank:
            raise ShapeMismatch(f"{self.type} needs {self.rank}-D matrices, given shapes {a} and {b}")
        if self.rank == 3 and a[0] != b[0]:
            raise ShapeMismatch(f"{self.type} needs equal batch sizes, given shapes {a} and {b}")
        out = matmul_shape(a, b)
        if len(c) > len(out) or broadcast(out, c, "input") != out:
            raise ShapeMismatch(f"input {c} does not broadcast to the product's shape {out}")
        return [out]

    def forward(self, inputs: list[Any]) -> list[Any]:
        c, a, b = inputs
        out = _matmul(a, b)
        if self.alpha != 1.0:
            out *= out.dtype.type(self.alpha)
        if self.beta != 0.0:  # beta == 0 ignores input, even its NaNs (as PyTorch does)
            out += c if self.beta == 1.0 else c * c.dtype.type(self.beta)
        return [out]


@register("torch.baddbmm")
class BAddBMM(AddMM):
    """``beta * input + alpha * bmm(batch1, batch2)``."""

    rank = 3


class EinsumEquation:
    """A parsed ``torch.einsum`` equation: each operand's labels, the output's, and the
    ellipsis (``...``) standing for broadcast dims."""

    def __init__(self, equation: str):
        lhs, arrow, rhs = equation.replace(" ", "").partition("->")
        self.terms = lhs.split(",")
        for term in self.terms + ([rhs] if arrow else []):
            letters = term.replace("...", "")
            if "." in letters or not all(c.isalpha() for c in letters):
                raise ValueError(f"bad einsum term {term!r} in {equation!r}")
        if arrow:
            self.output = rhs
        else:  # implicit: the labels seen once, in alphabetical order, after the ellipsis
            counts = Counter(c for term in self.terms for c in term.replace("...", ""))
            once = "".join(sorted(c for c, n in counts.items() if n == 1))
            self.output = ("..." if "..." in lhs else "") + once
        self.equation = f"{lhs}->{self.output}"

    def sizes(self, shapes: list[Shape]) -> tuple[dict[str, int], Shape]:
        """Each label's size and the broadcast shape of the ``...`` dims, for operands of ``shapes``."""
        if len(shapes) != len(self.terms):
            raise ShapeMismatch(
                f"einsum {self.equation!r} takes {len(self.terms)} operands, given {len(shapes)}"
            )
        sizes: dict[str, int] = {}
        ellipsis: Shape = ()
        for term, shape in zip(self.terms, shapes):
            head, dots, tail = term.partition("...")
            spread = len(shape) - len(head) - len(tail)
            if spread < 0 or (spread and not dots):
                dropped = spread > 0 and "..." not in self.equation
                hint = ("; pnnx drops '...' from the equations it writes: write the leading dims out, "
                        "as 'bij,bjk->bik'") if dropped else ""
                raise ShapeMismatch(f"einsum term {term!r} does not fit an operand of shape {shape}{hint}")
            if dots:
                ellipsis = broadcast(ellipsis, shape[len(head):len(head) + spread], "einsum '...' dims")
            for label, size in zip(head + tail, shape[:len(head)] + shape[len(head) + spread:]):
                known = sizes.setdefault(label, size)
                if size != known and 1 not in (size, known):
                    raise ShapeMismatch(f"einsum label {label!r} stands for sizes {known} and {size}")
                sizes[label] = max(size, known)
        return sizes, ellipsis

    def output_shape(self, shapes: list[Shape]) -> Shape:
        sizes, ellipsis = self.sizes(shapes)
        head, dots, tail = self.output.partition("...")
        missing = [c for c in head + tail if c not in sizes]
        if missing:
            raise ShapeMismatch(f"einsum output labels {missing} are on no operand")
        return tuple(sizes[c] for c in head) + (ellipsis if dots else ()) + tuple(sizes[c] for c in tail)


@register("torch.einsum")
class Einsum(Layer):
    """``torch.einsum(equation, *operands)``, by ``np.einsum`` (which hands pairwise
    contractions to BLAS)."""

    def build(self, params: Params) -> None:
        try:
            self.parsed = EinsumEquation(params.str("equation"))
        except ValueError as exc:
            raise params.error(str(exc)) from None

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        return [self.parsed.output_shape(shapes)]

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        return [np.result_type(*dtypes)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        dtype = np.result_type(*inputs)
        out = np.einsum(self.parsed.equation, *inputs, optimize=len(inputs) > 1)
        return [np.asarray(out, dtype=dtype, order="C")]

    def flops(self, inputs, outputs) -> int:
        """One multiply-add per combination of every label (and ``...`` dim) value."""
        sizes, ellipsis = self.parsed.sizes([spec.shape for spec in inputs])
        return 2 * math.prod(sizes.values()) * math.prod(ellipsis)

    def blas_flops(self, inputs, outputs) -> int:
        return self.flops(inputs, outputs) if len(inputs) > 1 else 0


@register("torch.cross")
class Cross(Layer):
    """The cross product of 3-vectors along ``dim`` (None: the first dim of size 3), the
    inputs broadcast together."""

    def build(self, params: Params) -> None:
        names = self.bind_inputs(params, ("input", "other"))
        self.input_at, self.other_at = names
        self.dim = None if params.raw("dim", None) is None else params.int("dim")

    def axis(self, shape: Shape) -> int:
        if self.dim is None:
            if 3 not in shape:
                raise ShapeMismatch(f"no dim of size 3 for a cross product in shape {shape}")
            return shape.index(3)
        axis = normalize_axis(self.dim, len(shape))
        if shape[axis] != 3:
            raise ShapeMismatch(f"dim {self.dim} of shape {shape} should have size 3 for a cross product")
        return axis

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, 2)
        both = broadcast(shapes[self.input_at], shapes[self.other_at], "cross")
        self.axis(both)
        return [both]

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        return [np.result_type(dtypes[self.input_at], dtypes[self.other_at])]

    def forward(self, inputs: list[Any]) -> list[Any]:
        a, b = np.broadcast_arrays(np.asarray(inputs[self.input_at]), np.asarray(inputs[self.other_at]))
        return [np.asarray(np.cross(a, b, axis=self.axis(a.shape)), order="C")]
