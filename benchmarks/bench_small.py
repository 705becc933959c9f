"""Small-problem benchmark: BootstrapEstimator's fixed costs against scipy.

Problems, each timed warm as the best of repeats, in this process:

- ``LinearRegression`` on ``X = zeros((16, 1))``: its intercept is the mean
  of y, so 100,000 replicates of it are ``scipy.stats.bootstrap`` of
  ``np.mean`` with ``n_resamples=100_000``;
- ``LinearRegression`` with n=40 samples, p=3 features, with 2 (the fewest
  ``n_bootstrap`` allows), 100 and 10,000 replicates, against
  ``scipy.stats.bootstrap`` of a vectorised least-squares statistic on the
  paired columns, and against a naive loop of sklearn fits for 100.

Every method computes 95% percentile intervals and standard errors
(scipy: ``method="percentile"``).

Run ``python benchmarks/bench_small.py`` (under a minute) or with
``--quick`` (best of 2, fewer replicates).
"""

import argparse
import os
import sys
import time

import numpy as np
import scipy.stats
from sklearn.linear_model import LinearRegression

from skbatch import BootstrapEstimator


def best_time(fn, repeats):
    fn()  # warm: imports, first allocations
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def skbatch_fit(X, y, n_bootstrap):
    return lambda: BootstrapEstimator(
        LinearRegression(), n_bootstrap=n_bootstrap, random_state=0
    ).fit(X, y)


def scipy_mean(x, n_resamples):
    return lambda: scipy.stats.bootstrap(
        (x,), np.mean, n_resamples=n_resamples, method="percentile", random_state=0
    )


def least_squares(*columns, axis=-1):
    """Intercept and coefficients of each resample, vectorised over resamples."""
    *features, y = columns
    design = np.stack([np.ones_like(y), *features], axis=-1)
    gram = np.swapaxes(design, -1, -2) @ design
    rhs = np.swapaxes(design, -1, -2) @ y[..., None]
    return np.moveaxis(np.linalg.solve(gram, rhs)[..., 0], -1, 0)


def scipy_regression(X, y, n_resamples):
    return lambda: scipy.stats.bootstrap(
        (*X.T, y),
        least_squares,
        n_resamples=n_resamples,
        paired=True,
        vectorized=True,
        method="percentile",
        random_state=0,
    )


def naive_loop(X, y, n_bootstrap):
    def run():
        rng = np.random.default_rng(0)
        samples = np.empty((n_bootstrap, X.shape[1] + 1))
        for k in range(n_bootstrap):
            rows = rng.integers(0, len(X), len(X))
            fitted = LinearRegression().fit(X[rows], y[rows])
            samples[k] = [fitted.intercept_, *fitted.coef_]
        np.percentile(samples, [2.5, 97.5], axis=0)
        samples.std(axis=0, ddof=1)

    return run


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="best of 2, fewer reps")
    args = parser.parse_args(argv)
    repeats = 2 if args.quick else 3
    large = 20_000 if args.quick else 100_000
    rng = np.random.default_rng(0)
    x = rng.standard_normal(16)
    X = rng.standard_normal((40, 3))
    y = X @ [1.0, -2.0, 0.5] + rng.standard_normal(40)

    rows = [
        (
            f"n=16, mean, B={large:,}",
            skbatch_fit(np.zeros((16, 1)), x, large),
            "scipy",
            scipy_mean(x, large),
        )
    ]
    for n_bootstrap in (2, 100, 10_000):
        rows.append(
            (
                f"n=40, p=3, B={n_bootstrap:,}",
                skbatch_fit(X, y, n_bootstrap),
                "scipy",
                scipy_regression(X, y, n_bootstrap),
            )
        )
    rows.append(
        (
            "n=40, p=3, B=100",
            skbatch_fit(X, y, 100),
            "sklearn loop",
            naive_loop(X, y, 100),
        )
    )

    print(
        f"BootstrapEstimator(LinearRegression()) on small problems, best of "
        f"{repeats} warm runs ({os.cpu_count()} CPUs)\n"
    )
    header = (
        f"{'problem':<26} {'skbatch s':>10} {'peer':>13} {'peer s':>9} {'ratio':>7}"
    )
    print(header)
    print("-" * len(header))
    for label, ours, peer_name, peer in rows:
        ours_s = best_time(ours, repeats)
        peer_s = best_time(peer, repeats)
        print(
            f"{label:<26} {ours_s:>10.4f} {peer_name:>13} {peer_s:>9.4f} "
            f"{ours_s / peer_s:>6.2f}x"
        )
    print("\nratio: skbatch time over the peer's, measured in the same run.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
