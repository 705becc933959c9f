"""P-values and bootstrap intervals of variance_partitioning, against naive
loops of refits over the same permutations and replicates."""

import pickle
import warnings

import numpy as np
import pytest
import scipy.stats
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.metrics import r2_score
from sklearn.model_selection import GroupKFold, KFold, LeaveOneGroupOut
from test_partitioning import _NoFit
from test_ridge import _ar1_runs

from skbatch import (
    BandedRidge,
    BootstrapEstimator,
    PermutationScorer,
    variance_partitioning,
)
from skbatch._ridge.partition_inference import replicate, replicate_splits
from skbatch.random import bootstrap_rows, permutation_indices

# Five runs of unequal length.
RUN_LENGTHS = (36, 28, 40, 32, 24)
BAND_SIZES = (3, 3)
SEED = 7


def _model(**params):
    defaults = dict(band_weights=2, alphas=np.logspace(-1, 3, 4))
    return BandedRidge(**{**defaults, **params})


def _data(seed=0):
    """AR(1) bands in runs; target 0 driven by band 0, target 1 by band 1,
    target 2 by neither, in AR(1) noise."""
    X, runs = _ar1_runs(RUN_LENGTHS, sum(BAND_SIZES), 0.6, seed)
    labels = np.repeat(np.arange(len(BAND_SIZES)), BAND_SIZES)
    rng = np.random.default_rng(seed + 1)
    signal = [X[:, labels == b] @ rng.standard_normal(3) for b in range(2)]
    signal = [part / part.std() for part in signal]
    noise, _ = _ar1_runs(RUN_LENGTHS, 3, 0.5, seed + 2)
    Y = np.column_stack([signal[0], signal[1], np.zeros(len(X))]) + 0.7 * noise
    return X, Y, labels, runs


def _cv_r2(X, Y, runs, splits, average="rows", **params):
    """r2_score per target of a BandedRidge per fold: of the test rows of
    every fold together (``average="rows"``), or the mean over the folds of
    each fold's (``"folds"``)."""
    folds, tested, predicted = [], [], []
    for train, test in splits:
        model = _model(**params).fit(X[train], Y[train], groups=runs[train])
        prediction = model.predict(X[test])
        folds.append(r2_score(Y[test], prediction, multioutput="raw_values"))
        tested.append(Y[test])
        predicted.append(prediction)
    if average == "folds":
        return np.mean(folds, axis=0)
    return r2_score(
        np.concatenate(tested), np.concatenate(predicted), multioutput="raw_values"
    )


def _folds(runs, cv=None):
    """Two folds of whole runs (as fast tests afford), or those of ``cv``."""
    cv = GroupKFold(2) if cv is None else cv
    return list(cv.split(runs, groups=runs))


def _naive_null(X, Y, labels, runs, band, indices):
    """The full model's held-out R^2 with band ``band``'s rows permuted by
    each row of ``indices``, refit for each."""
    splits = _folds(runs)
    null = []
    for perm in indices:
        permuted = X.copy()
        permuted[:, labels == band] = X[perm][:, labels == band]
        null.append(_cv_r2(permuted, Y, runs, splits, bands=labels))
    return np.array(null)


def _run(X, Y, labels, runs, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        kwargs.setdefault("cv", GroupKFold(2))
        return variance_partitioning(
            X, Y, bands=labels, estimator=_model(), groups=runs, **kwargs
        )


@pytest.fixture(scope="module")
def circular():
    """Data and a run with 19 circular shifts of each band."""
    X, Y, labels, runs = _data()
    result = _run(X, Y, labels, runs, n_permutations=19, random_state=SEED)
    return X, Y, labels, runs, result


@pytest.fixture(scope="module")
def naive_circular(circular):
    """Band 0's observed unique variance and its null, by a naive loop over
    the same 19 circular shifts."""
    X, Y, labels, runs, _ = circular
    indices = permutation_indices(
        SEED, np.arange(19), len(X), runs, permutation_type="circular_shift"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        full = _cv_r2(X, Y, runs, _folds(runs), bands=labels)
        without = _cv_r2(X[:, labels == 1], Y, runs, _folds(runs))
        null = _naive_null(X, Y, labels, runs, 0, indices)
    return full - without, null - without


def test_fdr_equals_scipy(circular):
    if not hasattr(scipy.stats, "false_discovery_control"):
        pytest.skip("scipy.stats.false_discovery_control needs scipy >= 1.11")
    result = circular[-1]
    for band in range(2):
        assert_allclose(
            result.pvalue_fdr[band],
            scipy.stats.false_discovery_control(result.pvalue[band]),
            rtol=0,
            atol=1e-12,
        )


def test_pvalues_equal_a_naive_loop_of_refits(circular, naive_circular):
    result = circular[-1]
    observed, null = naive_circular
    assert_allclose(result.unique[0], observed, rtol=0, atol=1e-10)
    assert result.n_permutations == 19 and not result.exact
    expected = (1 + np.sum(null >= observed, axis=0)) / 20
    assert_allclose(result.pvalue[0], expected, rtol=0, atol=1e-10)
    assert_allclose(result.null_mean[0], null.mean(axis=0), rtol=0, atol=1e-10)


def test_pvalues_of_the_mean_over_folds_equal_a_naive_loop():
    X, Y, labels, runs = _data(seed=3)
    Y = Y[:, :2]
    result = _run(
        X, Y, labels, runs, n_permutations=4, random_state=SEED, average="folds"
    )
    indices = permutation_indices(
        SEED, np.arange(4), len(X), runs, permutation_type="circular_shift"
    )
    splits = _folds(runs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        without = _cv_r2(X[:, labels == 1], Y, runs, splits, "folds")
        observed = _cv_r2(X, Y, runs, splits, "folds", bands=labels) - without
        null = []
        for perm in indices:
            permuted = X.copy()
            permuted[:, labels == 0] = X[perm][:, labels == 0]
            null.append(_cv_r2(permuted, Y, runs, splits, "folds", bands=labels))
    null = np.array(null) - without
    assert_allclose(result.unique[0], observed, rtol=0, atol=1e-10)
    expected = (1 + np.sum(null >= observed - 1e-12, axis=0)) / 5
    assert_allclose(result.pvalue[0], expected, rtol=0, atol=1e-10)


def test_fwer_is_the_max_statistic_of_the_naive_loop(circular, naive_circular):
    result = circular[-1]
    observed, null = naive_circular
    reached = null.max(axis=1, keepdims=True) >= observed
    expected = (1 + reached.sum(axis=0)) / 20
    assert_allclose(result.pvalue_fwer[0], expected, rtol=0, atol=1e-10)
    assert np.all(result.pvalue_fwer >= result.pvalue)


def test_two_sided_pvalues_of_the_naive_loop(circular, naive_circular):
    X, Y, labels, runs, _ = circular
    observed, null = naive_circular
    result = _run(
        X,
        Y,
        labels,
        runs,
        n_permutations=19,
        random_state=SEED,
        alternative="two-sided",
    )
    greater = (1 + np.sum(null >= observed, axis=0)) / 20
    less = (1 + np.sum(null <= observed, axis=0)) / 20
    expected = np.minimum(2 * np.minimum(greater, less), 1.0)
    assert_allclose(result.pvalue[0], expected, rtol=0, atol=1e-10)


def test_driven_band_has_small_p_null_band_does_not(circular):
    result = circular[-1]
    # Target 0 is driven by band 0, target 1 by band 1: the least p of 19.
    assert result.pvalue[0, 0] == result.pvalue[1, 1] == 0.05
    # Band 1 adds nothing to target 0, band 0 nothing to target 1, nothing
    # drives target 2.
    assert result.pvalue[1, 0] > 0.1 and result.pvalue[0, 1] > 0.1
    assert np.all(result.pvalue[:, 2] > 0.1)


def test_block_shuffle_enumerated_exactly():
    # The first three runs, of 36, 28 and 40 rows; blocks of 24 rows: 2
    # blocks in every run, 2**3 orders.
    X, Y, labels, runs = _data(seed=3)
    n = sum(RUN_LENGTHS[:3])
    X, Y, runs = X[:n, [0, 1, 3]], Y[:n, :2], runs[:n]
    labels = labels[[0, 1, 3]]
    result = _run(
        X,
        Y,
        labels,
        runs,
        n_permutations=19,
        permutation_type="block_shuffle",
        block_size=24,
    )
    assert result.exact and result.n_permutations == 8
    indices = permutation_indices(
        0,
        np.arange(8),
        len(X),
        runs,
        permutation_type="block_shuffle",
        block_size=24,
        exact=True,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        null = _naive_null(X, Y, labels, runs, 1, indices)
    observed = result.unique[1]
    reduced = result.scores[-1] - observed
    # Exact: the identity is among the 8 and counts itself, no + 1.
    expected = np.sum(null - reduced >= observed - 1e-12, axis=0) / 8
    assert_allclose(result.pvalue[1], expected, rtol=0, atol=1e-10)
    assert np.all(result.pvalue[1] >= 1 / 8)


def _naive_replicates(X, Y, labels, runs, n_bootstrap, seed, cv=None, average="rows"):
    """Unique variance and shares of each replicate: whole runs drawn by
    bootstrap_rows, redrawn (draw i + k n_bootstrap) until a fold's test
    runs were drawn beside copies of 2 other runs to train on; every copy of
    a fold's test runs is tested, every copy of the others trained on."""
    tested = [np.unique(runs[test]) for _, test in _folds(runs, cv)]
    out = []
    for i in range(n_bootstrap):
        for k in range(100):
            (rows,) = bootstrap_rows(seed, [i + k * n_bootstrap], len(X), runs)
            drawn = runs[rows]
            sides = [np.isin(drawn, test_runs) for test_runs in tested]
            splits = [
                (np.flatnonzero(~side), np.flatnonzero(side))
                for side in sides
                if side.any() and np.unique(drawn[~side]).size >= 2
            ]
            if splits:
                break
        Xr, Yr = X[rows], Y[rows]
        full = _cv_r2(Xr, Yr, drawn, splits, average, bands=labels)
        unique = np.stack(
            [
                full - _cv_r2(Xr[:, labels != b], Yr, drawn, splits, average)
                for b in range(2)
            ]
        )
        share = np.where(full > 0, unique / np.where(full > 0, full, 1), np.nan)
        out.append([unique, share])
    return np.array(out)


def _naive_estimate(X, Y, labels, runs, cv=None, average="rows"):
    """Unique variance and share of each band on the data, by refits."""
    splits = _folds(runs, cv)
    full = _cv_r2(X, Y, runs, splits, average, bands=labels)
    unique = np.stack(
        [full - _cv_r2(X[:, labels != b], Y, runs, splits, average) for b in range(2)]
    )
    share = np.where(full > 0, unique / np.where(full > 0, full, 1), np.nan)
    return np.array([unique, share])


def _basic(estimate, samples, confidence_level):
    """The basic bootstrap interval: the percentile interval of ``samples``
    reflected around ``estimate``, as scipy.stats.bootstrap(method="basic")."""
    tail = 100 * (1 - confidence_level) / 2
    low, high = np.percentile(samples, [tail, 100 - tail], axis=0)
    return np.stack([2 * estimate - high, 2 * estimate - low])


@pytest.mark.slow
def test_bootstrap_intervals_are_basic_intervals_of_a_naive_loop_slow():
    X, Y, labels, runs = _data(seed=5)
    X, Y = X, Y[:, :2]
    result = _run(
        X,
        Y,
        labels,
        runs,
        n_bootstrap=19,
        confidence_level=0.9,
        random_state=SEED,
        cv=LeaveOneGroupOut(),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        samples = _naive_replicates(X, Y, labels, runs, 19, SEED, LeaveOneGroupOut())
        estimate = _naive_estimate(X, Y, labels, runs, LeaveOneGroupOut())
    expected = _basic(estimate, samples, 0.9)
    assert_allclose(result.unique_ci, expected[:, 0], rtol=0, atol=1e-10)
    assert_allclose(result.share_ci, expected[:, 1], rtol=0, atol=1e-10)
    assert np.all(result.unique_ci[0] <= result.unique_ci[1])


@pytest.mark.parametrize("average", ["rows", "folds"])
def test_bootstrap_intervals_are_basic_intervals_of_a_naive_loop(average):
    # One band of two columns, one target: the refits of the slow test
    # above at a tenth of their number.
    X, Y, labels, runs = _data(seed=6)
    X, Y, labels = X[:, [0, 3]], Y[:, :1], np.array([0, 1])
    result = _run(X, Y, labels, runs, n_bootstrap=5, random_state=SEED, average=average)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        samples = _naive_replicates(X, Y, labels, runs, 5, SEED, average=average)
        estimate = _naive_estimate(X, Y, labels, runs, average=average)
    expected = _basic(estimate, samples, 0.95)
    assert_allclose(result.unique_ci, expected[:, 0], rtol=0, atol=1e-10)
    assert_allclose(result.share_ci, expected[:, 1], rtol=0, atol=1e-10)
    assert result.n_bootstrap == 5


def test_replicate_folds_keep_copies_of_a_run_on_one_side():
    runs = np.repeat([0, 1, 2, 3], [3, 2, 4, 3])
    splits = _folds(runs, LeaveOneGroupOut())
    (rows,) = bootstrap_rows(1, [0], len(runs), runs)
    for train, test in replicate_splits(rows, splits, runs):
        assert not set(runs[rows[train]]) & set(runs[rows[test]])
        assert np.unique(runs[rows[test]]).size == 1
    # A fold whose training rows hold a single run is left out.
    rows = np.concatenate([np.flatnonzero(runs == 1), np.flatnonzero(runs == 2)])
    assert replicate_splits(rows, splits, runs) == []


@pytest.mark.parametrize("n_runs", [3, 4, 5, 9, 10, 11])
def test_fewer_than_ten_runs_warn_before_any_fit(n_runs):
    # Below 10 runs the calibration measured the intervals too narrow
    # (benchmarks/calibration_partitioning.py, 200 data sets).
    X, runs = _ar1_runs((RUN_LENGTHS * 3)[:n_runs], 4, 0.5, 9)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(AssertionError, match="a fit ran"):
            variance_partitioning(
                X,
                X[:, :2],
                bands=[0, 0, 1, 1],
                estimator=_NoFit(),
                groups=runs,
                n_bootstrap=9,
            )
    narrow = [w for w in caught if "too narrow" in str(w.message)]
    assert len(narrow) == (n_runs < 10)
    if narrow:
        assert f"n_bootstrap with {n_runs} runs" in str(narrow[0].message)
        assert issubclass(narrow[0].category, UserWarning)


def test_three_runs_left_out_one_at_a_time_replicate_the_data():
    # Why three runs warn: a replicate's fold needs its test run and two
    # other runs, so every scorable draw holds each run exactly once.
    runs = np.repeat([0, 1, 2], [5, 4, 6])
    splits = _folds(runs, LeaveOneGroupOut())
    for item in range(20):
        rows, _ = replicate(3, item, 20, len(runs), runs, splits)
        assert_array_equal(np.sort(rows), np.arange(len(runs)))


def test_no_inference_keeps_the_named_tuple_and_pickles():
    X, Y, labels, runs = _data(seed=4)
    X, Y, labels = X[:, [0, 3]], Y[:, :2], np.array([0, 1])
    result = _run(X, Y, labels, runs, cv=KFold(3))
    subsets, scores, regions, unique, names = result
    assert len(result) == 5 and result.pvalue is None and result.unique_ci is None
    assert result.n_permutations == 0 and result.n_bootstrap == 0
    full = scores[-1]
    expected = np.where(full > 0, unique / np.where(full > 0, full, 1), np.nan)
    assert_allclose(result.share, expected, rtol=0, atol=1e-12)
    again = pickle.loads(pickle.dumps(result))
    assert_array_equal(again.share, result.share)
    assert again.pvalue is None and again.subsets == subsets


def test_same_result_for_any_n_jobs():
    joblib = pytest.importorskip("joblib")
    X, Y, labels, runs = _data(seed=8)
    X, Y, labels = X[:, [0, 3]], Y[:, :2], np.array([0, 1])
    kwargs = dict(n_permutations=3, n_bootstrap=2)
    serial = _run(X, Y, labels, runs, **kwargs)
    with joblib.parallel_config(backend="threading"):
        threads = _run(X, Y, labels, runs, n_jobs=2, **kwargs)
    # The same draws; the fits in threads may round otherwise (BLAS threads).
    assert_array_equal(serial.pvalue, threads.pvalue)
    assert_allclose(serial.unique_ci, threads.unique_ci, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(n_permutations=-1), ValueError, r"n_permutations must be 0 .* -1"),
        (dict(n_permutations=2.5), ValueError, "n_permutations"),
        (dict(n_permutations=True), ValueError, "n_permutations"),
        (dict(n_bootstrap=1), ValueError, r"n_bootstrap must be 0 \(none\) or an "),
        (dict(confidence_level=1.0), ValueError, "confidence_level"),
        (dict(permutation_type="roll"), ValueError, "permutation_type"),
        (dict(block_size=4), ValueError, "block_size"),
        (
            dict(permutation_type="block_shuffle", block_size=30, n_permutations=9),
            ValueError,
            "block_size",
        ),
        (dict(alternative="larger"), ValueError, "alternative"),
        (dict(random_state=-3), ValueError, "random_state"),
        (dict(random_state="seed"), TypeError, "random_state"),
        (dict(max_memory_gb=-1.0), ValueError, "max_memory_gb"),
        (dict(n_jobs="x"), TypeError, "n_jobs must be None or an int, got str: 'x'"),
        (dict(n_jobs=1.5), TypeError, "n_jobs must be None or an int, got float"),
        (dict(n_jobs=True), TypeError, "n_jobs must be None or an int, got bool"),
        (dict(n_jobs=0), ValueError, r"n_jobs must be None, a positive int .* got 0"),
        (
            dict(n_permutations=99, n_bootstrap=99, max_memory_gb=1e-7),
            ValueError,
            r"variance_partitioning needs .* GB of host memory .*"
            r"\(max_memory_gb=1e-07\)\. Lower n_jobs, n_bootstrap or n_permutations",
        ),
        (
            dict(n_bootstrap=9, groups=np.repeat([0, 1], [70, 90])),
            ValueError,
            r"n_bootstrap needs a fold whose training rows come from at least 2",
        ),
    ],
)
def test_bad_input_is_refused_before_any_fit(kwargs, error, match):
    # n_jobs: the estimators' check, the same message.
    X, runs = _ar1_runs(RUN_LENGTHS, 4, 0.5, 9)
    kwargs.setdefault("groups", runs)
    with pytest.raises(error, match=match):
        variance_partitioning(
            X, X[:, :2], bands=[0, 0, 1, 1], estimator=_NoFit(), **kwargs
        )


@pytest.mark.parametrize("n_jobs", ["x", 1.5, True, 0])
def test_n_jobs_is_refused_as_the_estimators_refuse_it(n_jobs):
    X, runs = _ar1_runs(RUN_LENGTHS, 4, 0.5, 9)
    with pytest.raises((TypeError, ValueError)) as estimators:
        PermutationScorer(_NoFit(), n_jobs=n_jobs).fit(X, X[:, 0])
    with pytest.raises(type(estimators.value)) as bootstrap:
        BootstrapEstimator(_NoFit(), n_jobs=n_jobs).fit(X, X[:, 0])
    with pytest.raises(type(estimators.value)) as partitioning:
        variance_partitioning(
            X, X[:, :2], bands=[0, 0, 1, 1], estimator=_NoFit(), n_jobs=n_jobs
        )
    assert str(partitioning.value) == str(estimators.value)
    assert str(bootstrap.value) == str(estimators.value)
