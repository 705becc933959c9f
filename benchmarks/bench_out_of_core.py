"""BatchedRidge on targets read from disk against the same fit in memory.

n=2,000 samples, p=500 features, 200,000 float32 targets (1.6 GB) written
to a memmap on disk, exact leave-one-out with per-target alpha over 20
alphas (np.logspace(-2, 6, 20)), float32. "memmap" fits ``y`` as the memmap
with ``max_memory_gb=1``, reading one batch of targets at a time; "in
memory" fits the same values loaded before the clock starts. Every run is
its own subprocess, whose peak RSS is measured over the fit alone ("peak
GB", the whole process; "above start", what the fit added to the resident
set it started from, which for "in memory" already holds the 1.6 GB of
targets). Runs go in rounds, and the median time and the ratio to the
in-memory fit of the same run are printed (target: within 1.3x).

The file is read from the page cache when the host has room for it (it was
just written); a cold read adds the disk's time to the memmap fit.

    python benchmarks/bench_out_of_core.py            # 3 repeats
    PYTHONPATH=. python benchmarks/bench_out_of_core.py   # a checkout's skbatch
    python benchmarks/bench_out_of_core.py --quick    # tiny, to check it runs
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

# Run as a script: benchmarks/ is on sys.path, and bench_ridge.py measures
# the resident set the same way.
from bench_ridge import proc_status_bytes, reset_peak_rss

SIZES = (2000, 500, 200_000)
QUICK = (200, 20, 5_000)
ALPHAS = np.logspace(-2, 6, 20)
MAX_MEMORY_GB = 1.0
# Columns written per block when the targets are made, so that making them
# needs no more memory than a fit.
WRITE_BLOCK = 10_000
CONFIGS = ("in memory", "memmap")
TARGET_RATIO = 1.3


def design(n, p):
    return np.random.default_rng(0).standard_normal((n, p)).astype(np.float32)


def write_targets(path, n, p, t):
    """Targets of a known model plus noise, written one block of columns at a time."""
    X = design(n, p)
    rng = np.random.default_rng(1)
    Y = np.memmap(path, dtype=np.float32, mode="w+", shape=(n, t))
    for start in range(0, t, WRITE_BLOCK):
        stop = min(start + WRITE_BLOCK, t)
        W = rng.standard_normal((p, stop - start), dtype=np.float32)
        noise = rng.standard_normal((n, stop - start), dtype=np.float32)
        Y[:, start:stop] = X @ W + 20 * noise
    Y.flush()


def one(name, path, n, p, t):
    """One fit in this process: its time and peak memory, as JSON on stdout."""
    from skbatch import BatchedRidge

    X = design(n, p)
    Y = np.memmap(path, dtype=np.float32, mode="r", shape=(n, t))
    params = {"alphas": ALPHAS}
    if name == "in memory":
        Y = np.array(Y)
    else:
        params["max_memory_gb"] = MAX_MEMORY_GB
    # Imports and the first calls of the libraries, before the clock.
    BatchedRidge(alphas=ALPHAS).fit(X[:, :10], np.asarray(Y[:, :10]))
    resettable = reset_peak_rss()
    start_rss = proc_status_bytes("VmRSS") if resettable else 0
    start = time.perf_counter()
    model = BatchedRidge(**params).fit(X, Y)
    elapsed = time.perf_counter() - start
    peak = proc_status_bytes("VmHWM") if resettable else float("nan")
    print(
        json.dumps(
            {
                "time": elapsed,
                "peak_gb": peak / 1e9,
                "above_start_gb": (peak - start_rss) / 1e9,
                "batches": [
                    [stage.batch_size, stage.n_batches]
                    for stage in model.fit_report_.stages
                ],
                "alpha_checksum": float(np.sum(np.log(model.alpha_))),
            }
        )
    )


def run_subprocess(name, path, sizes):
    command = [sys.executable, __file__, "--one", name, "--path", str(path)]
    command += ["--sizes", *map(str, sizes)]
    out = subprocess.run(command, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--one", choices=CONFIGS)
    parser.add_argument("--path")
    parser.add_argument("--sizes", type=int, nargs=3)
    args = parser.parse_args()
    if args.one:
        one(args.one, args.path, *args.sizes)
        return
    sizes = QUICK if args.quick else SIZES
    n, p, t = sizes
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "targets.dat"
        write_targets(path, n, p, t)
        print(
            f"n={n}, p={p}, {t:,} float32 targets ({n * t * 4 / 1e9:.2f} GB on "
            f"disk), LOO, {ALPHAS.size} alphas, memmap fit with "
            f"max_memory_gb={MAX_MEMORY_GB}; median of {args.repeats}"
        )
        runs = {name: [] for name in CONFIGS}
        # Rounds over both configurations, so that a slow spell of a shared
        # host hits both alike.
        for _ in range(args.repeats):
            for name in CONFIGS:
                runs[name].append(run_subprocess(name, path, sizes))
    print("| configuration | time s | peak GB | above start GB | batches |")
    print("|---|---|---|---|---|")
    medians = {}
    for name in CONFIGS:
        medians[name] = statistics.median(run["time"] for run in runs[name])
        peak = max(run["peak_gb"] for run in runs[name])
        above = max(run["above_start_gb"] for run in runs[name])
        size, count = runs[name][0]["batches"][0]
        print(
            f"| {name} | {medians[name]:.2f} | {peak:.2f} | {above:.2f} | "
            f"{count} of up to {size} |"
        )
    checksums = {run["alpha_checksum"] for name in CONFIGS for run in runs[name]}
    ratio = medians["memmap"] / medians["in memory"]
    met = "met" if ratio <= TARGET_RATIO else "missed"
    print(
        f"memmap / in memory: {ratio:.2f}x (target {TARGET_RATIO}x, {met}); "
        f"same alphas in every run: {len(checksums) == 1}"
    )


if __name__ == "__main__":
    main()
