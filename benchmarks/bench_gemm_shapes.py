"""The held null's candidate GEMMs in both orientations, against the
reference GEMM of ``bench_encoding.py``.

``HeldModel`` (``skbatch/_ridge/held_model.py``) takes a block of rows of
products ``P`` (rows x 331) to coordinates ``C = P S`` (331 x 332, the
fold's ``V'`` and centring) and subtracts the predictions ``C B'`` (``B``:
300 test rows x 332) from the block's test rows. Row-major, ``P @ S``
writes rows 332 long and ``C @ B'`` rows 300 long; ``S' @ P'`` writes the
coordinates as columns, rows as long as the block. Printed per block size:
GFLOP/s of one core (best of ``--repeats``, CPU time) of

- coordinates: ``P @ S`` and ``S' @ P'``;
- predictions subtracted (``gemm_update``, beta = 1): from test rows as
  rows (``E -= C @ B'``, what the held null does) and as columns
  (``E' -= B @ C'``, for comparison);

and the reference GEMM, (331 x 2,650) @ (2,650 x 2,000), beside them.

Run: ``PYTHONPATH=. python benchmarks/bench_gemm_shapes.py``
"""

import argparse
import time

import numpy as np
from threadpoolctl import threadpool_limits

from skbatch._kernels.blas import gemm_update

FEATURES, TEST_ROWS = 331, 300


def rate(fn, calls, flops, repeats):
    """Best flop/s of ``calls`` calls of ``fn`` over ``repeats`` runs, in CPU
    time."""
    fn()
    best = np.inf
    for _ in range(repeats):
        start = time.process_time()
        for _ in range(calls):
            fn()
        best = min(best, time.process_time() - start)
    return calls * flops / best / 1e9


def block_rates(rows, rng, repeats):
    """GFLOP/s of the four products of the docstring at ``rows`` rows."""
    width = FEATURES + 1
    calls = max(1, int(3e9 / (2 * rows * FEATURES * width)))
    P = rng.standard_normal((rows, FEATURES))
    S = rng.standard_normal((FEATURES, width))
    C, Ct = np.empty((rows, width)), np.empty((width, rows))
    basis = rng.standard_normal((TEST_ROWS, width))
    E, Et = rng.standard_normal((rows, TEST_ROWS)), np.zeros((TEST_ROWS, rows))
    coords = 2.0 * rows * FEATURES * width
    predictions = 2.0 * rows * width * TEST_ROWS
    products = [
        (lambda: np.matmul(P, S, out=C), coords),
        (lambda: np.matmul(S.T, P.T, out=Ct), coords),
        (lambda: gemm_update(E, C, basis.T), predictions),
        (lambda: gemm_update(Et, basis, Ct), predictions),
    ]
    return [rate(fn, calls, flops, repeats) for fn, flops in products]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[544, 1024, 2048, 4096])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    with threadpool_limits(limits=1):
        A = rng.standard_normal((FEATURES, 2650))
        B = rng.standard_normal((2650, 2000))
        reference = rate(lambda: A @ B, 1, 2.0 * A.size * B.shape[1], args.repeats)
        print(f"reference GEMM {reference:.1f} GFLOP/s (one core)")
        print("rows | P @ S | S' @ P' | E -= C @ B' | E' -= B @ C'")
        for rows in args.rows:
            figures = block_rates(rows, rng, args.repeats)
            print(f"{rows} | " + " | ".join(f"{f:.1f}" for f in figures), flush=True)


if __name__ == "__main__":
    main()
