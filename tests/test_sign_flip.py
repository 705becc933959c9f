"""PermutationScorer(permutation_type="sign_flip"): one-sample tests by sign flips.

References: every sign vector enumerated by a naive loop of scikit-learn
fits, scipy's ``permutation_test(..., permutation_type="samples")``,
statsmodels' ``multipletests``; the ridge fast path against the generic
path (a ``Pipeline``) on the same seeds.
"""

import itertools

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy import stats
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.metrics import r2_score
from sklearn.model_selection import GroupKFold, KFold, cross_val_score
from sklearn.pipeline import make_pipeline

from skbatch import BandedRidge, BatchedRidge, PermutationScorer
from skbatch._resampling.registry import SCHEMES, scheme
from skbatch._resampling.sign_flip import (
    count_sign_flips,
    sign_flips,
    split_signed_rows,
)
from skbatch._resampling.signed import count_resamples, signed_rows
from skbatch._ridge.problems import PermutedRidgeProblem
from skbatch.testing import simulate_oom

ALTERNATIVES = ("greater", "less", "two-sided")
# Scores of distinct sign vectors differ far more than this; a vector and
# its negation score the same (a linear model's fit negates exactly).
TIE = 1e-9
N_ROWS = 7
# Six runs of unequal lengths: one sign per run.
RUN_LENGTHS = (3, 4, 5, 3, 6, 4)


def ar_runs(seed, lengths, n_columns, phi=0.8):
    """AR(phi) rows restarting at each run, centred on 0."""
    rng = np.random.default_rng(seed)
    runs = []
    for length in lengths:
        noise = rng.standard_normal((length, n_columns))
        run = np.empty_like(noise)
        run[0] = noise[0]
        for t in range(1, length):
            run[t] = phi * run[t - 1] + noise[t]
        runs.append(run)
    return np.concatenate(runs)


def rows_data():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((N_ROWS, 3))
    Y = 0.8 * X[:, :1] + rng.standard_normal((N_ROWS, 3))
    return X, Y, None, KFold(3)


def runs_data():
    X = ar_runs(1, RUN_LENGTHS, 3)
    Y = 0.5 * X[:, :1] + ar_runs(2, RUN_LENGTHS, 3)
    groups = np.repeat(np.arange(len(RUN_LENGTHS)), RUN_LENGTHS)
    return X, Y, groups, GroupKFold(3)


def unit_signs(n_units):
    """Every sign vector of ``n_units`` units, the identity first."""
    return np.array(list(itertools.product([1, -1], repeat=n_units)))


def naive_scores(X, Y, groups, cv, signs):
    """Per-target cross-validated R^2 of a Ridge refit on each ``s * Y``."""
    splits = list(cv.split(X, Y, groups))
    codes = np.arange(len(X)) if groups is None else groups
    out = []
    for s in signs:
        flipped = s[codes, None] * Y
        folds = []
        for train, test in splits:
            model = clone(Ridge(alpha=1.0)).fit(X[train], flipped[train])
            predicted = model.predict(X[test])
            folds.append(r2_score(flipped[test], predicted, multioutput="raw_values"))
        out.append(np.mean(folds, axis=0))
    return np.array(out)


def enumerate_design(data):
    """The data of a design with the scores of every sign vector."""
    X, Y, groups, cv = data()
    n_units = N_ROWS if groups is None else len(RUN_LENGTHS)
    signs = unit_signs(n_units)
    return X, Y, groups, cv, signs, naive_scores(X, Y, groups, cv, signs)


@pytest.fixture(scope="module")
def rows():
    return enumerate_design(rows_data)


@pytest.fixture(scope="module")
def runs():
    return enumerate_design(runs_data)


def naive_pvalues(null, observed, alternative):
    """Exact one-sample p-values over every sign vector: per target and
    by the max (min) statistic over targets."""
    greater = np.mean(null >= observed - TIE, axis=0)
    less = np.mean(null <= observed + TIE, axis=0)
    fwer_greater = np.mean(null.max(axis=1)[:, None] >= observed - TIE, axis=0)
    fwer_less = np.mean(null.min(axis=1)[:, None] <= observed + TIE, axis=0)
    if alternative == "greater":
        return greater, fwer_greater
    if alternative == "less":
        return less, fwer_less
    return (
        np.minimum(2 * np.minimum(greater, less), 1),
        np.minimum(2 * np.minimum(fwer_greater, fwer_less), 1),
    )


def fit_flips(estimator, X, Y, groups, cv, **params):
    params = {
        "n_permutations": 1000,
        "multioutput": "raw_values",
        "return_null": True,
        "device": "cpu",
        **params,
    }
    return PermutationScorer(
        estimator, permutation_type="sign_flip", cv=cv, **params
    ).fit(X, Y, groups=groups)


@pytest.mark.parametrize("design", ["rows", "runs"])
@pytest.mark.parametrize("alternative", ALTERNATIVES)
def test_exact_pvalues_equal_a_loop_over_every_sign_vector(
    request, design, alternative
):
    X, Y, groups, cv, signs, null = request.getfixturevalue(design)
    perm = fit_flips(Ridge(alpha=1.0), X, Y, groups, cv, alternative=alternative)
    assert perm.exact_ and perm.n_permutations_ == len(signs)
    observed = null[0]
    assert_allclose(perm.score_, observed, rtol=1e-10)
    # Row i of the enumeration flips unit u when bit u of i is set.
    order = [int("".join("1" if v < 0 else "0" for v in s[::-1]), 2) for s in signs]
    assert_allclose(perm.permutation_scores_[order], null, rtol=1e-9, atol=1e-12)
    pvalue, fwer = naive_pvalues(null, observed, alternative)
    assert_allclose(perm.pvalue_, pvalue, rtol=1e-12)
    assert_allclose(perm.pvalue_fwer_, fwer, rtol=1e-12)
    assert np.all(perm.pvalue_fwer_ >= perm.pvalue_)


@pytest.mark.parametrize("alternative", ALTERNATIVES)
def test_exact_pvalue_equals_scipy_permutation_test(rows, alternative):
    X, Y, _, cv, signs, null = rows
    y = Y[:, 0]
    # The cross-validated R^2 of s * y: column 0 of the loop's table (Ridge
    # fits each target alone), looked up by the signs scipy applied.
    table = {s.tobytes(): score for s, score in zip(signs, null[:, 0])}
    assert_allclose(null[0, 0], cross_val_score(Ridge(alpha=1.0), X, y, cv=cv).mean())

    def statistic(sample):
        return table[np.sign(sample / y).astype(signs.dtype).tobytes()]

    reference = stats.permutation_test(
        (y,),
        statistic,
        permutation_type="samples",
        vectorized=False,
        n_resamples=10**4,
        alternative=alternative,
    )
    perm = fit_flips(
        Ridge(alpha=1.0),
        X,
        y,
        None,
        cv,
        multioutput="uniform_average",
        alternative=alternative,
    )
    assert perm.exact_ and perm.n_permutations_ == 2**N_ROWS
    assert_allclose(perm.score_, reference.statistic, rtol=1e-10)
    assert_allclose(perm.pvalue_, reference.pvalue, rtol=1e-12)
    assert_allclose(np.sort(perm.permutation_scores_), np.sort(null[:, 0]), rtol=1e-9)


@pytest.mark.parametrize("alternative", ALTERNATIVES)
def test_holm_and_by_equal_statsmodels(runs, alternative):
    multitest = pytest.importorskip("statsmodels.stats.multitest")
    X, Y, groups, cv, _, _ = runs
    perm = fit_flips(Ridge(alpha=1.0), X, Y, groups, cv, alternative=alternative)
    for attribute, method in (
        ("pvalue_holm_", "holm"),
        ("pvalue_by_", "fdr_by"),
        ("pvalue_fdr_", "fdr_bh"),
    ):
        expected = multitest.multipletests(perm.pvalue_, method=method)[1]
        assert_allclose(getattr(perm, attribute), expected, rtol=1e-12)


def drawn_data(n_targets=3):
    X = ar_runs(3, RUN_LENGTHS * 2, 4)
    Y = 0.3 * X[:, :1] + ar_runs(4, RUN_LENGTHS * 2, n_targets)
    groups = np.repeat(np.arange(2 * len(RUN_LENGTHS)), RUN_LENGTHS * 2)
    return X, Y, groups


@pytest.mark.parametrize("use_groups", [False, True])
def test_fast_path_equals_generic_path_on_the_same_draws(use_groups):
    X, Y, groups = drawn_data()
    groups = groups if use_groups else None
    cv = GroupKFold(4) if use_groups else KFold(4)
    runs = [
        fit_flips(est, X, Y, groups, cv, n_permutations=40, random_state=7)
        for est in (Ridge(alpha=1.0), make_pipeline(Ridge(alpha=1.0)))
    ]
    fast, slow = runs
    assert fast.fit_report_.stages[-1].path == "batched"
    assert slow.fit_report_.stages[-1].path != "batched"
    assert not fast.exact_ and fast.n_permutations_ == 40
    assert_allclose(fast.permutation_scores_, slow.permutation_scores_, rtol=1e-9)
    for name in ("pvalue_", "pvalue_fwer_", "pvalue_fdr_", "pvalue_holm_"):
        assert_array_equal(getattr(fast, name), getattr(slow, name))


def test_banded_fast_path_equals_its_refits():
    X, Y, groups = drawn_data(n_targets=2)
    banded = BandedRidge([0, 0, 1, 1], alphas=[0.1, 10.0], band_weights=2)
    fast, slow = (
        fit_flips(est, X, Y, groups, GroupKFold(3), n_permutations=12)
        for est in (banded, make_pipeline(banded))
    )
    assert fast.fit_report_.stages[-1].path == "batched"
    assert_allclose(fast.permutation_scores_, slow.permutation_scores_, rtol=1e-8)
    assert_array_equal(fast.pvalue_fwer_, slow.pvalue_fwer_)


def test_results_do_not_depend_on_batches(monkeypatch):
    X, Y, groups = drawn_data()
    reference = fit_flips(Ridge(), X, Y, groups, GroupKFold(4), n_permutations=30)
    calls = []
    scores = PermutedRidgeProblem.scores

    def counted(self, indices):
        calls.append(len(indices))
        return scores(self, indices)

    monkeypatch.setattr(PermutedRidgeProblem, "scores", counted)
    with simulate_oom(max_items=4):
        split = fit_flips(Ridge(), X, Y, groups, GroupKFold(4), n_permutations=30)
    assert max(calls[1:]) <= 4
    assert_allclose(
        split.permutation_scores_, reference.permutation_scores_, rtol=1e-12
    )
    assert_array_equal(split.pvalue_fwer_, reference.pvalue_fwer_)


def test_draws_are_per_item_and_fair():
    groups = np.repeat(np.arange(5), [2, 3, 1, 4, 2])
    batch = sign_flips(11, np.arange(40), 12, groups)
    for item in (0, 17, 39):
        assert_array_equal(sign_flips(11, [item], 12, groups)[0], batch[item])
    # Rows of a group share their sign.
    for g in range(5):
        assert np.all(batch[:, groups == g] == batch[:, groups == g][:, :1])
    flips = sign_flips(0, np.arange(2000), 10) < 0
    # A fair coin per unit: 20,000 draws, 5 standard deviations.
    assert abs(flips.mean() - 0.5) < 5 * 0.5 / np.sqrt(flips.size)
    # Units independent: the sign of unit 0 does not predict unit 1's.
    assert abs(np.corrcoef(flips[:, 0], flips[:, 1])[0, 1]) < 5 / np.sqrt(2000)


def test_enumeration_and_counts():
    assert count_sign_flips(5) == 32 == count_resamples(5, permutation_type="sign_flip")
    assert count_sign_flips(9, [0, 0, 0, 1, 1, 1, 2, 2, 2]) == 8
    assert count_sign_flips(10, limit=1023) is None
    assert count_sign_flips(100) is None
    every = sign_flips(0, np.arange(16), 4, exact=True)
    assert_array_equal(every[0], 1)
    assert len({row.tobytes() for row in every}) == 16
    codes = signed_rows(0, [5], 4, permutation_type="sign_flip", exact=True)
    rows, signs = split_signed_rows(codes)
    assert_array_equal(rows, [[0, 1, 2, 3]])
    assert_array_equal(signs, [[-1, 1, -1, 1]])


def test_exact_only_when_every_sign_vector_fits():
    X, Y, groups = drawn_data()
    n = len(RUN_LENGTHS) * 2
    at = fit_flips(Ridge(), X, Y, groups, GroupKFold(3), n_permutations=2**n)
    below = fit_flips(
        Ridge(), X, Y, groups, GroupKFold(3), n_permutations=2**n - 1, return_null=False
    )
    assert at.exact_ and at.n_permutations_ == 2**n
    assert not below.exact_ and below.n_permutations_ == 2**n - 1
    # The identity first; its negation last scores the same (linear model).
    assert_allclose(at.permutation_scores_[0], at.score_, rtol=1e-10)
    assert_allclose(at.permutation_scores_[-1], at.score_, rtol=1e-10)


def test_pandas_y_is_flipped_on_its_index():
    pd = pytest.importorskip("pandas")
    X, Y, groups = drawn_data(n_targets=1)
    y = Y[:, 0]
    series = pd.Series(y, index=np.arange(len(y))[::-1])
    kwargs = dict(multioutput="uniform_average", n_permutations=15)
    array = fit_flips(make_pipeline(Ridge()), X, y, groups, GroupKFold(3), **kwargs)
    frame = fit_flips(
        make_pipeline(Ridge()), X, series, groups, GroupKFold(3), **kwargs
    )
    assert_allclose(frame.permutation_scores_, array.permutation_scores_, rtol=1e-12)


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"block_size": 3}, "block_size=3 with permutation_type='sign_flip'"),
        ({"permutation_type": "flip"}, "permutation_type must be one of .*sign_flip"),
    ],
)
def test_bad_parameters_are_refused(params, match):
    X, Y, groups = drawn_data()
    params = {"permutation_type": "sign_flip", **params}
    with pytest.raises(ValueError, match=match):
        PermutationScorer(Ridge(), **params).fit(X, Y, groups=groups)


def test_bad_inputs_are_refused():
    X, Y, groups = drawn_data()
    flips = PermutationScorer(Ridge(), permutation_type="sign_flip")
    with pytest.raises(ValueError, match="sign_flip.*LogisticRegression"):
        PermutationScorer(LogisticRegression(), permutation_type="sign_flip").fit(
            X, (Y[:, 0] > 0).astype(int)
        )
    bad_groups = groups.astype(float)
    bad_groups[3] = np.nan
    with pytest.raises(ValueError, match="groups must label every sample"):
        flips.fit(X, Y, groups=bad_groups)
    with pytest.raises(ValueError, match="groups must be 1-D"):
        flips.fit(X, Y, groups=groups[:-1])
    with pytest.raises(ValueError, match="items must be below that"):
        sign_flips(0, [16], 4, exact=True)


# Slow: importing torch and compiling jax's kernels take seconds.
@pytest.mark.slow
@pytest.mark.parametrize("library", ["torch", "jax"])
def test_other_libraries_give_the_numpy_null(library):
    pytest.importorskip(library)
    X, Y, groups = drawn_data()
    fits = [
        fit_flips(
            BatchedRidge(alphas=[0.1, 1.0, 10.0], dtype="float64"),
            X,
            Y,
            groups,
            GroupKFold(4),
            n_permutations=30,
            device=device,
        )
        for device in ("cpu", library)
    ]
    assert fits[1].backend_.library == library
    assert_allclose(
        fits[1].permutation_scores_, fits[0].permutation_scores_, atol=1e-12
    )
    assert_array_equal(fits[1].pvalue_fwer_, fits[0].pvalue_fwer_)


def test_sign_flips_are_a_registered_scheme():
    """The registry's scheme gives the same signed rows as the function
    PermutationScorer draws through, and counts its resamples."""
    groups = np.repeat([3, 1, 2], [4, 2, 5])
    flips = scheme("sign_flip", 11, groups)
    codes = signed_rows(9, [0, 4, 7], 11, groups, permutation_type="sign_flip")
    assert_array_equal(flips.rows(9, [0, 4, 7]), codes)
    rows, signs = split_signed_rows(codes)
    assert_array_equal(rows, np.tile(np.arange(11), (3, 1)))
    assert_array_equal(signs, flips.signs(9, [0, 4, 7]))
    assert flips.n_distinct() == 8 and "sign_flip" in SCHEMES
    with pytest.raises(TypeError, match="no counts"):
        flips.counts(9, [0])
