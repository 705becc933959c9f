"""Calibration of the inference of variance_partitioning under known truth.

Simulation: 5 runs of unequal length (60 to 100 rows), two bands of 4
features each, every feature an AR(0.7) series that restarts at each run,
the bands independent of each other; targets are a mix of the bands'
signals in AR(0.5) noise. The model is ``BandedRidge`` (3 candidates, 6
alphas; its search by exact leave-one-out in part 1, by leaving one run out
in part 2, where the bootstrap's copies of a run must be held out
together), the outer folds leave one run out.

Part 1, family-wise error of the unique-variance tests. Band A drives every
target (unique variance about 0.5), band B carries nothing. Each data set
counts as a false positive when any of the targets has band B's
``pvalue_fwer <= 0.05`` (``permutation_type="circular_shift"``, 19
permutations: the smallest p-value is 0.05, reached only when no
permutation reaches the observed statistic). Over many data sets the rate
must be 5% or below; the table gives it with its 95% Clopper-Pearson
interval, and the power for band A (share of its targets with
``pvalue_fwer <= 0.05``) beside it.

``--correlation 0.9`` makes band B's columns correlated with band A's
(``0.9 A + sqrt(1 - 0.81) B``, column by column), band B still carrying
nothing: the null the test is for when feature spaces overlap.

``--null band_rows held searched`` runs part 1 for each null of
``variance_partitioning``: band B's rows circularly shifted within runs
(``null="band_rows"``), or the Freedman–Lane null (``null="freedman_lane"``:
the residuals of the model without band B shifted within runs and added to
its fitted values) with the hyperparameters held at each fold's choices
(``null_hyperparameters="held"``) or searched again (``"searched"``).
``--weak 0.2`` adds band B's signal times 0.2 to every target (band B then
drives a little: unique variance about 0.02) and reports, instead of the
FWER, the power for band B: the share of its targets with ``pvalue <=
0.05`` and with ``pvalue_fwer <= 0.05``. ``--fwer-datasets`` sets the data
sets per row (80 by default).

Part 2, coverage of the bootstrap intervals (whole runs resampled, 90%
intervals): the basic interval that ``variance_partitioning`` returns, and
the percentile interval of the same replicates (the basic one reflected
back around the estimate). Both bands drive the targets, in mixes from
band A alone to band B alone. ``--runs`` splits the same 400 rows into
other numbers of runs (10: 30 to 50 rows each), one table per number.
Part 1 keeps 5 runs. Two population values, each a unique variance or
share computed on a very large independent test simulation (100 runs of
the same process, 8,000 rows):

- "oracle": the R^2 of the true signal of each subset of bands (infinite
  training data): with independent bands the unique variance of band b is
  var(signal of b) / var(y), its share var(signal of b) / var(signal);
- "fitted": the R^2 of the models fit on the data set itself (full, and
  each band left out, the same searches), scored on the test simulation:
  what this data set's models explain on new data of the same process.

The cross-validated estimate is biased below the oracle value at this size
(every model is fit on 4 runs and shrunk); the rows say how often each
interval covers each value, pooled over targets and data sets, with a 95%
interval that ignores the dependence of a data set's targets. A share's
interval is undefined (NaN) when the full model's R^2 is not positive in
some replicate; its coverage is over the defined ones, and the table gives
the share of undefined ones.

``--bootstrap-hyperparameters searched held`` adds, beside the default
(each replicate's models refit with their searches,
``bootstrap_hyperparameters="searched"``), the intervals of the same
replicates on the same data sets with each target's band weights and alpha
held at the data's choices on each fold (``"held"``), and the mean width of
each treatment's basic interval of the unique variance.

Part 3 (``--rows``), what forgetting ``groups`` costs: part 2 on the same
data sets without ``groups``, rows drawn independently (the outer folds
``KFold(5)``, contiguous, and the inner search ``KFold(5)``, the fitted
population values from the same models); variance_partitioning warns
(``AutocorrelationWarning``) on every one of these data sets.

Run: ``python benchmarks/calibration_partitioning.py`` (about 5 minutes on
2 busy cores); ``--full`` for 10 times the data sets; ``--coverage-only
--runs 5 10`` for part 2 at 5 and 10 runs (about 3 and 8 minutes).
"""

import argparse
import itertools
import time
import warnings

import numpy as np
from joblib import Parallel, delayed
from scipy import stats
from sklearn.model_selection import LeaveOneGroupOut

from skbatch import BandedRidge, variance_partitioning

RUN_LENGTHS = (80, 60, 100, 70, 90)
BAND_SIZE = 4
FEATURE_PHI = 0.7
NOISE_PHI = 0.5
ALPHA_LEVEL = 0.05
# 19 permutations: p = 0.05 exactly when no permutation reaches the observed
# statistic, so P(p <= 0.05) = 0.05 under the null for a valid scheme.
N_PERMUTATIONS = 19
CONFIDENCE = 0.9
# Runs of the test simulation of each population value.
POPULATION_RUNS = 100
# Targets of the FWER data sets: band A alone, unique variance about 0.5.
FWER_TARGETS = 6
# Coverage targets: the weight of band A's signal (band B's is 1 minus it).
MIXES = (1.0, 0.7, 0.5, 0.3)
NOISE_SCALE = 0.8


def ar1_runs(rng, lengths, n_columns, phi):
    """Stationary AR(1) columns restarting at every run; the run labels."""
    parts = []
    for length in lengths:
        noise = rng.standard_normal((length, n_columns))
        series = np.empty_like(noise)
        series[0] = noise[0] / np.sqrt(1 - phi**2)
        for t in range(1, length):
            series[t] = phi * series[t - 1] + noise[t]
        parts.append(series)
    return np.concatenate(parts), np.repeat(np.arange(len(lengths)), lengths)


def simulate(seed, lengths, mixes, weights):
    """X (bands A, B), Y, runs, and each target's signal of band A and B."""
    rng = np.random.default_rng(seed)
    X, runs = ar1_runs(rng, lengths, 2 * BAND_SIZE, FEATURE_PHI)
    noise, _ = ar1_runs(rng, lengths, len(mixes), NOISE_PHI)
    signal_a = X[:, :BAND_SIZE] @ weights[0]
    signal_b = X[:, BAND_SIZE:] @ weights[1]
    mixes = np.asarray(mixes)
    parts = (mixes * signal_a[:, None], (1 - mixes) * signal_b[:, None])
    Y = parts[0] + parts[1] + NOISE_SCALE * noise
    return X, Y, runs, parts


def model(cv=None):
    return BandedRidge(band_weights=3, alphas=np.logspace(-1, 4, 6), cv=cv)


def band_weights():
    """Coefficients of each band's signal, scaled to unit variance of the
    signal of a stationary AR(0.7) band."""
    rng = np.random.default_rng(12345)
    w = rng.standard_normal((2, BAND_SIZE))
    return w / np.linalg.norm(w, axis=1, keepdims=True) * np.sqrt(1 - FEATURE_PHI**2)


def r2(Y, prediction):
    return 1 - ((Y - prediction) ** 2).sum(0) / ((Y - Y.mean(0)) ** 2).sum(0)


# variance_partitioning's (null, null_hyperparameters) of each --null choice.
NULLS = {
    "band_rows": ("band_rows", None),
    "held": ("freedman_lane", "held"),
    "searched": ("freedman_lane", "searched"),
}


def fwer_dataset(seed, weights, correlation=0.0, null="band_rows", weak=0.0):
    X, Y, runs, _ = simulate(seed, RUN_LENGTHS, [1.0] * FWER_TARGETS, weights)
    # Band B's columns correlated with band A's (column by column), still
    # carrying nothing: the targets are band A's signal and noise (and, with
    # ``weak``, that much of band B's own signal).
    A, B = X[:, :BAND_SIZE], X[:, BAND_SIZE:]
    X = np.hstack([A, correlation * A + np.sqrt(1 - correlation**2) * B])
    Y = Y + weak * (B @ weights[1])[:, None]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        result = variance_partitioning(
            X,
            Y,
            bands=[0] * BAND_SIZE + [1] * BAND_SIZE,
            estimator=model(),
            groups=runs,
            n_permutations=N_PERMUTATIONS,
            random_state=seed,
            null=NULLS[null][0],
            null_hyperparameters=NULLS[null][1],
        )
    fwer = result.pvalue_fwer
    if weak:
        return float(np.mean(result.pvalue[1] <= ALPHA_LEVEL)), float(
            np.mean(fwer[1] <= ALPHA_LEVEL)
        )
    return (
        bool(np.any(fwer[1] <= ALPHA_LEVEL)),
        float(np.mean(fwer[0] <= ALPHA_LEVEL)),
        int(np.sum(result.pvalue[1] <= ALPHA_LEVEL)),
    )


def run_lengths(n_runs):
    """``n_runs`` runs of unequal length, as many rows in all as
    ``RUN_LENGTHS`` (400): its lengths scaled by ``5 / n_runs``, cycled."""
    scaled = np.array(RUN_LENGTHS) * len(RUN_LENGTHS) / n_runs
    return tuple(int(round(length)) for length in np.resize(scaled, n_runs))


def coverage_dataset(
    seed, weights, n_bootstrap, n_runs, rows=False, treatments=("searched",)
):
    """Hits of every interval on one data set, for each treatment of the
    hyperparameters (``treatments``); ``rows``: without groups."""
    X, Y, runs, _ = simulate(seed, run_lengths(n_runs), MIXES, weights)
    bands = np.array([0] * BAND_SIZE + [1] * BAND_SIZE)
    inner = 5 if rows else LeaveOneGroupOut()
    groups = None if rows else runs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        results = {
            treatment: variance_partitioning(
                X,
                Y,
                bands=bands,
                estimator=model(inner),
                groups=groups,
                n_bootstrap=n_bootstrap,
                bootstrap_hyperparameters=treatment,
                confidence_level=CONFIDENCE,
                random_state=seed,
            )
            for treatment in treatments
        }
        # The population of the models fit on this data set.
        X_test, Y_test, _, parts = simulate(
            10**6 + seed, (80,) * POPULATION_RUNS, MIXES, weights
        )
        full = model(inner).set_params(bands=bands)
        full = full.fit(X, Y, groups=groups)
        f_full = r2(Y_test, full.predict(X_test))
        fitted = []
        for b in range(2):
            keep = bands != b
            rest = model(inner).fit(X[:, keep], Y, groups=groups)
            fitted.append(f_full - r2(Y_test, rest.predict(X_test[:, keep])))
    fitted = np.array(fitted)
    # The oracle: the true signals' R^2 on the test simulation.
    signal = parts[0] + parts[1]
    f_true = r2(Y_test, signal)
    oracle = np.array([f_true - r2(Y_test, parts[1]), f_true - r2(Y_test, parts[0])])
    truths = {
        "oracle": (oracle, oracle / f_true),
        "fitted": (fitted, fitted / f_full),
    }
    hits, widths = {}, {}
    # Band A in every mix but the last, band B in every mix but the first (a
    # band that drives nothing has no interior value).
    used = np.array([np.array(MIXES) > 0, np.array(MIXES) < 1])
    for (treatment, result), (name, (unique, share)) in itertools.product(
        results.items(), truths.items()
    ):
        width = np.diff(result.unique_ci, axis=0)[0]
        widths[treatment] = float(np.nanmean(width[used]))
        for what, value, estimate, basic in (
            ("unique", unique, result.unique, result.unique_ci),
            ("share", share, result.share, result.share_ci),
        ):
            # The percentile interval of the same replicates: the basic
            # interval reflected back around the estimate.
            percentile = 2 * estimate - basic[::-1]
            for method, ci in (("basic", basic), ("percentile", percentile)):
                covered = (ci[0] <= value) & (value <= ci[1])
                defined = ~np.isnan(ci).any(axis=0)
                hits[treatment, method, name, what] = (
                    int(covered[used].sum()),
                    int((used & defined).sum()),
                    int(used.sum()),
                )
    result = next(iter(results.values()))
    bias = np.nanmean(result.unique - oracle), np.nanmean(result.unique - fitted)
    return hits, bias, widths


def rate_with_interval(successes, trials):
    interval = stats.binomtest(successes, trials).proportion_ci(0.95)
    return successes / trials, interval.low, interval.high


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="10x the data sets")
    parser.add_argument("--n-jobs", type=int, default=2, help="joblib workers")
    parser.add_argument(
        "--runs",
        type=int,
        nargs="+",
        default=[5],
        help="runs per coverage data set, 400 rows in all (several: one table each)",
    )
    parser.add_argument(
        "--coverage-only", action="store_true", help="skip the FWER part"
    )
    parser.add_argument(
        "--correlation",
        type=float,
        nargs="+",
        default=[0.0],
        help="correlation of the null band B with band A, column by column "
        "(several: one FWER table each)",
    )
    parser.add_argument(
        "--rows",
        action="store_true",
        help="coverage without groups too (rows drawn independently)",
    )
    parser.add_argument(
        "--null",
        nargs="+",
        default=["band_rows"],
        choices=list(NULLS),
        help="nulls of the FWER part: band rows permuted, or Freedman-Lane with "
        "the hyperparameters held or searched (several: one table each)",
    )
    parser.add_argument(
        "--weak",
        type=float,
        default=0.0,
        help="band B's signal in every target times this: power, not FWER",
    )
    parser.add_argument(
        "--fwer-datasets", type=int, default=80, help="data sets per FWER row"
    )
    parser.add_argument("--fwer-only", action="store_true", help="skip the coverage")
    parser.add_argument(
        "--bootstrap-hyperparameters",
        nargs="+",
        default=["searched"],
        choices=["searched", "held"],
        help="treatments of the replicates' hyperparameters in the coverage part "
        "(several: side by side, the same replicates)",
    )
    args = parser.parse_args()
    scale = 10 if args.full else 1
    fwer_datasets = args.fwer_datasets * scale
    coverage_datasets, n_bootstrap = 20 * scale, 49
    weights = band_weights()
    parallel = Parallel(n_jobs=args.n_jobs)
    for correlation, null in itertools.product(
        () if args.coverage_only else args.correlation, args.null
    ):
        start = time.perf_counter()
        flags = parallel(
            delayed(fwer_dataset)(s, weights, correlation, null, args.weak)
            for s in range(fwer_datasets)
        )
        if args.weak:
            print(
                f"## Power for band B at weight {args.weak} ({null}), correlation "
                f"{correlation} with band A ({fwer_datasets} data sets x "
                f"{FWER_TARGETS} targets, {N_PERMUTATIONS} circular shifts): "
                f"pvalue <= 0.05 {np.mean([p for p, _ in flags]):.1%}, "
                f"pvalue_fwer <= 0.05 {np.mean([p for _, p in flags]):.1%} "
                f"({time.perf_counter() - start:.0f} s)\n"
            )
            continue
        false_positives = sum(flag for flag, _, _ in flags)
        rate, low, high = rate_with_interval(false_positives, fwer_datasets)
        power = np.mean([p for _, p, _ in flags])
        per_target = rate_with_interval(
            sum(n for _, _, n in flags), fwer_datasets * FWER_TARGETS
        )
        verdict = "within 5%" if low <= ALPHA_LEVEL else "too liberal"
        print(
            f"## FWER of unique-variance tests ({null}), band B null, correlation "
            f"{correlation} with band A ({fwer_datasets} data sets x "
            f"{FWER_TARGETS} targets, {N_PERMUTATIONS} circular shifts)\n"
        )
        print("| band | FWER (any pvalue_fwer <= 0.05) | 95% interval | verdict |")
        print("|---|---|---|---|")
        print(f"| B (null) | {rate:.1%} | {low:.1%} - {high:.1%} | {verdict} |")
        print(
            f"| B (null), per target: pvalue <= 0.05 | {per_target[0]:.1%} | "
            f"{per_target[1]:.1%} - {per_target[2]:.1%} | |"
        )
        print(f"| A (driven): power | {power:.1%} | | |")
        print(f"\n({time.perf_counter() - start:.0f} s)\n")
    for n_runs in () if args.fwer_only else args.runs:
        for rows in (False, True) if args.rows else (False,):
            coverage_table(
                parallel,
                n_runs,
                coverage_datasets,
                n_bootstrap,
                weights,
                rows,
                tuple(args.bootstrap_hyperparameters),
            )


def coverage_table(
    parallel, n_runs, n_datasets, n_bootstrap, weights, rows, treatments
):
    start = time.perf_counter()
    results = parallel(
        delayed(coverage_dataset)(
            10**5 + s, weights, n_bootstrap, n_runs, rows, treatments
        )
        for s in range(n_datasets)
    )
    what = (
        "row-bootstrap intervals (no groups)" if rows else "cluster-bootstrap intervals"
    )
    print(
        f"## Coverage of {CONFIDENCE:.0%} {what}, "
        f"{n_runs} runs of {min(run_lengths(n_runs))} to "
        f"{max(run_lengths(n_runs))} rows ({n_datasets} data sets x "
        f"{len(MIXES)} targets, {n_bootstrap} replicates)\n"
    )
    print(
        "| hyperparameters | interval | population value | quantity | coverage "
        "(defined intervals) | 95% interval | undefined |"
    )
    print("|---|---|---|---|---|---|---|")
    for key in results[0][0]:
        hit, defined, total = (sum(h[key][k] for h, _, _ in results) for k in range(3))
        rate, low, high = rate_with_interval(hit, defined)
        print(
            f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {rate:.1%} | "
            f"{low:.1%} - {high:.1%} | {1 - defined / total:.0%} |"
        )
    bias = np.mean([b for _, b, _ in results], axis=0)
    print(
        f"\nmean unique variance estimate minus oracle: {bias[0]:+.3f}, minus "
        f"fitted: {bias[1]:+.3f}"
    )
    for treatment in treatments:
        width = np.mean([w[treatment] for _, _, w in results])
        print(
            f"mean width of the basic interval of the unique variance "
            f"({treatment}): {width:.4f}"
        )
    print(f"\n({time.perf_counter() - start:.0f} s)\n")


if __name__ == "__main__":
    main()
