"""The displays draw the alternative their estimator tested.

A permutation histogram shades the permuted scores that count against the
observed one (PermutationScorer's ``alternative``, scipy's
``permutation_test`` definitions); a bootstrap display draws a one-sided
interval (BootstrapEstimator's ``alternative``, scipy's ``bootstrap``) as a
ray from its finite bound to the edge of the axes.
"""

import warnings

import numpy as np
import pytest
from sklearn.linear_model import Ridge

from skbatch import BootstrapEstimator, PermutationScorer
from skbatch.plotting import BootstrapDisplay, PermutationTestDisplay

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ALTERNATIVES = ["greater", "less", "two-sided"]


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def ar1_runs(lengths, n_columns, rng, phi=0.6):
    """Columns of AR(1) series that restart at each run."""
    rows = []
    for length in lengths:
        noise = rng.standard_normal((length, n_columns))
        run = np.empty_like(noise)
        run[0] = noise[0]
        for i in range(1, length):
            run[i] = phi * run[i - 1] + noise[i]
        rows.append(run)
    return np.concatenate(rows)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = ar1_runs([13, 29, 21, 17], 4, rng)
    signal = X[:, 0] + ar1_runs([13, 29, 21, 17], 1, rng)[:, 0]
    # A target the model predicts (no permuted score reaches it), and two it
    # does not, whose smaller tail lies below, then above, the observed
    # score: every alternative shades each side.
    Y = np.column_stack([signal, -signal[::-1], ar1_runs([40, 40], 1, rng)[:, 0]])
    return X, Y


def _fit_scorer(data, alternative, **params):
    X, Y = data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return PermutationScorer(
            Ridge(),
            n_permutations=49,
            scoring="correlation",
            multioutput="raw_values",
            return_null=True,
            alternative=alternative,
            random_state=0,
            **params,
        ).fit(X, Y)


def _span(region):
    x = region.get_paths()[0].vertices[:, 0]
    return x.min(), x.max()


def _inside(null, span):
    return np.count_nonzero((null >= span[0]) & (null <= span[1]))


def _legend_texts(ax):
    return [text.get_text() for text in ax.get_legend().get_texts()]


@pytest.mark.parametrize("alternative", ALTERNATIVES)
@pytest.mark.parametrize("target", [0, 1, 2])
def test_histogram_shades_the_tail_the_pvalue_counts(data, alternative, target):
    scorer = _fit_scorer(data, alternative)
    display = PermutationTestDisplay.from_estimator(scorer, target=target)
    assert display.alternative == alternative
    null = scorer.permutation_scores_[:, target]
    observed = scorer.score_[target]
    left, right = display.ax_.get_xlim()
    # scipy.stats.permutation_test's counts, from the null itself.
    at_least = np.count_nonzero(null >= observed)
    at_most = np.count_nonzero(null <= observed)
    first = _span(display.regions_[0])
    if alternative == "greater" or (alternative == "two-sided" and at_least <= at_most):
        assert first == pytest.approx((observed, right))
    else:
        assert first == pytest.approx((left, observed))
    count = {"greater": at_least, "less": at_most}.get(
        alternative, min(at_least, at_most)
    )
    # The shaded permuted scores are those the p-value counts: (C + 1) /
    # (n + 1) one-sided, twice the smaller of the two two-sided.
    shaded = sum(_inside(null, _span(region)) for region in display.regions_)
    factor = 2 if alternative == "two-sided" else 1
    assert shaded == factor * count
    expected_p = min(1.0, factor * (count + 1) / (null.size + 1))
    assert scorer.pvalue_[target] == pytest.approx(expected_p)
    if alternative == "two-sided" and count:
        # The other tail: as many permuted scores, to the other edge.
        other = _span(display.regions_[1])
        if first[1] == pytest.approx(right):
            assert other[0] == pytest.approx(left)
        else:
            assert other[1] == pytest.approx(right)
        assert _inside(null, other) == count
    assert any(f"alternative='{alternative}'" in t for t in _legend_texts(display.ax_))
    # The bars are untouched: one patch per bin, as before.
    assert len(display.ax_.patches) == len(display.bars_)


def test_histogram_from_raw_values_takes_the_alternative():
    null = np.linspace(-1.0, 1.0, 41)
    display = PermutationTestDisplay(
        -0.9, 3 / 42, null_scores=null, alternative="less"
    ).plot()
    left, _ = display.ax_.get_xlim()
    assert _span(display.regions_[0]) == pytest.approx((left, -0.9))
    # null <= -0.9: -1.0, -0.95 and -0.9.
    assert _inside(null, _span(display.regions_[0])) == 3
    assert "alternative='less'" in " ".join(_legend_texts(display.ax_))
    # The default is PermutationScorer's, "greater".
    default = PermutationTestDisplay(0.9, 3 / 42, null_scores=null).plot()
    _, right = default.ax_.get_xlim()
    assert _span(default.regions_[0]) == pytest.approx((0.9, right))


def test_summary_title_names_the_alternative(data):
    scorer = _fit_scorer(data, "less")
    display = PermutationTestDisplay.from_estimator(scorer)
    assert display.regions_ == []
    assert display.ax_.get_title().endswith("(less)")


def test_display_refuses_an_unknown_alternative():
    with pytest.raises(ValueError, match="alternative must be one of.*'both'"):
        PermutationTestDisplay(
            0.5, 0.1, null_scores=np.zeros(3), alternative="both"
        ).plot()
    with pytest.raises(ValueError, match="alternative must be one of.*'up'"):
        BootstrapDisplay([1.0], [0.0], [2.0], alternative="up").plot()


@pytest.fixture(scope="module")
def boots(data):
    X, Y = data
    fitted = {}
    for alternative in ["two-sided", "less", "greater"]:
        fitted[alternative] = BootstrapEstimator(
            Ridge(),
            n_bootstrap=60,
            alternative=alternative,
            return_samples=True,
            random_state=0,
        ).fit(X, Y[:, 0])
    return fitted


@pytest.mark.parametrize("alternative", ["less", "greater"])
def test_one_sided_intervals_are_rays_to_the_edge(boots, alternative):
    boot = boots[alternative]
    display = BootstrapDisplay.from_estimator(boot, top_k=3)
    result = boot.results_["coef_"]
    # The finite bound is scipy.stats.bootstrap's, the level-c percentile.
    level = 95 if alternative == "less" else 5
    finite = result.ci_upper if alternative == "less" else result.ci_lower
    np.testing.assert_allclose(
        finite, np.percentile(result.samples, level, axis=0), rtol=1e-10
    )
    left, right = display.ax_.get_xlim()
    segments = display.intervals_.get_segments()
    assert len(segments) == 3
    for row, (segment, index) in enumerate(zip(segments, display.indices_)):
        (start, y0), (stop, y1) = segment
        assert y0 == y1 == row
        assert np.isfinite(start) and np.isfinite(stop)
        if alternative == "less":
            assert start == left
            assert stop == pytest.approx(result.ci_upper[index])
        else:
            assert start == pytest.approx(result.ci_lower[index])
            assert stop == right
        # The estimate and the finite bound lie inside the axes.
        assert left < result.estimate[index] < right
        assert left < finite[index] < right
    (arrows,) = display.arrows_
    assert arrows.get_marker() == ("<" if alternative == "less" else ">")
    np.testing.assert_array_equal(
        arrows.get_xdata(), [left if alternative == "less" else right] * 3
    )
    np.testing.assert_array_equal(arrows.get_ydata(), [0, 1, 2])
    title = display.ax_.get_title()
    assert f"alternative='{alternative}'" in title
    assert ("upper bounds" if alternative == "less" else "lower bounds") in title


def test_two_sided_intervals_stay_segments(boots):
    boot = boots["two-sided"]
    display = BootstrapDisplay.from_estimator(boot, top_k=3)
    result = boot.results_["coef_"]
    assert display.arrows_ == []
    for segment, index in zip(display.intervals_.get_segments(), display.indices_):
        (start, _), (stop, _) = segment
        assert start == pytest.approx(result.ci_lower[index])
        assert stop == pytest.approx(result.ci_upper[index])
    assert "alternative" not in display.ax_.get_title()


def test_raw_bounds_need_the_open_side_of_their_alternative():
    estimate = np.array([1.0, -2.0, 0.5])
    upper = np.array([1.5, -1.0, 0.9])
    display = BootstrapDisplay(
        estimate, np.full(3, -np.inf), upper, alternative="less"
    ).plot()
    left, _ = display.ax_.get_xlim()
    ends = np.array([segment[:, 0] for segment in display.intervals_.get_segments()])
    np.testing.assert_array_equal(ends[:, 0], left)
    np.testing.assert_allclose(ends[:, 1], upper[display.indices_])
    with pytest.raises(ValueError, match=r"alternative='less' gives ci_lower = -inf"):
        BootstrapDisplay(estimate, upper - 1, upper, alternative="less").plot()
    with pytest.raises(ValueError, match=r"alternative='greater' gives ci_upper = inf"):
        BootstrapDisplay(estimate, upper - 1, upper, alternative="greater").plot()


def test_infinite_bounds_of_a_two_sided_interval_are_rays_both_ways():
    # Replicates with an infinite value give an infinite percentile bound:
    # drawn to the edge it points to, never an empty segment.
    display = BootstrapDisplay(
        [0.5, -0.5], [-np.inf, -1.0], [1.0, np.inf], alternative="two-sided"
    ).plot()
    left, right = display.ax_.get_xlim()
    markers = sorted(line.get_marker() for line in display.arrows_)
    assert markers == ["<", ">"]
    ends = {
        int(segment[0, 1]): tuple(segment[:, 0])
        for segment in display.intervals_.get_segments()
    }
    rows = {int(i): row for row, i in enumerate(display.indices_)}
    assert ends[rows[0]] == (left, 1.0)
    assert ends[rows[1]] == (-1.0, right)


def test_an_undefined_one_sided_bound_is_neither_drawn_nor_marked():
    # A NaN upper bound (a NaN replicate) leaves the row empty, no arrowhead.
    display = BootstrapDisplay(
        [2.0, 1.0], [-np.inf, -np.inf], [np.nan, 1.5], alternative="less"
    ).plot()
    rows = {int(i): row for row, i in enumerate(display.indices_)}
    (arrows,) = display.arrows_
    np.testing.assert_array_equal(arrows.get_ydata(), [rows[1]])
    drawn = [s for s in display.intervals_.get_segments() if len(s)]
    assert len(drawn) == 1 and drawn[0][0, 1] == rows[1]
