"""What confounds cost PermutationScorer, side by side.

BatchedRidge (alphas 0.1, 1, 10, 100, exact LOO inside every fold), 5 runs
of 100 rows, 100 features, 6 confounds, ``--targets`` targets,
``--permutations`` circular shifts within runs, ``GroupKFold(5)``,
``multioutput="raw_values"``:

- ``plain``: ``fit(X, Y, groups=runs)``, the score of X alone;
- ``confounds``: ``fit(X, Y, groups=runs, confounds=Z)``, the ridge fast
  path of both models (``[X, Z]`` and ``Z``, one decomposition per fold
  each);
- ``loop``: what one writes without it, per permutation: the targets
  built from scikit-learn's LinearRegression fit on Z, then RidgeCV
  (alpha per target) on ``[X, Z]`` and LinearRegression on ``Z`` refit on
  every fold; timed on ``--loop-permutations`` and scaled to the count.

Rounds alternate the configurations; medians of ``--repeats`` rounds and
the ratio to ``plain`` measured in the same run.

    python benchmarks/bench_permutation_confounds.py
    python benchmarks/bench_permutation_confounds.py --targets 200 --repeats 1
"""

import argparse
import statistics
import time
import warnings

import numpy as np
from sklearn.linear_model import LinearRegression, RidgeCV
from sklearn.metrics import r2_score
from sklearn.model_selection import GroupKFold

from skbatch import BatchedRidge, PermutationScorer
from skbatch._resampling.signed import signed_rows

ALPHAS = np.array([0.1, 1.0, 10.0, 100.0])
RUNS, RUN_ROWS, N_FEATURES, N_CONFOUNDS = 5, 100, 100, 6


def data(n_targets, seed=0):
    rng = np.random.default_rng(seed)
    n = RUNS * RUN_ROWS
    Z = rng.standard_normal((n, N_CONFOUNDS))
    X = rng.standard_normal((n, N_FEATURES)) + 0.5 * Z[:, :1]
    Y = Z @ rng.standard_normal((N_CONFOUNDS, n_targets))
    Y += rng.standard_normal((n, n_targets))
    return X, Y, Z, np.repeat(np.arange(RUNS), RUN_ROWS)


def run_scorer(X, Y, Z, runs, n_permutations, confounds):
    scorer = PermutationScorer(
        BatchedRidge(alphas=ALPHAS),
        n_permutations=n_permutations,
        cv=GroupKFold(RUNS),
        permutation_type="circular_shift",
        multioutput="raw_values",
        device="cpu",
    )
    start = time.perf_counter()
    scorer.fit(X, Y, groups=runs, confounds=Z if confounds else None)
    return time.perf_counter() - start


def run_loop(X, Y, Z, runs, n_permutations):
    """Seconds of the hand-written loop, ``n_permutations`` of them."""
    start = time.perf_counter()
    fitted = LinearRegression().fit(Z, Y).predict(Z)
    residuals = Y - fitted
    design = np.hstack([X, Z])
    splits = list(GroupKFold(RUNS).split(X, Y, runs))
    codes = signed_rows(
        0, np.arange(n_permutations), len(X), runs, permutation_type="circular_shift"
    )
    for code in codes:
        y = fitted + residuals[code]
        gain = 0.0
        for train, test in splits:
            full = RidgeCV(alphas=ALPHAS, alpha_per_target=True)
            full.fit(design[train], y[train])
            reduced = LinearRegression().fit(Z[train], y[train])
            gain = gain + r2_score(
                y[test], full.predict(design[test]), multioutput="raw_values"
            )
            gain = gain - r2_score(
                y[test], reduced.predict(Z[test]), multioutput="raw_values"
            )
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", type=int, default=2000)
    parser.add_argument("--permutations", type=int, default=200)
    parser.add_argument("--loop-permutations", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    X, Y, Z, runs = data(args.targets)
    print(
        f"n={len(X)} ({RUNS} runs), p={N_FEATURES}, {N_CONFOUNDS} confounds, "
        f"{args.targets} targets, {args.permutations} permutations, "
        f"BatchedRidge({len(ALPHAS)} alphas, LOO), GroupKFold({RUNS})"
    )
    times = {"plain": [], "confounds": [], "loop": []}
    scale = args.permutations / args.loop_permutations
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(args.repeats):
            times["plain"].append(run_scorer(X, Y, Z, runs, args.permutations, False))
            times["confounds"].append(
                run_scorer(X, Y, Z, runs, args.permutations, True)
            )
            times["loop"].append(
                scale * run_loop(X, Y, Z, runs, args.loop_permutations)
            )
    plain = statistics.median(times["plain"])
    print("| configuration | median s | runs (s) | ratio to plain |")
    print("|---|---|---|---|")
    for name, values in times.items():
        median = statistics.median(values)
        runs_text = ", ".join(f"{v:.2f}" for v in values)
        extra = " (scaled)" if name == "loop" else ""
        print(f"| {name}{extra} | {median:.2f} | {runs_text} | {median / plain:.2f}x |")


if __name__ == "__main__":
    main()
