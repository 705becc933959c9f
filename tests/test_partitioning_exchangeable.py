"""variance_partitioning warns where its resampling treats autocorrelated
rows as exchangeable: rows bootstrapped without groups, band rows shuffled."""

import warnings

import numpy as np
import pytest
from sklearn.model_selection import KFold
from test_ridge import _ar1_runs

from skbatch import AutocorrelationWarning, BandedRidge, variance_partitioning
from skbatch._kernels.timeseries import lag1_autocorrelation

# Runs of unequal length.
RUN_LENGTHS = (50, 35, 45, 40)
LABELS = np.array([0, 0, 1, 1])


def _model():
    return BandedRidge(band_weights=2, alphas=np.logspace(-1, 3, 4), cv=3)


def _data(phi_band0, phi_band1, phi_noise, seed=0):
    """Two bands of 2 columns, AR(1) within runs at their own coefficient;
    targets driven by band 0 in AR(1) noise."""
    band0, runs = _ar1_runs(RUN_LENGTHS, 2, phi_band0, seed)
    band1, _ = _ar1_runs(RUN_LENGTHS, 2, phi_band1, seed + 1)
    noise, _ = _ar1_runs(RUN_LENGTHS, 3, phi_noise, seed + 2)
    X = np.column_stack([band0, band1])
    signal = band0 @ np.array([1.0, -0.5])
    Y = signal[:, None] / signal.std() + noise
    return X, Y, runs


def _caught(X, Y, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = variance_partitioning(X, Y, bands=LABELS, estimator=_model(), **kwargs)
    found = [w for w in caught if issubclass(w.category, AutocorrelationWarning)]
    return result, [str(w.message) for w in found]


def test_row_bootstrap_of_autocorrelated_residuals_warns_with_their_lag1():
    X, Y, _ = _data(0.8, 0.8, 0.9)
    _, messages = _caught(X, Y, n_bootstrap=2)
    assert len(messages) == 1
    assert "without groups" in messages[0] and "runs as groups" in messages[0]
    # The statistic is the median lag-1 autocorrelation of the full model's
    # held-out residuals: a loop of fits on the same (KFold(5)) folds.
    residuals = np.empty_like(Y)
    for train, test in KFold(5).split(X):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            model = _model().set_params(bands=LABELS).fit(X[train], Y[train])
        residuals[test] = Y[test] - model.predict(X[test])
    median = np.median(lag1_autocorrelation(residuals))
    assert median > 0.4
    assert f"autocorrelation {median:.2f} over 3 target(s)" in messages[0]


def test_row_bootstrap_of_white_rows_and_run_bootstrap_do_not_warn():
    X, Y, runs = _data(0.0, 0.0, 0.0)
    _, messages = _caught(X, Y, n_bootstrap=2)
    assert messages == []
    X, Y, runs = _data(0.8, 0.8, 0.9)
    _, messages = _caught(X, Y, n_bootstrap=2, groups=runs)
    assert messages == []


@pytest.mark.parametrize("groups", [False, True])
def test_shuffle_warns_for_the_autocorrelated_band_only(groups):
    # Band 0 autocorrelated, band 1 white: shuffling band 1's rows keeps
    # its distribution under the null, shuffling band 0's does not.
    X, Y, runs = _data(0.8, 0.0, 0.9)
    kwargs = dict(n_permutations=3, groups=runs if groups else None)
    with_shuffle, messages = _caught(X, Y, permutation_type="shuffle", **kwargs)
    assert len(messages) == 1
    assert "band 0's columns" in messages[0] and "circular_shift" in messages[0]
    _, messages = _caught(X, Y, permutation_type="circular_shift", **kwargs)
    assert messages == []
    # A warning only: the p-values are those of the same call unwarned.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = variance_partitioning(
            X,
            Y,
            bands=LABELS,
            estimator=_model(),
            permutation_type="shuffle",
            **kwargs,
        )
    np.testing.assert_array_equal(with_shuffle.pvalue, again.pvalue)


def test_shuffle_of_white_residuals_does_not_warn():
    X, Y, _ = _data(0.8, 0.8, 0.0)
    # The targets are band 0's signal in white noise: once fit, the
    # residuals are white even though both bands are autocorrelated.
    _, messages = _caught(X, Y, n_permutations=3, permutation_type="shuffle")
    assert messages == []
