"""skbatch._kernels.rules: p-values from counts for each alternative, and the
multiple-testing corrections, against scipy, statsmodels and hand-written
loops by their definitions."""

import math

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy import stats

from skbatch._kernels import rules as _rules
from skbatch.streaming import fdr_adjusted

# --- hand-written references, by the textbook definitions --------------------


def _ranked(pvalues):
    """Positions of the defined p-values, in ascending order of value."""
    defined = [i for i, p in enumerate(pvalues) if not math.isnan(p)]
    return sorted(defined, key=lambda i: pvalues[i])


def holm_loop(pvalues):
    """Holm: p_(i) adjusted is min(1, max_{j <= i} (m - j + 1) p_(j))."""
    pvalues = [float(p) for p in pvalues]
    ranked = _ranked(pvalues)
    m = len(ranked)
    adjusted = [math.nan] * len(pvalues)
    for position, i in enumerate(ranked):
        adjusted[i] = min(
            1.0, max((m - j) * pvalues[ranked[j]] for j in range(position + 1))
        )
    return np.array(adjusted)


def step_up_loop(pvalues, dependence_factor=False):
    """BH (BY with the factor): min(1, min_{j >= i} c m p_(j) / j), c = 1 for
    BH and sum_{k <= m} 1/k for BY."""
    pvalues = [float(p) for p in pvalues]
    ranked = _ranked(pvalues)
    m = len(ranked)
    c = sum(1 / k for k in range(1, m + 1)) if dependence_factor else 1.0
    adjusted = [math.nan] * len(pvalues)
    for position, i in enumerate(ranked):
        adjusted[i] = min(
            1.0,
            min(c * m * pvalues[ranked[j]] / (j + 1) for j in range(position, m)),
        )
    return np.array(adjusted)


REFERENCES = {
    "holm": holm_loop,
    "bh": step_up_loop,
    "by": lambda p: step_up_loop(p, dependence_factor=True),
}
STATSMODELS_NAMES = {"holm": "holm", "bh": "fdr_bh", "by": "fdr_by"}


def pvalue_sets():
    """Families with ties, zeros, ones, a single value and heavy tails."""
    rng = np.random.default_rng(0)
    sets = [np.array([0.03]), np.array([1.0]), np.array([0.0, 1.0])]
    for m in (2, 9, 300):
        p = rng.uniform(size=m) ** 3
        # Ties, within and across the rejection boundary.
        p[::4] = np.round(p[::4], 1)
        p[1::7] = p[0]
        p[-1] = 1.0
        sets.append(p)
    return sets


# --- corrections --------------------------------------------------------------


@pytest.mark.parametrize("method", ["holm", "bh", "by"])
@pytest.mark.parametrize("pvalues", pvalue_sets(), ids=lambda p: f"m={p.size}")
def test_corrections_equal_their_definition(method, pvalues):
    adjusted = _rules.adjust_pvalues(pvalues, method)
    assert_allclose(adjusted, REFERENCES[method](pvalues), rtol=1e-13, atol=0)
    assert_array_equal(adjusted, _rules.CORRECTIONS[method](pvalues))
    assert np.all((adjusted >= pvalues) & (adjusted <= 1.0))


# statsmodels is a heavy import; the definitions above are checked by hand.
@pytest.mark.slow
@pytest.mark.parametrize("method", ["holm", "bh", "by"])
@pytest.mark.parametrize("pvalues", pvalue_sets(), ids=lambda p: f"m={p.size}")
def test_corrections_equal_statsmodels_multipletests(method, pvalues):
    multitest = pytest.importorskip("statsmodels.stats.multitest")
    _, expected, _, _ = multitest.multipletests(
        pvalues, method=STATSMODELS_NAMES[method]
    )
    assert_allclose(_rules.adjust_pvalues(pvalues, method), expected, rtol=1e-13)


@pytest.mark.parametrize("method", ["bh", "by"])
@pytest.mark.parametrize("pvalues", pvalue_sets(), ids=lambda p: f"m={p.size}")
def test_step_up_corrections_equal_scipy_to_the_last_digit(method, pvalues):
    if not hasattr(stats, "false_discovery_control"):
        pytest.skip("scipy has false_discovery_control from 1.11 on")
    assert_array_equal(
        _rules.adjust_pvalues(pvalues, method),
        stats.false_discovery_control(pvalues, method=method),
    )


@pytest.mark.parametrize("method", ["holm", "bh", "by"])
def test_nan_is_left_out_of_the_family(method):
    pvalues = np.array([0.01, np.nan, 0.04, 0.03, np.nan])
    adjusted = _rules.adjust_pvalues(pvalues, method)
    assert np.isnan(adjusted[[1, 4]]).all()
    assert_allclose(
        adjusted[[0, 2, 3]], REFERENCES[method]([0.01, 0.04, 0.03]), rtol=1e-14
    )
    assert np.isnan(_rules.adjust_pvalues([np.nan, np.nan], method)).all()
    assert _rules.adjust_pvalues(np.array([]), method).shape == (0,)


@pytest.mark.parametrize("method", ["holm", "bh", "by"])
def test_one_pvalue_is_its_own_adjustment(method):
    assert_array_equal(_rules.adjust_pvalues([0.2], method), [0.2])


def test_tied_pvalues_get_one_adjusted_value():
    pvalues = [0.02, 0.02, 0.02, 0.5]
    assert_allclose(_rules.holm_adjusted(pvalues), [0.08, 0.08, 0.08, 0.5])
    assert_allclose(_rules.bh_adjusted(pvalues), [0.08 / 3] * 3 + [0.5])


def test_fdr_adjusted_is_benjamini_hochberg():
    pvalues = pvalue_sets()[-1]
    assert_array_equal(fdr_adjusted(pvalues), _rules.bh_adjusted(pvalues))


@pytest.mark.parametrize("method", ["holm", "bh", "by"])
@pytest.mark.parametrize("bad", [-0.1, 1.5, np.inf])
def test_pvalues_outside_zero_one_are_refused(method, bad):
    with pytest.raises(ValueError, match=r"pvalues must lie in \[0, 1\]"):
        _rules.adjust_pvalues([0.2, bad], method)
    with pytest.raises(ValueError, match="1-D"):
        _rules.adjust_pvalues([[0.2]], method)


@pytest.mark.parametrize("method", ["bonferroni", "BH", None])
def test_unknown_correction_is_refused(method):
    with pytest.raises(ValueError, match=r"method must be one of .*'holm'") as info:
        _rules.adjust_pvalues([0.1], method)
    assert repr(method) in str(info.value)


# --- p-values from counts, per alternative -----------------------------------


def scipy_style_pvalue(null, observed, alternative, exact):
    """scipy.stats.permutation_test's p-value of a given null distribution
    (its definitions, written out: one-sided counts with ties, +1 unless the
    null is exact, two-sided twice the smaller, clipped to 1)."""
    adjustment = 0 if exact else 1
    n = len(null)
    less = (np.sum(null <= observed) + adjustment) / (n + adjustment)
    greater = (np.sum(null >= observed) + adjustment) / (n + adjustment)
    return {
        "less": less,
        "greater": greater,
        "two-sided": min(1.0, 2 * min(less, greater)),
    }[alternative]


@pytest.mark.parametrize("alternative", _rules.ALTERNATIVES)
@pytest.mark.parametrize("exact", [False, True])
def test_pvalue_from_counts_matches_scipys_definitions(alternative, exact):
    rng = np.random.default_rng(1)
    # Integer scores: ties with the observed one are frequent and exact.
    null = rng.integers(0, 20, size=(50, 6))
    observed = np.array([0, 3, 10, 16, 19, 25])
    pvalues = _rules.permutation_pvalue(
        50,
        greater=np.sum(null >= observed, axis=0),
        less=np.sum(null <= observed, axis=0),
        alternative=alternative,
        exact=exact,
    )
    expected = [
        scipy_style_pvalue(null[:, j], observed[j], alternative, exact)
        for j in range(observed.size)
    ]
    assert_allclose(pvalues, expected, rtol=1e-15)


def test_two_sided_pvalue_is_clipped_to_one():
    assert _rules.permutation_pvalue(
        9, greater=5, less=6, alternative="two-sided", exact=False
    ) == pytest.approx(1.0)


def test_maxstat_two_sided_is_twice_the_smaller_one_sided_clipped():
    max_counts, min_counts = np.array([0, 3, 9]), np.array([9, 1, 9])
    one = {
        side: _rules.maxstat_pvalue(
            9,
            max_counts=max_counts,
            min_counts=min_counts,
            alternative=side,
            exact=False,
        )
        for side in ("greater", "less")
    }
    assert_allclose(one["greater"], (max_counts + 1) / 10)
    assert_allclose(one["less"], (min_counts + 1) / 10)
    assert_allclose(
        _rules.maxstat_pvalue(
            9,
            max_counts=max_counts,
            min_counts=min_counts,
            alternative="two-sided",
            exact=False,
        ),
        np.minimum(1.0, 2 * np.minimum(one["greater"], one["less"])),
    )


def test_ties_reach_on_either_side_and_nan_reaches_both():
    scores = np.array([[0.5], [0.5 + 1e-12], [0.5 - 1e-12], [np.nan], [0.7], [0.3]])
    observed, tolerance = np.array([0.5]), np.array([1e-9])
    greater = _rules.reaches(
        scores, _rules.threshold(observed, tolerance, "greater"), "greater"
    )
    less = _rules.reaches(scores, _rules.threshold(observed, tolerance, "less"), "less")
    assert_array_equal(greater[:, 0], [True, True, True, True, True, False])
    assert_array_equal(less[:, 0], [True, True, True, True, False, True])


def test_family_extreme_is_max_or_min_with_nan_extreme():
    scores = np.array([[0.1, 0.4, -0.2], [0.3, np.nan, 0.0]])
    assert_array_equal(_rules.family_extreme(scores, "greater"), [[0.4], [np.inf]])
    assert_array_equal(_rules.family_extreme(scores, "less"), [[-0.2], [-np.inf]])


@pytest.mark.parametrize("bad", ["two_sided", "Greater", None, 1])
def test_unknown_alternative_is_refused(bad):
    with pytest.raises(ValueError, match="alternative must be one of") as info:
        _rules.check_alternative(bad)
    assert repr(bad) in str(info.value)
    assert "'two-sided'" in str(info.value)
