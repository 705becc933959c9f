"""Memory model of the batched paths: planned bytes against measured ones.

Every batched loop plans its batches from a memory model, which its stage of
``fit_report_`` records: ``device_bytes_per_item + host_bytes_per_item`` for
one item (target, permutation, replicate) and ``fixed_bytes`` whatever the
batch. This script fits each batched path at two batch sizes and measures
the peak of the fit's allocations (tracemalloc, which sees numpy's buffers;
the data given to ``fit`` is allocated before and not counted). Two peaks
give the measured bytes per item (their slope against the batch size) and
the measured fixed bytes (what is left at batch size 0). Printed as ratios
measured / planned: above 1, the model undercounts.

Paths, numpy backend, one BLAS thread (so one batch is in flight at a time):

- BatchedRidge, exact leave-one-out and 5-fold CV: ``n_targets_batch``.
- PermutationScorer, ridge fast path (BatchedRidge with 7 alphas, 5 folds),
  and BootstrapEstimator, linear path (Ridge): two ``max_memory_gb`` values
  derived from a first fit's report, so that the batches hold about
  ``BATCHES`` items; the sizes used are read from the reports.

    python benchmarks/bench_memory.py
"""

import platform
import time
import tracemalloc
import warnings

import numpy as np
from sklearn.linear_model import Ridge
from threadpoolctl import threadpool_limits

from skbatch import BatchedRidge, BootstrapEstimator, PermutationScorer

GB = 1e9
ALPHAS = np.logspace(-2, 4, 7)
# Items per batch of the two fits of the budgeted paths.
BATCHES = (20, 80)
# Budget of the first fit of a budgeted path: ample for every shape here.
AMPLE_GB = 1.0


def data(n_samples, n_features, n_targets, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n_samples, n_features))
    Y = X @ rng.standard_normal((n_features, n_targets))
    return X, Y + rng.standard_normal(Y.shape)


def measured_fit(estimator, X, Y):
    """The fit's last stage and the peak of its allocations, in bytes."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        estimator.fit(X, Y)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return estimator.fit_report_.stages[-1], peak


def budgets(make, X, Y):
    """Two ``max_memory_gb`` whose batches hold about ``BATCHES`` items.

    From a first fit's stage: what the budget holds besides the batches is
    ``AMPLE_GB`` less the budget the batches were sized against, plus the
    fixed bytes charged to it.
    """
    stage = make(AMPLE_GB).fit(X, Y).fit_report_.stages[-1]
    held = AMPLE_GB - stage.budget_gb + stage.fixed_bytes / GB
    per_item = stage.device_bytes_per_item + stage.host_bytes_per_item
    return [held + (size + 0.5) * per_item / GB for size in BATCHES]


def ratios(label, fits):
    """One line: measured / planned bytes per item and fixed bytes."""
    (stage1, peak1), (stage2, peak2) = fits
    size1, size2 = stage1.batch_size, stage2.batch_size
    per_item = (peak2 - peak1) / (size2 - size1)
    fixed = peak1 - size1 * per_item
    planned_item = stage1.device_bytes_per_item + stage1.host_bytes_per_item
    planned_fixed = stage1.fixed_bytes
    fixed_ratio = f"{fixed / planned_fixed:6.2f}" if planned_fixed else "   n/a"
    print(
        f"{label:<44}{size1:>5},{size2:<5}{per_item / 1e3:>10.1f}"
        f"{planned_item / 1e3:>10.1f}{per_item / planned_item:>7.2f}"
        f"{fixed / 1e6:>10.2f}{planned_fixed / 1e6:>10.2f}{fixed_ratio:>7}"
    )


def main():
    print(f"{platform.processor() or platform.machine()}, {platform.platform()}")
    print(
        f"{'path (n x p x targets [x items])':<44}{'batches':<11}"
        f"{'kB/item':>10}{'planned':>10}{'ratio':>7}"
        f"{'fixed MB':>10}{'planned':>10}{'ratio':>7}"
    )
    start = time.perf_counter()
    for cv, name in ((None, "LOO"), (5, "5-fold")):
        for shape in ((300, 50, 4000), (1000, 100, 2000), (100, 300, 2000)):
            X, Y = data(*shape)
            fits = [
                measured_fit(
                    BatchedRidge(alphas=ALPHAS, cv=cv, n_targets_batch=size), X, Y
                )
                for size in (200, 800)
            ]
            ratios(f"BatchedRidge {name} {'x'.join(map(str, shape))}", fits)

    for shape, n_permutations in (
        ((200, 20, 20), 400),
        ((500, 50, 5), 400),
        ((100, 200, 10), 200),
    ):
        X, Y = data(*shape)

        def scorer(gb, n_permutations=n_permutations):
            return PermutationScorer(
                BatchedRidge(alphas=ALPHAS),
                n_permutations=n_permutations,
                multioutput="raw_values",
                max_memory_gb=gb,
            )

        fits = [measured_fit(scorer(gb), X, Y) for gb in budgets(scorer, X, Y)]
        label = f"{'x'.join(map(str, shape))}x{n_permutations}"
        ratios(f"PermutationScorer ridge {label}", fits)

    for shape, n_bootstrap in (
        ((200, 20, 5), 400),
        ((500, 50, 20), 400),
        ((100, 200, 5), 200),
        # Enough columns and work for the kernel to skip undrawn rows.
        ((1000, 100, 500), 200),
    ):
        X, Y = data(*shape)

        def bootstrap(gb, n_bootstrap=n_bootstrap):
            return BootstrapEstimator(
                Ridge(), n_bootstrap=n_bootstrap, max_memory_gb=gb
            )

        fits = [measured_fit(bootstrap(gb), X, Y) for gb in budgets(bootstrap, X, Y)]
        label = f"{'x'.join(map(str, shape))}x{n_bootstrap}"
        ratios(f"BootstrapEstimator linear {label}", fits)
    print(f"total {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    # Random targets choose edge alphas; the warnings say nothing here.
    warnings.simplefilter("ignore", UserWarning)
    with threadpool_limits(1, user_api="blas"):
        main()
