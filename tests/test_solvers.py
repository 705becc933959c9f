"""The ridge solver layer: one fast-path rule, CV schemes behind a registry."""

import ast
import pathlib
import re
import warnings

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.base import clone
from sklearn.linear_model import LinearRegression, Ridge
from sklearn.metrics import r2_score
from sklearn.model_selection import KFold, LeavePOut, permutation_test_score

import skbatch._permutation.paths
import skbatch._ridge.banded
import skbatch.bootstrap
from skbatch import BatchedRidge, BootstrapEstimator, PermutationScorer
from skbatch._backends import LIBRARIES
from skbatch._ridge import cv as cv_module
from skbatch._ridge import ridge_spec
from skbatch.random import bootstrap_counts, bootstrap_rows, resolve_entropy

PACKAGE = pathlib.Path(skbatch.__file__).parent


def make_data(n, p, t, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p))
    Y = X @ rng.standard_normal((p, t)) + rng.standard_normal((n, t))
    return X, Y


# --- a new CV scheme is one class and one registry line ----------------------


class LeaveTwoOut(cv_module.KFold):
    """Every pair of rows held out once."""

    def splitter(self):
        return LeavePOut(2)


@pytest.fixture
def leave_two_out(monkeypatch):
    monkeypatch.setitem(cv_module.CV_SCHEMES, "leave-two-out", LeaveTwoOut)
    return "leave-two-out"


# A short grid on small data, on purpose: its edge is no news.
@pytest.mark.filterwarnings("ignore::skbatch.AlphaEdgeWarning")
def test_a_registered_scheme_fits_like_a_hand_loop(leave_two_out):
    X, Y = make_data(12, 3, 4, seed=1)
    alphas = np.array([0.1, 1.0, 10.0, 100.0])
    model = BatchedRidge(alphas=alphas, cv=leave_two_out, scoring="r2").fit(X, Y)
    # Each alpha's score: the mean over the 66 pairs of the held-out R^2.
    scores = np.zeros((len(alphas), Y.shape[1]))
    splits = list(LeavePOut(2).split(X))
    for k, alpha in enumerate(alphas):
        for train, test in splits:
            fitted = Ridge(alpha=alpha).fit(X[train], Y[train])
            scores[k] += r2_score(
                Y[test], fitted.predict(X[test]), multioutput="raw_values"
            )
    scores /= len(splits)
    assert_array_equal(model.alpha_, alphas[np.argmax(scores, axis=0)])
    assert_allclose(model.best_score_, scores.max(axis=0), rtol=1e-8)
    for j in range(Y.shape[1]):
        reference = Ridge(alpha=model.alpha_[j]).fit(X, Y[:, j])
        assert_allclose(model.coef_[j], reference.coef_, rtol=1e-8, atol=1e-10)


# A short grid on small data, on purpose: its edge is no news.
@pytest.mark.filterwarnings("ignore::skbatch.AlphaEdgeWarning")
def test_a_registered_scheme_serves_the_permutation_fast_path(
    leave_two_out, monkeypatch
):
    X, Y = make_data(14, 3, 2, seed=2)
    ran = []
    run_problem = skbatch._permutation.paths.run_problem
    monkeypatch.setattr(
        skbatch._permutation.paths,
        "run_problem",
        lambda problem, *a, **k: ran.append(problem) or run_problem(problem, *a, **k),
    )
    params = dict(n_permutations=19, cv=KFold(2), multioutput="raw_values")
    named = PermutationScorer(BatchedRidge(alphas=[1.0, 10.0], cv=leave_two_out))
    named.set_params(**params).fit(X, Y)
    assert len(ran) == 1
    splitter = PermutationScorer(BatchedRidge(alphas=[1.0, 10.0], cv=LeavePOut(2)))
    splitter.set_params(**params).fit(X, Y)
    assert_allclose(named.score_, splitter.score_, rtol=1e-12)
    assert_array_equal(named.pvalue_, splitter.pvalue_)


def test_unknown_cv_names_are_refused_with_the_registered_ones(leave_two_out):
    X, Y = make_data(10, 2, 1)
    with pytest.raises(ValueError, match="cv.*'gcv'.*'leave-two-out'.*got 'loo'"):
        BatchedRidge(cv="loo").fit(X, Y)


def test_a_scheme_refuses_scorings_it_does_not_compute():
    X, Y = make_data(10, 2, 1)
    with pytest.raises(ValueError, match="scoring"):
        BatchedRidge(cv="gcv", scoring="r2").fit(X, Y)


# --- one rule decides every fast path -----------------------------------------


@pytest.mark.parametrize(
    ("estimator", "batched"),
    [
        (Ridge(alpha=2.0), True),
        (Ridge(alpha=2.0, solver="svd"), True),
        (Ridge(alpha=2.0, solver="cholesky"), True),
        (Ridge(alpha=2.0, solver="sag", tol=1e-12, max_iter=100_000), False),
        (Ridge(alpha=2.0, solver="lsqr"), False),
        (Ridge(alpha=2.0, positive=True), False),
        (LinearRegression(), True),
        (LinearRegression(positive=True), False),
        (BatchedRidge(alphas=2.0), True),
    ],
    ids=repr,
)
def test_bootstrap_and_permutation_take_the_same_paths(estimator, batched, monkeypatch):
    X, Y = make_data(30, 3, 2, seed=3)
    ran = []
    for module in (skbatch.bootstrap, skbatch._permutation.paths):
        real = module.run_problem

        def spy(problem, *args, real=real, **kwargs):
            ran.append(type(problem).__name__)
            return real(problem, *args, **kwargs)

        monkeypatch.setattr(module, "run_problem", spy)
    BootstrapEstimator(clone(estimator), n_bootstrap=5).fit(X, Y)
    PermutationScorer(clone(estimator), n_permutations=5).fit(X, Y)
    expected = ["BootstrapRidgeProblem", "PermutedRidgeProblem"] if batched else []
    assert [name for name in ran if name != "TargetProblem"] == expected
    assert (ridge_spec(estimator) is not None) == batched


def test_bootstrap_of_an_iterative_solver_is_its_own_refits():
    # sag stops at a tolerance: the replicates are sklearn's own fits on the
    # resampled rows, not the exact ridge solution.
    X, Y = make_data(25, 3, 1, seed=4)
    y = Y[:, 0]
    estimator = Ridge(alpha=1.0, solver="sag", tol=1e-2, random_state=0)
    boot = BootstrapEstimator(
        estimator, n_bootstrap=8, return_samples=True, random_state=5
    ).fit(X, y)
    # sag visits rows in order: the refit gets them in drawn order.
    drawn = bootstrap_rows(resolve_entropy(5), np.arange(8), len(y))
    for k, rows in enumerate(drawn):
        fitted = clone(estimator).fit(X[rows], y[rows])
        assert_allclose(boot.results_["coef_"].samples[k], fitted.coef_, rtol=1e-12)


def test_permutation_fast_path_scores_float32_data_in_float64(monkeypatch):
    # Ties are judged at the compute precision: the null of a scikit-learn
    # estimator is computed in float64 whatever X, as precisely as its refits.
    X, Y = make_data(40, 3, 1, seed=6)
    X, y = X.astype(np.float32), Y[:, 0].astype(np.float32)
    dtypes = []
    real = skbatch._ridge.banded.permuted.PermutedRidgeProblem

    class Spy(real):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            dtypes.append(self.dtype)

    # The class the fast path builds
    # (skbatch._ridge.banded.permuted.permuted_problem).
    monkeypatch.setattr(skbatch._ridge.banded.permuted, "PermutedRidgeProblem", Spy)
    perm = PermutationScorer(Ridge(alpha=1.0), n_permutations=9, cv=KFold(4))
    perm.fit(X, y)
    assert dtypes == [np.float64]
    score, _, pvalue = permutation_test_score(
        Ridge(alpha=1.0), X, y, cv=KFold(4), n_permutations=9, random_state=0
    )
    assert_allclose(perm.score_, score, rtol=1e-4)


# --- layering -----------------------------------------------------------------

ESTIMATOR_MODULES = ("ridge", "banded", "bootstrap", "permutation")


# The estimators' own private packages sit beside them and follow the rule.
ESTIMATOR_FILES = [f"{name}.py" for name in ESTIMATOR_MODULES] + sorted(
    str(path.relative_to(PACKAGE))
    for path in [
        *(PACKAGE / "_bootstrap").glob("*.py"),
        *(PACKAGE / "_permutation").glob("*.py"),
        *(PACKAGE / "_estimators").glob("banded_*.py"),
    ]
)


@pytest.mark.parametrize("name", ESTIMATOR_FILES)
def test_estimators_import_no_private_name_of_one_another(name):
    tree = ast.parse((PACKAGE / name).read_text())
    depth = name.count("/") + 1
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == depth:
            if node.module in ESTIMATOR_MODULES:
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, (name, node.module, private)


def test_every_constant_is_defined_once():
    constant = re.compile(r"^[A-Z][A-Z0-9_]*$")
    seen = {}
    # The library modules of skbatch._backends implement one surface: the
    # same names, each library's value.
    surface = [PACKAGE / "_backends" / f"{name}.py" for name in LIBRARIES]
    for path in sorted(set(PACKAGE.rglob("*.py")) - set(surface)):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else []
            for target in targets:
                if isinstance(target, ast.Name) and constant.match(target.id):
                    where = str(path.relative_to(PACKAGE))
                    assert target.id not in seen, (
                        target.id,
                        seen.get(target.id),
                        where,
                    )
                    seen[target.id] = where


# --- features on very different scales: solved on every path, or refused -----


def scaled_series(ratio, n=80, p=5, seed=0, column=0):
    """Autocorrelated features in runs of unequal length, one feature scaled.

    An AR(1) series restarting at each run (a subject, a session), feature
    ``column`` multiplied by ``ratio`` (a timestamp in nanoseconds beside
    standardised features), and targets depending on every feature.
    """
    rng = np.random.default_rng(seed)
    starts = {0, 17, 41, 50}
    X = np.empty((n, p))
    for i in range(n):
        fresh = rng.standard_normal(p)
        X[i] = fresh if i in starts else 0.7 * X[i - 1] + 0.5 * fresh
    Y = X @ rng.standard_normal((p, 2)) + 0.1 * rng.standard_normal((n, 2))
    X[:, column] *= ratio
    return X, Y


def exact_ridge(X, Y, alpha):
    """Ridge through Cholesky of the normal equations with unit-norm columns:
    its accuracy does not depend on the spread of the column norms."""
    X_centered, Y_centered = X - X.mean(axis=0), Y - Y.mean(axis=0)
    norms = np.linalg.norm(X_centered, axis=0)
    scaled = X_centered / norms
    gram = scaled.T @ scaled + np.diag(alpha / norms**2)
    coef = (np.linalg.solve(gram, scaled.T @ Y_centered) / norms[:, None]).T
    return coef, Y.mean(axis=0) - coef @ X.mean(axis=0)


@pytest.mark.filterwarnings("ignore:.*of targets chose the:UserWarning")
@pytest.mark.parametrize("ratio", [1e6, 1e8, 1e11])
@pytest.mark.parametrize("cv", [None, "gcv", 5])
def test_a_feature_on_a_far_larger_scale_is_fit_exactly(ratio, cv):
    """Not refused, and the other features' coefficients keep their digits
    (the SVD of the columns in their given order lost them: 3e-7 off at a
    ratio of 1e10)."""
    X, Y = scaled_series(ratio, column=2)
    model = BatchedRidge(alphas=[0.1, 1.0, 10.0], cv=cv, alpha_per_target=False)
    model.fit(X, Y)
    coef, intercept = exact_ridge(X, Y, model.alpha_)
    predictions = model.predict(X)
    assert_allclose(predictions, X @ coef.T + intercept, atol=1e-9 * np.ptp(Y))
    assert_allclose(
        np.delete(model.coef_, 2, axis=1), np.delete(coef, 2, axis=1), rtol=1e-9
    )


@pytest.mark.filterwarnings("ignore:The rows of y are autocorrelated:UserWarning")
@pytest.mark.filterwarnings("ignore:An ill-conditioned matrix")
def test_permutation_fast_path_scores_a_far_larger_feature_as_refits():
    X, Y = scaled_series(1e11, column=2)
    y = Y[:, 0]
    scorer = PermutationScorer(
        Ridge(alpha=1.0), cv=KFold(5), n_permutations=9, random_state=0
    ).fit(X, y)
    folds = KFold(5).split(X)
    expected = np.mean(
        [
            r2_score(
                y[test],
                X[test] @ exact_ridge(X[train], y[train, None], 1.0)[0][0]
                + exact_ridge(X[train], y[train, None], 1.0)[1][0],
            )
            for train, test in folds
        ]
    )
    assert_allclose(scorer.score_, expected, rtol=1e-9)


def test_bootstrap_replicates_of_a_far_larger_feature_are_exact_refits():
    X, Y = scaled_series(1e11, column=2)
    model = BootstrapEstimator(
        Ridge(alpha=1.0), n_bootstrap=6, random_state=0, return_samples=True
    ).fit(X, Y)
    counts = bootstrap_counts(resolve_entropy(0), np.arange(6), X.shape[0], None)
    for i, replicate in enumerate(counts):
        rows = np.repeat(np.arange(X.shape[0]), replicate)
        coef, _ = exact_ridge(X[rows], Y[rows], 1.0)
        assert_allclose(model.results_["coef_"].samples[i], coef, rtol=1e-8)


def refusing_paths():
    return {
        "BatchedRidge LOO": lambda X, y: BatchedRidge(alphas=[0.1, 1.0]).fit(X, y),
        "BatchedRidge GCV": lambda X, y: BatchedRidge(alphas=1.0, cv="gcv").fit(X, y),
        "BatchedRidge K-fold": lambda X, y: BatchedRidge(alphas=[1.0, 2.0], cv=5).fit(
            X, y
        ),
        "PermutationScorer": lambda X, y: PermutationScorer(
            Ridge(alpha=1.0), cv=KFold(5), n_permutations=9, random_state=0
        ).fit(X, y),
        "BootstrapEstimator": lambda X, y: BootstrapEstimator(
            Ridge(alpha=1.0), n_bootstrap=5, random_state=0
        ).fit(X, y),
    }


@pytest.mark.filterwarnings("ignore:The rows of y are autocorrelated:UserWarning")
@pytest.mark.parametrize("path", list(refusing_paths()))
def test_a_feature_too_large_to_resolve_is_refused_before_any_work(path, monkeypatch):
    """1e15 times the others: R^2 0.013 where the refits give 0.98, before.

    The refusal names the feature, the ratio and the fix, before any SVD or
    fit on all data runs."""
    from skbatch._ridge import problems

    X, Y = scaled_series(1e15)

    def no_work(*args, **kwargs):
        raise AssertionError("work ran before the column scales were checked")

    monkeypatch.setattr(problems.solver._linalg, "svd_decompose", no_work)
    monkeypatch.setattr(problems.solver._linalg.svd, "svd_decompose", no_work)
    monkeypatch.setattr(Ridge, "fit", no_work)
    with pytest.raises(
        ValueError,
        match=r"feature 0 has a norm \(once centred\) 9\.07e\+14 times .*Scaler",
    ):
        refusing_paths()[path](X, Y[:, 0])


# --- bootstrap replicates of an ill-conditioned X: each solved on its own ------


@pytest.mark.filterwarnings("ignore::scipy.linalg.LinAlgWarning")
@pytest.mark.parametrize("shape", [(40, 6), (12, 20)])
def test_bootstrap_replicates_of_a_rank_deficient_x_are_exact_in_any_batch(shape):
    """One condition test decided for a whole batch (replicates 0.05 apart
    between n_bootstrap=5 and 20), and an explicit inverse served systems of
    condition up to 5.6e14 (0.09 off). Each replicate is now as accurate as
    the minimum-norm least squares of its rows (alpha 1e-12 is below its
    rounding), whatever its batch."""
    n, p = shape
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, p))
    X[:, 3] = 2 * X[:, 2]
    X[:, 5] = X[:, 0] - X[:, 1]
    y = X @ rng.standard_normal(p) + 0.1 * rng.standard_normal(n)
    samples = {}
    for n_bootstrap in (5, 20):
        model = BootstrapEstimator(
            Ridge(alpha=1e-12),
            n_bootstrap=n_bootstrap,
            random_state=0,
            return_samples=True,
        ).fit(X, y)
        samples[n_bootstrap] = model.results_["coef_"].samples
    assert_allclose(samples[5], samples[20][:5], rtol=1e-8, atol=1e-10)
    counts = bootstrap_counts(resolve_entropy(0), np.arange(20), n, None)
    for i, replicate in enumerate(counts):
        rows = np.repeat(np.arange(n), replicate)
        X_rows, y_rows = X[rows] - X[rows].mean(axis=0), y[rows] - y[rows].mean()
        expected = np.linalg.lstsq(X_rows, y_rows, rcond=None)[0]
        assert_allclose(samples[20][i], expected, atol=1e-6)


# --- the same result however the work was cut: what is bitwise, what is not ---

# The agreement docs/user_guide/guarantees.rst states for work cut otherwise
# (batch sizes, budgets, threads), relative to the array's largest magnitude.
CUT_RTOL = {np.float64: 1e-12, np.float32: 1e-5}


def assert_same_to_rounding(actual, expected, dtype=np.float64):
    atol = CUT_RTOL[dtype] * np.max(np.abs(expected))
    assert_allclose(actual, expected, rtol=0, atol=atol)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_ridge_batches_agree_to_the_stated_tolerance(dtype):
    """A batch of one target is a matrix-vector product, of three a narrow
    GEMM: their last bits differ from the default batch's (6e-16), within
    the stated tolerance; the same batching twice is bitwise the same."""
    X, Y = make_data(80, 12, 40, seed=3)
    X, Y = X.astype(dtype), Y.astype(dtype)
    alphas = np.logspace(-2, 3, 6)
    default = BatchedRidge(alphas=alphas).fit(X, Y)
    for batch in (1, 3, 7):
        model = BatchedRidge(alphas=alphas, n_targets_batch=batch).fit(X, Y)
        assert_same_to_rounding(model.coef_, default.coef_, dtype)
        assert_same_to_rounding(model.intercept_, default.intercept_, dtype)
        assert_array_equal(model.alpha_, default.alpha_)
    again = BatchedRidge(alphas=alphas, n_targets_batch=7).fit(X, Y)
    assert_array_equal(again.coef_, model.coef_)


def test_bootstrap_cut_otherwise_agrees_to_the_stated_tolerance():
    """Budgets and a fit in another thread run other batch widths and BLAS
    thread splits (1e-16 to 2e-15 apart); the resamples themselves are the
    same bit for bit, and so is a rerun cut the same way."""
    import threading

    X, Y = make_data(300, 70, 8, seed=4)

    def fit(**params):
        return BootstrapEstimator(
            Ridge(alpha=1.0),
            n_bootstrap=24,
            random_state=0,
            return_samples=True,
            **params,
        ).fit(X, Y)

    default = fit()
    samples = default.results_["coef_"].samples
    for budget in (0.01, 0.03):
        cut = fit(max_memory_gb=budget).results_["coef_"].samples
        assert_same_to_rounding(cut, samples)
    threaded = {}
    worker = threading.Thread(target=lambda: threaded.setdefault("fit", fit()))
    worker.start()
    worker.join()
    assert_same_to_rounding(threaded["fit"].results_["coef_"].samples, samples)
    assert_same_to_rounding(
        threaded["fit"].results_["coef_"].standard_error,
        default.results_["coef_"].standard_error,
    )
    assert_array_equal(fit().results_["coef_"].samples, samples)
    entropy = resolve_entropy(0)
    whole = bootstrap_counts(entropy, np.arange(24), X.shape[0], None)
    parts = [
        bootstrap_counts(entropy, np.arange(start, stop), X.shape[0], None)
        for start, stop in ((0, 5), (5, 13), (13, 24))
    ]
    assert_array_equal(np.concatenate(parts), whole)


@pytest.mark.filterwarnings("ignore:The rows of y are autocorrelated:UserWarning")
def test_permutation_budgets_agree_to_the_stated_tolerance():
    X, Y = make_data(60, 8, 1, seed=5)
    params = dict(n_permutations=40, random_state=0, return_null=True, cv=KFold(4))
    default = PermutationScorer(Ridge(alpha=1.0), **params).fit(X, Y[:, 0])
    small = PermutationScorer(Ridge(alpha=1.0), max_memory_gb=3e-4, **params)
    small.fit(X, Y[:, 0])
    assert_same_to_rounding(small.permutation_scores_, default.permutation_scores_)
    assert small.pvalue_ == default.pvalue_


@pytest.mark.parametrize("kind", ["ridge", "permutation", "bootstrap"])
def test_inf_in_X_is_refused_by_the_finite_check_without_a_runtime_warning(kind):
    X = np.random.default_rng(0).standard_normal((30, 3))
    y = X[:, 0].copy()
    X[0, 0] = np.inf
    estimator = {
        "ridge": BatchedRidge(),
        "permutation": PermutationScorer(Ridge(), n_permutations=5),
        "bootstrap": BootstrapEstimator(Ridge(), n_bootstrap=5),
    }[kind]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.raises(ValueError, match="infinity"):
            estimator.fit(X, y)
