"""No quiet NaN in bootstrap intervals and standard errors.

Where ``scipy.stats.bootstrap`` returns a NaN bound it warns
``DegenerateDataWarning``; BootstrapEstimator gives NaN at the same elements
and warns :class:`skbatch.DegenerateDataWarning`, once per fit, naming the
attribute, how many of its elements and why.
"""

import inspect
import warnings

import numpy as np
import pytest
from numpy.testing import assert_array_equal
from scipy import stats
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.linear_model import Lasso, LinearRegression, Ridge

from skbatch import BandedRidge, BootstrapEstimator, DegenerateDataWarning
from skbatch.streaming import BCaAccumulator, describe_nan

N_BOOTSTRAP = 99
N_SAMPLES = 30


def regression_data(n=N_SAMPLES, n_features=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, n_features))
    y = X @ np.linspace(1.0, -1.0, n_features) + rng.standard_normal(n)
    return X, y


def fit_recording(estimator, X, y, **params):
    """Fit a BootstrapEstimator; its DegenerateDataWarnings and the fit."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        boot = BootstrapEstimator(estimator, **params).fit(X, y)
    return boot, [w for w in caught if issubclass(w.category, DegenerateDataWarning)]


def scipy_seed(value):
    """scipy's bootstrap seed keyword: ``rng`` from 1.15 on, before it
    ``random_state`` (the lowest scipy the project declares is 1.10)."""
    if "rng" in inspect.signature(stats.bootstrap).parameters:
        return {"rng": value}
    return {"random_state": value}


def scipy_bca(statistic, n_samples):
    """scipy's BCa interval of ``statistic`` (of the rows' indices), and
    whether scipy warned DegenerateDataWarning."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = stats.bootstrap(
            (np.arange(n_samples),),
            lambda rows: statistic(np.asarray(rows, dtype=int)),
            vectorized=False,
            n_resamples=N_BOOTSTRAP,
            method="BCa",
            **scipy_seed(0),
        )
    warned = any(issubclass(w.category, stats.DegenerateDataWarning) for w in caught)
    return result.confidence_interval, warned


@pytest.mark.parametrize(
    "estimator, level",
    [
        # The batched linear path, and the generic (refit) path.
        (LinearRegression(), 0.0),
        (Lasso(alpha=0.1), 2.0),
    ],
)
def test_bca_of_constant_target_is_nan_and_warns_as_scipy(estimator, level):
    X, _ = regression_data()
    y = np.full(N_SAMPLES, level)
    boot, caught = fit_recording(
        estimator, X, y, n_bootstrap=N_BOOTSTRAP, ci_method="bca"
    )

    def fitted(rows):
        fit = type(estimator)(**estimator.get_params()).fit(X[rows], y[rows])
        return fit

    for name, statistic in [
        ("coef_", lambda rows: fitted(rows).coef_[0]),
        ("intercept_", lambda rows: fitted(rows).intercept_),
    ]:
        interval, scipy_warned = scipy_bca(statistic, N_SAMPLES)
        assert scipy_warned
        assert np.isnan(interval.low) and np.isnan(interval.high)
        result = boot.results_[name]
        assert np.all(np.isnan(result.ci_lower))
        assert np.all(np.isnan(result.ci_upper))
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "coef_: 3 of 3 elements" in message
    assert "intercept_: 1 of 1 element" in message
    assert "every replicate is equal" in message
    assert "scipy" in message


class DistinctRows(RegressorMixin, BaseEstimator):
    """Counts the distinct rows it is fit on: every resample has fewer than
    the data, so every replicate lies below the estimate."""

    def fit(self, X, y):
        self.distinct_ = np.array([float(len(np.unique(X, axis=0)))])
        self.mean_ = np.array([np.mean(y)])
        return self

    def predict(self, X):
        return np.full(len(X), self.mean_[0])


def test_bca_with_every_replicate_on_one_side_is_nan_as_scipy():
    X, y = regression_data()
    boot, caught = fit_recording(
        DistinctRows(),
        X,
        y,
        n_bootstrap=N_BOOTSTRAP,
        ci_method="bca",
        attributes=["distinct_", "mean_"],
    )
    interval, scipy_warned = scipy_bca(lambda rows: len(np.unique(rows)), N_SAMPLES)
    assert scipy_warned and np.isnan(interval.low) and np.isnan(interval.high)
    assert np.isnan(boot.results_["distinct_"].ci_lower).all()
    assert np.isnan(boot.results_["distinct_"].ci_upper).all()
    # The mean of y is well posed: finite, and not in the warning.
    assert np.isfinite(boot.results_["mean_"].ci_lower).all()
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "distinct_: 1 of 1 element" in message
    assert "one side of the estimate" in message
    assert "mean_" not in message


def test_bca_band_of_weight_zero_warns():
    X, _ = regression_data(n_features=4)
    rng = np.random.default_rng(1)
    Y = np.column_stack([X[:, :2] @ [1.0, -1.0], X[:, 0]])
    Y = Y + rng.standard_normal(Y.shape)
    # Band 1 has weight 0: its coefficients are exactly 0 in every fit.
    banded = BandedRidge(
        bands=[0, 0, 1, 1], band_weights=np.array([[1.0, 0.0]]), alphas=1.0
    )
    boot, caught = fit_recording(banded, X, Y, n_bootstrap=N_BOOTSTRAP, ci_method="bca")
    coef = boot.results_["coef_"]
    zero_band = np.zeros(coef.estimate.shape, dtype=bool)
    zero_band[:, 2:] = True
    assert_array_equal(coef.estimate[zero_band], 0.0)
    # scipy on that band's constant distribution: NaN, with a warning.
    interval, scipy_warned = scipy_bca(lambda rows: 0.0, N_SAMPLES)
    assert scipy_warned and np.isnan(interval.low)
    assert_array_equal(np.isnan(coef.ci_lower), zero_band)
    assert_array_equal(np.isnan(coef.ci_upper), zero_band)
    assert np.isfinite(boot.results_["intercept_"].ci_lower).all()
    assert len(caught) == 1
    message = str(caught[0].message)
    assert f"coef_: {zero_band.sum()} of {zero_band.size} elements" in message
    assert "intercept_" not in message


class NaNOnRepeatedRows(RegressorMixin, BaseEstimator):
    """Least squares whose fit gives NaN coefficients on repeated rows, as
    every bootstrap resample of the rows has; the data itself has none."""

    def fit(self, X, y):
        self.coef_ = LinearRegression().fit(X, y).coef_
        if len(np.unique(X, axis=0)) < len(X):
            self.coef_ = np.full_like(self.coef_, np.nan)
        return self

    def predict(self, X):
        return X @ self.coef_


@pytest.mark.parametrize("ci_method", ["percentile", "basic", "bca"])
def test_nan_replicates_warn(ci_method):
    X, y = regression_data()
    boot, caught = fit_recording(
        NaNOnRepeatedRows(),
        X,
        y,
        n_bootstrap=N_BOOTSTRAP,
        ci_method=ci_method,
        return_samples=True,
    )
    result = boot.results_["coef_"]
    assert np.isfinite(result.estimate).all()
    # np.percentile of the replicates, and scipy's standard error.
    expected = np.percentile(result.samples, [2.5, 97.5], axis=0)
    assert np.isnan(expected).all()
    assert np.isnan(result.ci_lower).all() and np.isnan(result.ci_upper).all()
    assert np.isnan(result.standard_error).all()
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "coef_: 3 of 3 elements" in message
    assert "a replicate is NaN" in message


@pytest.mark.parametrize("ci_method", ["percentile", "basic", "bca"])
def test_well_posed_fit_does_not_warn(ci_method):
    X, y = regression_data()
    Y = np.column_stack([y, X[:, 1] - y])
    with warnings.catch_warnings():
        warnings.simplefilter("error", DegenerateDataWarning)
        for estimator in (Ridge(), Lasso(alpha=0.01)):
            boot = BootstrapEstimator(
                estimator, n_bootstrap=N_BOOTSTRAP, ci_method=ci_method
            ).fit(X, Y)
            for result in boot.results_.values():
                assert np.isfinite(result.ci_lower).all()
                assert np.isfinite(result.ci_upper).all()


def test_percentile_of_constant_distribution_is_exact():
    # Not undefined: the percentile interval of a constant is [c, c].
    X, _ = regression_data()
    y = np.zeros(N_SAMPLES)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DegenerateDataWarning)
        boot = BootstrapEstimator(
            LinearRegression(), n_bootstrap=N_BOOTSTRAP, ci_method="percentile"
        ).fit(X, y)
    assert_array_equal(boot.results_["coef_"].ci_lower, 0.0)
    assert_array_equal(boot.results_["coef_"].ci_upper, 0.0)


class NaNOnFewerRows(RegressorMixin, BaseEstimator):
    """Least squares that gives NaN on fewer rows than the data: every
    leave-one-out fit of the jackknife, but no bootstrap resample."""

    def fit(self, X, y):
        self.coef_ = LinearRegression().fit(X, y).coef_
        if len(X) < N_SAMPLES:
            self.coef_ = np.full_like(self.coef_, np.nan)
        return self

    def predict(self, X):
        return X @ self.coef_


def test_bca_with_nan_jackknife_is_nan_as_scipy():
    X, y = regression_data()
    boot, caught = fit_recording(
        NaNOnFewerRows(), X, y, n_bootstrap=N_BOOTSTRAP, ci_method="bca"
    )

    def first_coef(rows):
        return NaNOnFewerRows().fit(X[rows], y[rows]).coef_[0]

    interval, scipy_warned = scipy_bca(first_coef, N_SAMPLES)
    assert scipy_warned and np.isnan(interval.low) and np.isnan(interval.high)
    result = boot.results_["coef_"]
    assert np.isfinite(result.standard_error).all()
    assert np.isnan(result.ci_lower).all() and np.isnan(result.ci_upper).all()
    assert len(caught) == 1
    assert "the jackknife acceleration is 0/0 or NaN" in str(caught[0].message)


class NaNOnAllRows(RegressorMixin, BaseEstimator):
    """Least squares that gives NaN on rows without repeats: the fit on all
    data, but no bootstrap resample."""

    def fit(self, X, y):
        self.coef_ = LinearRegression().fit(X, y).coef_
        if len(np.unique(X, axis=0)) == len(X):
            self.coef_ = np.full_like(self.coef_, np.nan)
        return self

    def predict(self, X):
        return X @ self.coef_


def test_basic_interval_around_a_nan_estimate_warns():
    X, y = regression_data()
    boot, caught = fit_recording(
        NaNOnAllRows(), X, y, n_bootstrap=N_BOOTSTRAP, ci_method="basic"
    )
    result = boot.results_["coef_"]
    assert np.isnan(result.estimate).all()
    assert np.isfinite(result.standard_error).all()
    assert np.isnan(result.ci_lower).all()
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "coef_: 3 of 3 elements, 3 where the estimate is NaN" in message


@pytest.mark.parametrize("keep_samples", [True, False], ids=["kept", "two-pass"])
def test_bca_accumulator_explains_each_nan(keep_samples):
    # Element 0 constant at the estimate, 1 every replicate above it, 2 a
    # NaN replicate, 3 well posed: the NaN conditions of scipy's BCa.
    rng = np.random.default_rng(5)
    replicates = rng.standard_normal((200, 4))
    replicates[:, 0] = 1.0
    replicates[:, 1] = np.abs(replicates[:, 1]) + 1.0
    replicates[7, 2] = np.nan
    estimate = np.array([1.0, 0.0, 0.0, 0.0])
    acceleration = np.array([np.nan, 0.1, 0.1, 0.1])
    acc = BCaAccumulator((4,), 200, 0.95, estimate, keep_samples=keep_samples)
    second = acc.update(replicates).second_pass(acceleration)
    if second is not None:
        second.update(replicates)
    lower, upper = acc.interval(second)
    assert_array_equal(np.isnan(lower), [True, True, True, False])
    assert_array_equal(np.isnan(upper), [True, True, True, False])
    message = describe_nan({"theta": ((lower, upper, acc.std), acc.nan_reasons())})
    assert "theta: 3 of 4 elements" in message
    for reason in (
        "every replicate is equal",
        "every replicate lies on one side",
        "a replicate is NaN",
    ):
        assert f"1 where {reason}" in message
