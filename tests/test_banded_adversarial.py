"""BandedRidge probed as an outside acceptance suite would: every assertion
against an independent reference (scikit-learn's RidgeCV, Ridge,
GridSearchCV and r2_score, himalaya's BandedRidgeCV, a naive loop) or a
documented error naming the parameter.

Beside tests/test_banded.py and tests/test_banded_bootstrap.py: three and
four bands, zero weights mixed with positive ones, n < p and n of 2 or 3,
constant, all-zero and duplicated columns, weighted rows, unequal folds,
more input formats, and the meta-estimators on those inputs.
"""

import itertools
import pickle
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import sklearn
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.base import clone
from sklearn.linear_model import Ridge, RidgeCV
from sklearn.metrics import r2_score
from sklearn.model_selection import (
    GridSearchCV,
    GroupKFold,
    KFold,
    LeaveOneGroupOut,
    PredefinedSplit,
    TimeSeriesSplit,
    cross_val_score,
)
from test_banded import ar1

import skbatch._ridge.banded as solver_layer
from skbatch import BandedRidge, BootstrapEstimator, PermutationScorer
from skbatch.random import bootstrap_counts, resolve_entropy

ALPHAS = np.logspace(-3, 4, 8)
# Three bands, interleaved: band 0 of 3 columns, band 1 of 4, band 2 of 3.
LABELS = np.array([0, 1, 0, 1, 1, 2, 2, 0, 1, 2])
# Equal, every vertex, an edge (a zero weight) and interior points.
CANDIDATES = np.array(
    [
        [1, 1, 1],
        [1, 0, 0],
        [0, 1, 0],
        [0, 0, 1],
        [0.5, 0.5, 0],
        [0.6, 0.3, 0.1],
        [0.1, 0.1, 0.8],
    ],
    dtype=float,
)
CANDIDATES /= CANDIDATES.sum(axis=1, keepdims=True)
# Runs of unequal length of the autocorrelated series.
RUNS = (37, 50, 81)


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        # Grid-edge, coarse-grid and autocorrelation advice on small random
        # data: not what is tested here.
        warnings.simplefilter("ignore", UserWarning)
        yield


def make_data(n=60, t=9, seed=0, labels=LABELS, runs=None):
    """Target j driven mostly by band j % n_bands; rows iid or AR(1) runs."""
    rng = np.random.default_rng(seed)
    if runs is None:
        X = rng.standard_normal((n, labels.size))
        noise = rng.standard_normal((n, t))
    else:
        X = np.vstack([ar1(rng, r, labels.size) for r in runs])
        noise = np.vstack([ar1(rng, r, t, phi=0.5) for r in runs])
    n_bands = np.unique(labels).size
    W = rng.standard_normal((labels.size, t))
    for j in range(t):
        W[labels != j % n_bands, j] *= 0.05
    return X, X @ W + noise + 2.0


def scales_of(gamma, labels=LABELS):
    """sqrt(gamma_b) for every column of its band b (sorted band labels)."""
    return np.sqrt(np.asarray(gamma)[np.searchsorted(np.unique(labels), labels)])


def index_of(candidates, chosen):
    """Row of ``candidates`` nearest each chosen weight vector."""
    return np.array([np.argmin(np.abs(candidates - w).sum(axis=1)) for w in chosen])


def loo_brute_force(X, Y, candidates, fit_intercept=True, sample_weight=None):
    """The issue's reference: RidgeCV(alpha_per_target) on every rescaled
    design, the best (candidate, alpha) per target, first candidate on ties."""
    t = Y.shape[1]
    best = np.full(t, -np.inf)
    chosen, alpha = np.zeros(t, dtype=int), np.zeros(t)
    coef, intercept = np.zeros((t, X.shape[1])), np.zeros(t)
    for c, gamma in enumerate(candidates):
        scale = scales_of(gamma)
        kept = scale > 0
        ref = RidgeCV(
            alphas=ALPHAS, alpha_per_target=True, fit_intercept=fit_intercept
        ).fit(X[:, kept] * scale[kept], Y, sample_weight=sample_weight)
        better = ref.best_score_ > best
        best[better], chosen[better] = ref.best_score_[better], c
        alpha[better] = ref.alpha_[better]
        coef[better] = 0
        coef[np.ix_(better, kept)] = ref.coef_[better] * scale[kept]
        intercept[better] = (ref.intercept_ + np.zeros(t))[better]
    return chosen, alpha, coef, intercept, best


def _base(X, Y):
    return X, Y, None


def _wide(X, Y):
    return X[:8], Y[:8], None


def _constant_column(X, Y):
    X = X.copy()
    X[:, 3] = 5.0
    return X, Y, None


def _zero_band(X, Y):
    X = X.copy()
    X[:, LABELS == 2] = 0.0
    return X, Y, None


def _duplicated_columns(X, Y):
    X = X.copy()
    X[:, 4] = X[:, 1]  # within band 1
    X[:, 5] = X[:, 0]  # across bands 0 and 2
    return X, Y, None


def _weighted(X, Y):
    weight = np.random.default_rng(5).uniform(0.1, 3.0, X.shape[0])
    weight[:4] = 0.0
    return X, Y, weight


@pytest.mark.parametrize(
    "case",
    [_base, _wide, _constant_column, _zero_band, _duplicated_columns, _weighted],
)
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_loo_equals_ridgecv_per_candidate_on_hard_designs(case, fit_intercept):
    X, Y, weight = case(*make_data(seed=1))
    chosen, alpha, coef, intercept, best = loo_brute_force(
        X, Y, CANDIDATES, fit_intercept, weight
    )
    model = BandedRidge(
        LABELS,
        alphas=ALPHAS,
        band_weights=CANDIDATES,
        fit_intercept=fit_intercept,
        store_cv_results=True,
    ).fit(X, Y, sample_weight=weight)
    assert np.unique(chosen).size >= 2
    assert_array_equal(index_of(CANDIDATES, model.band_weights_), chosen)
    # A candidate that keeps only an all-zero band predicts 0 at every alpha:
    # its scores tie exactly, and RidgeCV's pick among them is rounding noise
    # (it differs between scikit-learn versions). The tie rule takes the
    # first alpha; every other target takes RidgeCV's.
    scores = model.cv_results_["scores"][np.arange(Y.shape[1]), chosen]
    tied = np.ptp(scores, axis=1) <= 1e-12 * np.abs(scores).max(axis=1)
    assert_array_equal(model.alpha_[~tied], alpha[~tied])
    assert np.all(model.alpha_[tied] == ALPHAS[0])
    assert_allclose(model.coef_, coef, atol=1e-7)
    assert_allclose(model.intercept_, intercept, atol=1e-7)
    assert_allclose(model.best_score_, best, rtol=1e-7, atol=1e-12)
    # Weight 0: coefficients exactly 0, band alpha infinite.
    zero = model.band_weights_ == 0
    assert zero.any()
    assert np.all(np.isinf(model.band_alphas_[zero]))
    for b in range(3):
        assert np.all(model.coef_[zero[:, b]][:, LABELS == b] == 0)


# Not n=2 with an intercept: each leave-one-out fit then sees one centred
# row (all zero), every alpha scores the same but for rounding, and the
# choice is rounding noise in both libraries.
@pytest.mark.parametrize(("n", "fit_intercept"), [(2, False), (3, True), (3, False)])
def test_two_or_three_samples_equal_ridgecv(n, fit_intercept):
    X, Y = make_data(n=n, t=4, seed=2)
    gamma = CANDIDATES[5]
    model = BandedRidge(
        LABELS, alphas=ALPHAS, band_weights=[gamma], fit_intercept=fit_intercept
    ).fit(X, Y)
    scale = scales_of(gamma)
    ref = RidgeCV(
        alphas=ALPHAS, alpha_per_target=True, fit_intercept=fit_intercept
    ).fit(X * scale, Y)
    assert_array_equal(model.alpha_, ref.alpha_)
    assert_allclose(model.coef_, ref.coef_ * scale, atol=1e-9)
    assert_allclose(model.best_score_, ref.best_score_, rtol=1e-9)


def _himalaya():
    pytest.importorskip("himalaya")
    from himalaya.backend import set_backend
    from himalaya.ridge import BandedRidgeCV

    set_backend("numpy")
    return BandedRidgeCV


@pytest.mark.parametrize(
    ("n", "labels", "n_targets", "cv"),
    [
        (60, np.zeros(4, dtype=int), 6, 4),  # one band
        (83, LABELS, 12, 4),  # three bands, folds of 21 and 20 rows
        (12, np.arange(20) % 2, 8, 3),  # n < p
        (100, np.arange(10) % 4, 300, 4),  # four bands, many targets
        (83, LABELS, 12, PredefinedSplit(np.repeat([0, 1, 2], [10, 30, 43]))),
    ],
    ids=["one-band", "three-bands", "n<p", "four-bands-300-targets", "unequal"],
)
@pytest.mark.parametrize("fit_intercept", [False, True])
def test_same_choices_and_model_as_himalaya(n, labels, n_targets, cv, fit_intercept):
    """himalaya's test_random_search setting: the same explicit candidates
    (no zero weight: himalaya takes their log), the same splits, squared
    error; himalaya orders bands by sorted label, as these labels are."""
    BandedRidgeCV = _himalaya()
    X, Y = make_data(n=n, t=n_targets, seed=3, labels=labels)
    if not fit_intercept:
        X, Y = X - X.mean(0), Y - Y.mean(0)
    n_bands = np.unique(labels).size
    candidates = np.random.default_rng(4).dirichlet(np.ones(n_bands), 8)
    candidates[0] = 1 / n_bands
    ours = BandedRidge(
        labels,
        alphas=ALPHAS,
        band_weights=candidates,
        cv=cv,
        fit_intercept=fit_intercept,
        scoring="neg_mean_squared_error",
    ).fit(X, Y)
    ref = BandedRidgeCV(
        groups=labels,
        solver_params=dict(
            n_iter=candidates, alphas=ALPHAS, progress_bar=False, warn=False
        ),
        cv=cv,
        fit_intercept=fit_intercept,
    ).fit(X, Y)
    band_alphas = np.exp(-np.asarray(ref.deltas_)).T
    if n_bands > 1:
        assert np.unique(ours.band_weights_, axis=0).shape[0] >= 2
    assert_allclose(ours.band_alphas_, band_alphas, rtol=1e-9)
    order = np.concatenate([np.flatnonzero(labels == b) for b in range(n_bands)])
    assert_allclose(ours.coef_[:, order], np.asarray(ref.coef_).T, atol=1e-9)
    if fit_intercept:
        assert_allclose(ours.intercept_, np.asarray(ref.intercept_), atol=1e-9)


def grid_search_brute_force(X, Y, candidates, cv, groups=None):
    """Per target and candidate, scikit-learn's GridSearchCV of Ridge over
    the alphas (mean of the fold scores); the best pair, first on ties."""
    chosen, alpha = [], []
    for j in range(Y.shape[1]):
        best = -np.inf
        for c, gamma in enumerate(candidates):
            scale = scales_of(gamma)
            kept = scale > 0
            search = GridSearchCV(
                Ridge(),
                {"alpha": ALPHAS},
                cv=cv,
                scoring="neg_mean_squared_error",
            ).fit(X[:, kept] * scale[kept], Y[:, j], groups=groups)
            if search.best_score_ > best:
                best = search.best_score_
                pair = c, search.best_params_["alpha"]
        chosen.append(pair[0])
        alpha.append(pair[1])
    return np.array(chosen), np.array(alpha)


@pytest.mark.parametrize(
    # A GridSearchCV per target and candidate: about 2 s a splitter, so
    # two of the three run with the slow tests.
    "cv",
    [
        pytest.param(TimeSeriesSplit(3), marks=pytest.mark.slow),
        pytest.param(GroupKFold(3), marks=pytest.mark.slow),
        LeaveOneGroupOut(),
    ],
    ids=str,
)
def test_kfold_splitters_on_runs_equal_gridsearchcv(cv):
    X, Y = make_data(t=4, seed=5, runs=RUNS)
    groups = np.repeat(np.arange(len(RUNS)), RUNS)
    candidates = CANDIDATES[[0, 1, 5, 6]]
    chosen, alpha = grid_search_brute_force(X, Y, candidates, cv, groups)
    model = BandedRidge(
        LABELS,
        alphas=ALPHAS,
        band_weights=candidates,
        cv=cv,
        scoring="neg_mean_squared_error",
    ).fit(X, Y, groups=groups)
    assert_array_equal(index_of(candidates, model.band_weights_), chosen)
    assert_array_equal(model.alpha_, alpha)
    # An iterable of the same splits: the same model.
    splits = list(cv.split(X, Y, groups))
    again = BandedRidge(
        LABELS,
        alphas=ALPHAS,
        band_weights=candidates,
        cv=splits,
        scoring="neg_mean_squared_error",
    ).fit(X, Y)
    assert_array_equal(again.coef_, model.coef_)


@pytest.mark.skipif(
    tuple(int(part) for part in sklearn.__version__.split(".")[:2]) < (1, 7),
    reason="RidgeCV(cv=K) weights the held-out rows from scikit-learn 1.7 on",
)
@pytest.mark.parametrize("scoring", ["neg_mean_squared_error", "r2"])
def test_kfold_with_sample_weight_equals_ridgecv(scoring):
    """One target, one candidate: RidgeCV(cv=KFold) weighs the held-out rows
    as BandedRidge documents (BatchedRidge's rule)."""
    for seed in range(4):
        rng = np.random.default_rng(seed)
        X = rng.standard_normal((40, LABELS.size))
        y = X @ rng.standard_normal(LABELS.size) + 2 * rng.standard_normal(40)
        weight = rng.uniform(0.1, 3.0, 40)
        gamma = CANDIDATES[5]
        ours = BandedRidge(
            LABELS, alphas=ALPHAS, band_weights=[gamma], cv=KFold(4), scoring=scoring
        ).fit(X, y, sample_weight=weight)
        ref = RidgeCV(alphas=ALPHAS, cv=KFold(4), scoring=scoring).fit(
            X * scales_of(gamma), y, sample_weight=weight
        )
        assert ours.alpha_ == ref.alpha_
        assert_allclose(ours.coef_, ref.coef_ * scales_of(gamma), rtol=1e-8)
        assert_allclose(ours.intercept_, ref.intercept_, rtol=1e-8)


def test_one_dimensional_y_follows_ridge():
    X, Y = make_data(seed=6)
    y = Y[:, 0]
    model = BandedRidge(LABELS, alphas=ALPHAS, band_weights=CANDIDATES).fit(X, y)
    ref = Ridge().fit(X, y)
    assert model.coef_.shape == ref.coef_.shape
    assert isinstance(model.intercept_, float)
    assert isinstance(model.alpha_, float)
    assert isinstance(model.best_score_, float)
    assert model.band_weights_.shape == model.band_alphas_.shape == (3,)
    assert model.predict(X).shape == ref.predict(X).shape
    assert model.predict_per_band(X).shape == (3, X.shape[0])
    # The same target as a column of a 2-D fit.
    two = BandedRidge(LABELS, alphas=ALPHAS, band_weights=CANDIDATES).fit(X, Y)
    assert_allclose(model.coef_, two.coef_[0], rtol=1e-12, atol=1e-15)
    assert model.alpha_ == two.alpha_[0]
    assert_array_equal(model.band_weights_, two.band_weights_[0])


def _reference_labels():
    return [0, 0, 1, 1, 1, 1]


@pytest.mark.parametrize(
    "bands",
    [
        [np.array([0, 1], dtype=np.int32), np.array([2, 3, 4, 5], dtype=np.uint8)],
        [[np.int64(0), np.int64(1)], [np.int16(2), 3, 4, 5]],
        (np.array([1, 0]), np.array([5, 3, 2, 4])),
        (0, 0, 1, 1, 1, 1),
        [range(2), range(2, 6)],
        np.array([3, 3, 7, 7, 7, 7]),
        np.array(["m", "m", "s", "s", "s", "s"], dtype=object),
        [b"m", b"m", b"s", b"s", b"s", b"s"],
    ],
    ids=[
        "np-int-arrays",
        "np-int-scalars",
        "tuple",
        "tuple-labels",
        "ranges",
        "other-int-labels",
        "object-str",
        "bytes",
    ],
)
def test_more_bands_formats_give_the_same_model(bands):
    """Labels here appear in sorted order: the same bands whether they are
    ordered by first appearance or by sorted label."""
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(7)
    X, Y = rng.standard_normal((40, 6)), rng.standard_normal((40, 3))
    candidates = [[0.5, 0.5], [0.9, 0.1], [0.1, 0.9], [1, 0]]
    ref = BandedRidge(_reference_labels(), band_weights=candidates).fit(X, Y)
    model = BandedRidge(bands, band_weights=candidates).fit(X, Y)
    assert_array_equal(model.coef_, ref.coef_)
    assert_array_equal(model.band_weights_, ref.band_weights_)
    # pandas labels and a DataFrame X with its feature names.
    names = ["m", "m", "s", "s", "s", "s"]
    for labels in (pd.Series(names), pd.Categorical(names)):
        frame = pd.DataFrame(X, columns=list("abcdef"))
        fitted = BandedRidge(labels, band_weights=candidates).fit(frame, Y)
        assert_allclose(fitted.coef_, ref.coef_, rtol=1e-12, atol=1e-18)
        assert_array_equal(fitted.band_weights_, ref.band_weights_)
        assert fitted.band_names_.tolist() == ["m", "s"]
        assert fitted.feature_names_in_.tolist() == list("abcdef")
        assert_allclose(
            fitted.predict_per_band(frame),
            ref.predict_per_band(X),
            rtol=1e-12,
            atol=1e-15,
        )
        with pytest.raises(ValueError, match="feature names"):
            fitted.predict_per_band(frame[list("bacdef")])


@pytest.mark.parametrize(
    "bands",
    [
        [True, True, False, False, False, False],
        [0.0, 0.0, np.nan, np.nan, np.nan, np.nan],
        [0.0, 0.0, 1.0, 1.0, 1.0, 1.0],
        ["m", "m", None, None, None, None],
        ["m", "m", np.nan, np.nan, np.nan, np.nan],
        [np.arange(6) < 2, np.arange(6) >= 2],
    ],
    ids=["bool", "nan", "float", "none", "str-nan", "bool-masks"],
)
def test_labels_that_are_not_int_or_str_are_refused(bands):
    rng = np.random.default_rng(8)
    X, Y = rng.standard_normal((30, 6)), rng.standard_normal((30, 2))
    with pytest.raises(TypeError, match="bands"):
        BandedRidge(bands, band_weights=3).fit(X, Y)


def test_bad_data_and_alphas_are_refused():
    X, Y = make_data(n=30, t=2, seed=9)
    model = BandedRidge(LABELS, band_weights=3)
    for bad in (np.nan, np.inf):
        X_bad, Y_bad = X.copy(), Y.copy()
        X_bad[0, 0] = Y_bad[0, 0] = bad
        with pytest.raises(ValueError, match="Input X contains"):
            model.fit(X_bad, Y)
        with pytest.raises(ValueError, match="Input y contains"):
            model.fit(X, Y_bad)
    with pytest.raises(TypeError, match="dense"):
        model.fit(sp.csr_matrix(X), Y)
    with pytest.raises(ValueError, match="Complex"):
        model.fit(X + 0j, Y)
    for alphas in ([0.0, 1.0], [-1.0, 1.0], [np.nan, 1.0], [np.inf], []):
        with pytest.raises(ValueError, match="alphas"):
            BandedRidge(LABELS, alphas=alphas, band_weights=3).fit(X, Y)
    with pytest.raises(ValueError, match="sample_weight"):
        model.fit(X, Y, sample_weight=-np.ones(30))
    with pytest.raises(ValueError, match="sample_weight"):
        model.fit(X, Y, sample_weight=np.ones(29))
    with pytest.raises(ValueError, match="at least 2 samples"):
        model.fit(X[:1], Y[:1])
    with pytest.raises(ValueError, match="training row"):
        BandedRidge(LABELS, band_weights=3, cv=2).fit(X[:3], Y[:3])


def test_float32_and_int_inputs():
    X, Y = make_data(seed=10)
    ref = BandedRidge(LABELS, alphas=ALPHAS, band_weights=CANDIDATES).fit(X, Y)
    single = BandedRidge(LABELS, alphas=ALPHAS, band_weights=CANDIDATES).fit(
        X.astype(np.float32), Y.astype(np.float32)
    )
    assert single.coef_.dtype == np.float32
    assert single.predict(X.astype(np.float32)).dtype == np.float32
    assert_array_equal(single.band_weights_, ref.band_weights_)
    assert_array_equal(single.alpha_, ref.alpha_)
    assert_allclose(single.coef_, ref.coef_, rtol=1e-4, atol=1e-5)
    # Integer data is read as float64: the model of its float copy.
    X_int, Y_int = np.round(3 * X).astype(int), np.round(3 * Y).astype(int)
    ints = BandedRidge(LABELS, alphas=ALPHAS, band_weights=CANDIDATES).fit(X_int, Y_int)
    floats = BandedRidge(LABELS, alphas=ALPHAS, band_weights=CANDIDATES).fit(
        X_int.astype(float), Y_int.astype(float)
    )
    assert ints.coef_.dtype == np.float64
    assert_array_equal(ints.coef_, floats.coef_)


def test_random_state_forms():
    X, Y = make_data(n=40, t=3, seed=11)
    draws = {}
    for name, state in [
        ("int", 5),
        ("np-int", np.int32(5)),
        ("RandomState", np.random.RandomState(5)),
        ("RandomState-again", np.random.RandomState(5)),
    ]:
        model = BandedRidge(LABELS, alphas=ALPHAS, band_weights=6, random_state=state)
        draws[name] = model.fit(X, Y).candidates_
    assert_array_equal(draws["np-int"], draws["int"])
    assert_array_equal(draws["RandomState-again"], draws["RandomState"])
    fresh = BandedRidge(LABELS, alphas=ALPHAS, band_weights=6, random_state=None)
    assert not np.array_equal(fresh.fit(X, Y).candidates_, fresh.fit(X, Y).candidates_)
    for candidates in draws.values():
        assert_allclose(candidates[0], np.full(3, 1 / 3))
        assert_allclose(candidates.sum(axis=1), 1.0, rtol=1e-12)


def test_parameter_spellings_that_mean_the_same():
    X, Y = make_data(n=40, t=3, seed=12)
    scalar = BandedRidge(LABELS, band_weights=6, concentration=0.3).fit(X, Y)
    one = BandedRidge(LABELS, band_weights=6, concentration=(0.3,)).fit(X, Y)
    assert_array_equal(scalar.candidates_, one.candidates_)
    lists = BandedRidge(LABELS, band_weights=CANDIDATES.tolist()).fit(X, Y)
    array = BandedRidge(LABELS, band_weights=CANDIDATES).fit(X, Y)
    assert_array_equal(lists.coef_, array.coef_)
    # Reversed alphas: the same choice (no ties here) and model.
    forward = BandedRidge(LABELS, alphas=ALPHAS, band_weights=CANDIDATES).fit(X, Y)
    backward = BandedRidge(LABELS, alphas=ALPHAS[::-1], band_weights=CANDIDATES)
    backward.fit(X, Y)
    assert_array_equal(backward.alpha_, forward.alpha_)
    assert_allclose(backward.coef_, forward.coef_, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("factor", [1e-8, 1e8])
def test_choice_is_invariant_to_the_scale_of_y(factor):
    X, Y = make_data(seed=13)
    ref = BandedRidge(LABELS, alphas=ALPHAS, band_weights=CANDIDATES).fit(X, Y)
    scaled = BandedRidge(LABELS, alphas=ALPHAS, band_weights=CANDIDATES)
    scaled.fit(X, factor * Y)
    assert_array_equal(scaled.band_weights_, ref.band_weights_)
    assert_array_equal(scaled.alpha_, ref.alpha_)
    assert_allclose(scaled.coef_ / factor, ref.coef_, rtol=1e-9, atol=1e-12)


def test_generator_cv_is_spent_after_one_fit():
    X, Y = make_data(n=40, t=2, seed=14)
    model = BandedRidge(LABELS, band_weights=3, cv=KFold(3).split(X))
    model.fit(X, Y)
    with pytest.raises(ValueError, match="exhausted generator"):
        model.fit(X, Y)


def test_group_splitter_without_groups_is_refused():
    X, Y = make_data(n=40, t=2, seed=15)
    with pytest.raises(ValueError, match="groups"):
        BandedRidge(LABELS, band_weights=3, cv=GroupKFold(3)).fit(X, Y)


def test_wrong_number_of_features_at_predict():
    X, Y = make_data(n=40, t=2, seed=16)
    model = BandedRidge(LABELS, band_weights=3).fit(X, Y)
    for method in (model.predict, model.predict_per_band):
        with pytest.raises(ValueError, match="features"):
            method(X[:, :-1])
    with pytest.raises(ValueError, match="features"):
        model.score_per_band(X[:, :-1], Y)
    with pytest.raises(ValueError, match="one column per target"):
        model.score_per_band(X, Y[:, :1])


@pytest.mark.parametrize("cv", [None, "gcv", LeaveOneGroupOut()], ids=str)
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_per_band_parts_on_runs_of_unequal_length(cv, fit_intercept):
    """On AR(1) runs of 37, 50 and 81 rows, fit on two runs: per-band parts
    are the naive X_b @ coef_b, they sum with the intercept to predict, and
    the shares sum to scikit-learn's R^2, on the training and held-out run."""
    X, Y = make_data(t=7, seed=17, runs=RUNS)
    Y[:, 6] = 3.0  # a constant target
    groups = np.repeat(np.arange(len(RUNS)), RUNS)
    train, test = groups != 2, groups == 2
    model = BandedRidge(
        LABELS,
        alphas=ALPHAS,
        band_weights=CANDIDATES,
        cv=cv,
        fit_intercept=fit_intercept,
    ).fit(X[train], Y[train], groups=groups[train])
    for rows in (train, test):
        parts = model.predict_per_band(X[rows])
        naive = np.stack(
            [X[rows][:, LABELS == b] @ model.coef_[:, LABELS == b].T for b in range(3)]
        )
        assert_allclose(parts, naive, rtol=1e-12, atol=1e-12)
        assert_allclose(
            parts.sum(0) + model.intercept_, model.predict(X[rows]), atol=1e-12
        )
        shares = model.score_per_band(X[rows], Y[rows])
        reference = r2_score(Y[rows], model.predict(X[rows]), multioutput="raw_values")
        assert_allclose(shares.sum(0), reference, atol=1e-10)
        # A band of weight 0 takes no share.
        zero = model.band_weights_ == 0
        assert np.all(shares.T[zero] == 0)


def test_clone_params_pickle_and_grid_search():
    X, Y = make_data(seed=18)
    model = BandedRidge(
        np.array(LABELS), alphas=ALPHAS, band_weights=CANDIDATES, cv=3
    ).fit(X, Y)
    params = model.get_params()
    twin = BandedRidge().set_params(**params)
    for other in (clone(model).get_params(), twin.get_params()):
        assert set(other) == set(params)
        for name, value in params.items():
            assert_array_equal(np.asarray(other[name]), np.asarray(value))
    again = pickle.loads(pickle.dumps(model))
    for name in ("coef_", "intercept_", "alpha_", "band_weights_", "band_alphas_"):
        assert_array_equal(getattr(again, name), getattr(model, name))
    assert_array_equal(again.predict_per_band(X), model.predict_per_band(X))
    assert_array_equal(again.score_per_band(X, Y), model.score_per_band(X, Y))
    # GridSearchCV over alphas picks what a manual loop of cross_val_score picks.
    grid = [[0.01], [1.0], [100.0]]
    estimator = BandedRidge(LABELS, band_weights=CANDIDATES[:3])
    search = GridSearchCV(estimator, {"alphas": grid}, cv=KFold(3)).fit(X, Y[:, 0])
    means = [
        cross_val_score(
            clone(estimator).set_params(alphas=alphas), X, Y[:, 0], cv=KFold(3)
        ).mean()
        for alphas in grid
    ]
    assert search.best_params_["alphas"] == grid[int(np.argmax(means))]
    assert_allclose(search.best_score_, max(means), rtol=1e-12)


def _snapshot(model):
    return {
        name: np.copy(value) if isinstance(value, np.ndarray) else value
        for name, value in vars(model).items()
        if name.endswith("_") and not name.startswith("_")
    }


def _assert_unchanged(model, before, X):
    after = _snapshot(model)
    assert set(after) == set(before)
    for name, value in before.items():
        if isinstance(value, np.ndarray):
            assert_array_equal(after[name], value)
    assert model.n_features_in_ == X.shape[1]
    assert model.predict(X).shape == (X.shape[0], model.coef_.shape[0])


def test_failed_refits_leave_the_fitted_model_whole(monkeypatch):
    X, Y = make_data(seed=19)
    weight = np.random.default_rng(1).uniform(0.5, 2.0, X.shape[0])
    inputs = [a.copy() for a in (X, Y, weight, LABELS, CANDIDATES)]
    model = BandedRidge(LABELS, band_weights=CANDIDATES, store_cv_results=True)
    model.fit(X, Y, sample_weight=weight)
    for given, copy in zip((X, Y, weight, LABELS, CANDIDATES), inputs):
        assert_array_equal(given, copy)
    before = _snapshot(model)
    prediction = model.predict(X)

    wider = np.hstack([X, X[:, :2]])
    with pytest.raises(ValueError, match="bands"):
        model.fit(wider, Y)
    _assert_unchanged(model, before, X)
    with pytest.raises(ValueError, match="NaN"):
        model.fit(X, np.where(Y > 3, np.nan, Y))
    _assert_unchanged(model, before, X)

    def fail(self, ids):
        raise RuntimeError("refit failed")

    monkeypatch.setattr(solver_layer.BandedRefitProblem, "__call__", fail)
    with pytest.raises(RuntimeError, match="refit failed"):
        model.fit(X[:40], Y[:40, :2])
    _assert_unchanged(model, before, X)
    monkeypatch.undo()

    def interrupt(self, ids):
        raise KeyboardInterrupt

    monkeypatch.setattr(solver_layer.BandedSearchProblem, "__call__", interrupt)
    with pytest.raises(KeyboardInterrupt):
        model.fit(X[:40], Y[:40, :2])
    _assert_unchanged(model, before, X)
    assert_array_equal(model.predict(X), prediction)


def test_permutation_pvalues_are_floored_and_count_the_null():
    X, Y = make_data(n=40, t=3, seed=20)
    Y[:, 2] = np.random.default_rng(3).standard_normal(40)
    n_permutations = 19
    scorer = PermutationScorer(
        BandedRidge(LABELS, alphas=[0.1, 1.0, 10.0], band_weights=CANDIDATES[:3]),
        n_permutations=n_permutations,
        cv=KFold(4),
        multioutput="raw_values",
        return_null=True,
    ).fit(X, Y)
    assert scorer.fit_report_.stages[-1].path == "batched"
    null = scorer.permutation_scores_
    counts = np.sum(null >= scorer.score_, axis=0)
    assert_allclose(scorer.pvalue_, (counts + 1) / (n_permutations + 1))
    assert np.all(scorer.pvalue_ >= 1 / (n_permutations + 1))
    assert scorer.pvalue_[0] == 1 / (n_permutations + 1)


def _cv_mse(X, y, groups, estimator):
    scores = []
    for train, test in LeaveOneGroupOut().split(X, y, groups):
        fitted = clone(estimator).fit(X[train], y[train])
        scores.append(-np.mean((y[test] - fitted.predict(X[test])) ** 2))
    return np.mean(scores)


def test_exact_permutation_pvalue_equals_enumeration_with_ties():
    """Two runs of 3 rows: 36 permutations within runs, enumerated. Rows 0
    and 1 (and 3 and 4) of X are equal, so swapping their targets gives the
    observed data: at least 4 permutations tie with it and must count."""
    rng = np.random.default_rng(21)
    X = rng.standard_normal((6, 4))
    X[1], X[4] = X[0], X[3]
    y = 3 * X[:, 0] + 0.1 * rng.standard_normal(6)
    groups = np.repeat([0, 1], 3)
    estimator = BandedRidge(
        [0, 0, 1, 1], alphas=[0.1, 1.0, 10.0], band_weights=[[1, 1], [1, 0], [1, 4]]
    )
    scorer = PermutationScorer(
        estimator,
        n_permutations=100,
        cv=LeaveOneGroupOut(),
        scoring="neg_mean_squared_error",
    ).fit(X, y, groups=groups)
    assert scorer.exact_ and scorer.n_permutations_ == 36
    observed = _cv_mse(X, y, groups, estimator)
    assert_allclose(scorer.score_, observed, rtol=1e-12)
    null = []
    for first, second in itertools.product(itertools.permutations(range(3)), repeat=2):
        order = np.concatenate([first, 3 + np.array(second)])
        null.append(_cv_mse(X, y[order], groups, estimator))
    null = np.array(null)
    tolerance = 1e-12 * abs(observed)
    assert np.sum(np.abs(null - observed) <= tolerance) >= 4
    assert scorer.pvalue_ == np.mean(null >= observed - tolerance)


def test_permutation_with_nested_group_cv_on_runs():
    X, Y = make_data(t=3, seed=22, runs=(37, 50, 81, 30))
    groups = np.repeat(np.arange(4), (37, 50, 81, 30))
    estimator = BandedRidge(
        LABELS, alphas=ALPHAS, band_weights=CANDIDATES[[0, 1, 6]], cv=LeaveOneGroupOut()
    )
    scorer = PermutationScorer(
        estimator,
        n_permutations=4,
        cv=GroupKFold(4),
        multioutput="raw_values",
        permutation_type="circular_shift",
    ).fit(X, Y, groups=groups)
    assert scorer.fit_report_.stages[-1].path == "batched"
    scores = []
    for train, test in GroupKFold(4).split(X, Y, groups):
        fitted = clone(estimator).fit(X[train], Y[train], groups=groups[train])
        scores.append(fitted.score_per_target(X[test], Y[test]))
    assert_allclose(scorer.score_, np.mean(scores, axis=0), rtol=1e-10)


@pytest.mark.parametrize(
    "case", [_base, _wide, _constant_column, _zero_band, _weighted]
)
def test_bootstrap_replicates_equal_ridge_on_hard_designs(case):
    X, Y, weight = case(*make_data(n=40, t=5, seed=23))
    n_bootstrap = 4
    boot = BootstrapEstimator(
        BandedRidge(LABELS, alphas=ALPHAS, band_weights=CANDIDATES),
        n_bootstrap=n_bootstrap,
        return_samples=True,
        random_state=3,
    ).fit(X, Y, sample_weight=weight)
    assert boot.fit_report_.stages[-1].path == "batched"
    fitted = boot.estimator_
    samples = boot.results_["coef_"].samples
    counts = bootstrap_counts(
        resolve_entropy(3), np.arange(n_bootstrap), X.shape[0], None
    )
    for k in range(n_bootstrap):
        rows = np.repeat(np.arange(X.shape[0]), counts[k])
        for j in range(Y.shape[1]):
            scale = scales_of(fitted.band_weights_[j])
            kept = scale > 0
            ref = Ridge(alpha=fitted.alpha_[j]).fit(
                X[rows][:, kept] * scale[kept],
                Y[rows, j],
                sample_weight=None if weight is None else weight[rows],
            )
            expected = np.zeros(X.shape[1])
            expected[kept] = ref.coef_ * scale[kept]
            assert_allclose(samples[k, j], expected, rtol=1e-8, atol=1e-9)


def test_bootstrap_of_a_dataframe_with_named_bands():
    pd = pytest.importorskip("pandas")
    X, Y = make_data(n=40, t=3, seed=24)
    names = np.array(["a", "b", "c"])[LABELS]
    frame = pd.DataFrame(X, columns=[f"x{i}" for i in range(X.shape[1])])
    params = dict(n_bootstrap=3, return_samples=True, random_state=1)
    named = BootstrapEstimator(
        BandedRidge(names, alphas=ALPHAS, band_weights=CANDIDATES), **params
    ).fit(frame, Y)
    plain = BootstrapEstimator(
        BandedRidge(LABELS, alphas=ALPHAS, band_weights=CANDIDATES), **params
    ).fit(X, Y)
    assert named.estimator_.band_names_.tolist() == ["a", "b", "c"]
    assert_allclose(
        named.results_["coef_"].samples, plain.results_["coef_"].samples, rtol=1e-12
    )
