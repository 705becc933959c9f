"""Streaming percentile tails against np.percentile over every replicate.

For bootstrap runs of B replicates of a statistic with many elements, times
``BootstrapAccumulator`` (updates in batches, then the 95% interval) with its
default selection, with every fold sorted and with every fold partitioned,
against storing every replicate and calling ``np.percentile``. Also prints
the bytes the accumulator retains against the bytes of every replicate.

The sizes are those of real fits: B=200 is the bootstrap benchmark's
(1000 targets x 101 coefficients), larger B with fewer elements.

Run ``python benchmarks/bench_accumulator.py`` (about a minute).
"""

import sys
import time

import numpy as np

from skbatch import streaming
from skbatch.streaming import BootstrapAccumulator

# (B, elements per replicate, replicates per update)
CASES = [
    (200, 101_000, 25),
    (1000, 20_000, 50),
    (4000, 5000, 200),
    (10_000, 2000, 500),
    (20_000, 1000, 1000),
    (100_000, 300, 5000),
]
REPEATS = 3


def median_seconds(fn, *args):
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def streamed(samples, batch, sort_max_rows=None):
    n_total, size = samples.shape
    saved = streaming.bootstrap.SORT_MAX_ROWS
    if sort_max_rows is not None:
        streaming.bootstrap.SORT_MAX_ROWS = sort_max_rows
    try:
        acc = BootstrapAccumulator(size, n_total)
        for start in range(0, n_total, batch):
            acc.update(samples[start : start + batch])
        return acc.interval()
    finally:
        streaming.bootstrap.SORT_MAX_ROWS = saved


def stored(samples, batch):
    rows = np.empty_like(samples)
    for start in range(0, len(samples), batch):
        rows[start : start + batch] = samples[start : start + batch]
    return np.percentile(rows, [2.5, 97.5], axis=0)


def main():
    rng = np.random.default_rng(0)
    print(
        f"{'B':>7} {'elements':>9} {'default s':>10} {'sorted s':>9} "
        f"{'partitioned s':>14} {'np.percentile s':>16} {'kept MB':>8} "
        f"{'all MB':>7}"
    )
    for n_total, size, batch in CASES:
        samples = rng.standard_normal((n_total, size))
        lower, upper = streamed(samples, batch)
        expected = stored(samples, batch)
        np.testing.assert_allclose([lower, upper], expected, rtol=1e-12)
        seconds = [
            median_seconds(streamed, samples, batch, sort_max_rows)
            for sort_max_rows in (None, sys.maxsize, 0)
        ]
        seconds.append(median_seconds(stored, samples, batch))
        kept = BootstrapAccumulator.nbytes_needed(size, n_total) / 1e6
        print(
            f"{n_total:>7} {size:>9} {seconds[0]:>10.3f} {seconds[1]:>9.3f} "
            f"{seconds[2]:>14.3f} {seconds[3]:>16.3f} {kept:>8.1f} "
            f"{samples.nbytes / 1e6:>7.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
