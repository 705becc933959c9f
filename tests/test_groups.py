"""Runs through every CV: nested leave-one-run-out in the wrappers, both paths."""

import warnings

import numpy as np
import pytest
import sklearn
from sklearn.metrics import r2_score
from sklearn.model_selection import GroupKFold, LeaveOneGroupOut
from sklearn.pipeline import make_pipeline

from skbatch import (
    AutocorrelationWarning,
    BatchedRidge,
    BootstrapEstimator,
    Delayer,
    PermutationScorer,
)
from skbatch.random import bootstrap_counts, resolve_entropy

ALPHAS = np.logspace(-2, 5, 8)
# Runs of unequal length, as fMRI sessions are.
RUN_LENGTHS = (48, 31, 40, 26, 35)


class _Refit(BatchedRidge):
    """A subclass: the wrappers refit it (no fast path), groups in its fit."""


def _runs_data(n_targets=4, phi=0.8, seed=0):
    """Features and targets in runs, AR(1) noise restarting at every run."""
    rng = np.random.default_rng(seed)
    runs = np.repeat(np.arange(len(RUN_LENGTHS)), RUN_LENGTHS)
    X = rng.standard_normal((runs.size, 5))
    noise = rng.standard_normal((runs.size, n_targets))
    for t in range(1, runs.size):
        if runs[t] == runs[t - 1]:
            noise[t] += phi * noise[t - 1]
    W = rng.standard_normal((5, n_targets)) * np.linspace(0, 1, n_targets)
    return X, X @ W + noise, runs


def _hand_nested_score(make_inner, X, Y, runs, transform=None):
    """Leave-one-run-out of refits, each choosing alpha by leave-one-run-out."""
    scores = []
    for train, test in LeaveOneGroupOut().split(X, Y, runs):
        X_train, X_test = X[train], X[test]
        if transform is not None:
            X_train = transform(X_train, runs[train])
            X_test = transform(X_test, runs[test])
        model = make_inner().fit(X_train, Y[train], groups=runs[train])
        scores.append(
            r2_score(Y[test], model.predict(X_test), multioutput="raw_values")
        )
    return np.mean(scores, axis=0)


def test_permutation_nested_leave_one_run_out_equals_a_hand_loop():
    X, Y, runs = _runs_data()

    def inner():
        return BatchedRidge(alphas=ALPHAS, cv=LeaveOneGroupOut())

    args = dict(
        cv=LeaveOneGroupOut(),
        n_permutations=12,
        permutation_type="circular_shift",
        multioutput="raw_values",
        return_null=True,
        random_state=0,
    )
    fast = PermutationScorer(inner(), **args).fit(X, Y, groups=runs)
    np.testing.assert_allclose(
        fast.score_, _hand_nested_score(inner, X, Y, runs), rtol=1e-9
    )
    # The refit path (a subclass has no fast path) on the same permutations.
    refit = PermutationScorer(_Refit(alphas=ALPHAS, cv=LeaveOneGroupOut()), **args).fit(
        X, Y, groups=runs
    )
    np.testing.assert_allclose(refit.score_, fast.score_, rtol=1e-9)
    np.testing.assert_allclose(
        refit.permutation_scores_, fast.permutation_scores_, rtol=1e-7, atol=1e-10
    )
    np.testing.assert_array_equal(refit.pvalue_, fast.pvalue_)
    # The inner fold choice is by runs: leave-one-out chooses otherwise (and
    # says that it should not be used here).
    with pytest.warns(AutocorrelationWarning):
        loo = PermutationScorer(BatchedRidge(alphas=ALPHAS), **args)
        loo.fit(X, Y, groups=runs)
    assert not np.allclose(loo.score_, fast.score_)


def test_permutation_routes_runs_through_a_pipeline():
    X, Y, runs = _runs_data(n_targets=2)
    delays = (0, 1, 2)

    def inner():
        return BatchedRidge(alphas=ALPHAS, cv=GroupKFold(3))

    def delay(X_part, runs_part):
        return Delayer(delays=delays).fit_transform(X_part, groups=runs_part)

    with sklearn.config_context(enable_metadata_routing=True):
        pipe = make_pipeline(Delayer(delays=delays), inner())
        perm = PermutationScorer(
            pipe,
            cv=LeaveOneGroupOut(),
            n_permutations=3,
            permutation_type="circular_shift",
            multioutput="raw_values",
            random_state=0,
        ).fit(X, Y, groups=runs)
    # The test run is delayed as one run: the only run of its fold.
    expected = _hand_nested_score(inner, X, Y, runs, transform=delay)
    np.testing.assert_allclose(perm.score_, expected, rtol=1e-9)


@pytest.mark.parametrize("block_size", [None, 5])
def test_bootstrap_replicates_carry_their_rows_groups(block_size):
    X, Y, runs = _runs_data(n_targets=3)
    boot = BootstrapEstimator(
        BatchedRidge(alphas=ALPHAS, cv=LeaveOneGroupOut()),
        n_bootstrap=4,
        block_size=block_size,
        tune_per_replicate=True,
        return_samples=True,
        random_state=0,
    ).fit(X, Y, groups=runs)
    # The same draws by hand (the resamples are a documented function of
    # random_state and the replicate id): each replicate's rows keep their
    # run, a run drawn twice one label.
    counts = bootstrap_counts(
        resolve_entropy(0), np.arange(4), runs.size, runs, block_size=block_size
    )
    for k, count in enumerate(counts):
        rows = np.repeat(np.arange(runs.size), count)
        model = BatchedRidge(alphas=ALPHAS, cv=LeaveOneGroupOut())
        model.fit(X[rows], Y[rows], groups=runs[rows])
        np.testing.assert_allclose(
            boot.results_["coef_"].samples[k], model.coef_, rtol=1e-9, atol=1e-12
        )
    full = BatchedRidge(alphas=ALPHAS, cv=LeaveOneGroupOut()).fit(X, Y, groups=runs)
    np.testing.assert_array_equal(boot.estimator_.alpha_, full.alpha_)


def test_bootstrap_holds_the_alpha_leave_one_run_out_chose():
    X, Y, runs = _runs_data(n_targets=3)
    boot = BootstrapEstimator(
        BatchedRidge(alphas=ALPHAS, cv=LeaveOneGroupOut()),
        n_bootstrap=5,
        block_size=5,
        random_state=0,
    ).fit(X, Y, groups=runs)
    full = BatchedRidge(alphas=ALPHAS, cv=LeaveOneGroupOut()).fit(X, Y, groups=runs)
    np.testing.assert_array_equal(boot.estimator_.alpha_, full.alpha_)
    np.testing.assert_allclose(boot.results_["coef_"].estimate, full.coef_)


def test_wrappers_warn_of_autocorrelation_once_not_per_refit():
    X, Y, runs = _runs_data(n_targets=20, phi=0.95)
    Y = Y * 0.1 + np.cumsum(np.random.default_rng(1).standard_normal(Y.shape), 0)
    for wrapper in (
        BootstrapEstimator(
            _Refit(alphas=ALPHAS), n_bootstrap=3, block_size=5, random_state=0
        ),
        PermutationScorer(
            _Refit(alphas=ALPHAS),
            cv=GroupKFold(2),
            n_permutations=2,
            permutation_type="circular_shift",
            random_state=0,
        ),
    ):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            wrapper.fit(X, Y, groups=runs)
        found = [w for w in caught if issubclass(w.category, AutocorrelationWarning)]
        assert len(found) == 1, type(wrapper).__name__
