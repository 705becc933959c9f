"""BootstrapEstimator(BandedRidge): the batched path against refits.

Workload: n=300 rows, three bands of 10, 10 and 20 columns interleaved, 200
targets, 10 candidates (the equal one and Dirichlet draws) and 6 alphas,
200 replicates, float64 numpy. Timed in the same run, on the same draws:

- the batched path (``attributes="auto"``): the targets of each chosen
  candidate solved together as row weights
  (:class:`skbatch._ridge.banded.bootstrap.BandedBootstrapProblem`);
- the generic path (a callable ``attributes`` returning the same
  ``coef_`` / ``intercept_``): ``HeldBandedRidge`` refit per replicate,
  one ``Ridge`` per chosen candidate, in one joblib worker.

Printed: seconds of the replicates' stage and of the whole fits, their
ratio, and the largest difference of the standard errors.

Run: ``python benchmarks/bench_banded_bootstrap.py``
"""

import time
import warnings

import numpy as np

from skbatch import BandedRidge, BootstrapEstimator

WORKLOAD = dict(n=300, bands=(10, 10, 20), t=200, candidates=10, n_bootstrap=200)
ALPHAS = np.logspace(-2, 3, 6)


def make_data(n, bands, t, seed=0):
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(len(bands)), bands)[rng.permutation(sum(bands))]
    X = rng.standard_normal((n, labels.size))
    W = rng.standard_normal((labels.size, t)) * rng.uniform(0, 1, (1, t))
    return labels, X, X @ W + rng.standard_normal((n, t))


def linear_of(model):
    return {"coef_": model.coef_, "intercept_": model.intercept_}


def main():
    labels, X, Y = make_data(WORKLOAD["n"], WORKLOAD["bands"], WORKLOAD["t"])
    model = BandedRidge(labels, band_weights=WORKLOAD["candidates"], alphas=ALPHAS)
    params = dict(n_bootstrap=WORKLOAD["n_bootstrap"], random_state=0)
    with warnings.catch_warnings():
        # Edge-of-grid and coarse-candidate warnings: not what is timed.
        warnings.simplefilter("ignore", UserWarning)
        start = time.perf_counter()
        fast = BootstrapEstimator(model, **params).fit(X, Y)
        middle = time.perf_counter()
        slow = BootstrapEstimator(model, attributes=linear_of, n_jobs=1, **params)
        slow.fit(X, Y)
        end = time.perf_counter()
    chosen = len(np.unique(fast.estimator_.band_weights_, axis=0))
    fast_stage, slow_stage = fast.fit_report_.stages[-1], slow.fit_report_.stages[-1]
    print(f"workload: {WORKLOAD}, {chosen} candidates chosen")
    print(
        f"replicates: batched ({fast_stage.path}) {fast_stage.seconds:.2f} s, "
        f"refits ({slow_stage.path}) {slow_stage.seconds:.2f} s, "
        f"{slow_stage.seconds / fast_stage.seconds:.1f}x"
    )
    print(
        f"whole fits: {middle - start:.2f} s against {end - middle:.2f} s, "
        f"{(end - middle) / (middle - start):.1f}x"
    )
    gap = np.abs(
        fast.results_["coef_"].standard_error - slow.results_["coef_"].standard_error
    ).max()
    print(f"largest difference of the standard errors: {gap:.2g}")


if __name__ == "__main__":
    main()
