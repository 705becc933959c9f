"""What summing float32 coefficients in float64 costs a float32 fit.

``skbatch._kernels.linalg.accumulated_matmul`` sums the two products that turn the
factors into coefficients (``U'Y`` and ``V (f U'Y)``) in float64 on the CPU,
which keeps float32 coefficients within 2x of scikit-learn's float32 error.
This script times ``BatchedRidge(dtype="float32")`` with it and with the
products patched back to a plain float32 ``A @ B``, interleaved, in the same
run, and prints the median of each and their ratio.

    python benchmarks/bench_float32_sums.py
"""

import time
import warnings

import numpy as np

import skbatch._kernels.linalg as linalg
from skbatch import BatchedRidge

N_SAMPLES, N_FEATURES, N_TARGETS = 1000, 300, 20_000
REPEATS = 3


def plain(A, B, xp):
    return A @ B


def main():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((N_SAMPLES, N_FEATURES)).astype(np.float32)
    W = rng.standard_normal((N_FEATURES, N_TARGETS)).astype(np.float32)
    Y = X @ W * 0.1 + rng.standard_normal((N_SAMPLES, N_TARGETS)).astype(np.float32)
    widened = linalg.accumulated_matmul
    print(f"{N_SAMPLES} x {N_FEATURES} float32, {N_TARGETS} targets")
    print("| cv | float64 sums | float32 sums | cost |")
    for cv in (None, "gcv"):
        times = {"float64": [], "float32": []}
        for _ in range(REPEATS):
            for name, matmul in (("float64", widened), ("float32", plain)):
                linalg.accumulated_matmul = matmul
                model = BatchedRidge(
                    alphas=np.logspace(-2, 4, 7), cv=cv, dtype="float32"
                )
                start = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    model.fit(X, Y)
                times[name].append(time.perf_counter() - start)
        linalg.accumulated_matmul = widened
        wide, narrow = np.median(times["float64"]), np.median(times["float32"])
        print(f"| {cv} | {wide:.2f} s | {narrow:.2f} s | {wide / narrow - 1:+.0%} |")


if __name__ == "__main__":
    main()
