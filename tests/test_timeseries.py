import numpy as np
import pytest
from numpy.testing import assert_allclose

from skbatch._kernels.timeseries import (
    lag1_autocorrelation,
    min_rows_for_block_length,
    optimal_block_length,
)


def politis_white_reference(x):
    """Politis and White (2004) with Patton, Politis and White's (2009)
    correction, written loop by loop from the formulas arch's
    ``optimal_block_length`` documents: (b_stationary, b_circular)."""
    n = len(x)
    e = [v - sum(x) / n for v in x]
    kn = max(5, int(np.log10(n)))
    m_max = int(np.ceil(np.sqrt(n))) + kn
    b_max = np.ceil(min(3 * np.sqrt(n), n / 3))
    band = 2 * np.sqrt(np.log10(n) / n)
    gamma, rho = [], []
    for lag in range(m_max + 1):
        cross = sum(e[t] * e[t - lag] for t in range(lag, n))
        left = sum(e[t] ** 2 for t in range(lag + 1, n))
        right = sum(e[t] ** 2 for t in range(n - lag - 1))
        gamma.append(cross / n)
        rho.append(abs(cross) / np.sqrt(left * right))
    m_hat = None
    for lag in range(kn, m_max + 1):
        if all(r < band for r in rho[lag - kn : lag]):
            m_hat = lag - kn
            break
    m = m_max if m_hat is None else min(2 * max(m_hat, 1), m_max)

    def h(t):
        return 1.0 if abs(t) <= 0.5 else max(0.0, 2 * (1 - abs(t)))

    g = sum(2 * h(k / m) * k * gamma[k] for k in range(1, m + 1))
    sigma2 = gamma[0] + sum(2 * h(k / m) * gamma[k] for k in range(1, m + 1))
    lengths = []
    for c in (2.0, 4.0 / 3.0):
        lengths.append(
            min((2 * g**2 / (c * sigma2**2)) ** (1 / 3) * n ** (1 / 3), b_max)
        )
    return lengths


def ar1(n, phi, seed):
    noise = np.random.default_rng(seed).standard_normal(n)
    x = np.empty(n)
    x[0] = noise[0] / np.sqrt(1 - phi**2)
    for t in range(1, n):
        x[t] = phi * x[t - 1] + noise[t]
    return x


@pytest.mark.parametrize("phi", [0.0, 0.5, 0.9, 0.98])
@pytest.mark.parametrize("n", [60, 400])
def test_block_length_is_the_politis_white_rule(phi, n):
    x = ar1(n, phi, seed=int(100 * phi) + n)
    stationary, circular = politis_white_reference(list(x))
    assert_allclose(
        optimal_block_length(x, block_scheme="stationary"), stationary, rtol=1e-10
    )
    assert_allclose(
        optimal_block_length(x, block_scheme="circular"), circular, rtol=1e-10
    )
    # The moving-block bootstrap has the circular one's optimal length.
    assert_allclose(
        optimal_block_length(x, block_scheme="moving"), circular, rtol=1e-10
    )


def test_block_length_columns_and_runs_are_separate():
    series = np.column_stack([ar1(300, 0.3, 1), ar1(300, 0.9, 2)])
    runs = np.repeat([0, 1], [180, 120])
    got = optimal_block_length(series, runs, "stationary")
    for column in range(2):
        per_run = [
            politis_white_reference(list(series[runs == r, column]))[0] for r in (0, 1)
        ]
        assert_allclose(got[column], (180 * per_run[0] + 120 * per_run[1]) / 300)


def test_block_length_grows_with_the_autocorrelation():
    lengths = [
        np.mean([optimal_block_length(ar1(1000, phi, s))[0] for s in range(5)])
        for phi in (0.0, 0.4, 0.7, 0.9)
    ]
    assert np.all(np.diff(lengths) > 0)


def test_constant_series_has_no_block_length():
    assert np.isnan(optimal_block_length(np.ones(50))[0])


def test_shortest_series_for_the_rule():
    n = min_rows_for_block_length()
    assert np.isfinite(optimal_block_length(ar1(n, 0.5, 3))[0])
    kn, m_max = 5, int(np.ceil(np.sqrt(n - 1))) + 5
    assert m_max + 2 > n - 1 and kn == 5


def test_lag1_autocorrelation_within_runs():
    x = np.column_stack([ar1(200, 0.8, 4), ar1(200, -0.5, 5)])
    runs = np.repeat([0, 1, 2], [50, 70, 80])
    num = np.zeros(2)
    den = np.zeros(2)
    for r in range(3):
        e = x[runs == r] - x[runs == r].mean(axis=0)
        num += (e[1:] * e[:-1]).sum(axis=0)
        den += (e**2).sum(axis=0)
    assert_allclose(lag1_autocorrelation(x, runs), num / den)
    assert np.isnan(lag1_autocorrelation(np.zeros(10))[0])
