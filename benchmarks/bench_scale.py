"""Scaling out on a local dask cluster: 1 vs 2 workers, generic and batched paths.

Generic path ("generic"): a non-linear regressor (gradient boosting, enough
work per replicate that scheduling costs little) is bootstrapped through
``joblib.parallel_config(backend="dask")`` on a ``LocalCluster`` of one,
then two, single-threaded worker processes. Prints the median of three fits
for each, their ratio (the target is >= 1.6x on a host with two idle cores),
the in-process serial time for reference, and checks that every run gives
the same result. With one worker joblib runs the tasks in this process (a
one-thread cluster gets no tasks). "cores" is the CPU time the work got (this
process and the workers) over the wall time: on a busy host the two workers
cannot be faster than the cores they are given.

Batched path ("cluster"): ``BatchedRidge`` (exact leave-one-out) on 40,000
targets, n=1,000, p=200, with a ``distributed.Client`` active, so that its
target batches run as tasks on the workers (``X``'s SVD and the targets sent
once to each); the same 1 vs 2 single-threaded workers, the same target of
>= 1.6x, and the same check that every run equals the fit in this process.
The fit in this process on one core, then two, bounds what a second worker
can give: its elementwise passes share the host's memory bandwidth. With
``--tuned``, the two settings of docs/user_guide/scaling.rst for large numpy
batches: the client sends the data straight to the workers, and the workers
keep glibc's own trim threshold instead of the 64 kB that dask's nanny sets.

    python benchmarks/bench_scale.py [--quick] [--only generic|cluster] [--tuned]
"""

import argparse
import os
import statistics
import time

import dask
import joblib
import numpy as np
import psutil
from distributed import Client, LocalCluster
from sklearn.ensemble import GradientBoostingRegressor
from threadpoolctl import threadpool_limits

from skbatch import BatchedRidge, BootstrapEstimator

REPEATS = 3


def make_estimator(n_bootstrap, n_estimators):
    return BootstrapEstimator(
        GradientBoostingRegressor(
            n_estimators=n_estimators, max_depth=3, random_state=0
        ),
        n_bootstrap=n_bootstrap,
        attributes="feature_importances_",
        random_state=0,
    )


def timed_fit(X, y, n_bootstrap, n_estimators, backend=None):
    estimator = make_estimator(n_bootstrap, n_estimators)
    start = time.perf_counter()
    if backend is None:
        estimator.fit(X, y)
    else:
        with joblib.parallel_config(backend=backend):
            estimator.fit(X, y)
    return time.perf_counter() - start, estimator.results_["feature_importances_"]


def cpu_seconds():
    times = psutil.Process().cpu_times()
    return times.user + times.system


def local_cluster(n_workers):
    return LocalCluster(
        n_workers=n_workers,
        processes=True,
        threads_per_worker=1,
        host="127.0.0.1",
        dashboard_address=None,
    )


def on_cluster(n_workers, X, y, n_bootstrap, n_estimators):
    """Median time and cores of REPEATS fits on a fresh cluster; the last result."""
    with local_cluster(n_workers) as cluster, Client(cluster) as client:
        # Imports and first-call costs on the workers, not timed.
        timed_fit(X, y, 2 * n_workers, n_estimators, backend="dask")
        times, cores = [], []
        for _ in range(REPEATS):
            before = cpu_seconds() + sum(client.run(cpu_seconds).values())
            elapsed, result = timed_fit(X, y, n_bootstrap, n_estimators, "dask")
            after = cpu_seconds() + sum(client.run(cpu_seconds).values())
            times.append(elapsed)
            cores.append((after - before) / elapsed)
    return statistics.median(times), times, statistics.median(cores), result


def timed_ridge(X, Y):
    start = time.perf_counter()
    model = BatchedRidge().fit(X, Y)
    return time.perf_counter() - start, model


def ridge_on_cluster(n_workers, X, Y, tuned):
    """Median time and cores of REPEATS ridge fits on a fresh cluster; the last fit."""
    environ = dict(dask.config.get("distributed.nanny.pre-spawn-environ"))
    if tuned:
        environ.pop("MALLOC_TRIM_THRESHOLD_", None)
    with (
        dask.config.set({"distributed.nanny.pre-spawn-environ": environ}),
        local_cluster(n_workers) as cluster,
        Client(cluster, direct_to_workers=tuned) as client,
    ):
        # Imports and first-call costs on the workers, not timed.
        timed_ridge(X[:, :10], Y[:, :100])
        times, cores = [], []
        for _ in range(REPEATS):
            before = cpu_seconds() + sum(client.run(cpu_seconds).values())
            elapsed, model = timed_ridge(X, Y)
            after = cpu_seconds() + sum(client.run(cpu_seconds).values())
            times.append(elapsed)
            cores.append((after - before) / elapsed)
    (stage,) = model.fit_report_.stages
    assert (stage.path, stage.n_workers) == ("cluster", n_workers), stage
    return statistics.median(times), times, statistics.median(cores), model


def report(one, two):
    """Lines for 1 and 2 workers, given as (median, runs, cores), and the ratio."""
    for label, (median, times, cores) in (("1 worker ", one), ("2 workers", two)):
        runs = ", ".join(f"{t:.2f}" for t in times)
        print(f"dask, {label}    : {median:7.2f} s  ({cores:.2f} cores; runs: {runs})")
    print(f"speed-up 2 vs 1    : {one[0] / two[0]:7.2f}x  (target >= 1.6x)")


def generic(quick):
    n_bootstrap, n_estimators = (40, 20) if quick else (200, 60)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((500, 10))
    y = np.sin(X[:, 0]) + X[:, 1] * X[:, 2] + 0.3 * rng.standard_normal(500)
    print(
        f"BootstrapEstimator(GradientBoostingRegressor(n_estimators={n_estimators})), "
        f"{n_bootstrap} replicates, X {X.shape}; {os.cpu_count()} CPUs, load "
        f"average {os.getloadavg()[0]:.1f}"
    )
    serial, serial_result = timed_fit(X, y, n_bootstrap, n_estimators)
    one, one_times, one_cores, one_result = on_cluster(
        1, X, y, n_bootstrap, n_estimators
    )
    two, two_times, two_cores, two_result = on_cluster(
        2, X, y, n_bootstrap, n_estimators
    )
    same = all(
        np.array_equal(a, b)
        for other in (one_result, two_result)
        for a, b in zip(serial_result, other)
        if a is not None
    )
    print(f"serial, in process : {serial:7.2f} s")
    report((one, one_times, one_cores), (two, two_times, two_cores))
    print(f"identical results  : {same}")
    print(f"load average now   : {os.getloadavg()[0]:.1f}")


def cluster(quick, tuned):
    n_targets = 4_000 if quick else 40_000
    rng = np.random.default_rng(0)
    X = rng.standard_normal((1_000, 200))
    Y = X @ rng.standard_normal((200, n_targets)) + rng.standard_normal(
        (1_000, n_targets)
    )
    print(
        f"BatchedRidge (leave-one-out), {n_targets:,} targets, X {X.shape}"
        f"{', tuned cluster' if tuned else ''}; {os.cpu_count()} CPUs, load "
        f"average {os.getloadavg()[0]:.1f}"
    )
    serial, serial_model = timed_ridge(X, Y)
    # The same fit in this process on one core: what the second core gives
    # in process bounds what a second worker can give.
    with threadpool_limits(1):
        one_core, _ = timed_ridge(X, Y)
    *one, one_model = ridge_on_cluster(1, X, Y, tuned)
    *two, two_model = ridge_on_cluster(2, X, Y, tuned)
    same = all(
        np.array_equal(getattr(serial_model, name), getattr(other, name))
        for other in (one_model, two_model)
        for name in ("coef_", "intercept_", "alpha_", "best_score_")
    )
    print(f"serial, in process : {serial:7.2f} s  (1 core: {one_core:.2f} s)")
    report(one, two)
    print(f"identical results  : {same}")
    print(f"load average now   : {os.getloadavg()[0]:.1f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller workload")
    parser.add_argument(
        "--only", choices=["generic", "cluster"], help="one section (default: both)"
    )
    parser.add_argument(
        "--tuned", action="store_true", help="cluster: the settings for large data"
    )
    args = parser.parse_args()
    if args.only in (None, "generic"):
        generic(args.quick)
    if args.only in (None, "cluster"):
        cluster(args.quick, args.tuned)


if __name__ == "__main__":
    main()
