"""The ridge solver layer: one fast-path rule, CV schemes behind a registry."""

import ast
import pathlib
import re

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.base import clone
from sklearn.linear_model import LinearRegression, Ridge
from sklearn.metrics import r2_score
from sklearn.model_selection import KFold, LeavePOut, permutation_test_score

import skbatch.bootstrap
import skbatch.permutation
from skbatch import BatchedRidge, BootstrapEstimator, PermutationScorer
from skbatch._backends import LIBRARIES
from skbatch._ridge import cv as cv_module
from skbatch._ridge import ridge_spec
from skbatch.random import bootstrap_counts, resolve_entropy

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


def test_a_registered_scheme_serves_the_permutation_fast_path(
    leave_two_out, monkeypatch
):
    X, Y = make_data(14, 3, 2, seed=2)
    ran = []
    run_problem = skbatch.permutation.run_problem
    monkeypatch.setattr(
        skbatch.permutation,
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
    for module in (skbatch.bootstrap, skbatch.permutation):
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
    counts = bootstrap_counts(resolve_entropy(5), np.arange(8), len(y))
    for k, count in enumerate(counts):
        rows = np.repeat(np.arange(len(y)), count)
        fitted = clone(estimator).fit(X[rows], y[rows])
        assert_allclose(boot.results_["coef_"].samples[k], fitted.coef_, rtol=1e-12)


def test_permutation_fast_path_scores_float32_data_in_float64(monkeypatch):
    # Ties are judged at the compute precision: the null of a scikit-learn
    # estimator is computed in float64 whatever X, as precisely as its refits.
    X, Y = make_data(40, 3, 1, seed=6)
    X, y = X.astype(np.float32), Y[:, 0].astype(np.float32)
    dtypes = []
    real = skbatch.permutation.PermutedRidgeProblem

    class Spy(real):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            dtypes.append(self.dtype)

    monkeypatch.setattr(skbatch.permutation, "PermutedRidgeProblem", Spy)
    perm = PermutationScorer(Ridge(alpha=1.0), n_permutations=9, cv=KFold(4))
    perm.fit(X, y)
    assert dtypes == [np.float64]
    score, _, pvalue = permutation_test_score(
        Ridge(alpha=1.0), X, y, cv=KFold(4), n_permutations=9, random_state=0
    )
    assert_allclose(perm.score_, score, rtol=1e-4)


# --- layering -----------------------------------------------------------------

ESTIMATOR_MODULES = ("ridge", "banded", "bootstrap", "permutation")


@pytest.mark.parametrize("name", ESTIMATOR_MODULES)
def test_estimators_import_no_private_name_of_one_another(name):
    tree = ast.parse((PACKAGE / f"{name}.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
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
