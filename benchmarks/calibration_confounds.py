"""Calibration of PermutationScorer's confounds (Freedman–Lane) under the null.

X is independent of y given a confound z correlated with both: each of X's
3 columns and y are ``c z + sqrt(1 - c^2) e`` with independent noises e,
for c = 0.5 and 0.9. ``PermutationScorer(Ridge(alpha=1), multioutput=
"raw_values")`` tests one target per data set, and a data set counts as a
rejection when ``pvalue_ <= 0.05``. Over many data sets the rejection rate
must be 5% or below, within its 95% (Clopper-Pearson) interval. Tests:

- ``fit(X, y, confounds=z)``: the score of X beyond z, its residuals
  permuted (Freedman and Lane, 1983);
- ``fit(X, y)``: the test without the confound, which tests "X predicts y"
  (true here, through z): shown too liberal for "X adds to z";
- ``fit([X, z], y)``: z as one more column of X and y permuted, the other
  common mistake: also too liberal.

Data: iid rows (shuffled, ``KFold(5)``); and 5 AR(0.6) runs of 30, 45, 60,
35 and 70 rows (x, z and the noise of y autocorrelated), rotated within
runs (``circular_shift``, ``GroupKFold(5)``).

    python benchmarks/calibration_confounds.py               # quick
    python benchmarks/calibration_confounds.py --datasets 4000

Every row is seeded: the same command prints the same table.
"""

import argparse
import time
import warnings

import numpy as np
from joblib import Parallel, delayed
from scipy import stats
from sklearn.linear_model import Ridge
from sklearn.model_selection import GroupKFold, KFold

from skbatch import PermutationScorer

ALPHA_LEVEL = 0.05
N_FEATURES = 3
IID_ROWS = 120
RUN_LENGTHS = (30, 45, 60, 35, 70)
PHI = 0.6
CORRELATIONS = (0.5, 0.9)
TESTS = ("confounds", "no confound", "confound as a column of X")


def ar_columns(rng, lengths, n_columns, phi):
    """Columns of unit-variance AR(``phi``) series restarting every run."""
    parts = []
    for length in lengths:
        noise = rng.standard_normal((length, n_columns))
        series = np.empty_like(noise)
        series[0] = noise[0]
        for t in range(1, length):
            series[t] = phi * series[t - 1] + np.sqrt(1 - phi**2) * noise[t]
        parts.append(series)
    return np.concatenate(parts)


def null_data(seed, correlation, runs):
    """X (n x 3), y and z: X and y depend on z alone."""
    rng = np.random.default_rng(seed)
    lengths = RUN_LENGTHS if runs else (IID_ROWS,)
    phi = PHI if runs else 0.0
    z = ar_columns(rng, lengths, 1, phi)
    noise = ar_columns(rng, lengths, N_FEATURES + 1, phi)
    mixed = correlation * z + np.sqrt(1 - correlation**2) * noise
    groups = np.repeat(np.arange(len(lengths)), lengths)
    return mixed[:, :N_FEATURES], mixed[:, N_FEATURES], z, groups


def rejections(seed, correlation, runs, n_permutations):
    """Whether each test of :data:`TESTS` rejects on data set ``seed``."""
    X, y, z, groups = null_data(seed, correlation, runs)
    params = dict(
        n_permutations=n_permutations,
        cv=GroupKFold(len(RUN_LENGTHS)) if runs else KFold(5),
        permutation_type="circular_shift" if runs else "shuffle",
        random_state=seed,
        device="cpu",
    )
    groups = groups if runs else None
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for test in TESTS:
            scorer = PermutationScorer(Ridge(alpha=1.0), **params)
            if test == "confounds":
                scorer.fit(X, y, groups=groups, confounds=z)
            elif test == "no confound":
                scorer.fit(X, y, groups=groups)
            else:
                scorer.fit(np.column_stack([X, z]), y, groups=groups)
            out.append(bool(scorer.pvalue_ <= ALPHA_LEVEL))
    return out


def rate_with_interval(successes, trials):
    interval = stats.binomtest(successes, trials).proportion_ci(0.95)
    return successes / trials, interval.low, interval.high


def table(n_datasets, n_permutations, n_jobs):
    print(
        f"\nRejection rate under the null (X independent of y given z): "
        f"{n_datasets} data sets per row, {n_permutations} permutations, "
        f"Ridge(alpha=1), {N_FEATURES} columns of X; nominal {ALPHA_LEVEL:.0%}"
    )
    header = "| data, scheme | corr(z, X) = corr(z, y) | test | rate | 95% interval |"
    print(header)
    print("|---|---|---|---|---|")
    for runs in (False, True):
        name = (
            "5 AR(0.6) runs of 30-70 rows, circular_shift within runs"
            if runs
            else f"iid, {IID_ROWS} rows, shuffle"
        )
        for correlation in CORRELATIONS:
            start = time.perf_counter()
            flags = Parallel(n_jobs=n_jobs)(
                delayed(rejections)(seed, correlation, runs, n_permutations)
                for seed in range(n_datasets)
            )
            flags = np.array(flags)
            for k, test in enumerate(TESTS):
                rate, low, high = rate_with_interval(int(flags[:, k].sum()), n_datasets)
                print(
                    f"| {name} | {correlation} | {test} | {rate:.1%} | "
                    f"{low:.1%} - {high:.1%} |"
                )
            print(f"({time.perf_counter() - start:.0f} s)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", type=int, default=1000)
    parser.add_argument("--permutations", type=int, default=199)
    parser.add_argument("--n-jobs", type=int, default=2)
    args = parser.parse_args()
    start = time.perf_counter()
    table(args.datasets, args.permutations, args.n_jobs)
    print(f"\ntotal {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
