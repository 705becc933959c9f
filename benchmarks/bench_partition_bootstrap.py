"""One bootstrap replicate of variance_partitioning's unique variance at
encoding scale, hyperparameters searched and held.

Workload: ``bench_encoding.py``'s ``make_data`` (10 runs, 2,947 rows, bands
of 30 and 300 columns, 20 candidates, 9 alphas, leave-one-run-out outside
and inside) at ``--n-targets`` targets. Replicate 0 of the
cluster bootstrap (whole runs drawn, the searched and held paths draw the
same one: :func:`skbatch._ridge.partition_inference.replicate`):

- searched (``bootstrap_hyperparameters="searched"``, the default): the full
  model and each leave-one-band-out model refit with their searches on each
  kept fold: the three searches timed on the replicate's first kept fold
  and counted once per kept fold (they cost about the same on every fold);
- held (``"held"``): ``held_bootstrap_statistics`` itself on the replicate,
  at choices drawn per target and fold from the candidates and alphas (its
  cost depends on the candidates in use and the grouping of the targets,
  not on which target holds which), ``--repeats`` calls, the median; on
  every BLAS thread and on one.

Both are measured at ``--n-targets`` (500 and 2,000) and extrapolated to
``--extrapolate-targets`` (20,000) by a line through the two sizes (each has
a part that does not grow with the targets: the decompositions), times
``--replicates`` (1,000). Printed: wall seconds per replicate, the
extrapolation, and searched / held.

Run: ``PYTHONPATH=. python benchmarks/bench_partition_bootstrap.py``
"""

import argparse
import os
import sys
import time
import warnings

import numpy as np
from sklearn.base import clone
from sklearn.model_selection import LeaveOneGroupOut
from threadpoolctl import threadpool_limits

sys.path.insert(0, os.path.dirname(__file__))

from bench_encoding import (  # noqa: E402
    ALPHAS,
    BANDS,
    N_CANDIDATES,
    make_data,
)

from skbatch import BandedRidge  # noqa: E402
from skbatch._ridge.banded import band_candidates  # noqa: E402
from skbatch._ridge.partition_bootstrap_held import (  # noqa: E402
    held_bootstrap_statistics,
)
from skbatch._ridge.partition_inference import replicate  # noqa: E402


def measure(n_targets, args):
    """Wall seconds of one replicate of each treatment at ``n_targets``."""
    X, Y, labels, runs, _ = make_data(n_targets)
    splits = list(LeaveOneGroupOut().split(X, Y, runs))
    from himalaya.ridge._random_search import generate_dirichlet_samples

    drawn = np.asarray(
        generate_dirichlet_samples(N_CANDIDATES, len(BANDS), [0.1, 1.0], random_state=0)
    )
    candidates = band_candidates(drawn, len(BANDS), None, None)
    bands = [np.flatnonzero(labels == b) for b in range(len(BANDS))]
    rest = [bands[1 - b] for b in range(len(BANDS))]
    rng = np.random.default_rng(0)

    def estimator(model_bands):
        # One band has one candidate, as variance_partitioning restricts them.
        weights = candidates if len(model_bands) > 1 else np.ones((1, 1))
        return BandedRidge(
            model_bands, alphas=ALPHAS, band_weights=weights, cv=LeaveOneGroupOut()
        )

    def choices(weights):
        return [
            (
                weights[rng.integers(len(weights), size=n_targets)],
                rng.choice(ALPHAS, size=n_targets),
            )
            for _ in splits
        ]

    full = estimator(bands)
    reduced = [estimator([np.arange(keep.size)]) for keep in rest]
    chosen = [choices(candidates)] + [choices(np.ones((1, 1))) for _ in rest]
    rows, folds = replicate(0, 0, 1, X.shape[0], runs, splits)
    print(
        f"n={X.shape[0]} ({np.unique(runs).size} runs), bands={BANDS}, "
        f"{N_CANDIDATES} candidates, {ALPHAS.size} alphas, {n_targets} targets; "
        f"replicate 0: {len(rows)} rows, {len(folds)} of {len(splits)} folds "
        f"kept; load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    task = dict(
        full=full,
        reduced=reduced,
        columns=rest,
        chosen=chosen,
        X=X,
        Y=Y,
        splits=splits,
        sample_weight=None,
        groups=runs,
        entropy=0,
        n_items=1,
    )
    seconds = {}
    for threads in (None, 1):
        walls = []
        with threadpool_limits(limits=threads):
            for _ in range(args.repeats):
                start = time.perf_counter()
                held_bootstrap_statistics(np.array([0]), **task)
                walls.append(time.perf_counter() - start)
        name = "held, 1 thread" if threads == 1 else "held"
        seconds[name] = float(np.median(walls))
        print(f"  {name}: {seconds[name]:.1f} s per replicate", flush=True)
    if not args.skip_searches:
        train, _ = folds[0]
        Xr, Yr, groups = X[rows], Y[rows], runs[rows]
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            for model, columns in [(full, np.arange(X.shape[1]))] + list(
                zip(reduced, rest)
            ):
                clone(model).fit(
                    Xr[np.ix_(train, columns)], Yr[train], groups=groups[train]
                )
        seconds["searched"] = (time.perf_counter() - start) * len(folds)
        print(
            f"  searched: {seconds['searched']:.1f} s per replicate (one fold's "
            f"three searches x {len(folds)} folds)",
            flush=True,
        )
    return seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--n-targets",
        type=int,
        nargs="+",
        default=[500, 2000],
        help="targets measured (two: a line through them; one: in proportion)",
    )
    parser.add_argument("--extrapolate-targets", type=int, default=20000)
    parser.add_argument("--replicates", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--skip-searches", action="store_true", help="time the held replicate alone"
    )
    args = parser.parse_args()
    sizes = args.n_targets
    measured = [measure(n_targets, args) for n_targets in sizes]
    target = args.extrapolate_targets

    def at_target(name):
        # One size: in proportion (an upper bound for a cost with a part
        # that does not grow with the targets); two: a line through them.
        if len(sizes) == 1:
            return measured[0][name] * target / sizes[0]
        (t1, t2), (v1, v2) = sizes[-2:], [m[name] for m in measured[-2:]]
        return v2 + (v2 - v1) / (t2 - t1) * (target - t2)

    print(
        f"\nExtrapolated to {target} targets (a line through {sizes}) x "
        f"{args.replicates} replicates, wall seconds:\n"
    )
    print(
        f"| treatment | per replicate at {sizes[-1]} | per replicate at {target} "
        "| extrapolated |"
    )
    print("|---|---|---|---|")
    per = {}
    for name in measured[-1]:
        per[name] = at_target(name)
        total = per[name] * args.replicates
        print(
            f"| {name} | {measured[-1][name]:.1f} s | {per[name]:.1f} s | "
            f"{total:,.0f} s ({total / 3600:.1f} h) |"
        )
    if "searched" in per:
        now = measured[-1]["searched"] / measured[-1]["held"]
        print(
            f"\nsearched / held: {now:.1f}x at {sizes[-1]} targets, "
            f"{per['searched'] / per['held']:.1f}x at {target}"
        )


if __name__ == "__main__":
    main()
