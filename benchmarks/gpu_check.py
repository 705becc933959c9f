"""GPU check: the CUDA tests and the GPU benchmarks of the three estimators.

One script for a GPU host (an NVIDIA H200 in mind), under five minutes:

1. ``pytest -m cuda`` (the tests that run the estimators on a real card);
2. the card's fp32 and fp64 GEMM rate, measured with torch;
3. one row per estimator:

   - BatchedRidge, 100,000 targets, n=3000, p=2000, float32, exact LOO over
     10 alphas;
   - PermutationScorer(BatchedRidge), 50,000 targets x 10,000 permutations,
     n=200, p=50, 5 folds, float32;
   - BootstrapEstimator(Ridge) fast path, 20,000 targets, n=1000, p=100,
     1000 replicates, float32.

Each row is first timed on two small slices; a row whose full size would
not fit its share of the time budget is scaled down (targets, permutations or
replicates), and the size actually run is printed. The table gives the time,
the rate of the dominant GEMM work (a model of the kernels' flops, stated
per row) as a fraction of the measured GEMM rate, the peak device memory
(``torch.cuda.max_memory_allocated``) and the engine's out-of-memory
recoveries and kernel calls (from each fit's ``fit_report_``).

Without CUDA the GPU rows are skipped and a tiny CPU (numpy) version of each
row runs instead, so the script is exercised anywhere.

    python benchmarks/gpu_check.py [--budget-s 270] [--skip-tests]
"""

import argparse
import dataclasses
import importlib.util
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from sklearn.linear_model import Ridge

from skbatch import BatchedRidge, BootstrapEstimator, PermutationScorer

REPO = Path(__file__).resolve().parents[1]
# Share of the time budget for the CUDA tests; they stop there at the latest.
TESTS_SHARE = 0.35
# The small slice a row is timed on first, as a fraction of its full size.
CALIBRATION_FRACTION = 0.02
ALPHAS = np.logspace(-2, 4, 10)


@dataclasses.dataclass
class Workload:
    """One row: data, estimator, flops model, and the knob that scales it."""

    name: str
    knob: str  # "targets", "permutations" or "replicates"
    full: int
    shape: dict
    flops_note: str

    def data(self, size):
        n, p = self.shape["n"], self.shape["p"]
        targets = size if self.knob == "targets" else self.shape["t"]
        rng = np.random.default_rng(0)
        X = rng.standard_normal((n, p), dtype=np.float32)
        signal = X[:, : min(p, 20)] @ rng.standard_normal(
            (min(p, 20), targets), dtype=np.float32
        )
        Y = signal + 3 * rng.standard_normal((n, targets), dtype=np.float32)
        return X, Y

    def estimator(self, size, device):
        if self.name == "BatchedRidge":
            return BatchedRidge(alphas=ALPHAS, dtype="float32", device=device)
        if self.name == "PermutationScorer":
            return PermutationScorer(
                BatchedRidge(alphas=ALPHAS[::2], dtype="float32"),
                n_permutations=size,
                cv=5,
                multioutput="raw_values",
                random_state=0,
                device=device,
            )
        return BootstrapEstimator(
            Ridge(alpha=1.0), n_bootstrap=size, random_state=0, device=device
        )

    def flops(self, size):
        n, p = self.shape["n"], self.shape["p"]
        r = min(n, p)
        if self.name == "BatchedRidge":
            # Per target: U'Y, the residual outside the span, one n x r
            # product per alpha, and the coefficients (V on r x p).
            return 2.0 * size * (n * r * (2 + ALPHAS.size) + p * r)
        t = self.shape["t"]
        if self.name == "PermutationScorer":
            n_test = n // 5
            n_train = n - n_test
            r = min(n_train, p)
            per_fold = 2.0 * r * (n_train * (2 + ALPHAS[::2].size) + n_test)
            # The observed scores count as one more permutation.
            return 5 * per_fold * t * (size + 1)
        # Per replicate: weighted Gram (p+1)^2 n, X'WY (p+1) n t, solve p^2 t.
        q = p + 1
        return 2.0 * size * (n * q * q + n * q * t + p * p * t)


GPU_ROWS = [
    Workload(
        "BatchedRidge",
        "targets",
        100_000,
        {"n": 3000, "p": 2000},
        "2 t (n r (2 + n_alphas) + p r); SVD not counted",
    ),
    Workload(
        "PermutationScorer",
        "permutations",
        10_000,
        {"n": 200, "p": 50, "t": 50_000},
        "5 folds x 2 r (n_tr (2 + n_alphas) + n_te) per column",
    ),
    Workload(
        "BootstrapEstimator",
        "replicates",
        1000,
        {"n": 1000, "p": 100, "t": 20_000},
        "2 B (n q^2 + n q t + p^2 t), q = p + 1",
    ),
]
CPU_ROWS = [
    Workload("BatchedRidge", "targets", 2000, {"n": 300, "p": 100}, ""),
    Workload(
        "PermutationScorer", "permutations", 50, {"n": 100, "p": 20, "t": 500}, ""
    ),
    Workload(
        "BootstrapEstimator", "replicates", 100, {"n": 200, "p": 20, "t": 500}, ""
    ),
]


def cuda_available():
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return torch.cuda.is_available()


def synchronize(device):
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def gemm_rate(device, dtype, size):
    """Measured FLOP/s of a square matmul in ``dtype`` (best of 5)."""
    if device == "cpu":
        a = np.random.default_rng(0).standard_normal((size, size)).astype(dtype)
        a @ a
        times = []
        for _ in range(5):
            start = time.perf_counter()
            a @ a
            times.append(time.perf_counter() - start)
    else:
        import torch

        a = torch.randn(
            size, size, dtype=getattr(torch, np.dtype(dtype).name), device=device
        )
        a @ a
        torch.cuda.synchronize()
        times = []
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(4):
                a @ a
            torch.cuda.synchronize()
            times.append((time.perf_counter() - start) / 4)
    return 2.0 * size**3 / min(times)


def run_tests(budget_s):
    """``pytest -m cuda`` in a child process; its summary line."""
    command = [sys.executable, "-m", "pytest", "-m", "cuda", "-q", "-p"]
    command += ["no:cacheprovider", "tests"]
    try:
        out = subprocess.run(
            command, cwd=REPO, capture_output=True, text=True, timeout=budget_s
        )
    except subprocess.TimeoutExpired:
        return False, f"timed out after {budget_s:.0f} s"
    lines = [line for line in out.stdout.splitlines() if line.strip()]
    summary = lines[-1].strip("= ") if lines else out.stderr[-300:]
    if out.returncode != 0:
        print(out.stdout[-4000:], out.stderr[-2000:], sep="\n")
    return out.returncode == 0, summary


def fit_once(workload, size, device, X, Y):
    estimator = workload.estimator(size, device)
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    if workload.knob == "targets":
        Y = np.ascontiguousarray(Y[:, :size])
    synchronize(device)
    start = time.perf_counter()
    estimator.fit(X, Y)
    synchronize(device)
    elapsed = time.perf_counter() - start
    # The engine loops of the fit, its nested fit on all data included.
    plans = estimator.fit_report_.stages
    peak = None
    if device.startswith("cuda"):
        import torch

        peak = torch.cuda.max_memory_allocated()
    return elapsed, peak, plans


def run_row(workload, device, budget_s, rates):
    """Calibrate on a slice, scale to the budget, run and measure one row."""
    X, Y = workload.data(workload.full)
    small = max(2, math.ceil(workload.full * CALIBRATION_FRACTION))
    fit_once(workload, small, device, X, Y)  # warm-up: context, kernels, caches
    # Time is about fixed + slope x size (the decompositions are fixed cost):
    # two sizes give both, and the size that fits the budget.
    t1, *_ = fit_once(workload, small, device, X, Y)
    t2, *_ = fit_once(workload, 2 * small, device, X, Y)
    fixed = min(max(2 * t1 - t2, 0.0), t1)
    slope = max(t2 - fixed, 1e-9) / (2 * small)
    affordable = int((budget_s - fixed) / slope)
    size = max(small, min(workload.full, affordable))
    elapsed, peak, plans = fit_once(workload, size, device, X, Y)
    flops = workload.flops(size)
    rate = flops / elapsed
    return {
        "row": workload.name,
        "device": device,
        "size": f"{size:,} {workload.knob}"
        + ("" if size == workload.full else f" (of {workload.full:,})"),
        "time": elapsed,
        "gflops": rate / 1e9,
        "fraction": rate / rates["float32"],
        "peak": "-" if peak is None else f"{peak / 1e9:.2f} GB",
        "oom": sum(stage.n_oom_splits for stage in plans),
        "calls": sum(stage.n_batches_run for stage in plans),
    }


def print_table(rows, rates, device):
    print()
    print(
        f"GEMM rate on {device}: fp32 {rates['float32'] / 1e12:.2f} TFLOP/s, "
        f"fp64 {rates['float64'] / 1e12:.2f} TFLOP/s (measured)"
    )
    header = (
        f"{'row':<20}{'device':<8}{'size run':<34}{'time s':>8}{'GFLOP/s':>10}"
        f"{'of fp32':>9}{'peak mem':>11}{'OOM rec':>9}{'calls':>7}"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        if "skipped" in row:
            print(f"{row['row']:<20}{row['device']:<8}{row['skipped']}")
            continue
        print(
            f"{row['row']:<20}{row['device']:<8}{row['size']:<34}"
            f"{row['time']:>8.2f}{row['gflops']:>10.1f}{row['fraction']:>9.1%}"
            f"{row['peak']:>11}{row['oom']:>9d}{row['calls']:>7d}"
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--budget-s", type=float, default=270.0, help="total time budget, seconds"
    )
    parser.add_argument("--skip-tests", action="store_true", help="no pytest -m cuda")
    args = parser.parse_args()
    started = time.perf_counter()
    on_gpu = cuda_available()

    tests_ok, summary = True, "skipped (--skip-tests)"
    if not args.skip_tests:
        tests_ok, summary = run_tests(args.budget_s * TESTS_SHARE)
    print(f"pytest -m cuda: {summary}")

    device = "cuda" if on_gpu else "cpu"
    rates = {
        dtype: gemm_rate(device, dtype, 8192 if on_gpu else 1024)
        for dtype in ("float32", "float64")
    }
    rows = []
    workloads = GPU_ROWS if on_gpu else CPU_ROWS
    if not on_gpu:
        rows += [
            {"row": w.name, "device": "cuda", "skipped": "skipped: no CUDA device"}
            for w in GPU_ROWS
        ]
    for k, workload in enumerate(workloads):
        left = args.budget_s - (time.perf_counter() - started)
        # This row's share of what is left; the slices and warm-up cost extra.
        share = left / (len(workloads) - k) / 2
        rows.append(run_row(workload, device, max(share, 1.0), rates))
    print_table(rows, rates, device)
    for workload in workloads:
        if workload.flops_note:
            print(f"flops model, {workload.name}: {workload.flops_note}")
    print(f"total {time.perf_counter() - started:.1f} s")
    return 0 if tests_ok else 1


if __name__ == "__main__":
    sys.exit(main())
