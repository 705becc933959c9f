"""Calibration of skbatch's inference under known truth.

Part 1, permutation tests: the family-wise error rate (FWER) under the null.
Each simulated data set has independent X (5 features) and Y (many targets),
in 5 runs; ``PermutationScorer(Ridge(alpha=1), cv=GroupKFold(5),
multioutput="raw_values")`` tests every target, and the data set counts as a
false positive when any target has ``pvalue_fwer_ <= 0.05``. Over many data
sets the rate of false positives must be 5% or below; the table gives it
with its 95% (Clopper-Pearson) interval. Rows:

- white noise, shuffled within runs (exchangeable: valid);
- AR(0.95) rows, shuffled within runs (not exchangeable: shown invalid);
- circular shift on circular-stationary runs (exact by construction: a
  rotation leaves the distribution of such a run unchanged);
- block shuffle on an AR(0.95) process that restarts every block (exact:
  the blocks are exchangeable);
- both on plain AR(0.95) runs of 60, 150 and 300 rows, block shuffle with
  blocks of 10, 30 and 60 rows (where the schemes only approximate).

The same test of ``PermutationScorer(BandedRidge(...))`` (``--only banded``):
its fast path redoes the search over band weights and alphas for every
permuted target, on white noise shuffled within runs and on circular AR(0.95)
runs shifted circularly.

One-sample tests by sign flips (``--only sign-flip``): ``y`` symmetric about
0 under the null (per-subject effects), X independent of it;
``PermutationScorer(Ridge(alpha=1), permutation_type="sign_flip",
multioutput="raw_values")`` flags a false positive when any of the 50 targets
has ``pvalue_fwer_ <= 0.05``. Rows: 20 subjects of one row each, one sign per
row, ``KFold(5)``; 12 subjects of 5 AR(0.8) rows each, one sign per subject
(``groups``), ``GroupKFold(4)``. The targets share half their noise
(positive dependence, where the max statistic matters).

Part 2, bootstrap intervals: how often the 95% percentile interval of
``BootstrapEstimator`` covers a known regression coefficient:

- iid bootstrap on iid data;
- cluster bootstrap (``groups``) on data with cluster effects in X and the
  noise;
- moving-block bootstrap (``block_size``) on AR(0.9) data, n=400, blocks of
  5, 10, 20 and 40 rows and the documented default rule, and the iid
  bootstrap on the same data (invalid);
- the same data with circular and stationary blocks of 5, 10, 20 and 40
  rows, and each scheme with ``block_size="auto"`` (Politis and White);
- percentile, basic and BCa intervals side by side (``--only bca``) on
  skewed data: the mean of lognormal data, n=30 (the intercept of
  ``Ridge`` on a zero feature), and the least-squares slope with
  heteroscedastic exponential errors, n=40 (``y = x + |x| (E - 1)``, E
  exponential), iid bootstrap, ``BCA_DATASETS`` data sets each;
- one-sided 95% intervals (``--only one-sided``), ``alternative="less"``
  ``(-inf, upper]`` and ``"greater"`` ``[lower, inf)``, percentile and BCa,
  of the least-squares slope (truth 1) on iid data, n=50, 999 replicates,
  the same replicates for the four: normal errors, and heteroscedastic
  exponential errors ``y = x + |x| (E - 1)`` (skewed), each must cover 95%;
- ``BootstrapEstimator(BandedRidge(...))`` at its chosen band weights and
  alpha (``--only banded-bootstrap``, the banded batched path): y = X w + e,
  5 columns in bands of 2 and 3, n=500, the 95% interval of the first
  coefficient of each band against its true value. The alphas (1e-6 and
  1e-4) and candidate weights (no band below 0.2) keep each band's alpha at
  5e-4 or less, a shrinkage of about 1e-5 standard errors (the table shows
  it, BandedRidge against least squares on the same data), so 95% is the
  promise for w itself. iid data with the iid bootstrap (percentile and
  BCa); x and e AR(0.9) in runs of 150, 250 and 100 rows (``groups``) with
  moving, circular and stationary blocks at ``block_size="auto"``, and the
  iid bootstrap on them (invalid). Beside each row, LinearRegression's
  coverage on the same resamples, the bias of the estimates and the mean
  standard error over the spread of the estimates across data sets.

Part 3, false discovery rate and exact enumeration (``--only fdr``):

- FDR under a partial null: 100 targets of which 10% depend on X (the
  others are noise), 100 iid rows, ``multioutput="raw_values"``; a target is
  a discovery when ``pvalue_fdr_ <= 0.05``. The false discovery proportion
  (false discoveries over discoveries, 0 without any) averaged over data
  sets must be within its 95% interval of 0.05 x 90% = 0.045 or below
  (Benjamini-Hochberg's bound); independent targets, then targets whose
  noise shares a common part (positive dependence, where BH still holds).
- Exact enumeration under the null: white noise, ``circular_shift`` with
  ``n_permutations`` above the number of rotations, so every rotation is
  scored once (``exact_``); P(p <= 0.05) must be floor(0.05 N) / N for N
  rotations, what the discrete null allows, and so at most 5%.

    python benchmarks/calibration.py           # quick: a few minutes, 2 cores
    python benchmarks/calibration.py --full    # 1000 data sets per FWER row
    python benchmarks/calibration.py --only permutation --datasets 200
    python benchmarks/calibration.py --only banded-bootstrap --n-jobs 1
    python benchmarks/calibration.py --only one-sided
    python benchmarks/calibration.py --only sign-flip

Every row is seeded: the same command prints the same table.
"""

import argparse
import time
import warnings

import numpy as np
from joblib import Parallel, delayed
from scipy import stats
from sklearn.linear_model import LinearRegression, Ridge
from sklearn.model_selection import GroupKFold, KFold

from skbatch import AlphaEdgeWarning, BandedRidge, BootstrapEstimator, PermutationScorer
from skbatch.ridge import AutocorrelationWarning

N_RUNS = 5
N_FEATURES = 5
PHI = 0.95
ALPHA_LEVEL = 0.05
# Part 3: targets, share of them with an effect, rows, and the effect's size
# (y = FDR_EFFECT * x_0 + noise, R^2 0.26: each effect is found in about 80%
# of the data sets, so discoveries and false ones both occur).
FDR_TARGETS = 100
FDR_EFFECT_SHARE = 0.1
FDR_ROWS = 100
FDR_EFFECT = 0.6
FDR_Q = 0.05
# Share of each null target's noise common to all targets, in the positively
# dependent row.
FDR_COMMON_NOISE = 0.5
# (name, common noise share)
FDR_TABLE_ROWS = [
    ("independent targets", 0.0),
    ("targets with a common noise (positive dependence)", FDR_COMMON_NOISE),
]
# (name, run lengths): every rotation of every run, enumerated once.
EXACT_ROWS = [
    ("one run of 60, circular_shift", (60,)),
    ("runs of 5, 6 and 7, circular_shift", (5, 6, 7)),
]
# BandedRidge's rows (``--only banded``): two bands of the N_FEATURES
# features, drawn candidates, a grid of alphas; rows as FWER_ROWS.
BANDED_LABELS = [0, 0, 1, 1, 1]
BANDED_CANDIDATES = 4
BANDED_ALPHAS = np.logspace(-1, 3, 5)
BANDED_FWER_ROWS = [
    ("white noise, shuffle", "white", 60, "shuffle", None),
    (
        "circular AR(0.95), circular_shift [exact]",
        "circular",
        60,
        "circular_shift",
        None,
    ),
]
# ``--only sign-flip``: (name, subjects, rows per subject, AR coefficient of
# a subject's rows, outer folds); one sign per subject.
SIGN_FLIP_ROWS = [
    ("20 subjects x 1 row, iid", 20, 1, 0.0, 5),
    ("12 subjects x 5 AR(0.8) rows, groups", 12, 5, 0.8, 4),
]
SIGN_FLIP_TARGETS = 50
# Share of each target's noise common to all targets.
SIGN_FLIP_COMMON_NOISE = 0.5
# (name, generator, run length, permutation_type, block_size)
FWER_ROWS = [
    ("white noise, shuffle", "white", 60, "shuffle", None),
    ("AR(0.95), shuffle [invalid]", "ar", 60, "shuffle", None),
    (
        "circular AR(0.95), circular_shift [exact]",
        "circular",
        60,
        "circular_shift",
        None,
    ),
    (
        "AR(0.95) restarting every 10, block_shuffle 10 [exact]",
        "restart10",
        60,
        "block_shuffle",
        10,
    ),
    ("AR(0.95), circular_shift", "ar", 60, "circular_shift", None),
    ("AR(0.95), circular_shift", "ar", 150, "circular_shift", None),
    ("AR(0.95), circular_shift", "ar", 300, "circular_shift", None),
    ("AR(0.95), block_shuffle 10", "ar", 60, "block_shuffle", 10),
    ("AR(0.95), block_shuffle 30", "ar", 60, "block_shuffle", 30),
    ("AR(0.95), block_shuffle 10", "ar", 150, "block_shuffle", 10),
    ("AR(0.95), block_shuffle 30", "ar", 150, "block_shuffle", 30),
    ("AR(0.95), block_shuffle 60", "ar", 150, "block_shuffle", 60),
    ("AR(0.95), block_shuffle 10", "ar", 300, "block_shuffle", 10),
    ("AR(0.95), block_shuffle 30", "ar", 300, "block_shuffle", 30),
    ("AR(0.95), block_shuffle 60", "ar", 300, "block_shuffle", 60),
]


def ar_series(rng, n_rows, n_columns, phi, restart=None):
    """Stationary AR(1) columns, unit variance; a fresh start every ``restart``."""
    noise = rng.standard_normal((n_rows, n_columns)) * np.sqrt(1 - phi**2)
    out = np.empty((n_rows, n_columns))
    for i in range(n_rows):
        if i == 0 or (restart and i % restart == 0):
            out[i] = rng.standard_normal(n_columns)
        else:
            out[i] = phi * out[i - 1] + noise[i]
    return out


def circular_ar(rng, n_rows, n_columns, phi):
    """Circular-stationary Gaussian columns with the AR(1) spectrum.

    White noise filtered in the frequency domain: the covariance is circulant,
    so every rotation of a column has the same distribution.
    """
    frequencies = np.arange(n_rows // 2 + 1) / n_rows
    spectrum = 1.0 / np.abs(1 - phi * np.exp(-2j * np.pi * frequencies)) ** 2
    white = np.fft.rfft(rng.standard_normal((n_rows, n_columns)), axis=0)
    series = np.fft.irfft(white * np.sqrt(spectrum)[:, None], n=n_rows, axis=0)
    return series / series.std(axis=0)


def run_columns(rng, kind, run_length, n_columns):
    """One run of ``n_columns`` series of the given kind."""
    if kind == "white":
        return rng.standard_normal((run_length, n_columns))
    if kind == "ar":
        return ar_series(rng, run_length, n_columns, PHI)
    if kind == "circular":
        return circular_ar(rng, run_length, n_columns, PHI)
    if kind.startswith("restart"):
        return ar_series(rng, run_length, n_columns, PHI, restart=int(kind[7:]))
    raise ValueError(kind)


def null_data(seed, kind, run_length, n_targets):
    """Independent X and Y, runs of ``run_length`` rows, each run demeaned."""
    rng = np.random.default_rng(seed)
    runs = [
        (
            run_columns(rng, kind, run_length, N_FEATURES),
            run_columns(rng, kind, run_length, n_targets),
        )
        for _ in range(N_RUNS)
    ]
    X = np.concatenate([x - x.mean(axis=0) for x, _ in runs])
    Y = np.concatenate([y - y.mean(axis=0) for _, y in runs])
    return X, Y, np.repeat(np.arange(N_RUNS), run_length)


def null_model(banded):
    """The estimator each FWER row tests: ``Ridge(alpha=1)``, or a
    ``BandedRidge`` whose search the fast path redoes per permuted target."""
    if not banded:
        return Ridge(alpha=1.0)
    return BandedRidge(
        BANDED_LABELS, alphas=BANDED_ALPHAS, band_weights=BANDED_CANDIDATES
    )


def false_positive(
    seed, kind, run_length, permutation_type, block_size, sizes, banded=False
):
    X, Y, groups = null_data(seed, kind, run_length, sizes["targets"])
    with warnings.catch_warnings():
        # The invalid row shuffles autocorrelated rows on purpose, as the
        # circular row's inner LOO meets them; null targets of BandedRidge
        # choose the largest alpha, an edge of the grid, and four candidates
        # are a coarse grid on purpose.
        warnings.simplefilter("ignore", AutocorrelationWarning)
        warnings.simplefilter("ignore", AlphaEdgeWarning)
        warnings.filterwarnings("ignore", message=".*candidates look too coarse")
        scorer = PermutationScorer(
            null_model(banded),
            n_permutations=sizes["permutations"],
            cv=GroupKFold(N_RUNS),
            multioutput="raw_values",
            permutation_type=permutation_type,
            block_size=block_size,
            random_state=seed,
            device="cpu",
        ).fit(X, Y, groups=groups)
    if banded:
        assert scorer.fit_report_.stages[-1].path == "batched"
    return bool(np.any(scorer.pvalue_fwer_ <= ALPHA_LEVEL))


def sign_flip_data(seed, n_subjects, rows, phi):
    """X independent of Y; Y's subjects independent and symmetric about 0
    (Gaussian, mean 0), AR(phi) rows within a subject, targets sharing
    SIGN_FLIP_COMMON_NOISE of their noise."""
    rng = np.random.default_rng(seed)
    n = n_subjects * rows
    X = rng.standard_normal((n, N_FEATURES))
    own = np.concatenate(
        [ar_series(rng, rows, SIGN_FLIP_TARGETS, phi) for _ in range(n_subjects)]
    )
    common = np.concatenate([ar_series(rng, rows, 1, phi) for _ in range(n_subjects)])
    share = SIGN_FLIP_COMMON_NOISE
    Y = np.sqrt(share) * common + np.sqrt(1 - share) * own
    return X, Y, np.repeat(np.arange(n_subjects), rows)


def sign_flip_false_positive(seed, n_subjects, rows, phi, n_folds, sizes):
    X, Y, groups = sign_flip_data(seed, n_subjects, rows, phi)
    scorer = PermutationScorer(
        Ridge(alpha=1.0),
        n_permutations=sizes["permutations"],
        cv=KFold(n_folds) if rows == 1 else GroupKFold(n_folds),
        multioutput="raw_values",
        permutation_type="sign_flip",
        random_state=seed,
        device="cpu",
    ).fit(X, Y, groups=None if rows == 1 else groups)
    if scorer.exact_:
        raise RuntimeError("expected drawn sign vectors, not an enumeration")
    return bool(np.any(scorer.pvalue_fwer_ <= ALPHA_LEVEL))


def sign_flip_table(sizes, n_jobs):
    print(
        f"\nSign-flip FWER under the null: {sizes['sign_flip_datasets']} data sets "
        f"per row, {SIGN_FLIP_TARGETS} targets (common noise "
        f"{SIGN_FLIP_COMMON_NOISE:.0%}), {sizes['permutations']} sign vectors, "
        f"Ridge(alpha=1); nominal {ALPHA_LEVEL:.0%}"
    )
    header = "| data, units | FWER | 95% interval | verdict |"
    lines = [header, "|---|---|---|---|"]
    print(header)
    for name, n_subjects, rows, phi, n_folds in SIGN_FLIP_ROWS:
        start = time.perf_counter()
        flags = Parallel(n_jobs=n_jobs)(
            delayed(sign_flip_false_positive)(
                seed, n_subjects, rows, phi, n_folds, sizes
            )
            for seed in range(sizes["sign_flip_datasets"])
        )
        rate, low, high = rate_with_interval(sum(flags), len(flags))
        verdict = "within 5%" if low <= ALPHA_LEVEL else "too liberal"
        line = f"| {name} | {rate:.1%} | {low:.1%} - {high:.1%} | {verdict} |"
        lines.append(line)
        print(line, f"({time.perf_counter() - start:.0f} s)")
    return lines


def rate_with_interval(successes, trials):
    interval = stats.binomtest(successes, trials).proportion_ci(0.95)
    return successes / trials, interval.low, interval.high


def fwer_table(sizes, n_jobs, *, banded=False):
    model = (
        f"BandedRidge (bands of 2 and 3 features, {BANDED_CANDIDATES} "
        f"candidates, LOO inside)"
        if banded
        else "Ridge(alpha=1)"
    )
    print(
        f"\nFWER under the null: {sizes['datasets']} data sets per row, "
        f"{N_RUNS} runs, {sizes['targets']} targets, {sizes['permutations']} "
        f"permutations, {model}, GroupKFold({N_RUNS}); nominal "
        f"{ALPHA_LEVEL:.0%}"
    )
    header = "| data, scheme | run length | FWER | 95% interval | verdict |"
    lines = [header, "|---|---|---|---|---|"]
    print(header)
    for name, kind, run_length, permutation_type, block_size in (
        BANDED_FWER_ROWS if banded else FWER_ROWS
    ):
        start = time.perf_counter()
        flags = Parallel(n_jobs=n_jobs)(
            delayed(false_positive)(
                seed, kind, run_length, permutation_type, block_size, sizes, banded
            )
            for seed in range(sizes["datasets"])
        )
        rate, low, high = rate_with_interval(sum(flags), len(flags))
        verdict = "within 5%" if low <= ALPHA_LEVEL else "too liberal"
        line = (
            f"| {name} | {run_length} | {rate:.1%} | {low:.1%} - {high:.1%} | "
            f"{verdict} |"
        )
        lines.append(line)
        print(line, f"({time.perf_counter() - start:.0f} s)")
    return lines


# Part 2: the AR coefficient of x and of the noise in the autocorrelated
# coverage rows (autocorrelation below 0.1 only beyond 22 lags: strong).
AR_PHI = 0.9


def ar_regression(seed, n, phi):
    """y = 1 * x + e with x and e independent AR(phi): the OLS slope's
    variance is inflated by the autocorrelation of both."""
    rng = np.random.default_rng(seed)
    x = ar_series(rng, n, 1, phi)
    e = ar_series(rng, n, 1, phi)
    return x, x[:, 0] + e[:, 0]


def iid_regression(seed, n):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 1))
    return x, x[:, 0] + rng.standard_normal(n)


def clustered_regression(seed, n_clusters, size):
    """Cluster effects in x and in the noise: rows within a cluster are
    correlated, and an iid bootstrap would understate the slope's error."""
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(n_clusters), size)
    x = rng.standard_normal(n_clusters)[groups] + rng.standard_normal(groups.size)
    noise = 1.5 * rng.standard_normal(n_clusters)[groups] + rng.standard_normal(
        groups.size
    )
    return x[:, None], x + noise, groups


def bootstrap_fit(estimator, X, y, groups, seed, sizes, **options):
    """``BootstrapEstimator(estimator, **options)`` fit with the row's
    replicates and seed (the resamples depend on the seed and the scheme
    only, not on the estimator)."""
    boot = BootstrapEstimator(
        estimator,
        n_bootstrap=sizes["replicates"],
        random_state=seed,
        device="cpu",
        **options,
    )
    with warnings.catch_warnings():
        # The [invalid] rows are invalid on purpose: their warning is known.
        warnings.simplefilter("ignore", AutocorrelationWarning)
        return boot.fit(X, y, groups=groups)


def covers(seed, design, block_size, sizes, block_scheme="moving"):
    groups = None
    if design == "iid":
        X, y = iid_regression(seed, 100)
    elif design == "cluster":
        X, y, groups = clustered_regression(seed, 40, 10)
    else:
        X, y = ar_regression(seed, 400, AR_PHI)
    result = bootstrap_fit(
        LinearRegression(),
        X,
        y,
        groups,
        seed,
        sizes,
        block_size=block_size,
        block_scheme=block_scheme,
    ).results_["coef_"]
    return bool(result.ci_lower[0] <= 1.0 <= result.ci_upper[0])


COVERAGE_ROWS = [
    ("iid data, iid bootstrap", "iid", None),
    ("clustered data, cluster bootstrap (groups)", "cluster", None),
    ("AR(0.9) n=400, iid bootstrap [invalid]", "ar", None),
    ("AR(0.9) n=400, moving blocks of 5", "ar", 5),
    ("AR(0.9) n=400, moving blocks of 10", "ar", 10),
    ("AR(0.9) n=400, moving blocks of 20", "ar", 20),
    ("AR(0.9) n=400, moving blocks of 40", "ar", 40),
    ("AR(0.9) n=400, moving blocks, auto", "ar", "auto"),
    *(
        (f"AR(0.9) n=400, {scheme} blocks of {size}", "ar", size, scheme)
        for scheme in ("circular", "stationary")
        for size in (5, 10, 20, 40, "auto")
    ),
]


def coverage_table(sizes, n_jobs):
    print(
        f"\nCoverage of 95% percentile intervals of a known slope: "
        f"{sizes['coverage_datasets']} data sets per row, "
        f"{sizes['replicates']} replicates, LinearRegression"
    )
    header = "| data, scheme | coverage | 95% interval |"
    lines = [header, "|---|---|---|"]
    print(header)
    for name, design, block_size, *scheme in COVERAGE_ROWS:
        start = time.perf_counter()
        hits = Parallel(n_jobs=n_jobs)(
            delayed(covers)(seed, design, block_size, sizes, *scheme)
            for seed in range(sizes["coverage_datasets"])
        )
        rate, low, high = rate_with_interval(sum(hits), len(hits))
        line = f"| {name} | {rate:.3f} | {low:.3f} - {high:.3f} |"
        lines.append(line)
        print(line, f"({time.perf_counter() - start:.0f} s)")
    return lines


# Part 2, BandedRidge (``--only banded-bootstrap``): y = X w + e, the bands of
# BANDED_LABELS. The alphas and candidates give each band an alpha of at most
# 1e-4 / 0.2 = 5e-4: against the Gram matrix's n = 500 per column, a
# shrinkage of about 1e-6 of each coefficient, 1e-5 of its standard error.
BANDED_COEF = np.array([1.0, -0.5, 0.5, 1.0, -1.0])
# The columns whose coverage is counted: the first of each band.
BANDED_CHECKED = [0, 2]
BANDED_BOOTSTRAP_ALPHAS = [1e-6, 1e-4]
BANDED_BOOTSTRAP_CANDIDATES = [[0.5, 0.5], [0.2, 0.8], [0.8, 0.2]]
# Runs of unequal length, each its own AR series (the iid rows: as many).
BANDED_RUNS = (150, 250, 100)
# (name, data, block_size, block_scheme, ci_method); groups mark the runs
# wherever blocks are drawn.
BANDED_COVERAGE_ROWS = [
    ("iid data, iid bootstrap", "iid", None, "moving", "percentile"),
    ("iid data, iid bootstrap, BCa", "iid", None, "moving", "bca"),
    ("AR(0.9) runs, iid bootstrap [invalid]", "ar", None, "moving", "percentile"),
    *(
        (f"AR(0.9) runs, {scheme} blocks, auto", "ar", "auto", scheme, "percentile")
        for scheme in ("moving", "circular", "stationary")
    ),
]


def banded_regression(seed, design):
    """``(X, y, runs)``: five columns, iid or each column and the noise
    AR(AR_PHI) within each of BANDED_RUNS."""
    rng = np.random.default_rng(seed)
    runs = np.repeat(np.arange(len(BANDED_RUNS)), BANDED_RUNS)
    if design == "iid":
        X = rng.standard_normal((runs.size, BANDED_COEF.size))
        noise = rng.standard_normal(runs.size)
    else:
        series = [
            ar_series(rng, length, BANDED_COEF.size + 1, AR_PHI)
            for length in BANDED_RUNS
        ]
        X, noise = np.concatenate(series)[:, :-1], np.concatenate(series)[:, -1]
    return X, X @ BANDED_COEF + noise, runs


def banded_covers(seed, design, block_size, block_scheme, ci_method, sizes):
    """One data set: the banded bootstrap's intervals and LinearRegression's
    on the same resamples, at the checked columns.

    Returns a dict of arrays over BANDED_CHECKED: ``covers`` and
    ``ols_covers`` (whether each 95% interval holds the true coefficient),
    ``estimate``, ``standard_error``, ``shrinkage`` (BandedRidge's estimate
    minus least squares', over its standard error), and ``block_size``.
    """
    X, y, runs = banded_regression(seed, design)
    groups = runs if block_size is not None else None
    with warnings.catch_warnings():
        # The LOO scores are flat along alphas this small and along the
        # candidates, so any of them, an edge included, is chosen; the
        # candidates are few on purpose.
        warnings.simplefilter("ignore", AlphaEdgeWarning)
        warnings.filterwarnings("ignore", message=".*candidates look too coarse")
        banded = bootstrap_fit(
            BandedRidge(
                BANDED_LABELS,
                alphas=BANDED_BOOTSTRAP_ALPHAS,
                band_weights=BANDED_BOOTSTRAP_CANDIDATES,
                cv=None,
            ),
            X,
            y,
            groups,
            seed,
            sizes,
            block_size=block_size,
            block_scheme=block_scheme,
            ci_method=ci_method,
        )
    # The size "auto" chose, given as is: the same resamples.
    ols = bootstrap_fit(
        LinearRegression(),
        X,
        y,
        groups,
        seed,
        sizes,
        block_size=banded.block_size_,
        block_scheme=block_scheme,
        ci_method=ci_method,
    )
    truth = BANDED_COEF[BANDED_CHECKED]
    out = {}
    for prefix, boot in (("", banded), ("ols_", ols)):
        result = boot.results_["coef_"]
        lower = result.ci_lower[BANDED_CHECKED]
        upper = result.ci_upper[BANDED_CHECKED]
        out[prefix + "covers"] = (lower <= truth) & (truth <= upper)
    result, ols_result = banded.results_["coef_"], ols.results_["coef_"]
    out["estimate"] = result.estimate[BANDED_CHECKED]
    out["standard_error"] = result.standard_error[BANDED_CHECKED]
    out["shrinkage"] = (result.estimate - ols_result.estimate)[BANDED_CHECKED] / out[
        "standard_error"
    ]
    out["block_size"] = banded.block_size_
    return out


def interval_cell(hits):
    """``rate (low - high)`` of boolean ``hits``, its Clopper-Pearson interval."""
    rate, low, high = rate_with_interval(int(np.sum(hits)), len(hits))
    return f"{rate:.3f} ({low:.3f} - {high:.3f})"


def pair(values, spec):
    """The checked columns' values, one per band, as ``a / b``."""
    return " / ".join(format(value, spec) for value in values)


def banded_coverage_table(sizes, n_jobs):
    print(
        f"\nCoverage of 95% intervals of BandedRidge's coefficients, held at "
        f"their choice: {sizes['coverage_datasets']} data sets per row, "
        f"{sizes['replicates']} replicates, n={sum(BANDED_RUNS)} (runs of "
        f"{', '.join(map(str, BANDED_RUNS))}), w={BANDED_COEF.tolist()}, "
        f"columns {BANDED_CHECKED} (one per band); bias and SE over the SD of "
        f"the estimates across data sets"
    )
    header = (
        "| data, scheme | block size (median) | coverage, band 0 | "
        "coverage, band 1 | LinearRegression, same resamples | bias / SD | "
        "SE / SD | max shrinkage / SE |"
    )
    lines = [header, "|---|---|---|---|---|---|---|---|"]
    print(header)
    for name, design, block_size, block_scheme, ci_method in BANDED_COVERAGE_ROWS:
        start = time.perf_counter()
        results = Parallel(n_jobs=n_jobs)(
            delayed(banded_covers)(
                seed, design, block_size, block_scheme, ci_method, sizes
            )
            for seed in range(sizes["coverage_datasets"])
        )
        column = {key: np.array([r[key] for r in results]) for key in results[0]}
        spread = column["estimate"].std(axis=0, ddof=1)
        bias = column["estimate"].mean(axis=0) - BANDED_COEF[BANDED_CHECKED]
        sizes_used = (
            "-" if block_size is None else f"{np.median(column['block_size']):g}"
        )
        line = (
            f"| {name} | {sizes_used} | {interval_cell(column['covers'][:, 0])} | "
            f"{interval_cell(column['covers'][:, 1])} | "
            f"{pair(column['ols_covers'].mean(axis=0), '.3f')} | "
            f"{pair(bias / spread, '+.2f')} | "
            f"{pair(column['standard_error'].mean(axis=0) / spread, '.2f')} | "
            f"{np.abs(column['shrinkage']).max():.1e} |"
        )
        lines.append(line)
        print(line, f"({time.perf_counter() - start:.0f} s)")
    return lines


def fdr_data(seed, common):
    """X (FDR_ROWS x N_FEATURES) and Y (FDR_ROWS x FDR_TARGETS), the first
    FDR_EFFECT_SHARE of the targets depending on X[:, 0]."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((FDR_ROWS, N_FEATURES))
    noise = np.sqrt(1 - common) * rng.standard_normal((FDR_ROWS, FDR_TARGETS))
    noise += np.sqrt(common) * rng.standard_normal((FDR_ROWS, 1))
    n_effects = int(round(FDR_EFFECT_SHARE * FDR_TARGETS))
    Y = noise
    Y[:, :n_effects] += FDR_EFFECT * X[:, :1]
    return X, Y, n_effects


def false_discoveries(seed, common, sizes):
    """``(false discovery proportion, power)`` of one data set at FDR_Q."""
    X, Y, n_effects = fdr_data(seed, common)
    scorer = PermutationScorer(
        Ridge(alpha=1.0),
        n_permutations=sizes["fdr_permutations"],
        cv=KFold(5),
        multioutput="raw_values",
        random_state=seed,
        device="cpu",
    ).fit(X, Y)
    found = scorer.pvalue_fdr_ <= FDR_Q
    false = int(found[n_effects:].sum())
    return false / max(int(found.sum()), 1), found[:n_effects].mean()


def fdr_table(sizes, n_jobs):
    null_share = 1 - FDR_EFFECT_SHARE
    bound = FDR_Q * null_share
    print(
        f"\nFalse discovery rate of pvalue_fdr_ <= {FDR_Q}: {sizes['fdr_datasets']} "
        f"data sets per row, {FDR_TARGETS} targets ({FDR_EFFECT_SHARE:.0%} with "
        f"an effect), {FDR_ROWS} rows, {sizes['fdr_permutations']} permutations, "
        f"Ridge(alpha=1), KFold(5); bound {FDR_Q} x {null_share:.0%} = {bound:.3f}"
    )
    header = "| targets | mean FDP | 95% interval | mean power | verdict |"
    lines = [header, "|---|---|---|---|---|"]
    print(header)
    for name, common in FDR_TABLE_ROWS:
        start = time.perf_counter()
        results = Parallel(n_jobs=n_jobs)(
            delayed(false_discoveries)(seed, common, sizes)
            for seed in range(sizes["fdr_datasets"])
        )
        fdp, power = (np.array(values) for values in zip(*results))
        # The mean of per-data-set proportions: a normal interval from their
        # spread over the data sets.
        half = 1.96 * fdp.std(ddof=1) / np.sqrt(fdp.size)
        low, high = fdp.mean() - half, fdp.mean() + half
        verdict = "controlled" if low <= bound else "too liberal"
        line = (
            f"| {name} | {fdp.mean():.4f} | {max(low, 0):.4f} - {high:.4f} | "
            f"{power.mean():.2f} | {verdict} |"
        )
        lines.append(line)
        print(line, f"({time.perf_counter() - start:.0f} s)")
    return lines


def exact_rejects(seed, run_lengths):
    """Whether the exact p-value of white noise is <= ALPHA_LEVEL."""
    rng = np.random.default_rng(seed)
    n = sum(run_lengths)
    X, y = rng.standard_normal((n, N_FEATURES)), rng.standard_normal(n)
    groups = np.repeat(np.arange(len(run_lengths)), run_lengths)
    n_rotations = int(np.prod(run_lengths))
    scorer = PermutationScorer(
        Ridge(alpha=1.0),
        n_permutations=n_rotations + 1,
        cv=KFold(5) if len(run_lengths) == 1 else GroupKFold(len(run_lengths)),
        permutation_type="circular_shift",
        device="cpu",
    ).fit(X, y, groups=groups)
    if not scorer.exact_ or scorer.n_permutations_ != n_rotations:
        raise RuntimeError(f"expected {n_rotations} enumerated rotations")
    return bool(scorer.pvalue_ <= ALPHA_LEVEL)


def exact_table(sizes, n_jobs):
    print(
        f"\nExact enumeration under the null: {sizes['exact_datasets']} white-noise "
        f"data sets per row, Ridge(alpha=1); P(p <= {ALPHA_LEVEL}) against "
        f"floor({ALPHA_LEVEL} N) / N for N rotations"
    )
    header = (
        "| runs, scheme | rotations N | P(p <= 0.05) | 95% interval | exact value |"
    )
    lines = [header, "|---|---|---|---|---|"]
    print(header)
    for name, run_lengths in EXACT_ROWS:
        start = time.perf_counter()
        flags = Parallel(n_jobs=n_jobs)(
            delayed(exact_rejects)(seed, run_lengths)
            for seed in range(sizes["exact_datasets"])
        )
        rate, low, high = rate_with_interval(sum(flags), len(flags))
        n_rotations = int(np.prod(run_lengths))
        allowed = np.floor(ALPHA_LEVEL * n_rotations) / n_rotations
        line = (
            f"| {name} | {n_rotations} | {rate:.3f} | {low:.3f} - {high:.3f} | "
            f"{allowed:.4f} |"
        )
        lines.append(line)
        print(line, f"({time.perf_counter() - start:.0f} s)")
    return lines


# Part 2, skewed data: data sets per design, replicates, and the designs'
# true values (the lognormal mean exp(1/2); the slope 1).
BCA_DATASETS = 400
BCA_REPLICATES = 1000
BCA_METHODS = ("percentile", "basic", "bca")
BCA_DESIGNS = [
    ("mean of lognormal data, n=30", "lognormal", np.exp(0.5)),
    ("LS slope, heteroscedastic exponential errors, n=40", "slope", 1.0),
]


def skewed_data(seed, design):
    rng = np.random.default_rng(seed)
    if design == "lognormal":
        # The mean as the intercept of a model whose only feature is 0.
        return np.zeros((30, 1)), rng.lognormal(size=30)
    x = rng.standard_normal(40)
    return x[:, None], x + np.abs(x) * (rng.exponential(size=40) - 1)


def covers_skewed(seed, design, truth, sizes):
    """Whether each method's 95% interval covers the truth, same replicates."""
    X, y = skewed_data(seed, design)
    estimator = Ridge(alpha=1.0) if design == "lognormal" else LinearRegression()
    name = "intercept_" if design == "lognormal" else "coef_"
    hits = []
    for method in BCA_METHODS:
        result = (
            BootstrapEstimator(
                estimator,
                n_bootstrap=sizes["bca_replicates"],
                ci_method=method,
                # Only the attribute read: the coefficient of the zero
                # feature is a constant, whose BCa bounds are NaN.
                attributes=name,
                random_state=seed,
                device="cpu",
            )
            .fit(X, y)
            .results_[name]
        )
        lower, upper = np.ravel(result.ci_lower)[0], np.ravel(result.ci_upper)[0]
        hits.append(bool(lower <= truth <= upper))
    return hits


def bca_table(sizes, n_jobs):
    print(
        f"\nCoverage of 95% intervals on skewed data, iid bootstrap: "
        f"{sizes['bca_datasets']} data sets per row, {sizes['bca_replicates']} "
        f"replicates, the same replicates for every method"
    )
    header = "| data | " + " | ".join(BCA_METHODS) + " |"
    lines = [header, "|---|" + "---|" * len(BCA_METHODS)]
    print(header)
    for name, design, truth in BCA_DESIGNS:
        start = time.perf_counter()
        hits = np.array(
            Parallel(n_jobs=n_jobs)(
                delayed(covers_skewed)(seed, design, truth, sizes)
                for seed in range(sizes["bca_datasets"])
            )
        )
        line = f"| {name} | " + " | ".join(map(interval_cell, hits.T)) + " |"
        lines.append(line)
        print(line, f"({time.perf_counter() - start:.0f} s)")
    return lines


# Part 2, one-sided intervals (``--only one-sided``): rows, replicates (999:
# 51 of them beyond the 95% bound, whose Monte Carlo error is then small
# beside its sampling error), and the (method, alternative) columns, all
# from the same replicates.
ONE_SIDED_ROWS = 50
ONE_SIDED_REPLICATES = 999
ONE_SIDED_COLUMNS = [
    (method, alternative)
    for method in ("percentile", "bca")
    for alternative in ("less", "greater")
]
ONE_SIDED_DESIGNS = [
    ("LS slope, normal errors, n=50", "normal"),
    ("LS slope, heteroscedastic exponential errors, n=50", "exponential"),
]


def one_sided_data(seed, design):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(ONE_SIDED_ROWS)
    if design == "normal":
        return x[:, None], x + rng.standard_normal(ONE_SIDED_ROWS)
    return x[:, None], x + np.abs(x) * (rng.exponential(size=ONE_SIDED_ROWS) - 1)


def covers_one_sided(seed, design, sizes):
    """Whether each column's one-sided 95% interval covers the slope 1."""
    X, y = one_sided_data(seed, design)
    hits = []
    for method, alternative in ONE_SIDED_COLUMNS:
        result = (
            BootstrapEstimator(
                LinearRegression(),
                n_bootstrap=sizes["one_sided_replicates"],
                ci_method=method,
                alternative=alternative,
                random_state=seed,
                device="cpu",
            )
            .fit(X, y)
            .results_["coef_"]
        )
        lower, upper = result.ci_lower[0], result.ci_upper[0]
        hits.append(bool(lower <= 1.0 <= upper))
    return hits


def one_sided_table(sizes, n_jobs):
    print(
        f"\nCoverage of one-sided 95% intervals of a known slope, iid bootstrap: "
        f"{sizes['coverage_datasets']} data sets per row, "
        f"{sizes['one_sided_replicates']} replicates, LinearRegression, the "
        f"same replicates for every column"
    )
    columns = [f"{method} {alternative}" for method, alternative in ONE_SIDED_COLUMNS]
    header = "| data | " + " | ".join(columns) + " |"
    lines = [header, "|---|" + "---|" * len(columns)]
    print(header)
    for name, design in ONE_SIDED_DESIGNS:
        start = time.perf_counter()
        hits = np.array(
            Parallel(n_jobs=n_jobs)(
                delayed(covers_one_sided)(seed, design, sizes)
                for seed in range(sizes["coverage_datasets"])
            )
        )
        line = f"| {name} | " + " | ".join(map(interval_cell, hits.T)) + " |"
        lines.append(line)
        print(line, f"({time.perf_counter() - start:.0f} s)")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="the full run")
    parser.add_argument(
        "--only",
        choices=[
            "permutation",
            "banded",
            "fdr",
            "bootstrap",
            "bca",
            "one-sided",
            "banded-bootstrap",
            "sign-flip",
        ],
    )
    parser.add_argument("--datasets", type=int, help="data sets per FWER row")
    parser.add_argument("--n-jobs", type=int, default=-1, help="joblib workers")
    args = parser.parse_args()
    sizes = {
        "datasets": 1000 if args.full else 100,
        "targets": 500 if args.full else 50,
        "permutations": 200 if args.full else 100,
        "coverage_datasets": 1000 if args.full else 200,
        "replicates": 1000 if args.full else 500,
        "fdr_datasets": 1000 if args.full else 200,
        "fdr_permutations": 499,
        "exact_datasets": 4000 if args.full else 1000,
        "bca_datasets": 1000 if args.full else BCA_DATASETS,
        "bca_replicates": BCA_REPLICATES,
        "one_sided_replicates": ONE_SIDED_REPLICATES,
        "sign_flip_datasets": 4000 if args.full else 2000,
    }
    if args.datasets:
        sizes["datasets"] = sizes["sign_flip_datasets"] = args.datasets
    start = time.perf_counter()
    if args.only in (None, "permutation"):
        fwer_table(sizes, args.n_jobs)
    if args.only in (None, "banded"):
        fwer_table(sizes, args.n_jobs, banded=True)
    if args.only in (None, "sign-flip"):
        sign_flip_table(sizes, args.n_jobs)
    if args.only in (None, "permutation", "fdr"):
        fdr_table(sizes, args.n_jobs)
        exact_table(sizes, args.n_jobs)
    if args.only in (None, "bootstrap"):
        coverage_table(sizes, args.n_jobs)
    if args.only in (None, "bootstrap", "bca"):
        bca_table(sizes, args.n_jobs)
    if args.only in (None, "bootstrap", "one-sided"):
        one_sided_table(sizes, args.n_jobs)
    if args.only in (None, "banded-bootstrap"):
        banded_coverage_table(sizes, args.n_jobs)
    print(f"\ntotal {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
