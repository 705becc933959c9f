"""PermutationScorer's null is valid: ties, y-dependent folds, time series,
undefined scores, per-target correlation, and input it must refuse."""

import warnings

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy import stats
from sklearn.base import clone
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge
from sklearn.metrics import check_scoring, r2_score
from sklearn.model_selection import (
    GroupKFold,
    KFold,
    LeaveOneOut,
    StratifiedKFold,
    permutation_test_score,
)
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer

import skbatch._permutation.paths as permutation_paths
from skbatch import AlphaEdgeWarning, BatchedRidge, PermutationScorer
from skbatch.random import permutation_indices


def make_data(seed=0, n=30, p=3, n_targets=None):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p))
    size = n if n_targets is None else (n, n_targets)
    y = rng.standard_normal(size) + 0.8 * (X[:, 0] if n_targets is None else X[:, :1])
    return X, y


def generic(estimator):
    """The same model, hidden from the ridge fast path."""
    return make_pipeline(FunctionTransformer(), estimator)


RIDGES = [
    Ridge(),
    LinearRegression(),
    BatchedRidge(alphas=[0.1, 1.0, 10.0]),
    BatchedRidge(alphas=[0.1, 1.0, 10.0], cv=3),
]

# RIDGES' grids are short on purpose, for speed: their edge is no news.
GRID_EDGE_EXPECTED = pytest.mark.filterwarnings("ignore::skbatch.AlphaEdgeWarning")


def cv_score(estimator, X, y, splits, metric):
    """Mean over folds of a per-target metric, refitting a clone per fold."""
    scores = []
    for train, test in splits:
        with warnings.catch_warnings():
            # As PermutationScorer's refits: a permuted target is noise by
            # design, its alpha at the grid's edge no news.
            warnings.simplefilter("ignore", AlphaEdgeWarning)
            model = clone(estimator).fit(X[train], y[train])
        scores.append(metric(y[test], model.predict(X[test])))
    return np.mean(scores, axis=0)


# --- ties --------------------------------------------------------------------


@GRID_EDGE_EXPECTED
@pytest.mark.parametrize("estimator", RIDGES + [generic(Ridge())], ids=repr)
@pytest.mark.parametrize("device", ["cpu", "torch"])
def test_identity_permutations_give_pvalue_one(estimator, device):
    # One sample per group: every permutation is the identity, whose score is
    # the observed one: each counts as reaching it.
    if device != "cpu":
        pytest.importorskip(device)
    X, y = make_data(n_targets=3)
    scorer = PermutationScorer(
        estimator,
        n_permutations=20,
        multioutput="raw_values",
        random_state=0,
        device=device,
    ).fit(X, y, groups=np.arange(len(y)))
    assert_array_equal(scorer.pvalue_, 1.0)
    assert_array_equal(scorer.pvalue_fwer_, 1.0)


@pytest.mark.filterwarnings("ignore:The groups parameter is ignored")
def test_identity_permutations_match_sklearn_pvalue():
    X, y = make_data()
    groups = np.arange(len(y))
    _, _, expected = permutation_test_score(
        Ridge(), X, y, groups=groups, n_permutations=20, random_state=0
    )
    scorer = PermutationScorer(Ridge(), n_permutations=20, random_state=0)
    assert scorer.fit(X, y, groups=groups).pvalue_ == expected == 1.0


def test_null_containing_the_observed_score_counts_it():
    # Pairs of rows with equal values, but for two pairs: a draw that leaves
    # those two unswapped (a quarter of them) reproduces y exactly.
    X, y = make_data(n=32)
    X, y = np.repeat(X[::2], 2, axis=0), np.repeat(y[::2], 2)
    y[[1, 3]] += 1.0
    groups = np.repeat(np.arange(16), 2)
    scorer = PermutationScorer(
        Ridge(), n_permutations=200, random_state=0, return_null=True
    ).fit(X, y, groups=groups)
    # Which draws reproduce y, from the indices themselves.
    indices = permutation_indices(0, np.arange(200), 32, groups)
    identical = np.all(y[indices] == y, axis=1)
    assert 0 < identical.sum() < 200
    assert_allclose(scorer.permutation_scores_[identical], scorer.score_, rtol=1e-12)
    exceed = np.sum(scorer.permutation_scores_ >= scorer.score_ - 1e-9)
    assert scorer.pvalue_ == (exceed + 1) / 201
    assert scorer.pvalue_ >= (identical.sum() + 1) / 201


def test_constant_target_counts_every_permutation():
    X, _ = make_data()
    y = np.full(len(X), 3.0)
    for estimator in (Ridge(), generic(Ridge())):
        scorer = PermutationScorer(
            estimator, n_permutations=30, scoring="neg_mean_squared_error"
        ).fit(X, y)
        assert scorer.pvalue_ == 1.0


# --- folds drawn on the permuted y --------------------------------------------


def test_classifier_null_equals_sklearn_refits_on_same_permutations():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 4))
    y = rng.integers(0, 3, 60)
    n_permutations = 12
    scorer = PermutationScorer(
        LogisticRegression(),
        n_permutations=n_permutations,
        random_state=0,
        return_null=True,
    ).fit(X, y)
    # sklearn's permutation_test_score: StratifiedKFold re-split on every
    # permuted y, scored by the estimator's scorer.
    indices = permutation_indices(0, np.arange(n_permutations), 60)
    scorer_ = check_scoring(LogisticRegression())
    expected = [
        np.mean(
            [
                scorer_(
                    clone(LogisticRegression()).fit(X[train], y[perm][train]),
                    X[test],
                    y[perm][test],
                )
                for train, test in StratifiedKFold(5).split(X, y[perm])
            ]
        )
        for perm in indices
    ]
    assert_allclose(scorer.permutation_scores_, expected, rtol=0, atol=1e-10)


class YDependentSplitter:
    """Test rows: the rows of the 10 largest y, so folds follow y."""

    def split(self, X, y, groups=None):
        order = np.argsort(y, kind="stable")
        yield order[:-10], order[-10:]
        yield order[10:], order[:10]

    def get_n_splits(self, X=None, y=None, groups=None):
        return 2


@pytest.mark.parametrize("estimator", [Ridge(), BatchedRidge(alphas=[1.0])])
def test_splitter_depending_on_y_is_rerun_for_every_permutation(estimator):
    X, y = make_data(n=40)
    scorer = PermutationScorer(
        estimator,
        n_permutations=15,
        cv=YDependentSplitter(),
        random_state=0,
        return_null=True,
    ).fit(X, y)
    indices = permutation_indices(0, np.arange(15), 40)
    expected = [
        cv_score(estimator, X, y[p], YDependentSplitter().split(X, y[p]), r2_score)
        for p in indices
    ]
    assert_allclose(scorer.permutation_scores_, expected, rtol=1e-10)


def test_groups_go_only_to_splitters_that_use_them():
    X, y = make_data(n=40)
    groups = np.repeat(np.arange(8), 5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        PermutationScorer(Ridge(), n_permutations=5, cv=KFold(4)).fit(
            X, y, groups=groups
        )
    # A group splitter still receives them: no test group is split.
    scorer = PermutationScorer(
        generic(Ridge()), n_permutations=5, cv=GroupKFold(4), return_null=True
    ).fit(X, y, groups=groups)
    expected = cv_score(
        generic(Ridge()), X, y, GroupKFold(4).split(X, y, groups), r2_score
    )
    assert scorer.score_ == pytest.approx(expected, rel=1e-12)


# --- time series ------------------------------------------------------------


@GRID_EDGE_EXPECTED
@pytest.mark.parametrize("permutation_type", ["circular_shift", "block_shuffle"])
@pytest.mark.parametrize("estimator", [Ridge(), BatchedRidge(alphas=[0.1, 10.0])])
@pytest.mark.slow
def test_time_series_nulls_match_a_loop_on_both_paths(permutation_type, estimator):
    X, y = make_data(n=48, n_targets=2)
    groups = np.repeat([0, 1, 2], 16)
    block_size = 4 if permutation_type == "block_shuffle" else None
    params = dict(
        n_permutations=25,
        cv=GroupKFold(3),
        multioutput="raw_values",
        permutation_type=permutation_type,
        block_size=block_size,
        random_state=3,
        return_null=True,
    )
    fast = PermutationScorer(estimator, **params).fit(X, y, groups=groups)
    slow = PermutationScorer(generic(estimator), **params).fit(X, y, groups=groups)
    indices = permutation_indices(
        3,
        np.arange(25),
        48,
        groups,
        permutation_type=permutation_type,
        block_size=block_size,
    )
    splits = list(GroupKFold(3).split(X, y, groups))
    metric = lambda t, p: r2_score(t, p, multioutput="raw_values")  # noqa: E731
    expected = [cv_score(estimator, X, y[perm], splits, metric) for perm in indices]
    assert_allclose(fast.permutation_scores_, expected, rtol=1e-9, atol=1e-12)
    assert_allclose(slow.permutation_scores_, expected, rtol=1e-9, atol=1e-12)
    assert_array_equal(fast.pvalue_, slow.pvalue_)


@pytest.mark.parametrize(
    "params, match",
    [
        ({"permutation_type": "shift"}, "permutation_type"),
        ({"block_size": 3}, "block_size"),
        ({"permutation_type": "block_shuffle"}, "block_size"),
        ({"permutation_type": "block_shuffle", "block_size": 0}, "block_size"),
        ({"permutation_type": "block_shuffle", "block_size": 2.5}, "block_size"),
        ({"permutation_type": "block_shuffle", "block_size": 11}, "block_size"),
    ],
)
def test_bad_permutation_schemes_raise_before_any_work(params, match, monkeypatch):
    X, y = make_data(n=40)
    monkeypatch.setattr(permutation_paths, "run_problem", pytest.fail, raising=True)
    with pytest.raises(ValueError, match=match):
        PermutationScorer(Ridge(), n_permutations=5, **params).fit(
            X, y, groups=np.repeat(np.arange(4), 10)
        )


# --- undefined scores ---------------------------------------------------------


@pytest.mark.parametrize("estimator", [Ridge(), generic(Ridge())], ids=repr)
@pytest.mark.filterwarnings(
    "ignore:R\\^2 score is not well-defined:sklearn.exceptions.UndefinedMetricWarning"
)
def test_one_row_test_folds_give_nan_score_and_pvalue(estimator):
    X, y = make_data(n=20)
    with pytest.warns(UserWarning, match="undefined"):
        scorer = PermutationScorer(
            estimator, n_permutations=9, cv=LeaveOneOut(), random_state=0
        ).fit(X, y)
    assert np.isnan(scorer.score_)
    assert np.isnan(scorer.pvalue_)


def test_one_row_test_folds_agree_on_both_paths_for_a_defined_score():
    X, y = make_data(n=20)
    params = dict(
        n_permutations=9,
        cv=LeaveOneOut(),
        scoring="neg_mean_squared_error",
        random_state=0,
        return_null=True,
    )
    fast = PermutationScorer(Ridge(), **params).fit(X, y)
    slow = PermutationScorer(generic(Ridge()), **params).fit(X, y)
    assert fast.score_ == pytest.approx(slow.score_, rel=1e-10)
    assert_allclose(fast.permutation_scores_, slow.permutation_scores_, rtol=1e-10)
    assert fast.pvalue_ == slow.pvalue_


def test_one_row_training_fold_is_the_estimators_to_judge():
    X, y = make_data(n=20)
    splits = [(np.array([0]), np.arange(1, 20)), (np.arange(1, 20), np.array([0]))]
    with pytest.raises(ValueError, match="at least 2 samples"):
        PermutationScorer(BatchedRidge(), n_permutations=5, cv=splits).fit(X, y)
    # Ridge fits one row; both paths give sklearn's answer.
    fast = PermutationScorer(
        Ridge(), n_permutations=5, cv=splits, scoring="neg_mean_squared_error"
    ).fit(X, y)
    metric = lambda t, p: -np.mean((t - p) ** 2)  # noqa: E731
    assert fast.score_ == pytest.approx(cv_score(Ridge(), X, y, splits, metric))


# --- per-target correlation -----------------------------------------------------


def pearson(t, p):
    return np.array([np.corrcoef(t[:, j], p[:, j])[0, 1] for j in range(t.shape[1])])


@GRID_EDGE_EXPECTED
@pytest.mark.parametrize("estimator", RIDGES + [generic(Ridge())], ids=repr)
@pytest.mark.slow
def test_per_target_correlation_matches_a_loop(estimator):
    X, Y = make_data(n=40, n_targets=3)
    scorer = PermutationScorer(
        estimator,
        n_permutations=20,
        scoring="correlation",
        multioutput="raw_values",
        cv=KFold(4),
        random_state=0,
        return_null=True,
    ).fit(X, Y)
    splits = list(KFold(4).split(X))
    assert_allclose(scorer.score_, cv_score(estimator, X, Y, splits, pearson))
    indices = permutation_indices(0, np.arange(20), 40)
    expected = [cv_score(estimator, X, Y[p], splits, pearson) for p in indices]
    assert_allclose(scorer.permutation_scores_, expected, rtol=1e-9, atol=1e-12)
    uniform = PermutationScorer(
        estimator, n_permutations=20, scoring="correlation", cv=KFold(4)
    ).fit(X, Y)
    assert uniform.score_ == pytest.approx(np.mean(scorer.score_), rel=1e-10)


def test_callable_scoring_per_target_takes_the_generic_path():
    X, Y = make_data(n=40, n_targets=3)

    def per_target_r2(estimator, X_test, y_test):
        return r2_score(y_test, estimator.predict(X_test), multioutput="raw_values")

    scorer = PermutationScorer(
        Ridge(),
        n_permutations=10,
        scoring=per_target_r2,
        multioutput="raw_values",
        random_state=0,
    ).fit(X, Y)
    reference = PermutationScorer(
        Ridge(), n_permutations=10, multioutput="raw_values", random_state=0
    ).fit(X, Y)
    assert_allclose(scorer.score_, reference.score_, rtol=1e-10)
    assert_array_equal(scorer.pvalue_, reference.pvalue_)

    def one_number(estimator, X_test, y_test):
        return 0.5

    with pytest.raises(ValueError, match="one score per target"):
        PermutationScorer(
            Ridge(), n_permutations=5, scoring=one_number, multioutput="raw_values"
        ).fit(X, Y)


# --- input the estimator must refuse, or pass on ----------------------------------


def test_nan_input_reaches_a_pipeline_that_imputes():
    X, y = make_data(n=40)
    X[3, 1] = np.nan
    pipeline = make_pipeline(SimpleImputer(), Ridge())
    scorer = PermutationScorer(pipeline, n_permutations=10, random_state=0)
    assert 0 < scorer.fit(X, y).pvalue_ <= 1
    assert scorer.score_ == pytest.approx(
        permutation_test_score(pipeline, X, y, n_permutations=1)[0], rel=1e-12
    )
    with pytest.raises(ValueError, match="NaN"):
        PermutationScorer(Ridge(), n_permutations=5).fit(X, y)


def test_dataframes_reach_the_estimator_unchanged():
    pd = pytest.importorskip("pandas")
    X, y = make_data(n=40)
    seen = []

    class Recorder(Ridge):
        def fit(self, X, y, sample_weight=None):
            seen.append((type(X), type(y)))
            return super().fit(X, y, sample_weight)

    frame = pd.DataFrame(X, columns=["a", "b", "c"])
    PermutationScorer(Recorder(), n_permutations=3).fit(frame, pd.Series(y))
    assert seen and all(kind is pd.DataFrame for kind, _ in seen)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"estimator": "ridge"}, TypeError, "estimator"),
        ({"n_jobs": 0}, ValueError, "n_jobs"),
        ({"n_jobs": 1.5}, TypeError, "n_jobs"),
        ({"n_permutations": 10**12}, ValueError, "n_permutations"),
        ({"n_permutations": 2**63}, ValueError, "n_permutations"),
        ({"scoring": "correlation_coefficient"}, ValueError, "scoring"),
    ],
)
def test_bad_parameters_raise_clear_errors(kwargs, error, match):
    X, y = make_data()
    kwargs.setdefault("estimator", Ridge())
    with pytest.raises(error, match=match):
        PermutationScorer(**kwargs).fit(X, y)


def test_unsortable_groups_name_groups():
    X, y = make_data()
    groups = [None] * 15 + ["a"] * 15
    with pytest.raises(ValueError, match="groups"):
        PermutationScorer(Ridge(), n_permutations=3).fit(X, y, groups=groups)


@pytest.mark.parametrize(
    "cv",
    [
        [],
        (split for split in []),
        [(np.arange(10), np.array([], dtype=int))],
        [(np.array([], dtype=int), np.arange(10))],
    ],
    ids=["empty list", "exhausted generator", "empty test", "empty train"],
)
def test_unusable_folds_name_cv(cv):
    X, y = make_data()
    with pytest.raises(ValueError, match="cv="):
        PermutationScorer(Ridge(), n_permutations=3, cv=cv).fit(X, y)


@GRID_EDGE_EXPECTED
def test_inner_folds_depending_on_y_take_the_refits():
    X, y = make_data(n=40)
    estimator = BatchedRidge(alphas=[0.1, 10.0], cv=YDependentSplitter())
    scorer = PermutationScorer(
        estimator, n_permutations=5, cv=KFold(4), random_state=0, return_null=True
    ).fit(X, y)
    indices = permutation_indices(0, np.arange(5), 40)
    splits = list(KFold(4).split(X))
    expected = [cv_score(estimator, X, y[p], splits, r2_score) for p in indices]
    assert_allclose(scorer.permutation_scores_, expected, rtol=1e-10)


@pytest.mark.slow
def test_exact_pvalues_are_discrete_uniform_under_the_null():
    # White noise is exchangeable under rotation: the observed score's rank
    # among the n rotations is uniform, so p is uniform on 1/n, ..., 1 and
    # P(p <= 0.05 * k) is floor(0.05 * k * n) / n, no Monte Carlo error.
    n, n_datasets = 8, 240
    pvalues = []
    for seed in range(n_datasets):
        rng = np.random.default_rng(seed)
        X, y = rng.standard_normal((n, 2)), rng.standard_normal(n)
        perm = PermutationScorer(
            Ridge(), n_permutations=50, cv=KFold(2), permutation_type="circular_shift"
        ).fit(X, y)
        assert perm.exact_ and perm.n_permutations_ == n
        pvalues.append(perm.pvalue_)
    counts = np.bincount(np.rint(np.asarray(pvalues) * n).astype(int), minlength=n + 1)
    assert counts[0] == 0
    assert stats.chisquare(counts[1:]).pvalue > 1e-3
