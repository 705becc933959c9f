"""The covariance decomposition of BatchedRidge against the SVD one."""

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

from skbatch import BandedRidge, BatchedRidge, Delayer
from skbatch._ridge import covariance

ALPHAS = np.logspace(-2, 4, 7)
# Relative agreement of the two decompositions in float64 (the contract).
RTOL = 1e-10


def ar1(rng, n, size, phi=0.8):
    """Autocorrelated rows: an AR(1) series per column."""
    out = np.empty((n, size))
    out[0] = rng.standard_normal(size)
    for i in range(1, n):
        out[i] = phi * out[i - 1] + np.sqrt(1 - phi**2) * rng.standard_normal(size)
    return out


def runs_data(n_features=12, n_targets=6, lengths=(70, 45, 90, 55, 60), seed=0):
    """Features and targets in runs of unequal length, AR(1) within each run,
    with offsets far from 0 (the centring is exercised)."""
    rng = np.random.default_rng(seed)
    X = np.vstack([ar1(rng, n, n_features) for n in lengths]) + 4.0
    W = rng.standard_normal((n_features, n_targets)) * np.linspace(0, 1, n_targets)
    noise = np.vstack([ar1(rng, n, n_targets, phi=0.5) for n in lengths])
    Y = X @ W + noise + 10 * rng.standard_normal(n_targets)
    groups = np.repeat(np.arange(len(lengths)), lengths)
    return X, Y, groups


def both(X, Y, fit_kwargs=(), **params):
    fit_kwargs = dict(fit_kwargs)
    params.setdefault("alphas", ALPHAS)
    params["store_cv_results"] = True
    svd = BatchedRidge(solver="svd", **params).fit(X, Y, **fit_kwargs)
    cov = BatchedRidge(solver="covariance", **params).fit(X, Y, **fit_kwargs)
    assert (svd.solver_, cov.solver_) == ("svd", "covariance")
    return svd, cov


def assert_same_model(svd, cov, rtol=RTOL):
    assert_array_equal(cov.alpha_, svd.alpha_)
    scale = np.max(np.abs(svd.coef_))
    assert_allclose(cov.coef_, svd.coef_, rtol=0, atol=rtol * scale)
    offset = np.max(np.abs(svd.intercept_)) + scale
    assert_allclose(cov.intercept_, svd.intercept_, rtol=0, atol=rtol * offset)
    scores = svd.cv_results_["scores"]
    assert_allclose(
        cov.cv_results_["scores"], scores, rtol=0, atol=rtol * np.max(np.abs(scores))
    )


@pytest.mark.parametrize("ratio", [0.5, 1, 2, 5, 20, 100])
def test_grid_of_shapes_equals_svd(ratio):
    n_features = 10
    rng = np.random.default_rng(int(ratio * 10))
    n = int(ratio * n_features * 5 / 4) + 1
    X = ar1(rng, n, n_features) + 2.0
    Y = X @ rng.standard_normal((n_features, 4)) + rng.standard_normal((n, 4))
    # p > n per fold: the null directions of the covariance are filtered by
    # alpha alone, as the SVD leaves them out.
    svd, cov = both(X, Y, alphas=np.logspace(-1, 4, 6), cv=5)
    assert_same_model(svd, cov)


@pytest.mark.parametrize(
    "cv",
    [
        LeaveOneGroupOut(),
        GroupKFold(3),
        KFold(4),
        KFold(3, shuffle=True, random_state=0),
        # Training rows that are not the rest of the rows: their moments are
        # formed directly.
        TimeSeriesSplit(4),
        ShuffleSplit(3, test_size=0.2, train_size=0.5, random_state=0),
    ],
    ids=lambda cv: type(cv).__name__,
)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_folds_weights_intercepts_equal_svd(cv, weighted, fit_intercept):
    X, Y, groups = runs_data()
    weight = None
    if weighted:
        weight = np.random.default_rng(1).uniform(0.1, 3.0, X.shape[0])
        weight[::17] = 0.0
    svd, cov = both(
        X,
        Y,
        dict(sample_weight=weight, groups=groups),
        cv=cv,
        fit_intercept=fit_intercept,
    )
    assert_same_model(svd, cov)


@pytest.mark.parametrize("scoring", ["r2", "correlation", "neg_mean_squared_error"])
@pytest.mark.parametrize("alpha_per_target", [True, False])
def test_scorings_and_shared_alpha_equal_svd(scoring, alpha_per_target):
    X, Y, groups = runs_data(seed=2)
    svd, cov = both(
        X,
        Y,
        dict(groups=groups),
        cv=LeaveOneGroupOut(),
        scoring=scoring,
        alpha_per_target=alpha_per_target,
    )
    assert_same_model(svd, cov)
    assert_allclose(cov.best_score_, svd.best_score_, rtol=1e-10, atol=1e-12)


def test_constant_and_one_target():
    X, Y, groups = runs_data(seed=3)
    Y[:, 1] = 7.0
    svd, cov = both(X, Y, dict(groups=groups), cv=LeaveOneGroupOut())
    assert_same_model(svd, cov)
    svd, cov = both(X, Y[:, 0], dict(groups=groups), cv=LeaveOneGroupOut())
    assert isinstance(cov.alpha_, float)
    assert cov.coef_.shape == (X.shape[1],)
    assert_same_model(svd, cov)


def test_delayed_design_of_runs_equals_a_naive_loop():
    """A TRF: delays within runs, leave one run out, against the textbook loop
    (per alpha and fold, a ridge solve on the training rows)."""
    rng = np.random.default_rng(4)
    lengths = (150, 110, 130, 90)
    stimulus = np.vstack([ar1(rng, n, 3, phi=0.9) for n in lengths])
    groups = np.repeat(np.arange(len(lengths)), lengths)
    delays = np.arange(6)
    X = Delayer(delays=delays).fit_transform(stimulus, groups=groups)
    Y = X @ rng.standard_normal((X.shape[1], 5)) + 2 * rng.standard_normal(
        (X.shape[0], 5)
    )
    ridge = BatchedRidge(ALPHAS, cv=LeaveOneGroupOut(), store_cv_results=True)
    ridge.fit(X, Y, groups=groups)
    assert ridge.solver_ == "covariance"

    def fit(rows, alpha):
        x_mean, y_mean = X[rows].mean(0), Y[rows].mean(0)
        Xc, Yc = X[rows] - x_mean, Y[rows] - y_mean
        coef = np.linalg.solve(Xc.T @ Xc + alpha * np.eye(X.shape[1]), Xc.T @ Yc)
        return coef, y_mean - x_mean @ coef

    scores = np.zeros((len(ALPHAS), Y.shape[1]))
    for k, alpha in enumerate(ALPHAS):
        for run in range(len(lengths)):
            test = groups == run
            coef, intercept = fit(~test, alpha)
            error = Y[test] - X[test] @ coef - intercept
            spread = Y[test] - Y[test].mean(0)
            scores[k] += 1 - (error**2).sum(0) / (spread**2).sum(0)
    scores /= len(lengths)
    assert_allclose(ridge.cv_results_["scores"].T, scores, rtol=1e-10, atol=1e-12)
    best = np.argmax(scores, axis=0)
    assert_array_equal(ridge.alpha_, ALPHAS[best])
    for j in range(Y.shape[1]):
        coef, intercept = fit(np.ones(X.shape[0], bool), ALPHAS[best[j]])
        assert_allclose(ridge.coef_[j], coef[:, j], rtol=1e-10, atol=1e-12)
        assert_allclose(ridge.intercept_[j], intercept[j], rtol=1e-10)


def test_auto_rule():
    X, Y, groups = runs_data()
    fit = dict(groups=groups)
    # Many rows per feature, K-fold: the covariance.
    model = BatchedRidge(ALPHAS, cv=LeaveOneGroupOut()).fit(X, Y, **fit)
    assert model.solver_ == "covariance"
    # Leave-one-out and GCV: the SVD.
    assert BatchedRidge(ALPHAS).fit(X, Y).solver_ == "svd"
    assert BatchedRidge(ALPHAS, cv="gcv").fit(X, Y).solver_ == "svd"
    # Fewer than COVARIANCE_MIN_ROWS_PER_FEATURE training rows per feature.
    wide = np.hstack([X] * 12)
    assert wide.shape[1] * 2 > X.shape[0] * 4 / 5
    assert BatchedRidge(ALPHAS, cv=5).fit(wide, Y).solver_ == "svd"


def test_ill_conditioned_design_is_routed_to_the_svd():
    """Columns nearly collinear with a small alpha: squaring the condition
    number would cost the covariance its digits, so "auto" keeps the SVD,
    and gives its result bit for bit."""
    X, Y, groups = runs_data(seed=5)
    rng = np.random.default_rng(5)
    X[:, 1] = X[:, 0] + 1e-6 * rng.standard_normal(X.shape[0])
    params = dict(alphas=np.logspace(-8, 2, 6), cv=LeaveOneGroupOut())
    auto = BatchedRidge(**params).fit(X, Y, groups=groups)
    svd = BatchedRidge(solver="svd", **params).fit(X, Y, groups=groups)
    assert auto.solver_ == "svd"
    assert_array_equal(auto.coef_, svd.coef_)
    # The same design at alphas that regularise the weak direction: kept.
    params["alphas"] = np.logspace(0, 4, 5)
    assert BatchedRidge(**params).fit(X, Y, groups=groups).solver_ == "covariance"


def test_condition_limit_keeps_the_contract():
    """Where the rule keeps the covariance at its limit (eps * cond just
    under COVARIANCE_MAX_ERROR), it still agrees with the SVD to 1e-10."""
    rng = np.random.default_rng(6)
    n, p = 600, 20
    U, _ = np.linalg.qr(rng.standard_normal((n, p)))
    V, _ = np.linalg.qr(rng.standard_normal((p, p)))
    X = (U * np.logspace(0, -4, p) * np.sqrt(n)) @ V.T
    Y = U[:, :5] @ rng.standard_normal((5, 3)) * 10 + rng.standard_normal((n, 3))
    largest = np.linalg.eigvalsh(np.cov(X.T, bias=True) * n)[-1]
    eps = np.finfo(np.float64).eps
    # eps * (largest + alpha) / alpha a little under the limit.
    alpha = eps * largest / (0.5 * covariance.COVARIANCE_MAX_ERROR)
    params = dict(alphas=[alpha, 10 * alpha, 100 * alpha], cv=4)
    auto = BatchedRidge(**params).fit(X, Y)
    assert auto.solver_ == "covariance"
    svd, cov = both(X, Y, **params)
    assert_same_model(svd, cov)
    # Below that alpha the rule routes to the SVD.
    params["alphas"] = [alpha / 10, alpha]
    assert BatchedRidge(**params).fit(X, Y).solver_ == "svd"


def test_float32_within_float32_tolerance():
    X, Y, groups = runs_data(seed=7)
    fit = dict(groups=groups)
    ref = BatchedRidge(ALPHAS, cv=LeaveOneGroupOut(), solver="svd").fit(X, Y, **fit)
    cov = BatchedRidge(
        ALPHAS, cv=LeaveOneGroupOut(), solver="covariance", dtype="float32"
    ).fit(X.astype(np.float32), Y.astype(np.float32), **fit)
    assert cov.coef_.dtype == np.float32
    assert cov.predict(X.astype(np.float32)).dtype == np.float32
    assert_array_equal(cov.alpha_, ref.alpha_)
    # The moments and eigenbases are formed in float64: the float32 result is
    # the float64 one rounded, up to the rounding of the float32 data.
    assert_allclose(
        cov.coef_, ref.coef_, rtol=1e-4, atol=1e-4 * np.abs(ref.coef_).max()
    )


def test_invalid_solver_and_cv():
    X, Y, _ = runs_data()
    with pytest.raises(ValueError, match="solver"):
        BatchedRidge(solver="cholesky").fit(X, Y)
    for cv in (None, "gcv"):
        with pytest.raises(ValueError, match="solver='covariance'.*K-fold.*cv="):
            BatchedRidge(solver="covariance", cv=cv).fit(X, Y)
    huge = X * 1e150
    with pytest.raises(ValueError, match="solver='covariance' squares X"):
        BatchedRidge(solver="covariance", cv=3).fit(huge, Y)
    # "auto" decomposes it by SVD instead.
    assert BatchedRidge(cv=3).fit(huge, Y).solver_ == "svd"


def test_get_params_and_clone():
    model = BatchedRidge(solver="covariance")
    assert model.get_params()["solver"] == "covariance"
    assert BatchedRidge().solver == "auto"


def test_one_band_banded_ridge_follows_the_rule():
    X, Y, groups = runs_data(seed=8)
    params = dict(alphas=ALPHAS, cv=LeaveOneGroupOut())
    banded = BandedRidge(**params).fit(X, Y, groups=groups)
    batched = BatchedRidge(**params).fit(X, Y, groups=groups)
    assert batched.solver_ == "covariance"
    assert_array_equal(banded.coef_, batched.coef_)
    assert_array_equal(banded.alpha_, batched.alpha_)
    svd = BatchedRidge(solver="svd", **params).fit(X, Y, groups=groups)
    assert_allclose(banded.coef_, svd.coef_, rtol=RTOL, atol=1e-12)


def test_no_n_by_p_factor_is_formed():
    """The fit's peak rise stays far below one copy of X (the SVD holds an
    n x p factor per fold), and below CovarianceSolver.nbytes."""
    rng = np.random.default_rng(9)
    n, p = 40_000, 40
    X = rng.standard_normal((n, p))
    Y = X[:, :3] @ rng.standard_normal((3, 2)) + rng.standard_normal((n, 2))
    groups = np.repeat(np.arange(8), n // 8)
    model = BatchedRidge(ALPHAS, cv=LeaveOneGroupOut())
    tracemalloc.start()
    try:
        model.fit(X, Y, groups=groups)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert model.solver_ == "covariance"
    scheme = covariance.KFold(LeaveOneGroupOut()).split(X, Y, groups=groups)
    # X itself is the caller's, counted by nbytes but not allocated here.
    held = covariance.CovarianceSolver.nbytes(n, p, scheme, 8) - X.nbytes
    # Y's copies per target (a few n-vectors) and the test fold's
    # predictions of every alpha come on top.
    assert peak < 0.75 * X.nbytes
    assert peak < held + 40 * n * Y.shape[1] * 8


@pytest.mark.parametrize(
    "library", ["torch", pytest.param("jax", marks=pytest.mark.slow)]
)
def test_backends_equal_numpy(library):
    pytest.importorskip(library)
    X, Y, groups = runs_data(seed=10)
    weight = np.linspace(0.5, 2, X.shape[0])
    params = dict(alphas=ALPHAS, cv=LeaveOneGroupOut(), store_cv_results=True)
    ref = BatchedRidge(solver="svd", **params).fit(
        X, Y, groups=groups, sample_weight=weight
    )
    model = BatchedRidge(solver="covariance", device=library, dtype="float64", **params)
    model.fit(X, Y, groups=groups, sample_weight=weight)
    assert model.solver_ == "covariance"
    assert_same_model(ref, model)


def test_solver_pickles_for_cluster_tasks(tmp_path):
    """A task on a dask worker receives the solver pickled: the same fit."""
    import pickle

    from skbatch._ridge.cv import KFold as Scheme
    from skbatch.backend import resolve_backend

    X, Y, groups = runs_data(seed=11)
    scheme = Scheme(LeaveOneGroupOut()).split(X, Y, groups=groups)
    solver = covariance.CovarianceSolver(
        X,
        np.linspace(0.5, 2, X.shape[0]),
        ALPHAS,
        scheme,
        resolve_backend("numpy"),
        np.float64,
        fit_intercept=True,
        scoring=None,
    )
    copy = pickle.loads(pickle.dumps(solver))
    for a, b in zip(solver.select_and_fit(Y), copy.select_and_fit(Y)):
        assert_array_equal(a, b)


def test_targets_on_disk_equal_in_memory(tmp_path):
    X, Y, groups = runs_data(seed=12)
    disk = np.lib.format.open_memmap(tmp_path / "y.npy", "w+", Y.dtype, Y.shape)
    disk[:] = Y
    disk.flush()
    params = dict(alphas=ALPHAS, cv=LeaveOneGroupOut(), n_targets_batch=2)
    memory = BatchedRidge(**params).fit(X, Y, groups=groups)
    on_disk = BatchedRidge(**params).fit(X, disk, groups=groups)
    assert on_disk.solver_ == memory.solver_ == "covariance"
    assert_array_equal(on_disk.coef_, memory.coef_)
    assert_array_equal(on_disk.alpha_, memory.alpha_)


def test_preflight_counts_the_covariance_holdings():
    """A budget that holds X and the covariance path's p x p bases but not
    the SVDs' n x p factors: the covariance fits, the SVD is refused before
    any work, naming the budget."""
    rng = np.random.default_rng(13)
    n, p = 20_000, 30
    X = rng.standard_normal((n, p))
    Y = X[:, :3] @ rng.standard_normal((3, 2)) + rng.standard_normal((n, 2))
    groups = np.repeat(np.arange(5), n // 5)
    scheme = covariance.KFold(LeaveOneGroupOut()).split(X, Y, groups=groups)
    held = covariance.CovarianceSolver.nbytes(n, p, scheme, 8)
    assert held < 2 * X.nbytes
    budget = 3 * X.nbytes / 1e9
    params = dict(alphas=ALPHAS, cv=LeaveOneGroupOut(), max_memory_gb=budget)
    model = BatchedRidge(**params).fit(X, Y, groups=groups)
    assert model.solver_ == "covariance"
    with pytest.raises(ValueError, match="memory budget"):
        BatchedRidge(solver="svd", **params).fit(X, Y, groups=groups)


def _fold_moments(X_test, Y_test, x_mean, y_mean, weight):
    """A test fold's moments about training means, naively."""
    Xc, Yc = X_test - x_mean, Y_test - y_mean
    w = np.ones(len(Xc)) if weight is None else weight
    return (Xc * w[:, None]).T @ Xc, w @ Xc, (Xc * w[:, None]).T @ Yc, Xc, Yc


@pytest.mark.parametrize("scoring", ["r2", "correlation", "neg_mean_squared_error"])
@pytest.mark.parametrize("weighted", [False, True])
def test_moment_scores_equal_scores_of_the_predictions(scoring, weighted):
    """Every alpha's held-out scores from a test fold's moments equal
    sklearn's metrics (Pearson's r by numpy) of the predictions of the rows."""
    from sklearn.metrics import mean_squared_error, r2_score

    from skbatch._kernels import linalg

    X, Y, groups = runs_data(n_features=15, n_targets=5, seed=11)
    train, test = groups != 2, groups == 2
    rng = np.random.default_rng(11)
    weight = rng.uniform(0.2, 2.0, X.shape[0]) if weighted else None
    w_train = np.ones(train.sum()) if weight is None else weight[train]
    x_mean = np.average(X[train], axis=0, weights=w_train)
    y_mean = np.average(Y[train], axis=0, weights=w_train)
    Xc, Yc = X[train] - x_mean, Y[train] - y_mean
    eigenvalues, V = np.linalg.eigh((Xc * w_train[:, None]).T @ Xc)
    VtXtY = V.T @ ((Xc * w_train[:, None]).T @ Yc)
    w_test = None if weight is None else weight[test]
    gram, sums, cross, X_test, y_true = _fold_moments(
        X[test], Y[test], x_mean, y_mean, w_test
    )
    scores, rows_needed = linalg.moment_scores(
        V, eigenvalues, VtXtY, gram, sums, cross, y_true, ALPHAS,
        scoring=scoring, sample_weight=w_test,
    )  # fmt: skip
    assert not rows_needed.any()
    for k, alpha in enumerate(ALPHAS):
        pred = X_test @ (V @ (VtXtY / (eigenvalues[:, None] + alpha)))
        for j in range(Y.shape[1]):
            if scoring == "r2":
                expected = r2_score(y_true[:, j], pred[:, j], sample_weight=w_test)
            elif scoring == "neg_mean_squared_error":
                expected = -mean_squared_error(
                    y_true[:, j], pred[:, j], sample_weight=w_test
                )
            else:
                cov = np.cov(y_true[:, j], pred[:, j], aweights=w_test)
                expected = cov[0, 1] / np.sqrt(cov[0, 0] * cov[1, 1])
            assert_allclose(scores[k, j], expected, rtol=1e-10, atol=1e-12)


def test_covariance_scores_read_no_test_rows(monkeypatch):
    """A TRF-shaped fit scores every fold from its moments: the rows'
    scorer is never called, and the model is the SVD path's."""
    from skbatch._kernels import linalg

    def refuse(*args, **kwargs):
        raise AssertionError("test rows scored")

    rng = np.random.default_rng(12)
    lengths = (160, 120, 140, 100, 130)
    stimulus = np.vstack([ar1(rng, n, 3, phi=0.9) for n in lengths])
    groups = np.repeat(np.arange(len(lengths)), lengths)
    X = Delayer(delays=np.arange(5)).fit_transform(stimulus, groups=groups)
    Y = X @ rng.standard_normal((X.shape[1], 4)) + np.vstack(
        [ar1(rng, n, 4, phi=0.6) for n in lengths]
    )
    svd = BatchedRidge(
        ALPHAS, cv=LeaveOneGroupOut(), solver="svd", store_cv_results=True
    ).fit(X, Y, groups=groups)
    monkeypatch.setattr(linalg, "covariance_holdout_scores", refuse)
    for scoring in ("r2", "correlation", "neg_mean_squared_error"):
        cov = BatchedRidge(
            ALPHAS, cv=LeaveOneGroupOut(), scoring=scoring, store_cv_results=True
        ).fit(X, Y, groups=groups)
        assert cov.solver_ == "covariance"
        if scoring == "r2":
            assert_same_model(svd, cov)


@pytest.mark.parametrize("scoring", ["r2", "correlation", "neg_mean_squared_error"])
def test_targets_the_moments_cannot_score_are_scored_from_rows(scoring, monkeypatch):
    """A constant target and one predicted exactly (no noise), whose R^2 and
    errors the moments round too coarsely, take the rows' scores, the others
    the moments'; together the SVD path's model and scores."""
    from skbatch._kernels import linalg

    X, Y, groups = runs_data(seed=13)
    Y[:, 0] = 7.0
    Y[:, 1] = X @ np.linspace(-1, 1, X.shape[1]) + 3.0
    Y[:, 2] = 0.0
    rows_scored = []
    scorer = linalg.covariance_holdout_scores

    def counted(X_test, *args, **kwargs):
        rows_scored.append(X_test.shape[0])
        return scorer(X_test, *args, **kwargs)

    monkeypatch.setattr(linalg, "covariance_holdout_scores", counted)
    svd, cov = both(X, Y, dict(groups=groups), cv=LeaveOneGroupOut(), scoring=scoring)
    # The correlation of a constant target is NaN from its spread alone.
    assert bool(rows_scored) == (scoring != "correlation")
    assert_array_equal(cov.alpha_, svd.alpha_)
    scale = np.max(np.abs(svd.coef_))
    assert_allclose(cov.coef_, svd.coef_, rtol=0, atol=RTOL * scale)
    # Correlations of the constant target are NaN on both paths.
    scores = svd.cv_results_["scores"]
    atol = RTOL * np.nanmax(np.abs(scores))
    assert_allclose(cov.cv_results_["scores"], scores, rtol=0, atol=atol)


def test_preflight_counts_the_decompositions_peak():
    """Where the p x p matrices dominate (many folds, p in the hundreds),
    the fit's traced peak stays under CovarianceSolver.nbytes."""
    from skbatch.backend import resolve_backend

    rng = np.random.default_rng(14)
    lengths = (140, 120, 130, 110, 125, 115)
    X = np.vstack([ar1(rng, n, 300, phi=0.5) for n in lengths])
    Y = X[:, :10] @ rng.standard_normal((10, 2)) + rng.standard_normal((len(X), 2))
    groups = np.repeat(np.arange(len(lengths)), lengths)
    model = BatchedRidge(ALPHAS, cv=LeaveOneGroupOut())
    tracemalloc.start()
    try:
        model.fit(X, Y, groups=groups)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert model.solver_ == "covariance"
    scheme = covariance.KFold(LeaveOneGroupOut()).split(X, Y, groups=groups)
    held = covariance.CovarianceSolver.nbytes(
        *X.shape, scheme, 8, backend=resolve_backend("numpy")
    )
    assert peak < held - X.nbytes + 40 * len(X) * Y.shape[1] * 8
