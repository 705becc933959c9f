"""In-place GEMMs on threads side by side: which release the GIL.

The held Freedman–Lane null runs parts of its targets on threads, each on one
BLAS thread (``skbatch._ridge.freedman_lane_held.held_parts``); its in-place
GEMMs ``C -= A @ B`` must let the other threads run. At the shape of its
candidates' predictions (``--rows`` rows of coordinates, 331 columns, 300
test rows), one BLAS thread, ``--calls`` products per thread, the median of
``--repeats``:

- ``scipy.linalg.blas.dgemm`` (``beta = 1``);
- numpy's ``matmul`` into a buffer, then a subtraction;
- ``skbatch._kernels.blas.gemm_update`` (``beta = 1``, GIL released).

Printed per method: seconds for two threads' work one after the other, and
side by side, their ratio (2 at best on two free cores), and each method's
serial time against ``gemm_update``'s.

Run: ``PYTHONPATH=. python benchmarks/bench_gemm_threads.py``
"""

import argparse
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from scipy.linalg import blas
from threadpoolctl import threadpool_limits

from skbatch._kernels.blas import gemm_update


def methods(A, B):
    """``C -= A @ B`` three ways, each a function of C."""
    B_fortran = np.asfortranarray(B.T)
    buffer = {}

    def scipy_dgemm(C):
        blas.dgemm(-1.0, B_fortran, A.T, beta=1.0, c=C.T, overwrite_c=True)

    def numpy_matmul(C):
        out = buffer.setdefault(id(C), np.empty_like(C))
        np.matmul(A, B, out=out)
        C -= out

    def skbatch_gemm_update(C):
        gemm_update(C, A, B)

    return {
        "scipy.linalg.blas.dgemm": scipy_dgemm,
        "matmul, then subtract": numpy_matmul,
        "gemm_update": skbatch_gemm_update,
    }


def timed(fn, Cs, calls, threads):
    def work(C):
        for _ in range(calls):
            fn(C)

    start = time.perf_counter()
    if threads == 1:
        for C in Cs:
            work(C)
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(work, Cs))
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--inner", type=int, default=331)
    parser.add_argument("--cols", type=int, default=300)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    A = rng.standard_normal((args.rows, args.inner))
    B = rng.standard_normal((args.inner, args.cols))
    Cs = [rng.standard_normal((args.rows, args.cols)) for _ in range(2)]
    # The three give the same products.
    expected = Cs[0] - A @ B
    for fn in methods(A, B).values():
        C = Cs[0].copy()
        fn(C)
        np.testing.assert_allclose(C, expected, rtol=1e-12, atol=1e-10)
    rows = {}
    with threadpool_limits(limits=1):
        for name, fn in methods(A, B).items():
            fn(Cs[0])
            serial, side = [], []
            for _ in range(args.repeats):
                serial.append(timed(fn, Cs, args.calls, 1))
                side.append(timed(fn, Cs, args.calls, 2))
            rows[name] = float(np.median(serial)), float(np.median(side))
    base = rows["gemm_update"][0]
    print(
        f"C ({args.rows} x {args.cols}) -= A ({args.rows} x {args.inner}) @ B, "
        f"{args.calls} calls per thread, one BLAS thread, median of "
        f"{args.repeats}\n"
    )
    print(
        "| method | one after the other | side by side | speed-up "
        "| serial / gemm_update |"
    )
    print("|---|---|---|---|---|")
    for name, (serial, side) in rows.items():
        print(
            f"| {name} | {serial:.3f} s | {side:.3f} s | {serial / side:.2f}x "
            f"| {serial / base:.2f} |"
        )


if __name__ == "__main__":
    main()
