"""PermutationScorer(BandedRidge)'s fast path, with and without shared factors.

n=1000 rows, bands of 40 and 200 columns, 500 targets, 20 candidates, 9
alphas, exact LOO inside, 5 outer folds, 10 permutations. Timed ``REPEATS``
times each, alternating, in the same run: each outer fold's training rows
factorised once for all candidates (``SharedFactors``) against every
candidate decomposed apart (``SharedFactors.applies`` patched to False).
Printed: the seconds and the ratio of the medians.

Run: ``python benchmarks/bench_banded_permutation.py``
"""

import time
import warnings

import numpy as np

from skbatch import BandedRidge, PermutationScorer
from skbatch._ridge import banded

N_SAMPLES, BANDS, N_TARGETS = 1000, (40, 200), 500
REPEATS = 2


def make_data(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N_SAMPLES, sum(BANDS)))
    W = rng.standard_normal((sum(BANDS), N_TARGETS)) / 15
    Y = X @ W + rng.standard_normal((N_SAMPLES, N_TARGETS))
    return X, Y, np.repeat(np.arange(len(BANDS)), BANDS)


def fit_seconds(X, Y, labels):
    model = BandedRidge(labels, alphas=np.logspace(-2, 6, 9), band_weights=20)
    scorer = PermutationScorer(model, n_permutations=10, cv=5, multioutput="raw_values")
    start = time.perf_counter()
    with warnings.catch_warnings():
        # The edge-of-grid and autocorrelation warnings of the random data.
        warnings.simplefilter("ignore")
        scorer.fit(X, Y)
    return time.perf_counter() - start


def main():
    X, Y, labels = make_data()
    applies = banded.SharedFactors.applies
    seconds = {"shared": [], "separate": []}
    try:
        for _ in range(REPEATS):
            banded.SharedFactors.applies = applies
            seconds["shared"].append(fit_seconds(X, Y, labels))
            banded.SharedFactors.applies = staticmethod(lambda *args: False)
            seconds["separate"].append(fit_seconds(X, Y, labels))
    finally:
        banded.SharedFactors.applies = applies
    for name, values in seconds.items():
        print(f"{name:9s} " + ", ".join(f"{v:.2f} s" for v in values))
    ratio = np.median(seconds["separate"]) / np.median(seconds["shared"])
    print(f"separate / shared (medians): {ratio:.2f}x")


if __name__ == "__main__":
    main()
