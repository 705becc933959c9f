"""Tests of the ridge kernels against independent references.

References are scikit-learn's Ridge / RidgeCV / metrics, explicit refits, or
hat matrices built naively in numpy; never stored outputs.
"""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from array_api_compat import array_namespace
from array_api_compat import device as array_device
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.datasets import load_diabetes, load_linnerud
from sklearn.exceptions import UndefinedMetricWarning
from sklearn.linear_model import LinearRegression, Ridge, RidgeCV
from sklearn.metrics import mean_squared_error, r2_score
from sklearn.model_selection import KFold

from skbatch._kernels.linalg import (
    center,
    fold_basis,
    gcv_scores,
    holdout_scores,
    loo_scores,
    project,
    residual_sq_norm,
    ridge_coef,
    score_per_target,
    select_alpha,
    svd_decompose,
)

ALPHAS = np.logspace(-3, 4, 15)
BACKENDS = ["numpy", "torch", "jax"]


# One fold scored from scratch through the kernels alone (fold_basis, center,
# project, holdout_scores), to test them against refits; the K-fold scheme of
# skbatch._ridge.cv composes them differently (targets centred once on all
# rows) and is tested against refits in tests/test_ridge.py.


def fold_scores(
    U,
    s,
    X_test_V,
    Y_train,
    Y_test,
    alphas,
    *,
    fit_intercept=True,
    sample_weight=None,
    test_sample_weight=None,
    scoring="r2",
    xp=None,
):
    """Test-set score of every alpha for every target in one fold.

    Parameters
    ----------
    U, s, X_test_V : arrays
        From :func:`fold_basis`.
    Y_train : array of shape (n_train, n_targets)
    Y_test : array of shape (n_test, n_targets)
    alphas : array-like of shape (n_alphas,)
    fit_intercept : bool, default=True
    sample_weight : array of shape (n_train,), default=None
        Weights of the training rows.
    test_sample_weight : array of shape (n_test,), default=None
        Weights of the test rows in the score, as ``GridSearchCV`` (hence
        ``RidgeCV(cv=K)`` since scikit-learn 1.7) passes them to its scorer.
    scoring : {"r2", "neg_mean_squared_error", "correlation"}, default="r2"

    Returns
    -------
    scores : array of shape (n_alphas, n_targets)
        Higher is better; in float64 where the device supports it.
    """
    xp = xp or array_namespace(U, Y_train)
    Y_centered, Y_offset = center(
        Y_train, sample_weight, fit_intercept=fit_intercept, xp=xp
    )
    UtY = project(U, Y_centered, xp=xp)
    # Every scoring is unchanged when targets and predictions shift together,
    # so the training offset comes off the targets once, not per alpha.
    return holdout_scores(
        s,
        X_test_V,
        UtY,
        Y_test - Y_offset,
        alphas,
        scoring=scoring,
        sample_weight=test_sample_weight,
        xp=xp,
    )


def kfold_scores(
    X,
    Y,
    train,
    test,
    alphas,
    *,
    fit_intercept=True,
    sample_weight=None,
    scoring="r2",
    xp=None,
):
    """Score of every alpha for every target on one train/test split.

    The fold's ridge is fit on the training rows, centred on their own means,
    and scored on the test rows, as ``Ridge(alpha).fit(X[train], Y[train])``
    scored on ``X[test]`` would be. Averaging over folds is the caller's.

    Parameters
    ----------
    X : array of shape (n_samples, n_features)
    Y : array of shape (n_samples, n_targets)
    train, test : array-like of int
        Row indices, as yielded by a scikit-learn splitter.
    alphas : array-like of shape (n_alphas,)
    fit_intercept : bool, default=True
    sample_weight : array of shape (n_samples,), default=None
        Weights of the training rows in the fit and of the test rows in the
        score, as ``RidgeCV(cv=K)`` uses them.
    scoring : {"r2", "neg_mean_squared_error", "correlation"}, default="r2"

    Returns
    -------
    scores : array of shape (n_alphas, n_targets)
    """
    xp = xp or array_namespace(X, Y)
    train = xp.asarray(train, device=array_device(X))
    test = xp.asarray(test, device=array_device(X))
    train_weight = test_weight = None
    if sample_weight is not None:
        train_weight = xp.take(sample_weight, train, axis=0)
        test_weight = xp.take(sample_weight, test, axis=0)
    U, s, X_test_V = fold_basis(
        xp.take(X, train, axis=0),
        xp.take(X, test, axis=0),
        fit_intercept=fit_intercept,
        sample_weight=train_weight,
        xp=xp,
    )
    return fold_scores(
        U,
        s,
        X_test_V,
        xp.take(Y, train, axis=0),
        xp.take(Y, test, axis=0),
        alphas,
        fit_intercept=fit_intercept,
        sample_weight=train_weight,
        test_sample_weight=test_weight,
        scoring=scoring,
        xp=xp,
    )


def make_data(n_samples, n_features, n_targets, seed=0):
    """Targets whose signal-to-noise ratio varies, so their best alphas differ."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n_samples, n_features)) + rng.uniform(-2, 2, n_features)
    W = rng.standard_normal((n_features, n_targets))
    signal = np.logspace(-1.5, 0.5, n_targets) / np.sqrt(n_features)
    Y = X @ W * signal + rng.standard_normal((n_samples, n_targets)) + 3.0
    return X, Y


def make_weights(n_samples, seed=0):
    return np.random.default_rng(seed).uniform(0.2, 3.0, n_samples)


def decompose(X, Y, *, fit_intercept=True, sample_weight=None):
    X_centered, X_offset = center(X, sample_weight, fit_intercept=fit_intercept)
    Y_centered, Y_offset = center(Y, sample_weight, fit_intercept=fit_intercept)
    U, s, Vt = svd_decompose(X_centered)
    return U, s, Vt, project(U, Y_centered), Y_centered, X_offset, Y_offset


def fit_ridge(X, Y, alpha, *, fit_intercept=True, sample_weight=None):
    U, s, Vt, UtY, _, X_offset, Y_offset = decompose(
        X, Y, fit_intercept=fit_intercept, sample_weight=sample_weight
    )
    coef = ridge_coef(Vt, s, UtY, alpha)
    return coef, Y_offset - X_offset @ coef


def assert_matches_ridge(coef, intercept, ridge):
    """sklearn ravels a single target's coefficients; no intercept is 0.0."""
    assert_allclose(coef.T, ridge.coef_.reshape(coef.T.shape), rtol=1e-8, atol=1e-10)
    expected_intercept = np.broadcast_to(ridge.intercept_, intercept.shape)
    assert_allclose(intercept, expected_intercept, rtol=1e-8, atol=1e-10)


def loo(X, Y, alphas, *, fit_intercept=True, sample_weight=None, scoring=None):
    U, s, _, UtY, Y_centered, _, _ = decompose(
        X, Y, fit_intercept=fit_intercept, sample_weight=sample_weight
    )
    return loo_scores(
        U,
        s,
        UtY,
        Y_centered,
        alphas,
        fit_intercept=fit_intercept,
        sample_weight=sample_weight,
        scoring=scoring,
    )


def gcv(X, Y, alphas, *, fit_intercept=True):
    U, s, _, UtY, Y_centered, _, _ = decompose(X, Y, fit_intercept=fit_intercept)
    sq_norm = residual_sq_norm(U, UtY, Y_centered, fit_intercept=fit_intercept)
    return gcv_scores(s, UtY, sq_norm, X.shape[0], alphas, fit_intercept=fit_intercept)


@pytest.fixture(params=BACKENDS)
def backend(request):
    """(name, to_backend, to_numpy); jax runs in float64 for the test only."""
    if request.param == "numpy":
        yield "numpy", np.asarray, np.asarray
    elif request.param == "torch":
        torch = pytest.importorskip("torch")
        yield "torch", torch.from_numpy, lambda a: a.numpy()
    else:
        jax = pytest.importorskip("jax")
        previous = jax.config.read("jax_enable_x64")
        jax.config.update("jax_enable_x64", True)
        try:
            yield "jax", jax.numpy.asarray, np.asarray
        finally:
            jax.config.update("jax_enable_x64", previous)


@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("n_targets", [1, 50])
@pytest.mark.parametrize("shape", [(60, 20), (20, 60)])
def test_ridge_coef_matches_sklearn_svd(shape, n_targets, fit_intercept):
    X, Y = make_data(*shape, n_targets)
    coef, intercept = fit_ridge(X, Y, 3.0, fit_intercept=fit_intercept)
    ridge = Ridge(3.0, solver="svd", fit_intercept=fit_intercept).fit(X, Y)
    assert_matches_ridge(coef, intercept, ridge)


@pytest.mark.parametrize("loader", [load_diabetes, load_linnerud])
def test_ridge_coef_matches_sklearn_on_datasets(loader):
    X, y = loader(return_X_y=True)
    Y = y.reshape(X.shape[0], -1)
    coef, intercept = fit_ridge(X, Y, 0.5)
    ridge = Ridge(0.5, solver="svd").fit(X, Y)
    assert_matches_ridge(coef, intercept, ridge)


def test_ridge_coef_per_target_alpha_and_weights_match_sklearn():
    X, Y = make_data(40, 15, 6)
    alpha = np.logspace(-2, 3, 6)
    weights = make_weights(40)
    coef, intercept = fit_ridge(X, Y, alpha, sample_weight=weights)
    ridge = Ridge(alpha, solver="svd").fit(X, Y, sample_weight=weights)
    assert_matches_ridge(coef, intercept, ridge)


@pytest.mark.parametrize(
    "alpha",
    [[10.0, 0.1, 10.0, 1e3, 0.1, 3.0], [30.0, 10.0, 0.5, 2.0, 1e4, 7.0]],
    ids=["repeated", "distinct-unsorted"],
)
def test_ridge_coef_per_target_alphas_in_any_order(alpha):
    # The factors are computed once per distinct alpha and gathered per
    # target: each column must still get its own alpha, as in a fit of that
    # column alone (equal up to the product's rounding).
    X, Y = make_data(40, 15, 6)
    _, s, Vt, UtY, _, _, _ = decompose(X, Y)
    coef = ridge_coef(Vt, s, UtY, np.array(alpha))
    for j, alpha_j in enumerate(alpha):
        alone = ridge_coef(Vt, s, UtY[:, j : j + 1], alpha_j)[:, 0]
        assert_allclose(coef[:, j], alone, rtol=1e-13, atol=1e-15)
    coef, intercept = fit_ridge(X, Y, np.array(alpha))
    ridge = Ridge(np.array(alpha), solver="svd").fit(X, Y)
    assert_matches_ridge(coef, intercept, ridge)


@pytest.mark.parametrize("shape", [(50, 10), (12, 30)])
def test_rank_deficient_design_matches_sklearn_svd(shape):
    X, Y = make_data(*shape, 3)
    X = np.hstack([X, X[:, :4], 2 * X[:, :1]])
    X_centered, _ = center(X)
    _, s, _ = svd_decompose(X_centered)
    assert s.shape[0] == np.linalg.matrix_rank(X_centered)
    coef, intercept = fit_ridge(X, Y, 0.7)
    ridge = Ridge(0.7, solver="svd").fit(X, Y)
    assert_matches_ridge(coef, intercept, ridge)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("shape", [(60, 15), (25, 40)])
def test_loo_matches_ridgecv(shape, fit_intercept, weighted):
    X, Y = make_data(*shape, 20)
    weights = make_weights(shape[0]) if weighted else None
    scores = loo(X, Y, ALPHAS, fit_intercept=fit_intercept, sample_weight=weights)
    best_index, best_score = select_alpha(scores)

    ridge_cv = RidgeCV(
        ALPHAS,
        fit_intercept=fit_intercept,
        alpha_per_target=True,
        gcv_mode="svd",
        store_cv_results=True,
    ).fit(X, Y, sample_weight=weights)
    assert_array_equal(ALPHAS[best_index], ridge_cv.alpha_)
    assert_allclose(best_score, ridge_cv.best_score_, rtol=1e-8)
    assert_allclose(-scores, ridge_cv.cv_results_.mean(axis=0).T, rtol=1e-8)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("scoring", ["r2", "neg_mean_squared_error"])
@pytest.mark.parametrize("shape", [(60, 15), (25, 40)])
def test_loo_named_scoring_matches_ridgecv(shape, scoring, weighted):
    X, Y = make_data(*shape, 8)
    weights = make_weights(shape[0]) if weighted else None
    scores = loo(X, Y, ALPHAS, sample_weight=weights, scoring=scoring)
    best_index, best_score = select_alpha(scores)

    ridge_cv = RidgeCV(
        ALPHAS, alpha_per_target=True, gcv_mode="svd", scoring=scoring
    ).fit(X, Y, sample_weight=weights)
    assert_array_equal(ALPHAS[best_index], ridge_cv.alpha_)
    assert_allclose(best_score, ridge_cv.best_score_, rtol=1e-8)


@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("shape", [(14, 5), (9, 14)])
def test_loo_matches_explicit_refits(shape, fit_intercept):
    """Each sample left out in turn, with weights: the definition itself."""
    n_samples = shape[0]
    X, Y = make_data(*shape, 3)
    weights = make_weights(n_samples)
    weights[2] = 0.0
    alphas = [0.01, 1.0, 30.0]
    errors = np.empty((len(alphas), n_samples, Y.shape[1]))
    for k, alpha in enumerate(alphas):
        for i in range(n_samples):
            keep = np.arange(n_samples) != i
            ridge = Ridge(alpha, fit_intercept=fit_intercept).fit(
                X[keep], Y[keep], sample_weight=weights[keep]
            )
            errors[k, i] = Y[i] - ridge.predict(X[i : i + 1])[0]

    expected = -np.mean(weights[:, None] * errors**2, axis=1)
    scores = loo(X, Y, alphas, fit_intercept=fit_intercept, sample_weight=weights)
    assert_allclose(scores, expected, rtol=1e-7)

    expected_r2 = [
        r2_score(Y, Y - e, sample_weight=weights, multioutput="raw_values")
        for e in errors
    ]
    scores_r2 = loo(
        X,
        Y,
        alphas,
        fit_intercept=fit_intercept,
        sample_weight=weights,
        scoring="r2",
    )
    assert_allclose(scores_r2, expected_r2, rtol=1e-7)


def test_loo_correlation_matches_corrcoef_of_loo_predictions():
    X, Y = make_data(30, 8, 4)
    ridge_cv = RidgeCV(
        ALPHAS[:1], alpha_per_target=True, store_cv_results=True, scoring="r2"
    ).fit(X, Y)
    predictions = ridge_cv.cv_results_[:, :, 0]
    expected = [np.corrcoef(Y[:, j], predictions[:, j])[0, 1] for j in range(4)]
    scores = loo(X, Y, ALPHAS[:1], scoring="correlation")
    assert_allclose(scores[0], expected, rtol=1e-8)


def naive_gcv(X, Y, alpha, fit_intercept):
    n_samples, n_features = X.shape
    if fit_intercept:
        X = X - X.mean(axis=0)
    hat = X @ np.linalg.solve(X.T @ X + alpha * np.eye(n_features), X.T)
    if fit_intercept:
        hat = hat + np.full((n_samples, n_samples), 1.0 / n_samples)
    residual = Y - hat @ Y
    return -np.mean(residual**2, axis=0) / (1 - np.trace(hat) / n_samples) ** 2


@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("shape", [(30, 8), (12, 25)])
def test_gcv_matches_naive_hat_matrix(shape, fit_intercept):
    X, Y = make_data(*shape, 5)
    alphas = [0.1, 1.0, 10.0, 300.0]
    expected = [naive_gcv(X, Y, alpha, fit_intercept) for alpha in alphas]
    assert_allclose(gcv(X, Y, alphas, fit_intercept=fit_intercept), expected, rtol=1e-8)


@pytest.mark.parametrize("library", BACKENDS)
def test_residual_sq_norm_of_nearly_exact_fits_equals_lstsq(library):
    """Targets fitted to 1e-6 are formed explicitly: no cancellation."""
    pytest.importorskip(library)
    X, Y = make_data(80, 10, 6)
    rng = np.random.default_rng(1)
    exact = X @ rng.standard_normal((10, 3)) * 100 + 1e-6 * rng.standard_normal((80, 3))
    Y = np.hstack([Y, exact])
    Xc, Yc = X - X.mean(0), Y - Y.mean(0)
    expected = np.sum((Yc - Xc @ np.linalg.lstsq(Xc, Yc, rcond=None)[0]) ** 2, axis=0)
    U, _, _, UtY, Y_centered, _, _ = decompose(X, Y)
    if library == "numpy":
        got = residual_sq_norm(U, UtY, Y_centered)
    elif library == "torch":
        import torch

        got = residual_sq_norm(*(torch.from_numpy(a) for a in (U, UtY, Y_centered)))
        got = got.numpy()
    else:
        import jax

        previous = jax.config.read("jax_enable_x64")
        jax.config.update("jax_enable_x64", True)
        try:
            arrays = (jax.numpy.asarray(a) for a in (U, UtY, Y_centered))
            got = np.asarray(residual_sq_norm(*arrays))
        finally:
            jax.config.update("jax_enable_x64", previous)
    # Without the explicit residual the last three would be rounding noise
    # of ||Y||^2 (about 1e-10 here), not 1e-10 * their true value.
    assert expected[-3:].max() < 1e-9 * np.sum(Yc[:, -3:] ** 2, axis=0).min()
    np.testing.assert_allclose(got, expected, rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_residual_sq_norm_of_a_basis_given_by_coordinates_equals_lstsq(dtype):
    """U given as Q and its coordinates (U = Q coords, never formed): the same
    norms as lstsq on the candidate's design, nearly exact fits included
    (their residual formed explicitly) and in float32 (every residual)."""
    rng = np.random.default_rng(2)
    X, Y = make_data(80, 12, 5)
    # The candidate: X's first 8 columns rescaled, a subspace of span(X).
    Z = X[:, :8] * rng.uniform(0.5, 2.0, 8)
    exact = Z @ rng.standard_normal((8, 2)) * 100 + 1e-6 * rng.standard_normal((80, 2))
    Y = np.hstack([Y, exact])
    Zc, Yc = Z - Z.mean(0), Y - Y.mean(0)
    expected = np.sum((Yc - Zc @ np.linalg.lstsq(Zc, Yc, rcond=None)[0]) ** 2, axis=0)
    Q = np.linalg.qr(X - X.mean(0))[0]
    # Zc = Q (Q'Zc): U of Zc's SVD is Q times the left vectors of Q'Zc.
    coords = np.linalg.svd(Q.T @ Zc, full_matrices=False)[0]
    Q, coords, Y_centered = (a.astype(dtype) for a in (Q, coords, Yc))
    UtY = coords.T @ (Q.T @ Y_centered)
    got = residual_sq_norm(Q, UtY, Y_centered, coords=coords)
    rtol = 1e-6 if dtype == np.float64 else 1e-3
    np.testing.assert_allclose(got[:-2], expected[:-2], rtol=rtol)
    if dtype == np.float64:
        np.testing.assert_allclose(got[-2:], expected[-2:], rtol=1e-6)


def weighted_corrcoef(y, p, weights):
    """Pearson's r of every column pair, from numpy's weighted covariance."""
    covariances = [
        np.cov(y[:, j], p[:, j], aweights=weights) for j in range(y.shape[1])
    ]
    return np.array([c[0, 1] / np.sqrt(c[0, 0] * c[1, 1]) for c in covariances])


def hand_kfold(X, Y, alphas, scoring, sample_weight=None):
    """Loop of sklearn Ridge over KFold(5), scored per target.

    Test rows are scored with their weights, as ``RidgeCV(cv=K)`` scores them.
    """
    metrics = {
        "r2": lambda y, p, w: r2_score(y, p, sample_weight=w, multioutput="raw_values"),
        "neg_mean_squared_error": lambda y, p, w: (
            -mean_squared_error(y, p, sample_weight=w, multioutput="raw_values")
        ),
        "correlation": weighted_corrcoef,
    }
    folds = []
    for train, test in KFold(5).split(X):
        weights = test_weights = None
        if sample_weight is not None:
            weights, test_weights = sample_weight[train], sample_weight[test]
        folds.append(
            [
                metrics[scoring](
                    Y[test],
                    Ridge(alpha)
                    .fit(X[train], Y[train], sample_weight=weights)
                    .predict(X[test]),
                    test_weights,
                )
                for alpha in alphas
            ]
        )
    return np.mean(folds, axis=0)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("scoring", ["r2", "neg_mean_squared_error", "correlation"])
@pytest.mark.parametrize("shape", [(50, 12), (30, 45)])
def test_kfold_matches_hand_loop_of_ridge(shape, scoring, weighted):
    X, Y = make_data(*shape, 6)
    weights = make_weights(shape[0]) if weighted else None
    alphas = [0.01, 1.0, 100.0]
    scores = np.mean(
        [
            kfold_scores(
                X, Y, train, test, alphas, scoring=scoring, sample_weight=weights
            )
            for train, test in KFold(5).split(X)
        ],
        axis=0,
    )
    expected = hand_kfold(X, Y, alphas, scoring, sample_weight=weights)
    assert_allclose(scores, expected, rtol=1e-8)


def test_fold_scores_in_target_batches_equal_one_batch():
    X, Y = make_data(40, 10, 9)
    train, test = next(iter(KFold(4).split(X)))
    U, s, X_test_V = fold_basis(X[train], X[test])
    whole = fold_scores(U, s, X_test_V, Y[train], Y[test], ALPHAS)
    batches = [
        fold_scores(U, s, X_test_V, Y[train][:, j], Y[test][:, j], ALPHAS)
        for j in (slice(0, 4), slice(4, 9))
    ]
    assert_allclose(np.hstack(batches), whole, rtol=1e-12)


def test_score_per_target_matches_sklearn_metrics():
    rng = np.random.default_rng(0)
    y_true = rng.standard_normal((20, 5))
    y_pred = y_true + rng.standard_normal((20, 5))
    y_true[:, 3] = 2.0
    y_pred[:, 3] = 2.0  # constant target predicted exactly: 1.0
    y_true[:, 4] = -1.0  # constant target missed: 0.0

    assert_allclose(
        score_per_target(y_true, y_pred, "r2"),
        r2_score(y_true, y_pred, multioutput="raw_values"),
    )
    assert_allclose(
        score_per_target(y_true, y_pred, "neg_mean_squared_error"),
        -mean_squared_error(y_true, y_pred, multioutput="raw_values"),
    )
    # Constant columns: NaN, as np.corrcoef (which also warns) gives.
    with np.errstate(invalid="ignore", divide="ignore"):
        expected = [np.corrcoef(y_true[:, j], y_pred[:, j])[0, 1] for j in range(5)]
    assert np.isnan(expected[3:]).all()
    assert_allclose(score_per_target(y_true, y_pred, "correlation"), expected)


def test_weighted_score_per_target_matches_sklearn_metrics():
    rng = np.random.default_rng(1)
    y_true = rng.standard_normal((20, 3))
    y_pred = y_true + rng.standard_normal((20, 3))
    weights = make_weights(20)
    weights[:3] = 0.0

    def scores(scoring):
        return score_per_target(y_true, y_pred, scoring, sample_weight=weights)

    assert_allclose(
        scores("r2"),
        r2_score(y_true, y_pred, sample_weight=weights, multioutput="raw_values"),
    )
    assert_allclose(
        scores("neg_mean_squared_error"),
        -mean_squared_error(
            y_true, y_pred, sample_weight=weights, multioutput="raw_values"
        ),
    )
    covariances = [
        np.cov(y_true[:, j], y_pred[:, j], aweights=weights) for j in range(3)
    ]
    assert_allclose(
        scores("correlation"),
        [c[0, 1] / np.sqrt(c[0, 0] * c[1, 1]) for c in covariances],
    )


def test_select_alpha_prefers_first_of_ties_and_ignores_nan():
    scores = np.array([[1.0, np.nan, 0.0], [2.0, 5.0, 0.0], [2.0, 1.0, -1.0]])
    best_index, best_score = select_alpha(scores)
    assert_array_equal(best_index, [1, 1, 0])
    assert_array_equal(best_score, [2.0, 5.0, 0.0])


@pytest.mark.parametrize("scoring", ["accuracy", "mse"])
def test_unknown_scoring_is_rejected(scoring):
    X, Y = make_data(20, 5, 2)
    with pytest.raises(ValueError, match="scoring must be one of"):
        loo(X, Y, ALPHAS, scoring=scoring)
    with pytest.raises(ValueError, match=repr(scoring)):
        score_per_target(Y, Y, scoring)


@pytest.mark.parametrize("shape", [(40, 12), (20, 35)])
@pytest.mark.slow
def test_backends_agree_with_numpy(backend, shape):
    library, to_backend, to_numpy = backend
    if library == "jax" and shape[0] > shape[1]:
        pytest.skip("jax compiles every op per shape; the float32 tests run it tall")
    X, Y = make_data(*shape, 7)
    weights = make_weights(shape[0])
    train, test = next(iter(KFold(5).split(X)))

    def run(convert, back):
        Xb, Yb, wb = convert(X), convert(Y), convert(weights)
        loo_all = loo(Xb, Yb, ALPHAS, sample_weight=wb)
        best_alpha = convert(ALPHAS[back(select_alpha(loo_all)[0])])
        return {
            "loo": loo_all,
            "loo_correlation": loo(
                Xb, Yb, ALPHAS, sample_weight=wb, scoring="correlation"
            ),
            "gcv": gcv(Xb, Yb, ALPHAS),
            "kfold": kfold_scores(Xb, Yb, train, test, ALPHAS, sample_weight=wb),
            "coef": fit_ridge(Xb, Yb, best_alpha)[0],
        }

    expected = run(np.asarray, np.asarray)
    for kernel, result in run(to_backend, to_numpy).items():
        assert type(result) is type(to_backend(X)), kernel
        assert_allclose(to_numpy(result), expected[kernel], rtol=1e-6, err_msg=kernel)
        if kernel != "coef":
            assert_array_equal(
                to_numpy(select_alpha(result)[0]), select_alpha(expected[kernel])[0]
            )


@pytest.mark.slow
def test_float32_picks_the_alphas_of_float64(backend):
    _, to_backend, to_numpy = backend
    X, Y = make_data(200, 30, 40)
    scores64 = loo(X, Y, ALPHAS)
    X32, Y32 = (to_backend(A.astype(np.float32)) for A in (X, Y))
    scores32 = to_numpy(loo(X32, Y32, ALPHAS))
    assert scores32.dtype == np.float64
    assert_array_equal(select_alpha(scores32)[0], select_alpha(scores64)[0])
    assert_allclose(scores32, scores64, rtol=1e-3)


def test_float32_wide_design_picks_the_alphas_of_float64():
    """p > n: the basis spans the centred targets, whose residual is exactly 0."""
    X, Y = make_data(40, 120, 40)
    scores64 = loo(X, Y, ALPHAS)
    scores32 = loo(X.astype(np.float32), Y.astype(np.float32), ALPHAS)
    assert_array_equal(select_alpha(scores32)[0], select_alpha(scores64)[0])
    assert_allclose(scores32, scores64, rtol=1e-3)


@pytest.mark.slow
def test_jax_without_float64_keeps_float32():
    """What a device without float64 (MPS) does: the criterion stays float32."""
    jax = pytest.importorskip("jax")
    previous = jax.config.read("jax_enable_x64")
    jax.config.update("jax_enable_x64", False)
    try:
        X, Y = make_data(30, 6, 4)
        scores = loo(jax.numpy.asarray(X), jax.numpy.asarray(Y), ALPHAS)
    finally:
        jax.config.update("jax_enable_x64", previous)
    assert scores.dtype == np.float32
    assert_allclose(np.asarray(scores), loo(X, Y, ALPHAS), rtol=1e-4)


@pytest.mark.parametrize("library", ["numpy", "torch"])
def test_undefined_scores_follow_sklearn_metrics(library):
    """One row: R^2 and correlation are NaN; constant targets: r2_score's default."""
    convert = np.asarray if library == "numpy" else pytest.importorskip("torch").tensor
    rng = np.random.default_rng(2)
    y_true = rng.standard_normal((6, 4))
    y_pred = y_true + rng.standard_normal((6, 4))
    y_true[:, 2] = 2.0
    y_pred[:, 2] = 2.0  # constant, predicted exactly
    y_true[:, 3] = -1.0  # constant, missed

    def ours(rows, scoring):
        got = score_per_target(convert(y_true[rows]), convert(y_pred[rows]), scoring)
        return np.asarray(got)

    with pytest.warns(UndefinedMetricWarning):
        expected = r2_score(y_true[:1], y_pred[:1], multioutput="raw_values")
    assert np.isnan(expected).all()
    assert_array_equal(ours(slice(0, 1), "r2"), expected)
    assert np.isnan(ours(slice(0, 1), "correlation")).all()
    assert_allclose(
        ours(slice(0, 1), "neg_mean_squared_error"),
        -mean_squared_error(y_true[:1], y_pred[:1], multioutput="raw_values"),
    )
    expected = r2_score(y_true, y_pred, multioutput="raw_values")
    assert_array_equal(expected[2:], [1.0, 0.0])
    assert_allclose(ours(slice(None), "r2"), expected)
    with np.errstate(invalid="ignore", divide="ignore"):
        expected = [np.corrcoef(y_true[:, j], y_pred[:, j])[0, 1] for j in range(4)]
    assert_allclose(ours(slice(None), "correlation"), expected)


@pytest.mark.parametrize("scoring", ["r2", "correlation", "neg_mean_squared_error"])
def test_one_row_test_fold_scores_nan_not_a_number(scoring):
    """A single held-out row has no R^2 or correlation; its MSE is defined."""
    X, Y = make_data(20, 5, 3)
    train, test = np.arange(19), np.arange(19, 20)
    scores = kfold_scores(X, Y, train, test, ALPHAS, scoring=scoring)
    if scoring == "neg_mean_squared_error":
        expected = [
            -mean_squared_error(
                Y[test],
                Ridge(alpha).fit(X[train], Y[train]).predict(X[test]),
                multioutput="raw_values",
            )
            for alpha in ALPHAS
        ]
        assert_allclose(scores, expected, rtol=1e-8)
    else:
        assert np.isnan(scores).all()


def test_select_alpha_of_all_nan_keeps_first_alpha_and_nan_score():
    """As GridSearchCV ranks NaN last: all NaN leaves the first, score NaN."""
    scores = np.array([[np.nan, np.nan], [np.nan, 3.0], [np.nan, 1.0]])
    best_index, best_score = select_alpha(scores)
    assert_array_equal(best_index, [0, 1])
    assert_array_equal(best_score, [np.nan, 3.0])


def naive_weighted_gcv(X, Y, alpha, weights):
    """Weighted GCV from the hat matrix of the weighted ridge, formed in full.

    Weights normalised to sum to n_eff, the number of non-zero weights;
    GCV = (sum w_i r_i^2 / n_eff) / (1 - tr(H) / n_eff)^2, with H the hat
    matrix of the weight-scaled, weighted-centred problem plus the intercept.
    """
    n_eff = np.count_nonzero(weights)
    weights = weights * n_eff / weights.sum()
    root = np.sqrt(weights)[:, None]
    Xc = root * (X - np.average(X, axis=0, weights=weights))
    Yc = root * (Y - np.average(Y, axis=0, weights=weights))
    hat = Xc @ np.linalg.solve(Xc.T @ Xc + alpha * np.eye(X.shape[1]), Xc.T)
    residual = Yc - hat @ Yc
    trace = np.trace(hat) + 1.0
    return -(np.sum(residual**2, axis=0) / n_eff) / (1 - trace / n_eff) ** 2


def test_weighted_gcv_matches_naive_hat_matrix():
    X, Y = make_data(30, 8, 4)
    weights = make_weights(30)
    weights[[3, 7]] = 0.0
    n_eff = 28
    normalised = weights * n_eff / weights.sum()
    U, s, _, UtY, Y_centered, _, _ = decompose(X, Y, sample_weight=normalised)
    sq_norm = residual_sq_norm(U, UtY, Y_centered)
    alphas = [0.1, 1.0, 10.0, 300.0]
    expected = [naive_weighted_gcv(X, Y, alpha, weights) for alpha in alphas]
    assert_allclose(gcv_scores(s, UtY, sq_norm, n_eff, alphas), expected, rtol=1e-8)


@pytest.mark.parametrize("scale", [1e155, 1e-160])
def test_extreme_singular_values_neither_overflow_nor_underflow(scale):
    """s^2 of an X near 1e155 overflows: the filters must not square s."""
    X, Y = make_data(40, 6, 3)
    X_centered = X - X.mean(axis=0)
    Y_centered = Y - Y.mean(axis=0)
    # Reference in the unscaled problem: (c X)' (c X) + alpha = c^2 (X'X + alpha / c^2).
    alpha = 2.0
    if scale > 1:
        gram = X_centered.T @ X_centered + (alpha / scale) / scale * np.eye(6)
        expected = np.linalg.solve(gram, X_centered.T @ Y_centered) / scale
    else:
        gram = scale**2 * (X_centered.T @ X_centered) + alpha * np.eye(6)
        expected = np.linalg.solve(gram, scale * X_centered.T @ Y_centered)
    # Squares of t that underflow are exact limits; overflow would be a bug.
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        U, s, Vt = svd_decompose(X_centered * scale)
        coef = ridge_coef(Vt, s, project(U, Y_centered), alpha)
        scores = gcv_scores(s, project(U, Y_centered), np.zeros(3), 40, [alpha])
    assert_allclose(coef, expected, rtol=1e-10)
    assert np.isfinite(scores).all()


def test_alpha_zero_is_least_squares_without_warnings():
    """alpha = 0 (LinearRegression in PermutationScorer): the pseudo-inverse."""
    X, Y = make_data(30, 6, 3)
    with np.errstate(all="raise"):
        coef, intercept = fit_ridge(X, Y, 0.0)
        scores = loo(X, Y, [0.0])
    ols = LinearRegression().fit(X, Y)
    assert_matches_ridge(coef, intercept, ols)
    assert np.isfinite(scores).all()


@pytest.mark.parametrize(
    "min_flops, gather_bytes", [(np.inf, None), (0, None), (0, 8 * 40 * 3)]
)
def test_weighted_products_equal_dense_weighted_products(
    backend, min_flops, gather_bytes, monkeypatch
):
    """X' W X and X' W Y of each replicate, over its drawn rows or all rows.

    Bootstrap counts leave rows out (weight 0): the CPU kernels skip them for
    replicates of enough work (every replicate with a threshold of 0 here),
    gathering Y's drawn rows a block of columns at a time (a tiny block in
    the last case), and must equal the products over every row.
    """
    from skbatch._kernels import linalg as _linalg

    library, to_backend, to_numpy = backend
    monkeypatch.setattr(_linalg.weighted, "GATHER_MIN_FLOPS", min_flops)
    monkeypatch.setattr(_linalg.weighted, "GATHER_MIN_COLUMNS", 0)
    if gather_bytes is not None:
        monkeypatch.setattr(_linalg.weighted, "MAX_GATHER_BYTES", gather_bytes)
    rng = np.random.default_rng(3)
    X = np.asfortranarray(rng.standard_normal((40, 6)))
    Y = rng.standard_normal((40, 11))
    counts = rng.multinomial(40, np.full(40, 1 / 40), size=5).astype(np.float64)
    counts[1] = 0.0
    counts[1, 7] = 40.0  # one row drawn 40 times
    xp = array_namespace(to_backend(X))
    gram, rhs = _linalg.weighted._weighted_products(
        to_backend(X), to_backend(Y), to_backend(counts), xp
    )
    assert_allclose(
        to_numpy(gram), np.einsum("ni,bn,nj->bij", X, counts, X), rtol=1e-12
    )
    assert_allclose(to_numpy(rhs), np.einsum("ni,bn,nt->bit", X, counts, Y), rtol=1e-12)


def test_products_reuse_a_threads_scratch_buffers_and_stay_exact(monkeypatch):
    """The drawn-rows products write into the thread's buffers of the last call.

    A second batch with other counts reuses them and still equals the
    products over every row (nothing of the first batch is left); another
    shape replaces them; another thread has its own; a pickled scratch is
    empty.
    """
    import pickle

    from skbatch._kernels import linalg as _linalg

    monkeypatch.setattr(_linalg.weighted, "GATHER_MIN_FLOPS", 0)
    monkeypatch.setattr(_linalg.weighted, "GATHER_MIN_COLUMNS", 0)
    rng = np.random.default_rng(4)
    X = rng.standard_normal((40, 6))
    Y = rng.standard_normal((40, 11))
    scratch = _linalg.Scratch()

    def products(n_replicates):
        counts = rng.multinomial(40, np.full(40, 1 / 40), size=n_replicates)
        counts = counts.astype(np.float64)
        xp = array_namespace(X)
        gram, rhs = _linalg.weighted._weighted_products(X, Y, counts, xp, scratch)
        assert_allclose(gram, np.einsum("ni,bn,nj->bij", X, counts, X), rtol=1e-12)
        assert_allclose(rhs, np.einsum("ni,bn,nt->bit", X, counts, Y), rtol=1e-12)
        return gram, rhs

    first_gram, first_rhs = products(5)
    second_gram, second_rhs = products(5)
    assert second_rhs is first_rhs and second_gram is first_gram
    smaller_gram, smaller_rhs = products(3)
    assert smaller_rhs.shape == (3, 6, 11) and smaller_rhs is not first_rhs

    with ThreadPoolExecutor(1) as pool:
        _, other_rhs = pool.submit(products, 3).result()
    assert other_rhs is not smaller_rhs
    assert vars(pickle.loads(pickle.dumps(scratch))._local) == {}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_result_pool_hands_out_only_what_it_made_and_got_back(dtype):
    """An array goes out again only once given back; another shape drops it.

    Arrays the pool did not make are never taken in, and a pickled pool is
    empty.
    """
    import pickle

    from skbatch._kernels import linalg as _linalg

    pool = _linalg.ResultPool()
    like = np.zeros((2, 2), dtype)
    xp = array_namespace(like)
    first = pool.empty((3, 4), like, xp)
    second = pool.empty((3, 4), like, xp)
    assert first is not second
    assert first.dtype == dtype and first.shape == (3, 4)
    pool.give(first, np.empty((3, 4), dtype))
    assert pool.empty((3, 4), like, xp) is first
    # The foreign array was not taken in: a fresh one comes out.
    third = pool.empty((3, 4), like, xp)
    assert third is not first and third is not second
    pool.give(second)
    smaller = pool.empty((2, 4), like, xp)
    assert smaller.shape == (2, 4)
    pool.give(smaller)
    assert pool.empty((2, 4), like, xp) is smaller
    pool.give(smaller)
    assert pool.empty((3, 4), like, xp) is not second
    pool.give(first)
    assert pickle.loads(pickle.dumps(pool)).empty((3, 4), like, xp) is not first


def test_result_pool_leaves_immutable_arrays_to_their_library():
    jnp = pytest.importorskip("jax.numpy")
    from skbatch._kernels import linalg as _linalg

    like = jnp.zeros((2, 2))
    assert _linalg.ResultPool().empty((3, 4), like, array_namespace(like)) is None


# --- columns on very different scales, float32 accuracy ----------------------


def equilibrated_ridge(X, Y, alpha):
    """Ridge by Cholesky of the normal equations with columns scaled to norm 1.

    ``(D^-1 X'X D^-1 + alpha D^-2) z = D^-1 X'Y``, ``coef = D^-1 z``: the same
    solution, from a system whose condition does not grow with the spread of
    the column norms (scikit-learn's Cholesky solver is as accurate).
    """
    X = np.asarray(X, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64)
    X_centered, Y_centered = X - X.mean(axis=0), Y - Y.mean(axis=0)
    norms = np.linalg.norm(X_centered, axis=0)
    scaled = X_centered / norms
    gram = scaled.T @ scaled + np.diag(alpha / norms**2)
    coef = np.linalg.solve(gram, scaled.T @ Y_centered) / norms[:, None]
    return coef, Y.mean(axis=0) - X.mean(axis=0) @ coef


def graded_data(ratio, n=60, p=5, column=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p))
    Y = X @ rng.standard_normal((p, 3)) + 0.1 * rng.standard_normal((n, 3))
    X[:, column] *= ratio
    return X, Y


@pytest.mark.parametrize(
    ("dtype", "ratio"),
    [(np.float64, 1e6), (np.float64, 1e10), (np.float64, 1e12), (np.float32, 1e6)],
)
@pytest.mark.parametrize("shape", [(60, 5), (12, 8), (8, 12)])
def test_one_column_on_a_far_larger_scale_is_solved_exactly(dtype, ratio, shape):
    """A feature in nanoseconds beside standardised ones: the small features'
    directions keep their digits (the SVD resolved them only down to eps
    times the largest singular value, 3e-7 off at 1e10 in float64)."""
    X, Y = graded_data(ratio, *shape)
    coef, intercept = equilibrated_ridge(X, Y, 1.0)
    X_centered, X_offset = center(X.astype(dtype))
    Y_centered, Y_offset = center(Y.astype(dtype))
    U, s, Vt = svd_decompose(X_centered)
    fitted = ridge_coef(Vt, s, project(U, Y_centered), 1.0)
    predictions = X @ fitted.astype(np.float64) + (Y_offset - X_offset @ fitted)
    expected = X @ coef + intercept
    rtol = 1e-10 if dtype == np.float64 else 1e-4
    assert_allclose(predictions, expected, atol=rtol * np.ptp(expected))


def test_columns_too_far_apart_to_resolve_are_refused_naming_the_column():
    X, Y = graded_data(1e16)
    X_centered, _ = center(X)
    with pytest.raises(
        ValueError, match=r"feature 2 .* times that of .*StandardScaler"
    ):
        svd_decompose(X_centered)


@pytest.mark.parametrize("seed", [42, 0, 1])
@pytest.mark.parametrize("shape", [(100, 50), (200, 50), (50, 100)])
def test_float32_is_as_accurate_as_sklearn_float32(seed, shape):
    """sgesdd lost digits that numpy's SVD (float64 inside) kept: 7.1e-5
    against sklearn's 9.5e-6 on the first case."""
    from sklearn.datasets import make_regression

    X, y = make_regression(*shape, noise=0, bias=10, random_state=seed)
    X, y = X.astype(np.float32), y.astype(np.float32)
    alpha = 1e-16
    X_centered = X - X.mean(axis=0)
    y_centered = y - y.mean()
    if shape[0] > shape[1]:
        exact = equilibrated_ridge(X, y[:, None], alpha)[0][:, 0]
        reference = Ridge(alpha=alpha, solver="svd").fit(X, y).coef_
    else:
        # Below full column rank, the minimum-norm solution; sklearn's SVD
        # solver keeps singular values of rounding noise there, numpy's
        # float32 least squares with the matrix_rank cutoff is the reference.
        exact = np.linalg.pinv(X_centered.astype(np.float64)) @ y_centered
        rcond = max(shape) * np.finfo(np.float32).eps
        reference = np.linalg.lstsq(X_centered, y_centered, rcond=rcond)[0]
    X_centered, _ = center(X)
    y_centered, _ = center(y[:, None])
    U, s, Vt = svd_decompose(X_centered)
    coef = ridge_coef(Vt, s, project(U, y_centered), alpha)
    assert coef.dtype == np.float32
    error = np.max(np.abs(coef[:, 0] - exact))
    assert error <= 2 * np.max(np.abs(reference - exact))
