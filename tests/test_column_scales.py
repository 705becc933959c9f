"""Designs whose columns lie on very different scales: solved where a ridge
solve is accurate, refused (before any work where possible) where it is not.

References are scikit-learn's ``Ridge`` and ``RidgeCV`` and an equilibrated
solve of the normal equations, whose accuracy does not depend on the spread
of the column norms.
"""

import numpy as np
import pytest
from numpy.testing import assert_allclose
from sklearn.datasets import make_regression
from sklearn.linear_model import LinearRegression, Ridge, RidgeCV
from sklearn.model_selection import KFold

import skbatch._kernels.linalg
from skbatch import BandedRidge, BatchedRidge

ALPHAS = np.logspace(-2, 3, 6)
# Himalaya's Dirichlet draws hold band weights this small.
TINY_WEIGHT = 1.4e-16


def two_scale_design(spread, *, n=100, p_large=20, p_small=10, n_targets=4, seed=0):
    """A block of standardised-like columns and a block ``spread`` times
    smaller (as a feature space weighted by ``1 / spread**2``), targets that
    read both blocks plus noise."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p_large + p_small))
    Y = X @ rng.standard_normal((p_large + p_small, n_targets))
    Y += 2.0 * rng.standard_normal((n, n_targets))
    X[:, p_large:] /= spread
    return X, Y


def equilibrated_ridge(X, Y, alpha):
    """Ridge by Cholesky of the normal equations with unit-norm columns:
    ``(D^-1 X'X D^-1 + alpha D^-2) z = D^-1 X'Y``, ``coef = D^-1 z``."""
    X_centered, Y_centered = X - X.mean(axis=0), Y - Y.mean(axis=0)
    norms = np.linalg.norm(X_centered, axis=0)
    scaled = X_centered / norms
    gram = scaled.T @ scaled + np.diag(alpha / norms**2)
    return (np.linalg.solve(gram, scaled.T @ Y_centered) / norms[:, None]).T


def naive_gcv(X, y, alpha):
    """Generalised CV of one target, hat matrix formed (equilibrated)."""
    X_centered, y_centered = X - X.mean(axis=0), y - y.mean()
    norms = np.linalg.norm(X_centered, axis=0)
    scaled = X_centered / norms
    gram = scaled.T @ scaled + np.diag(alpha / norms**2)
    hat = scaled @ np.linalg.solve(gram, scaled.T)
    n = len(y)
    residual = y_centered - hat @ y_centered
    return -(residual @ residual / n) / (1.0 - (np.trace(hat) + 1) / n) ** 2


def assert_matches_ridge(model, X, Y, rtol):
    """Coefficients relative to the coefficient norm and predictions relative
    to the targets' spread, against scikit-learn's Ridge at the chosen alphas."""
    alphas = np.broadcast_to(model.alpha_, (Y.shape[1],))
    for j, alpha in enumerate(alphas):
        ref = Ridge(alpha=alpha).fit(X, Y[:, j])
        coef = model.coef_[j]
        assert_allclose(coef, ref.coef_, atol=rtol * np.linalg.norm(ref.coef_))
        assert_allclose(
            model.predict(X)[:, j], ref.predict(X), atol=rtol * np.ptp(Y[:, j])
        )


# 1e8 is where the old check refused and 1e12 near the SVD's limit: the
# others run with the slow tests.
SPREADS = [
    pytest.param(1e2, marks=pytest.mark.slow),
    pytest.param(1e4, marks=pytest.mark.slow),
    pytest.param(1e6, marks=pytest.mark.slow),
    1e8,
    pytest.param(1e10, marks=pytest.mark.slow),
    1e12,
]


@pytest.mark.filterwarnings("ignore:.*of targets chose the:UserWarning")
@pytest.mark.parametrize("spread", SPREADS)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_loo_on_two_scales_matches_sklearn_ridgecv(spread, dtype):
    # A weight of 1.4e-16 on the small block (spread 8.5e7) was refused after
    # the SVD, by a message contradicting itself.
    X, Y = two_scale_design(spread)
    Xd = X.astype(dtype)
    model = BatchedRidge(alphas=ALPHAS, dtype=dtype).fit(Xd, Y.astype(dtype))
    X_ref = Xd.astype(np.float64)
    ref = RidgeCV(alphas=ALPHAS, alpha_per_target=True).fit(X_ref, Y)
    assert_allclose(model.alpha_, ref.alpha_)
    assert_matches_ridge(model, X_ref, Y, 1e-9 if dtype == "float64" else 1e-4)


@pytest.mark.filterwarnings("ignore:.*of targets chose the:UserWarning")
@pytest.mark.parametrize("spread", SPREADS)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_gcv_on_two_scales_picks_the_naive_gcv_alpha(spread, dtype):
    X, Y = two_scale_design(spread)
    Xd = X.astype(dtype)
    model = BatchedRidge(alphas=ALPHAS, cv="gcv", dtype=dtype)
    model.fit(Xd, Y.astype(dtype))
    X_ref = Xd.astype(np.float64)
    for j in range(Y.shape[1]):
        scores = [naive_gcv(X_ref, Y[:, j], alpha) for alpha in ALPHAS]
        assert model.alpha_[j] == ALPHAS[np.argmax(scores)]
    assert_matches_ridge(model, X_ref, Y, 1e-9 if dtype == "float64" else 1e-4)


@pytest.mark.filterwarnings("ignore:.*of targets chose the:UserWarning")
@pytest.mark.parametrize("spread", SPREADS)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_kfold_on_two_scales_matches_sklearn_ridgecv(spread, dtype):
    X, Y = two_scale_design(spread)
    Xd = X.astype(dtype)
    model = BatchedRidge(alphas=ALPHAS, cv=KFold(5), alpha_per_target=False)
    model.set_params(dtype=dtype).fit(Xd, Y.astype(dtype))
    X_ref = Xd.astype(np.float64)
    ref = RidgeCV(alphas=ALPHAS, cv=KFold(5)).fit(X_ref, Y)
    assert model.alpha_ == ref.alpha_
    assert_matches_ridge(model, X_ref, Y, 1e-9 if dtype == "float64" else 1e-4)


@pytest.mark.parametrize("spread", [1e4, 1e8, 1e10, 1e12])
def test_least_squares_of_two_scales_is_solved_or_refused_by_its_reason(spread):
    """Without alpha nothing shrinks the small columns: they are solved to
    the digits the SVD keeps of them, or refused, naming what limits them."""
    X, Y = two_scale_design(spread)
    ref = equilibrated_ridge(X, Y, 0.0)
    try:
        model = BatchedRidge(alphas=1e-300).fit(X, Y)
    except ValueError as error:
        assert "alphas" in str(error) and "StandardScaler" in str(error)
        assert "resolves" not in str(error)
        return
    assert_allclose(model.coef_, ref, rtol=1e-6, atol=1e-6 * np.abs(ref).max())


@pytest.mark.parametrize("cv", [None, "gcv", 5])
@pytest.mark.parametrize(
    ("weight", "spread"), [(TINY_WEIGHT, 1.0), (1e-8, 1e4), (1e-10, 1e2)]
)
def test_banded_tiny_weight_matches_ridge_on_rescaled_columns(weight, spread, cv):
    """One candidate with a tiny band weight: BatchedRidge on the columns
    rescaled by the square roots of the weights, mapped back."""
    X, Y = two_scale_design(spread, p_large=8, p_small=8)
    labels = np.repeat([0, 1], 8)
    gamma = np.array([1.0 - weight, weight])
    model = BandedRidge(labels, alphas=ALPHAS, band_weights=[gamma], cv=cv).fit(X, Y)
    # A weight below skbatch's floor drops its band, as the rescaled fit
    # shrinks it to within rounding of 0.
    kept = np.where(gamma >= 1e-12, gamma, 0.0)
    root = np.sqrt(kept / kept.sum())[labels]
    ref = BatchedRidge(alphas=ALPHAS, cv=cv).fit(X * root, Y)
    assert_allclose(model.alpha_, ref.alpha_)
    expected = ref.coef_ * root
    assert_allclose(model.coef_, expected, atol=1e-9 * np.abs(expected).max())
    assert_allclose(model.predict(X), ref.predict(X * root), atol=1e-9 * np.ptp(Y))


@pytest.mark.filterwarnings("ignore:.*of targets chose the:UserWarning")
def test_refusal_after_the_svd_names_the_smallest_alpha_it_solves():
    # Least squares of many columns 1e8 times others: the SVD's rounding of
    # the large columns is too coarse for the small ones, which an alpha from
    # the one the message names shrinks below it.
    X, Y = two_scale_design(1e8)
    with pytest.raises(
        ValueError,
        match=r"smallest alpha, 1e-30, .*alphas of at least (\S+),.*StandardScaler",
    ) as info:
        BatchedRidge(alphas=[1e-30, 1.0]).fit(X, Y)
    assert "resolves" not in str(info.value)
    needed = float(str(info.value).split("at least ")[1].split(",")[0])
    model = BatchedRidge(alphas=[2 * needed, 1.0]).fit(X, Y)
    for j, alpha in enumerate(model.alpha_):
        ref = equilibrated_ridge(X, Y[:, [j]], alpha)[0]
        assert_allclose(model.coef_[j], ref, atol=1e-6 * np.abs(ref).max())
        expected = X @ ref + Y[:, j].mean() - X.mean(axis=0) @ ref
        assert_allclose(model.predict(X)[:, j], expected, atol=1e-6 * np.ptp(Y))


@pytest.mark.parametrize("cv", [None, 5])
def test_columns_past_the_svds_limit_that_alpha_shrinks_are_solved(cv):
    # A feature space weighted 1e-30 (a Dirichlet draw of a small
    # concentration): 1e15 below the others, beyond what the SVD resolves,
    # but alphas from 1e-2 shrink it to within rounding, as Ridge does.
    X, Y = two_scale_design(1e15)
    model = BatchedRidge(alphas=ALPHAS, cv=cv, alpha_per_target=cv is None)
    model.fit(X, Y)
    assert_matches_ridge(model, X, Y, 1e-9)


def test_spread_beyond_the_svds_limit_is_refused_before_any_work(monkeypatch):
    # A block 1e15 above the others (a timestamp in nanoseconds): no alpha
    # of the grid shrinks the standardised columns' share.
    X, Y = two_scale_design(1e-15)

    def no_svd(*args, **kwargs):
        raise AssertionError("decomposed before refusing")

    monkeypatch.setattr(skbatch._kernels.linalg, "svd_decompose", no_svd)
    monkeypatch.setattr(skbatch._kernels.linalg.svd, "svd_decompose", no_svd)
    with pytest.raises(
        ValueError, match=r"times that of .*Alphas from \S+ on .*StandardScaler"
    ):
        BatchedRidge(alphas=ALPHAS).fit(X, Y)
    # X's own spread (1e9) is solved, a weight of 2e-12 shrinks the small
    # band another 7e5.
    labels = np.repeat([0, 1], [20, 10])
    band = BandedRidge(labels, alphas=ALPHAS, band_weights=[[2e-12, 1.0]])
    with pytest.raises(ValueError, match=r"band_weights: candidate 0 .*alphas below"):
        band.fit(*two_scale_design(1e-9))


# --- float32 accuracy ---------------------------------------------------------


@pytest.mark.parametrize(
    "shape",
    [
        (100, 50),
        # The sweep over the other shapes takes about 20 s.
        pytest.param((200, 50), marks=pytest.mark.slow),
        pytest.param((300, 20), marks=pytest.mark.slow),
        pytest.param((50, 100), marks=pytest.mark.slow),
    ],
)
def test_float32_coefficients_within_twice_sklearns_float32_error(shape):
    """BatchedRidge(dtype="float32") against a float64 solve of the same
    float32 data: at most twice the error of scikit-learn's most accurate
    float32 Ridge (its SVD solver), over seeds, noise levels and alphas.
    Summed in float32, the products forming the coefficients reached 3.1x
    (300 x 20, seed 15); below full column rank sklearn's SVD keeps
    rounding-noise directions, which alphas from 1e-2 shrink away."""
    alphas = (1e-6, 1e-2, 1.0, 100.0) if shape[0] > shape[1] else (1e-2, 1.0, 100.0)
    ratios = []
    for seed in [7, *range(20)]:
        for noise in (0.0, 1.0):
            X, y = make_regression(*shape, noise=noise, bias=10, random_state=seed)
            X, y = X.astype(np.float32), y.astype(np.float32)
            for alpha in alphas:
                exact = equilibrated_ridge(X.astype(np.float64), y[:, None], alpha)[0]
                ref = Ridge(alpha=alpha, solver="svd").fit(X, y).coef_
                ours = BatchedRidge(alphas=alpha, dtype="float32").fit(X, y).coef_
                assert ours.dtype == np.float32
                error = np.abs(ours - exact).max()
                ratios.append(error / np.abs(ref - exact).max())
    assert max(ratios) <= 2.0, max(ratios)


def test_float32_least_squares_within_twice_sklearns_float32_error():
    ratios = []
    for seed in [7, *range(20)]:
        X, y = make_regression(100, 50, noise=0, bias=10, random_state=seed)
        X, y = X.astype(np.float32), y.astype(np.float32)
        exact = equilibrated_ridge(X.astype(np.float64), y[:, None], 0.0)[0]
        ref = LinearRegression().fit(X, y).coef_
        ours = BatchedRidge(alphas=1e-16, dtype="float32").fit(X, y).coef_
        ratios.append(np.abs(ours - exact).max() / np.abs(ref - exact).max())
    assert max(ratios) <= 2.0, max(ratios)


# torch compiles its first kernels: seconds.
@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_torch_solves_two_scales_as_numpy_does(dtype):
    pytest.importorskip("torch")
    X, Y = two_scale_design(1e12)
    Xd, Yd = X.astype(dtype), Y.astype(dtype)
    ours = BatchedRidge(alphas=ALPHAS, device="torch", dtype=dtype).fit(Xd, Yd)
    ref = RidgeCV(alphas=ALPHAS, alpha_per_target=True).fit(Xd.astype(np.float64), Y)
    assert_allclose(ours.alpha_, ref.alpha_)
    tolerance = 1e-9 if dtype == "float64" else 1e-4
    assert_matches_ridge(ours, Xd.astype(np.float64), Y, tolerance)


class _RefitRidge(BatchedRidge):
    """A subclass: BootstrapEstimator refits it per replicate (generic path)."""


def test_bootstrap_solves_the_spreads_its_alphas_shrink_as_batched_ridge_does():
    # The batched bootstrap path refused any spread past 4.5e13, whatever
    # the alpha; it now checks as BatchedRidge does and gives the refits'
    # intervals.
    from skbatch import BootstrapEstimator

    X, Y = two_scale_design(1e15)
    args = dict(n_bootstrap=20, attributes=("coef_",), random_state=3)
    batched = BootstrapEstimator(BatchedRidge(alphas=ALPHAS), **args).fit(X, Y)
    refits = BootstrapEstimator(_RefitRidge(alphas=ALPHAS), **args).fit(X, Y)
    paths = [
        {s.path for s in model.fit_report_.stages if s.name == "replicates"}
        for model in (batched, refits)
    ]
    assert paths == [{"batched"}, {"parallel"}]
    for field in ("ci_lower", "ci_upper", "standard_error"):
        ours = getattr(batched.results_["coef_"], field)
        theirs = getattr(refits.results_["coef_"], field)
        assert_allclose(ours, theirs, rtol=0, atol=1e-9 * np.abs(theirs).max())
    # Where no alpha of the grid shrinks the smaller columns, both refuse.
    with pytest.raises(ValueError, match=r"times that of .*StandardScaler"):
        BootstrapEstimator(BatchedRidge(alphas=ALPHAS), **args).fit(
            *two_scale_design(1e-15)
        )
