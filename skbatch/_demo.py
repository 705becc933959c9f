"""``skbatch demo``: the three estimators on a simulated encoding model.

An encoding model predicts many brain responses (voxels, "targets") from
stimulus features. The demo simulates one in which a known minority of the
targets respond to the features, fits :class:`~skbatch.BatchedRidge` with a
per-target alpha, tests every target with :class:`~skbatch.PermutationScorer`
(family-wise corrected), bootstraps the weights of the significant targets
with :class:`~skbatch.BootstrapEstimator`, and checks the findings against
the ground truth.
"""

import contextlib
import logging
import sys
import textwrap
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psutil

from .bootstrap import BootstrapEstimator
from .permutation import PermutationScorer
from .plotting import (
    _LEGEND_HEADROOM,
    BootstrapDisplay,
    PermutationTestDisplay,
    _count,
)
from .ridge import BatchedRidge

# Default sizes: the whole demo runs in about a minute on two CPU cores.
N_SAMPLES = 300
N_FEATURES = 40
N_TARGETS = 2000
N_PERMUTATIONS = 200
N_BOOTSTRAP = 1000
# Fewest samples the demo runs with: 5-fold CV of the test and a held-out
# fifth both need rows.
MIN_DEMO_SAMPLES = 20
# Share of the targets that respond to the stimulus (the rest is noise), as
# in a whole-brain map where most voxels do not follow a given feature space.
SIGNAL_FRACTION = 0.1
# Features that drive a responsive target: sparse weights give the bootstrap
# intervals true zeros to be checked against.
N_ACTIVE_FEATURES = 8
# Variance explained by the stimulus in a responsive target, drawn uniformly:
# from hard to detect among thousands of tests, to strong.
SIGNAL_R2 = (0.1, 0.5)
# Correlation of neighbouring features (AR(1) across the feature axis), as
# between related stimulus descriptors.
FEATURE_CORRELATION = 0.3
# Regularisation grid and criterion of every ridge in the demo. Encoding
# models of noisy targets often want strong regularisation: the grid spans
# six decades, half a decade apart. GCV chooses alpha at O(rank) per target
# and alpha, which matters when each of the permutations refits every target.
ALPHAS = np.logspace(-1, 5, 13)
RIDGE_CV = "gcv"
# Rows held out to report the prediction accuracy of the fitted model.
TEST_FRACTION = 0.2
# Family-wise error rate of the significance test.
ALPHA_LEVEL = 0.05
# Coverage of the bootstrap intervals of the weights.
CONFIDENCE_LEVEL = 0.95
# Interval between two readings of the resident memory of the process.
MEMORY_POLL_S = 0.005
FIGURES = ("ridge_scores", "permutation_test", "bootstrap_intervals", "overview")
# Size (inches) of one panel, and resolutions: the overview, three panels
# side by side, stays a small file (it is the picture of the README).
PANEL_SIZE = (5.5, 4.2)
PANEL_DPI = 100
OVERVIEW_DPI = 80
# Bins of the held-out R^2 histogram.
SCORE_BINS = 40
# Captions under the panels: characters per line at the caption's font size
# (points), which fill a panel's width less its margins, and the inches
# added below the panels for them, so that the plots keep their size.
CAPTION_WIDTH = 84
CAPTION_FONT_SIZE = 8
CAPTION_HEIGHT = 1.1
# Left margin of a caption, as a share of its panel's width.
CAPTION_MARGIN = 0.03


@dataclass
class EncodingData:
    """A simulated encoding model and its ground truth.

    Attributes
    ----------
    X : ndarray of shape (n_samples, n_features)
        Stimulus features.
    Y : ndarray of shape (n_samples, n_targets)
        Responses: stimulus-driven signal plus unit-variance noise.
    coef : ndarray of shape (n_targets, n_features)
        True weights; rows of targets without signal are zero.
    has_signal : ndarray of shape (n_targets,)
        Which targets respond to the stimulus.
    r2 : ndarray of shape (n_targets,)
        Share of each target's variance explained by the stimulus.
    """

    X: np.ndarray
    Y: np.ndarray
    coef: np.ndarray
    has_signal: np.ndarray
    r2: np.ndarray


def simulate_encoding_data(
    n_samples=N_SAMPLES, n_features=N_FEATURES, n_targets=N_TARGETS, *, random_state=0
):
    """Simulate stimulus features and the responses of many targets.

    Parameters
    ----------
    n_samples : int, default=300
        Stimuli (rows), independent so that permuting them is valid.
    n_features : int, default=40
        Stimulus features.
    n_targets : int, default=2000
        Responses; a tenth of them carry signal.
    random_state : int, default=0
        Seed of the simulation.

    Returns
    -------
    EncodingData

    Examples
    --------
    >>> from skbatch._demo import simulate_encoding_data
    >>> data = simulate_encoding_data(50, 5, 100)
    >>> data.X.shape, data.Y.shape, int(data.has_signal.sum())
    ((50, 5), (50, 100), 10)
    """
    for name, value, minimum in (
        ("n_samples", n_samples, MIN_DEMO_SAMPLES),
        ("n_features", n_features, 1),
        ("n_targets", n_targets, 1),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    rng = np.random.default_rng(random_state)
    lags = np.abs(np.subtract.outer(np.arange(n_features), np.arange(n_features)))
    mixing = np.linalg.cholesky(FEATURE_CORRELATION**lags)
    X = rng.standard_normal((n_samples, n_features)) @ mixing.T

    n_signal = max(1, round(SIGNAL_FRACTION * n_targets))
    has_signal = np.zeros(n_targets, dtype=bool)
    has_signal[rng.choice(n_targets, n_signal, replace=False)] = True
    coef = np.zeros((n_targets, n_features))
    n_active = min(N_ACTIVE_FEATURES, n_features)
    for target in np.flatnonzero(has_signal):
        active = rng.choice(n_features, n_active, replace=False)
        coef[target, active] = rng.standard_normal(n_active)
    r2 = np.where(has_signal, rng.uniform(*SIGNAL_R2, n_targets), 0.0)
    # Scale each signal so that it explains r2 of its target's variance, the
    # noise having unit variance.
    signal_var = np.einsum("tf,fg,tg->t", coef, mixing @ mixing.T, coef)
    scale = np.sqrt(r2 / (1.0 - r2) / np.where(signal_var > 0, signal_var, 1.0))
    coef *= scale[:, None]
    Y = X @ coef.T + rng.standard_normal((n_samples, n_targets))
    return EncodingData(X, Y, coef, has_signal, r2)


@dataclass
class StepReport:
    """Cost of one step of the demo.

    Time and peak memory are measured around the step; the device, the
    engine batches run and the out-of-memory splits are read from the
    ``fit_report_`` of the step's fit.
    """

    name: str
    seconds: float
    device: str
    n_batches: int
    n_oom_recoveries: int
    peak_memory_gb: float
    peak_gpu_memory_gb: float | None = None


@dataclass
class DemoResult:
    """What the demo found, against the ground truth.

    Attributes
    ----------
    n_targets, n_true_effects : int
        Targets, and those with signal.
    n_significant : int
        Targets with a family-wise p-value <= 0.05.
    n_recovered : int
        Significant targets that have signal.
    n_false_positives : int
        Significant targets without signal.
    median_r2_signal, median_r2_noise : float
        Median held-out R^2 of targets with and without signal.
    n_weights_detected, n_true_weights : int
        Among significant targets with signal: true non-zero weights whose
        bootstrap interval excludes 0, and all their true non-zero weights.
    n_zero_weights_excluded, n_zero_weights : int
        The same for true zero weights (intervals that wrongly exclude 0).
    n_zero_beside_excluded, n_zero_beside : int
        The same for the true zero weights of features next to a feature
        with a non-zero weight (neighbouring features correlate).
    steps : list of StepReport
        Time, device, batches and memory of each step.
    figures : dict of str to Path
        PNG files written (empty without matplotlib).
    """

    n_targets: int
    n_true_effects: int
    n_significant: int
    n_recovered: int
    n_false_positives: int
    median_r2_signal: float
    median_r2_noise: float
    n_weights_detected: int = 0
    n_true_weights: int = 0
    n_zero_weights_excluded: int = 0
    n_zero_weights: int = 0
    n_zero_beside_excluded: int = 0
    n_zero_beside: int = 0
    steps: list = field(default_factory=list)
    figures: dict = field(default_factory=dict)

    @property
    def recall(self):
        """Share of the true effects found significant."""
        return self.n_recovered / max(self.n_true_effects, 1)


class _PeakMemory:
    """Largest resident memory of this process, read every few ms in a thread."""

    def __init__(self):
        self._process = psutil.Process()
        self._stop = threading.Event()
        self.peak = self._process.memory_info().rss
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self):
        while not self._stop.wait(MEMORY_POLL_S):
            self.peak = max(self.peak, self._process.memory_info().rss)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc_info):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._process.memory_info().rss)


def _cuda():
    """torch.cuda when torch is already imported and sees a GPU, else None."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    return torch.cuda


def _device_label(backend):
    """ "numpy", "torch-cpu", "torch-cuda:0", "jax-gpu:1"..."""
    return f"{backend.library}-{backend.device}" if backend.is_gpu else backend.name


def _read_report(step, estimator):
    """The device, batches and OOM splits of a step, from its fit's report."""
    report = estimator.fit_report_
    step.device = _device_label(report.backend)
    step.n_batches = sum(stage.n_batches_run for stage in report.stages)
    step.n_oom_recoveries = sum(stage.n_oom_splits for stage in report.stages)


@contextlib.contextmanager
def _measure(name, steps, verbose):
    """Time a step and measure its peak memory.

    Host memory is the resident size of the process; when torch computes on
    CUDA during the step, its peak allocation there is reported too. The
    step's device and engine batches are read from its fit's report
    (:func:`_read_report`).
    """
    if verbose:
        print(f"{name} ...", flush=True)
    step = StepReport(name, 0.0, "", 0, 0, 0.0)
    cuda = _cuda()
    if cuda is not None:
        for index in range(cuda.device_count()):
            cuda.reset_peak_memory_stats(index)
    start = time.perf_counter()
    with _PeakMemory() as memory:
        yield step
    step.seconds = time.perf_counter() - start
    step.peak_memory_gb = memory.peak / 1e9
    cuda = _cuda()
    if cuda is not None:
        peak = max(cuda.max_memory_allocated(i) for i in range(cuda.device_count()))
        step.peak_gpu_memory_gb = peak / 1e9 if peak else None
    steps.append(step)


def run_demo(
    *,
    n_targets=N_TARGETS,
    n_samples=N_SAMPLES,
    n_features=N_FEATURES,
    n_permutations=N_PERMUTATIONS,
    n_bootstrap=N_BOOTSTRAP,
    device="auto",
    out="skbatch-demo",
    random_state=0,
    verbose=1,
):
    """Simulate an encoding model, fit, test, bootstrap, and draw the result.

    Parameters
    ----------
    n_targets, n_samples, n_features : int
        Size of the simulated data set.
    n_permutations : int, default=200
        Permutations of the test.
    n_bootstrap : int, default=1000
        Bootstrap replicates.
    device : str, default="auto"
        Where the estimators compute.
    out : str or Path, default="skbatch-demo"
        Folder of the figures, created if needed.
    random_state : int, default=0
        Seed of the simulation, the permutations and the resamples.
    verbose : int, default=1
        Passed to the estimators: 1 shows progress bars on a terminal.

    Returns
    -------
    DemoResult
    """
    data = simulate_encoding_data(
        n_samples, n_features, n_targets, random_state=random_state
    )
    n_train = n_samples - round(TEST_FRACTION * n_samples)
    steps = []

    def ridge():
        return BatchedRidge(ALPHAS, cv=RIDGE_CV, device=device, verbose=verbose)

    with _measure("BatchedRidge: fit, held-out R\u00b2", steps, verbose) as step:
        model = ridge().fit(data.X[:n_train], data.Y[:n_train])
        test_r2 = model.score_per_target(data.X[n_train:], data.Y[n_train:])
        _read_report(step, model)

    with _measure(
        f"PermutationScorer: {_count(n_permutations, 'permutation')}", steps, verbose
    ) as step:
        scorer = PermutationScorer(
            ridge(),
            n_permutations=n_permutations,
            multioutput="raw_values",
            random_state=random_state,
            device=device,
            verbose=verbose,
        ).fit(data.X, data.Y)
        _read_report(step, scorer)
    significant = scorer.pvalue_fwer_ <= ALPHA_LEVEL

    result = DemoResult(
        n_targets=n_targets,
        n_true_effects=int(data.has_signal.sum()),
        n_significant=int(significant.sum()),
        n_recovered=int((significant & data.has_signal).sum()),
        n_false_positives=int((significant & ~data.has_signal).sum()),
        median_r2_signal=_median(test_r2[data.has_signal]),
        median_r2_noise=_median(test_r2[~data.has_signal]),
        steps=steps,
    )

    boot = None
    if significant.any():
        with _measure(
            f"BootstrapEstimator: {_count(n_bootstrap, 'replicate')}", steps, verbose
        ) as step:
            boot = BootstrapEstimator(
                ridge(),
                n_bootstrap=n_bootstrap,
                confidence_level=CONFIDENCE_LEVEL,
                attributes=["coef_"],
                random_state=random_state,
                device=device,
                verbose=verbose,
            ).fit(data.X, data.Y[:, significant])
            _read_report(step, boot)
        coef = boot.results_["coef_"]
        kept = data.has_signal[significant]
        counts = count_intervals_excluding_zero(
            data.coef[significant][kept], coef.ci_lower[kept], coef.ci_upper[kept]
        )
        for name, value in counts.items():
            setattr(result, name, value)

    captions = figure_captions(result, scorer, boot, n_samples - n_train, n_train)
    result.figures = _draw(
        Path(out), data, test_r2, scorer, boot, significant, n_train, captions
    )
    return result


def figure_captions(result, scorer, boot, n_test, n_train):
    """What each panel of the demo shows, and how to read it.

    The permutation panel's explains the floor of the p-values: no p-value
    of ``n`` permutations is below ``1 / (n + 1)``, so ``-log10 p`` stops at
    ``log10(n + 1)``. The interval panel's explains why intervals of truly
    zero weights may exclude 0: each interval covers its own true value with
    the confidence level, uncorrected for the many weights, so about
    ``1 - level`` of the zero weights exclude 0 by chance; and ridge's
    shrinkage moves part of a correlated neighbour's weight onto a zero
    weight, so that its estimate and interval sit away from 0.

    Parameters
    ----------
    result : DemoResult
        With its counts of intervals excluding 0.
    scorer : PermutationScorer
        The fitted test.
    boot : BootstrapEstimator or None
        The fitted bootstrap; None when no target was significant.
    n_test, n_train : int
        Rows held out, and rows the model was fit on.

    Returns
    -------
    captions : dict of str to str
        One caption per panel, keyed by figure name (``FIGURES`` but the
        overview, which shows all three).

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> from skbatch._demo import DemoResult, figure_captions
    >>> result = DemoResult(10, 1, 1, 1, 0, 0.3, -0.01)
    >>> scorer = SimpleNamespace(n_permutations=200)
    >>> caption = figure_captions(result, scorer, None, 60, 240)["permutation_test"]
    >>> "1/(200 + 1) = 0.005, so -log10 p stops at 2.30" in caption
    True
    """
    n_permutations = scorer.n_permutations
    floor = 1.0 / (n_permutations + 1)
    captions = {
        "ridge_scores": (
            f"Held-out R\u00b2 of each target on the last {_count(n_test, 'row')}, "
            f"the model fit on the first {n_train} with one alpha per target "
            f"(generalized CV). Targets without signal sit near 0, a little "
            f"below: a model fit to noise predicts new rows worse than their "
            f"mean."
        ),
        "permutation_test": (
            f"Each dot is a target: its observed R\u00b2 and -log10 of its "
            f"family-wise p-value (dashed: FWER p = {ALPHA_LEVEL:g}). No p-value "
            f"of {_count(n_permutations, 'permutation')} is below "
            f"1/({n_permutations} + 1) = {floor:.2g}, so -log10 p stops at "
            f"{-np.log10(floor):.2f} (dotted): the targets there beat every "
            f"permutation, and only more permutations would tell them apart."
        ),
    }
    if boot is None:
        captions["bootstrap_intervals"] = (
            "No target was significant, so no weight was bootstrapped."
        )
        return captions
    level = f"{boot.confidence_level:.0%}"
    miss = f"{1 - boot.confidence_level:.0%}"
    captions["bootstrap_intervals"] = (
        f"{level} bootstrap intervals of the weights of the most significant "
        f"target; crosses: the true weights. An interval of a true zero weight "
        f"may exclude 0: each interval covers its own weight {level} of the "
        f"time, with no correction for the many weights, so about {miss} of "
        f"the zero weights exclude 0 by chance; and ridge shrinks the non-zero "
        f"weights and moves part of them onto correlated neighbouring "
        f"features, whose zero weights it then estimates away from 0. Over "
        f"the significant targets with signal, "
        f"{_share(result.n_zero_weights_excluded, result.n_zero_weights)} zero "
        f"weights exclude 0, "
        f"{_share(result.n_zero_beside_excluded, result.n_zero_beside)} of "
        f"those next to a non-zero weight."
    )
    return captions


def count_intervals_excluding_zero(true_coef, ci_lower, ci_upper):
    """Count the intervals that exclude 0, by what the true weight is.

    Parameters
    ----------
    true_coef, ci_lower, ci_upper : ndarray of shape (n_targets, n_features)
        True weights and the bounds of their intervals.

    Returns
    -------
    counts : dict of str to int
        The ``n_weights_detected``, ``n_true_weights``,
        ``n_zero_weights_excluded``, ``n_zero_weights``,
        ``n_zero_beside_excluded`` and ``n_zero_beside`` of
        :class:`DemoResult`. "Beside" is a zero weight of a feature next to
        (index +-1) a feature with a non-zero weight of the same target.

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch._demo import count_intervals_excluding_zero
    >>> true = np.array([[0.0, 1.0, 0.0, 0.0]])
    >>> lower, upper = np.array([[0.1, 0.5, -1, -1]]), np.array([[1.0, 2, 1, 1]])
    >>> counts = count_intervals_excluding_zero(true, lower, upper)
    >>> counts["n_zero_beside_excluded"], counts["n_zero_beside"]
    (1, 2)
    """
    excludes_zero = (ci_lower > 0) | (ci_upper < 0)
    nonzero = true_coef != 0
    beside = np.zeros_like(nonzero)
    beside[:, 1:] |= nonzero[:, :-1]
    beside[:, :-1] |= nonzero[:, 1:]
    zero = ~nonzero
    zero_beside = zero & beside
    return {
        "n_weights_detected": int((excludes_zero & nonzero).sum()),
        "n_true_weights": int(nonzero.sum()),
        "n_zero_weights_excluded": int((excludes_zero & zero).sum()),
        "n_zero_weights": int(zero.sum()),
        "n_zero_beside_excluded": int((excludes_zero & zero_beside).sum()),
        "n_zero_beside": int(zero_beside.sum()),
    }


def _median(values):
    return float(np.median(values)) if values.size else float("nan")


def _draw(out, data, test_r2, scorer, boot, significant, n_train, captions):
    """Write the figures, each panel over its caption; none (an empty dict)
    without matplotlib."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return {}
    out.mkdir(parents=True, exist_ok=True)
    panels = (
        lambda ax: _plot_scores(ax, data, test_r2, n_train),
        lambda ax: _plot_permutations(ax, scorer),
        lambda ax: _plot_intervals(ax, data, scorer, boot, significant),
    )
    paths = {}
    for name, panel in zip(FIGURES, panels):
        figure = _captioned_figure(Figure, [captions[name]])
        panel(figure.add_subplot())
        paths[name] = out / f"{name}.png"
        figure.savefig(paths[name], dpi=PANEL_DPI)
    overview = _captioned_figure(Figure, [captions[name] for name in FIGURES[:3]])
    for ax, panel in zip(overview.subplots(1, 3), panels):
        panel(ax)
    paths["overview"] = out / "overview.png"
    overview.savefig(paths["overview"], dpi=OVERVIEW_DPI)
    return paths


def _captioned_figure(Figure, captions):
    """A figure of one panel per caption side by side, each caption below its
    panel, in a band the panels' layout leaves free."""
    width, height = PANEL_SIZE
    n_panels = len(captions)
    figure = Figure(
        figsize=(n_panels * width, height + CAPTION_HEIGHT), layout="constrained"
    )
    band = CAPTION_HEIGHT / (height + CAPTION_HEIGHT)
    figure.get_layout_engine().set(rect=(0.0, band, 1.0, 1.0 - band))
    for column, caption in enumerate(captions):
        figure.text(
            (column + CAPTION_MARGIN) / n_panels,
            band,
            textwrap.fill(caption, CAPTION_WIDTH),
            ha="left",
            va="top",
            fontsize=CAPTION_FONT_SIZE,
            color="0.25",
        )
    return figure


def _plot_permutations(ax, scorer):
    """The per-target summary of the test, with the floor of its p-values."""
    PermutationTestDisplay.from_estimator(scorer, ax=ax, alpha=ALPHA_LEVEL)
    n = scorer.n_permutations
    floor = np.log10(n + 1)
    ax.axhline(
        floor,
        color="tab:gray",
        linestyle=":",
        linewidth=1,
        label=f"smallest p, 1/({n} + 1)",
    )
    bottom, top = ax.get_ylim()
    ax.set_ylim(bottom, max(top, floor / (1.0 - _LEGEND_HEADROOM)))
    ax.legend(loc="upper left", fontsize="small")


def _plot_scores(ax, data, test_r2, n_train):
    bins = np.linspace(min(test_r2.min(), -0.1), max(test_r2.max(), 0.1), SCORE_BINS)
    for mask, color, label in (
        (~data.has_signal, "tab:gray", "no signal"),
        (data.has_signal, "tab:blue", "signal"),
    ):
        n = np.count_nonzero(mask)
        # Shares rather than counts: the few targets with signal stay visible.
        ax.hist(
            test_r2[mask],
            bins=bins,
            weights=np.full(n, 1.0 / max(n, 1)),
            color=color,
            alpha=0.7,
            label=f"{label} ({n})",
        )
    ax.legend()
    ax.set_xlabel("held-out R\u00b2")
    ax.set_ylabel("share of targets")
    ax.set_title(
        f"BatchedRidge, per-target alpha ({data.Y.shape[0] - n_train} test rows)"
    )


def _plot_intervals(ax, data, scorer, boot, significant):
    if boot is None:
        ax.text(0.5, 0.5, "no significant target", ha="center", va="center")
        ax.set_axis_off()
        return
    # The most significant target, then the best score among ties.
    targets = np.flatnonzero(significant)
    order = np.lexsort((-scorer.score_[targets], scorer.pvalue_fwer_[targets]))
    row = int(order[0])
    display = BootstrapDisplay.from_estimator(boot, target=row, ax=ax)
    n_features = data.coef.shape[1]
    n_shown = display.indices_.size
    truth = data.coef[targets[row], display.indices_]
    ax.plot(
        truth,
        np.arange(truth.size),
        "x",
        color="tab:red",
        label="true weight",
    )
    ax.legend(loc="lower right")
    ax.set_xlabel(f"weight, {boot.confidence_level:.0%} interval")
    shown = (
        f"all {_count(n_features, 'weight')}"
        if n_shown == n_features
        else f"largest {n_shown} of {n_features} weights"
    )
    ax.set_title(f"BootstrapEstimator: target {targets[row]}, {shown}")


def format_report(result, data_shape, seed):
    """The table ``skbatch demo`` prints."""
    n_samples, n_features = data_shape
    gpu = any(step.peak_gpu_memory_gb is not None for step in result.steps)
    lines = [
        f"skbatch demo: {_count(result.n_targets, 'target')} "
        f"({result.n_true_effects} with signal), {_count(n_samples, 'sample')} x "
        f"{_count(n_features, 'feature')}, seed {seed}",
        "",
        f"{'step':<42}{'time':>9}  {'device':<13}{'batches':>8}{'OOM':>5}"
        f"{'peak RSS':>10}{'  peak GPU' if gpu else ''}",
    ]
    for step in result.steps:
        line = (
            f"{step.name:<42}{step.seconds:>8.2f}s  {step.device:<13}"
            f"{step.n_batches:>8}{step.n_oom_recoveries:>5}"
            f"{step.peak_memory_gb:>8.2f}GB"
        )
        if step.peak_gpu_memory_gb is not None:
            line += f"{step.peak_gpu_memory_gb:>8.2f}GB"
        lines.append(line)
    non_signal = result.n_targets - result.n_true_effects
    lines += [
        "",
        f"held-out R\u00b2 (median): {result.median_r2_signal:.3f} on targets with "
        f"signal, {result.median_r2_noise:.3f} on the others",
        f"significant targets (FWER p <= {ALPHA_LEVEL}): {result.n_significant} "
        f"of {result.n_targets}",
        f"true effects recovered: {result.n_recovered} of {result.n_true_effects} "
        f"({result.recall:.0%}); false positives: {result.n_false_positives} of "
        f"{non_signal}",
    ]
    if result.n_true_weights:
        level = f"{CONFIDENCE_LEVEL:.0%}"
        lines.append(
            f"bootstrap {level} intervals excluding 0: {result.n_weights_detected} "
            f"of {_count(result.n_true_weights, 'true non-zero weight')}, "
            f"{result.n_zero_weights_excluded} of "
            f"{_count(result.n_zero_weights, 'zero weight')}"
        )
    if result.n_zero_weights_excluded:
        beside = (result.n_zero_beside_excluded, result.n_zero_beside)
        elsewhere = (
            result.n_zero_weights_excluded - result.n_zero_beside_excluded,
            result.n_zero_weights - result.n_zero_beside,
        )
        lines += [
            f"  zero weights excluding 0: {_share(*beside)} next to a non-zero "
            f"weight, {_share(*elsewhere)} elsewhere:",
            "  ridge shrinks the non-zero weights and moves part of them onto "
            "correlated neighbouring",
            "  features, so their zero weights are estimated away from 0; "
            f"elsewhere a {level} interval",
            f"  misses a true 0 about {1 - CONFIDENCE_LEVEL:.0%} of the time by "
            "chance.",
        ]
    if result.figures:
        lines.append(
            "figures: " + ", ".join(str(path) for path in result.figures.values())
        )
    else:
        lines.append(
            "figures: skipped, matplotlib is not installed "
            "(pip install 'skbatch[plot]')"
        )
    return "\n".join(lines) + "\n"


def _share(part, whole):
    """``"3 of 40 (8%)"``."""
    return f"{part} of {whole} ({part / whole:.0%})" if whole else f"{part} of 0"


def main(args, out=None):
    """Run the demo for parsed command-line ``args`` and print the table."""
    out = sys.stdout if out is None else out
    if args.verbose >= 2:
        logging.basicConfig(format="%(name)s: %(message)s")
        logging.getLogger("skbatch").setLevel(logging.INFO)
    result = run_demo(
        n_targets=args.targets,
        n_samples=args.samples,
        n_features=args.features,
        n_permutations=args.permutations,
        n_bootstrap=args.bootstrap,
        device=args.device,
        out=args.out,
        random_state=args.seed,
        verbose=args.verbose,
    )
    out.write(format_report(result, (args.samples, args.features), args.seed))
    return result
