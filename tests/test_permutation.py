import contextlib
import pickle
import re

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy import stats
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.linear_model import LinearRegression, Ridge, RidgeCV
from sklearn.model_selection import (
    GridSearchCV,
    GroupKFold,
    KFold,
    cross_val_score,
    permutation_test_score,
)
from sklearn.neighbors import KNeighborsRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer
from sklearn.tree import DecisionTreeRegressor
from sklearn.utils import get_tags

import skbatch._permutation.paths as permutation_paths
import skbatch.streaming as streaming
from skbatch import AutocorrelationWarning, Backend, BatchedRidge, PermutationScorer
from skbatch._kernels.timeseries import autocorrelation_warning
from skbatch._ridge import problems
from skbatch._ridge.cv import cv_scheme
from skbatch._ridge.problems import PermutedRidgeProblem
from skbatch._ridge.spec import ridge_spec
from skbatch.random import permutation_indices
from skbatch.testing import simulate_oom

ALPHAS = np.logspace(-2, 3, 6)


def short_repr(estimator):
    """Test id: the estimator's repr on one line, ALPHAS by name."""
    text = " ".join(repr(estimator).split())
    return re.sub(r"array\(\[[^\]]*\]\)", "ALPHAS", text)


def make_data(seed=0, n=60, p=5, n_targets=None, signal=0.6):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p))
    size = n if n_targets is None else (n, n_targets)
    noise = rng.standard_normal(size)
    y = noise + signal * (X[:, 0] if n_targets is None else X[:, :1])
    return X, y


def generic(estimator):
    """The same model, hidden from the ridge fast path."""
    return make_pipeline(FunctionTransformer(), estimator)


class FailingRegressor(RegressorMixin, BaseEstimator):
    """Fails if any work reaches it: validation must come first."""

    def fit(self, X, y):
        raise RuntimeError("fit was called")


class GroupCheckingRegressor(RegressorMixin, BaseEstimator):
    """Fit on y = original sample index, X[:, 0] = row index: checks groups."""

    seen = []

    def __init__(self, groups=None):
        self.groups = groups

    def fit(self, X, y):
        rows = X[:, 0].astype(int)
        origins = np.asarray(y).astype(int)
        GroupCheckingRegressor.seen.append(
            (np.all(self.groups[rows] == self.groups[origins]), np.any(rows != origins))
        )
        self.mean_ = float(np.mean(y))
        return self

    def predict(self, X):
        return np.full(X.shape[0], self.mean_)


# --- score_ against scikit-learn ---------------------------------------------

# Where a BatchedRidge's grid edge is no news: grids short on purpose, for
# speed, and permutation_test_score's refits on every permuted y (those of
# PermutationScorer are silent).
GRID_EDGE_EXPECTED = pytest.mark.filterwarnings("ignore::skbatch.AlphaEdgeWarning")


@GRID_EDGE_EXPECTED
@pytest.mark.parametrize(
    "estimator",
    [
        Ridge(alpha=1.0),
        Ridge(alpha=0.3, fit_intercept=False),
        RidgeCV(),
        RidgeCV(alphas=ALPHAS, cv=3),
        LinearRegression(),
        BatchedRidge(),
        BatchedRidge(alphas=ALPHAS, cv="gcv"),
        BatchedRidge(alphas=ALPHAS, cv=4, alpha_per_target=False),
        DecisionTreeRegressor(random_state=0),
        KNeighborsRegressor(),
    ],
    ids=short_repr,
)
@pytest.mark.parametrize("scoring", [None, "neg_mean_squared_error"])
@pytest.mark.parametrize("n_targets", [None, 3])
@pytest.mark.slow
def test_score_matches_sklearn(estimator, scoring, n_targets):
    X, y = make_data(n_targets=n_targets)
    expected = permutation_test_score(
        estimator, X, y, cv=5, scoring=scoring, n_permutations=1
    )[0]
    perm = PermutationScorer(
        estimator, n_permutations=5, scoring=scoring, random_state=0
    ).fit(X, y)
    assert isinstance(perm.score_, float)
    assert abs(perm.score_ - expected) < 1e-10


@GRID_EDGE_EXPECTED
@pytest.mark.parametrize(
    "estimator",
    [Ridge(alpha=2.0), BatchedRidge(alphas=ALPHAS), KNeighborsRegressor()],
    ids=short_repr,
)
@pytest.mark.parametrize("scoring", [None, "neg_mean_absolute_error"])
def test_raw_values_match_loop_over_targets(estimator, scoring):
    X, Y = make_data(n_targets=4)
    perm = PermutationScorer(
        estimator,
        n_permutations=5,
        scoring=scoring,
        multioutput="raw_values",
        random_state=0,
    ).fit(X, Y)
    expected = [
        permutation_test_score(
            estimator, X, Y[:, j], scoring=scoring, n_permutations=1
        )[0]
        for j in range(Y.shape[1])
    ]
    assert perm.score_.shape == (4,)
    assert_allclose(perm.score_, expected, rtol=0, atol=1e-10)


def test_himalaya_estimator_through_generic_path():
    himalaya_ridge = pytest.importorskip("himalaya.ridge")
    from himalaya.backend import get_backend

    # himalaya keeps a module-global backend, numpy unless someone set another.
    assert get_backend().__name__.endswith("numpy")
    X, y = make_data(n=50, p=4)
    estimator = himalaya_ridge.RidgeCV(alphas=[0.1, 1.0, 10.0])
    expected = permutation_test_score(estimator, X, y, n_permutations=1)[0]
    perm = PermutationScorer(
        estimator, n_permutations=9, return_null=True, random_state=0
    ).fit(X, y)
    assert abs(perm.score_ - expected) < 1e-10
    indices = permutation_indices(0, [4], len(y))
    expected_null = permutation_test_score(
        estimator, X, y[indices[0]], n_permutations=1
    )[0]
    assert abs(perm.permutation_scores_[4] - expected_null) < 1e-10
    assert perm.pvalue_ == (np.sum(perm.permutation_scores_ >= perm.score_) + 1) / 10
    assert_allclose(perm.predict(X), perm.estimator_.predict(X))


# --- the null distribution ------------------------------------------------------


@GRID_EDGE_EXPECTED
@pytest.mark.parametrize(
    "estimator",
    [
        Ridge(alpha=1.0),
        LinearRegression(),
        RidgeCV(alphas=ALPHAS),
        RidgeCV(alphas=ALPHAS, cv=3),
        BatchedRidge(alphas=ALPHAS),
        BatchedRidge(alphas=ALPHAS, cv="gcv", alpha_per_target=False),
        BatchedRidge(alphas=ALPHAS, cv=3, scoring="correlation"),
    ],
    ids=short_repr,
)
@pytest.mark.parametrize("multioutput", ["uniform_average", "raw_values"])
@pytest.mark.filterwarnings("ignore:The groups parameter is ignored by KFold")
@pytest.mark.slow
def test_fast_and_generic_paths_give_the_same_null(estimator, multioutput):
    X, Y = make_data(n_targets=3, signal=0.3)
    groups = np.repeat(np.arange(6), 10)
    kwargs = dict(
        n_permutations=30, multioutput=multioutput, return_null=True, random_state=7
    )
    fast = PermutationScorer(estimator, **kwargs).fit(X, Y, groups=groups)
    slow = PermutationScorer(generic(estimator), **kwargs).fit(X, Y, groups=groups)
    assert_allclose(fast.score_, slow.score_, rtol=0, atol=1e-10)
    assert_allclose(
        fast.permutation_scores_, slow.permutation_scores_, rtol=0, atol=1e-8
    )
    assert_array_equal(fast.pvalue_, slow.pvalue_)
    assert_array_equal(fast.pvalue_fwer_, slow.pvalue_fwer_)


def test_ridge_family_never_refits(monkeypatch):
    def refit(*args, **kwargs):
        raise AssertionError("the generic path was taken")

    monkeypatch.setattr(permutation_paths, "_cv_score", refit)
    X, Y = make_data(n_targets=2)
    for estimator in (Ridge(), RidgeCV(), LinearRegression(), BatchedRidge()):
        PermutationScorer(estimator, n_permutations=5).fit(X, Y)


def test_null_matches_naive_loop_of_sklearn_refits():
    # The null is sklearn's cross-validated score of y[perm] for the permutations
    # skbatch.random draws from random_state.
    X, y = make_data()
    perm = PermutationScorer(
        RidgeCV(alphas=ALPHAS), n_permutations=8, return_null=True, random_state=3
    ).fit(X, y)
    indices = permutation_indices(3, np.arange(8), len(y))
    expected = [
        cross_val_score(RidgeCV(alphas=ALPHAS), X, y[idx], cv=KFold(5)).mean()
        for idx in indices
    ]
    assert_allclose(perm.permutation_scores_, expected, rtol=0, atol=1e-10)
    count = np.sum(np.asarray(expected) >= perm.score_)
    assert perm.pvalue_ == (count + 1) / 9


def test_pvalues_and_moments_follow_their_definitions():
    X, Y = make_data(n_targets=5, signal=0.25)
    perm = PermutationScorer(
        Ridge(),
        n_permutations=99,
        multioutput="raw_values",
        return_null=True,
        random_state=0,
    ).fit(X, Y)
    null = perm.permutation_scores_
    assert null.shape == (99, 5)
    assert_allclose(perm.pvalue_, ((null >= perm.score_).sum(axis=0) + 1) / 100)
    best = null.max(axis=1, keepdims=True)
    assert_allclose(perm.pvalue_fwer_, ((best >= perm.score_).sum(axis=0) + 1) / 100)
    assert np.all(perm.pvalue_fwer_ >= perm.pvalue_)
    assert_allclose(perm.null_mean_, null.mean(axis=0), rtol=1e-12)
    assert_allclose(perm.null_std_, null.std(axis=0, ddof=1), rtol=1e-10)

    uniform = PermutationScorer(
        Ridge(), n_permutations=99, return_null=True, random_state=0
    ).fit(X, Y)
    assert uniform.permutation_scores_.shape == (99,)
    assert_allclose(uniform.permutation_scores_, null.mean(axis=1), atol=1e-12)
    assert abs(uniform.score_ - perm.score_.mean()) < 1e-12
    assert uniform.pvalue_fwer_ == uniform.pvalue_


@pytest.mark.slow
def test_pvalues_are_uniform_without_signal():
    pvalues = [
        PermutationScorer(Ridge(), n_permutations=99, cv=3, random_state=seed)
        .fit(*make_data(seed, n=24, p=2, signal=0.0))
        .pvalue_
        for seed in range(200)
    ]
    assert stats.kstest(pvalues, "uniform").pvalue > 0.01


def test_strong_signal_gives_smallest_pvalue():
    X, y = make_data(signal=5.0)
    perm = PermutationScorer(Ridge(), n_permutations=199, random_state=0).fit(X, y)
    assert perm.pvalue_ == 1 / 200


# A null simulation: about 3 s.
@pytest.mark.slow
def test_family_wise_error_rate_is_controlled():
    hits = 0
    for seed in range(200):
        X, Y = make_data(seed, n=24, p=2, n_targets=8, signal=0.0)
        perm = PermutationScorer(
            Ridge(),
            n_permutations=99,
            cv=3,
            multioutput="raw_values",
            random_state=seed,
        ).fit(X, Y)
        assert np.all(perm.pvalue_fwer_ >= perm.pvalue_)
        hits += np.any(perm.pvalue_fwer_ <= 0.05)
    assert hits / 200 <= 0.09


# --- groups ------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:The groups parameter is ignored by KFold")
def test_permutations_stay_within_groups():
    n = 40
    groups = np.repeat(np.arange(5), 8)
    X = np.column_stack([np.arange(n), np.ones(n)]).astype(float)
    y = np.arange(n, dtype=float)
    GroupCheckingRegressor.seen.clear()
    perm = PermutationScorer(
        GroupCheckingRegressor(groups=groups), n_permutations=10, random_state=0
    ).fit(X, y, groups=groups)
    within, moved = zip(*GroupCheckingRegressor.seen)
    # 1 + 10 cross-validations of 5 folds, then the refit on all data.
    assert len(within) == 11 * 5 + 1
    assert all(within)
    assert sum(moved) >= 10 * 5
    assert 0 < perm.pvalue_ <= 1


@GRID_EDGE_EXPECTED
def test_groups_reach_the_splitter():
    X, y = make_data()
    groups = np.repeat(np.arange(6), 10)
    perm = PermutationScorer(Ridge(), cv=GroupKFold(3), n_permutations=5)
    expected = permutation_test_score(
        Ridge(), X, y, groups=groups, cv=GroupKFold(3), n_permutations=1
    )[0]
    assert abs(perm.fit(X, y, groups=groups).score_ - expected) < 1e-10


@GRID_EDGE_EXPECTED
@pytest.mark.parametrize(
    "estimator",
    [Ridge(alpha=1.0), BatchedRidge(alphas=ALPHAS)],
    ids=short_repr,
)
def test_explicit_splits_as_masks_or_negative_indices_give_the_same_test(estimator):
    """Splits are read as X[rows] would read them, on the batched paths too."""
    X, y = make_data()
    n = len(y)
    splits = list(KFold(4).split(X))
    spellings = {
        "masks": [
            (np.isin(np.arange(n), a), np.isin(np.arange(n), b)) for a, b in splits
        ],
        "negative": [(a - n, b - n) for a, b in splits],
    }
    args = dict(n_permutations=30, random_state=0, return_null=True)
    ref = PermutationScorer(estimator, cv=splits, **args).fit(X, y)
    expected = permutation_test_score(
        estimator, X, y, cv=splits, n_permutations=1, random_state=0
    )[0]
    assert ref.score_ == pytest.approx(expected, rel=1e-10)
    for spelling in spellings.values():
        perm = PermutationScorer(estimator, cv=spelling, **args).fit(X, y)
        assert perm.score_ == pytest.approx(ref.score_, rel=1e-12)
        assert_allclose(perm.permutation_scores_, ref.permutation_scores_, rtol=1e-12)
        assert perm.pvalue_ == ref.pvalue_


# --- invariance to how the work is split ------------------------------------------


def fit_null(estimator, X, Y, **kwargs):
    perm = PermutationScorer(
        estimator,
        n_permutations=20,
        multioutput="raw_values",
        return_null=True,
        random_state=11,
        **kwargs,
    )
    return perm.fit(X, Y)


def assert_same_result(a, b):
    assert_allclose(a.permutation_scores_, b.permutation_scores_, rtol=1e-12)
    assert_array_equal(a.pvalue_, b.pvalue_)
    assert_array_equal(a.pvalue_fwer_, b.pvalue_fwer_)


def count_batches(monkeypatch):
    calls = []
    scores = PermutedRidgeProblem.scores

    def counted(self, indices):
        calls.append(len(indices))
        return scores(self, indices)

    monkeypatch.setattr(PermutedRidgeProblem, "scores", counted)
    return calls


@pytest.mark.parametrize("max_items", [1, 3])
def test_identical_under_simulated_oom(max_items, monkeypatch):
    X, Y = make_data(n_targets=2)
    reference = fit_null(BatchedRidge(alphas=ALPHAS), X, Y)
    calls = count_batches(monkeypatch)
    with simulate_oom(max_items=max_items):
        result = fit_null(BatchedRidge(alphas=ALPHAS), X, Y)
    assert max(calls[1:]) <= max_items
    assert_same_result(reference, result)


def test_identical_for_any_budget(monkeypatch):
    X, Y = make_data(n_targets=2)
    large = fit_null(Ridge(), X, Y, max_memory_gb=10.0)
    calls = count_batches(monkeypatch)
    # 40 kB: the decompositions and room for a few permutations per batch.
    tiny = fit_null(Ridge(), X, Y, max_memory_gb=4e-5)
    assert 1 <= max(calls[1:]) <= 5
    assert_same_result(large, tiny)


def test_identical_for_any_n_jobs():
    X, Y = make_data(n_targets=2)
    fast = fit_null(Ridge(), X, Y)
    one = fit_null(generic(Ridge()), X, Y, n_jobs=1)
    two = fit_null(generic(Ridge()), X, Y, n_jobs=2)
    assert_same_result(one, two)
    assert_allclose(fast.permutation_scores_, two.permutation_scores_, atol=1e-10)


@pytest.mark.parametrize("device", ["torch", "jax"])
@pytest.mark.slow
def test_other_array_libraries_match_numpy(device):
    pytest.importorskip(device)
    X, Y = make_data(n_targets=2)
    reference = fit_null(BatchedRidge(alphas=ALPHAS), X, Y, device="cpu")
    result = fit_null(BatchedRidge(alphas=ALPHAS, dtype="float64"), X, Y, device=device)
    assert result.backend_.library == device
    assert_allclose(result.score_, reference.score_, atol=1e-10)
    assert_allclose(
        result.permutation_scores_, reference.permutation_scores_, atol=1e-10
    )
    assert_array_equal(result.pvalue_, reference.pvalue_)


# --- sklearn integration -------------------------------------------------------


def test_works_inside_grid_search():
    X, y = make_data()
    grid = {"estimator__alpha": [0.01, 100.0]}
    search = GridSearchCV(
        PermutationScorer(Ridge(), n_permutations=5, random_state=0), grid, cv=3
    ).fit(X, y)
    expected = GridSearchCV(Ridge(), {"alpha": grid["estimator__alpha"]}, cv=3).fit(
        X, y
    )
    assert search.best_params_["estimator__alpha"] == expected.best_params_["alpha"]
    assert abs(search.best_score_ - expected.best_score_) < 1e-10
    assert hasattr(search.best_estimator_, "pvalue_")


def test_pickles_and_reloads():
    X, Y = make_data(n_targets=2)
    perm = fit_null(BatchedRidge(alphas=ALPHAS), X, Y)
    loaded = pickle.loads(pickle.dumps(perm))
    assert_array_equal(loaded.predict(X), perm.predict(X))
    for name in ("score_", "pvalue_", "pvalue_fwer_", "null_mean_", "null_std_"):
        assert_array_equal(getattr(loaded, name), getattr(perm, name))
    assert loaded.backend_ == perm.backend_
    refit = pickle.loads(pickle.dumps(perm)).fit(X, Y)
    assert_same_result(refit, perm)


def test_predict_and_score_delegate_to_estimator_fit_on_all_data():
    X, y = make_data()
    perm = PermutationScorer(Ridge(alpha=3.0), n_permutations=5).fit(X, y)
    reference = Ridge(alpha=3.0).fit(X, y)
    assert_allclose(perm.predict(X), reference.predict(X))
    assert perm.score(X, y) == pytest.approx(reference.score(X, y))
    assert perm.n_features_in_ == 5
    assert isinstance(PermutationScorer().fit(X, y).estimator_, BatchedRidge)


def test_tags_follow_the_estimator():
    from sklearn.ensemble import HistGradientBoostingRegressor

    assert get_tags(
        PermutationScorer(HistGradientBoostingRegressor())
    ).input_tags.allow_nan
    assert not get_tags(PermutationScorer(Ridge())).input_tags.allow_nan
    assert get_tags(PermutationScorer(Ridge())).input_tags.sparse


def test_dataframe_keeps_feature_names():
    pd = pytest.importorskip("pandas")
    X, y = make_data()
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])])
    perm = PermutationScorer(Ridge(), n_permutations=5, random_state=0).fit(frame, y)
    assert_array_equal(perm.feature_names_in_, frame.columns)
    assert_allclose(perm.predict(frame), Ridge().fit(X, y).predict(X))
    assert_allclose(
        perm.score_, PermutationScorer(Ridge(), n_permutations=5).fit(X, y).score_
    )


# --- bad input --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"n_permutations": 0}, "n_permutations must be an int >= 1, got 0"),
        ({"n_permutations": -5}, "n_permutations.*-5"),
        ({"n_permutations": 2.5}, "n_permutations.*2.5"),
        ({"n_permutations": True}, "n_permutations.*True"),
        ({"scoring": "not_a_scorer"}, "scoring.*'not_a_scorer'"),
        ({"scoring": 3}, "scoring.*3"),
        ({"multioutput": "variance_weighted"}, "multioutput.*'variance_weighted'"),
        ({"multioutput": "raw_values", "scoring": "max_error"}, "'max_error'"),
        ({"return_null": "yes"}, "return_null.*'yes'"),
        ({"max_memory_gb": -1.0}, "max_memory_gb.*-1.0"),
        ({"verbose": -1}, "verbose.*-1"),
    ],
)
def test_bad_parameters_raise_before_any_work(params, match):
    X, y = make_data()
    with pytest.raises(ValueError, match=match):
        PermutationScorer(FailingRegressor(), **params).fit(X, y)


@pytest.mark.parametrize(
    ("params", "error", "match"),
    [
        ({"cv": 100}, ValueError, "n_splits=100"),
        ({"cv": "five"}, ValueError, "cv"),
        ({"device": "cuda:99"}, RuntimeError, "cuda"),
    ],
)
def test_folds_and_device_are_refused_before_any_fit(params, error, match):
    X, y = make_data()
    with pytest.raises(error, match=match):
        PermutationScorer(FailingRegressor(), **params).fit(X, y)


@pytest.mark.parametrize(
    "estimator",
    [Ridge(), BatchedRidge(alphas=ALPHAS), BatchedRidge(alphas=ALPHAS, cv=3)],
    ids=short_repr,
)
def test_ridge_path_refuses_a_budget_before_any_svd(estimator, monkeypatch):
    """The data the fast path holds is planned from the shapes, as it runs."""
    X, y = make_data(n=400, p=30)
    budget = 1e-4
    with pytest.raises(ValueError, match=r"The data alone needs 0\.000519 GB") as error:
        PermutationScorer(Ridge(), n_permutations=50, max_memory_gb=budget).fit(X, y)
    # What it holds once decomposed, ranks at their bound: the figure above.
    X64, y64 = np.asarray(X, float), np.asarray(y, float)[:, None]
    splits = list(KFold(5).split(X))  # cv=5's folds
    problem = PermutedRidgeProblem(
        X64,
        y64,
        splits,
        ridge_spec(Ridge()),
        lambda X_train, Y_train, train: cv_scheme(None).split(X_train, Y_train),
        Backend("numpy"),
        np.float64,
        None,
        n_permutations=50,
        permutation=dict(
            entropy=0, groups=None, permutation_type="shuffle", block_size=None
        ),
    )
    assert f"{problem.fixed_bytes / 1e9:.3g}" in str(error.value)

    def no_svd(*args, **kwargs):
        raise AssertionError("an SVD ran before the memory check")

    monkeypatch.setattr(problems.solver._linalg, "svd_decompose", no_svd)
    monkeypatch.setattr(problems.solver._linalg.svd, "svd_decompose", no_svd)
    with pytest.raises(ValueError, match="The data alone needs"):
        PermutationScorer(estimator, n_permutations=50, max_memory_gb=budget).fit(X, y)


def test_generic_path_refuses_refits_beyond_the_budget_before_any_fit():
    """Each worker refits on a copy of the data: that must fit the budget."""
    X, y = make_data(n=4000, p=10)
    with pytest.raises(
        ValueError, match=r"PermutationScorer needs .* GB of host memory.*2 refit"
    ):
        PermutationScorer(FailingRegressor(), max_memory_gb=1e-5, n_jobs=2).fit(X, y)


def test_groups_of_wrong_length_raise_before_any_work():
    X, y = make_data()
    with pytest.raises(ValueError, match=r"groups.*\(59,\)"):
        PermutationScorer(FailingRegressor()).fit(X, y, groups=np.zeros(59))


def test_retained_null_is_checked_against_host_budget():
    X, Y = make_data(n_targets=10)
    perm = PermutationScorer(
        FailingRegressor(),
        n_permutations=10**6,
        multioutput="raw_values",
        return_null=True,
        max_memory_gb=0.01,
    )
    with pytest.raises(ValueError, match=r"0\.08.* GB.*0\.01 GB.*return_null=False"):
        perm.fit(X, Y)


@GRID_EDGE_EXPECTED
def test_ridge_path_batches_side_by_side_equal_batches_in_turn():
    from threadpoolctl import threadpool_limits

    X, Y = make_data(seed=23, n_targets=3)
    params = dict(
        n_permutations=60,
        multioutput="raw_values",
        return_null=True,
        random_state=4,
        max_memory_gb=1e-4,
    )
    with threadpool_limits(1, user_api="blas"):
        in_turn = PermutationScorer(BatchedRidge(alphas=[0.1, 10.0]), **params)
        in_turn.fit(X, Y)
    with threadpool_limits(2, user_api="blas"):
        side_by_side = PermutationScorer(BatchedRidge(alphas=[0.1, 10.0]), **params)
        side_by_side.fit(X, Y)
    assert_allclose(
        side_by_side.permutation_scores_, in_turn.permutation_scores_, rtol=1e-12
    )
    assert_array_equal(side_by_side.pvalue_, in_turn.pvalue_)


# --- false discovery rate ----------------------------------------------------------


def test_fdr_adjusted_follows_benjamini_hochberg():
    # Against the definition: the smallest (m / j) p_(j) over ranks j >= i.
    rng = np.random.default_rng(0)
    pvalues = rng.uniform(size=40) ** 3
    pvalues[::5] = np.round(pvalues[::5], 1)
    pvalues[7] = np.nan
    defined = ~np.isnan(pvalues)
    family = pvalues[defined]
    ranks = stats.rankdata(family, method="ordinal")
    m = family.size
    expected = [
        min(1.0, min(m / r * q for q, r in zip(family, ranks) if q >= p))
        for p in family
    ]
    adjusted = streaming.fdr_adjusted(pvalues)
    assert np.isnan(adjusted[7])
    assert_allclose(adjusted[defined], expected, rtol=1e-14)


def test_fdr_adjusted_equals_scipy_to_the_last_digit():
    control = getattr(stats, "false_discovery_control", None)
    if control is None:
        pytest.skip("scipy.stats.false_discovery_control needs scipy >= 1.11")
    rng = np.random.default_rng(1)
    for m in (1, 2, 7, 1000):
        pvalues = rng.uniform(size=m) ** 2
        pvalues[::3] = np.round(pvalues[::3], 2)
        assert_array_equal(streaming.fdr_adjusted(pvalues), control(pvalues))


def test_pvalue_fdr_adjusts_the_defined_targets():
    X, Y = make_data(n_targets=6, signal=0.3)
    # A constant target has an undefined correlation: NaN p-value.
    Y[:, 2] = 1.0
    with pytest.warns(UserWarning, match="undefined"):
        perm = PermutationScorer(
            Ridge(),
            n_permutations=49,
            scoring="correlation",
            multioutput="raw_values",
            random_state=0,
        ).fit(X, Y)
    assert np.isnan(perm.pvalue_fdr_[2])
    defined = ~np.isnan(perm.pvalue_)
    assert_array_equal(
        perm.pvalue_fdr_[defined], streaming.fdr_adjusted(perm.pvalue_[defined])
    )
    assert np.all(perm.pvalue_fdr_[defined] >= perm.pvalue_[defined])
    uniform = PermutationScorer(Ridge(), n_permutations=49, random_state=0).fit(X, Y)
    assert uniform.pvalue_fdr_ == uniform.pvalue_


# --- exact enumeration -------------------------------------------------------------


def ar_series(seed, n, n_targets=None, phi=0.8):
    """Rows of an AR(phi) process: autocorrelated, as time series are."""
    rng = np.random.default_rng(seed)
    shape = (n,) if n_targets is None else (n, n_targets)
    noise = rng.standard_normal(shape)
    out = np.empty(shape)
    out[0] = noise[0]
    for t in range(1, n):
        out[t] = phi * out[t - 1] + noise[t]
    return out


def test_exact_pvalue_equals_a_hand_loop_over_every_shift():
    n = 15
    X = ar_series(0, n, 2)
    y = X[:, 0] + ar_series(1, n)
    cv = KFold(3)
    perm = PermutationScorer(
        Ridge(), n_permutations=100, cv=cv, permutation_type="circular_shift"
    ).fit(X, y)
    assert perm.exact_ and perm.n_permutations_ == n
    observed = cross_val_score(Ridge(), X, y, cv=cv).mean()
    # Shift k reads row (i + k) mod n at row i; k = 0 is the data.
    shifted = [
        cross_val_score(Ridge(), X, np.roll(y, -k), cv=cv).mean() for k in range(n)
    ]
    assert abs(perm.score_ - observed) < 1e-12
    expected = np.sum(np.array(shifted) >= observed - 1e-12) / n
    assert perm.pvalue_ == expected
    assert perm.pvalue_ >= 1 / n


def test_exact_only_when_every_permutation_fits():
    runs = np.repeat([0, 1, 2], [4, 5, 3])
    X, y = make_data(n=12, p=2)
    kwargs = dict(permutation_type="circular_shift", cv=GroupKFold(3), return_null=True)
    exact = PermutationScorer(Ridge(), n_permutations=60, **kwargs).fit(
        X, y, groups=runs
    )
    assert exact.exact_ and exact.n_permutations_ == 60
    assert exact.permutation_scores_.shape == (60,)
    # The identity is permutation 0 and counts itself.
    assert abs(exact.permutation_scores_[0] - exact.score_) < 1e-12
    count = np.sum(exact.permutation_scores_ >= exact.score_ - 1e-12)
    assert exact.pvalue_ == count / 60
    drawn = PermutationScorer(Ridge(), n_permutations=59, **kwargs).fit(
        X, y, groups=runs
    )
    assert not drawn.exact_ and drawn.n_permutations_ == 59
    count = np.sum(drawn.permutation_scores_ >= drawn.score_ - 1e-12)
    assert drawn.pvalue_ == (count + 1) / 60


@pytest.mark.parametrize(
    "permutation_type, block_size, n, total",
    [("shuffle", None, 5, 120), ("block_shuffle", 10, 40, 24)],
)
def test_exact_for_few_rows_or_few_blocks(permutation_type, block_size, n, total):
    X = ar_series(2, n, 2)
    Y = np.column_stack([X[:, 0] + ar_series(3, n), ar_series(4, n)])
    perm = PermutationScorer(
        Ridge(),
        n_permutations=500,
        cv=KFold(2) if n < 10 else KFold(4),
        multioutput="raw_values",
        permutation_type=permutation_type,
        block_size=block_size,
        return_null=True,
    ).fit(X, Y)
    assert perm.exact_ and perm.n_permutations_ == total
    null = perm.permutation_scores_
    reached = null >= perm.score_ - 1e-12
    assert_array_equal(perm.pvalue_, reached.sum(axis=0) / total)
    best = null.max(axis=1, keepdims=True)
    assert_array_equal(
        perm.pvalue_fwer_, (best >= perm.score_ - 1e-12).sum(axis=0) / total
    )
    assert np.all(perm.pvalue_fwer_ >= perm.pvalue_)


def exact_fit(estimator, X, Y, runs, **kwargs):
    return PermutationScorer(
        estimator,
        n_permutations=200,
        cv=GroupKFold(3),
        multioutput="raw_values",
        permutation_type="circular_shift",
        return_null=True,
        **kwargs,
    ).fit(X, Y, groups=runs)


@pytest.mark.filterwarnings("ignore:.*chose the (smallest|largest) alpha")
@pytest.mark.slow
def test_exact_results_do_not_depend_on_batches_or_paths(monkeypatch):
    runs = np.repeat([0, 1, 2], [5, 7, 4])
    X = ar_series(5, 16, 3)
    Y = X[:, :1] + ar_series(6, 16, 3)
    estimator = BatchedRidge(alphas=ALPHAS, n_targets_batch=1)
    reference = exact_fit(BatchedRidge(alphas=ALPHAS), X, Y, runs)
    assert reference.exact_ and reference.n_permutations_ == 140
    calls = count_batches(monkeypatch)
    with simulate_oom(max_items=3):
        split = exact_fit(estimator, X, Y, runs)
    assert max(calls[1:]) <= 3
    assert_same_result(reference, split)
    tiny = exact_fit(BatchedRidge(alphas=ALPHAS), X, Y, runs, max_memory_gb=4e-5)
    assert_same_result(reference, tiny)
    refits = exact_fit(generic(BatchedRidge(alphas=ALPHAS)), X, Y, runs, n_jobs=1)
    assert refits.exact_
    assert_same_result(reference, refits)


# --- shuffling autocorrelated rows warns --------------------------------------------


def test_shuffle_of_autocorrelated_rows_warns():
    runs = np.repeat([0, 1], [70, 50])
    X = ar_series(7, 120, 2, phi=0.9)
    y = ar_series(8, 120, phi=0.9)
    with pytest.warns(AutocorrelationWarning, match="circular_shift"):
        PermutationScorer(Ridge(), n_permutations=9, cv=GroupKFold(2)).fit(
            X, y, groups=runs
        )


def test_no_warning_on_white_noise_or_other_schemes(recwarn):
    rng = np.random.default_rng(9)
    X = rng.standard_normal((120, 2))
    PermutationScorer(Ridge(), n_permutations=9).fit(X, rng.standard_normal(120))
    X_ar, y_ar = ar_series(7, 120, 2, phi=0.9), ar_series(8, 120, phi=0.9)
    PermutationScorer(Ridge(), n_permutations=9, permutation_type="circular_shift").fit(
        X_ar, y_ar
    )
    assert not [w for w in recwarn if "autocorrelated" in str(w.message)]


def test_shuffle_warning_rarely_fires_on_white_noise():
    # The statistic's null spread is about 1 / sqrt(n): at 4 of them, 3e-5.
    rng = np.random.default_rng(10)
    for n, runs in ((30, None), (200, np.repeat([0, 1, 2], [50, 90, 60]))):
        fired = 0
        for _ in range(2000):
            statistic, threshold, _ = autocorrelation_warning(
                rng.standard_normal((n, 3)), runs
            )
            fired += statistic > threshold
        assert fired <= 2
    ar = ar_series(11, 200, 3, phi=0.9)
    statistic, threshold, _ = autocorrelation_warning(ar, None)
    assert statistic > threshold


# --- Ridge(alpha=array) on the fast path; why the refit path is taken ---------------


@pytest.mark.parametrize("multioutput", ["uniform_average", "raw_values"])
def test_per_target_alpha_array_takes_the_fast_path(multioutput, monkeypatch):
    X, Y = make_data(n_targets=3, signal=0.3)
    alphas = np.array([0.1, 10.0, 1000.0])
    kwargs = dict(
        n_permutations=25, multioutput=multioutput, return_null=True, random_state=4
    )
    slow = PermutationScorer(generic(Ridge(alpha=alphas)), **kwargs).fit(X, Y)
    # A hand loop of refits on the same draws: sklearn's own per-target alphas.
    indices = permutation_indices(4, np.arange(25), len(Y))
    expected = [
        cross_val_score(Ridge(alpha=alphas), X, Y[idx], cv=KFold(5)).mean()
        for idx in indices
    ]
    if multioutput == "uniform_average":
        assert_allclose(slow.permutation_scores_, expected, rtol=0, atol=1e-10)

    def refit(*args, **kwargs):
        raise AssertionError("the generic path was taken")

    monkeypatch.setattr(permutation_paths, "_cv_score", refit)
    fast = PermutationScorer(Ridge(alpha=alphas), **kwargs).fit(X, Y)
    assert_allclose(fast.score_, slow.score_, rtol=0, atol=1e-10)
    assert_allclose(
        fast.permutation_scores_, slow.permutation_scores_, rtol=0, atol=1e-10
    )
    assert_array_equal(fast.pvalue_, slow.pvalue_)
    assert_array_equal(fast.pvalue_fwer_, slow.pvalue_fwer_)


def test_per_target_alphas_differ_from_one_shared_alpha():
    # Each target keeps its own alpha: a huge alpha on target 0 alone moves
    # only target 0's scores.
    X, Y = make_data(n_targets=2, signal=1.0)
    kwargs = dict(n_permutations=9, multioutput="raw_values", return_null=True)
    shared = PermutationScorer(Ridge(alpha=1.0), **kwargs).fit(X, Y)
    mixed = PermutationScorer(Ridge(alpha=np.array([1e6, 1.0])), **kwargs).fit(X, Y)
    assert mixed.score_[0] < shared.score_[0] - 0.1
    assert_allclose(mixed.permutation_scores_[:, 1], shared.permutation_scores_[:, 1])


@pytest.mark.parametrize(
    "estimator, kwargs, match",
    [
        (Ridge(solver="sag"), {}, "solver='sag'"),
        (make_pipeline(FunctionTransformer(), Ridge()), {}, "Pipeline ending in Ridge"),
        (Ridge(positive=True), {}, "positive=True"),
        (Ridge(), {"scoring": "explained_variance"}, "scoring='explained_variance'"),
        (Ridge(alpha=np.ones(3)), {}, "3 alphas for 2 targets"),
    ],
)
def test_verbose_says_why_a_ridge_estimator_is_refit(estimator, kwargs, match, capsys):
    X, Y = make_data(n_targets=2)
    # Ridge refuses alphas that match no number of targets, after saying why.
    refused = "alphas for" in match
    with pytest.raises(ValueError) if refused else contextlib.nullcontext():
        PermutationScorer(estimator, n_permutations=3, verbose=1, **kwargs).fit(X, Y)
    out = capsys.readouterr().out
    assert "generic path" in out and match in out


def test_verbose_is_silent_about_paths_nobody_expects_fast(capsys):
    X, y = make_data()
    PermutationScorer(Ridge(), n_permutations=3, verbose=1).fit(X, y)
    PermutationScorer(KNeighborsRegressor(), n_permutations=3, verbose=1).fit(X, y)
    assert "generic path" not in capsys.readouterr().out


# --- several metrics from one set of permutations ---------------------------------

METRIC_ATTRIBUTES = (
    "score_",
    "pvalue_",
    "pvalue_fwer_",
    "pvalue_fdr_",
    "null_mean_",
    "null_std_",
    "permutation_scores_",
)


@pytest.mark.parametrize(
    "estimator",
    [Ridge(), BatchedRidge(alphas=ALPHAS), generic(Ridge())],
    ids=short_repr,
)
@pytest.mark.parametrize("multioutput", ["uniform_average", "raw_values"])
@pytest.mark.filterwarnings("ignore:.*chose the (smallest|largest) alpha")
@pytest.mark.slow
def test_several_metrics_equal_fits_with_one_metric_each(estimator, multioutput):
    X, Y = make_data(n_targets=3, signal=0.3)
    names = ["r2", "correlation", "neg_mean_squared_error"]
    kwargs = dict(
        n_permutations=20, multioutput=multioutput, return_null=True, random_state=5
    )
    several = PermutationScorer(estimator, scoring=names, **kwargs).fit(X, Y)
    for name in names:
        alone = PermutationScorer(estimator, scoring=name, **kwargs).fit(X, Y)
        for attribute in METRIC_ATTRIBUTES:
            value = getattr(several, attribute)
            assert list(value) == names
            assert_array_equal(value[name], getattr(alone, attribute))


def test_metrics_as_a_dict_of_names_and_callables():
    X, Y = make_data(n_targets=2, signal=0.3)

    def negative_max_error(estimator, X_test, y_test):
        return -np.max(np.abs(estimator.predict(X_test) - y_test))

    scoring = {"fit": "r2", "worst": negative_max_error}
    kwargs = dict(n_permutations=15, random_state=2)
    several = PermutationScorer(Ridge(), scoring=scoring, **kwargs).fit(X, Y)
    assert set(several.pvalue_) == {"fit", "worst"}
    for name, single in scoring.items():
        alone = PermutationScorer(Ridge(), scoring=single, **kwargs).fit(X, Y)
        assert several.score_[name] == alone.score_
        assert several.pvalue_[name] == alone.pvalue_


def test_several_metrics_share_the_fast_path_predictions(monkeypatch):
    # One pass of the problem over the permutations scores every metric.
    X, Y = make_data(n_targets=2)
    calls = count_batches(monkeypatch)
    PermutationScorer(
        Ridge(), scoring=("r2", "correlation"), n_permutations=10, random_state=0
    ).fit(X, Y)
    assert sum(calls[1:]) == 10


@pytest.mark.parametrize(
    "scoring, match",
    [
        ([], "at least one scorer name"),
        (["r2", "r2"], "each once"),
        (["r2", 3], "at least one scorer name"),
        ({}, "at least one metric name"),
        ({"a": "not_a_scorer"}, r"scoring\['a'\] must be"),
        ({"a": 3}, r"scoring\['a'\] must be None, a callable"),
    ],
)
def test_bad_metric_lists_raise_before_any_work(scoring, match):
    X, y = make_data()
    with pytest.raises(ValueError, match=match):
        PermutationScorer(FailingRegressor(), scoring=scoring).fit(X, y)


def test_raw_values_needs_every_metric_per_target():
    X, Y = make_data(n_targets=2)
    with pytest.raises(ValueError, match=r"scoring\['max_error'\]"):
        PermutationScorer(
            FailingRegressor(),
            scoring=["r2", "max_error"],
            multioutput="raw_values",
        ).fit(X, Y)
