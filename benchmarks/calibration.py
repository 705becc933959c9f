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

Part 2, bootstrap intervals: how often the 95% percentile interval of
``BootstrapEstimator`` covers a known regression coefficient:

- iid bootstrap on iid data;
- cluster bootstrap (``groups``) on data with cluster effects in X and the
  noise;
- moving-block bootstrap (``block_size``) on AR(0.9) data, n=400, blocks of
  5, 10, 20 and 40 rows and the documented default rule, and the iid
  bootstrap on the same data (invalid).

    python benchmarks/calibration.py           # quick: a few minutes, 2 cores
    python benchmarks/calibration.py --full    # 1000 data sets per FWER row
    python benchmarks/calibration.py --only permutation --datasets 200

Every row is seeded: the same command prints the same table.
"""

import argparse
import time

import numpy as np
from joblib import Parallel, delayed
from scipy import stats
from sklearn.linear_model import LinearRegression, Ridge
from sklearn.model_selection import GroupKFold

from skbatch import BootstrapEstimator, PermutationScorer

N_RUNS = 5
N_FEATURES = 5
PHI = 0.95
ALPHA_LEVEL = 0.05
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


def false_positive(seed, kind, run_length, permutation_type, block_size, sizes):
    X, Y, groups = null_data(seed, kind, run_length, sizes["targets"])
    scorer = PermutationScorer(
        Ridge(alpha=1.0),
        n_permutations=sizes["permutations"],
        cv=GroupKFold(N_RUNS),
        multioutput="raw_values",
        permutation_type=permutation_type,
        block_size=block_size,
        random_state=seed,
        device="cpu",
    ).fit(X, Y, groups=groups)
    return bool(np.any(scorer.pvalue_fwer_ <= ALPHA_LEVEL))


def rate_with_interval(successes, trials):
    interval = stats.binomtest(successes, trials).proportion_ci(0.95)
    return successes / trials, interval.low, interval.high


def fwer_table(sizes, n_jobs):
    print(
        f"\nFWER under the null: {sizes['datasets']} data sets per row, "
        f"{N_RUNS} runs, {sizes['targets']} targets, {sizes['permutations']} "
        f"permutations, Ridge(alpha=1), GroupKFold({N_RUNS}); nominal "
        f"{ALPHA_LEVEL:.0%}"
    )
    header = "| data, scheme | run length | FWER | 95% interval | verdict |"
    lines = [header, "|---|---|---|---|---|"]
    print(header)
    for name, kind, run_length, permutation_type, block_size in FWER_ROWS:
        start = time.perf_counter()
        flags = Parallel(n_jobs=n_jobs)(
            delayed(false_positive)(
                seed, kind, run_length, permutation_type, block_size, sizes
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


def covers(seed, design, block_size, sizes):
    groups = None
    if design == "iid":
        X, y = iid_regression(seed, 100)
    elif design == "cluster":
        X, y, groups = clustered_regression(seed, 40, 10)
    else:
        X, y = ar_regression(seed, 400, 0.9)
    result = (
        BootstrapEstimator(
            LinearRegression(),
            n_bootstrap=sizes["replicates"],
            block_size=block_size,
            random_state=seed,
            device="cpu",
        )
        .fit(X, y, groups=groups)
        .results_["coef_"]
    )
    return bool(result.ci_lower[0] <= 1.0 <= result.ci_upper[0])


COVERAGE_ROWS = [
    ("iid data, iid bootstrap", "iid", None),
    ("clustered data, cluster bootstrap (groups)", "cluster", None),
    ("AR(0.9) n=400, iid bootstrap [invalid]", "ar", None),
    ("AR(0.9) n=400, moving blocks of 5", "ar", 5),
    ("AR(0.9) n=400, moving blocks of 10", "ar", 10),
    ("AR(0.9) n=400, moving blocks of 20", "ar", 20),
    ("AR(0.9) n=400, moving blocks of 40", "ar", 40),
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
    for name, design, block_size in COVERAGE_ROWS:
        start = time.perf_counter()
        hits = Parallel(n_jobs=n_jobs)(
            delayed(covers)(seed, design, block_size, sizes)
            for seed in range(sizes["coverage_datasets"])
        )
        rate, low, high = rate_with_interval(sum(hits), len(hits))
        line = f"| {name} | {rate:.3f} | {low:.3f} - {high:.3f} |"
        lines.append(line)
        print(line, f"({time.perf_counter() - start:.0f} s)")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="the full run")
    parser.add_argument("--only", choices=["permutation", "bootstrap"])
    parser.add_argument("--datasets", type=int, help="data sets per FWER row")
    parser.add_argument("--n-jobs", type=int, default=-1, help="joblib workers")
    args = parser.parse_args()
    sizes = {
        "datasets": 1000 if args.full else 100,
        "targets": 500 if args.full else 50,
        "permutations": 200 if args.full else 100,
        "coverage_datasets": 1000 if args.full else 200,
        "replicates": 1000 if args.full else 500,
    }
    if args.datasets:
        sizes["datasets"] = args.datasets
    start = time.perf_counter()
    if args.only != "bootstrap":
        fwer_table(sizes, args.n_jobs)
    if args.only != "permutation":
        coverage_table(sizes, args.n_jobs)
    print(f"\ntotal {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
