"""Activations: elementwise nonlinearities and the softmax family.

Every layer here keeps its input's floating dtype (float32 stays float32: constants are cast
to the input's dtype before they meet it); an integer or bool input to a function that
only makes sense on reals is computed in float32, as PyTorch promotes it. Layers never
write into their input; temporaries are updated in place where that saves an allocation.

pnnx spellings (checked against real exports): ``nn.X`` for modules and ``F.x`` for
functionals; ``torch.sigmoid``/``Tensor.sigmoid`` become ``F.sigmoid`` (likewise tanh,
relu, selu, celu, softmax, log_softmax), ``nn.GLU``/``nn.RReLU`` stay ``nn.*`` alone but
merge with an identical ``F.*`` call. pnnx folds a constant single-weight PReLU into
``nn.LeakyReLU``, and writes ``torch.erf`` as a ``pnnx.Expression``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from graphexec.layers import _special
from graphexec.layers._samples import off_rows, rows_kept
from graphexec.layers.base import Layer, Params, ShapeMismatch, normalize_axis
from graphexec.layers.registry import register
from graphexec.layers.specs import Shape

#: An activation of several numpy passes over at least this many elements runs them block
#: by block, ``ACTIVATION_BLOCK`` elements (256 KB of float32) at a time, so that every pass
#: after the first reads from cache rather than memory. SiLU on 1.2 M elements (96 x 112 x
#: 112, in EfficientNet-B0) ran in 944 us against 1610 us whole; on 450 K, 339 against 526 us;
#: on 190 K and less, no faster.
BLOCKED_MIN_ELEMENTS = 1 << 18
ACTIVATION_BLOCK = 1 << 16

# --------------------------------------------------------------------------------------
# erf: numpy has none. Two polynomial pieces, fitted by least squares on Chebyshev nodes
# (float64) for this module; max |error| in float32 is below 1e-7 (about 1.5 ulp near 0.9).
#   |x| < 1      erf(x)  = x * S(2 x^2 - 1)
#   1 <= |x| < 4 erfc(x) = exp(-x^2) * L((2 |x| - 5) / 3)
#   |x| >= 4     erf(x)  = sign(x)   (erfc(4) = 1.5e-8 is below float32's resolution at 1)
# --------------------------------------------------------------------------------------
_ERF_SMALL = (
    9.6546873864e-01, -1.4053608902e-01, 1.9852497723e-02, -2.2854856570e-03,
    2.1751198976e-04, -1.7536824683e-05, 1.2316401738e-06, -7.5574931011e-08,
)
_ERF_LARGE = (
    2.1080635753e-01, -1.1152140139e-01, 5.6110958412e-02, -2.6997791384e-02,
    1.2484035686e-02, -5.6117627801e-03, 2.4258851013e-03, -9.1556378448e-04,
    3.6786867239e-04, -2.4550258772e-04, 9.6404515252e-05,
)


def _horner(coefficients: tuple[float, ...], u: np.ndarray) -> np.ndarray:
    """sum(c_i u^i) in u's dtype; the result is a new array."""
    cast = u.dtype.type
    acc = np.full_like(u, cast(coefficients[-1]))
    for c in coefficients[-2::-1]:
        acc *= u
        acc += cast(c)
    return acc


def erf(x: np.ndarray) -> np.ndarray:
    """The error function, elementwise, in ``x``'s floating dtype (float16 via float32):
    float64 through :func:`graphexec.layers._special.erf`, which keeps float64's accuracy (these
    pieces are float32's)."""
    x = np.asarray(x)
    if x.dtype == np.float64:
        return _special.erf(x)
    if x.ndim == 0:
        return erf(x.reshape(1)).reshape(())
    work = x if x.dtype in (np.float32, np.float64) else x.astype(np.float32)
    cast = work.dtype.type
    a = np.minimum(np.abs(work), cast(4))  # also maps +-inf to 4; NaN stays NaN
    z = a * a
    u = z * cast(2)
    u -= cast(1)
    small = _horner(_ERF_SMALL, u)
    small *= a
    u = a * cast(2)
    u -= cast(5)
    u *= cast(1 / 3)
    large = _horner(_ERF_LARGE, u)
    np.negative(z, out=z)
    np.exp(z, out=z)
    large *= z
    np.subtract(cast(1), large, out=large)
    # Pick a piece by blending with a 0/1 weight (exact: one product is 0); numpy's masked
    # copies are several times slower than these arithmetic passes.
    inner = np.less(a, cast(1)).astype(work.dtype)
    small *= inner
    np.subtract(cast(1), inner, out=inner)
    large *= inner
    large += small
    np.copysign(large, work, out=large)
    return large.astype(x.dtype, copy=False) if x.dtype.kind == "f" else large


# --------------------------------------------------------------------------------------
# shared pieces
# --------------------------------------------------------------------------------------
def _real(x: Any) -> np.ndarray:
    """``x`` as a floating array: float inputs as they are, others promoted to float32; a
    complex one is refused (casting it would drop the imaginary part without a word)."""
    x = np.asarray(x)
    if x.dtype.kind == "c":
        raise ShapeMismatch(f"not defined for a complex input ({x.dtype})")
    return x if x.dtype.kind == "f" else x.astype(np.float32)


def _real_dtype(dtype: Any) -> np.dtype:
    """The dtype :func:`_real` gives for an input of ``dtype`` (a complex one refused)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "c":
        raise ShapeMismatch(f"not defined for a complex input ({dtype})")
    return dtype if dtype.kind == "f" else np.dtype(np.float32)


def _clamped(x: np.ndarray, low: float, high: float, out: np.ndarray | None = None) -> np.ndarray:
    """min(max(x, low), high) for a floating ``x``, a bound possibly infinite; NaN stays NaN.

    One pass of numpy's clip loop, which is vectorised for two bounds: on AVX2 (numpy 2.4)
    a ReLU, ``clip(x, 0, inf)``, runs 2.7x as fast as ``maximum(x, 0)``, whose loop with a
    scalar is not, and as fast as ``maximum`` against a row of zeros in place (1.5x out of
    place); clip(x, 0, 6) runs 2.3x as fast as a maximum and a minimum against rows
    (200 K float32). The method skips ``np.clip``'s dispatch: 2.2 us a call on a small
    tensor against 4.7."""
    cast = x.dtype.type
    return x.clip(cast(low), cast(high), out=out)


def _sigmoid(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """1 / (1 + exp(-x)), into ``out`` when given (it may be ``x``). In float32/64, exp(-x)
    overflowing to inf (x below about -88 in float32) gives exactly 0 where the true value
    is below the smallest normal number; other dtypes take the overflow-free
    :func:`_sigmoid_blended`."""
    if x.dtype not in (np.float32, np.float64):
        if out is None:
            return _sigmoid_blended(x)
        np.copyto(out, _sigmoid_blended(x))
        return out
    with np.errstate(over="ignore"):
        e = _exp_negated(x, out)
    e += x.dtype.type(1)
    return np.reciprocal(e, out=e)


#: -log2(e), to take exp(-x) as exp2(x * -log2(e)) in float32 (see :func:`_exp_negated`).
_MINUS_LOG2_E = -1.4426950408889634


def _exp_negated(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """exp(-x) for a float32/64 ``x``, into ``out`` when given (it may be ``x``); overflow
    gives inf. In float32 it is exp2(x * -log2 e): numpy's exp2 loop runs 1.7x as fast as
    its exp (22 against 38 us per 64 K elements, AVX-512, numpy 2.4) and the multiply costs
    what the negation did, so SiLU and sigmoid take 0.75-0.87x the time (56 K to 1.2 M
    elements); the rounded product leaves a relative error up to 1.1e-6 for |x| < 20
    (exp: 2.3e-7). In float64 exp is as fast as exp2, so it stays."""
    if x.dtype != np.float32:
        e = np.negative(x, out=out)
        return np.exp(e, out=e)
    e = np.multiply(x, np.float32(_MINUS_LOG2_E), out=out)
    return np.exp2(e, out=e)


def _sigmoid_blended(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)) without overflow: with e = exp(-|x|), 1/(1+e) for x >= 0 and
    e/(1+e) for x < 0; the numerator is blended as e*[x<0] + [x>=0], exactly."""
    e = np.abs(x)
    np.negative(e, out=e)
    np.exp(e, out=e)
    total = e + x.dtype.type(1)
    e *= x < 0
    e += x >= 0
    e /= total
    return e


def _softplus(x: np.ndarray) -> np.ndarray:
    """log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)), exact for large |x|."""
    t = np.abs(x)
    np.negative(t, out=t)
    np.exp(t, out=t)
    np.log1p(t, out=t)
    t += np.maximum(x, x.dtype.type(0))
    return t


def _leaky(x: np.ndarray, slope: float) -> np.ndarray:
    """x where x > 0, else slope * x: max(x, slope x) for slope <= 1, min(...) above."""
    out = x * x.dtype.type(slope)
    return np.maximum(x, out, out=out) if slope <= 1 else np.minimum(x, out, out=out)


def _positive_plus(negative_part: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``negative_part + max(x, 0)``, in place: joins f(min(x, 0)) (with f(0) = 0) to x > 0."""
    negative_part += np.maximum(x, x.dtype.type(0))
    return negative_part


class _Unary(Layer):
    """One tensor in, one tensor of the same shape out.

    Every ``apply`` returns a new array. Subclasses that can also write a float result
    into given memory define ``apply_into`` (and set ``writes_into``; ``in_place`` when
    ``out`` may be ``x`` itself), so the memory plan can place them in its arena.
    """

    #: Whether an integer/bool input is computed as float32 (False: the dtype is kept).
    real_only = True
    #: Whether a complex input is computed as complex, as PyTorch does for tanh and
    #: sigmoid (FEDformer's frequency attention); the others refuse one.
    complex_ok = False
    fresh_outputs = True
    #: Whether each element costs a transcendental function (exp, tanh, erf): enough work
    #: per element that a large tensor is worth sharing out among threads (see
    #: :mod:`graphexec.devices.cpu.activation`).
    transcendental = False
    #: Whether :meth:`apply_into` is one numpy pass (a clamp), which gains nothing from
    #: running in blocks (see :data:`ACTIVATION_BLOCK`).
    one_pass = False

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, 1)
        return [shapes[0]]

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        dtype = np.dtype(dtypes[0])
        if dtype.kind == "c" and self.complex_ok:
            return [dtype]
        return [_real_dtype(dtype) if self.real_only or dtype.kind == "c" else dtype]

    def batchwise(self, inputs, outputs) -> bool:
        return rows_kept(inputs, outputs)

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        if x.dtype.kind == "c":
            self.infer_dtypes([x.dtype])  # refuses one where the layer is real only
        elif self.real_only:
            x = _real(x)
        if x.ndim == 0:  # numpy ufuncs give scalars for 0-d arrays; keep arrays throughout
            return [self.apply(x.reshape(1)).reshape(())]
        return [self.apply(x)]

    def apply(self, x: np.ndarray) -> np.ndarray:
        """The result for a floating ``x`` of rank >= 1, as a new array (by default
        :meth:`apply_into` a new array, for layers that define only that)."""
        out = np.empty_like(x)
        self.apply_into(x, out)
        return out

    def forward_into(self, inputs: list[Any], outputs: list[np.ndarray]) -> None:
        x, out = np.asarray(inputs[0]), outputs[0]
        if not (self.writes_into and x.dtype == out.dtype and x.dtype.kind == "f" and x.ndim):
            super().forward_into(inputs, outputs)
        elif (self.one_pass or x.size < BLOCKED_MIN_ELEMENTS or x.shape != out.shape
              or not (x.flags.c_contiguous and out.flags.c_contiguous)):
            self.apply_into(x, out)
        else:  # each element alone: blocks give the whole tensor's very bits
            flat_x, flat_out = x.reshape(-1), out.reshape(-1)
            for start in range(0, x.size, ACTIVATION_BLOCK):
                self.apply_into(flat_x[start:start + ACTIVATION_BLOCK], flat_out[start:start + ACTIVATION_BLOCK])

    def apply_into(self, x: np.ndarray, out: np.ndarray) -> None:
        """Write the result for a floating ``x`` of rank >= 1 into ``out`` (same shape and dtype)."""
        raise NotImplementedError

# --------------------------------------------------------------------------------------
# rectifiers and clamps (keep integer dtypes, as PyTorch does)
# --------------------------------------------------------------------------------------
@register("nn.ReLU", "F.relu")
class ReLU(_Unary):
    """max(x, 0)."""

    real_only = False
    writes_into = in_place = one_pass = True

    def apply(self, x):
        return self._relu(x)

    def apply_into(self, x, out):
        self._relu(x, out)

    @staticmethod
    def _relu(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        if x.dtype.kind == "f":
            return _clamped(x, 0, np.inf, out)
        return np.maximum(x, x.dtype.type(0), out=out)


@register("nn.ReLU6", "F.relu6")
class ReLU6(_Unary):
    """min(max(x, 0), 6)."""

    real_only = False
    writes_into = in_place = one_pass = True

    def apply(self, x):
        if x.dtype.kind == "f":
            return _clamped(x, 0, 6)
        return np.clip(x, x.dtype.type(0), x.dtype.type(6))

    def apply_into(self, x, out):
        _clamped(x, 0, 6, out)


@register("nn.Hardtanh", "F.hardtanh")
class Hardtanh(_Unary):
    """clamp(x, min_val, max_val)."""

    real_only = False

    def build(self, params: Params) -> None:
        self.low = params.float("min_val", -1.0)
        self.high = params.float("max_val", 1.0)
        if self.low > self.high:
            raise params.error(f"min_val={self.low} is greater than max_val={self.high}")

    writes_into = in_place = one_pass = True

    def apply(self, x):
        if x.dtype.kind == "f":
            return _clamped(x, self.low, self.high)
        return np.clip(x, math.ceil(self.low), math.floor(self.high)).astype(x.dtype, copy=False)

    def apply_into(self, x, out):
        _clamped(x, self.low, self.high, out)


@register("nn.Threshold", "F.threshold")
class Threshold(_Unary):
    """x where x > threshold, else value."""

    real_only = False

    def build(self, params: Params) -> None:
        self.threshold = params.float("threshold")
        self.value = params.float("value")

    def apply(self, x):
        out = x.copy()
        out[x <= self.threshold] = self.value  # NaN is kept, as in PyTorch
        return out


@register("nn.LeakyReLU", "F.leaky_relu")
class LeakyReLU(_Unary):
    """x where x > 0, else negative_slope * x."""

    def build(self, params: Params) -> None:
        self.slope = params.float("negative_slope", 0.01)

    def apply(self, x):
        return _leaky(x, self.slope)


@register("nn.RReLU", "F.rrelu")
class RReLU(_Unary):
    """At inference a leaky ReLU whose slope is the mean of lower and upper."""

    def build(self, params: Params) -> None:
        lower = params.float("lower", 1.0 / 8.0)
        upper = params.float("upper", 1.0 / 3.0)
        if lower > upper:
            raise params.error(f"lower={lower} is greater than upper={upper}")
        if params.bool("training", False):
            raise params.error("training=True samples random slopes; only inference is supported")
        self.slope = (lower + upper) / 2.0

    def apply(self, x):
        return _leaky(x, self.slope)


@register("nn.PReLU", "F.prelu")
class PReLU(Layer):
    """x where x > 0, else weight[c] * x; the channel is dim 1 (one weight: all elements).

    ``nn.PReLU`` carries ``@weight``; ``F.prelu`` takes the weight as its second input.
    """

    def build(self, params: Params) -> None:
        self.weight: np.ndarray | None = None
        if self.num_inputs == 1:
            count = params.int("num_parameters", 1)
            if count < 1:
                raise params.error(f"num_parameters={count} should be at least 1")
            self.weight = params.weight("weight", shape=(count,))
        elif self.num_inputs != 2:
            raise params.error(f"takes 1 input (with @weight) or 2 (input, weight), got {self.num_inputs}")

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, self.num_inputs)
        shape = shapes[0]
        count = shapes[1] if len(shapes) == 2 else self.weight.shape  # type: ignore[union-attr]
        if len(count) != 1:
            raise ShapeMismatch(f"weight should be 1-d, given shape {count}")
        count = count[0]
        if count != 1:
            if len(shape) < 2:
                raise ShapeMismatch(
                    f"{count} weights need a channel dim 1, given a tensor of rank {len(shape)}"
                )
            if shape[1] != count:
                raise ShapeMismatch(f"{count} weights for {shape[1]} channels (dim 1 of {shape})")
        return [shape]

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        return [_real_dtype(dtypes[0])]

    def batchwise(self, inputs, outputs) -> bool:
        # a stored weight (a given one might be computed from the batch)
        return self.weight is not None and rows_kept(inputs, outputs) and len(inputs[0].shape) >= 2

    def forward(self, inputs):
        x = _real(inputs[0])
        if x.ndim == 0:
            return [self.forward([x.reshape(1)] + list(inputs[1:]))[0].reshape(())]
        weight = self.weight if self.weight is not None else np.asarray(inputs[1])
        weight = weight.astype(x.dtype, copy=False)
        if weight.size > 1:
            weight = weight.reshape((-1,) + (1,) * (x.ndim - 2))
        out = np.minimum(x, x.dtype.type(0))
        out *= weight
        return [_positive_plus(out, x)]


# --------------------------------------------------------------------------------------
# smooth functions
# --------------------------------------------------------------------------------------
@register("nn.ELU", "F.elu")
class ELU(_Unary):
    """x where x > 0, else alpha * (exp(x) - 1)."""

    transcendental = True

    def build(self, params: Params) -> None:
        self.alpha = params.float("alpha", 1.0)

    def apply(self, x):
        out = np.minimum(x, x.dtype.type(0))
        np.expm1(out, out=out)
        out *= x.dtype.type(self.alpha)
        return _positive_plus(out, x)


@register("nn.CELU", "F.celu")
class CELU(_Unary):
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1))."""

    transcendental = True

    def build(self, params: Params) -> None:
        self.alpha = params.float("alpha", 1.0)
        if self.alpha == 0:
            raise params.error("alpha=0 divides by zero")

    def apply(self, x):
        cast = x.dtype.type
        out = np.minimum(x, cast(0))
        out *= cast(1.0 / self.alpha)
        np.expm1(out, out=out)
        out *= cast(self.alpha)
        return _positive_plus(out, x)


@register("nn.SELU", "F.selu")
class SELU(_Unary):
    """scale * (x where x > 0, else alpha * (exp(x) - 1)) with the self-normalising constants."""

    transcendental = True

    ALPHA = 1.6732632423543772848170429916717
    SCALE = 1.0507009873554804934193349852946

    def apply(self, x):
        cast = x.dtype.type
        out = np.minimum(x, cast(0))
        np.expm1(out, out=out)
        out *= cast(self.ALPHA)
        out = _positive_plus(out, x)
        out *= cast(self.SCALE)
        return out


@register("nn.GELU", "F.gelu")
class GELU(_Unary):
    """x * Phi(x): exact (erf) with ``approximate=none``, or the tanh approximation."""

    transcendental = True
    writes_into = in_place = True

    def build(self, params: Params) -> None:
        self.tanh = params.str("approximate", "none", choices=["none", "tanh"]) == "tanh"

    def apply_into(self, x, out):
        cast = x.dtype.type
        if self.tanh:
            inner = x * x
            inner *= cast(0.044715)
            inner += cast(1)
            inner *= x
            inner *= cast(math.sqrt(2.0 / math.pi))
            np.tanh(inner, out=inner)
        else:
            inner = erf(x * cast(1.0 / math.sqrt(2.0)))
        inner += cast(1)
        inner *= x
        np.multiply(inner, cast(0.5), out=out)  # x is read for the last time above: out may be x


@register("nn.Sigmoid", "F.sigmoid")
class Sigmoid(_Unary):
    """1 / (1 + exp(-x))."""

    transcendental = True
    writes_into = in_place = True
    complex_ok = True

    def apply_into(self, x, out):
        if x.dtype.kind == "c":
            np.reciprocal(np.exp(-x) + 1, out=out)
            return
        _sigmoid(x, out)


@register("nn.SiLU", "F.silu")
class SiLU(_Unary):
    """x * sigmoid(x)."""

    transcendental = True
    writes_into = in_place = True

    def apply_into(self, x, out):
        if x.dtype not in (np.float32, np.float64):
            np.multiply(_sigmoid(x), x, out=out)
            return
        # x / (1 + exp(-x)): where exp overflows the result is -0 (and NaN at -inf, as in PyTorch).
        # The denominator is a temporary, so that out may be x itself.
        with np.errstate(over="ignore", invalid="ignore"):
            denominator = _exp_negated(x)
            denominator += x.dtype.type(1)
            np.divide(x, denominator, out=out)


@register("nn.Tanh", "F.tanh")
class Tanh(_Unary):
    """tanh(x)."""

    transcendental = True
    writes_into = in_place = one_pass = True
    complex_ok = True

    def apply_into(self, x, out):
        np.tanh(x, out=out)


@register("nn.Mish", "F.mish")
class Mish(_Unary):
    """x * tanh(softplus(x))."""

    transcendental = True

    def apply(self, x):
        # tanh(log(1 + e^x)) = n / (n + 2) with n = e^x (e^x + 2); for x >= 20 it is 1 in
        # float32, so clamping there avoids overflow, and small e^x loses no precision.
        e = np.minimum(x, x.dtype.type(20))
        np.exp(e, out=e)
        n = e + x.dtype.type(2)
        n *= e
        e = n + x.dtype.type(2)
        np.divide(n, e, out=n)
        n *= x
        return n


@register("nn.Softplus", "F.softplus")
class Softplus(_Unary):
    """log(1 + exp(beta * x)) / beta, and x itself where beta * x > threshold."""

    transcendental = True

    def build(self, params: Params) -> None:
        self.beta = params.float("beta", 1.0)
        self.threshold = params.float("threshold", 20.0)
        if self.beta == 0:
            raise params.error("beta=0 divides by zero")

    def apply(self, x):
        cast = x.dtype.type
        scaled = x * cast(self.beta)
        out = _softplus(scaled)
        out *= cast(1.0 / self.beta)
        np.copyto(out, x, where=scaled > cast(self.threshold))
        return out


@register("nn.LogSigmoid", "F.logsigmoid")
class LogSigmoid(_Unary):
    """log(sigmoid(x)) = -softplus(-x)."""

    transcendental = True

    def apply(self, x):
        out = _softplus(-x)
        np.negative(out, out=out)
        return out


@register("nn.Hardswish", "F.hardswish")
class Hardswish(_Unary):
    """x * relu6(x + 3) / 6."""

    writes_into = in_place = True

    def apply_into(self, x, out):
        cast = x.dtype.type
        gate = np.add(x, cast(3))  # a temporary, so that out may be x itself
        _clamped(gate, 0, 6, out=gate)
        np.multiply(gate, x, out=out)
        out *= cast(1.0 / 6.0)


@register("nn.Hardsigmoid", "F.hardsigmoid")
class Hardsigmoid(_Unary):
    """relu6(x + 3) / 6."""

    writes_into = in_place = True

    def apply_into(self, x, out):
        cast = x.dtype.type
        np.multiply(x, cast(1.0 / 6.0), out=out)
        out += cast(0.5)
        _clamped(out, 0, 1, out=out)


@register("nn.Softsign", "F.softsign")
class Softsign(_Unary):
    """x / (1 + |x|)."""

    def apply(self, x):
        out = np.abs(x)
        out += x.dtype.type(1)
        np.divide(x, out, out=out)
        return out


@register("nn.Tanhshrink", "F.tanhshrink")
class Tanhshrink(_Unary):
    """x - tanh(x)."""

    transcendental = True

    def apply(self, x):
        out = np.tanh(x)
        np.subtract(x, out, out=out)
        return out


@register("nn.Hardshrink", "F.hardshrink")
class Hardshrink(_Unary):
    """x where |x| > lambd, else 0."""

    def build(self, params: Params) -> None:
        self.lambd = params.float("lambd", 0.5)

    def apply(self, x):
        out = x.copy()
        out[np.abs(x) <= self.lambd] = 0  # NaN passes through, as in PyTorch
        return out


@register("nn.Softshrink", "F.softshrink")
class Softshrink(_Unary):
    """x - lambd where x > lambd, x + lambd where x < -lambd, else 0."""

    def build(self, params: Params) -> None:
        self.lambd = params.float("lambd", 0.5)
        if self.lambd < 0:
            raise params.error(f"lambd={self.lambd} should be at least 0")

    def apply(self, x):
        cast = x.dtype.type
        lambd = cast(self.lambd)
        out = np.clip(x, -lambd, lambd)  # NaN stays NaN, so x - out keeps it
        np.subtract(x, out, out=out)
        return out


@register("nn.GLU", "F.glu")
class GLU(Layer):
    """a * sigmoid(b), where a and b are the two halves of the input along ``dim``."""

    def build(self, params: Params) -> None:
        self.dim = params.int("dim", -1)

    def batchwise(self, inputs, outputs) -> bool:
        return rows_kept(inputs, outputs) and off_rows([self.dim], len(inputs[0].shape))

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, 1)
        shape = shapes[0]
        if not shape:
            raise ShapeMismatch("glu needs a tensor of rank 1 or more, given a scalar")
        axis = normalize_axis(self.dim, len(shape))
        if shape[axis] % 2:
            raise ShapeMismatch(f"dim {self.dim} has odd size {shape[axis]} (shape {shape}); it must halve")
        return [shape[:axis] + (shape[axis] // 2,) + shape[axis + 1:]]

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        return [_real_dtype(dtypes[0])]

    def forward(self, inputs):
        x = _real(inputs[0])
        a, b = np.split(x, 2, axis=self.dim)
        out = _sigmoid(b)
        out *= a
        return [out]


# --------------------------------------------------------------------------------------
# softmax family
# --------------------------------------------------------------------------------------
class _SoftmaxBase(Layer):
    """Softmax-like over one dim, shifted by the max so exp never overflows.

    pnnx drops a ``dtype=`` argument but annotates the output with that dtype, so an
    output annotated with another float dtype than the input means "cast first".
    """

    #: Whether the input is negated first (softmin).
    negate = False
    #: Whether the log is returned (log_softmax).
    log = False

    def build(self, params: Params) -> None:
        self.dim = params.raw("dim", None)
        if self.dim is not None:
            self.dim = params.int("dim")
        self.cast_to: np.dtype | None = None
        self.cast_to = params.dropped_dtype(lambda dtype: self.infer_dtypes([dtype])[0])

    def axis(self, rank: int) -> int:
        if self.dim is None:  # PyTorch's legacy choice when no dim is given
            return 0 if rank in (0, 1, 3) else 1
        return normalize_axis(self.dim, rank)

    def batchwise(self, inputs, outputs) -> bool:
        return rows_kept(inputs, outputs) and off_rows([self.axis(len(inputs[0].shape))], len(inputs[0].shape))

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, 1)
        if shapes[0]:  # a scalar takes dim 0 or -1, as in PyTorch
            self.axis(len(shapes[0]))
        return [shapes[0]]

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        if self.cast_to is not None:
            return [self.cast_to]
        return [_real_dtype(dtypes[0])]

    def forward(self, inputs):
        x = _real(inputs[0]) if self.cast_to is None else np.asarray(inputs[0]).astype(self.cast_to)
        if x.ndim == 0:
            return [np.zeros_like(x) if self.log else np.ones_like(x)]
        axis = self.axis(x.ndim)
        if self.log:
            return [log_softmax(x, axis)]
        if self.negate:  # softmax(-x): shift by -min(x)
            shifted = np.min(x, axis=axis, keepdims=True) - x
        else:
            shifted = x - np.max(x, axis=axis, keepdims=True)
        np.exp(shifted, out=shifted)
        shifted /= np.sum(shifted, axis=axis, keepdims=True)
        return [shifted]


def log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    """``x - log(sum(exp(x)))`` along ``axis``, shifted by the maximum first so that exp
    cannot overflow."""
    shifted = x - np.max(x, axis=axis, keepdims=True)
    total = np.sum(np.exp(shifted), axis=axis, keepdims=True)
    np.log(total, out=total)
    shifted -= total
    return shifted


@register("nn.Softmax", "F.softmax")
class Softmax(_SoftmaxBase):
    """exp(x) / sum(exp(x)) along ``dim``."""


@register("nn.LogSoftmax", "F.log_softmax")
class LogSoftmax(_SoftmaxBase):
    """x - log(sum(exp(x))) along ``dim``."""

    log = True


@register("nn.Softmin", "F.softmin")
class Softmin(_SoftmaxBase):
    """softmax(-x) along ``dim``."""

    negate = True


@register("nn.Softmax2d")
class Softmax2d(_SoftmaxBase):
    """Softmax over the channels (dim -3) of a (C,H,W) or (N,C,H,W) tensor."""

    def build(self, params: Params) -> None:
        super().build(params)
        self.dim = -3

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, 1)
        if len(shapes[0]) not in (3, 4):
            raise ShapeMismatch(f"Softmax2d takes a 3-d or 4-d tensor, given shape {shapes[0]}")
        return [shapes[0]]
