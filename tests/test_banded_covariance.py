"""BandedRidge on the covariance against its SVD path, a naive loop and himalaya."""

import tracemalloc

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.model_selection import (
    GroupKFold,
    KFold,
    LeaveOneGroupOut,
    ShuffleSplit,
    TimeSeriesSplit,
)

from skbatch import BandedRidge, BatchedRidge
from skbatch._kernels import linalg
from skbatch._ridge.banded import covariance as banded_covariance
from skbatch._ridge.banded import covariance_search
from skbatch._ridge.cv import KFold as Scheme

ALPHAS = np.logspace(-2, 4, 7)
# Relative agreement of the two decompositions in float64 (the contract).
RTOL = 1e-10
# Equal, two vertices and points between, for 2 and 3 bands.
CANDIDATES = {
    2: np.array([[0.5, 0.5], [1.0, 0.0], [0.0, 1.0], [0.9, 0.1], [0.2, 0.8]]),
    3: np.array(
        [
            [1 / 3, 1 / 3, 1 / 3],
            [1.0, 0.0, 0.0],
            [0.0, 0.5, 0.5],
            [0.6, 0.3, 0.1],
            [0.1, 0.1, 0.8],
            [0.05, 0.9, 0.05],
        ]
    ),
}


def ar1(rng, n, size, phi=0.8):
    """Autocorrelated rows: an AR(1) series per column."""
    out = np.empty((n, size))
    out[0] = rng.standard_normal(size)
    for i in range(1, n):
        out[i] = phi * out[i - 1] + np.sqrt(1 - phi**2) * rng.standard_normal(size)
    return out


def banded_runs(n_bands=2, width=6, ratio=10, n_targets=9, seed=0):
    """Runs of unequal length of AR(1) features far from 0, ``n_bands``
    interleaved bands of ``width`` columns, about ``ratio`` rows per column;
    each target driven by one band (or all), with AR noise and offsets."""
    rng = np.random.default_rng(seed)
    p = n_bands * width
    n = max(int(ratio * p), 8 * p // 5 + 10)
    shares = np.array([0.3, 0.15, 0.25, 0.1, 0.2])
    lengths = np.maximum((shares * n).astype(int), 2)
    X = np.vstack([ar1(rng, m, p) for m in lengths]) + 4.0
    labels = np.arange(p) % n_bands
    W = rng.standard_normal((p, n_targets))
    for t in range(n_targets):
        driver = t % (n_bands + 1)
        if driver < n_bands:
            W[labels != driver, t] = 0
    noise = np.vstack([ar1(rng, m, n_targets, phi=0.5) for m in lengths])
    Y = X @ W + 2.0 * noise + 10 * rng.standard_normal(n_targets)
    groups = np.repeat(np.arange(len(lengths)), lengths)
    return X, Y, labels, groups


def both(X, Y, labels, fit_kwargs=(), **params):
    fit_kwargs = dict(fit_kwargs)
    params.setdefault("alphas", ALPHAS)
    params.setdefault("band_weights", CANDIDATES[np.unique(labels).size])
    params["store_cv_results"] = True
    svd = BandedRidge(labels, solver="svd", **params).fit(X, Y, **fit_kwargs)
    cov = BandedRidge(labels, solver="covariance", **params).fit(X, Y, **fit_kwargs)
    assert (svd.solver_, cov.solver_) == ("svd", "covariance")
    return svd, cov


def assert_same_model(svd, cov, rtol=RTOL):
    assert_array_equal(cov.band_weights_, svd.band_weights_)
    assert_array_equal(cov.alpha_, svd.alpha_)
    scale = np.max(np.abs(svd.coef_))
    assert_allclose(cov.coef_, svd.coef_, rtol=0, atol=rtol * scale)
    offset = np.max(np.abs(svd.intercept_)) + scale
    assert_allclose(cov.intercept_, svd.intercept_, rtol=0, atol=rtol * offset)
    scores = svd.cv_results_["scores"]
    assert_allclose(
        cov.cv_results_["scores"], scores, rtol=0, atol=rtol * np.max(np.abs(scores))
    )
    assert_allclose(cov.best_score_, svd.best_score_, rtol=rtol)


@pytest.mark.parametrize("n_bands", [2, 3])
@pytest.mark.parametrize("ratio", [2, 5, 20, 100])
def test_grid_of_shapes_equals_svd(n_bands, ratio):
    X, Y, labels, groups = banded_runs(n_bands, width=12 // n_bands, ratio=ratio)
    svd, cov = both(X, Y, labels, dict(groups=groups), cv=LeaveOneGroupOut())
    # The choices are not all the same candidate: the search decides.
    assert np.unique(svd.band_weights_, axis=0).shape[0] >= 2
    assert_same_model(svd, cov)


@pytest.mark.parametrize(
    "cv",
    [
        LeaveOneGroupOut(),
        GroupKFold(3),
        KFold(4, shuffle=True, random_state=0),
        TimeSeriesSplit(3),
        ShuffleSplit(3, test_size=0.2, random_state=0),
    ],
    ids=["logo", "groupkfold", "kfold", "timeseries", "shuffle"],
)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_folds_weights_intercepts_equal_svd(cv, weighted, fit_intercept):
    X, Y, labels, groups = banded_runs(3, width=4, ratio=12, seed=1)
    fit = dict(groups=groups)
    if weighted:
        weight = np.random.default_rng(1).uniform(0, 2, X.shape[0])
        weight[::7] = 0
        fit["sample_weight"] = weight
    svd, cov = both(X, Y, labels, fit, cv=cv, fit_intercept=fit_intercept)
    assert_same_model(svd, cov)


@pytest.mark.parametrize("scoring", [None, "neg_mean_squared_error", "correlation"])
@pytest.mark.parametrize("local_alpha", [True, False])
def test_scorings_and_shared_pair_equal_svd(scoring, local_alpha):
    X, Y, labels, groups = banded_runs(2, ratio=15, seed=2)
    svd, cov = both(
        X,
        Y,
        labels,
        dict(groups=groups),
        cv=GroupKFold(5),
        scoring=scoring,
        local_alpha=local_alpha,
    )
    assert_same_model(svd, cov)


def test_random_candidates_equal_svd():
    X, Y, labels, groups = banded_runs(3, width=4, ratio=20, seed=3)
    svd, cov = both(
        X,
        Y,
        labels,
        dict(groups=groups),
        alphas=np.logspace(0, 5, 6),
        band_weights=15,
        cv=LeaveOneGroupOut(),
    )
    assert_array_equal(cov.candidates_, svd.candidates_)
    assert_same_model(svd, cov)


def naive(X, Y, labels, candidates, splits, alphas, weight=None):
    """Every candidate's rescaled design fit apart, every fold and alpha
    solved by ``numpy.linalg.solve`` on the weighted centred normal
    equations; the best (candidate, alpha) of each target by mean held-out
    R^2 and its coefficients on all rows."""

    def fit(Z, Y, w, alpha):
        w = np.ones(len(Z)) if w is None else w
        xm, ym = w @ Z / w.sum(), w @ Y / w.sum()
        Zc, Yc = Z - xm, Y - ym
        gram = Zc.T @ (w[:, None] * Zc) + alpha * np.eye(Z.shape[1])
        coef = np.linalg.solve(gram, Zc.T @ (w[:, None] * Yc))
        return coef, ym - xm @ coef

    bands = np.unique(labels)
    best = np.full(Y.shape[1], -np.inf)
    chosen = np.zeros((Y.shape[1], 2), dtype=int)
    for c, gamma in enumerate(candidates):
        scale = np.sqrt(gamma[np.searchsorted(bands, labels)])
        Z = X * scale
        for a, alpha in enumerate(alphas):
            score = 0.0
            for train, test in splits:
                wt = None if weight is None else weight[train]
                coef, intercept = fit(Z[train], Y[train], wt, alpha)
                error = Y[test] - Z[test] @ coef - intercept
                ws = np.ones(len(test)) if weight is None else weight[test]
                mean = ws @ Y[test] / ws.sum()
                spread = ws @ (Y[test] - mean) ** 2
                score = score + 1 - (ws @ error**2) / spread
            score = score / len(splits)
            better = score > best
            best[better], chosen[better] = score[better], (c, a)
    coef = np.zeros((Y.shape[1], X.shape[1]))
    intercept = np.zeros(Y.shape[1])
    for t, (c, a) in enumerate(chosen):
        scale = np.sqrt(candidates[c][np.searchsorted(bands, labels)])
        v, b = fit(X * scale, Y[:, [t]], weight, alphas[a])
        coef[t], intercept[t] = v[:, 0] * scale, b[0]
    return chosen, coef, intercept, best


@pytest.mark.parametrize("weighted", [False, True])
def test_equals_a_naive_loop_over_candidates_folds_and_alphas(weighted):
    X, Y, labels, groups = banded_runs(3, width=4, ratio=15, seed=4)
    weight = None
    if weighted:
        weight = np.random.default_rng(4).uniform(0.2, 2, X.shape[0])
    candidates = CANDIDATES[3]
    splits = list(LeaveOneGroupOut().split(X, Y, groups))
    chosen, coef, intercept, best = naive(
        X, Y, labels, candidates, splits, ALPHAS, weight
    )
    model = BandedRidge(
        labels,
        alphas=ALPHAS,
        band_weights=candidates,
        cv=LeaveOneGroupOut(),
        solver="covariance",
    ).fit(X, Y, groups=groups, sample_weight=weight)
    assert np.unique(chosen[:, 0]).size >= 2
    assert_array_equal(model.band_weights_, model.candidates_[chosen[:, 0]])
    assert_array_equal(model.alpha_, ALPHAS[chosen[:, 1]])
    assert_allclose(model.best_score_, best, rtol=1e-10)
    assert_allclose(model.coef_, coef, rtol=0, atol=1e-9 * np.abs(coef).max())
    assert_allclose(model.intercept_, intercept, rtol=1e-9)
    # A band of weight 0 is left out: exactly 0.
    left_out = (model.band_weights_ == 0)[:, labels]
    assert left_out.any()
    assert np.all(model.coef_[left_out] == 0)


def test_same_choices_as_himalaya():
    pytest.importorskip("himalaya")
    from himalaya.backend import set_backend
    from himalaya.ridge import BandedRidgeCV

    set_backend("numpy")
    # himalaya takes the log of the weights: no vertex.
    candidates = np.array([[0.5, 0.5], [0.99, 0.01], [0.01, 0.99], [0.8, 0.2]])
    X, Y, labels, _ = banded_runs(2, ratio=10, seed=5)
    X, Y = X - X.mean(0), Y - Y.mean(0)
    ours = BandedRidge(
        labels,
        alphas=ALPHAS,
        band_weights=candidates,
        cv=4,
        fit_intercept=False,
        scoring="neg_mean_squared_error",
        solver="covariance",
    ).fit(X, Y)
    ref = BandedRidgeCV(
        groups=labels,
        solver_params=dict(n_iter=candidates, alphas=ALPHAS, progress_bar=False),
        cv=4,
    ).fit(X, Y)
    with np.errstate(over="ignore"):
        band_alphas = np.exp(-np.asarray(ref.deltas_)).T
    assert np.unique(ours.band_weights_, axis=0).shape[0] >= 2
    assert_allclose(ours.band_alphas_, band_alphas, rtol=1e-9)
    order = np.concatenate([np.flatnonzero(labels == 0), np.flatnonzero(labels == 1)])
    assert_allclose(ours.coef_[:, order], np.asarray(ref.coef_).T, atol=1e-9)


def test_auto_rule():
    minimum = banded_covariance.BANDED_COVARIANCE_MIN_ROWS_PER_FEATURE
    X, Y, labels, groups = banded_runs(2, ratio=40, seed=6)
    params = dict(alphas=ALPHAS, band_weights=CANDIDATES[2])
    fit = dict(groups=groups)
    # K-fold, many rows per column, well conditioned: the covariance.
    auto = BandedRidge(labels, cv=LeaveOneGroupOut(), **params).fit(X, Y, **fit)
    assert auto.solver_ == "covariance"
    smallest = min(np.sum(groups != g) for g in np.unique(groups))
    assert smallest >= minimum * X.shape[1]
    # Leave-one-out, GCV: the SVD.
    for cv in (None, "gcv"):
        assert BandedRidge(labels, cv=cv, **params).fit(X, Y).solver_ == "svd"
    # Fewer training rows per column than the banded minimum (more than
    # BatchedRidge's 2): the SVD, which shares its QRs among the candidates;
    # one band follows BatchedRidge's rule.
    few, Yf, labels_f, groups_f = banded_runs(2, ratio=10, seed=6)
    smallest = min(np.sum(groups_f != g) for g in np.unique(groups_f))
    assert 2 * few.shape[1] <= smallest < minimum * few.shape[1]
    model = BandedRidge(labels_f, cv=LeaveOneGroupOut(), **params)
    assert model.fit(few, Yf, groups=groups_f).solver_ == "svd"
    one = BandedRidge(cv=LeaveOneGroupOut(), alphas=ALPHAS)
    assert one.fit(few, Yf, groups=groups_f).solver_ == "covariance"


def test_ill_conditioned_candidates_are_routed_to_the_svd():
    """A candidate whose band weight is tiny leaves ``D C D`` nearly
    singular: at a small alpha, the bound of the covariance's error exceeds
    the contract's, and "auto" takes the SVD (forced, the covariance still
    runs). At large alphas the same candidates stay on the covariance."""
    X, Y, labels, groups = banded_runs(2, ratio=40, seed=7)
    candidates = np.array([[0.5, 0.5], [1 - 1e-9, 1e-9]])
    params = dict(band_weights=candidates, cv=LeaveOneGroupOut())
    fit = dict(groups=groups)
    small = BandedRidge(labels, alphas=[1e-6, 1.0], **params).fit(X, Y, **fit)
    assert small.solver_ == "svd"
    large = BandedRidge(labels, alphas=[10.0, 100.0], **params).fit(X, Y, **fit)
    assert large.solver_ == "covariance"
    svd = BandedRidge(labels, alphas=[10.0, 100.0], solver="svd", **params)
    assert_same_model_light(svd.fit(X, Y, **fit), large)


def assert_same_model_light(svd, cov):
    assert_array_equal(cov.band_weights_, svd.band_weights_)
    assert_array_equal(cov.alpha_, svd.alpha_)
    scale = np.max(np.abs(svd.coef_))
    assert_allclose(cov.coef_, svd.coef_, rtol=0, atol=RTOL * scale)


def test_condition_bound_bounds_every_candidate():
    """The bound the rule reads is at least the condition number of every
    candidate's rescaled covariance at the smallest alpha (the eigenvalues
    its search decomposes)."""
    from skbatch._ridge.banded import BandedDesign
    from skbatch.backend import resolve_backend

    X, Y, labels, groups = banded_runs(3, width=4, ratio=10, seed=8)
    candidates = np.vstack([CANDIDATES[3], [[1e-4, 0.5, 0.5 - 1e-4]]])
    columns = [np.flatnonzero(labels == b) for b in range(3)]
    design = BandedDesign(X, columns, candidates)
    scheme = Scheme(LeaveOneGroupOut()).split(X, Y, groups=groups)
    alpha = 0.1
    decomposed = banded_covariance.BandedCovariance(
        X,
        None,
        np.array([alpha, 1.0]),
        scheme,
        design,
        resolve_backend("numpy"),
        np.float64,
        fit_intercept=True,
        scoring=None,
    )
    worst = 0.0
    for c in range(len(candidates)):
        for fold in decomposed.folds:
            eigenvalues, *_ = decomposed.basis(fold.covariance, c)
            worst = max(
                worst, (eigenvalues.max() + alpha) / (eigenvalues.min() + alpha)
            )
    assert worst <= decomposed.condition * (1 + 1e-8)
    # Not a vacuous bound: within a few orders of the worst candidate.
    assert decomposed.condition < 1e3 * worst


def test_float32_within_float32_tolerance():
    X, Y, labels, groups = banded_runs(2, ratio=20, seed=9)
    params = dict(alphas=ALPHAS, band_weights=CANDIDATES[2], cv=LeaveOneGroupOut())
    ref = BandedRidge(labels, solver="svd", **params).fit(X, Y, groups=groups)
    cov = BandedRidge(labels, solver="covariance", dtype="float32", **params)
    cov.fit(X.astype(np.float32), Y.astype(np.float32), groups=groups)
    assert cov.solver_ == "covariance"
    assert cov.coef_.dtype == np.float32
    assert_array_equal(cov.band_weights_, ref.band_weights_)
    assert_array_equal(cov.alpha_, ref.alpha_)
    # The moments and eigenbases are formed in float64: the float32 result is
    # the float64 one rounded, up to the rounding of the float32 data (as
    # BatchedRidge's covariance path, tests/test_covariance.py).
    assert_allclose(
        cov.coef_, ref.coef_, rtol=1e-4, atol=1e-4 * np.abs(ref.coef_).max()
    )


@pytest.mark.parametrize(
    "library", ["torch", pytest.param("jax", marks=pytest.mark.slow)]
)
def test_backends_equal_numpy(library):
    pytest.importorskip(library)
    X, Y, labels, groups = banded_runs(3, width=4, ratio=12, seed=10)
    weight = np.linspace(0.5, 2, X.shape[0])
    params = dict(
        alphas=ALPHAS,
        band_weights=CANDIDATES[3],
        cv=LeaveOneGroupOut(),
        store_cv_results=True,
    )
    fit = dict(groups=groups, sample_weight=weight)
    ref = BandedRidge(labels, solver="svd", **params).fit(X, Y, **fit)
    model = BandedRidge(
        labels, solver="covariance", device=library, dtype="float64", **params
    ).fit(X, Y, **fit)
    assert model.solver_ == "covariance"
    assert_same_model(ref, model)


def test_batches_and_targets_on_disk_equal_one_batch(tmp_path):
    X, Y, labels, groups = banded_runs(2, ratio=10, n_targets=11, seed=11)
    disk = np.lib.format.open_memmap(tmp_path / "y.npy", "w+", Y.dtype, Y.shape)
    disk[:] = Y
    disk.flush()
    params = dict(
        alphas=ALPHAS,
        band_weights=CANDIDATES[2],
        cv=LeaveOneGroupOut(),
        solver="covariance",
    )
    whole = BandedRidge(labels, **params).fit(X, Y, groups=groups)
    parts = BandedRidge(labels, n_targets_batch=3, **params).fit(X, disk, groups=groups)
    for name in ("coef_", "intercept_", "alpha_", "band_weights_", "best_score_"):
        assert_allclose(getattr(parts, name), getattr(whole, name), rtol=1e-13)


def test_invalid_solver_is_refused_before_any_work(monkeypatch):
    X, Y, labels, _ = banded_runs(2, ratio=10, seed=12)

    def fail(*args, **kwargs):
        raise AssertionError("moments formed before the parameters were checked")

    monkeypatch.setattr(linalg, "gram_moments", fail)
    with pytest.raises(
        ValueError, match="'solver' parameter of BandedRidge.*'cholesky'"
    ):
        BandedRidge(labels, solver="cholesky").fit(X, Y)
    for cv in (None, "gcv"):
        with pytest.raises(ValueError, match="solver='covariance'.*K-fold.*cv="):
            BandedRidge(labels, solver="covariance", cv=cv).fit(X, Y)
    with pytest.raises(ValueError, match="solver='covariance' squares X"):
        BandedRidge(labels, solver="covariance", cv=3).fit(X * 1e150, Y)
    assert BandedRidge(labels).get_params()["solver"] == "auto"


def test_no_n_by_p_factor_is_formed():
    """The covariance search's peak stays below one copy of X (the SVD path
    holds a Q of n x p per fold), and within what its preflight counts."""
    rng = np.random.default_rng(13)
    n, p = 30_000, 40
    X = rng.standard_normal((n, p))
    labels = np.arange(p) % 2
    Y = X[:, :3] @ rng.standard_normal((3, 2)) + rng.standard_normal((n, 2))
    groups = np.repeat(np.arange(10), n // 10)
    model = BandedRidge(
        labels, alphas=ALPHAS, band_weights=CANDIDATES[2], cv=LeaveOneGroupOut()
    )
    tracemalloc.start()
    try:
        model.fit(X, Y, groups=groups)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert model.solver_ == "covariance"
    scheme = Scheme(LeaveOneGroupOut()).split(X, Y, groups=groups)
    held = banded_covariance.BandedCovariance.nbytes(n, p, scheme, 8) - X.nbytes
    assert peak < 0.75 * X.nbytes
    assert peak < held + 40 * n * Y.shape[1] * 8


def test_preflight_refuses_before_any_moment(monkeypatch):
    """A budget below X and the covariances of the folds: refused, naming
    the budget, before any moment is formed."""
    X, Y, labels, groups = banded_runs(2, ratio=50, seed=14)

    def fail(*args, **kwargs):
        raise AssertionError("moments formed before the preflight")

    scheme = Scheme(LeaveOneGroupOut()).split(X, Y, groups=groups)
    needed = banded_covariance.BandedCovariance.nbytes(*X.shape, scheme, 8)
    monkeypatch.setattr(linalg, "gram_moments", fail)
    with pytest.raises(ValueError, match="memory budget"):
        BandedRidge(
            labels,
            band_weights=CANDIDATES[2],
            cv=LeaveOneGroupOut(),
            solver="covariance",
            max_memory_gb=needed / 2 / 1e9,
        ).fit(X, Y, groups=groups)


def test_preflight_counts_the_bases_of_the_candidates_in_flight():
    """Beside X and the covariances of the folds and of all rows, each
    worker's candidate holds its rescaled covariance, eigenbasis and cast
    copy (3 p x p float64)."""
    from skbatch.backend import resolve_backend

    rng = np.random.default_rng(15)
    n, p = 400, 50
    X = rng.standard_normal((n, p))
    scheme = Scheme(KFold(4)).split(X, None)
    numpy = resolve_backend("numpy")
    workers = banded_covariance.cpu_workers(numpy)
    needed = banded_covariance.BandedCovariance.nbytes(n, p, scheme, 8, backend=numpy)
    held = n * p * 8 + 8 * 5 * (p * p + p)
    assert needed >= held + workers * 3 * 8 * p * p


def test_one_band_follows_batched_ridge():
    X, Y, labels, groups = banded_runs(2, ratio=20, seed=16)
    for solver in ("svd", "covariance"):
        params = dict(alphas=ALPHAS, cv=LeaveOneGroupOut(), solver=solver)
        ours = BandedRidge(**params).fit(X, Y, groups=groups)
        ref = BatchedRidge(**params).fit(X, Y, groups=groups)
        assert ours.solver_ == ref.solver_ == solver
        assert_allclose(ours.coef_, ref.coef_, rtol=1e-12, atol=1e-14)
        assert_array_equal(ours.alpha_, ref.alpha_)


def test_search_pickles_for_cluster_tasks():
    """A task on a dask worker receives the search pickled: the same results."""
    import pickle

    from skbatch._ridge.banded import BandedDesign
    from skbatch.backend import resolve_backend

    X, Y, labels, groups = banded_runs(3, width=4, ratio=12, seed=17)
    scheme = Scheme(LeaveOneGroupOut()).split(X, Y, groups=groups)
    columns = [np.flatnonzero(labels == b) for b in range(3)]
    decomposed = banded_covariance.BandedCovariance(
        X,
        np.linspace(0.5, 2, X.shape[0]),
        ALPHAS,
        scheme,
        BandedDesign(X, columns, CANDIDATES[3]),
        resolve_backend("numpy"),
        np.float64,
        fit_intercept=True,
        scoring=None,
    )
    search = covariance_search.BandedCovarianceSearch(decomposed, Y, store=True)
    copy = pickle.loads(pickle.dumps(search)).bind(0, Y)
    ids = np.arange(Y.shape[1])
    for a, b in zip(search(ids), copy(ids)):
        assert_array_equal(a, b)
