"""PermutationScorer against sklearn's permutation_test_score, side by side.

Two workloads, each configuration in its own subprocess (so its peak RSS is
its own), repeated in rounds; the median time is reported with the ratio to
the peer measured in the same run. "est. full s" scales a run on fewer
permutations to the full count.

1. Ridge(alpha=1), n=500, p=50, one target, cv=5, 1000 permutations:
   skbatch (numpy, torch CPU) against permutation_test_score with n_jobs=1
   and n_jobs=2. Targets: 100x and 50x.
2. BatchedRidge (exact LOO, alpha chosen per permuted target inside every
   fold, alphas 0.1, 1, 10), n=500, p=100, 2,000 targets, 1000
   permutations, multioutput="raw_values": time and peak RSS. The sklearn
   equivalent, permutation_test_score of RidgeCV(alpha_per_target=True) on
   the 2,000 targets, is timed for 10 permutations and scaled by 100.
3. Small tests, where fixed costs show: Ridge(alpha=1), n=40, p=3, one
   target, cv=5, with 1, 100 and 10,000 permutations against
   permutation_test_score (its 10,000 estimated from 1000). Beside them,
   what 10,000 permutations cannot go below: 10,000 draws of
   ``rng.permutation(40)`` in a loop, and one batched solve of all 10,000
   permuted columns through the ridge fast path (indices drawn before the
   clock); and the fit with its indices drawn before the clock, which is
   the fit without its draws (skbatch.random's share).

    python benchmarks/bench_permutation.py            # full, 3 repeats each
    python benchmarks/bench_permutation.py --repeats-large 1   # large once
    python benchmarks/bench_permutation.py --only "tiny skbatch 10000" \
        "tiny draws 10000" "tiny solve 10000" "tiny precomputed 10000"
    python benchmarks/bench_permutation.py --quick    # tiny, to check it runs
"""

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

ALPHAS = (0.1, 1.0, 10.0)
# name: (workload, kind, device or n_jobs)
CONFIGS = {
    "skbatch numpy": ("small", "skbatch", "cpu"),
    "skbatch torch-cpu": ("small", "skbatch", "torch"),
    "sklearn n_jobs=1": ("small", "sklearn", 1),
    "sklearn n_jobs=2": ("small", "sklearn", 2),
    "skbatch BatchedRidge numpy": ("large", "skbatch", "cpu"),
    "skbatch BatchedRidge torch-cpu": ("large", "skbatch", "torch"),
    "sklearn RidgeCV (10 perms)": ("large", "sklearn", 1),
}
# The small tests: (kind, permutations); kinds as in run_tiny.
TINY = {
    "tiny skbatch 1": ("skbatch", 1),
    "tiny sklearn 1": ("sklearn", 1),
    "tiny skbatch 100": ("skbatch", 100),
    "tiny sklearn 100": ("sklearn", 100),
    "tiny skbatch 10000": ("skbatch", 10_000),
    "tiny sklearn 10000 (1000 perms)": ("sklearn", 1000),
    "tiny draws 10000": ("draws", 10_000),
    "tiny solve 10000": ("solve", 10_000),
    "tiny precomputed 10000": ("precomputed", 10_000),
}
CONFIGS.update({name: ("tiny", kind, b) for name, (kind, b) in TINY.items()})
# (ours, peer) pairs of the small tests; a peer on fewer permutations is
# scaled to ours.
TINY_RATIOS = [
    ("tiny skbatch 1", "tiny sklearn 1"),
    ("tiny skbatch 100", "tiny sklearn 100"),
    ("tiny skbatch 10000", "tiny sklearn 10000 (1000 perms)"),
]
# A small test should take at most this many times its floor: the draws
# plus one batched solve.
TINY_TARGET = 2.0
# (ours, peer, target ratio); a peer timed on fewer permutations is scaled.
RATIOS = [
    ("skbatch numpy", "sklearn n_jobs=1", 100.0),
    ("skbatch numpy", "sklearn n_jobs=2", 50.0),
    ("skbatch torch-cpu", "sklearn n_jobs=1", 100.0),
    ("skbatch torch-cpu", "sklearn n_jobs=2", 50.0),
    ("skbatch BatchedRidge numpy", "sklearn RidgeCV (10 perms)", None),
    ("skbatch BatchedRidge torch-cpu", "sklearn RidgeCV (10 perms)", None),
]
# Permutations of the sklearn RidgeCV estimate; its time is scaled up to the
# full count.
ESTIMATE_PERMUTATIONS = 10


def sizes(quick):
    """(n, p, targets, permutations) of each workload."""
    if quick:
        return {
            "small": (100, 10, 1, 50),
            "large": (100, 20, 50, 20),
            "tiny": (40, 3, 1, 200),
        }
    return {
        "small": (500, 50, 1, 1000),
        "large": (500, 100, 2000, 1000),
        "tiny": (40, 3, 1, 10_000),
    }


def make_data(n, p, t, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p))
    W = rng.standard_normal((p, t)) * rng.uniform(0, 0.1, size=t)
    Y = X @ W + rng.standard_normal((n, t))
    return X, Y[:, 0] if t == 1 else Y


def run_tiny(name, quick):
    """One small test, or one of its floors; returns (seconds, mean p-value).

    Kinds: "skbatch" and "sklearn" fit; "draws" loops over
    ``rng.permutation``; "solve" scores all permuted columns in one call of
    the ridge fast path; "precomputed" fits with the indices drawn before
    the clock (the same indices: ``permutation_indices`` replaced by a
    lookup).
    """
    from sklearn.linear_model import Ridge
    from sklearn.model_selection import KFold, permutation_test_score

    import skbatch._permutation.paths
    import skbatch._permutation.plan
    import skbatch._ridge.problems
    from skbatch import PermutationScorer, resolve_backend
    from skbatch.random import permutation_indices, resolve_entropy

    _, kind, n_permutations = CONFIGS[name]
    n, p, _, most = sizes(quick)["tiny"]
    n_permutations = min(n_permutations, most)
    X, y = make_data(n, p, 1)
    scorer = PermutationScorer(Ridge(alpha=1.0), cv=5, random_state=0)
    indices = permutation_indices(resolve_entropy(0), np.arange(n_permutations), n)
    if kind == "sklearn":

        def run(b=n_permutations):
            return permutation_test_score(
                Ridge(alpha=1.0), X, y, cv=5, n_permutations=b, random_state=0
            )[2]
    elif kind == "skbatch" or kind == "precomputed":
        if kind == "precomputed":
            # Every call, the fit's own check included, looks its rows up.
            def lookup(_, ids, *args, **kwargs):
                return indices[np.asarray(ids)]

            skbatch._permutation.paths.signed_rows = lookup
            skbatch._permutation.plan.signed_rows = lookup
            skbatch._ridge.problems.permuted.signed_rows = lookup

        def run(b=n_permutations):
            return scorer.set_params(n_permutations=b).fit(X, y).pvalue_
    elif kind == "draws":

        def run(b=n_permutations):
            rng = np.random.default_rng(0)
            return [rng.permutation(n) for _ in range(b)]
    else:
        from skbatch._ridge import PermutedRidgeProblem, cv_scheme, ridge_spec

        backend = resolve_backend("cpu")
        spec = ridge_spec(Ridge(alpha=1.0))
        problem = PermutedRidgeProblem(
            X,
            y.reshape(n, 1),
            list(KFold(5).split(X)),
            spec,
            lambda X_train, Y_train, train: cv_scheme(spec.cv).split(X_train, Y_train),
            backend,
            np.float64,
            None,
            n_permutations=n_permutations,
            permutation={},
        )

        def run(b=n_permutations):
            return problem.scores(indices[:b])

    # Warm-up: imports, first calls.
    run(2)
    start = time.perf_counter()
    pvalue = run()
    elapsed = time.perf_counter() - start
    pvalue = pvalue if kind in ("skbatch", "sklearn", "precomputed") else np.nan
    return elapsed, n_permutations, float(np.mean(pvalue))


def run_one(name, quick):
    """Run one configuration in this process; print time, RSS and p-values."""
    workload, kind, option = CONFIGS[name]
    if workload == "tiny":
        elapsed, n_permutations, pvalue = run_tiny(name, quick)
        print(
            json.dumps(
                {
                    "time": elapsed,
                    "permutations": n_permutations,
                    "peak_gb": 0.0,
                    "work_gb": 0.0,
                    "pvalue": pvalue,
                }
            )
        )
        return
    n, p, t, n_permutations = sizes(quick)[workload]
    X, y = make_data(n, p, t)
    from sklearn.linear_model import Ridge, RidgeCV

    if kind == "sklearn":
        from sklearn.model_selection import permutation_test_score

        if workload == "small":
            estimator = Ridge(alpha=1.0)
        else:
            estimator = RidgeCV(alphas=ALPHAS, alpha_per_target=True)
            n_permutations = min(n_permutations, ESTIMATE_PERMUTATIONS)

        def fit(n_permutations=n_permutations):
            return permutation_test_score(
                estimator,
                X,
                y,
                cv=5,
                n_permutations=n_permutations,
                n_jobs=option,
                random_state=0,
            )[2]

        # Warm-up: imports, BLAS threads, and the joblib workers, reused after.
        fit(n_permutations=2)
    else:
        from skbatch import BatchedRidge, PermutationScorer

        if workload == "small":
            scorer = PermutationScorer(Ridge(alpha=1.0), multioutput="uniform_average")
        else:
            scorer = PermutationScorer(
                BatchedRidge(alphas=ALPHAS), multioutput="raw_values"
            )
        scorer.set_params(
            n_permutations=n_permutations, cv=5, random_state=0, device=option
        )
        # Warm-up on a few permutations: imports, BLAS threads, torch kernels.
        scorer.set_params(n_permutations=2).fit(X, y)
        scorer.set_params(n_permutations=n_permutations)

        def fit():
            return scorer.fit(X, y).pvalue_

    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    start = time.perf_counter()
    pvalue = fit()
    elapsed = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(
        json.dumps(
            {
                "time": elapsed,
                "permutations": n_permutations,
                "peak_gb": peak / 1e9,
                "work_gb": (peak - base_rss) / 1e9,
                "pvalue": float(np.mean(pvalue)),
            }
        )
    )


def run_subprocess(name, quick):
    out = subprocess.run(
        [sys.executable, __file__, "--one", name] + (["--quick"] if quick else []),
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(names, quick, repeats):
    """Median of each configuration's runs, taken in rounds over all of them.

    Rounds (every configuration once, then again) rather than one
    configuration's repeats in a row, so that a slow spell of a shared host
    hits ours and the peer alike.
    """
    runs = {name: [] for name in names}
    for round_ in range(max(repeats[CONFIGS[name][0]] for name in names)):
        for name in names:
            if round_ < repeats[CONFIGS[name][0]]:
                print(f"  round {round_ + 1}: {name}", file=sys.stderr, flush=True)
                runs[name].append(run_subprocess(name, quick))
    return {
        name: {
            "time": statistics.median(r["time"] for r in results),
            "permutations": results[0]["permutations"],
            "peak_gb": max(r["peak_gb"] for r in results),
            "work_gb": max(r["work_gb"] for r in results),
            "pvalue": results[0]["pvalue"],
        }
        for name, results in runs.items()
    }


def print_row(name, res, quick):
    full = sizes(quick)[CONFIGS[name][0]][3]
    estimate = res["time"] * full / res["permutations"]
    print(
        f"{name:<34}{res['permutations']:>6}{res['time']:>9.3f}{estimate:>12.2f}"
        f"{res['peak_gb']:>9.2f}{res['work_gb']:>11.2f}{res['pvalue']:>8.3f}"
    )


def print_tiny(results):
    """The small tests: times in ms, ratios to sklearn, and to their floor."""
    if not results:
        return
    print(f"\n{'small test (n=40, p=3)':<34}{'perms':>6}{'time ms':>9}{'mean p':>8}")
    for name, res in results.items():
        print(
            f"{name:<34}{res['permutations']:>6}{1e3 * res['time']:>9.2f}"
            f"{res['pvalue']:>8.3f}"
        )
    for ours, peer in TINY_RATIOS:
        if ours in results and peer in results:
            scale = results[ours]["permutations"] / results[peer]["permutations"]
            ratio = results[peer]["time"] * scale / results[ours]["time"]
            print(f"{ours} vs {peer}: {ratio:.1f}x faster")
    floor = [results.get(f"tiny {kind} 10000") for kind in ("draws", "solve")]
    if None in floor:
        return
    floor = sum(res["time"] for res in floor)
    for name in ("tiny skbatch 10000", "tiny precomputed 10000"):
        if name in results:
            ratio = results[name]["time"] / floor
            verdict = "ok" if ratio <= TINY_TARGET else "ABOVE TARGET"
            print(
                f"{name} vs draws + one batched solve ({1e3 * floor:.1f} ms): "
                f"{ratio:.2f}x (target <= {TINY_TARGET:.0f}x) {verdict}"
            )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, 1 repeat")
    parser.add_argument(
        "--repeats", type=int, default=3, help="runs of each small configuration"
    )
    parser.add_argument(
        "--repeats-large", type=int, default=3, help="runs of each large one"
    )
    parser.add_argument(
        "--repeats-tiny", type=int, default=5, help="runs of each small test"
    )
    parser.add_argument("--only", nargs="*", help="subset of configuration names")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        run_one(args.one, args.quick)
        return
    repeats = {
        "small": 1 if args.quick else args.repeats,
        "large": 1 if args.quick else args.repeats_large,
        "tiny": 1 if args.quick else args.repeats_tiny,
    }
    names = args.only or list(CONFIGS)
    for workload, (n, p, t, b) in sizes(args.quick).items():
        print(
            f"{workload}: n={n}, p={p}, targets={t}, cv=5, {b} permutations; "
            f"median of {repeats[workload]} run(s), each in its own process"
        )
    results = measure(names, args.quick, repeats)
    print(
        f"\n{'configuration':<34}{'perms':>6}{'time s':>9}{'est. full s':>12}"
        f"{'peak GB':>9}{'above data':>11}{'mean p':>8}"
    )
    for name in names:
        if CONFIGS[name][0] != "tiny":
            print_row(name, results[name], args.quick)
    print_tiny({n: r for n, r in results.items() if CONFIGS[n][0] == "tiny"})
    print()
    for ours, peer, target in RATIOS:
        if ours not in results or peer not in results:
            continue
        full = sizes(args.quick)[CONFIGS[peer][0]][3]
        peer_time = results[peer]["time"] * full / results[peer]["permutations"]
        ratio = peer_time / results[ours]["time"]
        verdict = ""
        if target is not None:
            verdict = f" (target {target:.0f}x) " + (
                "ok" if ratio >= target else "BELOW TARGET"
            )
        print(f"{ours} vs {peer}: {ratio:.1f}x faster{verdict}")


if __name__ == "__main__":
    main()
