"""PermutationScorer(alternative=...) and its Holm and Benjamini-Yekutieli
p-values, against scipy.stats.permutation_test, loops over every
permutation, and a null simulation; PermutationCounter's two tails."""

import math

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy import stats
from sklearn.base import BaseEstimator, RegressorMixin, clone
from sklearn.linear_model import Ridge
from sklearn.metrics import mean_squared_error, r2_score
from sklearn.model_selection import KFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer

import skbatch._permutation.paths as permutation_paths
from skbatch import BandedRidge, PermutationScorer
from skbatch.streaming import PermutationCounter

ALTERNATIVES = ("greater", "less", "two-sided")
# Null scores this close to the observed one count as ties in the reference
# formulas: far above the estimator's round-off tolerance, far below the
# spacing of distinct continuous scores.
REFERENCE_TIE = 1e-10


def generic(estimator):
    """The same model, hidden from the ridge fast path."""
    return make_pipeline(FunctionTransformer(), estimator)


def one_sided(null, observed, side, adjustment):
    """Per column, scipy's one-sided p-value of ``null`` (rows: permutations)."""
    if side == "greater":
        count = np.sum(null >= observed - REFERENCE_TIE, axis=0)
    else:
        count = np.sum(null <= observed + REFERENCE_TIE, axis=0)
    return (count + adjustment) / (len(null) + adjustment)


def reference_pvalues(null, observed, alternative, exact=False):
    """scipy.stats.permutation_test's p-value, and the max-statistic
    family-wise one (max over targets for "greater", min for "less", twice
    the smaller of the two for "two-sided"), from the whole null."""
    adjustment = 0 if exact else 1
    extreme = {"greater": null.max(axis=1), "less": null.min(axis=1)}
    pvalue, fwer = {}, {}
    for side in ("greater", "less"):
        pvalue[side] = one_sided(null, observed, side, adjustment)
        fwer[side] = one_sided(
            np.repeat(extreme[side][:, None], null.shape[1], axis=1),
            observed,
            side,
            adjustment,
        )
    for p in (pvalue, fwer):
        p["two-sided"] = np.minimum(1.0, 2 * np.minimum(p["greater"], p["less"]))
    return pvalue[alternative], fwer[alternative]


def holm(pvalues):
    """Holm by its definition: min(1, max_{j <= i} (m - j + 1) p_(j))."""
    ranked = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    m, adjusted = len(ranked), np.empty(len(pvalues))
    for position, i in enumerate(ranked):
        adjusted[i] = min(
            1.0, max((m - j) * pvalues[ranked[j]] for j in range(position + 1))
        )
    return adjusted


def step_up(pvalues, factor=1.0):
    """BH (factor 1) or BY (factor sum 1/k): min(1, min_{j >= i} factor m
    p_(j) / j)."""
    ranked = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    m, adjusted = len(ranked), np.empty(len(pvalues))
    for position, i in enumerate(ranked):
        adjusted[i] = min(
            1.0,
            min(factor * m * pvalues[ranked[j]] / (j + 1) for j in range(position, m)),
        )
    return adjusted


def make_data(seed=0, n=40, n_targets=4):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 4))
    Y = rng.standard_normal((n, n_targets))
    Y[:, 0] += X[:, 0]
    Y[:, 1] -= 0.3 * X[:, 1]
    return X, Y


# --- every path against scipy's definitions on its own null ------------------


@pytest.mark.filterwarnings("ignore::skbatch.AlphaEdgeWarning")
# BandedRidge's three candidates are few on purpose, for speed.
@pytest.mark.filterwarnings("ignore:.*of targets chose candidate:UserWarning")
@pytest.mark.parametrize("alternative", ALTERNATIVES)
@pytest.mark.parametrize(
    "estimator",
    [
        Ridge(alpha=1.0),
        # The generic path refits 120 times a case: seconds.
        pytest.param(generic(Ridge(alpha=1.0)), marks=pytest.mark.slow),
        BandedRidge(bands=[0, 0, 1, 1], alphas=[0.1, 10.0], band_weights=3),
    ],
    ids=["ridge-fast", "generic", "banded-fast"],
)
@pytest.mark.parametrize("scoring", [None, "correlation"])
def test_pvalues_follow_scipys_definitions_on_the_null(alternative, estimator, scoring):
    X, Y = make_data()
    perm = PermutationScorer(
        estimator,
        n_permutations=49,
        cv=KFold(4),
        scoring=scoring,
        multioutput="raw_values",
        alternative=alternative,
        return_null=True,
        device="cpu",
    ).fit(X, Y)
    pvalue, fwer = reference_pvalues(perm.permutation_scores_, perm.score_, alternative)
    assert_allclose(perm.pvalue_, pvalue, rtol=1e-14)
    assert_allclose(perm.pvalue_fwer_, fwer, rtol=1e-14)
    assert np.all(perm.pvalue_fwer_ >= perm.pvalue_)
    assert_allclose(perm.pvalue_holm_, holm(pvalue), rtol=1e-14)
    assert_allclose(perm.pvalue_fdr_, step_up(pvalue), rtol=1e-14)
    factor = sum(1 / k for k in range(1, pvalue.size + 1))
    assert_allclose(perm.pvalue_by_, step_up(pvalue, factor), rtol=1e-14)


@pytest.mark.parametrize("alternative", ALTERNATIVES)
def test_scalar_score_corrections_equal_pvalue(alternative):
    X, Y = make_data()
    perm = PermutationScorer(
        Ridge(), n_permutations=19, alternative=alternative, return_null=True
    ).fit(X, Y)
    pvalue, _ = reference_pvalues(
        perm.permutation_scores_[:, None], np.atleast_1d(perm.score_), alternative
    )
    assert perm.pvalue_ == pytest.approx(pvalue[0], rel=1e-14)
    for name in ("pvalue_fwer_", "pvalue_fdr_", "pvalue_holm_", "pvalue_by_"):
        assert getattr(perm, name) == perm.pvalue_, name


@pytest.mark.parametrize("alternative", ALTERNATIVES)
def test_several_metrics_give_dicts_of_each_metrics_pvalues(alternative):
    X, Y = make_data()
    params = dict(n_permutations=19, multioutput="raw_values", alternative=alternative)
    both = PermutationScorer(Ridge(), scoring=["r2", "correlation"], **params).fit(X, Y)
    alone = PermutationScorer(Ridge(), scoring="correlation", **params).fit(X, Y)
    for name in ("pvalue_", "pvalue_fwer_", "pvalue_holm_", "pvalue_by_"):
        assert_allclose(getattr(both, name)["correlation"], getattr(alone, name))


# --- exact enumeration: scipy itself, and a loop over every rotation --------


@pytest.mark.parametrize(
    # Each alternative refits every permutation: "two-sided" reads both
    # tails, the one-sided cases run with the slow tests.
    "alternative",
    [
        pytest.param("greater", marks=pytest.mark.slow),
        pytest.param("less", marks=pytest.mark.slow),
        "two-sided",
    ],
)
@pytest.mark.parametrize(
    "estimator",
    [Ridge(alpha=0.5), pytest.param(generic(Ridge(alpha=0.5)), marks=pytest.mark.slow)],
    ids=["fast", "generic"],
)
def test_exact_pvalue_equals_scipy_permutation_test(alternative, estimator):
    # 5 rows: the 120 permutations are enumerated exactly by both, so the
    # p-values are deterministic and must agree.
    n = 5
    rng = np.random.default_rng(3)
    X = rng.standard_normal((n, 2))
    y = X[:, 0] + 0.5 * rng.standard_normal(n)
    splits = list(KFold(2).split(X))

    def statistic(order):
        # The mean over folds of the test score, as PermutationScorer's.
        permuted = y[order.astype(int)]
        return np.mean(
            [
                -mean_squared_error(
                    permuted[test],
                    clone(estimator).fit(X[train], permuted[train]).predict(X[test]),
                )
                for train, test in splits
            ]
        )

    expected = stats.permutation_test(
        (np.arange(float(n)),),
        statistic,
        permutation_type="pairings",
        alternative=alternative,
        vectorized=False,
    )
    perm = PermutationScorer(
        estimator,
        n_permutations=math.factorial(n),
        cv=KFold(2),
        scoring="neg_mean_squared_error",
        alternative=alternative,
        device="cpu",
    ).fit(X, y)
    assert perm.exact_ and perm.n_permutations_ == math.factorial(n)
    assert perm.score_ == pytest.approx(expected.statistic, rel=1e-12)
    assert perm.pvalue_ == pytest.approx(expected.pvalue, rel=1e-12)


@pytest.mark.parametrize(
    # Each alternative refits every permutation: "two-sided" reads both
    # tails, the one-sided cases run with the slow tests.
    "alternative",
    [
        pytest.param("greater", marks=pytest.mark.slow),
        pytest.param("less", marks=pytest.mark.slow),
        "two-sided",
    ],
)
def test_every_rotation_matches_a_loop_with_sklearn(alternative):
    n, n_targets = 24, 3
    rng = np.random.default_rng(5)
    X = rng.standard_normal((n, 3))
    # Autocorrelated targets, one driven by X, one against it.
    Y = np.cumsum(rng.standard_normal((n, n_targets)), axis=0) * 0.3
    Y[:, 0] += X[:, 0]
    Y[:, 1] -= X[:, 1]
    splits = list(KFold(4).split(X))
    null = np.array(
        [
            [
                np.mean(
                    [
                        r2_score(
                            np.roll(Y, k, axis=0)[test, j],
                            Ridge()
                            .fit(X[train], np.roll(Y, k, axis=0)[train, j])
                            .predict(X[test]),
                        )
                        for train, test in splits
                    ]
                )
                for j in range(n_targets)
            ]
            for k in range(n)
        ]
    )
    perm = PermutationScorer(
        Ridge(),
        n_permutations=100,
        cv=KFold(4),
        multioutput="raw_values",
        permutation_type="circular_shift",
        alternative=alternative,
        device="cpu",
    ).fit(X, Y)
    assert perm.exact_ and perm.n_permutations_ == n
    assert_allclose(perm.score_, null[0], rtol=1e-10)
    pvalue, fwer = reference_pvalues(null, null[0], alternative, exact=True)
    assert_allclose(perm.pvalue_, pvalue, rtol=1e-14)
    assert_allclose(perm.pvalue_fwer_, fwer, rtol=1e-14)


# --- what each alternative finds ----------------------------------------------


class FixedSign(RegressorMixin, BaseEstimator):
    """Predicts ``sign * X[:, 0]`` whatever it is fit on: a model whose
    predictions are anti-correlated with the target for ``sign=-1``."""

    def __init__(self, sign=-1.0):
        self.sign = sign

    def fit(self, X, y):
        self.n_features_in_ = np.shape(X)[1]
        return self

    def predict(self, X):
        return self.sign * np.asarray(X)[:, 0]


def test_less_finds_an_anticorrelated_prediction():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 2))
    y = X[:, 0] + 0.5 * rng.standard_normal(60)
    fits = {
        alternative: PermutationScorer(
            FixedSign(),
            n_permutations=99,
            scoring="correlation",
            alternative=alternative,
        ).fit(X, y)
        for alternative in ALTERNATIVES
    }
    assert fits["greater"].score_ < -0.5
    assert fits["less"].pvalue_ == pytest.approx(1 / 100)
    assert fits["two-sided"].pvalue_ == pytest.approx(2 / 100)
    assert fits["greater"].pvalue_ == pytest.approx(1.0)


@pytest.mark.parametrize("alternative", ALTERNATIVES)
def test_identity_counts_on_either_side(alternative):
    # Every permutation of a constant-in-blocks y is an identity in value:
    # ties on both sides, whatever the round-off, so every p-value is 1.
    X = np.random.default_rng(0).standard_normal((12, 2))
    y = np.repeat([1.0, 2.0, 3.0], 4)
    perm = PermutationScorer(
        Ridge(),
        n_permutations=20,
        cv=KFold(3),
        scoring="neg_mean_squared_error",
        alternative=alternative,
    ).fit(X, y, groups=np.repeat([0, 1, 2], 4))
    assert perm.pvalue_ == 1.0 and perm.pvalue_fwer_ == 1.0


@pytest.mark.slow
def test_two_sided_is_calibrated_under_the_null():
    # White noise, 100 permutations: P(p <= 0.05) is at most 0.05 (2 x 2/101
    # here), so more rejections than that plus three binomial standard
    # errors would be an invalid test.
    n_datasets, level = 200, 0.05
    rejections = 0
    for seed in range(n_datasets):
        rng = np.random.default_rng(seed)
        X, y = rng.standard_normal((30, 3)), rng.standard_normal(30)
        perm = PermutationScorer(
            Ridge(),
            n_permutations=100,
            cv=KFold(3),
            alternative="two-sided",
            random_state=seed,
            device="cpu",
        ).fit(X, y)
        rejections += perm.pvalue_ <= level
    slack = 3 * math.sqrt(level * (1 - level) / n_datasets)
    assert rejections / n_datasets <= level + slack


# --- bad input ------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["two_sided", "both", None, 1])
def test_bad_alternative_raises_before_any_work(bad, monkeypatch):
    X, y = make_data()
    for name in ("run_problem", "run_parallel"):
        monkeypatch.setattr(permutation_paths, name, pytest.fail)
    perm = PermutationScorer(Ridge(), n_permutations=5, alternative=bad)
    with pytest.raises(ValueError, match="alternative must be one of") as info:
        perm.fit(X, y)
    assert repr(bad) in str(info.value)
    assert "'greater', 'less', 'two-sided'" in str(info.value)
    assert not hasattr(perm, "pvalue_")


# --- the counter ------------------------------------------------------------------


@pytest.mark.parametrize("alternative", ALTERNATIVES)
@pytest.mark.parametrize("exact", [False, True])
def test_counter_in_batches_and_merged_equals_the_whole_null(alternative, exact):
    rng = np.random.default_rng(2)
    observed = np.array([2.0, 0.0, -2.0, np.nan])
    null = rng.standard_normal((97, 4))
    null[5, 1] = np.nan
    whole = PermutationCounter(observed, 97, exact=exact, alternative=alternative)
    whole.update(null)
    first = PermutationCounter(observed, 97, exact=exact, alternative=alternative)
    second = PermutationCounter(observed, 97, exact=exact, alternative=alternative)
    first.update(null[:30]).update(null[30:61])
    first.merge(second.update(null[61:]))
    # The reference: a NaN null score counts as reaching on either side.
    filled = {
        "greater": np.where(np.isnan(null), np.inf, null)[:, :3],
        "less": np.where(np.isnan(null), -np.inf, null)[:, :3],
    }
    pvalue = {
        s: one_sided(filled[s], observed[:3], s, 0 if exact else 1) for s in filled
    }
    pvalue["two-sided"] = np.minimum(1.0, 2 * np.minimum(*pvalue.values()))
    for counter in (whole, first):
        assert_allclose(counter.pvalue()[:3], pvalue[alternative], rtol=1e-15)
        assert np.isnan(counter.pvalue()[3]) and np.isnan(counter.pvalue_fwer()[3])
        assert np.all(counter.pvalue_fwer()[:3] >= counter.pvalue()[:3])
        for method in ("holm", "bh", "by"):
            assert np.isnan(counter.pvalue_adjusted(method)[3])
    assert_array_equal(first.pvalue_fwer(), whole.pvalue_fwer())


def test_counter_counts_the_sides_of_its_alternative():
    null = np.array([[1.0, -1.0], [0.0, 0.0], [-1.0, 1.0]])
    greater = PermutationCounter([0.0, 0.5], 3).update(null)
    less = PermutationCounter([0.0, 0.5], 3, alternative="less").update(null)
    both = PermutationCounter([0.0, 0.5], 3, alternative="two-sided").update(null)
    assert_array_equal(greater.counts, [2, 1])
    assert_array_equal(less.counts_less, [2, 2])
    assert_array_equal(less.min_counts, [3, 3])
    assert greater.counts_less is None and less.counts is None
    assert_array_equal(both.counts, greater.counts)
    assert_array_equal(both.max_counts, greater.max_counts)
    assert_array_equal(both.counts_less, less.counts_less)
    assert_array_equal(both.min_counts, less.min_counts)


def test_counter_refuses_a_bad_alternative_and_a_merge_across_alternatives():
    with pytest.raises(ValueError, match="alternative must be one of.*'up'"):
        PermutationCounter(0.0, 3, alternative="up")
    with pytest.raises(ValueError, match="alternative"):
        PermutationCounter(0.0, 3).merge(PermutationCounter(0.0, 3, alternative="less"))


def test_two_sided_counter_retains_both_tails_in_its_memory_estimate():
    one = PermutationCounter.nbytes_needed(1000, 99)
    two = PermutationCounter.nbytes_needed(1000, 99, alternative="two-sided")
    # The other side's limit and its two counts.
    limit, count = np.dtype(np.float64).itemsize, np.dtype(np.int64).itemsize
    assert two - one == 1000 * (limit + 2 * count)
    assert PermutationCounter.nbytes_needed(1000, 99, alternative="less") == one
