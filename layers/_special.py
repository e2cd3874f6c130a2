"""Special functions numpy lacks (``torch.special``), vectorised, in float64.

Each takes and returns float64 arrays; callers cast (see :mod:`graphexec.layers._expr`, whose
function table holds them, so ``pnnx.Expression`` and the ``aten::`` layers share them).
The accuracy aimed at is float64's, far beyond the float32 results they usually feed.

- ``erfc`` from ``erf``'s series near zero and a continued fraction in the tails, so the
  upper tail keeps its relative accuracy (``1 - erf`` would cancel to zero);
- ``erfinv`` and ``ndtri`` by Newton steps from a rational first guess (Giles' single
  precision one, or the tail's asymptote far out), on ``erf`` near zero and on ``log
  erfc`` in the tails, so both ends converge to full relative accuracy;
- ``lgamma`` by Lanczos' approximation (g = 7, nine terms) with the reflection formula
  below 1/2; ``digamma`` by recurrence up to 10 and the asymptotic series there;
- ``i0e`` as numpy's ``i0`` scaled by ``exp(-|x|)``, or its asymptotic series where ``i0``
  overflows;
- ``erfcx`` and ``log_ndtr`` from the continued fraction in the tail, where ``erfc`` and
  ``ndtr`` underflow.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

_SQRT_PI = math.sqrt(math.pi)
_SQRT2 = math.sqrt(2.0)

# ----------------------------------------------------------------------------------------
# the error function and its inverses
# ----------------------------------------------------------------------------------------
_TWO_OVER_SQRT_PI = 2.0 / _SQRT_PI


def erf(x: np.ndarray) -> np.ndarray:
    """The error function, vectorised, to float64 accuracy (numpy has none).

    |x| < 2.5: erf(a) = 2/sqrt(pi) exp(-a^2) sum_n (2a^2)^n a / (1*3*...*(2n+1)), every term
    positive so nothing cancels; beyond, 1 - erfc(a) with erfc's continued fraction.
    """
    x64 = np.asarray(x, dtype=np.float64)
    a = np.abs(x64)
    out = np.ones_like(a)
    small = a < 2.5
    s = a[small]
    term = s.copy()
    total = s.copy()
    twice_square = 2.0 * s * s
    for n in range(1, 60):
        term = term * twice_square / (2 * n + 1)
        total += term
        if n % 8 == 0 and not (term > 1e-17 * total).any():
            break
    out[small] = _TWO_OVER_SQRT_PI * np.exp(-s * s) * total
    big = ~small & (a < 6.0)  # erf is 1 to float64 precision from 6 on
    z = a[big]
    out[big] = 1.0 - np.exp(-z * z) / (_SQRT_PI * _fraction(z))
    out[np.isnan(a)] = np.nan
    result = np.copysign(out, x64)
    return result.astype(x.dtype, copy=False) if isinstance(x, np.ndarray) else result


#: Below this |x|, erfc is 1 - erf (at most ~1e-13 relative lost); from it on, the
#: continued fraction (which converges slowly near zero) gives it directly: within 6e-14
#: of math.erfc from -6 to 26 (1.2e-12 with 2.5, where 1 - erf cancels more).
_ERFC_FRACTION_FROM = 1.5


def _fraction(z: np.ndarray) -> np.ndarray:
    """Laplace's continued fraction ``F(z)``, ``erfc(z) = exp(-z^2) / (sqrt(pi) F(z))`` for z > 0."""
    fraction = z.copy()
    for k in range(120, 0, -1):
        fraction = z + (k / 2.0) / fraction
    return fraction


def erfc(x: np.ndarray) -> np.ndarray:
    """``1 - erf(x)`` to full relative accuracy for large positive ``x`` too."""
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    out = np.empty_like(a)
    near = a < _ERFC_FRACTION_FROM
    out[near] = 1.0 - erf(a[near])
    z = a[~near]
    with np.errstate(under="ignore"):
        out[~near] = np.exp(-z * z) / (_SQRT_PI * _fraction(z))
    out = np.where(x < 0, 2.0 - out, out)
    out[np.isnan(x)] = np.nan
    return out


def erfcx(x: np.ndarray) -> np.ndarray:
    """``exp(x^2) erfc(x)``, finite far into the upper tail (inf where it overflows below)."""
    x = np.asarray(x, dtype=np.float64)
    out = np.empty_like(x)
    far = x >= _ERFC_FRACTION_FROM
    out[far] = 1.0 / (_SQRT_PI * _fraction(x[far]))
    with np.errstate(over="ignore", invalid="ignore"):
        out[~far] = np.exp(x[~far] ** 2) * erfc(x[~far])
    out[np.isposinf(x)] = 0.0
    return out


def log_ndtr(x: np.ndarray) -> np.ndarray:
    """``log(ndtr(x))``, finite far into the lower tail (where ndtr underflows)."""
    x = np.asarray(x, dtype=np.float64)
    out = np.empty_like(x)
    z = -x / _SQRT2
    low = z >= _ERFC_FRACTION_FROM  # log(erfc(z) / 2) from the fraction, no exp to underflow
    out[low] = -z[low] ** 2 - np.log(2.0 * _SQRT_PI * _fraction(z[low]))
    with np.errstate(divide="ignore"):
        out[~low] = np.log1p(-0.5 * erfc(-z[~low]))
    out[np.isneginf(x)] = -np.inf
    return out


def _giles(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Giles' rational first guess at ``erfinv(a)``, ``w = -log((1 - a)(1 + a))``."""
    central = w < 5.0
    t = np.where(central, w - 2.5, np.sqrt(w) - 3.0)
    p = np.where(central, 2.81022636e-08, -0.000200214257)
    for c_central, c_tail in ((3.43273939e-07, 0.000100950558), (-3.5233877e-06, 0.00134934322),
                              (-4.39150654e-06, -0.00367342844), (0.00021858087, 0.00573950773),
                              (-0.00125372503, -0.0076224613), (-0.00417768164, 0.00943887047),
                              (0.246640727, 1.00167406), (1.50140941, 2.83297682)):
        p = np.where(central, c_central, c_tail) + p * t
    return p * a


def _erfcinv_tail(q: np.ndarray) -> np.ndarray:
    """``erfcinv(q)`` for ``0 < q <= 1/2`` (so ``x >= 0.47``): Newton on ``log erfc(x) = log q``,
    which is nearly linear in ``x**2`` out there, so it converges from afar."""
    w = -np.log(q * (2.0 - q))
    x = np.where(w < 36.0, _giles(1.0 - q, w), 0.0)
    far = w >= 36.0  # beyond Giles' range: the asymptote erfc(x) ~ exp(-x^2) / (x sqrt(pi))
    t = -np.log(q[far] * _SQRT_PI)
    x[far] = np.sqrt(t - 0.5 * np.log(t))
    log_q = np.log(q)
    for _ in range(6):
        c = erfc(x)
        slope = -2.0 / _SQRT_PI * np.exp(-x * x) / c  # d/dx log erfc(x)
        x = x - (np.log(c) - log_q) / slope
    return x


def erfinv(y: np.ndarray) -> np.ndarray:
    """The inverse of ``erf`` on [-1, 1]: +-inf at +-1, NaN outside."""
    y = np.asarray(y, dtype=np.float64)
    a = np.abs(y)
    out = np.full_like(a, np.nan)
    central = a <= 0.5
    s = a[central]
    x = _giles(s, -np.log((1.0 - s) * (1.0 + s)))
    for _ in range(2):
        x = x - (erf(x) - s) / (2.0 / _SQRT_PI * np.exp(-x * x))
    out[central] = x
    tail = (a > 0.5) & (a < 1.0)
    out[tail] = _erfcinv_tail(1.0 - a[tail])
    out[a == 1.0] = np.inf
    return np.copysign(out, y)


def ndtr(x: np.ndarray) -> np.ndarray:
    """The standard normal distribution function, accurate in the lower tail."""
    return 0.5 * erfc(-np.asarray(x, dtype=np.float64) / _SQRT2)


def ndtri(p: np.ndarray) -> np.ndarray:
    """The inverse of :func:`ndtr` on [0, 1]: -inf at 0, inf at 1, NaN outside."""
    p = np.asarray(p, dtype=np.float64)
    out = np.full_like(p, np.nan)
    low = (p > 0.0) & (p <= 0.5)
    high = (p > 0.5) & (p < 1.0)
    out[low] = -_SQRT2 * _erfcinv_or_central(2.0 * p[low])
    out[high] = _SQRT2 * _erfcinv_or_central(2.0 * (1.0 - p[high]))
    out[p == 0.0] = -np.inf
    out[p == 1.0] = np.inf
    return out


def _erfcinv_or_central(q: np.ndarray) -> np.ndarray:
    """``erfcinv(q)`` for ``0 < q <= 1``: the tail's Newton for small ``q``, ``erfinv(1 - q)``
    (where ``1 - q`` is exact enough) near 1."""
    out = np.empty_like(q)
    small = q <= 0.5
    out[small] = _erfcinv_tail(q[small])
    out[~small] = erfinv(1.0 - q[~small])
    return out


# ----------------------------------------------------------------------------------------
# gamma and its derivatives
# ----------------------------------------------------------------------------------------
_LANCZOS_G = 7.0
_LANCZOS = (0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313,
            -176.61502916214059, 12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6,
            1.5056327351493116e-7)
_HALF_LOG_TWO_PI = 0.5 * math.log(2.0 * math.pi)


def _lgamma_right(x: np.ndarray) -> np.ndarray:
    """``log|Gamma(x)|`` for ``x >= 1/2`` by Lanczos' approximation."""
    z = x - 1.0
    series = np.full_like(z, _LANCZOS[0])
    for k, c in enumerate(_LANCZOS[1:], start=1):
        series += c / (z + k)
    t = z + _LANCZOS_G + 0.5
    return _HALF_LOG_TWO_PI + (z + 0.5) * np.log(t) - t + np.log(series)


def lgamma(x: np.ndarray) -> np.ndarray:
    """``log|Gamma(x)|``: inf at the poles (0, -1, -2, ...) and at +-inf."""
    x = np.asarray(x, dtype=np.float64)
    out = np.empty_like(x)
    right = x >= 0.5
    with np.errstate(all="ignore"):
        out[right] = _lgamma_right(x[right])
        left = x[~right]  # Gamma(x) Gamma(1 - x) = pi / sin(pi x); |sin| from x's distance to
        sine = np.abs(np.sin(np.pi * (left - np.round(left))))  # an integer, which is exact
        out[~right] = np.log(np.pi / sine) - _lgamma_right(1.0 - left)
    out[(x <= 0) & (x == np.floor(x))] = np.inf
    out[np.isinf(x)] = np.inf
    out[np.isnan(x)] = np.nan
    return out


#: digamma steps ``x`` up to this before its asymptotic series (error there ~1e-17).
_DIGAMMA_SERIES_FROM = 10.0
#: The asymptotic series' coefficients of x**-2, x**-4, ...: B_2k / (2k).
_DIGAMMA_SERIES = (1.0 / 12, -1.0 / 120, 1.0 / 252, -1.0 / 240, 1.0 / 132, -691.0 / 32760, 1.0 / 12)


def digamma(x: np.ndarray) -> np.ndarray:
    """``d/dx log Gamma(x)``: -inf at +0, inf at -0, NaN at the negative integers."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        negative = x < 0  # psi(x) = psi(1 - x) - pi / tan(pi x)
        reflection = np.where(negative, np.pi / np.tan(np.pi * (x - np.round(x))), 0.0)  # tan has period pi
        z = np.where(negative, 1.0 - x, x)
        shift = np.zeros_like(z)
        for _ in range(int(_DIGAMMA_SERIES_FROM)):
            small = z < _DIGAMMA_SERIES_FROM
            shift -= np.where(small, 1.0 / z, 0.0)
            z = np.where(small, z + 1.0, z)
        inverse_square = 1.0 / (z * z)
        series = np.zeros_like(z)
        for c in reversed(_DIGAMMA_SERIES):
            series = (series + c) * inverse_square
        out = np.log(z) - 0.5 / z - series + shift - reflection
    out[x == 0] = np.copysign(np.inf, -np.copysign(1.0, x[x == 0]))
    out[negative & (x == np.floor(x))] = np.nan
    out[np.isposinf(x)] = np.inf
    out[np.isneginf(x) | np.isnan(x)] = np.nan
    return out


#: Hurwitz's zeta steps its argument up to this before the Euler-Maclaurin tail.
_ZETA_SERIES_FROM = 12.0
#: The tail's Bernoulli numbers B_2, B_4, ..., B_16.
_BERNOULLI = (1.0 / 6, -1.0 / 30, 1.0 / 42, -1.0 / 30, 5.0 / 66, -691.0 / 2730, 7.0 / 6, -3617.0 / 510)


def _hurwitz_zeta(s: int, q: np.ndarray) -> np.ndarray:
    """``sum over k >= 0 of (q + k)**-s`` for an integer ``s >= 2``: the terms summed while
    ``q + k`` is below :data:`_ZETA_SERIES_FROM` (negative ``q`` too, as Cephes does), then
    the Euler-Maclaurin tail; inf at the poles ``q`` = 0, -1, -2, ..."""
    z, total = q.copy(), np.zeros_like(q)
    while True:
        small = z < _ZETA_SERIES_FROM
        if not small.any():
            break
        total += np.where(small, z ** -float(s), 0.0)
        z = np.where(small, z + 1.0, z)
    tail = z ** (1.0 - s) / (s - 1) + 0.5 * z ** -float(s)
    rising, factorial, power = float(s), 2.0, z ** (-float(s) - 1.0)
    for j, bernoulli in enumerate(_BERNOULLI, start=1):
        tail += bernoulli / factorial * rising * power
        rising *= (s + 2 * j - 1) * (s + 2 * j)
        factorial *= (2 * j + 1) * (2 * j + 2)
        power /= z * z
    return total + tail


def polygamma(n: Any, x: np.ndarray) -> np.ndarray:
    """The ``n``-th derivative of digamma: ``(-1)**(n+1) n! zeta(n + 1, x)`` for ``n >= 1``."""
    order = int(np.asarray(n).reshape(-1)[0])
    if order < 0 or order != np.asarray(n).reshape(-1)[0]:
        raise ValueError(f"polygamma's n must be an integer >= 0, given {n}")
    x = np.asarray(x, dtype=np.float64)
    if order == 0:
        return digamma(x)
    with np.errstate(all="ignore"):
        out = (-1.0) ** (order + 1) * math.factorial(order) * _hurwitz_zeta(order + 1, x)
    out[np.isnan(x) | np.isneginf(x) | (np.isposinf(x) & (order > 1))] = np.nan  # as PyTorch
    return out


def mvlgamma(x: np.ndarray, p: Any) -> np.ndarray:
    """The multivariate log-gamma of dimension ``p``: ``p(p-1)/4 log(pi)`` plus the sum of
    ``lgamma(x - j/2)`` for j < p."""
    dims = int(np.asarray(p).reshape(-1)[0])
    if dims < 1:
        raise ValueError(f"mvlgamma's p must be >= 1, given {p}")
    x = np.asarray(x, dtype=np.float64)
    if (x <= (dims - 1) / 2).any():  # PyTorch refuses these too
        raise ValueError(f"mvlgamma of dimension {dims} needs every element > {(dims - 1) / 2}")
    return dims * (dims - 1) / 4 * math.log(math.pi) + sum(lgamma(x - j / 2) for j in range(dims))


# ----------------------------------------------------------------------------------------
# Bessel, sinc
# ----------------------------------------------------------------------------------------
#: numpy's i0 overflows beyond ~709; from here on the asymptotic series is exact to float64.
_I0E_SERIES_FROM = 700.0


def i0e(x: np.ndarray) -> np.ndarray:
    """``exp(-|x|) I0(x)``, the exponentially scaled modified Bessel function of order 0."""
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    out = np.empty_like(a)
    near = ~(a >= _I0E_SERIES_FROM)  # NaN goes this way, and stays NaN
    out[near] = np.i0(a[near]) * np.exp(-a[near])
    z = a[~near]  # I0(z) e^-z ~ (1 + 1/(8z) + 9/(2 (8z)^2) + 225/(6 (8z)^3)) / sqrt(2 pi z)
    u = 1.0 / (8.0 * z)
    out[~near] = (1.0 + u * (1.0 + u * (4.5 + u * 37.5))) / np.sqrt(2.0 * np.pi * z)
    return out


def entr(x: np.ndarray) -> np.ndarray:
    """``-x log x``: 0 at 0, -inf below."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = -x * np.log(x)
    out[x == 0] = 0.0
    out[x < 0] = -np.inf
    return out


def sinc(x: np.ndarray) -> np.ndarray:
    """``sin(pi x) / (pi x)``, 1 at 0."""
    return np.sinc(np.asarray(x, dtype=np.float64))
