"""Permutations and run bootstraps of a TRF on the covariance against the SVD.

Workload: the EEG shape of ``bench_trf.py`` (8 trials of ``--seconds`` s at
128 Hz, 17 stimulus features x 65 lags = 1,105 columns, 64 channels, 9
alphas), ``BatchedRidge(cv=LeaveOneGroupOut(), scoring="correlation")``:

- ``PermutationScorer`` (leave one trial out, held-out correlation per
  channel, circular shifts of the EEG within each trial, as the TRF gallery
  example tests its channels), ``--permutations`` permutations:
  ``solver="auto"`` (the covariance: one ``eigh`` per outer and inner
  training fold, the permutations' cross-moments per trial) against
  ``solver="svd"`` (one SVD per outer and inner training fold);
- ``BootstrapEstimator`` (whole trials drawn with replacement,
  ``groups=trials``), ``--bootstraps`` replicates at the alphas chosen on
  all data: each replicate's X'WX summed from the trials' own against
  formed from its rows (the path before, forced here by disabling
  ``BootstrapRidgeProblem.moment_runs``).

Each fit runs in a fresh process; printed per variant: seconds (median of
``--repeats``, alternating the variants), the rise of the peak resident
memory over the process's memory before the fit (sampled every 5 ms, and
the OS's peak), the engine's planned peak (largest over the fit's stages),
and whether the results equal the first variant's (p-values; interval
bounds to 1e-8 relative).

Run: ``python benchmarks/bench_covariance_resampling.py [--seconds 10]
[--permutations 10] [--bootstraps 50] [--repeats 3] [--what perm boot]``
"""

import argparse
import gc
import json
import pathlib
import resource
import subprocess
import sys
import threading
import time
import warnings

import numpy as np
import psutil

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from bench_trf import ALPHAS, delayed, make_data  # noqa: E402

SAMPLE_SECONDS = 0.005
VARIANTS = {
    "perm": ("covariance", "svd"),
    "boot": ("runs", "rows"),
}


def run(what, variant, seconds, n_items):
    """One fit in this process: seconds, memory rise, planned peak, result."""
    from sklearn.model_selection import LeaveOneGroupOut

    from skbatch import BatchedRidge, BootstrapEstimator, PermutationScorer
    from skbatch._ridge.problems import BootstrapRidgeProblem

    warnings.filterwarnings("ignore")
    stimulus, response, groups, _ = make_data(seconds)
    X = delayed(stimulus, groups)
    ridge = BatchedRidge(
        ALPHAS,
        cv=LeaveOneGroupOut(),
        scoring="correlation",
        solver="svd" if variant == "svd" else "auto",
    )
    if variant == "rows":
        BootstrapRidgeProblem.moment_runs = staticmethod(lambda *args: None)

    def fit():
        if what == "perm":
            model = PermutationScorer(
                ridge,
                n_permutations=n_items,
                scoring="correlation",
                cv=LeaveOneGroupOut(),
                multioutput="raw_values",
                permutation_type="circular_shift",
                random_state=0,
            ).fit(X, response, groups=groups)
            return model, model.pvalue_.tolist()
        model = BootstrapEstimator(ridge, n_bootstrap=n_items, random_state=0)
        model.fit(X, response, groups=groups)
        bounds = model.results_["coef_"]
        return model, [
            bounds.ci_lower.ravel().tolist(),
            bounds.ci_upper.ravel().tolist(),
        ]

    gc.collect()
    process = psutil.Process()
    before = process.memory_info().rss
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    peak = [before]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], process.memory_info().rss)
            time.sleep(SAMPLE_SECONDS)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.perf_counter()
    model, result = fit()
    elapsed = time.perf_counter() - start
    done.set()
    sampler.join()
    peak_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    top = peak[0]
    if peak_after > peak_before:
        top = max(top, peak_after)
    planned = max(stage.planned_peak_bytes for stage in model.fit_report_.stages)
    return dict(seconds=elapsed, rise=top - before, planned=planned, result=result)


def measure(what, variant, seconds, n_items):
    """Run one fit in a fresh process; its JSON result."""
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--worker",
            f"{what}:{variant}",
            "--seconds",
            str(seconds),
            "--items",
            str(n_items),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def same(a, b, what):
    if what == "perm":
        return a == b
    return all(np.allclose(x, y, rtol=1e-8, atol=1e-12) for x, y in zip(a, b))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--permutations", type=int, default=10)
    parser.add_argument("--bootstraps", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--what", nargs="+", default=["perm", "boot"], choices=VARIANTS)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--items", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        what, variant = args.worker.split(":")
        print(json.dumps(run(what, variant, args.seconds, args.items)))
        return
    rows = int(args.seconds * 128) * 8
    for what in args.what:
        n_items = args.permutations if what == "perm" else args.bootstraps
        name = "permutations" if what == "perm" else "run-bootstrap replicates"
        print(
            f"\n{name}: {n_items}, 8 trials of {args.seconds:g} s ({rows:,} rows), "
            f"1,105 columns, 64 channels, 9 alphas, leave one trial out",
            flush=True,
        )
        results = {variant: [] for variant in VARIANTS[what]}
        for _ in range(args.repeats):
            for variant in VARIANTS[what]:
                result = measure(what, variant, args.seconds, n_items)
                results[variant].append(result)
                print(
                    f"  {variant}: {result['seconds']:.1f} s, rise "
                    f"{result['rise'] / 1e6:.0f} MB",
                    flush=True,
                )
        first = next(iter(results.values()))
        ref_seconds = np.median([r["seconds"] for r in first])
        ref_rise = np.median([r["rise"] for r in first])
        for variant, runs in results.items():
            seconds = np.median([r["seconds"] for r in runs])
            rise = np.median([r["rise"] for r in runs])
            each = ", ".join(f"{r['seconds']:.1f}" for r in runs)
            equal = all(same(r["result"], first[0]["result"], what) for r in runs)
            print(
                f"{variant:10s} {seconds:7.1f} s ({each}), "
                f"{seconds / ref_seconds:5.2f}x; memory rise {rise / 1e6:6.0f} MB "
                f"({rise / ref_rise:4.2f}x), planned peak "
                f"{runs[0]['planned'] / 1e9:5.2f} GB; results equal: {equal}",
                flush=True,
            )


if __name__ == "__main__":
    main()
