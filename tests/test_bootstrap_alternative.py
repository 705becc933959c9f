"""One-sided bootstrap intervals: ``alternative="less" | "greater"``.

References are independent of the implementation: ``np.percentile`` of the
kept samples (linear interpolation, the convention of the two-sided
intervals), and ``scipy.stats.bootstrap(..., alternative=...)`` run on the
same bootstrap distribution (``n_resamples=0`` with ``bootstrap_result``),
which computes its own jackknife and quantiles.
"""

import functools
import inspect
import tracemalloc
from types import SimpleNamespace

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy import stats
from sklearn.linear_model import Ridge
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer
from test_bootstrap import MustNotFit

import skbatch.bootstrap
from skbatch import BootstrapEstimator
from skbatch._engine.preflight import bca_summary_bytes
from skbatch.streaming import BCaAccumulator, BootstrapAccumulator

ONE_SIDED = ("less", "greater")
TOL = {"rtol": 1e-12, "atol": 1e-12}


def make_data(n_samples=40, n_features=3, n_targets=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n_samples, n_features)) + 2.0
    Y = X @ rng.standard_normal((n_features, n_targets))
    Y += rng.exponential(2.0, size=(n_samples, n_targets))
    return X, Y


def generic_ridge():
    """Ridge behind a no-op step: forced through the generic (refit) path."""
    return make_pipeline(FunctionTransformer(), Ridge())


def last_step_linear(pipeline):
    return {"coef_": pipeline[-1].coef_, "intercept_": pipeline[-1].intercept_}


def fit(generic, X, Y, **params):
    if generic:
        return BootstrapEstimator(
            generic_ridge(), attributes=last_step_linear, **params
        ).fit(X, Y)
    return BootstrapEstimator(Ridge(), **params).fit(X, Y)


def scipy_seed(value):
    """scipy's bootstrap seed keyword: ``rng`` from 1.15 on, before it
    ``random_state`` (the lowest scipy the project declares is 1.10)."""
    if "rng" in inspect.signature(stats.bootstrap).parameters:
        return {"rng": value}
    return {"random_state": value}


def scipy_interval(samples, data, method, alternative, confidence_level):
    """scipy's interval of the mean of each column of ``data`` (one per
    element), from our replicates ``samples`` of shape (B, n_elements)."""
    if "alternative" not in inspect.signature(stats.bootstrap).parameters:
        pytest.skip("scipy's bootstrap takes alternative from 1.12 on")
    return stats.bootstrap(
        (data.T,),
        np.mean,
        axis=-1,
        n_resamples=0,
        method=method,
        alternative=alternative,
        confidence_level=confidence_level,
        bootstrap_result=SimpleNamespace(bootstrap_distribution=samples.T),
    ).confidence_interval


# Percentile and basic ----------------------------------------------------------------


@pytest.mark.parametrize("alternative", ONE_SIDED)
@pytest.mark.parametrize(
    # The generic path refits sklearn in joblib windows: seconds a case.
    "generic",
    [False, pytest.param(True, marks=pytest.mark.slow)],
    ids=["fast", "generic"],
)
# 1000 replicates keep only a tail (k = 51 < B); 61 keep every replicate.
@pytest.mark.parametrize("n_bootstrap", [61, 1000])
def test_percentile_one_sided_bound_is_the_level_percentile(
    alternative, generic, n_bootstrap
):
    X, Y = make_data()
    c = 0.9
    boot = fit(
        generic,
        X,
        Y,
        n_bootstrap=n_bootstrap,
        confidence_level=c,
        alternative=alternative,
        return_samples=True,
        random_state=5,
    )
    for result in boot.results_.values():
        samples = result.samples
        if alternative == "less":
            assert_array_equal(result.ci_lower, np.full(result.estimate.shape, -np.inf))
            assert_allclose(
                result.ci_upper, np.percentile(samples, 100 * c, axis=0), **TOL
            )
        else:
            assert_allclose(
                result.ci_lower, np.percentile(samples, 100 * (1 - c), axis=0), **TOL
            )
            assert_array_equal(result.ci_upper, np.full(result.estimate.shape, np.inf))
        assert_allclose(result.standard_error, samples.std(axis=0, ddof=1), rtol=1e-12)


@pytest.mark.parametrize("alternative", ONE_SIDED)
@pytest.mark.parametrize(
    # The generic path refits sklearn in joblib windows: seconds a case.
    "generic",
    [False, pytest.param(True, marks=pytest.mark.slow)],
    ids=["fast", "generic"],
)
def test_basic_one_sided_bound_reflects_the_other_percentile(alternative, generic):
    X, Y = make_data(seed=1)
    c = 0.95
    params = dict(n_bootstrap=400, confidence_level=c, random_state=2)
    kept = fit(generic, X, Y, return_samples=True, **params)
    basic = fit(generic, X, Y, ci_method="basic", alternative=alternative, **params)
    for name, result in basic.results_.items():
        samples = kept.results_[name].samples
        estimate = result.estimate
        if alternative == "less":
            expected = 2 * estimate - np.percentile(samples, 100 * (1 - c), axis=0)
            assert_allclose(result.ci_upper, expected, **TOL)
            assert np.all(result.ci_lower == -np.inf)
        else:
            expected = 2 * estimate - np.percentile(samples, 100 * c, axis=0)
            assert_allclose(result.ci_lower, expected, **TOL)
            assert np.all(result.ci_upper == np.inf)


@pytest.mark.parametrize("method", ["percentile", "basic"])
@pytest.mark.parametrize("alternative", ONE_SIDED)
def test_percentile_and_basic_equal_scipy_bootstrap(method, alternative):
    # The means of skewed targets, as the intercepts of a model whose only
    # feature is 0: scipy's one-sided intervals of the same replicates.
    Y = np.random.default_rng(3).lognormal(size=(30, 3))
    X = np.zeros((30, 1))
    params = dict(n_bootstrap=300, confidence_level=0.9, random_state=4)
    kept = BootstrapEstimator(Ridge(), return_samples=True, **params).fit(X, Y)
    boot = BootstrapEstimator(
        Ridge(), ci_method=method, alternative=alternative, **params
    ).fit(X, Y)
    result = boot.results_["intercept_"]
    expected = scipy_interval(
        kept.results_["intercept_"].samples, Y, method, alternative, 0.9
    )
    assert_allclose(result.ci_lower, expected.low, **TOL)
    assert_allclose(result.ci_upper, expected.high, **TOL)


# BCa ---------------------------------------------------------------------------------


@pytest.mark.parametrize("alternative", ONE_SIDED)
@pytest.mark.parametrize("two_passes", [False, True], ids=["kept", "two_passes"])
@pytest.mark.parametrize(
    # The generic path refits sklearn in joblib windows: seconds a case.
    "generic",
    [False, pytest.param(True, marks=pytest.mark.slow)],
    ids=["fast", "generic"],
)
def test_bca_one_sided_equals_scipy_bootstrap(
    alternative, two_passes, generic, monkeypatch
):
    Y = np.random.default_rng(3).lognormal(size=(30, 3))
    X = np.zeros((30, 1))
    params = dict(
        n_bootstrap=500,
        ci_method="bca",
        confidence_level=0.9,
        alternative=alternative,
        attributes=(lambda m: {"intercept_": m.intercept_})
        if generic
        else "intercept_",
        random_state=4,
    )
    kept = BootstrapEstimator(Ridge(), return_samples=True, **params).fit(X, Y)
    samples = kept.results_["intercept_"].samples
    if two_passes:
        monkeypatch.setattr(skbatch.bootstrap, "BCA_KEEP_SAMPLES_SHARE", 0.0)
    boot = BootstrapEstimator(Ridge(), **params).fit(X, Y)
    stages = [s for s in boot.fit_report_.stages if s.name == "replicates"]
    assert len(stages) == (2 if two_passes else 1)
    result = boot.results_["intercept_"]
    expected = scipy_interval(samples, Y, "BCa", alternative, 0.9)
    assert_allclose(result.ci_lower, expected.low, rtol=1e-10, atol=1e-10)
    assert_allclose(result.ci_upper, expected.high, rtol=1e-10, atol=1e-10)
    finite = result.ci_upper if alternative == "less" else result.ci_lower
    assert np.all(np.isfinite(finite))


def test_one_sided_bca_bound_is_the_two_sided_bound_at_twice_the_level_gap():
    # scipy's definition: the bound of a 95% one-sided interval is the same
    # bound of a 90% two-sided one.
    Y = np.random.default_rng(7).lognormal(size=(25, 2))
    X = np.zeros((25, 1))
    params = dict(
        n_bootstrap=300, ci_method="bca", attributes="intercept_", random_state=1
    )
    two = BootstrapEstimator(Ridge(), confidence_level=0.9, **params).fit(X, Y)
    less = BootstrapEstimator(
        Ridge(), confidence_level=0.95, alternative="less", **params
    ).fit(X, Y)
    greater = BootstrapEstimator(
        Ridge(), confidence_level=0.95, alternative="greater", **params
    ).fit(X, Y)
    two, less, greater = (b.results_["intercept_"] for b in (two, less, greater))
    assert_allclose(less.ci_upper, two.ci_upper, **TOL)
    assert_allclose(greater.ci_lower, two.ci_lower, **TOL)


# The default is unchanged ------------------------------------------------------------


@pytest.mark.parametrize("ci_method", ["percentile", "basic", "bca"])
def test_two_sided_is_the_default(ci_method):
    X, Y = make_data(seed=4)
    params = dict(n_bootstrap=150, ci_method=ci_method, random_state=0)
    default = BootstrapEstimator(Ridge(), **params).fit(X, Y)
    explicit = BootstrapEstimator(Ridge(), alternative="two-sided", **params).fit(X, Y)
    assert default.get_params()["alternative"] == "two-sided"
    for name, result in default.results_.items():
        assert_array_equal(explicit.results_[name].ci_lower, result.ci_lower)
        assert_array_equal(explicit.results_[name].ci_upper, result.ci_upper)
        assert np.all(np.isfinite(result.ci_lower)) and np.all(
            np.isfinite(result.ci_upper)
        )


# Bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize("alternative", ["two_sided", "LESS", None, ["less"]])
def test_invalid_alternative_raises_before_fitting(alternative):
    X, Y = make_data(20, 2, 1)
    with pytest.raises(ValueError) as error:
        BootstrapEstimator(MustNotFit(), alternative=alternative).fit(X, Y)
    message = str(error.value)
    assert message.startswith("alternative must be one of")
    assert repr(alternative) in message
    for allowed in ("two-sided", "less", "greater"):
        assert allowed in message


# The streaming accumulators ----------------------------------------------------------


@pytest.mark.parametrize("method", ["percentile", "basic"])
@pytest.mark.parametrize("alternative", ONE_SIDED)
# 5000 replicates fold through np.partition (beyond SORT_MAX_ROWS), 300 sort.
@pytest.mark.parametrize("n_total", [2, 7, 300, 5000])
def test_accumulator_one_sided_interval_merges_in_any_order(
    method, alternative, n_total
):
    rng = np.random.default_rng(n_total)
    samples = rng.standard_normal((n_total, 4))
    samples[rng.random(n_total) < 0.1, 3] = np.nan
    estimate = np.nanmean(samples, axis=0)
    c = 0.95
    parts = np.array_split(np.arange(n_total), 3)
    accumulators = [
        BootstrapAccumulator(
            4, n_total, c, alternative=alternative, method=method
        ).update(samples[ids], ids=ids)
        for ids in parts
    ]
    merged = accumulators[2].merge(accumulators[0]).merge(accumulators[1])
    lower, upper = merged.interval(method, estimate)
    reflect = method == "basic"
    level = c if (alternative == "less") != reflect else 1 - c
    bound = np.percentile(samples, 100 * level, axis=0)
    if reflect:
        bound = 2 * estimate - bound
    if alternative == "less":
        assert_allclose(upper, bound, **TOL)
        assert_array_equal(lower, np.full(4, -np.inf))
    else:
        assert_allclose(lower, bound, **TOL)
        assert_array_equal(upper, np.full(4, np.inf))
    # A NaN replicate makes the bound NaN, as np.percentile; the infinite
    # side stays infinite, as in scipy.stats.bootstrap.
    if np.isnan(samples[:, 3]).any():
        assert np.isnan(upper[3] if alternative == "less" else lower[3])


@pytest.mark.parametrize("alternative", ONE_SIDED)
def test_accumulator_keeps_one_tail_of_the_one_sided_size(alternative):
    # k = ceil((B - 1)(1 - c)) + 1 on one side, none on the other: about the
    # memory of a two-sided interval of level 2c - 1, whose two tails are
    # each about half as long.
    n_total, c, size = 1000, 0.95, 10
    one_sided = BootstrapAccumulator._nbytes_retained(
        size, n_total, c, alternative=alternative
    )
    two_sided = BootstrapAccumulator._nbytes_retained(size, n_total, 0.9)
    k = int(np.ceil((n_total - 1) * (1 - c))) + 1
    moments_and_mask = size * (2 * 8 + 1)
    # The tail and the pending block (at least FOLD_EVERY replicates).
    assert one_sided - moments_and_mask == size * 8 * (k + max(64, k))
    assert one_sided <= two_sided
    acc = BootstrapAccumulator(size, n_total, c, alternative=alternative)
    acc.update(np.random.default_rng(0).standard_normal((n_total, size)))
    assert acc._rows.shape[0] == k + max(64, k)


def test_accumulator_refuses_a_method_whose_tail_it_did_not_keep():
    acc = BootstrapAccumulator(2, 10, 0.9, alternative="less", method="percentile")
    acc.update(np.zeros((10, 2)))
    with pytest.raises(ValueError, match="method='basic'.*alternative='less'"):
        acc.interval("basic", np.zeros(2))


@pytest.mark.parametrize("keep_samples", [False, True], ids=["two_passes", "kept"])
@pytest.mark.parametrize("alternative", ONE_SIDED)
def test_bca_accumulator_one_sided_equals_scipy(keep_samples, alternative):
    # The mean of skewed data: scipy's BCa with its own jackknife.
    rng = np.random.default_rng(11)
    data = rng.lognormal(size=(40, 3))
    samples = stats.bootstrap(
        (data.T,),
        np.mean,
        axis=-1,
        n_resamples=700,
        method="percentile",
        **scipy_seed(rng),
    ).bootstrap_distribution.T
    estimate = data.mean(axis=0)
    # The jackknife power sums of u_i = theta_(-i) - theta.
    loo = (data.sum(axis=0) - data) / (len(data) - 1)
    u = loo - estimate
    from skbatch.streaming import bca_acceleration

    acceleration = bca_acceleration(
        u.sum(axis=0), (u**2).sum(axis=0), (u**3).sum(axis=0), len(data)
    )
    acc = BCaAccumulator(
        (3,), 700, 0.9, estimate, keep_samples=keep_samples, alternative=alternative
    )
    second = acc.update(samples).second_pass(acceleration)
    if second is not None:
        second.update(samples[::-1])
    lower, upper = acc.interval(second)
    expected = scipy_interval(samples, data, "BCa", alternative, 0.9)
    assert_allclose(lower, expected.low, rtol=1e-10, atol=1e-10)
    assert_allclose(upper, expected.high, rtol=1e-10, atol=1e-10)


def _traced_peak(fn):
    tracemalloc.start()
    try:
        result = fn()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return result, peak


@pytest.mark.parametrize("method", ["percentile", "basic"])
def test_one_sided_accumulator_holds_no_more_than_two_sided(method):
    # One tail of k = 51 replicates against two of 26 (B=1000, c=0.95): the
    # charge and the traced peak (updates in blocks of 8, then the interval)
    # are no larger, and the charge covers the peak.
    size, n_total = 2000, 1000
    replicates = np.random.default_rng(5).standard_normal((n_total, size))

    def run(alternative):
        acc = BootstrapAccumulator(
            size, n_total, 0.95, alternative=alternative, method=method
        )
        for block in np.array_split(replicates, n_total // 8):
            acc.update(block)
        return acc.interval(method, np.zeros(size))

    figures = {}
    for alternative in ("two-sided", "greater", "less"):
        _, peak = _traced_peak(functools.partial(run, alternative))
        charged = BootstrapAccumulator.nbytes_needed(
            size, n_total, 0.95, alternative=alternative, method=method
        )
        figures[alternative] = charged, peak
    charged_two, peak_two = figures.pop("two-sided")
    assert peak_two <= charged_two
    for charged, peak in figures.values():
        assert charged <= charged_two
        assert peak <= peak_two
        assert peak <= charged


@pytest.mark.parametrize("alternative", ONE_SIDED)
@pytest.mark.parametrize("n_bootstrap", [20, 300, 3000])
def test_one_sided_bca_charge_covers_one_bound(alternative, n_bootstrap):
    # As the two-sided charge (tests/test_preflight_undercounts.py), with the
    # second pass's window of a single bound.
    size = 500
    replicates = np.random.default_rng(1).gamma(2.0, size=(n_bootstrap, size))
    estimate = np.full(size, 2.0)

    def both_passes():
        first = BCaAccumulator(
            (size,), n_bootstrap, 0.95, estimate, alternative=alternative
        )
        for block in np.array_split(replicates, max(1, n_bootstrap // 8)):
            first.update(block)
        second = first.second_pass(np.full(size, 0.05))
        for block in np.array_split(replicates, max(1, n_bootstrap // 8)):
            second.update(block)
        return first.interval(second)

    _, peak = _traced_peak(both_passes)
    charged = bca_summary_bytes(
        (size,), n_bootstrap, 0.95, keep_samples=False, copy_samples=False, n_bounds=1
    )
    two_sided = bca_summary_bytes(
        (size,), n_bootstrap, 0.95, keep_samples=False, copy_samples=False
    )
    assert peak <= charged <= 2 * peak
    if n_bootstrap != 300:
        # The second pass's windows are the peak: one bound costs less.
        assert charged < two_sided
