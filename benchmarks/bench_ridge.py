"""BatchedRidge against sklearn RidgeCV and himalaya RidgeCV, side by side.

Two workloads, per-target alpha: "large", n=2000 samples, p=500 features,
20,000 targets, 20 alphas (np.logspace(-2, 6, 20)); "medium", n=1000,
p=300, 8,000 targets, 15 alphas (np.logspace(-2, 5, 15)), where the
passes around the GEMMs weigh more. Every configuration runs
in its own subprocess; its peak RSS is measured over the fit alone ("peak GB",
the whole process with its data; "above data", what the fit added to the
resident set it started from); each is repeated, in rounds over all
configurations, and the median time is reported, with the ratio to the
peer measured in the same run. The achieved GFLOP/s of the dominant loop
(one n x rank x targets GEMM per alpha and fold) is printed as a share of
the GEMM rate measured here for the library the configuration computes with
(numpy's OpenBLAS, torch's MKL). "LOO products alone f64" times only the
products an exact LOO fit computes (the SVD, U'Y, one product per alpha,
the refit), batched and threaded as skbatch does: the floor of an exact
LOO fit on this host, and sklearn's time over it the ratio none could beat.

    python benchmarks/bench_ridge.py            # both workloads, 3 repeats
    PYTHONPATH=. python benchmarks/bench_ridge.py   # a checkout's skbatch
    python benchmarks/bench_ridge.py --workloads medium --only \
        "sklearn RidgeCV LOO f64" "skbatch LOO f64"
    python benchmarks/bench_ridge.py --quick    # tiny, to check it runs
"""

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

CONFIGS = {
    "sklearn RidgeCV LOO f64": ("sklearn", {}),
    "himalaya RidgeCV cv=5 numpy f64": ("himalaya", {"backend": "numpy"}),
    "himalaya RidgeCV cv=5 torch f32": ("himalaya", {"backend": "torch"}),
    "skbatch LOO f64": ("skbatch", {"cv": None, "dtype": "float64"}),
    "skbatch LOO f32": ("skbatch", {"cv": None, "dtype": "float32"}),
    "skbatch LOO f32 torch": (
        "skbatch",
        {"cv": None, "dtype": "float32", "device": "torch"},
    ),
    "skbatch GCV f64": ("skbatch", {"cv": "gcv", "dtype": "float64"}),
    "skbatch cv=5 f64": ("skbatch", {"cv": 5, "dtype": "float64"}),
    "skbatch cv=5 f32 torch": (
        "skbatch",
        {"cv": 5, "dtype": "float32", "device": "torch"},
    ),
    "skbatch LOO f64 max_memory_gb=0.2": (
        "skbatch",
        {"cv": None, "dtype": "float64", "max_memory_gb": 0.2},
    ),
    # Not a peer: the products any exact LOO over the SVD computes (see
    # loo_products), nothing else, as skbatch batches and threads them.
    "LOO products alone f64": ("floor", {}),
}
# name: (n, p, targets, alphas), and the tiny sizes of --quick.
WORKLOADS = {
    "medium": (1000, 300, 8000, np.logspace(-2, 5, 15)),
    "large": (2000, 500, 20000, np.logspace(-2, 6, 20)),
}
QUICK = (200, 50, 500)
# (config, peer) pairs whose ratio is printed, with the target ratio of
# each workload that has one.
RATIOS = [
    ("skbatch LOO f64", "sklearn RidgeCV LOO f64", {"medium": 2.5, "large": 2.4}),
    ("skbatch LOO f32", "sklearn RidgeCV LOO f64", {"large": 4.0}),
    ("skbatch GCV f64", "sklearn RidgeCV LOO f64", {"large": 15.0}),
    ("skbatch cv=5 f64", "himalaya RidgeCV cv=5 numpy f64", {"large": 3.5}),
    ("skbatch cv=5 f32 torch", "himalaya RidgeCV cv=5 torch f32", {"large": 3.0}),
    # The ratio no exact LOO could beat in this run: sklearn's time over
    # that of the products alone.
    ("LOO products alone f64", "sklearn RidgeCV LOO f64", {}),
]


def make_data(n, p, t, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p))
    W = rng.standard_normal((p, t)) * rng.uniform(0, 0.1, size=t)
    return X, X @ W + rng.standard_normal((n, t))


def sizes(workload, quick):
    """(n, p, targets, alphas) of ``workload``."""
    n, p, t, alphas = WORKLOADS[workload]
    return (*QUICK, alphas) if quick else (n, p, t, alphas)


def run_one(name, workload, quick):
    """Run one configuration in this process; print time, RSS and alphas."""
    kind, params = CONFIGS[name]
    n, p, t, alphas = sizes(workload, quick)
    X, Y = make_data(n, p, t)
    if kind == "sklearn":
        from sklearn.linear_model import RidgeCV

        def fit():
            return RidgeCV(alphas=alphas, alpha_per_target=True).fit(X, Y).alpha_
    elif kind == "himalaya":
        from himalaya.backend import set_backend
        from himalaya.ridge import RidgeCV

        backend = set_backend(params["backend"])
        dtype = "float32" if params["backend"] == "torch" else "float64"

        def fit():
            model = RidgeCV(
                alphas=alphas, cv=5, solver_params={"n_targets_batch": 2000}
            ).fit(backend.asarray(X.astype(dtype)), backend.asarray(Y.astype(dtype)))
            return backend.to_numpy(model.best_alphas_)
    elif kind == "floor":
        import scipy.linalg  # noqa: F401
        from threadpoolctl import ThreadpoolController

        # Libraries found before the clock starts: only products are timed.
        threadpools = ThreadpoolController()

        def fit():
            loo_products(X, Y, alphas, threadpools)
            return []
    else:
        from skbatch import BatchedRidge

        if params.get("device") == "torch":
            # Imported before the clock starts, as the peers' set_backend does.
            import torch  # noqa: F401

        def fit():
            return BatchedRidge(alphas=alphas, **params).fit(X, Y).alpha_

    # The peak of the fit alone: Linux resets the process's peak RSS on
    # request, so the data set-up's temporaries do not count.
    resettable = reset_peak_rss()
    base_rss = proc_status_bytes("VmRSS") if resettable else 0
    start = time.perf_counter()
    chosen = fit()
    elapsed = time.perf_counter() - start
    if resettable:
        peak = proc_status_bytes("VmHWM")
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(
        json.dumps(
            {
                "time": elapsed,
                "peak_gb": peak / 1e9,
                "work_gb": (peak - base_rss) / 1e9,
                "alphas": np.asarray(chosen, dtype=float).tolist(),
            }
        )
    )


def loo_products(X, Y, alphas, threadpools, max_batch=2048):
    """The products of an exact LOO fit over the SVD, and only those.

    The thin SVD of the centred X (one BLAS thread), then, per batch of
    targets, U'Y, one n x rank x batch product per alpha (the fitted values
    the LOO residuals come from) and the refit V diag(.) U'Y: batches of
    equal size up to ``max_batch``, one per BLAS thread, each on one,
    as ``skbatch`` runs them. Scores, residual passes, centring of Y and
    checks are left out, so its time bounds any implementation's from below.
    ``threadpools`` is a ``threadpoolctl.ThreadpoolController``.
    """
    import scipy.linalg

    blas = threadpools.select(user_api="blas")
    n_threads = max(pool["num_threads"] for pool in blas.info())
    with blas.limit(limits=1):
        U, s, Vt = scipy.linalg.svd(X - X.mean(axis=0), full_matrices=False)
        kept = s**2 / (s**2 + alphas[:, None])
        filtered = s / (s**2 + alphas[0])
        n_batches = -(-Y.shape[1] // max_batch)
        batches = np.array_split(np.arange(Y.shape[1]), n_batches)

        def batch(columns):
            UtY = U.T @ Y[:, columns[0] : columns[-1] + 1]
            fitted = np.empty((U.shape[0], UtY.shape[1]))
            for factors in kept:
                np.matmul(U * factors, UtY, out=fitted)
            return Vt.T @ (filtered[:, None] * UtY)

        with ThreadPoolExecutor(n_threads) as pool:
            list(pool.map(batch, batches))


def reset_peak_rss():
    """Reset VmHWM (Linux >= 4.0); False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


def proc_status_bytes(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def gemm_rate(dtype, library="numpy", size=2000, repeats=3):
    """GFLOP/s of a size^3 GEMM in numpy (OpenBLAS) or torch (MKL)."""
    a = np.random.default_rng(0).standard_normal((size, size)).astype(dtype)
    if library == "torch":
        import torch

        a = torch.from_numpy(a)
    a @ a
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        a @ a
        times.append(time.perf_counter() - start)
    return 2 * size**3 / min(times) / 1e9


def library_of(name):
    return "torch" if "torch" in name else "numpy"


def run_subprocess(name, workload, quick):
    command = [sys.executable, __file__, "--one", name, "--workload", workload]
    out = subprocess.run(
        command + (["--quick"] if quick else []),
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(names, workload, quick, repeats):
    """Median time and peak memory of each configuration, one process per run.

    Runs go in rounds (every configuration once, then again) rather than one
    configuration's repeats in a row, so that a slow spell of a shared host
    hits ours and the peer alike.
    """
    runs = {name: [] for name in names}
    for _ in range(repeats):
        for name in names:
            runs[name].append(run_subprocess(name, workload, quick))
    return {
        name: {
            "time": statistics.median(r["time"] for r in results),
            "peak_gb": max(r["peak_gb"] for r in results),
            "work_gb": max(r["work_gb"] for r in results),
            "alphas": np.asarray(results[0]["alphas"]),
        }
        for name, results in runs.items()
    }


def print_table(workload, results, rates, quick):
    n, p, t, alphas = sizes(workload, quick)
    reference = results.get("sklearn RidgeCV LOO f64")
    print(
        f"\n{workload}: n={n}, p={p}, targets={t}, {alphas.size} alphas\n"
        f"GFLOP/s: {alphas.size} alphas x 2*n*rank*targets flops of the dominant "
        "loop / time\n"
        f"{'configuration':<36}{'time s':>8}{'peak GB':>9}{'above data':>11}"
        f"{'GFLOP/s':>9}{'% GEMM':>8}{'alpha = sklearn':>16}"
    )
    for name, res in results.items():
        kind, params = CONFIGS[name]
        # The dominant loop: one n x rank x targets GEMM per alpha (for
        # K-fold, the test rows of all folds add up to n). Peers doing more
        # work show the rate they would need to match.
        flops = alphas.size * 2 * n * min(n, p) * t
        gflops = flops / res["time"] / 1e9
        dtype = np.float32 if "f32" in name else np.float64
        rate = rates[library_of(name), dtype]
        same = (
            f"{np.mean(res['alphas'] == reference['alphas']):.2%}"
            if reference is not None
            and params.get("cv") is None
            and kind not in ("himalaya", "floor")
            else ""
        )
        dominant = params.get("cv") != "gcv"
        print(
            f"{name:<36}{res['time']:>8.2f}{res['peak_gb']:>9.2f}"
            f"{res['work_gb']:>11.2f}"
            f"{gflops if dominant else float('nan'):>9.0f}"
            f"{100 * gflops / rate if dominant else float('nan'):>7.0f}%"
            f"{same:>16}"
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, 1 repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", nargs="*", help="subset of configuration names")
    parser.add_argument(
        "--workloads", nargs="*", choices=list(WORKLOADS), default=list(WORKLOADS)
    )
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--workload", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        run_one(args.one, args.workload, args.quick)
        return
    repeats = 1 if args.quick else args.repeats
    names = args.only or list(CONFIGS)
    print(f"median of {repeats} run(s), each in its own process")
    rates = {
        (library, dtype): gemm_rate(dtype, library)
        for library in ("numpy", "torch")
        for dtype in (np.float64, np.float32)
    }
    for library in ("numpy", "torch"):
        print(
            f"{library} GEMM 2000^3: f64 {rates[library, np.float64]:.0f} GFLOP/s, "
            f"f32 {rates[library, np.float32]:.0f} GFLOP/s"
        )
    results = {}
    for workload in args.workloads:
        results[workload] = measure(names, workload, args.quick, repeats)
        print_table(workload, results[workload], rates, args.quick)
    print(f"\n{'ratio':<60}" + "".join(f"{w:>9}" for w in args.workloads))
    for ours, peer, targets in RATIOS:
        if ours not in names or peer not in names:
            continue
        cells = []
        for w in args.workloads:
            ratio = results[w][peer]["time"] / results[w][ours]["time"]
            cell = f"{ratio:.1f}x"
            if w in targets:
                verdict = "ok" if ratio >= targets[w] else "BELOW"
                cell += f" (target {targets[w]}x {verdict})"
            cells.append(f"{cell:>9}")
        print(f"{ours + ' vs ' + peer:<60}" + "  ".join(cells))


if __name__ == "__main__":
    main()
