"""graphexec.layers._special against the standard library's math module and known identities."""

from __future__ import annotations

import math

import numpy as np
import pytest
from graphexec.layers import _special


def relative(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.max(np.abs(got - want) / np.maximum(np.abs(want), 1e-300)))


def test_erf_matches_math_erf():
    xs = np.linspace(-7, 7, 2801)
    assert np.abs(_special.erf(xs) - np.array([math.erf(v) for v in xs])).max() < 1e-14
    assert _special.erf(np.array([np.inf, -np.inf, np.nan])).tolist()[:2] == [1.0, -1.0]
    assert np.isnan(_special.erf(np.array([np.nan]))[0])


def test_erfc_keeps_its_relative_accuracy_in_the_upper_tail():
    xs = np.concatenate([np.linspace(-6, 26, 3201), [1.4999, 1.5, 1.5001]])
    assert relative(_special.erfc(xs), [math.erfc(v) for v in xs]) < 2e-13
    assert _special.erfc(np.array([30.0, -30.0, np.inf])).tolist() == [0.0, 2.0, 0.0]


def test_erfinv_inverts_erf_to_float64_accuracy():
    central = np.linspace(-0.5, 0.5, 1001)
    x = _special.erfinv(central)
    assert np.abs(np.array([math.erf(v) for v in x]) - central).max() < 5e-16
    assert relative(_special.erfinv(np.array([1e-300, -1e-12])), [_SQRT_PI_2 * 1e-300, -_SQRT_PI_2 * 1e-12]) < 1e-15
    q = np.geomspace(1e-300, 0.5, 600)  # erfinv(1 - q): checked on erfc, relative to q
    x = _special.erfinv(1.0 - q[q > 1e-16])
    assert relative([math.erfc(v) for v in x], 1.0 - (1.0 - q[q > 1e-16])) < 1e-13


def test_erfinv_edges():
    out = _special.erfinv(np.array([1.0, -1.0, 1.5, -2.0, np.nan, 0.0, -0.0]))
    assert out[:2].tolist() == [np.inf, -np.inf]
    assert np.isnan(out[2:5]).all()
    assert out[5] == 0.0 and np.signbit(out[6])


_SQRT_PI_2 = math.sqrt(math.pi) / 2


def test_ndtri_inverts_ndtr_in_both_tails():
    p = np.concatenate([np.geomspace(1e-300, 0.5, 700), 1.0 - np.geomspace(1e-15, 0.5, 300)])
    x = _special.ndtri(p)
    back = np.array([0.5 * math.erfc(-v / math.sqrt(2)) for v in x])
    assert relative(back[:700], p[:700]) < 1e-12  # the lower tail, relative to p
    assert np.abs(back[700:] - p[700:]).max() < 1e-15
    assert _special.ndtri(np.array([0.0, 1.0, 0.5])).tolist() == [-np.inf, np.inf, 0.0]
    assert np.isnan(_special.ndtri(np.array([-0.1, 1.1, np.nan]))).all()


def test_ndtr_matches_math_in_the_lower_tail():
    xs = np.linspace(-37, 8, 901)
    want = [0.5 * math.erfc(-v / math.sqrt(2)) for v in xs]
    assert relative(_special.ndtr(xs), want) < 1e-12


def test_lgamma_matches_math_lgamma():
    xs = np.concatenate([np.linspace(-20.25, 30, 4001), np.geomspace(1e-8, 1e6, 200), [1.0, 2.0]])
    xs = xs[(xs != np.floor(xs)) | (xs > 0)]
    want = np.array([math.lgamma(v) for v in xs])
    assert np.max(np.abs(_special.lgamma(xs) - want) / np.maximum(np.abs(want), 1.0)) < 1e-13
    out = _special.lgamma(np.array([0.0, -0.0, -3.0, np.inf, -np.inf, np.nan]))
    assert out[:5].tolist() == [np.inf] * 5 and np.isnan(out[5])


def test_digamma_values_and_recurrence():
    euler = 0.5772156649015329
    got = _special.digamma(np.array([1.0, 0.5, 2.0]))
    assert relative(got, [-euler, -euler - 2 * math.log(2), 1 - euler]) < 1e-14
    xs = np.concatenate([np.linspace(-9.7, 40, 997), np.geomspace(1e-6, 1e5, 100)])
    here, next_one = _special.digamma(xs), _special.digamma(xs + 1)
    scale = np.maximum(np.maximum(np.abs(here), np.abs(next_one)), 1.0)
    assert np.max(np.abs(next_one - here - 1 / xs) / scale) < 1e-13
    out = _special.digamma(np.array([0.0, -0.0, -2.0, np.inf, -np.inf, np.nan]))
    assert out[:2].tolist() == [-np.inf, np.inf] and out[3] == np.inf
    assert np.isnan(out[[2, 4, 5]]).all()


def test_polygamma_values_and_recurrence():
    """psi1(1) = pi^2/6, psi1(1/2) = pi^2/2, psi2(1) = -2 zeta(3); psi_n(x + 1) = psi_n(x) +
    (-1)^n n! / x^(n+1), negative arguments included."""
    zeta3 = 1.2020569031595942
    assert relative(_special.polygamma(1, np.array([1.0, 0.5])), [math.pi**2 / 6, math.pi**2 / 2]) < 1e-14
    assert relative(_special.polygamma(2, np.array([1.0])), [-2 * zeta3]) < 1e-14
    xs = np.linspace(-6.7, 40, 499)
    for n in (1, 2, 3, 5):
        here, next_one = _special.polygamma(n, xs), _special.polygamma(n, xs + 1)
        step = (-1) ** n * math.factorial(n) / xs ** (n + 1)
        scale = np.maximum(np.maximum(np.abs(here), np.abs(next_one)), 1.0)
        assert np.max(np.abs(next_one - here - step) / scale) < 1e-12, n
    np.testing.assert_array_equal(_special.polygamma(0, xs), _special.digamma(xs))
    assert _special.polygamma(1, np.array([0.0, -3.0])).tolist() == [np.inf, np.inf]
    with pytest.raises(ValueError, match="integer >= 0"):
        _special.polygamma(-1, xs)


def test_mvlgamma_is_a_sum_of_lgammas():
    x = np.linspace(2.6, 30, 40)
    lgammas = [np.array([math.lgamma(v - j / 2) for v in x]) for j in range(3)]
    want = 3 * 2 / 4 * math.log(math.pi) + sum(lgammas)
    assert relative(_special.mvlgamma(x, 3), want) < 1e-13
    with pytest.raises(ValueError, match="> 1.0"):
        _special.mvlgamma(np.array([1.0]), 3)


@pytest.mark.parametrize("x", [0.0, 0.3, 5.0, 80.0, 650.0, -40.0])
def test_i0e_is_scaled_i0(x):
    assert relative(_special.i0e(np.array([x])), [np.i0(x) * math.exp(-abs(x))]) < 1e-14


def scaled_i0_by_quadrature(x: float) -> float:
    """exp(-x) I0(x) = (1/pi) int_0^pi exp(x (cos t - 1)) dt, by the trapezoidal rule (a
    smooth periodic integrand: it converges fast)."""
    t = np.linspace(0.0, np.pi, 400_001)
    f = np.exp(x * (np.cos(t) - 1.0))
    return float((f.sum() - 0.5 * (f[0] + f[-1])) * (t[1] - t[0]) / np.pi)


@pytest.mark.parametrize("x", [650.0, 699.99, 700.01, 2500.0, -1e4])
def test_i0e_either_side_of_the_overflow_of_i0(x):
    assert relative(_special.i0e(np.array([x])), [scaled_i0_by_quadrature(abs(x))]) < 1e-12


def test_i0e_edges():
    out = _special.i0e(np.array([np.inf, -np.inf, np.nan]))
    assert out[:2].tolist() == [0.0, 0.0] and np.isnan(out[2])


def test_erfcx_and_log_ndtr_past_the_underflow_of_erfc():
    xs = np.linspace(-5, 25, 601)
    want = [math.exp(v * v) * math.erfc(v) for v in xs]
    assert relative(_special.erfcx(xs), want) < 1e-12
    far = _special.erfcx(np.array([1e3, 1e8, np.inf, -30.0]))  # erfcx(x) ~ 1 / (x sqrt(pi))
    assert relative(far[:2], [1 / (1e3 * math.sqrt(math.pi)) * (1 - 1 / 2e6), 1 / (1e8 * math.sqrt(math.pi))]) < 1e-12
    assert far[2] == 0.0 and far[3] == np.inf
    xs = np.linspace(-37, 8, 901)
    want = [math.log(0.5 * math.erfc(-v / math.sqrt(2))) if v < 0 else math.log1p(-0.5 * math.erfc(v / math.sqrt(2)))
            for v in xs]
    assert np.max(np.abs(_special.log_ndtr(xs) - want) / np.maximum(np.abs(want), 1e-300)) < 1e-12
    deep = _special.log_ndtr(np.array([-1e3, -np.inf]))  # ~ -x^2/2 - log(-x sqrt(2 pi))
    assert relative(deep[0], -5e5 - math.log(1e3 * math.sqrt(2 * math.pi)) - 1e-6) < 1e-12 and deep[1] == -np.inf


def test_entr():
    out = _special.entr(np.array([0.0, 0.5, 1.0, -1.0, np.nan]))
    assert out[:4].tolist() == [0.0, 0.5 * math.log(2), -0.0, -np.inf] and np.isnan(out[4])
