"""BatchedRidge's covariance decomposition against its SVD, over shapes.

Leave one of 5 runs out, 9 alphas, float64 numpy, standard normal X and y;
rows from 90 to 16,000 and features from 11 to 500, from 2 rows per
feature per training fold (the least at which ``solver="auto"`` takes the
covariance) up, plus bench_ridge's 5-fold shape (2,000 x 500, 20 alphas) at
4,000 targets in float64 and float32. Each shape fits ``solver="svd"`` and
``solver="covariance"`` alternately ``--repeats`` times; printed: the
medians and the SVD's time over the covariance's.

Run: ``python benchmarks/bench_covariance.py [--repeats 3]``
"""

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

# The package of this checkout (and of the workers started from this file),
# not whichever one the environment installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sklearn.model_selection import LeaveOneGroupOut

from skbatch import BatchedRidge

SHAPES = [
    (90, 11, 12),
    (400, 50, 20),
    (1000, 100, 50),
    (2000, 200, 50),
    (4000, 300, 50),
    (8000, 500, 64),
    (16000, 500, 64),
]


def timed(fit, repeats):
    seconds = {"svd": [], "covariance": []}
    for _ in range(repeats):
        for solver in seconds:
            start = time.perf_counter()
            fit(solver)
            seconds[solver].append(time.perf_counter() - start)
    return {solver: float(np.median(s)) for solver, s in seconds.items()}


def report(label, seconds):
    svd, cov = seconds["svd"], seconds["covariance"]
    print(
        f"{label:34s} svd {svd:7.3f} s  covariance {cov:7.3f} s  ratio {svd / cov:5.2f}"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    rng = np.random.default_rng(0)
    alphas = np.logspace(-2, 4, 9)
    for n, p, t in SHAPES:
        X, Y = rng.standard_normal((n, p)), rng.standard_normal((n, t))
        runs = np.arange(n) * 5 // n

        def fit(solver, X=X, Y=Y, runs=runs):
            BatchedRidge(alphas, cv=LeaveOneGroupOut(), solver=solver).fit(
                X, Y, groups=runs
            )

        report(f"n={n} p={p} t={t}", timed(fit, args.repeats))
    n, p, t = 2000, 500, 4000
    X = rng.standard_normal((n, p))
    Y = X[:, :50] @ rng.standard_normal((50, t)) + 3 * rng.standard_normal((n, t))
    for dtype in ("float64", "float32"):
        data = (X.astype(dtype), Y.astype(dtype))

        def fit(solver, data=data, dtype=dtype):
            BatchedRidge(np.logspace(-2, 6, 20), cv=5, solver=solver, dtype=dtype).fit(
                *data
            )

        report(f"bench_ridge cv=5 {dtype} t={t}", timed(fit, args.repeats))


if __name__ == "__main__":
    main()
