"""BandedRidge: permutations on every array library, the count of band
weights refused before any draw, rows of huge weights, the autocorrelation
warning of a search over band weights, and himalaya's Dirichlet draws."""

import time
import warnings

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.linear_model import Ridge
from sklearn.model_selection import GroupKFold
from test_ridge import _ar1_runs

import skbatch._ridge.banded
import skbatch._ridge.banded.fit
from skbatch import AutocorrelationWarning, BandedRidge, BatchedRidge, PermutationScorer

# Warnings of the fits that these tests do not read.
pytestmark = [
    pytest.mark.filterwarnings("ignore::skbatch.AlphaEdgeWarning"),
    pytest.mark.filterwarnings("ignore::skbatch.AutocorrelationWarning"),
]

ALPHAS = np.logspace(-2, 3, 6)
# Runs of unequal length, as a time series of several sessions.
RUN_LENGTHS = (70, 45, 60, 30)
BANDS = [0, 0, 1, 1, 1]


def ar1_runs(n_columns, phi, seed, lengths=RUN_LENGTHS):
    """Columns of AR(1) series restarting at every run, and the run labels."""
    return _ar1_runs(lengths, n_columns, phi, seed)


def runs_data(n_targets=4, phi=0.9, seed=0):
    X, runs = ar1_runs(len(BANDS), 0.5, seed)
    noise, _ = ar1_runs(n_targets, phi, seed + 1)
    W = np.random.default_rng(seed + 2).standard_normal((len(BANDS), n_targets))
    W[2:, : n_targets // 2] = 0
    return X, X @ W * 0.5 + noise, runs


# Permutations on every array library.


@pytest.mark.parametrize("permutation_type", ["shuffle", "circular_shift"])
@pytest.mark.parametrize(
    # jax compiles every kernel's shape first: over 30 s.
    "library",
    ["torch", pytest.param("jax", marks=pytest.mark.slow)],
)
def test_banded_permutations_on_array_libraries_equal_numpy(
    library, permutation_type, no_gpu
):
    pytest.importorskip(library)
    X, Y, runs = runs_data()
    args = dict(
        cv=GroupKFold(2),
        n_permutations=40,
        permutation_type=permutation_type,
        multioutput="raw_values",
        random_state=3,
    )
    estimator = BandedRidge(BANDS, alphas=ALPHAS, band_weights=5, dtype="float64")
    numpy = PermutationScorer(estimator, device="cpu", **args).fit(X, Y, groups=runs)
    other = PermutationScorer(estimator, device=library, **args).fit(X, Y, groups=runs)
    assert other.backend_.library == library
    assert_allclose(other.score_, numpy.score_, rtol=1e-9)
    assert_array_equal(other.pvalue_, numpy.pvalue_)
    assert_array_equal(other.pvalue_fwer_, numpy.pvalue_fwer_)


# The count of band weights, refused before the draw.


@pytest.fixture
def no_draw(monkeypatch):
    """Any draw of candidates fails the test: the refusal must come first."""

    def draw(*args, **kwargs):
        raise AssertionError("candidates drawn before the count was checked")

    for module in (skbatch._ridge.banded.permuted, skbatch._ridge.banded.fit):
        monkeypatch.setattr(module, "band_candidates", draw)


@pytest.mark.parametrize(
    ("count", "max_memory_gb"), [(10**6, 1.0), (10**12, None), (10**30, None)]
)
def test_a_count_beyond_memory_is_refused_before_any_draw(
    count, max_memory_gb, no_draw
):
    X, Y, _ = runs_data()
    model = BandedRidge(
        BANDS, alphas=ALPHAS, band_weights=count, max_memory_gb=max_memory_gb
    )
    start = time.perf_counter()
    with pytest.raises(ValueError, match=rf"band_weights={count}\b") as raised:
        model.fit(X, Y)
    # Generous: the refusal reads the count alone (milliseconds).
    assert time.perf_counter() - start < 2.0
    assert "GB" in str(raised.value) and "fewer candidates" in str(raised.value)
    assert not hasattr(model, "coef_")


@pytest.mark.parametrize("count", [10**6, 10**12])
def test_a_permutation_test_of_a_count_beyond_memory_is_refused_before_any_draw(
    count, no_draw
):
    X, Y, groups = runs_data()
    model = BandedRidge(BANDS, alphas=ALPHAS, band_weights=count)
    test = PermutationScorer(
        model, n_permutations=9, cv=GroupKFold(3), max_memory_gb=1.0
    )
    start = time.perf_counter()
    with pytest.raises(ValueError, match=rf"band_weights={count}\b"):
        test.fit(X, Y[:, :2], groups=groups)
    assert time.perf_counter() - start < 2.0
    assert not hasattr(test, "pvalue_")


def test_a_count_that_fits_is_not_refused():
    X, Y, _ = runs_data()
    model = BandedRidge(BANDS, alphas=ALPHAS, band_weights=50, max_memory_gb=1.0)
    assert model.fit(X, Y).candidates_.shape == (50, 2)


@pytest.mark.parametrize(
    "rows",
    [[[1e308, 1e308]], [[1e308, 1e308], [1.0, 3.0]], [[1.7e308, 1e300]]],
)
def test_rows_of_huge_weights_are_normalised_exactly(rows):
    X, Y, _ = runs_data()
    rows = np.array(rows)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        model = BandedRidge(BANDS, alphas=ALPHAS, band_weights=rows).fit(X, Y)
    # The row over its largest value first, then over its sum: finite.
    scaled = rows / rows.max(axis=1, keepdims=True)
    expected = scaled / scaled.sum(axis=1, keepdims=True)
    assert_allclose(model.candidates_, expected, rtol=1e-15)
    assert_allclose(model.candidates_.sum(axis=1), 1.0, rtol=1e-15)
    if rows[0, 0] == rows[0, 1]:
        assert_array_equal(model.candidates_[0], [0.5, 0.5])
    # Every target against scikit-learn's Ridge on X rescaled by its choice.
    bands = np.array(BANDS)
    for j in range(Y.shape[1]):
        gamma, alpha = model.band_weights_[j], model.alpha_[j]
        scale = np.sqrt(gamma[bands])
        kept = scale > 0
        ridge = Ridge(alpha=alpha).fit(X[:, kept] * scale[kept], Y[:, j])
        assert_allclose(model.coef_[j, kept], ridge.coef_ * scale[kept], rtol=1e-8)


def test_a_candidate_of_no_positive_band_is_refused_by_name():
    design_columns = [np.arange(2), np.arange(2, 5)]
    with pytest.raises(ValueError, match="no band of positive weight"):
        skbatch._ridge.banded.BandedDesign(
            np.ones((4, 5)), design_columns, np.array([[0.0, 0.0]])
        )


# The autocorrelation warning of a search over band weights.


def _autocorrelation_warnings(model, X, Y):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(X, Y)
    return [w for w in caught if issubclass(w.category, AutocorrelationWarning)]


@pytest.mark.parametrize("cv", [None, "gcv"])
def test_band_weights_chosen_on_autocorrelated_rows_warn(cv):
    X, Y, _ = runs_data(n_targets=20)
    # One alpha, several candidates: the band weights are chosen.
    found = _autocorrelation_warnings(
        BandedRidge(BANDS, alphas=10.0, band_weights=8, cv=cv), X, Y
    )
    assert len(found) == 1
    assert "band weights" in str(found[0].message)
    # One alpha, one candidate: nothing chosen.
    for weights in (1, [[0.3, 0.7]]):
        model = BandedRidge(BANDS, alphas=10.0, band_weights=weights, cv=cv)
        assert not _autocorrelation_warnings(model, X, Y)
    # Both chosen.
    found = _autocorrelation_warnings(
        BandedRidge(BANDS, alphas=ALPHAS, band_weights=8, cv=cv), X, Y
    )
    assert len(found) == 1
    assert "alpha and band weights" in str(found[0].message)
    # White rows: no warning.
    white = np.random.default_rng(11).standard_normal(Y.shape)
    model = BandedRidge(BANDS, alphas=10.0, band_weights=8, cv=cv)
    assert not _autocorrelation_warnings(model, X, white)


@pytest.mark.parametrize("cv", [None, "gcv"])
def test_batched_ridge_warns_as_before(cv):
    X, Y, _ = runs_data(n_targets=20)
    found = _autocorrelation_warnings(BatchedRidge(alphas=ALPHAS, cv=cv), X, Y)
    assert len(found) == 1
    assert str(found[0].message).startswith("alpha was chosen by")
    assert not _autocorrelation_warnings(BatchedRidge(alphas=10.0, cv=cv), X, Y)
    white = np.random.default_rng(11).standard_normal(Y.shape)
    assert not _autocorrelation_warnings(BatchedRidge(alphas=ALPHAS, cv=cv), X, white)


# himalaya's Dirichlet draws.


def floored(candidates):
    """Weights below 1e-12 of their row's largest at 0, as the docstring of
    ``band_weights`` says, rows normalised again."""
    small = candidates < 1e-12 * candidates.max(axis=1, keepdims=True)
    candidates = np.where(small, 0.0, candidates)
    return candidates / candidates.sum(axis=1, keepdims=True)


@pytest.mark.parametrize(
    ("n_candidates", "n_bands", "concentration"),
    [(9, 3, [0.1, 1.0]), (10, 2, [0.1, 1.0]), (8, 4, [0.5, 1.0, 3.0]), (5, 3, [2.0])],
)
@pytest.mark.parametrize("seed", [0, 7, 2**32 - 1])
def test_drawn_candidates_are_himalayas(n_candidates, n_bands, concentration, seed):
    himalaya = pytest.importorskip("himalaya.kernel_ridge")
    expected = np.asarray(
        himalaya.generate_dirichlet_samples(
            n_candidates, n_bands, concentration, random_state=seed
        )
    )
    # himalaya's random search replaces its first draw by the equal weights.
    expected[0] = 1 / n_bands
    drawn = skbatch._ridge.banded.band_candidates(
        n_candidates, n_bands, np.array(concentration), seed
    )
    assert_allclose(drawn, floored(expected), rtol=1e-12)


def test_banded_ridge_searches_himalayas_candidates():
    himalaya = pytest.importorskip("himalaya.kernel_ridge")
    X, Y, _ = runs_data()
    model = BandedRidge(BANDS, alphas=ALPHAS, band_weights=7, random_state=5)
    model.fit(X, Y)
    expected = np.asarray(
        himalaya.generate_dirichlet_samples(7, 2, [0.1, 1.0], random_state=5)
    )
    expected[0] = 0.5
    assert_allclose(model.candidates_, floored(expected), rtol=1e-12)
