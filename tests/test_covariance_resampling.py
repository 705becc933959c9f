"""The covariance decomposition under PermutationScorer's fast path and
BootstrapEstimator's run bootstrap, against the SVD paths, naive refit loops
of scikit-learn's Ridge, and scikit-learn's permutation_test_score."""

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy.signal import lfilter
from sklearn.linear_model import Ridge
from sklearn.metrics import r2_score
from sklearn.model_selection import (
    GroupKFold,
    KFold,
    LeaveOneGroupOut,
    permutation_test_score,
)

import skbatch._permutation.paths as permutation_paths
from skbatch import BatchedRidge, PermutationScorer
from skbatch._resampling.signed import signed_rows
from skbatch._ridge import covariance_resampling
from skbatch._ridge.covariance_resampling import (
    CovariancePermutedProblem,
    row_atoms,
)
from skbatch._ridge.problems import PermutedRidgeProblem
from skbatch.random import resolve_entropy

ALPHAS = np.logspace(-1, 4, 5)

pytestmark = [
    pytest.mark.filterwarnings("ignore::skbatch.AutocorrelationWarning"),
    pytest.mark.filterwarnings("ignore::skbatch.AlphaEdgeWarning"),
]


def ar_runs(seed=0, lengths=(70, 45, 60, 52), p=4, n_targets=3, phi=0.7):
    """Autocorrelated runs of unequal length: X, Y and run labels."""
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(len(lengths)), lengths)
    n = groups.size
    X = np.concatenate(
        [
            lfilter([1.0], [1.0, -phi], rng.standard_normal((m, p)), axis=0)
            for m in lengths
        ]
    )
    X += rng.standard_normal(p)
    noise = np.concatenate(
        [
            lfilter([1.0], [1.0, -phi], rng.standard_normal((m, n_targets)), axis=0)
            for m in lengths
        ]
    )
    Y = 0.5 * X[:, :1] - 0.3 * X[:, 1:2] + noise + 3.0
    assert n == X.shape[0]
    return X, Y, groups


class PathSpy:
    """Which problem class each fast-path run built."""

    def __init__(self, monkeypatch):
        self.built = []
        original = covariance_resampling.build_permuted_problem

        def spy(*args, **kwargs):
            problem = original(*args, **kwargs)
            self.built.append(type(problem))
            return problem

        monkeypatch.setattr(permutation_paths, "build_permuted_problem", spy)


def _scorer(estimator, **params):
    params = {"n_permutations": 12, "random_state": 0, "return_null": True, **params}
    return PermutationScorer(estimator, **params)


def naive_null(X, Y, groups, outer, inner, alphas, params, scoring="r2"):
    """The null by refits of scikit-learn's Ridge: every permutation drawn
    as the scorer draws it, every outer fold choosing its alpha per target
    by the mean over inner folds of R^2, then scored."""
    entropy = resolve_entropy(params["random_state"])
    codes = signed_rows(
        entropy,
        np.arange(params["n_permutations"]),
        X.shape[0],
        groups if params.get("groups_permute", True) else None,
        permutation_type=params.get("permutation_type", "shuffle"),
        block_size=params.get("block_size"),
    )
    null = []
    for code in codes:
        rows = np.where(code >= 0, code, ~code)
        Yp = Y[rows] * np.where(code >= 0, 1.0, -1.0)[:, None]
        total = 0.0
        for train, test in outer.split(X, Yp, groups):
            scores = np.zeros((len(alphas), Y.shape[1]))
            for a, alpha in enumerate(alphas):
                for itrain, itest in inner.split(X[train], Yp[train], groups[train]):
                    model = Ridge(alpha=alpha).fit(X[train][itrain], Yp[train][itrain])
                    pred = model.predict(X[train][itest])
                    scores[a] += r2_score(
                        Yp[train][itest], pred, multioutput="raw_values"
                    )
            best = alphas[np.argmax(scores, axis=0)]
            model = Ridge(alpha=best).fit(X[train], Yp[train])
            pred = model.predict(X[test])
            if scoring == "r2":
                total = total + r2_score(Yp[test], pred, multioutput="raw_values")
            else:
                total = total + np.array(
                    [
                        np.corrcoef(Yp[test][:, j], pred[:, j])[0, 1]
                        for j in range(Y.shape[1])
                    ]
                )
        null.append(total / outer.get_n_splits(X, Yp, groups))
    return np.array(null)


def test_row_atoms_partition_every_set():
    sets = [np.arange(0, 10), np.arange(5, 15), np.array([1, 12, 19])]
    atoms, members = row_atoms(20, sets)
    covered = np.concatenate(atoms)
    assert np.unique(covered).size == covered.size
    # Rows 15-18 are in no set: in no atom.
    assert set(covered) == set(range(20)) - {15, 16, 17, 18}
    for rows, atoms_of in zip(sets, members):
        assert_array_equal(np.sort(np.concatenate([atoms[a] for a in atoms_of])), rows)
    # The coarsest: two rows share an atom iff they share every set.
    assert len(atoms) == 6


@pytest.mark.parametrize("scheme", ["shuffle_within", "circular_shift", "sign_flip"])
def test_within_run_null_matches_naive_refits_and_svd(monkeypatch, scheme):
    X, Y, groups = ar_runs()
    spy = PathSpy(monkeypatch)
    params = dict(
        cv=LeaveOneGroupOut(),
        multioutput="raw_values",
        permutation_type={"shuffle_within": "shuffle"}.get(scheme, scheme),
    )
    results = {}
    for solver in ("covariance", "svd"):
        ridge = BatchedRidge(alphas=ALPHAS, cv=LeaveOneGroupOut(), solver=solver)
        results[solver] = _scorer(ridge, **params).fit(X, Y, groups=groups)
    assert spy.built == [CovariancePermutedProblem, PermutedRidgeProblem]
    cov, svd = results["covariance"], results["svd"]
    assert_allclose(
        cov.permutation_scores_, svd.permutation_scores_, rtol=1e-10, atol=1e-12
    )
    assert_allclose(cov.score_, svd.score_, rtol=1e-10, atol=1e-12)
    assert_array_equal(cov.pvalue_, svd.pvalue_)
    expected = naive_null(
        X,
        Y,
        groups,
        LeaveOneGroupOut(),
        LeaveOneGroupOut(),
        ALPHAS,
        dict(
            random_state=0,
            n_permutations=12,
            permutation_type=params["permutation_type"],
        ),
    )
    assert_allclose(cov.permutation_scores_, expected, rtol=1e-10, atol=1e-12)


def test_observed_score_matches_sklearn_permutation_test_score():
    X, Y, groups = ar_runs(n_targets=1)
    y = Y[:, 0]
    ridge = BatchedRidge(alphas=ALPHAS, cv=5, solver="covariance")
    expected = permutation_test_score(ridge, X, y, cv=KFold(4), n_permutations=1)[0]
    perm = _scorer(ridge, cv=KFold(4)).fit(X, y)
    assert abs(perm.score_ - expected) < 1e-10


@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("alpha_per_target", [True, False])
def test_iid_shuffle_kfold_matches_svd(monkeypatch, fit_intercept, alpha_per_target):
    X, Y, _ = ar_runs(seed=1, n_targets=4)
    spy = PathSpy(monkeypatch)
    null = {}
    for solver in ("covariance", "svd"):
        ridge = BatchedRidge(
            alphas=ALPHAS,
            cv=KFold(3, shuffle=True, random_state=1),
            solver=solver,
            fit_intercept=fit_intercept,
            alpha_per_target=alpha_per_target,
        )
        perm = _scorer(
            ridge,
            cv=KFold(4, shuffle=True, random_state=2),
            multioutput="raw_values",
            scoring=("r2", "correlation", "neg_mean_squared_error"),
        ).fit(X, Y)
        null[solver] = perm
    assert spy.built == [CovariancePermutedProblem, PermutedRidgeProblem]
    for name in ("r2", "correlation", "neg_mean_squared_error"):
        assert_allclose(
            null["covariance"].permutation_scores_[name],
            null["svd"].permutation_scores_[name],
            rtol=1e-10,
            atol=1e-12,
        )


def test_group_folds_and_float32(monkeypatch):
    X, Y, groups = ar_runs(seed=2, lengths=(70, 45, 60, 52, 66, 48), n_targets=2)
    spy = PathSpy(monkeypatch)
    params = dict(
        cv=GroupKFold(3), multioutput="raw_values", permutation_type="circular_shift"
    )
    out = {}
    for solver in ("auto", "svd"):
        ridge = BatchedRidge(alphas=ALPHAS, cv=GroupKFold(2), solver=solver)
        out[solver] = _scorer(ridge, **params).fit(X, Y, groups=groups)
    assert spy.built == [CovariancePermutedProblem, PermutedRidgeProblem]
    assert_allclose(
        out["auto"].permutation_scores_,
        out["svd"].permutation_scores_,
        rtol=1e-10,
        atol=1e-12,
    )
    out32 = {}
    for solver in ("covariance", "svd"):
        ridge = BatchedRidge(
            alphas=ALPHAS, cv=GroupKFold(2), solver=solver, dtype="float32"
        )
        out32[solver] = _scorer(ridge, **params).fit(
            X.astype(np.float32), Y.astype(np.float32), groups=groups
        )
    assert_allclose(
        out32["covariance"].permutation_scores_,
        out32["svd"].permutation_scores_,
        rtol=1e-4,
        atol=1e-4,
    )


@pytest.mark.parametrize(
    "library", ["torch", pytest.param("jax", marks=pytest.mark.slow)]
)
def test_backends_equal_numpy(monkeypatch, library):
    pytest.importorskip(library)
    X, Y, groups = ar_runs(seed=7)
    spy = PathSpy(monkeypatch)
    params = dict(cv=LeaveOneGroupOut(), multioutput="raw_values")
    ridge = BatchedRidge(alphas=ALPHAS, cv=LeaveOneGroupOut(), dtype="float64")
    ref = _scorer(ridge.set_params(solver="svd"), **params).fit(X, Y, groups=groups)
    out = _scorer(ridge.set_params(solver="covariance"), device=library, **params)
    out.fit(X, Y, groups=groups)
    assert spy.built == [PermutedRidgeProblem, CovariancePermutedProblem]
    assert_allclose(
        out.permutation_scores_, ref.permutation_scores_, rtol=1e-10, atol=1e-12
    )


def test_problem_pickles_for_cluster_tasks():
    import pickle

    from skbatch._ridge.cv import cv_scheme
    from skbatch.backend import resolve_backend

    X, Y, groups = ar_runs(seed=8)
    splits = list(LeaveOneGroupOut().split(X, Y, groups))
    ridge = BatchedRidge(alphas=ALPHAS, cv=LeaveOneGroupOut(), solver="covariance")
    spec = ridge.__skbatch_ridge_spec__()

    def inner(X_train, Y_train, train):
        return cv_scheme(spec.cv).split(X_train, Y_train, groups=groups[train])

    permutation = dict(
        entropy=1, groups=groups, permutation_type="circular_shift", block_size=None
    )
    problem = CovariancePermutedProblem(
        X,
        Y,
        splits,
        spec,
        inner,
        resolve_backend("numpy"),
        np.dtype(np.float64),
        "r2",
        n_permutations=5,
        permutation=permutation,
    )
    again = pickle.loads(pickle.dumps(problem))
    assert_array_equal(again(np.arange(5)), problem(np.arange(5)))


def test_single_alpha_skips_inner_folds(monkeypatch):
    X, Y, groups = ar_runs(seed=3)
    spy = PathSpy(monkeypatch)
    params = dict(cv=LeaveOneGroupOut(), multioutput="raw_values")
    out = {
        solver: _scorer(BatchedRidge(alphas=[3.0], cv=4, solver=solver), **params).fit(
            X, Y, groups=groups
        )
        for solver in ("covariance", "svd")
    }
    assert spy.built == [CovariancePermutedProblem, PermutedRidgeProblem]
    assert_allclose(
        out["covariance"].permutation_scores_,
        out["svd"].permutation_scores_,
        rtol=1e-10,
        atol=1e-12,
    )


def test_auto_takes_the_svd_where_the_rule_says(monkeypatch):
    X, Y, groups = ar_runs(seed=4)
    spy = PathSpy(monkeypatch)
    # Fewer than 2 training rows per feature in an inner fold: the SVD.
    wide = np.hstack([X, np.random.default_rng(0).standard_normal((X.shape[0], 60))])
    _scorer(BatchedRidge(alphas=ALPHAS, cv=3), cv=KFold(3)).fit(wide, Y)
    # Leave-one-out inner CV: the SVD.
    _scorer(BatchedRidge(alphas=ALPHAS), cv=KFold(3)).fit(X, Y)
    assert spy.built == [PermutedRidgeProblem, PermutedRidgeProblem]
    # Ill-conditioned past what the covariance resolves: decomposed, then the SVD.
    graded = X * np.array([1.0, 1e-6, 1.0, 1.0])
    graded[:, 1] += X[:, 0] * 1e-7
    tiny = BatchedRidge(alphas=[1e-12, 1e-10], cv=3)
    auto = _scorer(tiny, cv=KFold(3)).fit(graded, Y)
    assert spy.built[-1] is PermutedRidgeProblem
    svd = _scorer(
        BatchedRidge(alphas=[1e-12, 1e-10], cv=3, solver="svd"), cv=KFold(3)
    ).fit(graded, Y)
    assert_allclose(auto.permutation_scores_, svd.permutation_scores_)


def test_forced_covariance_without_folds_is_refused():
    X, Y, _ = ar_runs()
    with pytest.raises(ValueError, match="solver='covariance'"):
        _scorer(BatchedRidge(alphas=ALPHAS, cv=None, solver="covariance")).fit(X, Y)


def test_memory_checked_for_the_covariance_before_any_moment(monkeypatch):
    X, Y, groups = ar_runs()
    calls = []
    check = CovariancePermutedProblem.check_memory.__func__

    def recorded(cls, *args, **kwargs):
        calls.append(kwargs["max_memory_gb"])
        return check(cls, *args, **kwargs)

    monkeypatch.setattr(
        CovariancePermutedProblem, "check_memory", classmethod(recorded)
    )
    ridge = BatchedRidge(alphas=ALPHAS, cv=LeaveOneGroupOut(), solver="covariance")
    _scorer(ridge, cv=LeaveOneGroupOut(), max_memory_gb=0.5).fit(X, Y, groups=groups)
    assert calls == [0.5]
    splits = list(LeaveOneGroupOut().split(X, Y, groups))
    spec = ridge.__skbatch_ridge_spec__()
    from skbatch._ridge.cv import cv_scheme
    from skbatch.backend import resolve_backend

    schemes = [
        cv_scheme(spec.cv).split(X[train], Y[train], groups=groups[train])
        for train, _ in splits
    ]

    def boom(*args, **kwargs):
        raise AssertionError("moments formed")

    monkeypatch.setattr(covariance_resampling._linalg, "gram_moments", boom)
    with pytest.raises(ValueError, match="GB"):
        CovariancePermutedProblem.check_memory(
            X,
            Y,
            splits,
            spec,
            schemes,
            resolve_backend("cpu"),
            np.dtype(np.float64),
            n_permutations=10,
            max_memory_gb=1e-5,
        )


def test_held_bytes_count_moments_and_bases():
    # EEG shape: 8 trials, leave one out within leave one out, 1,105 columns.
    n, p, t = 10240, 1105, 64
    held = CovariancePermutedProblem.held_nbytes(n, p, 8, 8 * 8, 1280, 8, None)
    # X, 8 atoms' moments, 64 bases, and 3 p x p working matrices.
    assert held >= 8 * (n * p + (8 + 64 + 3) * p * p)
    assert held < 8 * (n * p + (8 + 64 + 3) * p * p) * 1.05
    device, _ = CovariancePermutedProblem.item_bytes(n, t, p, 8, 1280, 9, np.float64)
    # At least the gathered targets and every atom's cross-moments.
    assert device >= 8 * t * (n + 8 * p)


# BootstrapEstimator: replicates that draw whole runs sum the runs' products.


class RunSpy:
    """Which replicate problems summed the runs' products."""

    def __init__(self, monkeypatch, disable=False):
        from skbatch._ridge.problems import replicates

        self.summed = []
        original = replicates.BootstrapRidgeProblem.moment_runs

        def spy(*args, **kwargs):
            runs = None if disable else original(*args, **kwargs)
            self.summed.append(runs is not None)
            return runs

        monkeypatch.setattr(
            replicates.BootstrapRidgeProblem, "moment_runs", staticmethod(spy)
        )


def _boot(estimator, **params):
    from skbatch import BootstrapEstimator

    params = {"n_bootstrap": 20, "random_state": 3, "return_samples": True, **params}
    return BootstrapEstimator(estimator, **params)


def naive_run_replicates(estimator, X, Y, groups, n_bootstrap, random_state, sw):
    """Refits of scikit-learn's Ridge with each replicate's counts of the
    rows (whole runs drawn) as sample weights."""
    from skbatch.random import bootstrap_counts

    counts = bootstrap_counts(
        resolve_entropy(random_state), np.arange(n_bootstrap), X.shape[0], groups
    )
    coef, intercept = [], []
    for row_counts in counts:
        weight = row_counts * (1.0 if sw is None else sw)
        model = Ridge(alpha=estimator.alpha, fit_intercept=estimator.fit_intercept).fit(
            X, Y, sample_weight=weight
        )
        coef.append(model.coef_)
        intercept.append(model.intercept_)
    return np.array(coef), np.array(intercept)


@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("per_target", [False, True])
def test_run_bootstrap_matches_naive_refits(
    monkeypatch, fit_intercept, weighted, per_target
):
    X, Y, groups = ar_runs(seed=5, lengths=(70, 45, 60, 52, 66, 48))
    # Runs labelled out of order and not consecutive in the rows.
    groups = np.array([3, 0, 5, 1, 4, 2])[groups]
    groups = np.roll(groups, 17)
    sw = np.random.default_rng(1).uniform(0.2, 2.0, X.shape[0]) if weighted else None
    alpha = np.array([0.5, 3.0, 40.0]) if per_target else 2.0
    ridge = Ridge(alpha=alpha, fit_intercept=fit_intercept)
    spy = RunSpy(monkeypatch)
    fit = {} if sw is None else {"sample_weight": sw}
    boot = _boot(ridge).fit(X, Y, groups=groups, **fit)
    assert spy.summed and all(spy.summed)
    expected_coef, expected_intercept = naive_run_replicates(
        ridge, X, Y, groups, 20, 3, sw
    )
    assert_allclose(
        boot.results_["coef_"].samples, expected_coef, rtol=1e-10, atol=1e-12
    )
    if fit_intercept:
        assert_allclose(
            boot.results_["intercept_"].samples,
            expected_intercept,
            rtol=1e-10,
            atol=1e-12,
        )


@pytest.mark.parametrize("dtype, rtol", [("float64", 1e-10), ("float32", 2e-4)])
def test_run_bootstrap_intervals_equal_the_row_path(monkeypatch, dtype, rtol):
    X, Y, groups = ar_runs(seed=6, lengths=(70, 45, 60, 52, 66, 48))
    ridge = BatchedRidge(alphas=ALPHAS, cv=LeaveOneGroupOut(), dtype=dtype)
    X, Y = X.astype(dtype), Y.astype(dtype)
    results = {}
    for disable in (False, True):
        with monkeypatch.context() as patch:
            spy = RunSpy(patch, disable=disable)
            results[disable] = _boot(ridge, n_bootstrap=40).fit(X, Y, groups=groups)
            assert spy.summed == [not disable] * len(spy.summed) and spy.summed
    runs, rows = results[False], results[True]
    for name in ("coef_", "intercept_"):
        a, b = runs.results_[name], rows.results_[name]
        scale = np.abs(b.samples).max()
        assert_allclose(a.samples, b.samples, rtol=rtol, atol=rtol * scale)
        assert_allclose(a.ci_lower, b.ci_lower, rtol=rtol, atol=rtol * scale)
        assert_allclose(a.ci_upper, b.ci_upper, rtol=rtol, atol=rtol * scale)


def test_run_products_only_where_they_are_smaller_than_x():
    from skbatch._ridge.problems import BootstrapRidgeProblem

    groups = np.repeat(np.arange(8), 100)
    assert len(BootstrapRidgeProblem.moment_runs(800, 100, groups, None)) == 8
    # Blocks within runs, rows drawn one by one, or runs x columns past n.
    assert BootstrapRidgeProblem.moment_runs(800, 100, groups, 10) is None
    assert BootstrapRidgeProblem.moment_runs(800, 100, None, None) is None
    assert BootstrapRidgeProblem.moment_runs(800, 101, groups, None) is None
    fixed_rows, per_rows, _ = BootstrapRidgeProblem.nbytes(
        800, 99, 5, 8, copies_y=False, gather_buffers=0
    )
    fixed_runs, per_runs, _ = BootstrapRidgeProblem.nbytes(
        800, 99, 5, 8, copies_y=False, gather_buffers=0, runs=8
    )
    # The runs' products held, no weighted copy of X per replicate.
    assert fixed_runs - fixed_rows >= 8 * 8 * 100 * (100 + 5)
    assert per_rows - per_runs >= 1.5 * 8 * (2 * 99 * 800 - 8)


def test_planned_bytes_cover_the_traced_peak():
    import tracemalloc

    from skbatch._ridge.cv import cv_scheme
    from skbatch.backend import resolve_backend

    X, Y, groups = ar_runs(
        seed=9, lengths=(600, 450, 520, 580, 610, 470), p=40, n_targets=4
    )
    splits = list(LeaveOneGroupOut().split(X, Y, groups))
    spec = BatchedRidge(
        alphas=ALPHAS, cv=LeaveOneGroupOut(), solver="covariance"
    ).__skbatch_ridge_spec__()

    def inner(X_train, Y_train, train):
        return cv_scheme(spec.cv).split(X_train, Y_train, groups=groups[train])

    permutation = dict(
        entropy=1, groups=groups, permutation_type="circular_shift", block_size=None
    )
    tracemalloc.start()
    problem = CovariancePermutedProblem(
        X,
        Y,
        splits,
        spec,
        inner,
        resolve_backend("numpy"),
        np.dtype(np.float64),
        "r2",
        n_permutations=16,
        permutation=permutation,
    )
    problem(np.arange(16))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    planned = problem.fixed_bytes + 16 * problem.device_bytes_per_item
    assert peak <= planned
    # Not a gross overcount either: the moments and bases are most of it.
    assert peak >= 0.2 * planned
