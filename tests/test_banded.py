import pickle
import tracemalloc
import warnings

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.linear_model import RidgeCV
from sklearn.model_selection import GridSearchCV, KFold, cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import skbatch._kernels.linalg
from skbatch import BandedRidge, BatchedRidge
from skbatch.testing import simulate_oom

ALPHAS = np.logspace(-2, 4, 7)
# Two bands of 3 and 8 columns, interleaved: band "a" at columns 0, 4, 8.
LABELS = np.array(["a" if j % 4 == 0 else "b" for j in range(11)])
# Equal, the two vertices, and points between.
CANDIDATES = np.array(
    [[0.5, 0.5], [1.0, 0.0], [0.0, 1.0], [0.9, 0.1], [0.1, 0.9], [0.7, 0.3]]
)


def ar1(rng, n, size, phi=0.8):
    """Autocorrelated rows: an AR(1) series per column."""
    out = np.empty((n, size))
    out[0] = rng.standard_normal(size)
    for i in range(1, n):
        out[i] = phi * out[i - 1] + np.sqrt(1 - phi**2) * rng.standard_normal(size)
    return out


def make_banded(n=90, t=12, seed=0, labels=LABELS, offset=3.0):
    """Targets driven by band a only, band b only, or both, in equal thirds.

    Rows are autocorrelated: runs of unequal length of AR(1) series.
    """
    rng = np.random.default_rng(seed)
    runs = [n // 2, n // 3, n - n // 2 - n // 3]
    X = np.vstack([ar1(rng, r, labels.size) for r in runs])
    a = labels == labels[0]
    W = rng.standard_normal((labels.size, t))
    kind = np.arange(t) % 3
    W[np.ix_(~a, kind == 0)] = 0
    W[np.ix_(a, kind == 1)] = 0
    W[np.ix_(a, kind == 2)] *= 3
    noise = np.vstack([ar1(rng, r, t, phi=0.5) for r in runs])
    Y = X @ W + 1.5 * noise + offset * rng.standard_normal(t)
    return X, Y, runs


def rescaled(X, columns, gamma):
    kept = np.concatenate([columns[b] for b in range(len(gamma)) if gamma[b] > 0])
    kept = np.sort(kept)
    scale = np.empty(X.shape[1])
    for b, cols in enumerate(columns):
        scale[cols] = np.sqrt(gamma[b])
    return kept, X[:, kept] * scale[kept], scale[kept]


def band_columns(labels):
    return [np.flatnonzero(labels == name) for name in dict.fromkeys(labels)]


def brute_force(X, Y, candidates, fit):
    """Best (candidate, alpha) per target by fitting every candidate apart.

    ``fit(Z, Y)`` returns per-target best scores, alphas and coefficients.
    """
    columns = band_columns(LABELS)
    best = np.full(Y.shape[1], -np.inf)
    chosen = np.zeros(Y.shape[1], dtype=int)
    alpha = np.zeros(Y.shape[1])
    coef = np.zeros((Y.shape[1], X.shape[1]))
    intercept = np.zeros(Y.shape[1])
    for c, gamma in enumerate(candidates):
        kept, Z, scale = rescaled(X, columns, gamma)
        score, alpha_c, coef_c, intercept_c = fit(Z, Y)
        better = score > best
        best[better], chosen[better], alpha[better] = score[better], c, alpha_c[better]
        coef[better] = 0
        coef[np.ix_(better, kept)] = coef_c[better] * scale
        intercept[better] = intercept_c[better]
    return chosen, alpha, coef, intercept, best


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_loo_equals_ridgecv_per_candidate(fit_intercept):
    X, Y, _ = make_banded()

    def ridgecv(Z, Y):
        ref = RidgeCV(
            alphas=ALPHAS, alpha_per_target=True, fit_intercept=fit_intercept
        ).fit(Z, Y)
        return (
            ref.best_score_,
            ref.alpha_,
            ref.coef_,
            ref.intercept_ + np.zeros(len(ref.alpha_)),
        )

    chosen, alpha, coef, intercept, score = brute_force(X, Y, CANDIDATES, ridgecv)
    model = BandedRidge(
        LABELS, alphas=ALPHAS, band_weights=CANDIDATES, fit_intercept=fit_intercept
    ).fit(X, Y)
    assert np.unique(chosen).size >= 3
    assert_array_equal(model.band_weights_, CANDIDATES[chosen])
    assert_array_equal(model.alpha_, alpha)
    assert_allclose(model.coef_, coef, atol=1e-7)
    assert_allclose(model.intercept_, intercept, atol=1e-7)
    assert_allclose(model.best_score_, score, rtol=1e-7)


@pytest.mark.parametrize("cv", ["gcv", 4, KFold(3, shuffle=True, random_state=0)])
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_kfold_and_gcv_equal_a_loop_of_batched_ridge(cv, fit_intercept):
    X, Y, _ = make_banded(seed=1)
    scoring = None if cv == "gcv" else "neg_mean_squared_error"

    def batched(Z, Y):
        ref = BatchedRidge(
            alphas=ALPHAS, cv=cv, fit_intercept=fit_intercept, scoring=scoring
        ).fit(Z, Y)
        return ref.best_score_, ref.alpha_, ref.coef_, ref.intercept_

    chosen, alpha, coef, intercept, score = brute_force(X, Y, CANDIDATES, batched)
    model = BandedRidge(
        LABELS,
        alphas=ALPHAS,
        band_weights=CANDIDATES,
        cv=cv,
        fit_intercept=fit_intercept,
        scoring=scoring,
    ).fit(X, Y)
    assert np.unique(chosen).size >= 2
    assert_array_equal(model.band_weights_, CANDIDATES[chosen])
    assert_array_equal(model.alpha_, alpha)
    assert_allclose(model.coef_, coef, rtol=1e-9, atol=1e-12)
    assert_allclose(model.intercept_, intercept, rtol=1e-9, atol=1e-12)
    assert_allclose(model.best_score_, score, rtol=1e-12)


def test_gcv_of_nearly_exact_fits_equals_a_loop_of_batched_ridge():
    # Targets in X's span to 1e-7 cancel ||Y||^2 - ||U'Y||^2: their residual
    # is formed explicitly, on shared factors as Q (coords U'Y), U never
    # formed; the same choices and scores as each candidate's own SVD.
    X, Y, _ = make_banded(seed=3)
    rng = np.random.default_rng(3)
    exact = X @ rng.standard_normal((X.shape[1], 4)) + 1e-7 * ar1(rng, X.shape[0], 4)
    Y = np.hstack([Y, exact])

    def batched(Z, Y):
        ref = BatchedRidge(alphas=ALPHAS, cv="gcv").fit(Z, Y)
        return ref.best_score_, ref.alpha_, ref.coef_, ref.intercept_

    chosen, alpha, coef, _, score = brute_force(X, Y, CANDIDATES, batched)
    model = BandedRidge(LABELS, alphas=ALPHAS, band_weights=CANDIDATES, cv="gcv").fit(
        X, Y
    )
    assert_array_equal(model.band_weights_, CANDIDATES[chosen])
    assert_array_equal(model.alpha_, alpha)
    assert_allclose(model.best_score_, score, rtol=1e-6)
    assert_allclose(model.coef_, coef, rtol=1e-9, atol=1e-12)


def test_kfold_over_runs_of_a_time_series():
    # Whole runs held out (runs of unequal length), given as explicit splits.
    X, Y, runs = make_banded(seed=2)
    bounds = np.cumsum([0, *runs])
    rows = np.arange(X.shape[0])
    splits = [
        (np.setdiff1d(rows, rows[lo:hi]), rows[lo:hi])
        for lo, hi in zip(bounds[:-1], bounds[1:])
    ]

    def batched(Z, Y):
        ref = BatchedRidge(alphas=ALPHAS, cv=splits).fit(Z, Y)
        return ref.best_score_, ref.alpha_, ref.coef_, ref.intercept_

    chosen, alpha, coef, *_ = brute_force(X, Y, CANDIDATES, batched)
    model = BandedRidge(LABELS, alphas=ALPHAS, band_weights=CANDIDATES, cv=splits).fit(
        X, Y
    )
    assert_array_equal(model.band_weights_, CANDIDATES[chosen])
    assert_array_equal(model.alpha_, alpha)
    assert_allclose(model.coef_, coef, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("cv", [None, "gcv", 3])
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_one_band_is_batched_ridge_to_the_last_digit(cv, fit_intercept):
    X, Y, _ = make_banded(seed=3)
    params = dict(alphas=ALPHAS, cv=cv, fit_intercept=fit_intercept)
    for y in (Y, Y[:, 0]):
        ours = BandedRidge(**params).fit(X, y)
        ref = BatchedRidge(**params).fit(X, y)
        for name in ("coef_", "intercept_", "alpha_", "best_score_"):
            assert_array_equal(getattr(ours, name), getattr(ref, name))
        assert_array_equal(ours.predict(X), ref.predict(X))
        assert_array_equal(ours.candidates_, [[1.0]])
        assert_array_equal(ours.band_weights_, np.ones(np.shape(ours.alpha_) + (1,)))


def test_weight_zero_band_is_left_out():
    X, Y, _ = make_banded(seed=4)
    model = BandedRidge(LABELS, alphas=ALPHAS, band_weights=[[1, 0]]).fit(X, Y)
    b = LABELS == "b"
    assert np.all(model.coef_[:, b] == 0)
    assert np.all(np.isinf(model.band_alphas_[:, 1]))
    assert_array_equal(model.band_alphas_[:, 0], model.alpha_)
    ref = RidgeCV(alphas=ALPHAS, alpha_per_target=True).fit(X[:, ~b], Y)
    assert_allclose(model.coef_[:, ~b], ref.coef_, atol=1e-7)
    parts = model.predict_per_band(X)
    assert np.all(parts[1] == 0)


def test_every_bands_format_gives_the_same_model():
    X, Y, _ = make_banded(seed=5)
    a = np.flatnonzero(LABELS == "a")
    b = np.flatnonzero(LABELS == "b")
    formats = [
        LABELS,
        list(LABELS),
        (LABELS == "b").astype(int),
        [a, b],
        [list(b[::-1]), a.tolist()],
    ]
    fits = [
        BandedRidge(bands, alphas=ALPHAS, band_weights=CANDIDATES).fit(X, Y)
        for bands in formats
    ]
    for model in fits[1:4]:
        assert_array_equal(model.coef_, fits[0].coef_)
        assert_array_equal(model.band_weights_, fits[0].band_weights_)
    # Bands listed b first: the weights' columns swap, the candidates with them.
    swapped = BandedRidge(
        formats[4], alphas=ALPHAS, band_weights=CANDIDATES[:, ::-1]
    ).fit(X, Y)
    assert_array_equal(swapped.coef_, fits[0].coef_)
    assert_array_equal(swapped.band_weights_, fits[0].band_weights_[:, ::-1])
    assert fits[0].band_names_.tolist() == ["a", "b"]
    assert fits[3].band_names_.tolist() == [0, 1]
    # Contiguous columns, reordered: the same model, its coefficients reordered.
    order = np.concatenate([a, b])
    contiguous = BandedRidge(LABELS[order], alphas=ALPHAS, band_weights=CANDIDATES).fit(
        X[:, order], Y
    )
    assert_allclose(contiguous.coef_, fits[0].coef_[:, order], rtol=1e-9, atol=1e-12)
    assert_array_equal(contiguous.band_weights_, fits[0].band_weights_)


def test_random_candidates():
    X, Y, _ = make_banded(seed=6)
    three = np.array([0, 1, 2] * 3 + [1, 2])
    model = BandedRidge(three, band_weights=30, alphas=ALPHAS).fit(X, Y)
    candidates = model.candidates_
    assert candidates.shape == (30, 3)
    assert np.all(candidates >= 0)
    assert_allclose(candidates.sum(axis=1), 1.0, rtol=1e-12)
    assert_array_equal(candidates[0], np.full(3, 1 / 3))
    again = BandedRidge(three, band_weights=30, alphas=ALPHAS).fit(X, Y)
    assert_array_equal(again.candidates_, candidates)
    other = BandedRidge(three, band_weights=30, alphas=ALPHAS, random_state=1)
    assert not np.allclose(other.fit(X, Y).candidates_[1:], candidates[1:])
    assert np.unique(candidates, axis=0).shape[0] == 30
    # Concentrations cycle as himalaya's: candidate k at concentration
    # k % 2, sparse draws at even positions (after the equal first), flat
    # ones at odd.
    cycled = BandedRidge(
        three, band_weights=41, concentration=(0.01, 1000.0), alphas=ALPHAS
    ).fit(X, Y)
    assert np.median(cycled.candidates_[2::2].max(axis=1)) > 0.95
    assert np.all(cycled.candidates_[1::2].max(axis=1) < 0.45)


def check_no_svd(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("an SVD ran before the parameters were checked")

    monkeypatch.setattr(skbatch._kernels.linalg, "svd_decompose", refuse)
    monkeypatch.setattr(skbatch._kernels.linalg.svd, "svd_decompose", refuse)


@pytest.mark.parametrize(
    ("bands", "error", "match"),
    [
        (["a"] * 10, ValueError, "one label per column"),
        ([[0, 1, 2], [3, 4]], ValueError, "in no band"),
        ([[0, 1, 2, 3], [3, 4, 5, 6, 7, 8, 9, 10]], ValueError, "column 3"),
        ([[0, 1, 2, 11], list(range(3, 11))], ValueError, "out of range"),
        ([list(range(11)), []], ValueError, "empty"),
        ([[0, 1, 1], list(range(2, 11))], ValueError, "column 1"),
        (np.linspace(0, 1, 11), TypeError, "bands"),
        ([np.arange(5.0), np.arange(5, 11)], TypeError, "integer"),
        ("ab", TypeError, "bands"),
        (3, TypeError, "bands"),
        ([0] * 5 + ["a"] * 6, TypeError, "bands"),
    ],
)
def test_bad_bands_are_refused_before_any_work(bands, error, match, monkeypatch):
    X, Y, _ = make_banded(n=30, t=2)
    check_no_svd(monkeypatch)
    with pytest.raises(error, match="bands") as info:
        BandedRidge(bands, band_weights=3).fit(X, Y)
    assert info.match(match)


@pytest.mark.parametrize(
    ("band_weights", "error", "match"),
    [
        (0, ValueError, ">= 1"),
        (-2, ValueError, ">= 1"),
        (2.5, TypeError, "int"),
        (True, TypeError, "int"),
        ("many", TypeError, "int"),
        ([[1.0, -0.5]], ValueError, "non-negative"),
        ([[1.0, np.nan]], ValueError, "non-negative"),
        ([[1.0, np.inf]], ValueError, "finite"),
        ([[1.0, 1.0], [0.0, 0.0]], ValueError, "row 1 is all zero"),
        ([[1.0, 1.0, 1.0]], ValueError, "shape"),
        ([0.5, 0.5], ValueError, "shape"),
        (np.empty((0, 2)), ValueError, "shape"),
    ],
)
def test_bad_band_weights_are_refused_before_any_work(
    band_weights, error, match, monkeypatch
):
    X, Y, _ = make_banded(n=30, t=2)
    check_no_svd(monkeypatch)
    with pytest.raises(error, match="band_weights") as info:
        BandedRidge(LABELS, band_weights=band_weights).fit(X, Y)
    assert info.match(match)


@pytest.mark.parametrize(
    ("concentration", "error"),
    [
        (0.0, ValueError),
        (-1.0, ValueError),
        ((), ValueError),
        ((1.0, np.nan), ValueError),
        ("high", TypeError),
        ([[0.1, 1.0]], ValueError),
    ],
)
def test_bad_concentration_is_refused_before_any_work(
    concentration, error, monkeypatch
):
    X, Y, _ = make_banded(n=30, t=2)
    check_no_svd(monkeypatch)
    with pytest.raises(error, match="concentration"):
        BandedRidge(LABELS, concentration=concentration).fit(X, Y)


def test_explicit_candidates_are_normalised():
    X, Y, _ = make_banded(n=40, t=3)
    model = BandedRidge(LABELS, band_weights=[[2, 2], [3, 1]], alphas=ALPHAS)
    assert_array_equal(model.fit(X, Y).candidates_, [[0.5, 0.5], [0.75, 0.25]])


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_per_band_predictions_and_scores_sum(fit_intercept):
    r2_score_split = pytest.importorskip("himalaya.scoring").r2_score_split

    X, Y, _ = make_banded(seed=7)
    model = BandedRidge(
        LABELS, alphas=ALPHAS, band_weights=CANDIDATES, fit_intercept=fit_intercept
    ).fit(X[:60], Y[:60])
    for rows in (slice(None, 60), slice(60, None)):
        parts = model.predict_per_band(X[rows])
        assert parts.shape == (2, len(X[rows]), Y.shape[1])
        assert_allclose(parts.sum(0) + model.intercept_, model.predict(X[rows]))
        shares = model.score_per_band(X[rows], Y[rows])
        assert_allclose(
            shares.sum(0), model.score_per_target(X[rows], Y[rows]), rtol=1e-10
        )
    # On the training rows with an intercept the mean error is 0: himalaya's
    # product measure of the centred data.
    if fit_intercept:
        Y_c = Y[:60] - Y[:60].mean(0)
        parts = model.predict_per_band(X[:60])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = r2_score_split(Y_c, parts - parts.mean(1, keepdims=True))
        assert_allclose(model.score_per_band(X[:60], Y[:60]), ref, atol=1e-10)
    one = BandedRidge(LABELS, alphas=ALPHAS, band_weights=CANDIDATES).fit(X, Y[:, 0])
    assert one.predict_per_band(X).shape == (2, X.shape[0])
    assert_allclose(one.score_per_band(X, Y[:, 0]).sum(), one.score(X, Y[:, 0]))


def test_budget_oom_and_batch_size_do_not_change_the_result():
    X, Y, _ = make_banded(seed=8, t=40)
    params = dict(bands=LABELS, alphas=ALPHAS, band_weights=CANDIDATES, cv=3)
    ref = BandedRidge(**params).fit(X, Y)
    fits = [
        BandedRidge(**params, n_targets_batch=7).fit(X, Y),
        BandedRidge(**params, max_memory_gb=5e-4).fit(X, Y),
    ]
    with simulate_oom(max_items=5):
        fits.append(BandedRidge(**params).fit(X, Y))
    assert fits[-1].fit_report_.stages[0].n_oom_splits > 0
    assert fits[1].fit_report_.stages[0].n_batches > 1
    for model in fits:
        assert_array_equal(model.band_weights_, ref.band_weights_)
        assert_array_equal(model.alpha_, ref.alpha_)
        assert_allclose(model.coef_, ref.coef_, rtol=1e-12, atol=1e-14)
        assert_allclose(model.best_score_, ref.best_score_, rtol=1e-12)


def _without_shared_factors(monkeypatch):
    from skbatch._ridge.banded import SharedFactors

    monkeypatch.setattr(SharedFactors, "applies", staticmethod(lambda *a: False))


@pytest.mark.parametrize(
    "cv, fit_intercept, weighted",
    [(None, True, False), (None, False, True), ("gcv", True, True), (4, True, True)],
)
def test_shared_factors_give_the_model_of_separate_svds(
    cv, fit_intercept, weighted, monkeypatch
):
    """The SVD of every candidate from one QR of X (and of each fold's training
    rows) equals each candidate's own SVD: graded weights (1e-8 beside 1), a
    duplicated column (rank-deficient X) and weighted rows included."""
    X, Y, runs = make_banded(seed=21, t=30, n=80)
    X[:, 5] = X[:, 1]
    candidates = np.vstack([CANDIDATES, [[1 - 1e-8, 1e-8], [1e-6, 1 - 1e-6]]])
    weight = None
    if weighted:
        weight = np.random.default_rng(3).uniform(0.2, 2, X.shape[0])
        weight[:3] = 0
    params = dict(
        bands=LABELS,
        alphas=np.logspace(-6, 4, 6),
        band_weights=candidates,
        cv=cv,
        fit_intercept=fit_intercept,
    )
    shared = BandedRidge(**params).fit(X, Y, sample_weight=weight)
    _without_shared_factors(monkeypatch)
    separate = BandedRidge(**params).fit(X, Y, sample_weight=weight)
    assert np.unique(shared.band_weights_, axis=0).shape[0] > 1
    assert_array_equal(shared.band_weights_, separate.band_weights_)
    assert_array_equal(shared.alpha_, separate.alpha_)
    assert_allclose(shared.best_score_, separate.best_score_, rtol=1e-9)
    assert_allclose(shared.coef_, separate.coef_, rtol=1e-7, atol=1e-9)
    assert_allclose(shared.intercept_, separate.intercept_, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("maps_test_rows", [True, False])
def test_kfold_on_shared_factors_either_mapping_equals_separate_svds(
    maps_test_rows, monkeypatch
):
    """K-fold on shared factors maps each alpha's test rows into Q's
    coordinates or Q'Y into U's, whichever costs less for the batch: both
    give the scores and the model of separate SVDs, on runs of unequal
    length left out one at a time."""
    from sklearn.model_selection import LeaveOneGroupOut

    from skbatch._ridge import cv as cv_module

    X, Y, runs = make_banded(seed=24, t=12, n=90)
    X[:, 5] = X[:, 1]  # rank-deficient: rank below the columns of Q
    groups = np.repeat(np.arange(len(runs)), runs)
    params = dict(
        bands=LABELS,
        alphas=np.logspace(-4, 4, 5),
        band_weights=CANDIDATES,
        cv=LeaveOneGroupOut(),
        store_cv_results=True,
    )
    calls = []

    def forced(*args):
        calls.append(True)
        return maps_test_rows

    monkeypatch.setattr(cv_module, "_maps_test_rows", forced)
    shared = BandedRidge(**params).fit(X, Y, groups=groups)
    assert calls
    _without_shared_factors(monkeypatch)
    separate = BandedRidge(**params).fit(X, Y, groups=groups)
    assert_allclose(
        shared.cv_results_["scores"], separate.cv_results_["scores"], rtol=1e-9
    )
    assert_array_equal(shared.band_weights_, separate.band_weights_)
    assert_array_equal(shared.alpha_, separate.alpha_)
    assert_allclose(shared.coef_, separate.coef_, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("cv", [None, 3])
def test_permutations_on_shared_factors_equal_those_on_separate_svds(cv, monkeypatch):
    """PermutationScorer's fast path factorises each outer fold's training
    rows once for all candidates: the same null as decomposing each
    candidate apart, on runs of unequal length shuffled within runs."""
    from sklearn.model_selection import GroupKFold

    from skbatch import PermutationScorer

    X, Y, runs = make_banded(n=90, t=5, seed=23)
    groups = np.repeat(np.arange(len(runs)), runs)
    model = BandedRidge(LABELS, alphas=ALPHAS, band_weights=CANDIDATES, cv=cv)
    params = dict(
        n_permutations=8, cv=GroupKFold(3), multioutput="raw_values", return_null=True
    )
    shared = PermutationScorer(model, **params).fit(X, Y, groups=groups)
    _without_shared_factors(monkeypatch)
    separate = PermutationScorer(model, **params).fit(X, Y, groups=groups)
    assert shared.fit_report_.stages[-1].path == "batched"
    assert_allclose(shared.score_, separate.score_, rtol=1e-9)
    assert_allclose(shared.permutation_scores_, separate.permutation_scores_, rtol=1e-9)
    assert_array_equal(shared.pvalue_, separate.pvalue_)


def test_shared_factors_are_used_only_where_they_save_work(monkeypatch):
    from skbatch._ridge import banded

    built = []
    original = banded.SharedFactors.__init__

    def spy(self, *args, **kwargs):
        built.append(True)
        original(self, *args, **kwargs)

    monkeypatch.setattr(banded.SharedFactors, "__init__", spy)
    X, Y, _ = make_banded(seed=22, n=40)
    BandedRidge(LABELS, alphas=ALPHAS, band_weights=CANDIDATES).fit(X, Y)
    assert built == [True]
    # One candidate: nothing to share (and bands=None stays BatchedRidge).
    BandedRidge(LABELS, alphas=ALPHAS, band_weights=CANDIDATES[:1]).fit(X, Y)
    # More columns than rows.
    wide = np.hstack([X, X[:, ::-1] + 1e-3 * X])[:, :20]
    BandedRidge(np.arange(20) % 2, alphas=ALPHAS).fit(wide[:15], Y[:15])
    assert built == [True]


@pytest.mark.slow
@pytest.mark.parametrize("library", ["torch", "jax"])
def test_other_libraries_give_the_numpy_model(library):
    pytest.importorskip(library)
    X, Y, _ = make_banded(seed=9)
    params = dict(bands=LABELS, alphas=ALPHAS, band_weights=CANDIDATES)
    ref = BandedRidge(**params, device="numpy").fit(X, Y)
    ours = BandedRidge(**params, device=library, dtype="float64").fit(X, Y)
    assert_array_equal(ours.band_weights_, ref.band_weights_)
    assert_allclose(ours.coef_, ref.coef_, rtol=1e-9, atol=1e-12)


def test_store_cv_results():
    X, Y, _ = make_banded(seed=10)
    model = BandedRidge(
        LABELS, alphas=ALPHAS, band_weights=CANDIDATES, store_cv_results=True
    ).fit(X, Y)
    scores = model.cv_results_["scores"]
    assert scores.shape == (Y.shape[1], len(CANDIDATES), ALPHAS.size)
    flat = scores.reshape(Y.shape[1], -1)
    # The first maximum in candidate-major order.
    first = np.argmax(flat, axis=1)
    assert_array_equal(model.band_weights_, CANDIDATES[first // ALPHAS.size])
    assert_array_equal(model.alpha_, ALPHAS[first % ALPHAS.size])
    assert_array_equal(model.best_score_, flat.max(axis=1))
    assert not hasattr(BandedRidge(LABELS, band_weights=3).fit(X, Y), "cv_results_")


def test_ties_go_to_the_first_candidate():
    X, Y, _ = make_banded(seed=11)
    twice = np.vstack([CANDIDATES[[3, 0]], CANDIDATES[[3, 0]]])
    model = BandedRidge(LABELS, alphas=ALPHAS, band_weights=twice).fit(X, Y)
    best = BandedRidge(LABELS, alphas=ALPHAS, band_weights=twice[:2]).fit(X, Y)
    assert_array_equal(model.coef_, best.coef_)
    # Identical candidates tie: the first wins, never its copy.
    assert_array_equal(model.band_weights_, best.band_weights_)


@pytest.mark.slow
def test_search_memory_stays_far_below_candidates_x_alphas_x_targets():
    rng = np.random.default_rng(12)
    n, t = 40, 4000
    labels = np.repeat([0, 1], [3, 5])
    X = rng.standard_normal((n, labels.size))
    Y = X @ rng.standard_normal((labels.size, t)) + rng.standard_normal((n, t))
    alphas = np.logspace(-2, 4, 20)
    model = BandedRidge(labels, alphas=alphas, band_weights=50)
    tracemalloc.start()
    try:
        model.fit(X, Y)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    held = 50 * alphas.size * t * 8
    assert peak < held / 4, (peak, held)


def test_preflight_refuses_before_any_svd(monkeypatch):
    X, Y, _ = make_banded(n=40, t=3)
    check_no_svd(monkeypatch)
    with pytest.raises(ValueError, match="candidates"):
        BandedRidge(LABELS, band_weights=20, max_memory_gb=1e-5).fit(X, Y)


def test_fit_report_and_verbose(capsys):
    X, Y, _ = make_banded(seed=13)
    model = BandedRidge(LABELS, alphas=ALPHAS, band_weights=CANDIDATES, verbose=1)
    model.fit(X, Y)
    names = [stage.name for stage in model.fit_report_.stages]
    assert names == ["searched targets", "refit targets"]
    out = capsys.readouterr().out
    assert "searched targets" in out
    assert "band weights chosen" in out


def test_edge_and_coarse_grid_warnings():
    rng = np.random.default_rng(14)
    X = rng.standard_normal((80, 11))
    a = LABELS == "a"
    Y = X[:, a] @ rng.standard_normal((a.sum(), 20)) + 0.1 * rng.standard_normal(
        (80, 20)
    )
    # Only band a matters: targets go to the candidate weighing a the most,
    # which is far from a's vertex.
    coarse = [[0.5, 0.5], [0.6, 0.4], [0.3, 0.7]]
    with pytest.warns(UserWarning, match="too coarse"):
        BandedRidge(LABELS, alphas=ALPHAS, band_weights=coarse).fit(X, Y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        BandedRidge(LABELS, alphas=ALPHAS, band_weights=[*coarse, [1.0, 0.0]]).fit(X, Y)
    with pytest.warns(UserWarning, match="largest alpha"):
        BandedRidge(LABELS, alphas=[1e-4, 1e-3], band_weights=[[1.0, 0.0]]).fit(
            X, 0.01 * rng.standard_normal((80, 20)) + X[:, :1]
        )


def test_sklearn_tools_and_pickling():
    X, Y, _ = make_banded(seed=15)
    model = BandedRidge(LABELS, alphas=ALPHAS, band_weights=4)
    pipe = make_pipeline(StandardScaler(), model)
    scores = cross_val_score(pipe, X, Y[:, 0], cv=3)
    assert scores.shape == (3,)
    search = GridSearchCV(model, {"band_weights": [2, 4]}, cv=3).fit(X, Y)
    assert search.best_params_["band_weights"] in (2, 4)
    fitted = model.fit(X, Y)
    again = pickle.loads(pickle.dumps(fitted))
    assert_array_equal(again.predict(X), fitted.predict(X))
    assert_array_equal(again.band_alphas_, fitted.band_alphas_)
    assert again.to_device("cpu").backend_.name == "numpy"


def test_groups_reach_a_group_splitter():
    from sklearn.model_selection import LeaveOneGroupOut

    X, Y, runs = make_banded(seed=16)
    groups = np.repeat(np.arange(len(runs)), runs)
    params = dict(bands=LABELS, alphas=ALPHAS, band_weights=CANDIDATES)
    grouped = BandedRidge(**params, cv=LeaveOneGroupOut()).fit(X, Y, groups=groups)
    splits = list(LeaveOneGroupOut().split(X, Y, groups))
    explicit = BandedRidge(**params, cv=splits).fit(X, Y)
    assert_array_equal(grouped.coef_, explicit.coef_)
    assert_array_equal(grouped.band_weights_, explicit.band_weights_)
    with pytest.raises(ValueError, match="groups"):
        BandedRidge(**params, cv=LeaveOneGroupOut()).fit(X, Y, groups=groups[:-1])


def test_bootstrap_holds_band_weights_and_alpha():
    from sklearn.linear_model import Ridge

    from skbatch import BootstrapEstimator
    from skbatch.random import bootstrap_counts, resolve_entropy

    X, Y, _ = make_banded(n=60, t=6, seed=17)
    model = BandedRidge(LABELS, alphas=ALPHAS, band_weights=CANDIDATES)
    boot = BootstrapEstimator(model, n_bootstrap=4, return_samples=True).fit(X, Y)
    fitted = boot.estimator_
    assert np.unique(fitted.band_weights_, axis=0).shape[0] >= 2
    samples = boot.results_["coef_"].samples
    counts = bootstrap_counts(resolve_entropy(0), np.arange(4), X.shape[0], None)
    columns = band_columns(LABELS)
    for k in range(4):
        rows = np.repeat(np.arange(X.shape[0]), counts[k])
        for j in range(Y.shape[1]):
            gamma = fitted.band_weights_[j]
            kept, Z, scale = rescaled(X[rows], columns, gamma)
            ref = Ridge(alpha=fitted.alpha_[j]).fit(Z, Y[rows, j])
            expected = np.zeros(X.shape[1])
            expected[kept] = ref.coef_ * scale
            assert_allclose(samples[k, j], expected, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("cv", [None, "gcv", 3])
@pytest.mark.slow
def test_permutation_fast_path_equals_the_generic_path(cv):
    from skbatch import PermutationScorer

    X, Y, _ = make_banded(n=60, t=4, seed=18)
    model = BandedRidge(LABELS, alphas=ALPHAS, band_weights=CANDIDATES, cv=cv)
    params = dict(n_permutations=6, cv=3, multioutput="raw_values", return_null=True)
    fast = PermutationScorer(model, **params).fit(X, Y)
    generic = PermutationScorer(make_pipeline(model), **params).fit(X, Y)
    assert fast.fit_report_.stages[-1].path == "batched"
    assert generic.fit_report_.stages[-1].path == "parallel"
    assert_allclose(fast.score_, generic.score_, rtol=1e-9)
    assert_allclose(fast.permutation_scores_, generic.permutation_scores_, rtol=1e-9)
    assert_array_equal(fast.pvalue_, generic.pvalue_)


def test_tiny_weights_are_zero():
    X, Y, _ = make_banded(n=40, t=3)
    model = BandedRidge(LABELS, band_weights=[[1.0, 1e-15], [0.5, 0.5]]).fit(X, Y)
    assert_array_equal(model.candidates_[0], [1.0, 0.0])


@pytest.mark.parametrize("first", ["a", "b"])
def test_same_choices_as_himalaya(first):
    # himalaya's groups are 0 for band `first`, 1 for the other. BandedRidge
    # orders bands by sorted label as himalaya does: given LABELS (band "a"
    # first) or the int groups themselves (whose first column may be 1),
    # the same candidates weigh the same bands.
    pytest.importorskip("himalaya")
    from himalaya.backend import set_backend
    from himalaya.ridge import BandedRidgeCV

    set_backend("numpy")
    # himalaya takes the log of the weights: no vertex.
    candidates = np.array([[0.5, 0.5], [0.99, 0.01], [0.01, 0.99], [0.8, 0.2]])
    X, Y, _ = make_banded(n=80, seed=19)
    X, Y = X - X.mean(0), Y - Y.mean(0)
    groups = (LABELS != first).astype(int)
    ours = BandedRidge(
        LABELS if first == "a" else groups,
        alphas=ALPHAS,
        band_weights=candidates,
        cv=4,
        fit_intercept=False,
        scoring="neg_mean_squared_error",
    ).fit(X, Y)
    ref = BandedRidgeCV(
        groups=groups,
        solver_params=dict(n_iter=candidates, alphas=ALPHAS, progress_bar=False),
        cv=4,
    ).fit(X, Y)
    with np.errstate(over="ignore"):
        band_alphas = np.exp(-np.asarray(ref.deltas_)).T
    assert groups[0] == int(first != LABELS[0])
    assert np.unique(ours.band_weights_, axis=0).shape[0] >= 2
    assert_allclose(ours.band_alphas_, band_alphas, rtol=1e-9)
    # himalaya orders the coefficients band by band.
    order = np.concatenate([np.flatnonzero(groups == 0), np.flatnonzero(groups == 1)])
    assert_allclose(ours.coef_[:, order], np.asarray(ref.coef_).T, atol=1e-9)


def test_targets_on_disk_give_the_in_memory_model(tmp_path):
    X, Y, _ = make_banded(seed=20, t=30)
    on_disk = np.lib.format.open_memmap(tmp_path / "y.npy", mode="w+", shape=Y.shape)
    on_disk[:] = Y
    on_disk.flush()
    params = dict(bands=LABELS, alphas=ALPHAS, band_weights=CANDIDATES, cv=3)
    ref = BandedRidge(**params).fit(X, Y)
    ours = BandedRidge(**params, n_targets_batch=7).fit(
        X, np.load(tmp_path / "y.npy", mmap_mode="r")
    )
    assert_array_equal(ours.band_weights_, ref.band_weights_)
    assert_allclose(ours.coef_, ref.coef_, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize(
    "bands, error, match",
    [
        ({"a": "m", "b": "m", "c": "s"}, TypeError, "got dict"),
        ({0, 1}, TypeError, "got set"),
        ([], ValueError, "bands is empty"),
        ([0, [1, 2]], TypeError, r"bands\[0\] is 0"),
        ([np.array([[0, 1]]), np.array([2])], TypeError, r"bands\[0\]"),
        ([[0, 0, 1], [2]], ValueError, r"bands\[0\] lists column 0 more than once"),
        ([-1, 0, 0], ValueError, "negative label -1"),
    ],
)
def test_bands_that_are_not_a_labelling_or_a_partition_are_refused(bands, error, match):
    rng = np.random.default_rng(24)
    X, Y = rng.standard_normal((20, 3)), rng.standard_normal((20, 2))
    with pytest.raises(error, match=match):
        BandedRidge(bands, band_weights=3).fit(X, Y)


def test_random_state_takes_a_generator_and_large_seeds():
    # As the other estimators take them (skbatch.random.resolve_entropy): a
    # Generator is advanced once per fit, so two generators of one seed draw
    # the same candidates, and any int >= 0 is a seed.
    X, Y, _ = make_banded(seed=25)
    first = BandedRidge(LABELS, band_weights=6, random_state=np.random.default_rng(3))
    second = BandedRidge(LABELS, band_weights=6, random_state=np.random.default_rng(3))
    assert_array_equal(first.fit(X, Y).candidates_, second.fit(X, Y).candidates_)
    big = BandedRidge(LABELS, band_weights=6, random_state=2**40).fit(X, Y)
    assert not np.array_equal(big.candidates_, first.candidates_)
    with pytest.raises(ValueError, match="random_state"):
        BandedRidge(LABELS, band_weights=6, random_state=-1).fit(X, Y)


def test_a_candidate_beyond_the_svds_resolution_is_refused_before_any_work(
    monkeypatch,
):
    # X's spread (1e9) is solvable, but a weight of 1e-12 shrinks a band's
    # columns another 1e6: the error names band_weights and the candidate,
    # before any decomposition.
    rng = np.random.default_rng(26)
    X, Y = rng.standard_normal((40, 6)), rng.standard_normal((40, 2))
    X[:, :3] *= 1e9
    labels = [0, 0, 0, 1, 1, 1]
    BatchedRidge().fit(X, Y)

    def no_svd(*args, **kwargs):
        raise AssertionError("decomposed before refusing")

    with monkeypatch.context() as patch:
        patch.setattr(skbatch._kernels.linalg, "svd_decompose", no_svd)
        patch.setattr(skbatch._kernels.linalg.svd, "svd_decompose", no_svd)
        patch.setattr(skbatch._kernels.linalg, "qr_factor", no_svd)
        with pytest.raises(ValueError, match=r"band_weights: candidate 1 .*X's own"):
            BandedRidge(labels, band_weights=[[0.5, 0.5], [1.0, 1e-12]]).fit(X, Y)
    model = BandedRidge(labels, band_weights=[[0.5, 0.5], [0.9, 0.1]]).fit(X, Y)
    assert np.all(np.isfinite(model.coef_))


def test_weighted_band_shares_are_those_of_repeated_rows():
    # Integer weights are repeated rows, and the shares sum to the weighted
    # R^2 of scikit-learn's r2_score.
    from sklearn.metrics import r2_score

    X, Y, _ = make_banded(seed=27)
    model = BandedRidge(LABELS, alphas=ALPHAS, band_weights=CANDIDATES).fit(X, Y)
    X_test, Y_test, _ = make_banded(seed=28)
    weight = np.random.default_rng(28).integers(0, 4, X_test.shape[0])
    shares = model.score_per_band(X_test, Y_test, sample_weight=weight)
    rows = np.repeat(np.arange(X_test.shape[0]), weight)
    repeated = model.score_per_band(X_test[rows], Y_test[rows])
    assert_allclose(shares, repeated, atol=1e-12)
    r2 = r2_score(
        Y_test, model.predict(X_test), sample_weight=weight, multioutput="raw_values"
    )
    assert_allclose(shares.sum(axis=0), r2, atol=1e-12)
    assert not np.allclose(shares, model.score_per_band(X_test, Y_test))
