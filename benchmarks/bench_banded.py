"""BandedRidge against himalaya's BandedRidgeCV and a hand loop of BatchedRidge.

Workload (issue 26): n=1000 rows, two bands of 40 and 200 columns, 4,000
targets, the same 20 candidates (himalaya's Dirichlet draws) and 9 alphas
for every method, float64 numpy. Timed in the same run:

- himalaya ``BandedRidgeCV(cv=5)`` (no intercept: himalaya's split
  predictions refuse one, so all methods fit centred data without one);
- the same search written by hand: a ``BatchedRidge`` fit per candidate on
  the rescaled X, keeping the best per target, with LOO, cv=5 and GCV;
- ``BandedRidge`` with LOO, cv=5 and GCV.

Printed: seconds (the median of ``--repeats`` runs, 3 by default, after
one traced run), ratios, the traced peak memory above the data, the share
of targets whose choice agrees with himalaya (cv=5) and with the hand loop,
and each fit's rate over its counted products against a GEMM of the same
shape timed here. ``--quick`` runs a smaller workload.

Run: ``python benchmarks/bench_banded.py [--quick] [--repeats N]``
"""

import argparse
import time
import tracemalloc

import numpy as np
from threadpoolctl import threadpool_info

from skbatch import BandedRidge, BatchedRidge
from skbatch._ridge.banded import band_candidates

# The workload, and the --quick one.
FULL = dict(n=1000, bands=(40, 200), t=4000, candidates=20)
QUICK = dict(n=300, bands=(20, 60), t=500, candidates=6)
ALPHAS = np.logspace(-2, 6, 9)
N_FOLDS = 5
# Repeats of the GEMM that sets the reference rate; the best is kept.
GEMM_REPEATS = 5


def make_data(n, bands, t, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, sum(bands)))
    labels = np.repeat(np.arange(len(bands)), bands)
    W = rng.standard_normal((sum(bands), t))
    # Targets driven by one band, the other, or both, at varied noise.
    kind = np.arange(t) % 3
    W[np.ix_(labels == 1, kind == 0)] = 0
    W[np.ix_(labels == 0, kind == 1)] = 0
    Y = X @ W / np.sqrt(sum(bands)) + rng.uniform(0.5, 3, t) * rng.standard_normal(
        (n, t)
    )
    X -= X.mean(axis=0)
    Y -= Y.mean(axis=0)
    return X, Y, labels


def timed(fn, repeats):
    """The result, the median seconds of ``repeats`` runs, and the traced
    peak of the first (tracing slows the run: timed apart)."""
    tracemalloc.start()
    try:
        result = fn()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - start)
    return result, float(np.median(seconds)), peak


def gemm_rate(n, r, t):
    """Flop/s of the (r x n) @ (n x t) product every projection runs."""
    rng = np.random.default_rng(1)
    A, B = rng.standard_normal((r, n)), rng.standard_normal((n, t))
    A @ B
    best = np.inf
    for _ in range(GEMM_REPEATS):
        start = time.perf_counter()
        A @ B
        best = min(best, time.perf_counter() - start)
    return 2.0 * n * r * t / best


def product_flops(cv, n, p, t, ranks, shared):
    """The target products of a search and its refit (SVDs left out).

    ``ranks``: the columns each candidate keeps (its rank, X being of full
    rank). Per alpha, LOO's residual product (2nrt) or K-fold's held-out
    predictions (2nrt over the folds); GCV has none. The projections:

    - ``shared`` (BandedRidge): the targets on Q once (all rows for LOO and
      GCV, each fold's training rows for K-fold), then each candidate's U'Y
      from Q'Y (2prt, LOO and GCV; K-fold maps its test rows instead);
    - else (the hand loop): U'Y on all rows per candidate (2nrt), and for
      K-fold each fold's own (2 n_train r t), and a refit of every target
      per candidate (2rpt).

    Refit: one projection and the coefficients (2rpt).
    """
    n_train = N_FOLDS * (n - n // N_FOLDS)
    alphas = 0 if cv == "gcv" else ALPHAS.size
    kfold = cv not in (None, "gcv")
    total = 0.0
    for r in ranks:
        total += alphas * 2.0 * n * r * t
        if shared:
            total += 0.0 if kfold else 2.0 * p * r * t
        else:
            total += 2.0 * n * r * t + 2.0 * r * p * t
            total += 2.0 * n_train * r * t if kfold else 0.0
    if shared:
        total += 2.0 * (n_train if kfold else n) * p * t
    r = max(ranks)
    return total + 2.0 * n * r * t + 2.0 * r * p * t


def hand_loop(X, Y, labels, candidates, cv, scoring):
    """The search by hand: one BatchedRidge per rescaled X, a best per target."""
    t = Y.shape[1]
    best = np.full(t, -np.inf)
    chosen = np.zeros(t, dtype=int)
    alpha = np.zeros(t)
    coef = np.zeros((t, X.shape[1]))
    for c, gamma in enumerate(candidates):
        scale = np.sqrt(gamma[labels])
        kept = scale > 0
        model = BatchedRidge(
            alphas=ALPHAS, cv=cv, fit_intercept=False, scoring=scoring
        ).fit(X[:, kept] * scale[kept], Y)
        better = model.best_score_ > best
        best[better], chosen[better] = model.best_score_[better], c
        alpha[better] = model.alpha_[better]
        coef[better] = 0
        coef[np.ix_(better, kept)] = model.coef_[better] * scale[kept]
    return chosen, alpha, coef


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller workload")
    parser.add_argument(
        "--no-himalaya", action="store_true", help="skip himalaya (slow)"
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="timed runs per method (median)"
    )
    args = parser.parse_args()
    work = QUICK if args.quick else FULL
    from himalaya.backend import set_backend
    from himalaya.ridge import BandedRidgeCV
    from himalaya.ridge._random_search import generate_dirichlet_samples

    X, Y, labels = make_data(work["n"], work["bands"], work["t"])
    n, p = X.shape
    t = Y.shape[1]
    drawn = np.asarray(
        generate_dirichlet_samples(
            work["candidates"], len(work["bands"]), [0.1, 1.0], random_state=0
        )
    )
    # As BandedRidge reads them (weights of 1e-15 drawn by himalaya at 0), for
    # skbatch's methods; himalaya takes their logarithm, so it gets the draws
    # as drawn: the same search up to band alphas of 1e15 times the others'.
    candidates = band_candidates(drawn, len(work["bands"]), None, None)
    data_mb = (X.nbytes + Y.nbytes) / 1e6
    blas = {(i["internal_api"], i["num_threads"]) for i in threadpool_info()}
    print(
        f"n={n}, bands={work['bands']}, targets={t}, {len(candidates)} candidates, "
        f"{ALPHAS.size} alphas, float64 numpy; BLAS {sorted(blas)}; data "
        f"{data_mb:.0f} MB"
    )
    rate = gemm_rate(n, p, t)
    print(f"GEMM ({p} x {n}) @ ({n} x {t}): {rate / 1e9:.1f} GFLOP/s")
    rows = []
    choices = {}

    ranks = [int(np.sum((gamma > 0)[labels])) for gamma in candidates]

    def record(name, cv, fn, *, products=True, shared=False):
        result, seconds, peak = timed(fn, args.repeats)
        share = (
            product_flops(cv, n, p, t, ranks, shared) / seconds / rate
            if products
            else float("nan")
        )
        rows.append((name, seconds, peak / 1e6, share))
        print(
            f"{name:28s} {seconds:8.2f} s  peak above data {peak / 1e6:8.1f} MB  "
            f"products at {share:6.1%} of the GEMM rate",
            flush=True,
        )
        return result

    for cv, name in ((None, "LOO"), (N_FOLDS, "cv=5"), ("gcv", "GCV")):
        scoring = "neg_mean_squared_error" if cv == N_FOLDS else None
        chosen, alpha, _ = record(
            f"hand loop BatchedRidge {name}",
            cv,
            lambda cv=cv, scoring=scoring: hand_loop(
                X, Y, labels, candidates, cv, scoring
            ),
        )
        with np.errstate(divide="ignore"):
            choices[f"loop {name}"] = alpha[:, None] / candidates[chosen]
        model = record(
            f"BandedRidge {name}",
            cv,
            lambda cv=cv, scoring=scoring: BandedRidge(
                labels,
                alphas=ALPHAS,
                band_weights=candidates,
                cv=cv,
                fit_intercept=False,
                scoring=scoring,
            ).fit(X, Y),
            shared=True,
        )
        choices[f"banded {name}"] = model.band_alphas_
        same = np.mean(
            np.all(np.isclose(model.band_alphas_, choices[f"loop {name}"]), axis=1)
        )
        print(f"  same choice as the hand loop: {same:.2%} of targets")
    if not args.no_himalaya:
        set_backend("numpy")

        def himalaya_fit():
            model = BandedRidgeCV(
                groups=labels,
                solver_params=dict(
                    n_iter=drawn,
                    alphas=ALPHAS,
                    progress_bar=False,
                    n_targets_batch=1000,
                    n_alphas_batch=ALPHAS.size,
                    n_targets_batch_refit=1000,
                ),
                cv=N_FOLDS,
            )
            return model.fit(X, Y)

        fitted = record("himalaya BandedRidgeCV cv=5", 5, himalaya_fit, products=False)
        with np.errstate(over="ignore"):
            choices["himalaya"] = np.exp(-np.asarray(fitted.deltas_)).T

        # A band alpha beyond 1e12 times its target's smallest is a band left
        # out (inf), as BandedRidge reads the weight.
        smallest = choices["himalaya"].min(axis=1, keepdims=True)
        himalaya = np.where(
            choices["himalaya"] > 1e12 * smallest, np.inf, choices["himalaya"]
        )
        same = np.mean(np.all(np.isclose(choices["banded cv=5"], himalaya), axis=1))
        print(f"  same choice as BandedRidge cv=5: {same:.2%} of targets")
    seconds = {name: s for name, s, _, _ in rows}
    print("\nratios")
    reference = seconds.get("himalaya BandedRidgeCV cv=5")
    for name in ("LOO", "cv=5", "GCV"):
        ours = seconds[f"BandedRidge {name}"]
        loop = seconds[f"hand loop BatchedRidge {name}"]
        line = f"  BandedRidge {name}: hand loop / ours {loop / ours:5.2f}x"
        if reference is not None:
            line += f", himalaya cv=5 / ours {reference / ours:7.1f}x"
        print(line)


if __name__ == "__main__":
    main()
