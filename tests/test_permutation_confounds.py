"""PermutationScorer(...).fit(X, y, confounds=Z): the score of X beyond the
confounds, against naive loops that build each Freedman–Lane target by hand
from scikit-learn's LinearRegression, refit scikit-learn's models on every
fold and count the permuted gains that reach the observed one."""

import numpy as np
import pytest
import scipy.sparse as sp
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge, RidgeCV
from sklearn.metrics import explained_variance_score, r2_score
from sklearn.model_selection import GroupKFold, KFold
from test_ridge import _ar1_runs

from skbatch import BandedRidge, PermutationScorer
from skbatch._resampling.signed import signed_rows
from skbatch._ridge.confounds import confound_fit
from skbatch.exceptions import AutocorrelationWarning

RUN_LENGTHS = (36, 28, 40, 32, 24)
SEED = 3


def _data(seed=0, n_targets=3, lengths=RUN_LENGTHS, phi=0.6):
    """AR(1) runs of unequal length: two confounds correlated with X's
    first column and with every target; target 0 driven by X beyond them,
    the others not."""
    X, runs = _ar1_runs(lengths, 4, phi, seed)
    Z, _ = _ar1_runs(lengths, 2, phi, seed + 1)
    noise, _ = _ar1_runs(lengths, n_targets, phi, seed + 2)
    X[:, 0] += 0.8 * Z[:, 0]
    Y = 0.9 * Z[:, [0]] - 0.5 * Z[:, [1]] + noise
    Y[:, 0] += X[:, 1]
    return X, Y, Z, runs


def _apply(R, code):
    """R's rows as signed code ``code`` moves them, by hand."""
    rows = np.where(code < 0, -code - 1, code)
    return R[rows] * np.where(code < 0, -1.0, 1.0)[:, None]


def _cv(model, A, y, splits, metric, weights):
    scores = []
    for train, test in splits:
        fit_weights = None if weights is None else weights[train]
        fit = model().fit(A[train], y[train], sample_weight=fit_weights)
        scores.append(metric(y[test], fit.predict(A[test]), multioutput="raw_values"))
    return np.mean(scores, axis=0)


def _naive(
    X, Y, Z, model, splits, codes, *, metric=r2_score, weights=None, exact=False
):
    """(observed gains, permuted gains, p-values): each permuted target
    built from LinearRegression's fit on the confounds, both models refit on
    every fold, ties counted."""
    reduced = LinearRegression().fit(Z, Y, sample_weight=weights)
    fitted = reduced.predict(Z)
    residuals = Y - fitted
    design = np.hstack([X, Z])

    def gain(y):
        full = _cv(model, design, y, splits, metric, weights)
        return full - _cv(LinearRegression, Z, y, splits, metric, weights)

    observed = gain(Y)
    null = np.array([gain(fitted + _apply(residuals, code)) for code in codes])
    count = (null >= observed - 1e-9).sum(axis=0)
    pvalue = count / len(codes) if exact else (count + 1) / (len(codes) + 1)
    return observed, null, pvalue


def _codes(n_permutations, n_samples, groups=None, **scheme):
    return signed_rows(SEED, np.arange(n_permutations), n_samples, groups, **scheme)


def _check(perm, observed, null, pvalue):
    assert_allclose(perm.score_, observed, rtol=0, atol=1e-10)
    assert_allclose(perm.permutation_scores_, null, rtol=0, atol=1e-10)
    assert_array_equal(perm.pvalue_, pvalue)


def test_iid_shuffle_equals_naive_loop_fast_path():
    X, Y, Z, _ = _data(phi=0.0)
    splits = list(KFold(5).split(X))
    codes = _codes(30, len(X))
    perm = PermutationScorer(
        Ridge(alpha=3.0),
        n_permutations=30,
        cv=KFold(5),
        multioutput="raw_values",
        return_null=True,
        random_state=SEED,
    ).fit(X, Y, confounds=Z)
    _check(perm, *_naive(X, Y, Z, lambda: Ridge(alpha=3.0), splits, codes))
    # X drives target 0 beyond the confounds.
    assert perm.pvalue_[0] == 1 / 31
    assert perm.estimator_.n_features_in_ == X.shape[1] + Z.shape[1]


@pytest.mark.parametrize(
    "scheme",
    [
        dict(permutation_type="circular_shift"),
        dict(permutation_type="block_shuffle", block_size=6),
        dict(permutation_type="shuffle"),
    ],
)
def test_within_runs_equals_naive_loop_with_search(scheme):
    X, Y, Z, runs = _data()
    alphas = np.logspace(-2, 3, 6)
    cv = GroupKFold(5)
    splits = list(cv.split(X, Y, runs))
    codes = _codes(25, len(X), runs, **scheme)
    perm = PermutationScorer(
        RidgeCV(alphas=alphas, alpha_per_target=True),
        n_permutations=25,
        cv=cv,
        multioutput="raw_values",
        return_null=True,
        random_state=SEED,
        **scheme,
    )
    if scheme["permutation_type"] == "shuffle":
        # The residuals' rows are autocorrelated: shuffling them is warned
        # against, as shuffling y is.
        with pytest.warns(
            AutocorrelationWarning,
            match="rows of y.s residuals on the confounds are autocorrelated within",
        ):
            perm.fit(X, Y, groups=runs, confounds=Z)
    else:
        perm.fit(X, Y, groups=runs, confounds=Z)
    naive = _naive(
        X, Y, Z, lambda: RidgeCV(alphas=alphas, alpha_per_target=True), splits, codes
    )
    _check(perm, *naive)


def test_exact_sign_flips_of_runs_equal_naive_enumeration():
    X, Y, Z, runs = _data()
    cv = GroupKFold(5)
    splits = list(cv.split(X, Y, runs))
    perm = PermutationScorer(
        Ridge(alpha=1.0),
        n_permutations=100,
        cv=cv,
        permutation_type="sign_flip",
        multioutput="raw_values",
        return_null=True,
    ).fit(X, Y, groups=runs, confounds=Z)
    assert perm.exact_ and perm.n_permutations_ == 2**5
    codes = signed_rows(
        0, np.arange(32), len(X), runs, permutation_type="sign_flip", exact=True
    )
    naive = _naive(X, Y, Z, lambda: Ridge(alpha=1.0), splits, codes, exact=True)
    _check(perm, *naive)


def test_sample_weight_generic_path_equals_weighted_naive_loop():
    X, Y, Z, runs = _data()
    weights = np.random.default_rng(5).uniform(0.5, 2.0, len(X))
    cv = GroupKFold(5)
    splits = list(cv.split(X, Y, runs))
    codes = _codes(15, len(X), runs, permutation_type="circular_shift")
    perm = PermutationScorer(
        Ridge(alpha=2.0),
        n_permutations=15,
        cv=cv,
        permutation_type="circular_shift",
        multioutput="raw_values",
        return_null=True,
        random_state=SEED,
    ).fit(X, Y, groups=runs, confounds=Z, sample_weight=weights)
    naive = _naive(X, Y, Z, lambda: Ridge(alpha=2.0), splits, codes, weights=weights)
    _check(perm, *naive)


def test_generic_metric_and_fast_metric_equal_their_naive_loops():
    """explained_variance is refit, R^2 on the fast path, in one fit."""
    X, Y, Z, _ = _data(phi=0.0)
    splits = list(KFold(4).split(X))
    codes = _codes(12, len(X))
    perm = PermutationScorer(
        Ridge(alpha=1.0),
        n_permutations=12,
        cv=KFold(4),
        scoring=["r2", "explained_variance"],
        multioutput="raw_values",
        return_null=True,
        random_state=SEED,
    ).fit(X, Y, confounds=Z)
    model = lambda: Ridge(alpha=1.0)  # noqa: E731
    for name, metric in (
        ("r2", r2_score),
        ("explained_variance", explained_variance_score),
    ):
        observed, null, pvalue = _naive(X, Y, Z, model, splits, codes, metric=metric)
        assert_allclose(perm.score_[name], observed, rtol=0, atol=1e-10)
        assert_allclose(perm.permutation_scores_[name], null, rtol=0, atol=1e-10)
        assert_array_equal(perm.pvalue_[name], pvalue)


def test_fast_path_equals_generic_path():
    X, Y, Z, runs = _data()
    params = dict(
        n_permutations=20,
        cv=GroupKFold(5),
        permutation_type="circular_shift",
        multioutput="raw_values",
        return_null=True,
        random_state=SEED,
    )
    fast = PermutationScorer(Ridge(alpha=1.0), **params).fit(
        X, Y, groups=runs, confounds=Z
    )
    # Unit weights send the work to refits and change nothing else.
    slow = PermutationScorer(Ridge(alpha=1.0), **params).fit(
        X, Y, groups=runs, confounds=Z, sample_weight=np.ones(len(X))
    )
    assert_allclose(fast.permutation_scores_, slow.permutation_scores_, atol=1e-10)
    assert_allclose(fast.score_, slow.score_, atol=1e-10)
    assert_array_equal(fast.pvalue_, slow.pvalue_)
    assert_array_equal(fast.pvalue_fwer_, slow.pvalue_fwer_)


def test_uniform_average_and_1d_y():
    X, Y, Z, _ = _data(phi=0.0)
    splits = list(KFold(5).split(X))
    codes = _codes(10, len(X))
    observed, null, _ = _naive(X, Y, Z, lambda: Ridge(alpha=1.0), splits, codes)
    perm = PermutationScorer(
        Ridge(alpha=1.0), n_permutations=10, return_null=True, random_state=SEED
    ).fit(X, Y, confounds=Z)
    assert_allclose(perm.score_, observed.mean(), atol=1e-10)
    assert_allclose(perm.permutation_scores_, null.mean(axis=1), atol=1e-10)
    one = PermutationScorer(
        Ridge(alpha=1.0), n_permutations=10, return_null=True, random_state=SEED
    ).fit(X, Y[:, 0], confounds=Z[:, 0])
    observed, null, pvalue = _naive(
        X, Y[:, :1], Z[:, :1], lambda: Ridge(alpha=1.0), splits, codes
    )
    assert_allclose(one.score_, observed[0], atol=1e-10)
    assert_allclose(one.permutation_scores_, null[:, 0], atol=1e-10)
    assert one.pvalue_ == pvalue[0]


def test_confound_fit_is_least_squares_with_intercept():
    X, Y, Z, _ = _data()
    weights = np.linspace(0.5, 2.0, len(X))
    fitted, residuals = confound_fit(Z, Y, weights)
    design = np.column_stack([np.ones(len(Z)), Z])
    root = np.sqrt(weights)[:, None]
    beta = np.linalg.lstsq(root * design, root * Y, rcond=None)[0]
    assert_allclose(fitted, design @ beta, atol=1e-12)
    assert_allclose(residuals, Y - design @ beta, atol=1e-12)


def test_confound_explains_a_naive_positive():
    """y depends on X only through a confound: the test without it rejects,
    the test beyond it does not."""
    rng = np.random.default_rng(0)
    z = rng.standard_normal(200)
    X = (0.9 * z + np.sqrt(1 - 0.81) * rng.standard_normal(200))[:, None]
    y = z + 0.5 * rng.standard_normal(200)
    params = dict(n_permutations=99, cv=KFold(5))
    naive = PermutationScorer(LinearRegression(), **params).fit(X, y)
    beyond = PermutationScorer(LinearRegression(), **params).fit(X, y, confounds=z)
    assert naive.pvalue_ == 0.01
    assert beyond.pvalue_ > 0.05


@pytest.mark.parametrize(
    "confounds, error, match",
    [
        (np.zeros((5, 1)), ValueError, "one row per sample of X \\(160\\), got 5"),
        (np.zeros((160, 0)), ValueError, "at least one column"),
        (np.ones((160, 159)), ValueError, "fewer columns than n_samples - 1"),
        (np.zeros((160, 1, 1)), ValueError, "1-D or 2-D"),
        (np.where(np.arange(160) == 7, np.nan, 1.0), ValueError, "row 7"),
        (np.full(160, "a"), TypeError, "confounds must hold numbers"),
        (sp.csr_matrix(np.ones((160, 1))), TypeError, "dense array"),
    ],
)
def test_bad_confounds_are_refused_before_any_fit(confounds, error, match):
    X, Y, _, _ = _data()
    perm = PermutationScorer(Ridge(), n_permutations=5)
    with pytest.raises(error, match=match):
        perm.fit(X, Y, confounds=confounds)
    assert not hasattr(perm, "estimator_")


def test_classifier_and_banded_bands_are_refused():
    X, Y, Z, _ = _data()
    with pytest.raises(ValueError, match="classifier LogisticRegression"):
        PermutationScorer(LogisticRegression(), n_permutations=5).fit(
            X, Y[:, 0] > 0, confounds=Z
        )
    with pytest.raises(ValueError, match="variance_partitioning"):
        PermutationScorer(BandedRidge(bands=[0, 0, 1, 1]), n_permutations=5).fit(
            X, Y, confounds=Z
        )


def test_memory_that_cannot_suffice_is_refused_up_front():
    X, Y, Z, _ = _data(phi=0.0)
    perm = PermutationScorer(Ridge(), n_permutations=50, max_memory_gb=1e-6)
    with pytest.raises(ValueError, match="GB"):
        perm.fit(X, Y, confounds=Z)
    assert not hasattr(perm, "estimator_")


def test_sparse_X_takes_the_generic_path_with_the_same_gains():
    X, Y, Z, _ = _data(phi=0.0)
    params = dict(
        n_permutations=8,
        cv=KFold(4),
        multioutput="raw_values",
        return_null=True,
        random_state=SEED,
    )
    dense = PermutationScorer(Ridge(alpha=1.0), **params).fit(X, Y, confounds=Z)
    sparse = PermutationScorer(Ridge(alpha=1.0), **params).fit(
        sp.csr_matrix(X), Y, confounds=Z
    )
    # scikit-learn's Ridge solves sparse X iteratively (to its tol).
    assert_allclose(dense.permutation_scores_, sparse.permutation_scores_, atol=1e-4)
    assert dense.permutation_scores_.std() > 1e-2


def test_batched_ridge_with_search_equals_generic_refits():
    """The default estimator, its own search per permuted target, on the
    fast path, against refits of it on every fold (the generic path)."""
    from skbatch import BatchedRidge

    X, Y, Z, runs = _data(phi=0.0)
    params = dict(
        n_permutations=12,
        cv=GroupKFold(5),
        permutation_type="circular_shift",
        multioutput="raw_values",
        return_null=True,
        random_state=SEED,
    )
    model = BatchedRidge(alphas=np.logspace(-2, 3, 6))
    fast = PermutationScorer(model, **params).fit(X, Y, groups=runs, confounds=Z)
    slow = PermutationScorer(model, **params).fit(
        X, Y, groups=runs, confounds=Z, sample_weight=np.ones(len(X))
    )
    assert_allclose(fast.permutation_scores_, slow.permutation_scores_, atol=1e-10)
    assert_array_equal(fast.pvalue_, slow.pvalue_)


@pytest.mark.parametrize("device", ["torch", "jax"])
@pytest.mark.slow
def test_other_array_libraries_match_numpy(device):
    pytest.importorskip(device)
    from skbatch import BatchedRidge

    X, Y, Z, runs = _data(phi=0.0)
    params = dict(
        n_permutations=10,
        cv=GroupKFold(5),
        permutation_type="circular_shift",
        multioutput="raw_values",
        return_null=True,
    )
    model = BatchedRidge(alphas=np.logspace(-2, 3, 6), dtype="float64")
    reference = PermutationScorer(model, device="cpu", **params).fit(
        X, Y, groups=runs, confounds=Z
    )
    result = PermutationScorer(model, device=device, **params).fit(
        X, Y, groups=runs, confounds=Z
    )
    assert result.backend_.library == device
    assert_allclose(result.score_, reference.score_, atol=1e-10)
    assert_allclose(
        result.permutation_scores_, reference.permutation_scores_, atol=1e-10
    )
    assert_array_equal(result.pvalue_, reference.pvalue_)


def test_preflight_counts_what_both_models_hold():
    """The refusal's figure for the data is what the problem of both models
    holds once built (every rank at its bound here); the full model's data
    and one item (9.4e-05 GB) fit this budget."""
    from skbatch._ridge.confounds import ConfoundedPermutedProblem, reduced_scheme
    from skbatch._ridge.cv import cv_scheme
    from skbatch._ridge.spec import ridge_spec
    from skbatch.backend import Backend

    X, Y, Z, _ = _data(phi=0.0)
    with pytest.raises(ValueError, match="the data and decompositions hold") as error:
        PermutationScorer(Ridge(), n_permutations=50, max_memory_gb=1e-4).fit(
            X, Y, confounds=Z
        )
    design = np.hstack([X, Z])
    fitted, residuals = confound_fit(Z, Y)
    problem = ConfoundedPermutedProblem(
        design,
        Z,
        fitted,
        residuals,
        list(KFold(5).split(X)),
        ridge_spec(Ridge()),
        lambda X_train, Y_train, train: cv_scheme(None).split(X_train, Y_train),
        Backend("numpy"),
        np.float64,
        None,
        n_permutations=50,
        permutation=dict(
            entropy=0, groups=None, permutation_type="shuffle", block_size=None
        ),
    )
    assert f"{problem.fixed_bytes / 1e9:.3g}" in str(error.value)
    assert problem.reduced.Y is problem.Y
    assert reduced_scheme(Z, Y, np.arange(len(Z))) is not None


def test_float32_X_keeps_its_precision():
    from skbatch import BatchedRidge

    X, Y, Z, _ = _data(phi=0.0)
    params = dict(n_permutations=5, multioutput="raw_values", return_null=True)
    single = PermutationScorer(BatchedRidge(), **params).fit(
        X.astype(np.float32), Y, confounds=Z
    )
    double = PermutationScorer(BatchedRidge(), **params).fit(X, Y, confounds=Z)
    assert single.estimator_.coef_.dtype == np.float32
    assert single.estimator_.n_features_in_ == 6
    assert_allclose(single.score_, double.score_, atol=1e-4)
    assert_allclose(single.permutation_scores_, double.permutation_scores_, atol=1e-4)
