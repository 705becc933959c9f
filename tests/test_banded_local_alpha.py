"""BandedRidge(local_alpha=False): one (band weights, alpha) pair for all targets,
against a naive loop over candidates x alphas with GridSearchCV's mean score,
and against himalaya's BandedRidgeCV(local_alpha=False) where the two agree."""

import numpy as np
import pytest
from sklearn.linear_model import Ridge
from sklearn.metrics import r2_score
from sklearn.model_selection import GroupKFold, LeaveOneGroupOut

from skbatch import BandedRidge

# Runs of unequal length; AR(1) series restart at each run.
RUN_LENGTHS = (21, 30, 17, 26, 24)
AR_COEF = 0.7
BANDS = np.array([0, 0, 0, 1, 1, 1, 1, 1])
CANDIDATES = np.array([[0.5, 0.5], [0.9, 0.1], [0.2, 0.8], [1.0, 0.0]])
ALPHAS = np.array([0.3, 3.0, 30.0, 300.0])


def ar1_runs(rng, n_columns):
    blocks = []
    for length in RUN_LENGTHS:
        block = np.empty((length, n_columns))
        block[0] = rng.standard_normal(n_columns)
        for i in range(1, length):
            block[i] = AR_COEF * block[i - 1] + rng.standard_normal(n_columns)
        blocks.append(block)
    return np.concatenate(blocks)


def make_data(seed=0, n_targets=6):
    rng = np.random.default_rng(seed)
    X = ar1_runs(rng, BANDS.size)
    W = rng.standard_normal((BANDS.size, n_targets))
    W[BANDS == 1] *= 0.3
    Y = X @ W + 2.0 * ar1_runs(rng, n_targets) + 4.0
    runs = np.repeat(np.arange(len(RUN_LENGTHS)), RUN_LENGTHS)
    return X, Y, runs


def naive_search(X, Y, splits):
    """Every target's mean fold R^2 at every (candidate, alpha), by sklearn."""
    scores = np.empty((Y.shape[1], len(CANDIDATES), ALPHAS.size))
    for c, gamma in enumerate(CANDIDATES):
        Z = X * np.sqrt(gamma[BANDS])
        for a, alpha in enumerate(ALPHAS):
            folds = [
                r2_score(
                    Y[test],
                    Ridge(alpha=alpha).fit(Z[train], Y[train]).predict(Z[test]),
                    multioutput="raw_values",
                )
                for train, test in splits
            ]
            scores[:, c, a] = np.mean(folds, axis=0)
    return scores


@pytest.mark.parametrize("cv", [LeaveOneGroupOut(), GroupKFold(3)])
def test_shared_pair_matches_a_naive_loop(cv):
    X, Y, runs = make_data()
    splits = list(cv.split(X, Y, runs))
    naive = naive_search(X, Y, splits)
    mean = naive.mean(axis=0)
    c, a = np.unravel_index(np.argmax(mean), mean.shape)
    # The shared pair is not every target's own: the test compares something.
    own = naive.reshape(Y.shape[1], -1).argmax(axis=1)
    assert np.any(own != np.ravel_multi_index((c, a), mean.shape))
    model = BandedRidge(
        BANDS,
        alphas=ALPHAS,
        band_weights=CANDIDATES,
        cv=cv,
        local_alpha=False,
        store_cv_results=True,
    ).fit(X, Y, groups=runs)
    np.testing.assert_allclose(model.cv_results_["scores"], naive, rtol=1e-8)
    np.testing.assert_array_equal(model.alpha_, np.full(Y.shape[1], ALPHAS[a]))
    np.testing.assert_allclose(model.band_weights_, np.tile(CANDIDATES[c], (6, 1)))
    np.testing.assert_allclose(model.best_score_, naive[:, c, a], rtol=1e-8)
    scale = np.sqrt(CANDIDATES[c][BANDS])
    ridge = Ridge(alpha=ALPHAS[a]).fit(X * scale, Y)
    np.testing.assert_allclose(model.coef_, ridge.coef_ * scale, rtol=1e-8)
    np.testing.assert_allclose(model.intercept_, ridge.intercept_, rtol=1e-8)


def test_per_target_choice_unchanged_by_default():
    X, Y, runs = make_data(seed=1)
    cv = LeaveOneGroupOut()
    naive = naive_search(X, Y, list(cv.split(X, Y, runs)))
    model = BandedRidge(BANDS, alphas=ALPHAS, band_weights=CANDIDATES, cv=cv)
    model.fit(X, Y, groups=runs)
    own = naive.reshape(Y.shape[1], -1).argmax(axis=1)
    c, a = np.unravel_index(own, naive.shape[1:])
    np.testing.assert_allclose(model.band_weights_, CANDIDATES[c])
    np.testing.assert_array_equal(model.alpha_, ALPHAS[a])
    assert not hasattr(model, "cv_results_")


def test_matches_himalaya_on_one_candidate():
    """With one candidate, himalaya's local_alpha=False (an alpha per
    candidate, shared by the targets) is the shared pair."""
    pytest.importorskip("himalaya")
    from himalaya.backend import set_backend
    from himalaya.ridge import BandedRidgeCV

    set_backend("numpy")
    X, Y, runs = make_data(seed=2)
    splits = list(LeaveOneGroupOut().split(X, Y, runs))
    gamma = np.array([[0.3, 0.7]])
    himalaya = BandedRidgeCV(
        groups=BANDS,
        solver_params=dict(
            n_iter=gamma, alphas=ALPHAS, local_alpha=False, progress_bar=False
        ),
        cv=splits,
        fit_intercept=True,
    ).fit(X, Y)
    model = BandedRidge(
        BANDS,
        alphas=ALPHAS,
        band_weights=gamma,
        cv=LeaveOneGroupOut(),
        local_alpha=False,
    ).fit(X, Y, groups=runs)
    himalaya_alphas = np.exp(-np.asarray(himalaya.deltas_)).T
    np.testing.assert_allclose(model.band_alphas_, himalaya_alphas, rtol=1e-6)
    np.testing.assert_allclose(model.coef_, np.asarray(himalaya.coef_).T, rtol=1e-6)
    np.testing.assert_allclose(
        model.predict(X), np.asarray(himalaya.predict(X)), rtol=1e-6, atol=1e-9
    )


def test_local_alpha_false_leaves_the_fast_path_and_is_checked():
    assert BandedRidge(local_alpha=False).__skbatch_banded_spec__() is None
    assert BandedRidge().__skbatch_banded_spec__() is not None
    X, Y, _ = make_data()
    with pytest.raises(ValueError, match="local_alpha"):
        BandedRidge(BANDS, local_alpha="no").fit(X, Y)
