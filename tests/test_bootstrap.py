"""Tests of skbatch.bootstrap: BootstrapEstimator and BootstrapResult.

References are independent of the implementation: sklearn estimators refit
on the resampled rows in drawn order (rebuilt from ``bootstrap_rows``),
``np.percentile`` and ``np.std`` of the samples, and naive loops.
"""

import pickle
import re
import sys
import threading
import time
import tracemalloc
import warnings

import joblib
import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy.linalg import LinAlgWarning
from sklearn.base import BaseEstimator, RegressorMixin, clone
from sklearn.linear_model import LinearRegression, Ridge, RidgeCV
from sklearn.model_selection import GridSearchCV
from sklearn.neighbors import KNeighborsRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer, StandardScaler
from sklearn.tree import DecisionTreeRegressor
from threadpoolctl import threadpool_limits

import skbatch._engine
import skbatch._engine.preflight
import skbatch._kernels.linalg
import skbatch.bootstrap
from skbatch import BatchedRidge, BootstrapEstimator, BootstrapResult
from skbatch._backends.numpy import threads as blas_threads
from skbatch._engine import run_batched
from skbatch._ridge import problems
from skbatch.random import bootstrap_counts, bootstrap_rows, resolve_entropy
from skbatch.ridge import AutocorrelationWarning
from skbatch.streaming import BootstrapAccumulator
from skbatch.testing import simulate_oom


def make_data(n_samples=40, n_features=5, n_targets=3, seed=0, offset=3.0):
    """Data with non-zero means, so that intercept handling matters."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n_samples, n_features)) + offset
    coef = rng.standard_normal((n_features, n_targets))
    Y = X @ coef + rng.standard_normal((n_samples, n_targets)) + 2 * offset
    return X, (Y[:, 0] if n_targets == 1 else Y)


def resampled_rows(random_state, n_bootstrap, n_samples, groups=None):
    """Row indices of every replicate in drawn order, rebuilt from the seed
    streams: refits whose result depends on row order (an inner K-fold) get
    them in this order."""
    return bootstrap_rows(
        resolve_entropy(random_state), np.arange(n_bootstrap), n_samples, groups
    )


def naive_samples(estimator, X, y, rows, attribute):
    return np.stack(
        [getattr(clone(estimator).fit(X[r], y[r]), attribute) for r in rows]
    )


def last_step_linear(pipeline):
    """A callable ``attributes``: coef_ and intercept_ of a pipeline's last step."""
    return {"coef_": pipeline[-1].coef_, "intercept_": pipeline[-1].intercept_}


def generic_ridge(**ridge_params):
    """Ridge behind a no-op pipeline step: forced through the generic path."""
    return make_pipeline(FunctionTransformer(), Ridge(**ridge_params))


class FailsWithoutFirstRow(RegressorMixin, BaseEstimator):
    """Fits only when the first sample (marked by X[:, 0] == -1) is present."""

    def fit(self, X, y):
        if not np.any(X[:, 0] == -1):
            raise ArithmeticError("first row missing")
        self.coef_ = np.zeros(X.shape[1])
        return self

    def predict(self, X):
        return np.zeros(len(X))


class RowCounter(RegressorMixin, BaseEstimator):
    """Records how often each row (its id in X[:, 0]) was in its training set."""

    def __init__(self, n_rows=0):
        self.n_rows = n_rows

    def fit(self, X, y):
        self.counts_ = np.bincount(X[:, 0].astype(int), minlength=self.n_rows)
        return self

    def predict(self, X):
        return np.zeros(len(X))


class MustNotFit(RegressorMixin, BaseEstimator):
    """Fails the test if bad parameters reach the estimator's fit."""

    def fit(self, X, y):
        raise AssertionError("fit was reached despite invalid parameters")


# Intervals and standard errors --------------------------------------------------------


@pytest.mark.parametrize("generic", [False, True], ids=["fast", "generic"])
def test_interval_and_standard_error_match_samples(generic):
    X, Y = make_data(n_targets=2)
    params = dict(n_bootstrap=101, return_samples=True, random_state=0)
    if generic:
        boot = BootstrapEstimator(
            generic_ridge(), attributes=last_step_linear, **params
        )
    else:
        boot = BootstrapEstimator(Ridge(), **params)
    boot.fit(X, Y)
    assert set(boot.results_) == {"coef_", "intercept_"}
    for result in boot.results_.values():
        assert isinstance(result, BootstrapResult)
        samples = result.samples
        assert samples.shape == (101, *result.estimate.shape)
        assert_allclose(
            result.ci_lower, np.percentile(samples, 2.5, axis=0), rtol=0, atol=1e-12
        )
        assert_allclose(
            result.ci_upper, np.percentile(samples, 97.5, axis=0), rtol=0, atol=1e-12
        )
        assert_allclose(result.standard_error, samples.std(axis=0, ddof=1), rtol=1e-12)
    full = Ridge().fit(X, Y)
    assert_allclose(boot.results_["coef_"].estimate, full.coef_, rtol=1e-12)


def test_confidence_level_and_basic_interval():
    X, y = make_data(n_targets=1)
    common = dict(n_bootstrap=60, confidence_level=0.8, random_state=3)
    percentile = BootstrapEstimator(Ridge(), return_samples=True, **common).fit(X, y)
    basic = BootstrapEstimator(Ridge(), ci_method="basic", **common).fit(X, y)
    for name, result in percentile.results_.items():
        low, high = np.percentile(result.samples, [10, 90], axis=0)
        assert_allclose(result.ci_lower, low, atol=1e-12)
        assert_allclose(result.ci_upper, high, atol=1e-12)
        reflected = basic.results_[name]
        assert reflected.samples is None
        assert_allclose(reflected.ci_lower, 2 * result.estimate - high, atol=1e-12)
        assert_allclose(reflected.ci_upper, 2 * result.estimate - low, atol=1e-12)
    assert percentile.results_["intercept_"].estimate.shape == ()


def test_a_numpy_scalar_confidence_level_reads_its_value_in_double():
    """np.float16(0.9) is 0.89990234375: its quantiles, not float16's rounding."""
    X, y = make_data(n_targets=1)
    level = np.float16(0.9)
    boot = BootstrapEstimator(
        Ridge(), n_bootstrap=200, confidence_level=level, return_samples=True
    ).fit(X, y)
    q = 100 * (1 - float(level)) / 2, 100 * (1 + float(level)) / 2
    for result in boot.results_.values():
        low, high = np.percentile(result.samples, q, axis=0)
        assert_allclose(result.ci_lower, low, rtol=1e-12, atol=1e-14)
        assert_allclose(result.ci_upper, high, rtol=1e-12, atol=1e-14)


# Each replicate is the reference estimator on the resampled rows ----------------------


LINEAR_CASES = {
    "ridge": (Ridge(alpha=1.0), Ridge(alpha=1.0)),
    "ridge-no-intercept": (
        Ridge(alpha=2.0, fit_intercept=False),
        Ridge(alpha=2.0, fit_intercept=False),
    ),
    # An array: scikit-learn takes a list as alpha only from 1.9 on.
    "ridge-per-target": (
        Ridge(alpha=np.array([0.1, 1.0, 30.0])),
        Ridge(alpha=np.array([0.1, 1.0, 30.0])),
    ),
    "linear-regression": (LinearRegression(), LinearRegression()),
    "linear-regression-no-intercept": (
        LinearRegression(fit_intercept=False),
        LinearRegression(fit_intercept=False),
    ),
    "batched-ridge": (BatchedRidge(alphas=3.0), Ridge(alpha=3.0)),
    "batched-ridge-no-intercept": (
        BatchedRidge(alphas=3.0, fit_intercept=False),
        Ridge(alpha=3.0, fit_intercept=False),
    ),
}


@pytest.mark.parametrize(
    "shape, drawn_rows",
    [((40, 5), False), ((40, 5), True), ((12, 30), False)],
    ids=["n>p", "n>p-drawn-rows", "p>n"],
)
@pytest.mark.parametrize("case", list(LINEAR_CASES))
def test_fast_path_replicates_equal_sklearn_on_resampled_rows(
    case, shape, drawn_rows, monkeypatch
):
    if drawn_rows:
        # The kernel's products over each replicate's drawn rows only, which
        # it otherwise keeps for designs of many columns and much work.
        monkeypatch.setattr(skbatch._kernels.linalg.weighted, "GATHER_MIN_FLOPS", 0)
        monkeypatch.setattr(skbatch._kernels.linalg.weighted, "GATHER_MIN_COLUMNS", 0)
    estimator, reference = LINEAR_CASES[case]
    n_samples, n_features = shape
    X, Y = make_data(n_samples, n_features, 3, seed=1)
    boot = BootstrapEstimator(
        estimator, n_bootstrap=12, return_samples=True, random_state=7
    ).fit(X, Y)
    rows = resampled_rows(7, 12, n_samples)
    for name in ("coef_", "intercept_"):
        samples = boot.results_[name].samples
        expected = naive_samples(reference, X, Y, rows, name)
        # BatchedRidge keeps a zero intercept per target, sklearn a scalar 0.0.
        expected = expected.reshape(
            expected.shape + (1,) * (samples.ndim - expected.ndim)
        )
        assert_allclose(samples, np.broadcast_to(expected, samples.shape), atol=1e-8)


def test_batched_ridge_tuned_alphas_are_held_fixed_per_target():
    X, Y = make_data(60, 8, 3, seed=2)
    Y = Y * [1.0, 30.0, 0.03]  # different noise levels choose different alphas
    Y[:, 2] += np.random.default_rng(0).standard_normal(60) * 10
    estimator = BatchedRidge(alphas=np.logspace(-3, 4, 15))
    boot = BootstrapEstimator(
        estimator, n_bootstrap=10, return_samples=True, random_state=0
    ).fit(X, Y)
    alpha = boot.estimator_.alpha_
    assert np.unique(alpha).size > 1
    rows = resampled_rows(0, 10, 60)
    expected = naive_samples(Ridge(alpha=alpha), X, Y, rows, "coef_")
    assert_allclose(boot.results_["coef_"].samples, expected, atol=1e-8)
    assert_allclose(boot.results_["coef_"].estimate, boot.estimator_.coef_, rtol=1e-12)


@pytest.mark.parametrize(
    "estimator, frozen",
    [
        (RidgeCV(alphas=[0.01, 1.0, 100.0]), lambda fitted: Ridge(fitted.alpha_)),
        (
            RidgeCV(alphas=[0.01, 1.0, 100.0], alpha_per_target=True),
            lambda fitted: Ridge(fitted.alpha_),
        ),
        (
            GridSearchCV(Ridge(), {"alpha": [0.01, 1.0, 100.0]}, cv=3),
            lambda fitted: clone(fitted.best_estimator_),
        ),
    ],
    ids=["ridgecv", "ridgecv-per-target", "gridsearch"],
)
def test_cv_tuned_once_then_held_fixed(estimator, frozen):
    X, Y = make_data(50, 4, 3, seed=4)
    boot = BootstrapEstimator(
        estimator, n_bootstrap=8, return_samples=True, random_state=5
    ).fit(X, Y)
    expected = naive_samples(
        frozen(boot.estimator_), X, Y, resampled_rows(5, 8, 50), "coef_"
    )
    assert_allclose(boot.results_["coef_"].samples, expected, atol=1e-8)


def test_tune_per_replicate_refits_the_search():
    X, Y = make_data(40, 3, 2, seed=6)
    search = GridSearchCV(Ridge(), {"alpha": [0.01, 100.0]}, cv=3)
    boot = BootstrapEstimator(
        search,
        n_bootstrap=5,
        tune_per_replicate=True,
        return_samples=True,
        random_state=1,
    ).fit(X, Y)
    rows = resampled_rows(1, 5, 40)
    expected = [clone(search).fit(X[r], Y[r]).best_estimator_.coef_ for r in rows]
    assert_allclose(boot.results_["coef_"].samples, expected, atol=1e-8)


def test_tuned_attribute_needs_tune_per_replicate():
    X, Y = make_data()
    boot = BootstrapEstimator(
        RidgeCV(alphas=[0.1, 10.0]), n_bootstrap=5, attributes=("coef_", "alpha_")
    )
    with pytest.raises(ValueError, match="tune_per_replicate"):
        boot.fit(X, Y)
    boot.set_params(tune_per_replicate=True, random_state=0).fit(X, Y)
    assert boot.results_["alpha_"].estimate == boot.estimator_.alpha_


def test_fast_and_generic_paths_give_the_same_samples():
    X, Y = make_data(30, 4, 2, seed=8)
    params = dict(n_bootstrap=25, return_samples=True, random_state=11)
    fast = BootstrapEstimator(Ridge(alpha=0.5), **params).fit(X, Y)
    generic = BootstrapEstimator(
        generic_ridge(alpha=0.5), attributes=last_step_linear, **params
    ).fit(X, Y)
    for name in ("coef_", "intercept_"):
        assert_allclose(
            fast.results_[name].samples, generic.results_[name].samples, atol=1e-8
        )


def test_sample_weight_is_resampled_with_the_rows():
    X, Y = make_data(30, 4, 2, seed=9)
    weight = np.random.default_rng(0).uniform(0.5, 2.0, size=30)
    params = dict(n_bootstrap=10, return_samples=True, random_state=2)
    fast = BootstrapEstimator(Ridge(), **params).fit(X, Y, sample_weight=weight)
    generic = BootstrapEstimator(
        generic_ridge(), attributes=last_step_linear, **params
    ).fit(X, Y, ridge__sample_weight=weight)
    rows = resampled_rows(2, 10, 30)
    expected = [Ridge().fit(X[r], Y[r], sample_weight=weight[r]).coef_ for r in rows]
    assert_allclose(fast.results_["coef_"].samples, expected, atol=1e-8)
    assert_allclose(generic.results_["coef_"].samples, expected, atol=1e-8)


def test_float32_input_computes_in_float32_close_to_float64():
    X, Y = make_data(50, 6, 3, seed=10, offset=0.0)
    params = dict(n_bootstrap=10, return_samples=True, random_state=0)
    double = BootstrapEstimator(Ridge(), **params).fit(X, Y)
    single = BootstrapEstimator(Ridge(), **params).fit(
        X.astype(np.float32), Y.astype(np.float32)
    )
    assert single.estimator_.coef_.dtype == np.float32
    for name in ("coef_", "intercept_"):
        assert_allclose(
            single.results_[name].samples,
            double.results_[name].samples,
            rtol=1e-3,
            atol=1e-4,
        )


@pytest.mark.parametrize("device", ["torch", "jax"])
@pytest.mark.parametrize("shape", [(40, 5), (12, 30)], ids=["n>p", "p>n"])
@pytest.mark.parametrize("alpha", [1.0, [0.1, 1.0, 10.0]], ids=["one", "per-target"])
@pytest.mark.slow
def test_array_api_backends_match_numpy(device, shape, alpha):
    pytest.importorskip(device)
    X, Y = make_data(*shape, 3, seed=12)
    params = dict(n_bootstrap=9, return_samples=True, random_state=4)
    reference = BootstrapEstimator(Ridge(alpha=alpha), **params).fit(X, Y)
    boot = BootstrapEstimator(Ridge(alpha=alpha), device=device, **params).fit(X, Y)
    assert boot.backend_.library == device
    for name in ("coef_", "intercept_"):
        assert_allclose(
            boot.results_[name].samples, reference.results_[name].samples, atol=1e-9
        )


# Invariance to batching, OOM recovery and workers -------------------------------------


def _samples(boot):
    return {name: r.samples for name, r in boot.results_.items()}


def _assert_same_results(a, b):
    for name, result in a.results_.items():
        other = b.results_[name]
        for field in ("estimate", "standard_error", "ci_lower", "ci_upper", "samples"):
            assert_allclose(
                getattr(result, field), getattr(other, field), rtol=1e-10, atol=1e-12
            )


@pytest.mark.parametrize("shape", [(40, 5), (12, 30)], ids=["n>p", "p>n"])
def test_fast_path_invariant_to_batch_size_and_oom(shape, monkeypatch):
    plans = []

    def spy(*args, **kwargs):
        plans.append(run_batched(*args, **kwargs))
        return plans[-1]

    monkeypatch.setattr(skbatch._engine, "run_batched", spy)
    X, Y = make_data(*shape, 3, seed=13)
    params = dict(n_bootstrap=37, return_samples=True, random_state=21)
    # One BLAS thread: one worker, so the reference is a single batch.
    with threadpool_limits(1, user_api="blas"):
        reference = BootstrapEstimator(Ridge(), max_memory_gb=8.0, **params)
        reference.fit(X, Y)
    tiny = BootstrapEstimator(Ridge(), max_memory_gb=5e-4, **params).fit(X, Y)
    _assert_same_results(reference, tiny)
    with simulate_oom(max_items=3):
        recovered = BootstrapEstimator(Ridge(), **params).fit(X, Y)
    _assert_same_results(reference, recovered)
    assert plans[0].n_batches == 1 and plans[1].n_batches > 1
    assert plans[2].n_oom_recoveries > 0
    unkept = BootstrapEstimator(Ridge(), max_memory_gb=5e-4, n_bootstrap=37)
    unkept.set_params(random_state=21).fit(X, Y)
    for name, result in unkept.results_.items():
        assert_allclose(
            result.ci_lower, reference.results_[name].ci_lower, rtol=0, atol=1e-12
        )
        assert_allclose(
            result.standard_error, reference.results_[name].standard_error, rtol=1e-10
        )


@pytest.mark.parametrize("block_size", [None, 3])
@pytest.mark.slow
def test_generic_path_invariant_to_n_jobs_budget_and_joblib_backend(block_size):
    X, Y = make_data(30, 4, 2, seed=14)
    params = dict(
        n_bootstrap=23,
        return_samples=True,
        random_state=99,
        attributes=last_step_linear,
        block_size=block_size,
    )

    def run(**extra):
        return BootstrapEstimator(generic_ridge(), **params, **extra).fit(X, Y)

    reference = run()
    _assert_same_results(reference, run(n_jobs=2))
    # A budget that holds one refit in flight beside the summaries and the
    # data copies (each refit 7.4e-6 GB): windows of one.
    _assert_same_results(reference, run(max_memory_gb=2.45e-4))
    with joblib.parallel_config(backend="threading"):
        _assert_same_results(reference, run(n_jobs=2))


def test_random_state_instance_is_consumed_and_reproducible():
    X, Y = make_data()
    a = BootstrapEstimator(Ridge(), n_bootstrap=5, return_samples=True)
    b = clone(a)
    a.set_params(random_state=np.random.RandomState(0)).fit(X, Y)
    b.set_params(random_state=np.random.RandomState(0)).fit(X, Y)
    assert_array_equal(a.results_["coef_"].samples, b.results_["coef_"].samples)


# Statistical behaviour ----------------------------------------------------------------


# Many refits or many data sets: over 2 s.
@pytest.mark.slow
def test_percentile_interval_covers_ols_truth_at_nominal_rate():
    rng = np.random.default_rng(2024)
    truth = np.array([1.0, -0.5, 0.0])
    covered = []
    for seed in range(200):
        X = rng.standard_normal((100, 3))
        y = 2.0 + X @ truth + rng.standard_normal(100)
        result = (
            BootstrapEstimator(
                LinearRegression(),
                n_bootstrap=200,
                attributes="coef_",
                random_state=seed,
            )
            .fit(X, y)
            .results_["coef_"]
        )
        covered.append((result.ci_lower <= truth) & (truth <= result.ci_upper))
    coverage = np.mean(covered)
    assert 0.92 <= coverage <= 0.98, coverage


def test_cluster_bootstrap_fits_each_replicate_on_whole_groups():
    groups = np.repeat(np.arange(10), 3)
    np.random.default_rng(1).shuffle(groups)
    X = np.column_stack([np.arange(30), np.ones(30)])
    boot = BootstrapEstimator(
        RowCounter(n_rows=30),
        n_bootstrap=40,
        attributes="counts_",
        return_samples=True,
        random_state=2,
    ).fit(X, np.zeros(30), groups=groups)
    seen = boot.results_["counts_"].samples
    for group in range(10):
        members = seen[:, groups == group]
        assert np.all(members == members[:, :1])
    # Each replicate draws 10 groups of 3 rows, with replacement.
    assert_array_equal(seen.sum(axis=1), 30)
    assert np.any(seen == 0) and np.any(seen >= 2)


def test_cluster_bootstrap_draws_whole_groups():
    X, Y = make_data(48, 4, 2, seed=15)
    groups = np.repeat(np.arange(12), 4)
    np.random.default_rng(0).shuffle(groups)
    boot = BootstrapEstimator(
        Ridge(), n_bootstrap=15, return_samples=True, random_state=8
    ).fit(X, Y, groups=groups)
    counts = bootstrap_counts(resolve_entropy(8), np.arange(15), 48, groups)
    for group in range(12):
        members = counts[:, groups == group]
        assert np.all(members == members[:, :1])
    assert np.all(counts.sum(axis=1) % 4 == 0)
    rows = resampled_rows(8, 15, 48, groups)
    expected = naive_samples(Ridge(), X, Y, rows, "coef_")
    assert_allclose(boot.results_["coef_"].samples, expected, atol=1e-8)
    generic = BootstrapEstimator(
        generic_ridge(),
        attributes=last_step_linear,
        n_bootstrap=15,
        return_samples=True,
        random_state=8,
    ).fit(X, Y, groups=groups)
    assert_allclose(generic.results_["coef_"].samples, expected, atol=1e-8)


# Other estimators through the generic path --------------------------------------------


def test_himalaya_ridge_cv_through_generic_path():
    pytest.importorskip("himalaya")
    from himalaya.ridge import RidgeCV as HimalayaRidgeCV

    X, Y = make_data(40, 5, 3, seed=16, offset=0.0)
    estimator = HimalayaRidgeCV(alphas=[0.1, 1.0, 10.0])
    boot = BootstrapEstimator(
        estimator,
        n_bootstrap=8,
        attributes="coef_",
        return_samples=True,
        random_state=3,
    ).fit(X, Y)
    expected = naive_samples(estimator, X, Y, resampled_rows(3, 8, 40), "coef_")
    assert boot.results_["coef_"].estimate.shape == (5, 3)
    assert_allclose(boot.results_["coef_"].samples, expected, rtol=1e-6, atol=1e-8)
    assert_allclose(boot.results_["coef_"].estimate, np.asarray(boot.estimator_.coef_))


# Many refits or many data sets: over 2 s.
@pytest.mark.slow
def test_non_linear_estimator_with_callable_returning_an_array():
    X, y = make_data(60, 3, 1, seed=17)
    boot = BootstrapEstimator(
        DecisionTreeRegressor(max_depth=2, random_state=0),
        n_bootstrap=20,
        attributes=lambda tree: tree.feature_importances_,
        return_samples=True,
        random_state=0,
        n_jobs=2,
    ).fit(X, y)
    result = boot.results_["statistic"]
    rows = resampled_rows(0, 20, 60)
    expected = naive_samples(
        DecisionTreeRegressor(max_depth=2, random_state=0),
        X,
        y,
        rows,
        "feature_importances_",
    )
    assert_allclose(result.samples, expected)
    assert_allclose(result.samples.sum(axis=1), 1.0)


def test_failing_replicate_is_named():
    X, y = make_data(20, 2, 1, seed=18)
    X[0, 0] = -1
    counts = bootstrap_counts(resolve_entropy(0), np.arange(50), 20)
    first_failure = int(np.flatnonzero(counts[:, 0] == 0)[0])
    boot = BootstrapEstimator(
        FailsWithoutFirstRow(), n_bootstrap=50, attributes="coef_", random_state=0
    )
    with pytest.raises(ArithmeticError) as e:
        boot.fit(X, y)
    if sys.version_info >= (3, 11):
        assert e.value.__notes__ == [f"Raised in bootstrap replicate {first_failure}."]


# Memory -------------------------------------------------------------------------------


def _peak_bytes(n_bootstrap, X, Y):
    boot = BootstrapEstimator(
        Ridge(),
        n_bootstrap=n_bootstrap,
        attributes="coef_",
        max_memory_gb=4.0,
        random_state=0,
    )
    tracemalloc.start()
    try:
        boot.fit(X, Y)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak, boot.fit_report_.stages[-1].batch_size


@pytest.mark.slow
def test_peak_memory_does_not_grow_with_n_bootstrap():
    # 20 features x 1000 targets = 20,000 bootstrapped coefficients; keeping
    # 5000 replicates of them would take 800 MB.
    X, Y = make_data(30, 20, 1000, seed=19)
    # One BLAS thread: batches run one after another in both fits. Side by
    # side, whether the three batches of the small fit overlap is a matter of
    # thread timing, and the peak with them (139 or 165 MB, seen on two
    # machines), not of n_bootstrap.
    # Batches of equal sizes: 600 and 5000 replicates both run batches of 200
    # (the working set grows with the batch up to the kernel's cap, not with
    # n_bootstrap).
    with threadpool_limits(1):
        small, small_batch = _peak_bytes(600, X, Y)
        large, large_batch = _peak_bytes(5000, X, Y)
    assert small_batch == large_batch
    # Far below keeping the replicates (800 MB).
    assert large <= 0.25 * 5000 * 20 * 1000 * 8, (small, large)
    # What does grow is the exact percentile tails, k = ceil((B-1)(1-c)/2) + 1
    # replicates per element: nothing else may.
    tails = BootstrapAccumulator.nbytes_needed(
        (1000, 20), 5000
    ) - BootstrapAccumulator.nbytes_needed((1000, 20), 600)
    assert large - small <= tails + 2e6, (small, large, tails)


def test_preflight_refuses_impossible_request_quickly():
    X, Y = make_data(40, 20, 500, seed=20)
    boot = BootstrapEstimator(
        Ridge(), n_bootstrap=10**9, return_samples=True, max_memory_gb=0.5
    )
    start = time.perf_counter()
    with pytest.raises(ValueError) as error:
        boot.fit(X, Y)
    assert time.perf_counter() - start < 0.5
    message = str(error.value)
    assert "GB" in message and "0.5 GB" in message
    for knob in ("n_bootstrap", "return_samples=False", "max_memory_gb", "targets"):
        assert knob in message
    # The samples alone: 10**9 replicates of 10,000 + 500 float64 values.
    needed = float(re.search(r"needs ([0-9.e+]+) GB", message).group(1))
    assert needed >= 10**9 * 10_500 * 8 / 1e9
    assert not hasattr(boot, "estimator_")


def test_preflight_counts_percentile_tails_without_samples():
    X, Y = make_data(40, 20, 500, seed=20)
    boot = BootstrapEstimator(Ridge(), n_bootstrap=10**6, max_memory_gb=1.0)
    with pytest.raises(ValueError, match="percentile tails"):
        boot.fit(X, Y)


# scikit-learn integration -------------------------------------------------------------


def test_default_estimator_delegation_and_fitted_attributes():
    X, Y = make_data(30, 4, 2, seed=21)
    boot = BootstrapEstimator(n_bootstrap=5, random_state=0).fit(X, Y)
    assert isinstance(boot.estimator_, BatchedRidge)
    assert boot.n_features_in_ == 4
    assert boot.backend_.name == "numpy"
    assert_allclose(boot.predict(X), boot.estimator_.predict(X))
    assert boot.score(X, Y) == pytest.approx(boot.estimator_.score(X, Y))
    reference = Ridge(alpha=1.0).fit(X, Y)
    assert_allclose(boot.results_["coef_"].estimate, reference.coef_, rtol=1e-10)


def test_dataframe_keeps_feature_names():
    pd = pytest.importorskip("pandas")
    X, y = make_data(30, 3, 1, seed=22)
    frame = pd.DataFrame(X, columns=["a", "b", "c"])
    boot = BootstrapEstimator(
        make_pipeline(StandardScaler(), Ridge()),
        attributes=lambda pipe: pipe[-1].coef_,
        n_bootstrap=5,
        random_state=0,
    ).fit(frame, y)
    assert list(boot.feature_names_in_) == ["a", "b", "c"]
    assert_allclose(boot.predict(frame), boot.estimator_.predict(frame))


def test_in_pipeline_and_grid_search_and_pickle():
    X, y = make_data(60, 4, 1, seed=23)
    pipeline = make_pipeline(
        StandardScaler(),
        BootstrapEstimator(Ridge(), n_bootstrap=10, random_state=0),
    )
    pipeline.fit(X, y)
    assert pipeline.predict(X).shape == (60,)
    search = GridSearchCV(
        BootstrapEstimator(Ridge(), n_bootstrap=5, random_state=0),
        {"estimator__alpha": [0.1, 10.0]},
        cv=3,
    ).fit(X, y)
    best = search.best_estimator_
    assert best.estimator_.alpha == search.best_params_["estimator__alpha"]
    restored = pickle.loads(pickle.dumps(best))
    assert_allclose(restored.predict(X), best.predict(X))
    for name, result in best.results_.items():
        for field in result._fields[:-1]:
            assert_array_equal(
                getattr(restored.results_[name], field), getattr(result, field)
            )


# Bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "params, match",
    [
        ({"n_bootstrap": 1}, "n_bootstrap must be an int >= 2, got 1"),
        ({"n_bootstrap": 10.0}, "n_bootstrap must be an int >= 2, got 10.0"),
        ({"confidence_level": 1.0}, "confidence_level .* got 1.0"),
        ({"confidence_level": 0}, "confidence_level .* got 0"),
        ({"ci_method": "BCa"}, "ci_method must be one of .* got 'BCa'"),
        ({"attributes": []}, r"attributes must be .* got \[\]"),
        ({"attributes": ("coef_", "coef_")}, "attributes must be"),
        ({"return_samples": "yes"}, "return_samples must be a bool, got 'yes'"),
        ({"n_jobs": 0}, "n_jobs must be None, a positive int .* got 0"),
        ({"max_memory_gb": -1.0}, "max_memory_gb .* got -1.0"),
        ({"verbose": -1}, "verbose must be an int >= 0, got -1"),
    ],
)
def test_invalid_parameters_raise_before_fitting(params, match):
    X, y = make_data(20, 2, 1)
    with pytest.raises(ValueError, match=match):
        BootstrapEstimator(MustNotFit(), **params).fit(X, y)


def test_groups_of_wrong_length_raise_before_fitting():
    X, y = make_data(20, 2, 1)
    with pytest.raises(ValueError, match=r"groups must be 1-D .*\(20\)"):
        BootstrapEstimator(MustNotFit(), n_bootstrap=5).fit(X, y, groups=[0] * 19)


def test_unknown_attribute_raises_before_any_replicate():
    X, y = make_data(20, 2, 1)
    X[0, 0] = -1  # the full fit succeeds, most replicates would fail
    boot = BootstrapEstimator(
        FailsWithoutFirstRow(), n_bootstrap=50, attributes=("coef_", "nope_")
    )
    with pytest.raises(ValueError, match="'nope_'.*FailsWithoutFirstRow"):
        boot.fit(X, y)
    # attributes="auto": a model without coef_ nor feature_importances_.
    with pytest.raises(ValueError, match="neither coef_ nor feature_importances_"):
        BootstrapEstimator(KNeighborsRegressor(), n_bootstrap=5).fit(X, y)


@pytest.mark.parametrize("library", ["torch", "jax"])
def test_gpu_cholesky_solve_on_cpu_arrays(library, monkeypatch):
    # The batched Cholesky branch runs on GPUs only; check its algebra here.
    pytest.importorskip(library)
    from skbatch import _backends
    from skbatch._kernels.linalg.weighted import _solve_spd
    from skbatch.backend import Backend

    monkeypatch.setattr(_backends.get(library), "solves_by_cholesky", lambda d: True)
    rng = np.random.default_rng(0)
    factor = rng.standard_normal((4, 6, 9))
    A = factor @ factor.transpose(0, 2, 1) + np.eye(6)
    B = rng.standard_normal((4, 6, 5))
    backend = Backend(library)
    with backend.context():
        solution, ill = _solve_spd(backend.asarray(A), backend.asarray(B), backend.xp)
        assert_allclose(np.asarray(solution), np.linalg.solve(A, B), atol=1e-12)
        assert ill is None
        # Only the matrix that is not positive definite is reported.
        A[2] = -np.eye(6)
        _, ill = _solve_spd(backend.asarray(A), backend.asarray(B), backend.xp)
        assert ill.tolist() == [2]


@pytest.mark.parametrize("route", ["inverse", "cholesky"])
@pytest.mark.parametrize("library", ["numpy", "torch", "jax"])
def test_solve_centres_the_right_hand_side_it_is_given(library, route, monkeypatch):
    # With an offset, the last row of B holds the sums that centre the other
    # rows: A X = B[:p] - offset B[p]', on the inverse route (CPU) and the
    # Cholesky one (GPUs, run here on CPU arrays).
    pytest.importorskip(library)
    from skbatch import _backends
    from skbatch._kernels.linalg.weighted import _solve_spd
    from skbatch.backend import Backend

    if route == "cholesky":
        if library == "numpy":
            pytest.skip("numpy has no batched Cholesky solve")
        module = _backends.get(library)
        monkeypatch.setattr(module, "solves_by_cholesky", lambda device: True)
    rng = np.random.default_rng(1)
    factor = rng.standard_normal((4, 6, 9))
    A = factor @ factor.transpose(0, 2, 1) + np.eye(6)
    B = rng.standard_normal((4, 7, 5)) + 50.0
    offset = rng.standard_normal((4, 6))
    expected = np.linalg.solve(A, B[:, :6] - offset[:, :, None] * B[:, 6:])
    backend = Backend(library)
    with backend.context():
        args = [backend.asarray(a) for a in (A, B, offset)]
        solution, _ = _solve_spd(args[0], args[1], backend.xp, offset=args[2])
        transposed, _ = _solve_spd(
            args[0], args[1], backend.xp, offset=args[2], transposed=True
        )
    assert_allclose(np.asarray(solution), expected, rtol=1e-10, atol=1e-10)
    assert_allclose(
        np.asarray(transposed), expected.transpose(0, 2, 1), rtol=1e-10, atol=1e-10
    )


def test_fast_path_batches_side_by_side_equal_batches_in_turn(monkeypatch, capsys):
    X, Y = make_data(60, 6, 4, seed=22)
    params = dict(n_bootstrap=50, return_samples=True, random_state=5, verbose=1)
    with threadpool_limits(1, user_api="blas"):
        in_turn = BootstrapEstimator(Ridge(), max_memory_gb=5e-4, **params).fit(X, Y)
    assert "side by side" not in capsys.readouterr().out
    # This little work runs in turn on any host unless the threshold is lifted.
    monkeypatch.setattr("skbatch._ridge.problems.replicates.SIDE_BY_SIDE_MIN_FLOPS", 0)
    # And the accumulators split their last update and their intervals
    # between the two threads.
    monkeypatch.setattr("skbatch.streaming._common.PARALLEL_MIN_ELEMENTS", 1)
    parts = []
    map_threads = skbatch.streaming._common.map_threads

    def recording_map_threads(fn, items, backend):
        parts.append(len(items))
        return map_threads(fn, items, backend)

    monkeypatch.setattr("skbatch.streaming._common.map_threads", recording_map_threads)
    with threadpool_limits(2, user_api="blas"):
        side_by_side = BootstrapEstimator(Ridge(), max_memory_gb=5e-4, **params)
        side_by_side.fit(X, Y)
    assert "2 side by side" in capsys.readouterr().out
    # The last update of coef_ (one piece or two, as the fold falls) and the
    # interval, each in two parts.
    assert len(parts) >= 2 and set(parts) == {2}
    _assert_same_results(in_turn, side_by_side)


@pytest.mark.parametrize("n_features", [70, 10], ids=["gathers", "stacked"])
def test_problem_counts_the_gather_buffer_of_every_thread(monkeypatch, n_features):
    # Each thread that runs batches gathers Y's drawn rows into a buffer of
    # its own, kept from batch to batch: the fixed bytes count one per
    # thread, and none where the kernel stacks its products instead.
    from skbatch.backend import Backend

    rng = np.random.default_rng(4)
    X = rng.standard_normal((200, n_features))
    Y = rng.standard_normal((200, 400))
    monkeypatch.setattr(problems.replicates, "SIDE_BY_SIDE_MIN_FLOPS", 0)
    drawn = {}
    empty = skbatch._kernels.linalg.Scratch.empty

    def spy(self, name, shape, like, xp):
        buffer = empty(self, name, shape, like, xp)
        if name == "drawn":
            drawn[threading.get_ident()] = buffer.nbytes
        return buffer

    monkeypatch.setattr(skbatch._kernels.linalg.Scratch, "empty", spy)

    def problem():
        return problems.BootstrapRidgeProblem(
            X,
            Y,
            1.0,
            fit_intercept=True,
            sample_weight=None,
            groups=None,
            block_size=None,
            entropy=resolve_entropy(0),
            backend=Backend("numpy"),
            dtype=np.dtype(np.float64),
            n_bootstrap=40,
        )

    with threadpool_limits(1, user_api="blas"):
        one = problem()
    with threadpool_limits(2, user_api="blas"):
        two = problem()
        skbatch._engine.run_problem(two, lambda ids, result: None, batch_size=5)
    buffer = min(8 * 200 * 400, skbatch._kernels.linalg.MAX_GATHER_BYTES)
    if n_features == 10:
        assert two.fixed_bytes == one.fixed_bytes
        assert drawn == {}
    else:
        assert two.fixed_bytes - one.fixed_bytes == buffer
        assert len(drawn) == 2 and sum(drawn.values()) <= 2 * buffer


@pytest.mark.parametrize("max_flops", [5e9, 0.0], ids=["small", "large"])
def test_fit_on_all_data_runs_on_one_blas_thread_before_small_batches(
    monkeypatch, max_flops
):
    # OpenBLAS's helper threads spin after a parallel call, taking a core from
    # the batches that follow side by side: a fit on all data that costs
    # little runs on one thread; a costly one keeps them all.
    monkeypatch.setattr(skbatch.bootstrap, "FULL_FIT_ONE_THREAD_MAX_FLOPS", max_flops)
    # This little work runs in turn on any host unless the threshold is lifted.
    monkeypatch.setattr(problems.replicates, "SIDE_BY_SIDE_MIN_FLOPS", 0)
    threads_in_fit = []
    fit = Ridge.fit

    def recording_fit(self, *args, **kwargs):
        threads_in_fit.append(blas_threads())
        return fit(self, *args, **kwargs)

    monkeypatch.setattr(Ridge, "fit", recording_fit)
    X, Y = make_data(60, 6, 4, seed=24)
    with threadpool_limits(2, user_api="blas"):
        boot = BootstrapEstimator(Ridge(), n_bootstrap=20, random_state=0).fit(X, Y)
        assert blas_threads() == 2
    # The replicates take the batched path: one fit, on all data.
    assert threads_in_fit == [1 if max_flops else 2]
    assert_allclose(boot.estimator_.coef_, Ridge().fit(X, Y).coef_)


def test_recycled_coefficient_arrays_leave_each_replicate_its_own(monkeypatch):
    # Batches side by side write into the arrays of reduced batches, split
    # batches included: every replicate keeps its own coefficients.
    X, Y = make_data(60, 6, 4, seed=23)
    params = dict(n_bootstrap=60, return_samples=True, random_state=2)
    monkeypatch.setattr("skbatch._ridge.problems.replicates.SIDE_BY_SIDE_MIN_FLOPS", 0)
    pool = skbatch._kernels.linalg.ResultPool
    handed_out = []
    empty = pool.empty

    def spy(self, shape, like, xp):
        handed_out.append(empty(self, shape, like, xp))
        return handed_out[-1]

    monkeypatch.setattr(pool, "empty", spy)
    with threadpool_limits(2, user_api="blas"), simulate_oom(max_items=7):
        recycled = BootstrapEstimator(Ridge(), max_memory_gb=5e-4, **params)
        recycled.fit(X, Y)
    # Arrays were handed out again (fewer distinct arrays than batches).
    assert len({id(array) for array in handed_out}) < len(handed_out)
    monkeypatch.setattr(pool, "give", lambda self, *arrays: None)
    fresh = BootstrapEstimator(Ridge(), **params).fit(X, Y)
    _assert_same_results(recycled, fresh)


def test_fast_path_runs_little_work_in_turn(capsys):
    # Starting threads costs more than a second core gives for small fits.
    X, Y = make_data(40, 3, 1, seed=3)
    work = 100 * problems.bootstrap_flops_per_replicate(40, 3, 1)
    assert work < problems.replicates.SIDE_BY_SIDE_MIN_FLOPS
    with threadpool_limits(2, user_api="blas"):
        BootstrapEstimator(
            LinearRegression(), n_bootstrap=100, max_memory_gb=5e-4, verbose=1
        ).fit(X, Y)
    out = capsys.readouterr().out
    assert "replicates:" in out and "side by side" not in out


# Moving-block bootstrap ---------------------------------------------------------------


def ar1_series(n_samples, phi, seed, n_features=2):
    """X and y whose rows (and noise) follow an AR(1) with coefficient ``phi``."""
    rng = np.random.default_rng(seed)
    noise = rng.standard_normal((n_samples, n_features + 1))
    series = np.empty_like(noise)
    series[0] = noise[0]
    for i in range(1, n_samples):
        series[i] = phi * series[i - 1] + noise[i]
    X = series[:, :n_features]
    return X, X @ np.arange(1.0, n_features + 1) + series[:, -1]


@pytest.mark.parametrize("block_scheme", ["moving", "circular", "stationary"])
@pytest.mark.parametrize("groups", [None, np.repeat([0, 1, 2], [12, 8, 10])])
def test_block_bootstrap_fast_path_equals_generic_path_and_refits(groups, block_scheme):
    X, Y = make_data(30, 4, 2, seed=30)
    params = dict(
        n_bootstrap=20,
        block_size=4,
        block_scheme=block_scheme,
        return_samples=True,
        random_state=3,
    )
    fast = BootstrapEstimator(Ridge(alpha=0.5), **params).fit(X, Y, groups=groups)
    generic = BootstrapEstimator(
        generic_ridge(alpha=0.5), attributes=last_step_linear, **params
    ).fit(X, Y, groups=groups)
    counts = bootstrap_counts(
        resolve_entropy(3),
        np.arange(20),
        30,
        groups,
        block_size=4,
        block_scheme=block_scheme,
    )
    rows = [np.repeat(np.arange(30), c) for c in counts]
    expected = naive_samples(Ridge(alpha=0.5), X, Y, rows, "coef_")
    assert_allclose(fast.results_["coef_"].samples, expected, rtol=1e-10, atol=1e-10)
    for name in ("coef_", "intercept_"):
        assert_allclose(
            fast.results_[name].samples,
            generic.results_[name].samples,
            rtol=1e-10,
            atol=1e-10,
        )
    iid = BootstrapEstimator(
        Ridge(alpha=0.5), **{**params, "block_size": None, "block_scheme": "moving"}
    )
    assert not np.allclose(
        iid.fit(X, Y, groups=groups).results_["coef_"].samples,
        fast.results_["coef_"].samples,
    )


def test_block_bootstrap_invariant_to_batch_size_and_oom():
    X, Y = make_data(40, 5, 3, seed=31)
    params = dict(n_bootstrap=30, block_size=5, return_samples=True, random_state=4)
    reference = BootstrapEstimator(Ridge(), **params).fit(X, Y)
    _assert_same_results(
        reference, BootstrapEstimator(Ridge(), max_memory_gb=5e-4, **params).fit(X, Y)
    )
    with simulate_oom(max_items=3):
        _assert_same_results(reference, BootstrapEstimator(Ridge(), **params).fit(X, Y))


# Many refits or many data sets: over 2 s.
@pytest.mark.slow
def test_block_bootstrap_widens_intervals_of_autocorrelated_rows():
    # AR(0.9) rows: the iid bootstrap ignores the dependence and gives
    # intervals too narrow; blocks of the documented length (20 for n=400)
    # keep it. Reference: the spread of the estimate over independent series.
    truth = np.array([1.0, 2.0])
    estimates, covered_iid, covered_block = [], [], []
    for seed in range(60):
        X, y = ar1_series(400, 0.9, seed)
        estimates.append(LinearRegression().fit(X, y).coef_)
        for block_size, covered in ((None, covered_iid), (20, covered_block)):
            boot = BootstrapEstimator(
                LinearRegression(),
                n_bootstrap=200,
                block_size=block_size,
                random_state=seed,
            )
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "The residuals", UserWarning)
                boot.fit(X, y)
            result = boot.results_["coef_"]
            covered.append((result.ci_lower <= truth) & (truth <= result.ci_upper))
    assert np.mean(covered_block) > np.mean(covered_iid) + 0.1
    assert np.mean(covered_block) >= 0.8


@pytest.mark.parametrize(
    "block_size, groups, match",
    [
        (0, None, r"block_size must be None, 'auto' or an int >= 1, got 0"),
        (2.5, None, r"block_size must be None, 'auto' or an int >= 1, got 2.5"),
        (True, None, r"block_size must be None, 'auto' or an int >= 1, got True"),
        ("big", None, r"block_size must be None, 'auto' or an int >= 1, got 'big'"),
        (21, None, r"block_size=21 but n_samples=20"),
        (
            6,
            np.repeat([0, 1], [15, 5]),
            r"block_size=6 but the smallest group has 5 rows",
        ),
    ],
)
def test_invalid_block_size_raises_before_fitting(block_size, groups, match):
    X, y = make_data(20, 2, 1)
    boot = BootstrapEstimator(MustNotFit(), n_bootstrap=5, block_size=block_size)
    with pytest.raises(ValueError, match=match):
        boot.fit(X, y, groups=groups)


@pytest.mark.parametrize(
    "block_scheme, block_size, match",
    [
        (
            "circle",
            4,
            r"block_scheme must be one of \('moving', 'circular', 'stationary'\), "
            r"got 'circle' \(with block_size=4\)",
        ),
        (None, None, r"block_scheme must be one of .* got None \(with block_size"),
        (
            "circular",
            None,
            r"block_scheme='circular' needs block_size, got block_size=None",
        ),
        ("stationary", None, r"block_scheme='stationary' needs block_size"),
    ],
)
def test_invalid_block_scheme_raises_before_fitting(block_scheme, block_size, match):
    X, y = make_data(20, 2, 1)
    boot = BootstrapEstimator(
        MustNotFit(), n_bootstrap=5, block_size=block_size, block_scheme=block_scheme
    )
    with pytest.raises(ValueError, match=match):
        boot.fit(X, y)


def ar1_runs(lengths, phi, seed, n_targets=3):
    """X and Y whose noise is an AR(1) restarted at each run; the runs' labels."""
    rng = np.random.default_rng(seed)
    n_samples = sum(lengths)
    X = rng.standard_normal((n_samples, 2))
    noise = rng.standard_normal((n_samples, n_targets))
    first = np.cumsum([0, *lengths[:-1]])
    for i in range(n_samples):
        if i not in first:
            noise[i] += phi * noise[i - 1]
    groups = np.repeat(np.arange(len(lengths)), lengths)
    return X, X @ rng.standard_normal((2, n_targets)) + noise, groups


@pytest.mark.parametrize("block_scheme", ["moving", "circular", "stationary"])
def test_auto_block_size_is_the_politis_white_rule_on_the_residuals(block_scheme):
    # Runs of unequal length: the rule on each run's residuals (the rule
    # itself is checked against arch's formula in tests/test_timeseries.py),
    # averaged weighted by run length, median over targets, rounded up.
    lengths = [150, 90, 120]
    X, Y, groups = ar1_runs(lengths, 0.7, seed=5)
    boot = BootstrapEstimator(
        LinearRegression(),
        n_bootstrap=10,
        block_size="auto",
        block_scheme=block_scheme,
        return_samples=True,
    ).fit(X, Y, groups=groups)
    residuals = Y - LinearRegression().fit(X, Y).predict(X)
    per_run = np.array(
        [
            skbatch._kernels.timeseries.optimal_block_length(
                residuals[groups == g], block_scheme=block_scheme
            )
            for g in range(3)
        ]
    )
    pooled = np.median(np.average(per_run, axis=0, weights=lengths))
    assert boot.block_size_ == int(np.ceil(pooled))
    assert 1 < boot.block_size_ <= min(lengths)
    fixed = BootstrapEstimator(
        LinearRegression(),
        n_bootstrap=10,
        block_size=boot.block_size_,
        block_scheme=block_scheme,
        return_samples=True,
    ).fit(X, Y, groups=groups)
    assert_array_equal(boot.results_["coef_"].samples, fixed.results_["coef_"].samples)


def test_auto_block_size_grows_with_the_autocorrelation():
    chosen = [
        BootstrapEstimator(LinearRegression(), n_bootstrap=2, block_size="auto")
        .fit(*ar1_runs([400], phi, seed=6)[:2])
        .block_size_
        for phi in (0.0, 0.5, 0.8, 0.95)
    ]
    assert chosen == sorted(chosen) and chosen[0] < chosen[-1]
    assert chosen[0] <= 3


def test_auto_block_size_needs_runs_long_enough_for_the_rule():
    X, y = make_data(30, 2, 1)
    boot = BootstrapEstimator(MustNotFit(), n_bootstrap=5, block_size="auto")
    with pytest.raises(
        ValueError,
        match=r"block_size='auto' needs at least 11 rows in every group .* the "
        r"smallest group has 10 rows; pass an int block_size",
    ):
        boot.fit(X, y, groups=np.repeat([0, 1], [20, 10]))


def test_fixed_and_iid_block_size_are_recorded():
    X, y = make_data(30, 2, 1)
    assert BootstrapEstimator(Ridge(), n_bootstrap=2).fit(X, y).block_size_ is None
    boot = BootstrapEstimator(Ridge(), n_bootstrap=2, block_size=np.int64(3))
    assert boot.fit(X, y).block_size_ == 3


@pytest.mark.parametrize(
    "estimator, attributes",
    [
        (Ridge(), "auto"),
        (DecisionTreeRegressor(max_depth=1), "feature_importances_"),
    ],
)
def test_iid_bootstrap_of_autocorrelated_rows_warns(estimator, attributes):
    X, Y, _ = ar1_runs([300], 0.9, seed=7)
    boot = BootstrapEstimator(estimator, n_bootstrap=2, attributes=attributes)
    with pytest.warns(
        AutocorrelationWarning,
        match=r"autocorrelated \(median lag-1 autocorrelation 0\.\d+ over 3 "
        r"target\(s\), above 0\.23\).*Set block_size .* and block_scheme",
    ) as record:
        boot.fit(X, Y)
    # Pointed at the caller's line.
    assert record[0].filename == __file__


@pytest.mark.parametrize(
    "params, groups",
    [
        ({}, None),  # white noise
        ({"block_size": 10}, None),  # block bootstrap: already handled
        ({}, "runs"),  # cluster bootstrap: runs kept whole
    ],
)
def test_no_autocorrelation_warning_on_white_noise_or_blocks(params, groups):
    phi = 0.0 if not params and groups is None else 0.9
    X, Y, runs = ar1_runs([100, 100, 100], phi, seed=8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        BootstrapEstimator(Ridge(), n_bootstrap=2, **params).fit(
            X, Y, groups=runs if groups else None
        )


# Numerics of the batched path ---------------------------------------------------------


def _min_norm_reference(X, y, count):
    """Weighted least squares with an intercept, minimum-norm, by lstsq."""
    weight = count / count.sum()
    root = np.sqrt(count)
    x_mean, y_mean = weight @ X, weight @ y
    # rcond far above rounding and far below the data's own singular values.
    coef = np.linalg.lstsq(
        root[:, None] * (X - x_mean), root * (y - y_mean), rcond=1e-9
    )[0]
    return coef, y_mean - x_mean @ coef


@pytest.mark.parametrize("shape", [(3, 2), (6, 4), (4, 6)], ids=str)
def test_rank_deficient_replicates_get_the_minimum_norm_solution(shape):
    # Few rows: many replicates draw fewer distinct rows than features, and
    # some draw one row only (its centred design is exactly 0, the answer 0).
    n_samples, n_features = shape
    for seed in range(12):
        rng = np.random.default_rng(seed)
        X = rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 4)
        X += rng.integers(-100, 100)
        y = rng.standard_normal(n_samples)
        boot = BootstrapEstimator(
            LinearRegression(), n_bootstrap=100, return_samples=True, random_state=0
        ).fit(X, y)
        counts = bootstrap_counts(resolve_entropy(0), np.arange(100), n_samples)
        for k, count in enumerate(counts):
            coef, intercept = _min_norm_reference(X, y, count)
            scale = max(1.0, np.abs(coef).max())
            assert_allclose(
                boot.results_["coef_"].samples[k], coef, rtol=0, atol=1e-9 * scale
            )
            assert_allclose(
                boot.results_["intercept_"].samples[k],
                intercept,
                rtol=1e-9,
                atol=1e-9 * scale * np.abs(X).max(),
            )


def test_replicate_of_one_repeated_row_has_zero_slope():
    # Its centred design is 0: the minimum-norm slope is 0, as lstsq gives.
    X, y = np.random.default_rng(10).standard_normal((2, 3, 2))
    y = y[:, 0]
    boot = BootstrapEstimator(
        LinearRegression(), n_bootstrap=100, return_samples=True, random_state=0
    ).fit(X, y)
    counts = bootstrap_counts(resolve_entropy(0), np.arange(100), 3)
    single = np.flatnonzero((counts > 0).sum(axis=1) == 1)
    assert single.size > 0
    assert_allclose(boot.results_["coef_"].samples[single], 0.0, atol=1e-12)
    rows = counts[single].argmax(axis=1)
    assert_allclose(boot.results_["intercept_"].samples[single], y[rows])


@pytest.mark.parametrize("shape", [(17, 9), (9, 17)], ids=["n>p", "p>n"])
def test_singular_gram_falls_back_to_a_stable_solve_with_a_warning(shape):
    # Nearly collinear columns: the Gram (or kernel) matrix of X is singular to
    # working precision, while X itself is not.
    rng = np.random.default_rng(0)
    X = 1000 + 1e-4 * rng.standard_normal(shape)
    y = rng.standard_normal(shape[0])
    ridge = Ridge(alpha=5e-9, fit_intercept=False)
    boot = BootstrapEstimator(ridge, n_bootstrap=30, return_samples=True)
    with pytest.warns(LinAlgWarning, match="Singular matrix .* bootstrap replicates"):
        boot.set_params(random_state=0).fit(X, y)
    samples = boot.results_["coef_"].samples
    assert np.isfinite(samples).all()
    for rows, coef in zip(resampled_rows(0, 30, shape[0]), samples):
        # scikit-learn's own stable solver on the resampled rows.
        expected = clone(ridge).set_params(solver="svd").fit(X[rows], y[rows]).coef_
        assert_allclose(coef, expected, rtol=0, atol=1e-6 * np.abs(expected).max())


@pytest.mark.parametrize("generic", [False, True], ids=["fast", "generic"])
def test_replicate_without_weighted_rows_raises(generic):
    X, y = make_data(30, 2, 1, seed=32)
    weight = np.r_[np.zeros(29), 1.0]
    counts = bootstrap_counts(resolve_entropy(0), np.arange(50), 30)
    first = int(np.flatnonzero(counts[:, 29] == 0)[0])
    estimator = type("SubRidge", (Ridge,), {})() if generic else Ridge()
    boot = BootstrapEstimator(estimator, n_bootstrap=50, random_state=0)
    with pytest.raises(
        ValueError,
        match=rf"Bootstrap replicate {first} drew only samples whose sample_weight "
        r"is 0",
    ):
        boot.fit(X, y, sample_weight=weight)
    assert not hasattr(boot, "results_")


@pytest.mark.parametrize("n_bootstrap", [2**63, 2**64 + 5])
def test_n_bootstrap_beyond_int64_is_refused(n_bootstrap):
    X, y = make_data(20, 2, 1)
    with pytest.raises(
        ValueError, match=rf"n_bootstrap must be at most 2\*\*63 - 1.*{n_bootstrap}"
    ):
        BootstrapEstimator(MustNotFit(), n_bootstrap=n_bootstrap).fit(X, y)


@pytest.mark.parametrize("n_bootstrap", [2**63 - 1, 10**15])
def test_huge_n_bootstrap_is_refused_before_any_fit(n_bootstrap):
    X, y = make_data(20, 2, 1)
    for estimator in (MustNotFit(), Ridge()):
        boot = BootstrapEstimator(estimator, n_bootstrap=n_bootstrap)
        with pytest.raises(ValueError, match=rf"n_bootstrap={n_bootstrap}.* GB"):
            boot.fit(X, y)


# Memory preflight ---------------------------------------------------------------------


def _preflight_gb(make, X, Y):
    """The budget the preflight asks for, raised until the fit is accepted."""
    budget = 1e-9
    for _ in range(5):
        try:
            make(budget).fit(X, Y)
            return budget
        except ValueError as error:
            budget = float(re.search(r"needs ([0-9.e+-]+) GB", str(error)).group(1))
    raise AssertionError("the preflight figure does not settle")


@pytest.mark.parametrize(
    "make",
    [
        lambda gb: BootstrapEstimator(
            Ridge(), n_bootstrap=100, random_state=0, max_memory_gb=gb
        ),
        lambda gb: BootstrapEstimator(
            LinearRegression(),
            n_bootstrap=100,
            return_samples=True,
            random_state=0,
            max_memory_gb=gb,
        ),
        lambda gb: BootstrapEstimator(
            make_pipeline(FunctionTransformer(), LinearRegression()),
            attributes=last_step_linear,
            n_bootstrap=100,
            random_state=0,
            max_memory_gb=gb,
        ),
    ],
    ids=["fast", "fast-samples", "generic"],
)
@pytest.mark.parametrize("shape", [(1000, 20, 30), (40, 200, 10)], ids=["n>p", "p>n"])
@pytest.mark.slow
def test_peak_memory_stays_within_a_budget_just_above_the_preflight(make, shape):
    X, Y = make_data(*shape, seed=33)
    budget = 1.05 * _preflight_gb(make, X, Y)
    tracemalloc.start()
    try:
        make(budget).fit(X, Y)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= budget * 1e9, (peak, budget)


def test_the_batching_cap_does_not_refuse_what_fits_the_full_budget(monkeypatch):
    # A measured budget is capped for batching (8 GB); whether the problem
    # fits at all is decided against the full budget.
    X, Y = make_data(60, 5, 3, seed=34)
    need = _preflight_gb(
        lambda gb: BootstrapEstimator(Ridge(), n_bootstrap=20, max_memory_gb=gb), X, Y
    )

    reference = BootstrapEstimator(
        Ridge(), n_bootstrap=20, return_samples=True, max_memory_gb=1.0, random_state=0
    ).fit(X, Y)

    def budget(backend=None, max_memory_gb=None, *, for_batching=False):
        assert max_memory_gb is None
        return need / 2 if for_batching else 10 * need

    monkeypatch.setattr(skbatch._engine.preflight, "memory_budget", budget)
    boot = BootstrapEstimator(
        Ridge(), n_bootstrap=20, return_samples=True, random_state=0
    )
    _assert_same_results(reference, boot.fit(X, Y))


# BCa intervals ----------------------------------------------------------------


def bca_reference(samples, estimate, jackknife, confidence_level=0.95):
    """scipy's BCa definition, element by element, from the replicates and the
    leave-one-out estimates (one row per unit)."""
    from scipy.special import ndtr, ndtri

    d = jackknife.mean(axis=0) - jackknife
    with np.errstate(divide="ignore", invalid="ignore"):
        acceleration = (d**3).sum(axis=0) / (6 * ((d**2).sum(axis=0)) ** 1.5)
    n_bootstrap = len(samples)
    share = ((samples < estimate).sum(axis=0) + (samples <= estimate).sum(axis=0)) / (
        2 * n_bootstrap
    )
    z0 = ndtri(share)
    z = ndtri((1 - confidence_level) / 2)
    lower, upper = np.empty(estimate.shape), np.empty(estimate.shape)
    for index in np.ndindex(estimate.shape):
        column = samples[(slice(None), *index)]
        for bound, sign in ((lower, 1), (upper, -1)):
            shifted = z0[index] + sign * z
            with np.errstate(invalid="ignore"):
                level = ndtr(z0[index] + shifted / (1 - acceleration[index] * shifted))
            # Undefined where every replicate falls on one side, as scipy's.
            bound[index] = np.quantile(column, level) if np.isfinite(level) else np.nan
    return lower, upper


def jackknife_by_refits(estimator, X, y, units, attribute):
    return np.stack(
        [
            getattr(clone(estimator).fit(X[units != u], y[units != u]), attribute)
            for u in np.unique(units)
        ]
    )


@pytest.mark.parametrize("two_passes", [False, True], ids=["kept", "two_passes"])
@pytest.mark.parametrize(
    "groups",
    [None, np.repeat(np.arange(7), [5, 3, 8, 4, 6, 9, 5])],
    ids=["rows", "groups"],
)
@pytest.mark.parametrize(
    "estimator, reference",
    [
        (Ridge(alpha=2.0), Ridge(alpha=2.0)),
        (LinearRegression(), LinearRegression()),
        (Ridge(alpha=0.5, fit_intercept=False), Ridge(alpha=0.5, fit_intercept=False)),
        # Per-target alphas chosen on all data, then held fixed.
        (BatchedRidge(alphas=[0.1, 10.0, 1e3]), None),
        # The generic path: jackknife by refits.
        (generic_ridge(alpha=2.0), Ridge(alpha=2.0)),
    ],
    ids=["ridge", "ols", "no_intercept", "per_target_alphas", "generic"],
)
@pytest.mark.slow
def test_bca_is_scipys_formula_on_the_replicates_and_a_jackknife_by_refits(
    estimator, reference, groups, two_passes, monkeypatch
):
    X, Y = make_data(40, 3, 3, seed=40)
    Y = Y + np.random.default_rng(1).exponential(3.0, size=Y.shape) * np.abs(X[:, :1])
    attributes = (
        last_step_linear
        if reference is not None and hasattr(estimator, "steps")
        else "auto"
    )
    params = dict(
        n_bootstrap=300, ci_method="bca", attributes=attributes, random_state=2
    )
    # Some targets choose an edge of alphas: not what is tested here.
    warnings.filterwarnings("ignore", ".*chose the largest alpha", UserWarning)
    kept = BootstrapEstimator(estimator, return_samples=True, **params).fit(
        X, Y, groups=groups
    )
    if two_passes:
        monkeypatch.setattr(skbatch.bootstrap, "BCA_KEEP_SAMPLES_SHARE", 0.0)
    boot = BootstrapEstimator(estimator, **params).fit(X, Y, groups=groups)
    replicate_stages = [s for s in boot.fit_report_.stages if s.name == "replicates"]
    assert len(replicate_stages) == (2 if two_passes else 1)
    if reference is None:
        reference = Ridge(alpha=kept.estimator_.alpha_)
        assert np.unique(kept.estimator_.alpha_).size > 1
    units = np.arange(40) if groups is None else groups
    for name in ("coef_", "intercept_"):
        result = boot.results_[name]
        samples = kept.results_[name].samples
        jackknife = jackknife_by_refits(reference, X, Y, units, name)
        if name == "intercept_" and not reference.fit_intercept:
            # No jackknife spread: scipy's interval is NaN.
            assert np.isnan(result.ci_lower).all() and np.isnan(result.ci_upper).all()
            continue
        lower, upper = bca_reference(samples, result.estimate, jackknife)
        assert_allclose(result.ci_lower, lower, rtol=1e-10, atol=1e-10)
        assert_allclose(result.ci_upper, upper, rtol=1e-10, atol=1e-10)
        assert (result.samples is None) is not (result is kept.results_[name])
        assert_allclose(result.standard_error, samples.std(axis=0, ddof=1))


@pytest.mark.parametrize("generic", [False, True], ids=["fast", "generic"])
def test_bca_equals_scipy_bootstrap_on_the_same_replicates(generic):
    # The mean of skewed data, as the intercept of a model with a zero
    # feature: scipy's own BCa (its jackknife, its quantiles) on our replicates.
    from types import SimpleNamespace

    from scipy import stats

    y = np.random.default_rng(3).lognormal(size=30)
    X = np.zeros((30, 1))
    boot = BootstrapEstimator(
        Ridge(alpha=1.0),
        n_bootstrap=500,
        ci_method="bca",
        confidence_level=0.9,
        return_samples=True,
        attributes=(lambda m: {"intercept_": m.intercept_}) if generic else "auto",
        random_state=4,
    ).fit(X, y)
    result = boot.results_["intercept_"]
    expected = stats.bootstrap(
        (y,),
        np.mean,
        n_resamples=0,
        method="BCa",
        confidence_level=0.9,
        bootstrap_result=SimpleNamespace(bootstrap_distribution=result.samples),
    ).confidence_interval
    assert_allclose([result.ci_lower, result.ci_upper], expected, rtol=1e-10)
    # Skewed data: BCa moves the interval right of the percentile one.
    assert result.ci_lower > np.percentile(result.samples, 5)


def test_linear_jackknife_is_leave_one_out_refits():
    # The closed-form updates against refits, rows and groups, with weights.
    X, Y = make_data(30, 4, 2, seed=41)
    weight = np.random.default_rng(2).uniform(0.5, 2.0, 30)
    groups = np.repeat(np.arange(6), [3, 7, 4, 6, 5, 5])
    shapes = {"coef_": (2, 4), "intercept_": (2,)}
    alphas = np.array([0.3, 30.0])
    for units in (None, groups):
        sums = skbatch.bootstrap._linear_jackknife_sums(
            X, Y, alphas, True, weight, units, shapes
        )
        labels = np.arange(30) if units is None else units
        full = [
            Ridge(alpha=a).fit(X, Y[:, t], sample_weight=weight)
            for t, a in enumerate(alphas)
        ]
        for name in shapes:
            u = []
            for label in np.unique(labels):
                keep = labels != label
                fits = [
                    Ridge(alpha=a).fit(X[keep], Y[keep, t], sample_weight=weight[keep])
                    for t, a in enumerate(alphas)
                ]
                u.append(
                    np.stack([getattr(f, name) for f in fits])
                    - np.stack([getattr(f, name) for f in full])
                )
            u = np.asarray(u)
            for k in range(3):
                assert_allclose(
                    sums[name][k], (u ** (k + 1)).sum(axis=0), rtol=1e-9, atol=1e-14
                )


def test_linear_jackknife_refits_when_the_closed_form_is_undefined():
    X, Y = make_data(10, 12, 2, seed=42)
    shapes = {"coef_": (2, 12)}
    assert (
        skbatch.bootstrap._linear_jackknife_sums(
            X, Y, np.ones(1), True, None, None, shapes
        )
        is None
    )
    # More features than samples: the jackknife refits, and still matches.
    boot = BootstrapEstimator(
        Ridge(alpha=1.0), n_bootstrap=50, ci_method="bca", return_samples=True
    ).fit(X, Y)
    assert any("jackknife" in s.name for s in boot.fit_report_.stages)
    result = boot.results_["coef_"]
    lower, upper = bca_reference(
        result.samples,
        result.estimate,
        jackknife_by_refits(Ridge(alpha=1.0), X, Y, np.arange(10), "coef_"),
    )
    assert_allclose(result.ci_lower, lower, rtol=1e-10, atol=1e-10)
    assert_allclose(result.ci_upper, upper, rtol=1e-10, atol=1e-10)


def test_bca_refuses_block_bootstraps():
    X, y = make_data(20, 2, 1)
    for block_size in (4, "auto"):
        boot = BootstrapEstimator(
            MustNotFit(), n_bootstrap=5, ci_method="bca", block_size=block_size
        )
        with pytest.raises(
            ValueError,
            match=rf"ci_method='bca' with block_size={block_size!r}",
        ):
            boot.fit(X, y)


def test_verbose_says_why_a_ridge_estimator_is_refit(capsys):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((50, 3))
    y = X[:, 0] + rng.standard_normal(50)
    BootstrapEstimator(Ridge(solver="sag"), n_bootstrap=5, verbose=1).fit(X, y)
    assert "generic path): Ridge(solver='sag') is iterative" in capsys.readouterr().out
    BootstrapEstimator(Ridge(), n_bootstrap=5, verbose=1).fit(X, y)
    assert "generic path" not in capsys.readouterr().out
