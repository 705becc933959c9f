"""Bootstrap benchmark: skbatch's batched linear path against naive loops.

Problem: Ridge(alpha=1), n=1000 samples, p=100 features, 1000 targets, 200
bootstrap replicates, 95% percentile intervals.

- skbatch: ``BootstrapEstimator(Ridge())`` on numpy float64 / float32 (with
  the default BLAS threads, and with one, like the naive loop's fastest
  setting) and on torch (CPU) float64 / float32;
- naive: a loop of ``Ridge().fit(X[idx], Y[idx])`` storing every replicate,
  then ``np.percentile``; once with the default BLAS threads and once with
  BLAS limited to one thread (threadpoolctl).

Then where the time of one fit goes (numpy, one BLAS thread, cProfile): the
kernel, the streaming accumulator, the draws; and the generic (joblib) path
with a non-linear regressor against a naive joblib loop, both with n_jobs=2.

Every measurement runs in its own subprocess, so that its peak RSS
(``ru_maxrss``) is its own; times are medians of repeats after a warm-up.

The rate of the dominant products, the count-weighted ``X' W Y`` of every
replicate (2 B (p + 1) n t flops), is compared with the GEMM rate of the same
library, dtype and threads, measured in the same run.

Then BCa against percentile intervals on the same problem with 1000
replicates: BCa with every replicate kept (they fit half the budget), and
with a ``max_memory_gb`` that forces the second pass over the replicates.

Run ``python benchmarks/bench_bootstrap.py`` (about 5 minutes) or with
``--quick`` (fewer replicates and repeats, under two minutes);
``--bca-only`` runs the BCa rows alone.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

# Replicates of the default-threads naive loop actually run; the time is
# scaled to the full count (each replicate costs the same).
NAIVE_TIMED_REPLICATES = 100
# GEMM size for the BLAS peak rate.
GEMM_SIZE = 2000
# BCa rows: replicates, and a budget under which the 808 MB of replicates
# (101,000 elements x 1000) exceed half of it, so that BCa runs two passes.
BCA_REPLICATES = 1000
BCA_TWO_PASS_BUDGET_GB = 1.2
# BCa targets: times over the percentile interval's, kept and two passes.
BCA_KEPT_RATIO = 1.5
BCA_TWO_PASS_RATIO = 2.2


def make_data(n_samples, n_features, n_targets, dtype, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n_samples, n_features))
    coef = rng.standard_normal((n_features, n_targets))
    Y = X @ coef + rng.standard_normal((n_samples, n_targets))
    return X.astype(dtype), Y.astype(dtype)


def current_rss_mb():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3


def timed(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


# Workers: each runs in a fresh process and prints one JSON line ---------------------


def blas_threads(threads):
    """threadpoolctl context: "default" leaves the BLAS threads as they are."""
    from threadpoolctl import threadpool_limits

    limits = None if threads == "default" else int(threads)
    return threadpool_limits(limits=limits, user_api="blas")


def worker_skbatch(config):
    from sklearn.linear_model import Ridge

    from skbatch import BootstrapEstimator

    if config["device"] == "torch":
        import array_api_compat.torch  # noqa: F401 (its import is not the fit's RSS)
    X, Y = make_data(config["n"], config["p"], config["t"], config["dtype"])
    baseline = current_rss_mb()

    def fit():
        BootstrapEstimator(
            Ridge(alpha=1.0),
            n_bootstrap=config["n_bootstrap"],
            random_state=0,
            device=config["device"],
        ).fit(X, Y)

    with blas_threads(config["threads"]):
        BootstrapEstimator(
            Ridge(alpha=1.0), n_bootstrap=20, random_state=0, device=config["device"]
        ).fit(X, Y)
        seconds = timed(fit, config["repeats"])
    return {"seconds": seconds, "peak_mb": peak_rss_mb(), "baseline_mb": baseline}


def worker_bca(config):
    """One BootstrapEstimator fit with the given ci_method and budget."""
    from sklearn.linear_model import Ridge

    from skbatch import BootstrapEstimator

    X, Y = make_data(config["n"], config["p"], config["t"], "float64")
    baseline = current_rss_mb()

    def make():
        return BootstrapEstimator(
            Ridge(alpha=1.0),
            n_bootstrap=config["n_bootstrap"],
            ci_method=config["ci_method"],
            max_memory_gb=config["max_memory_gb"],
            random_state=0,
            device="cpu",
        )

    fitted = []
    seconds = timed(lambda: fitted.append(make().fit(X, Y)), config["repeats"])
    passes = sum(stage.name == "replicates" for stage in fitted[-1].fit_report_.stages)
    return {
        "seconds": seconds,
        "peak_mb": peak_rss_mb(),
        "baseline_mb": baseline,
        "passes": passes,
    }


# Parts of a fit timed by ``worker_breakdown``.
BREAKDOWN = ("kernel", "accumulator", "draws")


def worker_breakdown(config):
    """Seconds of one fit in the kernel, the accumulator and the draws."""
    import cProfile
    import pstats

    from sklearn.linear_model import Ridge

    from skbatch import BootstrapEstimator
    from skbatch._kernels import linalg as _linalg
    from skbatch._ridge.problems import BootstrapRidgeProblem
    from skbatch.streaming import BootstrapAccumulator

    parts = {
        "kernel": [_linalg.weighted_primal_coef],
        "accumulator": [BootstrapAccumulator.update, BootstrapAccumulator.interval],
        "draws": [BootstrapRidgeProblem.weights],
    }
    X, Y = make_data(config["n"], config["p"], config["t"], config["dtype"])

    def fit():
        BootstrapEstimator(
            Ridge(alpha=1.0), n_bootstrap=config["n_bootstrap"], random_state=0
        ).fit(X, Y)

    def key(function):
        code = function.__code__
        return code.co_filename, code.co_firstlineno, code.co_name

    with blas_threads(1):
        fit()
        profiler = cProfile.Profile()
        start = time.perf_counter()
        profiler.runcall(fit)
        seconds = {"total": time.perf_counter() - start}
    stats = pstats.Stats(profiler).stats
    for label, functions in parts.items():
        # The fourth field of a pstats entry is the cumulative time.
        seconds[label] = sum(stats[key(f)][3] for f in functions if key(f) in stats)
    return seconds


def naive_loop(X, Y, n_bootstrap, seed=0):
    from sklearn.linear_model import Ridge

    rng = np.random.default_rng(seed)
    n_samples = X.shape[0]
    samples = np.empty((n_bootstrap, Y.shape[1], X.shape[1]))
    for k in range(n_bootstrap):
        rows = rng.integers(0, n_samples, n_samples)
        samples[k] = Ridge(alpha=1.0).fit(X[rows], Y[rows]).coef_
    lower, upper = np.percentile(samples, [2.5, 97.5], axis=0)
    return lower, upper, samples.std(axis=0, ddof=1)


def worker_naive(config):
    X, Y = make_data(config["n"], config["p"], config["t"], np.float64)
    baseline = current_rss_mb()
    with blas_threads(config["threads"]):
        naive_loop(X[:200], Y[:200], 3)
        seconds = timed(
            lambda: naive_loop(X, Y, config["n_bootstrap"]), config["repeats"]
        )
    return {"seconds": seconds, "peak_mb": peak_rss_mb(), "baseline_mb": baseline}


def worker_gemm(config):
    size = GEMM_SIZE
    if config["library"] == "torch":
        import torch

        dtype = getattr(torch, config["dtype"])
        A = torch.randn(size, size, dtype=dtype)
        product = lambda: A @ A  # noqa: E731
        config["threads"] = "default"
    else:
        A = np.random.default_rng(0).standard_normal((size, size))
        A = A.astype(config["dtype"])
        product = lambda: A @ A  # noqa: E731
    with blas_threads(config["threads"]):
        product()
        seconds = timed(product, 5)
    return {"gflops": 2 * size**3 / seconds / 1e9}


def fit_tree(X, y, seed):
    from sklearn.tree import DecisionTreeRegressor

    rows = np.random.default_rng(seed).integers(0, len(X), len(X))
    tree = DecisionTreeRegressor(random_state=0).fit(X[rows], y[rows])
    return tree.feature_importances_


def worker_generic(config):
    from joblib import Parallel, delayed
    from sklearn.tree import DecisionTreeRegressor

    from skbatch import BootstrapEstimator

    X, Y = make_data(config["n"], config["p"], 1, np.float64)
    y = Y[:, 0] + np.sin(3 * X[:, 0])
    n_bootstrap = config["n_bootstrap"]

    def skbatch_run():
        BootstrapEstimator(
            DecisionTreeRegressor(random_state=0),
            n_bootstrap=n_bootstrap,
            attributes="feature_importances_",
            random_state=0,
            n_jobs=2,
        ).fit(X, y)

    def naive_run():
        DecisionTreeRegressor(random_state=0).fit(X, y)
        samples = np.stack(
            Parallel(n_jobs=2)(
                delayed(fit_tree)(X, y, seed) for seed in range(n_bootstrap)
            )
        )
        np.percentile(samples, [2.5, 97.5], axis=0)
        samples.std(axis=0, ddof=1)

    run = skbatch_run if config["which"] == "skbatch" else naive_run
    run()  # starts the joblib workers
    return {"seconds": timed(run, config["repeats"]), "peak_mb": peak_rss_mb()}


WORKERS = {
    "skbatch": worker_skbatch,
    "naive": worker_naive,
    "gemm": worker_gemm,
    "generic": worker_generic,
    "breakdown": worker_breakdown,
    "bca": worker_bca,
}


def measure(kind, **config):
    """Run one worker in a fresh interpreter and return its JSON result."""
    payload = json.dumps({"kind": kind, **config})
    completed = subprocess.run(
        [sys.executable, __file__, "--worker", payload],
        capture_output=True,
        text=True,
        check=False,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"worker {payload} failed:\n{completed.stderr}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


# Report -------------------------------------------------------------------------------


def linear_flops(n, p, t, n_bootstrap):
    """Floating-point work of the batched path: both batch GEMMs and the solve."""
    q = p + 1  # the column of ones
    return n_bootstrap * (2.0 * n * q * (q + t) + 2.0 * p * p * t)


def dominant_flops(n, p, t, n_bootstrap):
    """The count-weighted X' W Y of every replicate, the ones column included."""
    return n_bootstrap * 2.0 * n * (p + 1) * t


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="fewer replicates and repeats"
    )
    parser.add_argument(
        "--bca-only", action="store_true", help="only the BCa against percentile rows"
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        config = json.loads(args.worker)
        print(json.dumps(WORKERS[config.pop("kind")](config)))
        return 0
    if args.bca_only:
        report_bca(args.quick)
        return 0

    n, p, t = 1000, 100, 1000
    n_bootstrap = 50 if args.quick else 200
    repeats = 1 if args.quick else 3
    naive_reps = NAIVE_TIMED_REPLICATES // (5 if args.quick else 1)
    scale = n_bootstrap / naive_reps
    problem = dict(n=n, p=p, t=t)
    print(
        f"Bootstrap of Ridge(alpha=1): n={n}, p={p}, {t} targets, "
        f"{n_bootstrap} replicates, 95% percentile intervals "
        f"(medians of {repeats} run(s); one subprocess per row; "
        f"{os.cpu_count()} CPUs)\n"
    )

    peaks = {}
    for dtype in ("float64", "float32"):
        for library, threads in (("numpy", "default"), ("numpy", 1), ("torch", None)):
            result = measure("gemm", library=library, dtype=dtype, threads=threads)
            peaks[(library, threads, dtype)] = result["gflops"]

    rows = []
    naive_default = measure(
        "naive", threads="default", n_bootstrap=naive_reps, repeats=1, **problem
    )
    naive_default["seconds"] *= scale
    naive_one = measure(
        "naive", threads=1, n_bootstrap=n_bootstrap, repeats=1, **problem
    )
    label = f"naive loop, default BLAS threads ({naive_reps} reps timed, x{scale:g})"
    rows.append((label, naive_default, None))
    rows.append((f"naive loop, one BLAS thread ({n_bootstrap} reps)", naive_one, None))
    naive_best = min(naive_default["seconds"], naive_one["seconds"])

    flops = linear_flops(n, p, t, n_bootstrap)
    dominant = dominant_flops(n, p, t, n_bootstrap)
    configs = [
        ("numpy", "cpu", "default", "skbatch numpy {}"),
        ("numpy", "cpu", 1, "skbatch numpy {}, one BLAS thread"),
        ("torch", "torch", None, "skbatch torch-cpu {}"),
    ]
    for library, device, threads, name in configs:
        for dtype in ("float64", "float32"):
            result = measure(
                "skbatch",
                device=device,
                dtype=dtype,
                threads="default" if threads is None else threads,
                n_bootstrap=n_bootstrap,
                repeats=repeats,
                **problem,
            )
            result["gflops"] = flops / result["seconds"] / 1e9
            result["dominant_gflops"] = dominant / result["seconds"] / 1e9
            result["peak_gemm"] = peaks[(library, threads, dtype)]
            rows.append((name.format(dtype), result, dtype))

    header = (
        f"{'method':<58} {'time s':>8} {'speedup':>8} {'peak RSS MB':>12} "
        f"{'+MB':>7} {'GFLOP/s':>8} {'XtWY GF/s':>10} {'BLAS GEMM':>10} "
        f"{'% GEMM':>7}"
    )
    print(header)
    print("-" * len(header))
    for label, result, _ in rows:
        rates = ("", "", "", "")
        if "gflops" in result:
            rates = (
                f"{result['gflops']:.0f}",
                f"{result['dominant_gflops']:.0f}",
                f"{result['peak_gemm']:.0f}",
                f"{100 * result['dominant_gflops'] / result['peak_gemm']:.0f}%",
            )
        print(
            f"{label:<58} {result['seconds']:>8.2f} "
            f"{naive_best / result['seconds']:>7.1f}x {result['peak_mb']:>12.0f} "
            f"{result['peak_mb'] - result['baseline_mb']:>7.0f} "
            f"{rates[0]:>8} {rates[1]:>10} {rates[2]:>10} {rates[3]:>7}"
        )
    print(
        "\nspeedup: against the faster naive loop. +MB: peak RSS above the RSS "
        "with the data loaded. GFLOP/s: the batched path's GEMM and solve work "
        "(B x 2n(p+1)(p+1+t) + B x 2p^2 t) over its time; XtWY GF/s: the "
        "dominant products alone (B x 2n(p+1)t) over the same time; BLAS GEMM: "
        f"a {GEMM_SIZE}^3 product, same library, dtype and threads."
    )
    naive_memory = naive_one["peak_mb"] - naive_one["baseline_mb"]
    naive_one_s = naive_one["seconds"]
    print("\nTargets (speedup against the one-thread naive loop)")
    for label, result, dtype in rows:
        if dtype is None:
            continue
        target = 5 if dtype == "float64" else 10
        speedup = naive_one_s / result["seconds"]
        share = result["dominant_gflops"] / result["peak_gemm"]
        memory = result["peak_mb"] - result["baseline_mb"]
        print(
            f"  {label:<36} speedup {speedup:5.1f}x (>= {target}x): "
            f"{'met' if speedup >= target else 'MISSED'}; X'WY at {100 * share:.0f}% "
            f"of GEMM (>= 60%): {'met' if share >= 0.6 else 'MISSED'}; memory "
            f"{memory:.0f} MB vs naive {naive_memory:.0f} MB"
        )

    print(
        "\nWhere the time of one fit goes, numpy on one BLAS thread (cProfile):"
        "\n  kernel: _linalg.weighted_primal_coef; accumulator: the streaming "
        "updates and intervals; draws: the bootstrap counts"
    )
    for dtype in ("float64", "float32"):
        parts = measure("breakdown", dtype=dtype, n_bootstrap=n_bootstrap, **problem)
        total = parts["total"]
        shares = ", ".join(
            f"{label} {parts[label]:.2f} s ({100 * parts[label] / total:.0f}%)"
            for label in BREAKDOWN
        )
        print(f"  {dtype}: {total:.2f} s: {shares}")

    generic = dict(n=2000, p=20, n_bootstrap=100 if args.quick else 400)
    ours = measure("generic", which="skbatch", repeats=repeats, **generic)
    naive = measure("generic", which="naive", repeats=repeats, **generic)
    ratio = ours["seconds"] / naive["seconds"]
    print(
        f"\nGeneric path: DecisionTreeRegressor, n={generic['n']}, p={generic['p']}, "
        f"{generic['n_bootstrap']} replicates, n_jobs=2 (loky)\n"
        f"  skbatch generic path      {ours['seconds']:6.2f} s\n"
        f"  naive joblib loop         {naive['seconds']:6.2f} s\n"
        f"  ratio {ratio:.2f} (target <= 1.2): {'met' if ratio <= 1.2 else 'MISSED'}"
    )
    report_bca(args.quick)
    return 0


def report_bca(quick):
    """BCa against percentile on the linear path, kept and in two passes."""
    problem = dict(n=1000, p=100, t=1000, n_bootstrap=BCA_REPLICATES)
    repeats = 1 if quick else 2
    print(
        f"\nBCa intervals: Ridge(alpha=1), n=1000, p=100, 1000 targets, "
        f"{BCA_REPLICATES} replicates, numpy float64 (medians of {repeats})"
    )
    runs = [
        ("percentile", "percentile", None),
        ("bca, replicates kept", "bca", None),
        (f"bca, max_memory_gb={BCA_TWO_PASS_BUDGET_GB}", "bca", BCA_TWO_PASS_BUDGET_GB),
    ]
    # Rounds of the three fits one after the other, each fit in its own
    # process, so that a load on a shared host weighs on all three alike;
    # medians over rounds.
    rounds = [
        [
            measure("bca", ci_method=method, max_memory_gb=budget, repeats=1, **problem)
            for _, method, budget in runs
        ]
        for _ in range(repeats)
    ]
    results = []
    for k, (label, _, _) in enumerate(runs):
        result = dict(rounds[0][k])
        result["seconds"] = float(np.median([r[k]["seconds"] for r in rounds]))
        results.append((label, result))
    base = results[0][1]["seconds"]
    for (label, result), target in zip(
        results, (None, BCA_KEPT_RATIO, BCA_TWO_PASS_RATIO)
    ):
        ratio = result["seconds"] / base
        verdict = ""
        if target is not None:
            verdict = f" (target <= {target}): {'met' if ratio <= target else 'MISSED'}"
        print(
            f"  {label:<30} {result['seconds']:7.2f} s  {result['passes']} pass(es)  "
            f"peak RSS +{result['peak_mb'] - result['baseline_mb']:6.0f} MB  "
            f"x{ratio:.2f}{verdict}"
        )


if __name__ == "__main__":
    sys.exit(main())
