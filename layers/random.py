"""Random numbers, where a model draws them while it runs (a noise added to a pooled mean,
a latent sampled from its mean and spread), as pnnx writes the calls it keeps:

::

    Randn            torch.randn            standard normal of a size
    RandnLike        torch.randn_like       standard normal of the input's shape
    Normal           torch.normal           ``x.normal_(mean, std)``: normal of the input's shape
    AtenNormal       aten::normal           of numbers and a size, or of a mean and a std tensor
    AtenRand         aten::rand             uniform in [0, 1) of a size
    AtenRandLike     aten::rand_like        uniform in [0, 1) of the input's shape
    AtenUniform      aten::uniform          ``x.uniform_(a, b)``: uniform in [a, b)
    AtenExponential  aten::exponential      ``x.exponential_(rate)``
    AtenRandint      aten::randint          integers in [low, high) of a size
    AtenRandintLike  aten::randint_like     integers in [low, high) of the input's shape
    AtenRandperm     aten::randperm         a permutation of 0 .. n-1
    AtenBernoulli    aten::bernoulli        1 with the input's probability, else 0
    AtenPoisson      aten::poisson          Poisson counts of the input's rates
    AtenMultinomial  aten::multinomial      indices drawn by each row's weights

pnnx folds a draw of a size fixed at export into a constant (one draw, at export); these
stay where a size is dynamic or the draw reads an input. Each operator draws from numpy's
generator of its own, seeded from its name, so a model loaded twice draws the same numbers
in the same order of runs, and the sequential and concurrent executors alike (no other
operator's draws come between). The numbers are numpy's, not PyTorch's. A draw is never
folded into a constant ahead of the runs (:attr:`Layer.random`).
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np

from graphexec.layers.aten import NOT_CONSTANT, constant_input
from graphexec.layers.base import Layer, Params, ShapeMismatch, Spec, TensorSpec
from graphexec.layers.creation import _dtype_param, _number, _sized, _Sized, scalar_type
from graphexec.layers.registry import register
from graphexec.layers.shape import runtime_ints
from graphexec.layers.specs import SequenceSpec

_FLOAT32 = np.dtype(np.float32)


class _Random(Layer):
    """A layer that draws: its generator, seeded from its name."""

    random = True

    def seed(self, params: Params, counts: tuple[int, ...], arguments: str) -> None:
        """The generator, once the inputs are as many as one of ``counts`` (what TorchScript's
        overloads of the call take: ``arguments``)."""
        if self.num_inputs not in counts:
            raise params.error(f"takes {' or '.join(map(str, counts))} inputs ({arguments}), "
                               f"given {self.num_inputs}")
        self.generator = np.random.default_rng(zlib.crc32(self.name.encode()))

    def normal(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        return self._floats(self.generator.standard_normal, shape, dtype)

    def uniform(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        return self._floats(self.generator.random, shape, dtype)

    def _floats(self, draw: Any, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        if dtype.kind != "f":
            raise ShapeMismatch(f"{self.type} draws floating point numbers, asked for {dtype}")
        wide = np.dtype(np.float64) if dtype == np.float64 else _FLOAT32
        return draw(shape, dtype=wide).astype(dtype, copy=False)


def _like(spec: Spec, dtype: np.dtype | None) -> TensorSpec:
    if not isinstance(spec, TensorSpec):
        raise ShapeMismatch(f"expected a tensor, given {spec}")
    return TensorSpec(spec.shape, dtype or spec.dtype)


def _aten_dtype_at(params: Params, index: int) -> np.dtype | None:
    """A constant ``dtype`` argument of an ``aten::`` call (None: not given)."""
    code = constant_input(params, index)
    if code is NOT_CONSTANT:
        raise params.error(f"its dtype (input {index}) must be a constant")
    try:
        return None if code is None else scalar_type(code)
    except ShapeMismatch as error:
        raise params.error(str(error)) from None


@register("torch.randn")
class Randn(_Random, _Sized):
    """``torch.randn(size)`` (float32 unless a dtype is given)."""

    def build(self, params: Params) -> None:
        self.read_size(params)
        self.seed(params, (0,) if self.size is not None else (1,), "size")
        self.dtype = _dtype_param(params) or _FLOAT32

    def infer(self, specs: list[Spec]) -> list[Spec]:
        return [self.sized(specs, self.dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        return [self.normal(self.runtime_size(inputs), self.dtype)]


@register("torch.randn_like")
class RandnLike(_Random):
    """``torch.randn_like(x)``: of ``x``'s shape, of its dtype unless one is given."""

    def build(self, params: Params) -> None:
        self.seed(params, (1,), "input")
        (self.x_at,) = self.bind_inputs(params, ["input"])
        self.dtype = _dtype_param(params)

    def infer(self, specs: list[Spec]) -> list[Spec]:
        return [_like(specs[self.x_at], self.dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[self.x_at])
        return [self.normal(x.shape, self.dtype or x.dtype)]


@register("aten::rand")
class AtenRand(_Random):
    """``torch.rand(size)`` as TorchScript leaves it: size, dtype, layout, device, pin_memory."""

    def build(self, params: Params) -> None:
        self.seed(params, (5,), "size, dtype, layout, device, pin_memory")
        self.dtype = _aten_dtype_at(params, 1) or _FLOAT32

    def infer(self, specs: list[Spec]) -> list[Spec]:
        return [_sized(specs[0], "size", self.dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        return [self.uniform(runtime_ints(inputs[0], "size"), self.dtype)]


@register("aten::rand_like")
class AtenRandLike(_Random):
    """``torch.rand_like(x)``: x, dtype, layout, device, pin_memory, memory_format."""

    def build(self, params: Params) -> None:
        self.seed(params, (6,), "self, dtype, layout, device, pin_memory, memory_format")
        self.dtype = _aten_dtype_at(params, 1)

    def infer(self, specs: list[Spec]) -> list[Spec]:
        return [_like(specs[0], self.dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        return [self.uniform(x.shape, self.dtype or x.dtype)]


class _Integers(_Random):
    """Integers drawn evenly from ``[low, high)`` (``low`` 0 where not given)."""

    def integers(self, low: Any, high: Any, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        low, high = int(_number(low)), int(_number(high))
        if low >= high:
            raise ShapeMismatch(f"{self.type}: low ({low}) must be below high ({high})")
        return self.generator.integers(low, high, shape).astype(dtype)


@register("aten::randint")
class AtenRandint(_Integers):
    """``torch.randint([low,] high, size)``: (low,) high, size, dtype, layout, device,
    pin_memory; int64 unless a dtype is given."""

    def build(self, params: Params) -> None:
        self.seed(params, (6, 7), "(low,) high, size, dtype, layout, device, pin_memory")
        self.high_at = self.num_inputs - 6
        self.size_at = self.high_at + 1
        self.dtype = _aten_dtype_at(params, self.size_at + 1) or np.dtype(np.int64)

    def infer(self, specs: list[Spec]) -> list[Spec]:
        return [_sized(specs[self.size_at], "size", self.dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        low = inputs[0] if self.high_at else 0
        size = runtime_ints(inputs[self.size_at], "size")
        return [self.integers(low, inputs[self.high_at], size, self.dtype)]


@register("aten::randint_like")
class AtenRandintLike(_Integers):
    """``torch.randint_like(x, [low,] high)``: x, (low,) high, dtype, layout, device,
    pin_memory, memory_format; of ``x``'s dtype unless one is given."""

    def build(self, params: Params) -> None:
        self.seed(params, (7, 8), "self, (low,) high, dtype, layout, device, pin_memory, memory_format")
        self.high_at = self.num_inputs - 6
        self.dtype = _aten_dtype_at(params, self.high_at + 1)

    def infer(self, specs: list[Spec]) -> list[Spec]:
        return [_like(specs[0], self.dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        low = inputs[1] if self.high_at == 2 else 0
        return [self.integers(low, inputs[self.high_at], x.shape, self.dtype or x.dtype)]


@register("aten::bernoulli")
class AtenBernoulli(_Random):
    """``torch.bernoulli(p)``: 1 where a uniform draw falls below each probability of ``p``,
    else 0, of ``p``'s shape and dtype; inputs p, generator (None), or x, one probability
    for every element of x, generator."""

    def build(self, params: Params) -> None:
        self.seed(params, (2, 3), "self, (p,) generator")

    def infer(self, specs: list[Spec]) -> list[Spec]:
        out = _like(specs[0], None)
        if out.dtype.kind != "f":
            raise ShapeMismatch(f"aten::bernoulli takes floating point probabilities, given {specs[0]}")
        return [out]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        p = x if self.num_inputs == 2 else np.asarray(_number(inputs[1]))
        if np.any((p < 0) | (p > 1)) or np.any(np.isnan(p)):
            raise ShapeMismatch("aten::bernoulli: probabilities must lie in [0, 1]")
        return [(self.generator.random(x.shape) < p).astype(x.dtype)]


@register("torch.normal")
class Normal(_Random):
    """``x.normal_(mean, std)`` as pnnx writes it: a normal draw of ``x``'s shape and dtype
    (``x``'s values unread), ``mean`` and ``std`` numbers."""

    def build(self, params: Params) -> None:
        self.seed(params, (1,), "the tensor whose shape it fills")
        (self.x_at,) = self.bind_inputs(params, ["input"])
        self.mean, self.std = params.float("mean", 0.0), params.float("std", 1.0)
        if self.std < 0:
            raise params.error(f"std={self.std} must not be negative")

    def infer(self, specs: list[Spec]) -> list[Spec]:
        return [_like(specs[self.x_at], None)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[self.x_at])
        draw = self.normal(x.shape, x.dtype)
        return [(draw * x.dtype.type(self.std) + x.dtype.type(self.mean)).astype(x.dtype, copy=False)]


def _number_at(inputs: list[Any], index: int) -> float:
    return float(_number(inputs[index]))


@register("aten::normal")
class AtenNormal(_Random):
    """``torch.normal``: of numbers and a size, (mean, std, size, generator, dtype, layout,
    device, pin_memory), float32 unless a dtype is given; or of a mean tensor and a std
    (a tensor or a number), (mean, std, generator), of their broadcast shape."""

    def build(self, params: Params) -> None:
        self.seed(params, (3, 8), "mean, std, generator; or mean, std, size, generator, dtype, layout, "
                  "device, pin_memory")
        self.of_size = self.num_inputs == 8
        self.dtype = (_aten_dtype_at(params, 4) or _FLOAT32) if self.of_size else None

    def infer(self, specs: list[Spec]) -> list[Spec]:
        if self.of_size:
            return [_sized(specs[2], "size", self.dtype)]  # type: ignore[arg-type]
        mean, std = specs[0], specs[1]
        if not isinstance(mean, TensorSpec) or mean.dtype.kind != "f":
            raise ShapeMismatch(f"aten::normal takes a floating point mean tensor, given {mean}")
        shape = np.broadcast_shapes(mean.shape, std.shape) if isinstance(std, TensorSpec) else mean.shape
        return [TensorSpec(tuple(shape), mean.dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        if self.of_size:
            size = runtime_ints(inputs[2], "size")
            return [self._scaled(self.normal(size, self.dtype), _number_at(inputs, 0), _number_at(inputs, 1))]
        mean, std = np.asarray(inputs[0]), np.asarray(inputs[1])
        if np.any(std < 0):
            raise ShapeMismatch("aten::normal: std must not be negative")
        shape = np.broadcast_shapes(mean.shape, std.shape)
        draw = self.normal(shape, mean.dtype)
        return [(draw * std.astype(mean.dtype) + mean).astype(mean.dtype, copy=False)]

    @staticmethod
    def _scaled(draw: np.ndarray, mean: float, std: float) -> np.ndarray:
        if std < 0:
            raise ShapeMismatch(f"aten::normal: std must not be negative, given {std}")
        return (draw * draw.dtype.type(std) + draw.dtype.type(mean)).astype(draw.dtype, copy=False)


class _Filling(_Random):
    """``x.<draw>_(...)`` as TorchScript leaves it: x (whose shape and dtype the draw takes;
    its values unread), the draw's numbers, generator."""

    #: The numbers among the inputs, after x.
    numbers = 0

    def build(self, params: Params) -> None:
        self.seed(params, (2 + self.numbers,), f"self, {self.numbers} number(s), generator")

    def infer(self, specs: list[Spec]) -> list[Spec]:
        out = _like(specs[0], None)
        if out.dtype.kind != "f":
            raise ShapeMismatch(f"{self.type} fills a floating point tensor, given {specs[0]}")
        return [out]


@register("aten::uniform")
class AtenUniform(_Filling):
    """``x.uniform_(a, b)``: uniform in [a, b) of x's shape and dtype."""

    numbers = 2

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        low, high = _number_at(inputs, 1), _number_at(inputs, 2)
        if low > high:
            raise ShapeMismatch(f"aten::uniform: from ({low}) must not be above to ({high})")
        draw = self.uniform(x.shape, x.dtype)
        return [(draw * x.dtype.type(high - low) + x.dtype.type(low)).astype(x.dtype, copy=False)]


@register("aten::exponential")
class AtenExponential(_Filling):
    """``x.exponential_(rate)``: exponential of mean 1 / rate, x's shape and dtype."""

    numbers = 1

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        rate = _number_at(inputs, 1)
        if rate <= 0:
            raise ShapeMismatch(f"aten::exponential: the rate must be positive, given {rate}")
        return [self.generator.exponential(1 / rate, x.shape).astype(x.dtype)]


@register("aten::poisson")
class AtenPoisson(_Filling):
    """``torch.poisson(rates)``: a count drawn for each rate, of the rates' dtype."""

    def forward(self, inputs: list[Any]) -> list[Any]:
        rates = np.asarray(inputs[0])
        if np.any(rates < 0):
            raise ShapeMismatch("aten::poisson: rates must not be negative")
        return [self.generator.poisson(rates).astype(rates.dtype)]


@register("aten::randperm")
class AtenRandperm(_Random):
    """``torch.randperm(n)``: n, dtype, layout, device, pin_memory; int64 unless a dtype is
    given. Its length is ``n``, so shape inference needs ``n`` (a size)."""

    def build(self, params: Params) -> None:
        self.seed(params, (5,), "n, dtype, layout, device, pin_memory")
        self.dtype = _aten_dtype_at(params, 1) or np.dtype(np.int64)

    def infer(self, specs: list[Spec]) -> list[Spec]:
        return [_sized(SequenceSpec((specs[0],)), "length", self.dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        return [self.generator.permutation(int(_number(inputs[0]))).astype(self.dtype)]


@register("aten::multinomial")
class AtenMultinomial(_Random):
    """``torch.multinomial(weights, n, replacement)``: for each row of ``weights`` (1-D or
    2-D, non-negative, not all zero), n indices drawn with probabilities proportional to
    the weights, with or without replacement (then at most as many as the row's non-zero
    weights); int64. Inputs weights, n, replacement, generator."""

    def build(self, params: Params) -> None:
        self.seed(params, (4,), "self, num_samples, replacement, generator")
        self.count = constant_input(params, 1)
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 0:
            raise params.error(f"num_samples must be a constant count, given {self.count}")
        self.replacement = constant_input(params, 2)
        if not isinstance(self.replacement, bool):
            raise params.error(f"replacement must be a constant bool, given {self.replacement}")

    def infer(self, specs: list[Spec]) -> list[Spec]:
        weights = specs[0]
        rank = len(weights.shape) if isinstance(weights, TensorSpec) else 0
        if rank not in (1, 2) or weights.dtype.kind != "f":  # type: ignore[union-attr]
            raise ShapeMismatch(f"aten::multinomial takes 1-D or 2-D floating point weights, given {weights}")
        if not self.replacement and self.count > weights.shape[-1]:
            raise ShapeMismatch(f"cannot draw {self.count} of {weights.shape[-1]} categories without "
                                "replacement")
        return [TensorSpec((*weights.shape[:-1], self.count), np.dtype(np.int64))]

    def forward(self, inputs: list[Any]) -> list[Any]:
        weights = np.asarray(inputs[0], np.float64)
        rows = weights.reshape(-1, weights.shape[-1])
        out = np.empty((len(rows), self.count), np.int64)
        for k, row in enumerate(rows):
            total = row.sum()
            if np.any(row < 0) or not np.isfinite(total) or total <= 0:
                raise ShapeMismatch("aten::multinomial: weights must be finite, non-negative and not all "
                                    "zero")
            if not self.replacement and self.count > np.count_nonzero(row):
                raise ShapeMismatch(f"aten::multinomial: cannot draw {self.count} without replacement from "
                                    f"{np.count_nonzero(row)} non-zero weights")
            out[k] = self.generator.choice(len(row), self.count, replace=self.replacement, p=row / total)
        return [out.reshape(*weights.shape[:-1], self.count)]

