"""Figures of permutation tests, bootstrap intervals and TRFs.

Three displays follow scikit-learn's visualization API: build them with
``from_estimator`` from a fitted estimator, draw again with ``plot(ax=...)``,
and find the figure in ``figure_`` and the axes in ``ax_``. matplotlib is an
optional dependency (``pip install "skbatch[plot]"``), imported only when a
display draws.
"""

import numbers

import numpy as np
from sklearn.utils.validation import check_is_fitted

from ._kernels.rules import check_alternative
from .trf import trf_from_estimator

__all__ = ["BootstrapDisplay", "PermutationTestDisplay", "TRFDisplay"]

# Histogram bins of a permutation null: 1000 permutations give about 33 per
# bin, enough for a smooth shape without hiding the tail.
DEFAULT_BINS = 30
# Elements shown by a bootstrap display: more labels than this do not read.
DEFAULT_TOP_K = 20
# Colors of the matplotlib default cycle, named for what they show.
_NULL_COLOR = "tab:gray"
_OBSERVED_COLOR = "tab:red"
_ESTIMATE_COLOR = "tab:blue"
# Share of the summary's height kept free of points above the highest one:
# the legend sits there, so it never hides a target.
_LEGEND_HEADROOM = 0.35
# Opacity of the shaded rejection region of a permutation histogram: light
# enough that the bars stay readable through it.
_REGION_ALPHA = 0.15
# Share of the finite span added on each side of a bootstrap display that has
# one-sided intervals: the rays end there, past every finite value.
_RAY_MARGIN = 0.1
# Opacity of a TRF's bootstrap band: the lines of other channels stay
# visible through it.
_BAND_ALPHA = 0.25
# Milliseconds in a second: TRF lags are drawn in ms, as EEG/MEG papers do.
_MS = 1000.0
# What a one-sided interval of each alternative bounds, for the titles.
_ONE_SIDED_BOUNDS = {"less": "upper bounds", "greater": "lower bounds"}


def _check_matplotlib(caller):
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            f"{caller} needs matplotlib, which is not installed. Install it with "
            "the plot extra: pip install 'skbatch[plot]'"
        ) from exc


def _axes(ax):
    """``ax`` and its figure, or a new pyplot figure when ``ax`` is None."""
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots()
    return ax, ax.figure


def _check_fitted(estimator, attributes, kind):
    check_is_fitted(estimator)
    missing = [name for name in attributes if not hasattr(estimator, name)]
    if missing:
        raise TypeError(
            f"expected a fitted {kind}, got {type(estimator).__name__} without "
            f"{', '.join(missing)}"
        )


def _format_p(p):
    return f"{p:.2g}"


def _count(n, noun):
    """``"1 target"``, ``"2 targets"``: a count with its noun in the right number.

    >>> _count(1, "target"), _count(0, "replicate")
    ('1 target', '0 replicates')
    """
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


class PermutationTestDisplay:
    """Permutation test visualization: null distribution and observed score.

    One score (a single target, or ``multioutput="uniform_average"``) is
    drawn as a histogram of its permutation null with the observed score as
    a vertical line, its p-value in the title, and the region of permuted
    scores that count against it shaded, as ``alternative`` defines it
    (:class:`~skbatch.PermutationScorer`, :func:`scipy.stats.permutation_test`):
    at or above the observed score for "greater", at or below it for
    "less"; for "two-sided", whose p-value is twice the smaller one-sided
    one, the tail beyond the observed score on the side of the smaller
    p-value and, on the other side, the tail holding as many permuted
    scores (none when that count is 0). Several scores
    (``multioutput="raw_values"``) are drawn as a per-target summary: the
    observed score against ``-log10`` of the family-wise p-value, with the
    significance threshold as a horizontal line.

    Build it with :meth:`from_estimator`; the constructor only stores data.

    Parameters
    ----------
    score : float or ndarray of shape (n_targets,)
        Observed score(s).
    pvalue : float or ndarray of shape (n_targets,)
        Uncorrected permutation p-value(s).
    null_scores : ndarray of shape (n_permutations,), default=None
        Permuted scores of the single score; needed for the histogram.
    pvalue_fwer : float or ndarray of shape (n_targets,), default=None
        Family-wise p-value(s); the summary uses them when given, else the
        uncorrected ones.
    target : int, default=None
        Index of the target a single score belongs to, for the title.
    score_name : str, default="score"
        Axis label of the score.
    alternative : {"greater", "less", "two-sided"}, default="greater"
        The alternative the p-values were computed for: the shaded region of
        the histogram, and the legend (histogram) or title (summary).

    Attributes
    ----------
    ax_ : matplotlib Axes
        Axes the display is drawn on.
    figure_ : matplotlib Figure
        Figure holding ``ax_``.
    bars_ : matplotlib BarContainer or None
        Histogram bars of the null (one per bin); None for the summary.
    regions_ : list of matplotlib PolyCollection
        Histogram only (else empty): the shaded regions, from the observed
        score (or, for the other tail of "two-sided", from the last permuted
        score it holds) to the edge of the axes, whose x-limits are then
        fixed.
    line_ : matplotlib Line2D
        The observed score (histogram), or the significance threshold
        (summary).
    scatter_ : list of matplotlib PathCollection
        Summary only (else empty): targets that are not significant, then
        those that are.

    See Also
    --------
    skbatch.PermutationScorer : The test this display draws.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import numpy as np
    >>> from sklearn.linear_model import Ridge
    >>> from skbatch import PermutationScorer
    >>> from skbatch.plotting import PermutationTestDisplay
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((60, 3))
    >>> y = X[:, 0] + rng.standard_normal(60)
    >>> scorer = PermutationScorer(
    ...     Ridge(), n_permutations=99, return_null=True, random_state=0
    ... ).fit(X, y)
    >>> display = PermutationTestDisplay.from_estimator(scorer, bins=20)
    >>> len(display.bars_)
    20
    >>> display.ax_.get_title()
    'p = 0.01'
    >>> display.regions_[0].get_label()
    "alternative='greater': permuted ≥ observed"
    """

    def __init__(
        self,
        score,
        pvalue,
        *,
        null_scores=None,
        pvalue_fwer=None,
        target=None,
        score_name="score",
        alternative="greater",
    ):
        self.score = score
        self.pvalue = pvalue
        self.null_scores = null_scores
        self.pvalue_fwer = pvalue_fwer
        self.target = target
        self.score_name = score_name
        self.alternative = alternative

    def plot(self, ax=None, *, bins=DEFAULT_BINS, alpha=0.05):
        """Draw the histogram (one score) or the per-target summary.

        Parameters
        ----------
        ax : matplotlib Axes, default=None
            Axes to draw on; None creates a figure.
        bins : int or sequence, default=30
            Histogram bins, as in :meth:`matplotlib.axes.Axes.hist`.
        alpha : float, default=0.05
            Significance level of the summary's threshold.

        Returns
        -------
        display : PermutationTestDisplay
            The display, with ``ax_``, ``figure_`` and the artists set.
        """
        _check_matplotlib("PermutationTestDisplay.plot")
        if not 0 < alpha < 1:
            raise ValueError(
                f"alpha must be in the open interval (0, 1), got {alpha!r}"
            )
        check_alternative(self.alternative)
        if np.ndim(self.score) == 0 and self.null_scores is None:
            raise ValueError(
                "The histogram of a single score needs its permutation scores "
                "(null_scores); fit the PermutationScorer with return_null=True."
            )
        self.ax_, self.figure_ = _axes(ax)
        if np.ndim(self.score) == 0:
            self._plot_histogram(bins)
        else:
            self._plot_summary(alpha)
        return self

    def _plot_histogram(self, bins):
        ax = self.ax_
        null = np.asarray(self.null_scores, dtype=np.float64).ravel()
        _, _, self.bars_ = ax.hist(
            null,
            bins=bins,
            color=_NULL_COLOR,
            alpha=0.7,
            label=f"permuted scores ({null.size})",
        )
        self.line_ = ax.axvline(
            float(self.score),
            color=_OBSERVED_COLOR,
            linewidth=2,
            label=f"observed score {float(self.score):.3g}",
        )
        self.scatter_ = []
        self.regions_ = self._shade_regions(null, float(self.score))
        # The number of permutations is in the legend: a short title does not
        # run into its neighbour's when panels stand side by side.
        title = f"p = {_format_p(float(self.pvalue))}"
        if self.pvalue_fwer is not None and np.ndim(self.pvalue_fwer) == 0:
            title += f", FWER p = {_format_p(float(self.pvalue_fwer))}"
        if self.target is not None:
            title = f"target {self.target}: {title}"
        ax.set_title(title)
        ax.set_xlabel(self.score_name)
        ax.set_ylabel("permutations")
        ax.legend(loc="best")

    def _shade_regions(self, null, observed):
        """Shade the permuted scores that count against ``observed``."""
        ax = self.ax_
        # The edges of the axes as they are now (the bars and the observed
        # line), fixed so that the regions reach them.
        left, right = ax.get_xlim()
        ax.set_xlim(left, right)
        alternative = self.alternative
        at_least = np.count_nonzero(null >= observed)
        at_most = np.count_nonzero(null <= observed)
        side = alternative
        if alternative == "two-sided":
            # The side of the smaller one-sided p-value, which is doubled.
            side = "greater" if at_least <= at_most else "less"
        spans = [(observed, right) if side == "greater" else (left, observed)]
        symbol = "\u2265" if side == "greater" else "\u2264"
        label = f"alternative={alternative!r}: permuted {symbol} observed"
        if alternative == "two-sided":
            count = min(at_least, at_most)
            ordered = np.sort(null[~np.isnan(null)])
            if count and ordered.size >= count:
                if side == "greater":
                    spans.append((left, ordered[count - 1]))
                else:
                    spans.append((ordered[-count], right))
            label += f" ({count}) and as many in the other tail"
        regions = []
        for number, (start, stop) in enumerate(spans):
            regions.append(
                ax.fill_between(
                    [start, stop],
                    0,
                    1,
                    transform=ax.get_xaxis_transform(),
                    color=_OBSERVED_COLOR,
                    alpha=_REGION_ALPHA,
                    linewidth=0,
                    label=label if number == 0 else None,
                )
            )
        return regions

    def _plot_summary(self, alpha):
        ax = self.ax_
        score = np.asarray(self.score, dtype=np.float64)
        fwer = self.pvalue_fwer is not None
        pvalue = np.asarray(self.pvalue_fwer if fwer else self.pvalue, np.float64)
        label = "FWER p" if fwer else "p"
        height = -np.log10(pvalue)
        significant = pvalue <= alpha
        self.bars_ = None
        self.regions_ = []
        self.scatter_ = [
            ax.scatter(
                score[~significant],
                height[~significant],
                s=8,
                color=_NULL_COLOR,
                alpha=0.6,
                label=f"{label} > {alpha:g} ({np.count_nonzero(~significant)})",
            ),
            ax.scatter(
                score[significant],
                height[significant],
                s=8,
                color=_OBSERVED_COLOR,
                label=f"{label} \u2264 {alpha:g} ({np.count_nonzero(significant)})",
            ),
        ]
        self.line_ = ax.axhline(
            -np.log10(alpha),
            color="black",
            linestyle="--",
            linewidth=1,
            label=f"{label} = {alpha:g}",
        )
        ax.set_xlabel(f"observed {self.score_name}")
        ax.set_ylabel(f"-log10({label})")
        ax.set_title(
            f"{_count(score.size, 'target')}, "
            f"{np.count_nonzero(significant)} significant ({self.alternative})"
        )
        finite = height[np.isfinite(height)]
        top = max(finite.max(initial=0.0), -np.log10(alpha))
        ax.set_ylim(bottom=-0.05 * top, top=top / (1.0 - _LEGEND_HEADROOM))
        ax.legend(loc="upper left", fontsize="small")

    @classmethod
    def from_estimator(
        cls,
        scorer,
        *,
        target=None,
        metric=None,
        ax=None,
        bins=DEFAULT_BINS,
        alpha=0.05,
    ):
        """Draw the result of a fitted :class:`~skbatch.PermutationScorer`.

        Parameters
        ----------
        scorer : PermutationScorer
            Fitted. A histogram needs ``return_null=True``; the per-target
            summary of ``multioutput="raw_values"`` does not. Its
            ``alternative`` decides the shaded region and the labels.
        target : int, default=None
            With ``multioutput="raw_values"``: draw this target's histogram
            instead of the summary of all targets.
        metric : str, default=None
            With several metrics in ``scoring``: the name of the one to draw
            (required then); a fit with one metric takes None.
        ax : matplotlib Axes, default=None
            Axes to draw on; None creates a figure.
        bins : int or sequence, default=30
            Histogram bins.
        alpha : float, default=0.05
            Significance level of the summary's threshold.

        Returns
        -------
        display : PermutationTestDisplay
            The drawn display.
        """
        _check_matplotlib("PermutationTestDisplay.from_estimator")
        _check_fitted(
            scorer, ("score_", "pvalue_", "pvalue_fwer_"), "PermutationScorer"
        )
        null = getattr(scorer, "permutation_scores_", None)
        score, pvalue, fwer = scorer.score_, scorer.pvalue_, scorer.pvalue_fwer_
        score_name = None
        if isinstance(score, dict):
            if metric not in score:
                raise ValueError(
                    f"The PermutationScorer was fit with several metrics "
                    f"{list(score)}: pass metric, one of them, to choose the one "
                    f"to draw, got metric={metric!r}"
                )
            score, pvalue, fwer = score[metric], pvalue[metric], fwer[metric]
            null = None if null is None else null[metric]
            score_name = metric
        elif metric is not None:
            raise ValueError(
                f"metric applies to a PermutationScorer fit with several "
                f"metrics; this one has one score, got metric={metric!r}"
            )
        one_statistic = np.ndim(score) == 0
        per_target = np.ndim(score) > 0
        if target is not None:
            if not per_target:
                raise ValueError(
                    "target applies to multioutput='raw_values'; this scorer "
                    f"has one score (multioutput={scorer.multioutput!r})"
                )
            n_targets = np.shape(score)[0]
            if not isinstance(target, numbers.Integral) or not (
                -n_targets <= target < n_targets
            ):
                raise ValueError(
                    f"target must be an int in [0, {n_targets}), got {target!r}"
                )
            score, pvalue, fwer = score[target], pvalue[target], fwer[target]
            null = None if null is None else null[:, target]
            per_target = False
        if not per_target and null is None:
            raise ValueError(
                "The histogram of a permutation test needs the permuted scores: "
                "fit the PermutationScorer with return_null=True."
            )
        if score_name is None:
            scoring = getattr(scorer, "scoring", None)
            score_name = "R\u00b2" if scoring is None else "score"
            if isinstance(scoring, str):
                score_name = scoring
        display = cls(
            score,
            pvalue,
            null_scores=None if per_target else null,
            # One statistic has no family to correct for.
            pvalue_fwer=None if one_statistic else fwer,
            target=target,
            score_name=score_name,
            alternative=getattr(scorer, "alternative", "greater"),
        )
        return display.plot(ax=ax, bins=bins, alpha=alpha)


class BootstrapDisplay:
    """Bootstrap estimates with their confidence intervals, largest first.

    A forest plot: the ``top_k`` elements of an attribute with the largest
    absolute estimates, one row each, sorted by estimate, each drawn as a
    point (the estimate on all data) and a horizontal segment (its
    interval), with a reference line at zero.

    A one-sided interval (``alternative="less"``: ``(-inf, upper]``;
    ``"greater"``: ``[lower, inf)``, as :class:`~skbatch.BootstrapEstimator`
    and :func:`scipy.stats.bootstrap` define them) is drawn as a ray: a
    segment from its finite bound to the edge of the axes, ending in an
    arrowhead there (:attr:`arrows_`); the x-limits are then fixed a margin
    beyond every finite value, and the title names the alternative.

    Build it with :meth:`from_estimator`; the constructor only stores data.

    Parameters
    ----------
    estimate, ci_lower, ci_upper : ndarray of shape (n_elements,)
        Estimates and interval bounds.
    names : list of str, default=None
        Label of each element; None numbers them.
    attribute : str, default="coef_"
        Name of the attribute, for the title.
    confidence_level : float, default=None
        Coverage of the intervals, for the title.
    alternative : {"two-sided", "less", "greater"}, default="two-sided"
        The intervals' alternative: "less" needs every ``ci_lower`` to be
        -inf, "greater" every ``ci_upper`` inf.

    Attributes
    ----------
    ax_ : matplotlib Axes
        Axes the display is drawn on.
    figure_ : matplotlib Figure
        Figure holding ``ax_``.
    indices_ : ndarray of shape (top_k,)
        Elements drawn, bottom row first (increasing estimate).
    intervals_ : matplotlib LineCollection
        One segment per drawn interval; an infinite bound's end lies on the
        edge of the axes.
    estimates_ : matplotlib Line2D
        The drawn estimates.
    arrows_ : list of matplotlib Line2D
        The arrowheads that mark the infinite ends of one-sided intervals on
        the edge of the axes: "<" on the left (-inf), ">" on the right
        (inf); empty when every drawn bound is finite.

    See Also
    --------
    skbatch.BootstrapEstimator : Computes the intervals this display draws.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import numpy as np
    >>> from sklearn.linear_model import Ridge
    >>> from skbatch import BootstrapEstimator
    >>> from skbatch.plotting import BootstrapDisplay
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((100, 5))
    >>> y = X @ [3.0, 0.0, -1.0, 0.0, 0.5] + rng.standard_normal(100)
    >>> boot = BootstrapEstimator(Ridge(), n_bootstrap=100, random_state=0)
    >>> display = BootstrapDisplay.from_estimator(boot.fit(X, y), top_k=3)
    >>> [label.get_text() for label in display.ax_.get_yticklabels()]
    ['x2', 'x4', 'x0']

    One-sided upper bounds are rays from the bound to the left edge:

    >>> less = BootstrapEstimator(
    ...     Ridge(), n_bootstrap=100, alternative="less", random_state=0
    ... )
    >>> display = BootstrapDisplay.from_estimator(less.fit(X, y), top_k=3)
    >>> display.arrows_[0].get_marker()
    '<'
    >>> display.ax_.get_title()
    "coef_: 3 of 5 by |estimate|, 95% upper bounds (alternative='less')"
    """

    def __init__(
        self,
        estimate,
        ci_lower,
        ci_upper,
        *,
        names=None,
        attribute="coef_",
        confidence_level=None,
        alternative="two-sided",
    ):
        self.estimate = estimate
        self.ci_lower = ci_lower
        self.ci_upper = ci_upper
        self.names = names
        self.attribute = attribute
        self.confidence_level = confidence_level
        self.alternative = alternative

    def plot(self, ax=None, *, top_k=DEFAULT_TOP_K):
        """Draw the ``top_k`` largest estimates with their intervals.

        Parameters
        ----------
        ax : matplotlib Axes, default=None
            Axes to draw on; None creates a figure.
        top_k : int or None, default=20
            How many elements to draw, those with the largest absolute
            estimate; None draws all.

        Returns
        -------
        display : BootstrapDisplay
            The display, with ``ax_``, ``figure_`` and the artists set.
        """
        _check_matplotlib("BootstrapDisplay.plot")
        estimate = np.asarray(self.estimate, dtype=np.float64).ravel()
        lower = np.asarray(self.ci_lower, dtype=np.float64).ravel()
        upper = np.asarray(self.ci_upper, dtype=np.float64).ravel()
        n = estimate.size
        if not (lower.size == upper.size == n):
            raise ValueError(
                f"estimate, ci_lower and ci_upper must have the same size, got "
                f"{n}, {lower.size} and {upper.size}"
            )
        names = [str(i) for i in range(n)] if self.names is None else list(self.names)
        if len(names) != n:
            raise ValueError(f"names must have {n} entries, got {len(names)}")
        alternative = check_alternative(self.alternative)
        open_bounds = {
            "less": ("ci_lower", lower, -np.inf),
            "greater": ("ci_upper", upper, np.inf),
        }
        if alternative in open_bounds:
            name, bound, infinity = open_bounds[alternative]
            finite = np.flatnonzero(bound != infinity)
            if finite.size:
                raise ValueError(
                    f"alternative={alternative!r} gives {name} = {infinity}, got "
                    f"{float(bound[finite[0]])!r} at element {finite[0]}"
                )
        if top_k is None:
            top_k = n
        if (
            isinstance(top_k, bool)
            or not isinstance(top_k, numbers.Integral)
            or top_k < 1
        ):
            raise ValueError(f"top_k must be None or an int >= 1, got {top_k!r}")
        # NaN estimates sort last, so they are dropped first.
        magnitude = np.nan_to_num(np.abs(estimate), nan=-1.0)
        largest = np.argsort(-magnitude, kind="stable")[:top_k]
        self.indices_ = largest[np.argsort(estimate[largest], kind="stable")]

        self.ax_, self.figure_ = _axes(ax)
        ax = self.ax_
        rows = np.arange(self.indices_.size)
        starts, stops = lower[self.indices_], upper[self.indices_]
        self.arrows_ = []
        if np.isinf(starts).any() or np.isinf(stops).any():
            edges = _ray_limits(estimate[self.indices_], starts, stops)
            ax.set_xlim(*edges)
            # Rays: the infinite end on the edge of the axes, marked there
            # (not for an undefined interval, a NaN bound, left undrawn).
            for open_ends, edge, marker in (
                (np.isneginf(starts) & ~np.isnan(stops), edges[0], "<"),
                (np.isposinf(stops) & ~np.isnan(starts), edges[1], ">"),
            ):
                if open_ends.any():
                    self.arrows_ += ax.plot(
                        np.full(np.count_nonzero(open_ends), edge),
                        rows[open_ends],
                        linestyle="none",
                        marker=marker,
                        color=_ESTIMATE_COLOR,
                        alpha=0.6,
                        label="unbounded side",
                    )
            starts = np.where(np.isneginf(starts), edges[0], starts)
            stops = np.where(np.isposinf(stops), edges[1], stops)
        self.intervals_ = ax.hlines(
            rows,
            starts,
            stops,
            color=_ESTIMATE_COLOR,
            linewidth=2,
            alpha=0.6,
        )
        (self.estimates_,) = ax.plot(
            estimate[self.indices_],
            rows,
            "o",
            color=_ESTIMATE_COLOR,
            markersize=4,
            label="estimate",
        )
        ax.axvline(0.0, color="black", linestyle=":", linewidth=1)
        ax.set_yticks(rows, [names[i] for i in self.indices_])
        coverage = (
            "" if self.confidence_level is None else f"{self.confidence_level:.0%} "
        )
        if alternative == "two-sided":
            level = f", {coverage}intervals" if coverage else ""
        else:
            kind = _ONE_SIDED_BOUNDS[alternative]
            level = f", {coverage}{kind} (alternative={alternative!r})"
        ax.set_title(
            f"{self.attribute}: {self.indices_.size} of {n} by |estimate|{level}"
        )
        ax.set_xlabel(self.attribute)
        return self

    @classmethod
    def from_estimator(
        cls, boot, *, attribute="coef_", target=None, top_k=DEFAULT_TOP_K, ax=None
    ):
        """Draw the intervals of a fitted :class:`~skbatch.BootstrapEstimator`.

        Parameters
        ----------
        boot : BootstrapEstimator
            Fitted. Its ``alternative`` decides how the intervals are drawn
            (one-sided ones as rays) and the title.
        attribute : str, default="coef_"
            Key of ``boot.results_``.
        target : int, default=None
            For a 2-D attribute (``coef_`` of several targets, shape
            (n_targets, n_features)): draw this row, over the features.
            None draws the largest elements of the whole array.
        top_k : int or None, default=20
            How many elements to draw, those with the largest absolute
            estimate; None draws all.
        ax : matplotlib Axes, default=None
            Axes to draw on; None creates a figure.

        Returns
        -------
        display : BootstrapDisplay
            The drawn display.
        """
        _check_matplotlib("BootstrapDisplay.from_estimator")
        _check_fitted(boot, ("results_",), "BootstrapEstimator")
        if attribute not in boot.results_:
            raise ValueError(
                f"attribute must be one of {sorted(boot.results_)}, the "
                f"bootstrapped attributes, got {attribute!r}"
            )
        result = boot.results_[attribute]
        estimate = np.asarray(result.estimate)
        lower, upper = np.asarray(result.ci_lower), np.asarray(result.ci_upper)
        if target is not None:
            if estimate.ndim != 2:
                raise ValueError(
                    f"target selects a row of a 2-D attribute; {attribute} has "
                    f"shape {estimate.shape}"
                )
            if not isinstance(target, numbers.Integral) or not (
                -estimate.shape[0] <= target < estimate.shape[0]
            ):
                raise ValueError(
                    f"target must be an int in [0, {estimate.shape[0]}), got {target!r}"
                )
            estimate, lower, upper = estimate[target], lower[target], upper[target]
        display = cls(
            estimate.ravel(),
            lower.ravel(),
            upper.ravel(),
            names=_element_names(boot, attribute, estimate.shape),
            attribute=attribute if target is None else f"{attribute}[{target}]",
            confidence_level=getattr(boot, "confidence_level", None),
            alternative=getattr(boot, "alternative", "two-sided"),
        )
        return display.plot(ax=ax, top_k=top_k)


def _ray_limits(estimate, lower, upper):
    """x-limits of a display with rays: every finite estimate and bound and
    the zero line inside, with a margin of ``_RAY_MARGIN`` of their span."""
    values = np.concatenate([[0.0], estimate, lower, upper])
    values = values[np.isfinite(values)]
    low, high = values.min(), values.max()
    margin = _RAY_MARGIN * (high - low) if high > low else max(abs(low), 1.0)
    return low - margin, high + margin


def _element_names(boot, attribute, shape):
    """Feature names for a vector over the features, else array indices."""
    n_features = getattr(boot, "n_features_in_", None)
    if len(shape) == 1 and attribute == "coef_" and shape[0] == n_features:
        names = getattr(boot, "feature_names_in_", None)
        if names is None:
            return [f"x{j}" for j in range(n_features)]
        return [str(name) for name in names]
    if len(shape) == 0:
        return [attribute]
    return [str(list(index)) for index in np.ndindex(*shape)]


def _pick(choice, n, names, what):
    """Indices of ``choice`` (None: all; ints, or names among ``names``)."""
    if choice is None:
        return np.arange(n)
    if isinstance(choice, str | numbers.Integral):
        choice = [choice]
    picked = []
    names = [str(name) for name in names]
    for item in choice:
        if isinstance(item, str):
            if item not in names:
                raise ValueError(f"{what} {item!r} is not one of {names}")
            picked.append(names.index(item))
        elif isinstance(item, numbers.Integral) and not isinstance(item, bool):
            if not -n <= item < n:
                raise ValueError(f"{what} index must be in [0, {n}), got {item!r}")
            picked.append(int(item) % n)
        else:
            raise TypeError(
                f"{what}s must be ints or names, got {type(item).__name__}: {item!r}"
            )
    if not picked:
        raise ValueError(f"choose at least one {what}, got {choice!r}")
    return np.asarray(picked)


class TRFDisplay:
    """Temporal response functions: weights over lag, one panel per feature.

    Each panel is one input feature; each line one target (an EEG/MEG
    channel), its weight at each lag, with the lags in milliseconds (in
    samples when the Delayer had no ``sfreq``). With bootstrap intervals
    (from a :class:`~skbatch.BootstrapEstimator`), each line has its
    interval as a shaded band. A dotted line marks zero weight, and a
    dotted vertical line lag 0.

    Build it with :meth:`from_estimator`; the constructor only stores data.

    Parameters
    ----------
    coef : ndarray of shape (n_targets, n_features, n_lags)
        The TRFs (:attr:`skbatch.TRF.coef`).
    lags : ndarray of shape (n_lags,)
        The lags, in seconds (``lag_unit="s"``) or samples.
    ci_lower, ci_upper : ndarray of shape (n_targets, n_features, n_lags), \
            default=None
        Interval bounds, drawn as bands.
    feature_names : list of str, default=None
        Panel titles; None numbers the features ``x0, x1, ...``.
    target_names : list of str, default=None
        Legend labels of the targets; None numbers them.
    lag_unit : {"s", "samples"}, default="s"
        Unit of ``lags``: seconds are drawn in ms.
    confidence_level : float, default=None
        Coverage of the intervals, for the legend.

    Attributes
    ----------
    ax_ : ndarray of matplotlib Axes
        One axes per drawn feature.
    figure_ : matplotlib Figure
        Figure holding the axes.
    lines_ : ndarray of matplotlib Line2D of shape (n_drawn_features, n_drawn_targets)
        The drawn TRFs.
    bands_ : ndarray of matplotlib PolyCollection or None
        The drawn intervals, same shape as ``lines_``; None without them.
    targets_, features_ : ndarray of int
        The targets and features drawn.

    See Also
    --------
    skbatch.trf_from_estimator : The TRFs this display draws.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import numpy as np
    >>> from sklearn.pipeline import make_pipeline
    >>> from skbatch import BatchedRidge, Delayer
    >>> from skbatch.plotting import TRFDisplay
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((400, 2))
    >>> Y = np.roll(X[:, :1], 3, axis=0) + rng.standard_normal((400, 3))
    >>> model = make_pipeline(
    ...     Delayer(tmin=0.0, tmax=0.1, sfreq=50.0), BatchedRidge()
    ... ).fit(X, Y)
    >>> display = TRFDisplay.from_estimator(model, targets=[0, 2])
    >>> display.lines_.shape
    (2, 2)
    >>> display.ax_[0].get_xlabel(), display.ax_[0].get_title()
    ('lag (ms)', 'x0')
    """

    def __init__(
        self,
        coef,
        lags,
        *,
        ci_lower=None,
        ci_upper=None,
        feature_names=None,
        target_names=None,
        lag_unit="s",
        confidence_level=None,
    ):
        self.coef = coef
        self.lags = lags
        self.ci_lower = ci_lower
        self.ci_upper = ci_upper
        self.feature_names = feature_names
        self.target_names = target_names
        self.lag_unit = lag_unit
        self.confidence_level = confidence_level

    def plot(self, ax=None, *, targets=None, features=None):
        """Draw the TRFs of ``targets``, one panel per feature of ``features``.

        Parameters
        ----------
        ax : matplotlib Axes or array-like of Axes, default=None
            One axes per drawn feature; None creates a figure with a row of
            panels sharing their y-axis.
        targets : int, str or list of int or str, default=None
            Targets (channels) to draw, by index or by ``target_names``;
            None draws all.
        features : int, str or list of int or str, default=None
            Features to draw, by index or by ``feature_names``; None draws
            all.

        Returns
        -------
        display : TRFDisplay
            The display, with ``ax_``, ``figure_`` and the artists set.
        """
        _check_matplotlib("TRFDisplay.plot")
        coef = np.asarray(self.coef, dtype=np.float64)
        if coef.ndim != 3:
            raise ValueError(
                f"coef must have shape (n_targets, n_features, n_lags), got shape "
                f"{coef.shape}"
            )
        n_targets, n_features, n_lags = coef.shape
        lags = np.asarray(self.lags, dtype=np.float64)
        if lags.shape != (n_lags,):
            raise ValueError(f"lags must have shape ({n_lags},), got {lags.shape}")
        if self.lag_unit not in ("s", "samples"):
            raise ValueError(
                f"lag_unit must be 's' or 'samples', got {self.lag_unit!r}"
            )
        bands = self.ci_lower is not None and self.ci_upper is not None
        if bands:
            lower = np.asarray(self.ci_lower, dtype=np.float64)
            upper = np.asarray(self.ci_upper, dtype=np.float64)
            if lower.shape != coef.shape or upper.shape != coef.shape:
                raise ValueError(
                    f"ci_lower and ci_upper must have coef's shape {coef.shape}, "
                    f"got {lower.shape} and {upper.shape}"
                )
        feature_names = (
            [f"x{j}" for j in range(n_features)]
            if self.feature_names is None
            else [str(name) for name in self.feature_names]
        )
        target_names = (
            [str(t) for t in range(n_targets)]
            if self.target_names is None
            else [str(name) for name in self.target_names]
        )
        if len(feature_names) != n_features or len(target_names) != n_targets:
            raise ValueError(
                f"feature_names and target_names must have {n_features} and "
                f"{n_targets} entries, got {len(feature_names)} and "
                f"{len(target_names)}"
            )
        self.targets_ = _pick(targets, n_targets, target_names, "target")
        self.features_ = _pick(features, n_features, feature_names, "feature")
        if ax is None:
            import matplotlib.pyplot as plt

            _, ax = plt.subplots(
                1,
                self.features_.size,
                sharey=True,
                squeeze=False,
                figsize=(5.5 * self.features_.size, 4.0),
                layout="constrained",
            )
        axes = np.asarray(ax, dtype=object).ravel()
        if axes.size != self.features_.size:
            raise ValueError(
                f"ax must hold one axes per drawn feature ({self.features_.size}), "
                f"got {axes.size}"
            )
        self.ax_, self.figure_ = axes, axes[0].figure
        x = lags * _MS if self.lag_unit == "s" else lags
        xlabel = "lag (ms)" if self.lag_unit == "s" else "lag (samples)"
        self.lines_ = np.empty((axes.size, self.targets_.size), dtype=object)
        self.bands_ = np.empty_like(self.lines_) if bands else None
        coverage = (
            "" if self.confidence_level is None else f"{self.confidence_level:.0%} "
        )
        for panel, (axes_k, j) in enumerate(zip(axes, self.features_)):
            for line, t in enumerate(self.targets_):
                (self.lines_[panel, line],) = axes_k.plot(
                    x, coef[t, j], label=target_names[t]
                )
                if bands:
                    self.bands_[panel, line] = axes_k.fill_between(
                        x,
                        lower[t, j],
                        upper[t, j],
                        color=self.lines_[panel, line].get_color(),
                        alpha=_BAND_ALPHA,
                        linewidth=0,
                        label=f"{coverage}interval" if line == 0 else None,
                    )
            axes_k.axhline(0.0, color="black", linestyle=":", linewidth=1)
            if x[0] <= 0 <= x[-1]:
                axes_k.axvline(0.0, color="black", linestyle=":", linewidth=1)
            axes_k.set_title(feature_names[j])
            axes_k.set_xlabel(xlabel)
        axes[0].set_ylabel("TRF weight (target units per feature unit)")
        axes[0].legend(fontsize="small")
        return self

    @classmethod
    def from_estimator(
        cls,
        estimator,
        *,
        delayer=None,
        targets=None,
        features=None,
        target_names=None,
        ax=None,
    ):
        """Draw the TRFs of a fitted ``Pipeline(Delayer, regressor)``.

        Parameters
        ----------
        estimator : Pipeline, regressor or BootstrapEstimator
            As :func:`~skbatch.trf_from_estimator` takes it; a
            BootstrapEstimator adds its intervals as bands.
        delayer : Delayer, default=None
            The fitted Delayer of a regressor fit on delayed features, as
            :func:`~skbatch.trf_from_estimator` takes it.
        targets : int, str or list of int or str, default=None
            Targets (channels) to draw; None draws all.
        features : int, str or list of int or str, default=None
            Features to draw, by index or input name; None draws all.
        target_names : list of str, default=None
            Names of all targets, for the legend (and ``targets``); None
            numbers them.
        ax : matplotlib Axes or array-like of Axes, default=None
            One axes per drawn feature; None creates a figure.

        Returns
        -------
        display : TRFDisplay
            The drawn display.
        """
        _check_matplotlib("TRFDisplay.from_estimator")
        trf = trf_from_estimator(estimator, delayer=delayer)
        display = cls(
            trf.coef,
            trf.delays if trf.times is None else trf.times,
            ci_lower=trf.ci_lower,
            ci_upper=trf.ci_upper,
            feature_names=trf.feature_names,
            target_names=target_names,
            lag_unit="samples" if trf.times is None else "s",
            confidence_level=trf.confidence_level,
        )
        return display.plot(ax=ax, targets=targets, features=features)
