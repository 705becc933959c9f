import sys

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError
from sklearn.linear_model import Ridge

from skbatch import BatchedRidge, BootstrapEstimator, PermutationScorer
from skbatch.plotting import BootstrapDisplay, PermutationTestDisplay

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((80, 6))
    Y = np.column_stack(
        [X[:, 0] + 0.5 * rng.standard_normal(80), rng.standard_normal((80, 2))]
    )
    return X, Y


@pytest.fixture(scope="module")
def raw_scorer(data):
    X, Y = data
    return PermutationScorer(
        Ridge(),
        n_permutations=49,
        multioutput="raw_values",
        return_null=True,
        random_state=0,
    ).fit(X, Y)


@pytest.fixture(scope="module")
def boot(data):
    X, Y = data
    return BootstrapEstimator(Ridge(), n_bootstrap=50, random_state=0).fit(X, Y[:, 0])


def _vertical_line_x(line):
    x = np.asarray(line.get_xdata(), dtype=float)
    assert x[0] == x[-1]
    return x[0]


@pytest.mark.parametrize("bins", [7, 25])
def test_histogram_of_one_score(data, bins):
    X, Y = data
    scorer = PermutationScorer(
        Ridge(), n_permutations=39, return_null=True, random_state=0
    ).fit(X, Y[:, 0])
    display = PermutationTestDisplay.from_estimator(scorer, bins=bins)
    assert len(display.bars_) == bins
    assert len(display.ax_.patches) == bins
    heights = [patch.get_height() for patch in display.bars_]
    assert sum(heights) == 39
    assert _vertical_line_x(display.line_) == pytest.approx(scorer.score_)
    # (1 + 0 exceedances) / (39 + 1), the definition of sklearn's
    # permutation_test_score; the count is in the legend, not the title.
    assert display.ax_.get_title() == "p = 0.025"
    labels = [text.get_text() for text in display.ax_.get_legend().get_texts()]
    assert "permuted scores (39)" in labels
    assert f"observed score {scorer.score_:.3g}" in labels
    assert display.ax_.get_xlabel() == "R\u00b2"
    assert display.figure_ is display.ax_.figure


def test_histogram_of_one_target_on_given_axes(raw_scorer):
    _, ax = plt.subplots()
    display = PermutationTestDisplay.from_estimator(
        raw_scorer, target=2, ax=ax, bins=10
    )
    assert display.ax_ is ax
    assert len(display.bars_) == 10
    assert _vertical_line_x(display.line_) == pytest.approx(raw_scorer.score_[2])
    counts = [patch.get_height() for patch in display.bars_]
    expected, _ = np.histogram(raw_scorer.permutation_scores_[:, 2], bins=10)
    np.testing.assert_array_equal(counts, expected)
    assert display.ax_.get_title().startswith("target 2: p = ")
    assert "FWER p = " in display.ax_.get_title()


def test_summary_of_all_targets(raw_scorer):
    display = PermutationTestDisplay.from_estimator(raw_scorer, alpha=0.05)
    assert display.bars_ is None
    not_significant, significant = display.scatter_
    is_significant = raw_scorer.pvalue_fwer_ <= 0.05
    assert is_significant.tolist() == [True, False, False]
    np.testing.assert_allclose(
        significant.get_offsets(),
        np.column_stack(
            [
                raw_scorer.score_[is_significant],
                -np.log10(raw_scorer.pvalue_fwer_[is_significant]),
            ]
        ),
    )
    assert len(not_significant.get_offsets()) == 2
    threshold = np.asarray(display.line_.get_ydata(), dtype=float)
    np.testing.assert_allclose(threshold, -np.log10(0.05))
    assert display.ax_.get_ylabel() == "-log10(FWER p)"


def test_summary_needs_no_null(data):
    X, Y = data
    scorer = PermutationScorer(
        Ridge(), n_permutations=19, multioutput="raw_values", random_state=0
    ).fit(X, Y)
    display = PermutationTestDisplay.from_estimator(scorer)
    assert sum(len(s.get_offsets()) for s in display.scatter_) == 3


def test_several_metrics_draw_the_one_named_as_a_fit_with_it_alone(data):
    X, Y = data
    kwargs = dict(n_permutations=9, return_null=True, random_state=0)
    scorer = PermutationScorer(Ridge(), scoring=["r2", "correlation"], **kwargs).fit(
        X, Y[:, 0]
    )
    with pytest.raises(ValueError, match="several metrics.*'r2', 'correlation'"):
        PermutationTestDisplay.from_estimator(scorer)
    with pytest.raises(ValueError, match="got metric='mse'"):
        PermutationTestDisplay.from_estimator(scorer, metric="mse")
    display = PermutationTestDisplay.from_estimator(scorer, metric="correlation")
    alone = PermutationScorer(Ridge(), scoring="correlation", **kwargs).fit(X, Y[:, 0])
    reference = PermutationTestDisplay.from_estimator(alone)
    assert display.score_name == reference.score_name == "correlation"
    assert display.score == reference.score
    assert display.pvalue == reference.pvalue
    np.testing.assert_array_equal(display.null_scores, reference.null_scores)
    one = PermutationScorer(Ridge(), **kwargs).fit(X, Y[:, 0])
    with pytest.raises(ValueError, match="has one score"):
        PermutationTestDisplay.from_estimator(one, metric="r2")


def test_missing_null_is_a_clear_error(data):
    X, Y = data
    scorer = PermutationScorer(Ridge(), n_permutations=9, random_state=0)
    scorer.fit(X, Y[:, 0])
    with pytest.raises(ValueError, match="return_null=True"):
        PermutationTestDisplay.from_estimator(scorer)
    raw = PermutationScorer(
        Ridge(), n_permutations=9, multioutput="raw_values", random_state=0
    ).fit(X, Y)
    with pytest.raises(ValueError, match="return_null=True"):
        PermutationTestDisplay.from_estimator(raw, target=0)
    with pytest.raises(ValueError, match="return_null=True"):
        PermutationTestDisplay(0.5, 0.1).plot()
    assert plt.get_fignums() == []


def test_target_must_index_a_target(raw_scorer, data):
    with pytest.raises(ValueError, match=r"target must be an int in \[0, 3\)"):
        PermutationTestDisplay.from_estimator(raw_scorer, target=3)
    X, Y = data
    one = PermutationScorer(Ridge(), n_permutations=9, return_null=True).fit(X, Y)
    with pytest.raises(ValueError, match="raw_values"):
        PermutationTestDisplay.from_estimator(one, target=0)


def test_unfitted_estimators_raise_not_fitted():
    with pytest.raises(NotFittedError):
        PermutationTestDisplay.from_estimator(PermutationScorer(Ridge()))
    with pytest.raises(NotFittedError):
        BootstrapDisplay.from_estimator(BootstrapEstimator(Ridge()))


def test_wrong_estimator_type_is_rejected(data, boot):
    with pytest.raises(TypeError, match="PermutationScorer"):
        PermutationTestDisplay.from_estimator(boot)
    X, Y = data
    with pytest.raises(TypeError, match="BootstrapEstimator"):
        BootstrapDisplay.from_estimator(Ridge().fit(X, Y))


@pytest.mark.parametrize("top_k", [1, 4, 6])
def test_bootstrap_top_k_intervals_in_sorted_order(boot, top_k):
    display = BootstrapDisplay.from_estimator(boot, top_k=top_k)
    result = boot.results_["coef_"]
    segments = display.intervals_.get_segments()
    assert len(segments) == top_k
    estimates = np.asarray(display.estimates_.get_xdata(), dtype=float)
    assert np.all(np.diff(estimates) >= 0)
    # The largest |estimates|, drawn with their own intervals.
    largest = np.sort(np.argsort(-np.abs(result.estimate))[:top_k])
    np.testing.assert_array_equal(np.sort(display.indices_), largest)
    np.testing.assert_allclose(estimates, result.estimate[display.indices_])
    for row, (segment, index) in enumerate(zip(segments, display.indices_)):
        (lo, y0), (hi, y1) = segment
        assert y0 == y1 == row
        assert lo == pytest.approx(result.ci_lower[index])
        assert hi == pytest.approx(result.ci_upper[index])
    labels = [label.get_text() for label in display.ax_.get_yticklabels()]
    assert labels == [f"x{i}" for i in display.indices_]
    assert "95% intervals" in display.ax_.get_title()


def test_bootstrap_uses_feature_names(data):
    pd = pytest.importorskip("pandas")
    X, Y = data
    frame = pd.DataFrame(X, columns=[f"feature_{c}" for c in "abcdef"])
    boot = BootstrapEstimator(Ridge(), n_bootstrap=20, random_state=0)
    display = BootstrapDisplay.from_estimator(boot.fit(frame, Y[:, 0]), top_k=2)
    labels = [label.get_text() for label in display.ax_.get_yticklabels()]
    assert labels[-1] == "feature_a"


def test_bootstrap_of_several_targets(data):
    X, Y = data
    boot = BootstrapEstimator(
        BatchedRidge(alphas=1.0), n_bootstrap=20, random_state=0
    ).fit(X, Y)
    row = BootstrapDisplay.from_estimator(boot, target=0, top_k=None)
    assert len(row.intervals_.get_segments()) == 6
    assert row.ax_.get_yticklabels()[-1].get_text() == "x0"
    everything = BootstrapDisplay.from_estimator(boot, top_k=5)
    assert everything.ax_.get_yticklabels()[-1].get_text() == "[0, 0]"
    intercepts = BootstrapDisplay.from_estimator(boot, attribute="intercept_")
    assert len(intercepts.intervals_.get_segments()) == 3
    with pytest.raises(ValueError, match=r"attribute must be one of \['coef_'"):
        BootstrapDisplay.from_estimator(boot, attribute="alpha_")
    with pytest.raises(ValueError, match="2-D attribute"):
        BootstrapDisplay.from_estimator(boot, attribute="intercept_", target=0)
    with pytest.raises(ValueError, match="top_k must be None or an int >= 1"):
        BootstrapDisplay.from_estimator(boot, top_k=0)


def test_plot_again_on_other_axes(boot):
    display = BootstrapDisplay.from_estimator(boot, top_k=3)
    first = display.ax_
    _, ax = plt.subplots()
    assert display.plot(ax=ax, top_k=2).ax_ is ax
    assert len(ax.collections[0].get_segments()) == 2
    assert len(first.collections[0].get_segments()) == 3


def test_missing_matplotlib_names_the_plot_extra(boot, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=r"pip install 'skbatch\[plot\]'"):
        BootstrapDisplay.from_estimator(boot)
    with pytest.raises(ImportError, match=r"skbatch\[plot\]"):
        PermutationTestDisplay(0.5, 0.1, null_scores=np.zeros(3)).plot()


def _window_boxes(figure, artists):
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    return [artist.get_window_extent(renderer) for artist in artists]


@pytest.mark.parametrize("figsize", [(6.4, 4.8), (5.5, 4.2), (4.0, 3.0)])
def test_summary_legend_hides_no_target(figsize):
    # Many targets, the significant ones high and spread over the scores, as
    # in a whole-brain map: none may sit under the legend.
    rng = np.random.default_rng(0)
    score = np.concatenate([rng.uniform(-0.2, 0.05, 900), rng.uniform(0, 0.5, 100)])
    pvalue_fwer = np.concatenate([rng.uniform(0.1, 1, 900), np.full(100, 1 / 201)])
    figure, ax = plt.subplots(figsize=figsize, layout="constrained")
    display = PermutationTestDisplay(score, pvalue_fwer, pvalue_fwer=pvalue_fwer).plot(
        ax=ax
    )
    (legend,) = _window_boxes(figure, [display.ax_.get_legend()])
    for collection in display.scatter_:
        points = ax.transData.transform(collection.get_offsets())
        inside = (
            (points[:, 0] >= legend.x0)
            & (points[:, 0] <= legend.x1)
            & (points[:, 1] >= legend.y0)
            & (points[:, 1] <= legend.y1)
        )
        assert not inside.any(), points[inside]
    plt.close(figure)


def test_histograms_side_by_side_have_titles_that_do_not_overlap(raw_scorer):
    # The layout of examples/plot_permutation_fwer.py: two targets' nulls in
    # one row, each titled with its target and both p-values.
    figure, axes = plt.subplots(1, 2, figsize=(10, 4), layout="constrained")
    for ax, target in zip(axes, [0, 2]):
        PermutationTestDisplay.from_estimator(raw_scorer, target=target, ax=ax)
    left, right = _window_boxes(figure, [ax.title for ax in axes])
    assert left.x1 < right.x0
    assert all(ax.get_title().count("p = ") == 2 for ax in axes)
    plt.close(figure)


# TRFDisplay


@pytest.fixture(scope="module")
def trf_data():
    rng = np.random.default_rng(7)
    runs = np.repeat(np.arange(4), [70, 90, 80, 60])
    X = rng.standard_normal((300, 2))
    Y = rng.standard_normal((300, 3))
    Y[2:, :2] += X[:-2, :1]
    return X, Y, runs


def _trf_pipeline(**delayer):
    from sklearn.pipeline import make_pipeline

    from skbatch import Delayer

    return make_pipeline(Delayer(**delayer), BatchedRidge(alphas=[10.0]))


def test_trf_display_draws_each_target_over_lags_in_ms(trf_data):
    from skbatch import trf_from_estimator
    from skbatch.plotting import TRFDisplay

    X, Y, runs = trf_data
    model = _trf_pipeline(tmin=-0.02, tmax=0.08, sfreq=100.0)
    model.fit(X, Y, delayer__groups=runs)
    trf = trf_from_estimator(model)
    display = TRFDisplay.from_estimator(
        model, targets=["Cz", "Pz"], target_names=["Fz", "Cz", "Pz"]
    )
    np.testing.assert_array_equal(display.targets_, [1, 2])
    np.testing.assert_array_equal(display.features_, [0, 1])
    assert display.lines_.shape == (2, 2) and display.bands_ is None
    for panel, j in enumerate(display.features_):
        for line, t in enumerate(display.targets_):
            drawn = display.lines_[panel, line]
            np.testing.assert_allclose(drawn.get_xdata(), trf.times * 1000)
            np.testing.assert_array_equal(drawn.get_ydata(), trf.coef[t, j])
            assert drawn.get_label() == ["Fz", "Cz", "Pz"][t]
        assert display.ax_[panel].get_xlabel() == "lag (ms)"
        assert display.ax_[panel].get_title() == f"x{j}"
    assert "TRF weight" in display.ax_[0].get_ylabel()


def test_trf_display_bands_are_the_bootstrap_bounds(trf_data):
    from skbatch import trf_from_estimator
    from skbatch.plotting import TRFDisplay

    X, Y, runs = trf_data
    boot = BootstrapEstimator(
        _trf_pipeline(delays=(0, 1, 2, 3)),
        attributes="named_steps.batchedridge.coef_",
        n_bootstrap=20,
        random_state=0,
    ).fit(X, Y, groups=runs)
    trf = trf_from_estimator(boot)
    display = TRFDisplay.from_estimator(boot, targets=0, features="x1")
    assert display.ax_[0].get_xlabel() == "lag (samples)"
    (band,) = display.bands_.ravel()
    vertices = band.get_paths()[0].vertices
    # fill_between's outline: the lower bound forward, the upper back.
    lower = trf.ci_lower[0, 1]
    upper = trf.ci_upper[0, 1]
    for lag, low, high in zip(trf.delays, lower, upper):
        at_lag = vertices[np.isclose(vertices[:, 0], lag), 1]
        assert np.isclose(at_lag, low).any() and np.isclose(at_lag, high).any()
    assert "95% interval" in [t.get_text() for t in display.ax_[0].get_legend().texts]


def test_trf_display_refuses_bad_choices(trf_data):
    from skbatch.plotting import TRFDisplay

    X, Y, _ = trf_data
    model = _trf_pipeline(delays=(0, 1)).fit(X, Y)
    with pytest.raises(ValueError, match="target index must be in \\[0, 3\\)"):
        TRFDisplay.from_estimator(model, targets=[5])
    with pytest.raises(ValueError, match="feature 'pitch' is not one of"):
        TRFDisplay.from_estimator(model, features="pitch")
    _, axes = plt.subplots(1, 3)
    with pytest.raises(ValueError, match="one axes per drawn feature \\(2\\)"):
        TRFDisplay.from_estimator(model, ax=axes)
    with pytest.raises(ValueError, match="coef must have shape"):
        TRFDisplay(np.zeros((2, 3)), np.arange(3)).plot()
