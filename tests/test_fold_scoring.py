"""Held-out scores of degenerate folds: constant targets, zero weights.

Every path scores with one function per metric (skbatch/_kernels/linalg/scores.py), so a
target constant on a test fold scores there as ``r2_score`` scores it (1.0
if predicted exactly, else 0.0) whether the score chooses an alpha, a band
weighting, or is reported per target or per band.
"""

import copy
import warnings

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.linear_model import Ridge
from sklearn.metrics import r2_score
from sklearn.model_selection import GridSearchCV, KFold, LeaveOneGroupOut

from skbatch import BandedRidge, BatchedRidge, DegenerateDataWarning
from skbatch._kernels.linalg import holdout_scores, score_per_target

ALPHAS = np.logspace(-2, 4, 7)
# Runs of unequal length; KFold(4) of their 160 rows holds out rows 0-39
# first, all inside run 0.
RUN_LENGTHS = (50, 38, 30, 42)
# Targets that are 0 throughout run 0: dead channels in one run.
DEAD = [0, 1, 2]
BANDS = np.array([0, 0, 0, 1, 1, 1])
CANDIDATES = np.array([[0.5, 0.5], [0.9, 0.1], [0.2, 0.8]])


def ar1(rng, n, size, phi=0.7):
    """An AR(1) series per column."""
    out = np.empty((n, size))
    out[0] = rng.standard_normal(size)
    for i in range(1, n):
        out[i] = phi * out[i - 1] + np.sqrt(1 - phi**2) * rng.standard_normal(size)
    return out


def runs_with_dead_targets(n_features=6, n_targets=8, seed=0):
    """AR(1) runs of unequal length; targets ``DEAD`` are 0 in run 0."""
    rng = np.random.default_rng(seed)
    X = np.vstack([ar1(rng, n, n_features) for n in RUN_LENGTHS])
    W = rng.standard_normal((n_features, n_targets)) * rng.uniform(0.05, 1, n_targets)
    noise = np.vstack([ar1(rng, n, n_targets, phi=0.5) for n in RUN_LENGTHS])
    Y = X @ W + noise + rng.standard_normal(n_targets)
    groups = np.repeat(np.arange(len(RUN_LENGTHS)), RUN_LENGTHS)
    Y[np.ix_(groups == 0, DEAD)] = 0.0
    return X, Y, groups


def grid_search_alphas(X, Y, splits):
    """GridSearchCV(Ridge, scoring="r2") on the same folds, target by target."""
    return np.array(
        [
            GridSearchCV(Ridge(), {"alpha": ALPHAS}, cv=splits, scoring="r2")
            .fit(X, Y[:, j])
            .best_params_["alpha"]
            for j in range(Y.shape[1])
        ]
    )


@pytest.mark.parametrize("splitter", ["kfold", "leave_one_group_out"])
def test_constant_test_fold_chooses_the_alpha_of_grid_search(splitter):
    X, Y, groups = runs_with_dead_targets()
    cv = KFold(4) if splitter == "kfold" else LeaveOneGroupOut()
    splits = list(cv.split(X, Y, groups))
    assert np.ptp(Y[splits[0][1]][:, DEAD], axis=0).max() == 0.0
    model = BatchedRidge(alphas=ALPHAS, cv=cv, alpha_per_target=True)
    model.fit(X, Y, groups=None if splitter == "kfold" else groups)
    assert_array_equal(model.alpha_, grid_search_alphas(X, Y, splits))
    # The dead targets' fold scores 0 at every alpha, not -1e31.
    assert np.all(model.best_score_ > -1.0)


def naive_banded_choice(X, Y, splits):
    """Per target, the (candidate, alpha) of best mean fold R^2 of sklearn
    Ridge on X's bands rescaled by sqrt(weight); first of ties."""
    scores = np.zeros((len(CANDIDATES), len(ALPHAS), Y.shape[1]))
    for c, gamma in enumerate(CANDIDATES):
        Z = X * np.sqrt(gamma[BANDS])
        for a, alpha in enumerate(ALPHAS):
            for train, test in splits:
                fit = Ridge(alpha=alpha).fit(Z[train], Y[train])
                scores[c, a] += r2_score(
                    Y[test], fit.predict(Z[test]), multioutput="raw_values"
                )
    best = np.argmax(scores.reshape(-1, Y.shape[1]), axis=0)
    return np.unravel_index(best, scores.shape[:2])


@pytest.mark.parametrize("splitter", ["kfold", "leave_one_group_out"])
def test_banded_constant_test_fold_chooses_as_a_naive_loop(splitter):
    X, Y, groups = runs_with_dead_targets(seed=1)
    cv = KFold(4) if splitter == "kfold" else LeaveOneGroupOut()
    splits = list(cv.split(X, Y, groups))
    model = BandedRidge(BANDS, alphas=ALPHAS, band_weights=CANDIDATES, cv=cv)
    model.fit(X, Y, groups=None if splitter == "kfold" else groups)
    candidate, alpha = naive_banded_choice(X, Y, splits)
    assert_array_equal(model.alpha_, ALPHAS[alpha])
    assert_allclose(model.band_weights_, CANDIDATES[candidate], rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_holdout_scores_of_a_constant_fold_follow_r2_score(dtype):
    """Test targets shifted by a training mean: constant, far from 0."""
    rng = np.random.default_rng(3)
    s = np.array([3.0, 1.0])
    X_test_V = rng.standard_normal((25, 2))
    UtY = rng.standard_normal((2, 4))
    weight = rng.uniform(0.5, 2.0, 25)
    y_true = rng.standard_normal((25, 4))
    y_true[:, 1] = 0.1 - 0.37  # missed at every alpha: 0.0
    y_true[:, 2] = 0.0  # predicted exactly at every alpha: UtY is 0
    UtY[:, 2] = 0.0
    args = [a.astype(dtype) for a in (s, X_test_V, UtY, y_true)]
    for sample_weight in (None, weight.astype(dtype)):
        scores = holdout_scores(*args, ALPHAS, sample_weight=sample_weight)
        assert_array_equal(scores[:, 1], 0.0)
        assert_array_equal(scores[:, 2], 1.0)
        filtered = s / (s**2 + ALPHAS[:, None])
        for k in range(len(ALPHAS)):
            predictions = (X_test_V * filtered[k]) @ UtY
            expected = r2_score(
                y_true,
                predictions,
                sample_weight=sample_weight,
                multioutput="raw_values",
            )
            # R^2 carries rounding relative to 1, not to itself.
            atol = 1e-5 if dtype == np.float32 else 1e-12
            assert_allclose(scores[k, [0, 3]], expected[[0, 3]], atol=atol)


@pytest.mark.parametrize("level", [0.0, 0.1])
def test_weighted_score_per_band_of_a_constant_target_sums_to_r2(level):
    """Constant on the rows of positive weight: finite shares summing to R^2.

    R^2 does not change when target and prediction shift together, so the
    target moved to exactly 0 on those rows gives r2_score's reference
    without its weighted mean's rounding.
    """
    X, Y, groups = runs_with_dead_targets(seed=2)
    model = BandedRidge(
        BANDS, alphas=ALPHAS, band_weights=CANDIDATES, cv=LeaveOneGroupOut()
    ).fit(X, Y, groups=groups)
    rng = np.random.default_rng(4)
    weight = rng.uniform(0.2, 3.0, len(X))
    weight[0] = 0.0
    Y[:, 0] = level
    Y[0, 0] = 7.0  # its one row of weight 0 differs
    shares = model.score_per_band(X, Y, sample_weight=weight)
    assert np.all(np.isfinite(shares))
    predictions = model.predict(X)
    expected = r2_score(
        Y - level, predictions - level, sample_weight=weight, multioutput="raw_values"
    )
    assert expected[0] == 0.0
    assert_allclose(shares.sum(axis=0), expected, rtol=1e-9, atol=1e-12)


def test_score_per_target_of_a_shifted_constant_follows_r2_score():
    rng = np.random.default_rng(5)
    y_true = rng.standard_normal((30, 3))
    y_pred = y_true + rng.standard_normal((30, 3))
    weight = rng.uniform(0.1, 2.0, 30)
    weight[0] = 0.0
    y_true[:, 1] = 0.0
    y_true[0, 1] = 5.0  # weight 0: the target is constant where it counts
    y_pred[:, 2] = y_true[:, 2] = 0.3  # predicted exactly
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = score_per_target(y_true, y_pred, "r2", sample_weight=weight)
    expected = r2_score(y_true, y_pred, sample_weight=weight, multioutput="raw_values")
    assert_array_equal(got[1:], [0.0, 1.0])
    assert_allclose(got, expected, rtol=1e-12)


def fitted(X, Y):
    return BatchedRidge(alphas=ALPHAS, cv=3).fit(X, Y)


def test_correlation_of_constant_targets_warns_once_naming_them():
    X, Y, _ = runs_with_dead_targets(seed=6)
    model = fitted(X, Y)
    Y[:, [2, 5]] = 1.5
    with pytest.warns(DegenerateDataWarning) as caught:
        scores = model.score_per_target(X, Y, scoring="correlation")
    degenerate = [w for w in caught if w.category is DegenerateDataWarning]
    assert len(degenerate) == 1
    assert "2 of 8 targets" in str(degenerate[0].message)
    assert (
        np.isnan(scores[[2, 5]]).all() and np.isfinite(np.delete(scores, [2, 5])).all()
    )


@pytest.mark.parametrize("scoring", ["r2", "correlation"])
def test_score_of_one_row_warns_once_naming_the_targets(scoring):
    X, Y, _ = runs_with_dead_targets(seed=7)
    model = fitted(X, Y)
    with pytest.warns(DegenerateDataWarning) as caught:
        scores = model.score_per_target(X[:1], Y[:1], scoring=scoring)
    degenerate = [w for w in caught if w.category is DegenerateDataWarning]
    assert len(degenerate) == 1
    assert "8 of 8 targets" in str(degenerate[0].message)
    assert np.isnan(scores).all()


def test_defined_scores_do_not_warn():
    X, Y, _ = runs_with_dead_targets(seed=8)
    model = fitted(X, Y)
    Y[:, 0] = 2.0  # R^2 of a constant target is defined: 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.score_per_target(X, Y)
        model.score_per_target(X, Y, scoring="neg_mean_squared_error")


def fitted_attributes(model):
    return {k: copy.deepcopy(v) for k, v in vars(model).items() if k.endswith("_")}


@pytest.mark.parametrize(
    "make",
    [
        lambda: BatchedRidge(alphas=ALPHAS, cv=KFold(4)),
        lambda: BandedRidge(BANDS, alphas=ALPHAS, band_weights=CANDIDATES, cv=KFold(4)),
    ],
    ids=["BatchedRidge", "BandedRidge"],
)
def test_zero_weight_test_fold_is_refused_and_the_fit_kept(make):
    X, Y, _ = runs_with_dead_targets(seed=9)
    model = make().fit(X, Y, sample_weight=np.ones(len(X)))
    before = fitted_attributes(model)
    weight = np.ones(len(X))
    weight[80:120] = 0.0  # the test rows of fold 2
    with pytest.raises(ValueError, match="sample_weight is 0 on all 40 test rows"):
        model.fit(X, Y, sample_weight=weight)
    with pytest.raises(ValueError, match="cv fold 2"):
        make().fit(X, Y, sample_weight=weight)
    after = fitted_attributes(model)
    assert after.keys() == before.keys()
    for name, value in before.items():
        if isinstance(value, np.ndarray):
            assert_array_equal(after[name], value)
        elif isinstance(value, float):
            assert after[name] == value


def naive_fold_correlations(X, Y, splits):
    """Mean over the folds of Pearson's r of sklearn Ridge's held-out
    predictions, per alpha and target: NaN where a fold's target is constant."""
    scores = np.zeros((len(ALPHAS), Y.shape[1]))
    for a, alpha in enumerate(ALPHAS):
        for train, test in splits:
            predicted = Ridge(alpha=alpha).fit(X[train], Y[train]).predict(X[test])
            with np.errstate(invalid="ignore", divide="ignore"):
                scores[a] += [
                    np.corrcoef(Y[test][:, j], predicted[:, j])[0, 1]
                    if np.ptp(Y[test][:, j]) > 0
                    else np.nan
                    for j in range(Y.shape[1])
                ]
    return scores / len(splits)


def degenerate_warnings(caught):
    return [w for w in caught if issubclass(w.category, DegenerateDataWarning)]


@pytest.mark.parametrize(
    "make, scale",
    [
        (
            lambda: BatchedRidge(alphas=ALPHAS, cv=KFold(4), scoring="correlation"),
            np.ones(len(BANDS)),
        ),
        (
            lambda: BandedRidge(
                BANDS,
                alphas=ALPHAS,
                band_weights=CANDIDATES[:1],
                cv=KFold(4),
                scoring="correlation",
            ),
            # A band weight scales its columns by its square root.
            np.sqrt(CANDIDATES[0][BANDS]),
        ),
    ],
    ids=["BatchedRidge", "BandedRidge"],
)
def test_a_correlation_undefined_on_a_fold_warns_once_naming_the_targets(make, scale):
    # Targets constant on one test fold have no mean correlation over the
    # folds: NaN at every alpha, the first alpha kept, as GridSearchCV; the
    # NaN comes with the DegenerateDataWarning of every quiet NaN.
    X, Y, _ = runs_with_dead_targets(seed=9)
    splits = list(KFold(4).split(X))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = make().fit(X, Y)
    (warning,) = degenerate_warnings(caught)
    message = str(warning.message)
    assert "3 of 8 targets" in message and "fold of cv" in message, message
    assert warning.filename == __file__
    naive = naive_fold_correlations(X * scale, Y, splits)
    assert np.isnan(naive[:, DEAD]).all()
    assert_array_equal(np.isnan(model.best_score_), np.isin(np.arange(8), DEAD))
    assert_array_equal(model.alpha_[DEAD], ALPHAS[0])
    alive = np.setdiff1d(np.arange(8), DEAD)
    assert_allclose(model.best_score_[alive], naive[:, alive].max(axis=0), rtol=1e-8)


def test_the_shared_alpha_leaves_undefined_targets_out():
    # best_score_ is then the mean over the targets scored, never NaN: no
    # warning; BandedRidge(local_alpha=False) keeps a best_score_ per target,
    # NaN for those, and warns, saying they were left out.
    X, Y, _ = runs_with_dead_targets(seed=9)
    splits = list(KFold(4).split(X))
    model = BatchedRidge(
        alphas=ALPHAS, cv=KFold(4), scoring="correlation", alpha_per_target=False
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        model.fit(X, Y)
    alive = np.setdiff1d(np.arange(8), DEAD)
    mean = naive_fold_correlations(X, Y, splits)[:, alive].mean(axis=1)
    assert model.alpha_ == ALPHAS[np.argmax(mean)]
    assert_allclose(model.best_score_, mean.max(), rtol=1e-8)
    banded = BandedRidge(
        BANDS,
        alphas=ALPHAS,
        band_weights=CANDIDATES,
        cv=KFold(4),
        scoring="correlation",
        local_alpha=False,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        banded.fit(X, Y)
    (warning,) = degenerate_warnings(caught)
    assert "3 of 8 targets" in str(warning.message)
    assert "left out of the mean" in str(warning.message)
    assert_array_equal(np.isnan(banded.best_score_), np.isin(np.arange(8), DEAD))


def test_scores_defined_on_every_fold_do_not_warn():
    X, Y, _ = runs_with_dead_targets(seed=9)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DegenerateDataWarning)
        BatchedRidge(alphas=ALPHAS, cv=KFold(4)).fit(X, Y)
        BatchedRidge(alphas=ALPHAS, cv=KFold(4), scoring="correlation").fit(
            X, np.delete(Y, DEAD, axis=1)
        )
