"""The BCa summaries' memory charge against their traced peak.

``BCaAccumulator``'s two passes (or one, with kept samples) and the interval,
fed replicates of ``size`` elements in batches of 1, 8 and 64, for 20, 300
and 1,000 replicates: the tracemalloc peak of the whole run (the batches
themselves allocated before) against ``skbatch._engine.preflight.bca_summary_bytes``.
Prints every row, then the smallest and largest charge / peak.

    PYTHONPATH=. python benchmarks/bench_bca_charge.py
"""

import tracemalloc

import numpy as np

from skbatch._engine.preflight import bca_summary_bytes
from skbatch.streaming import BCaAccumulator

SIZES = (5, 50, 500, 1000, 5000)
REPLICATES = (20, 300, 1000)
BATCHES = (1, 8, 64)


def measure(size, n_bootstrap, batch, keep):
    rng = np.random.default_rng(1)
    replicates = rng.gamma(2.0, size=(n_bootstrap, size))
    blocks = [replicates[i : i + batch].copy() for i in range(0, n_bootstrap, batch)]
    estimate = np.full(size, 2.0)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    first = BCaAccumulator((size,), n_bootstrap, 0.95, estimate, keep_samples=keep)
    for block in blocks:
        first.update(block)
    second = first.second_pass(np.full(size, 0.05))
    if second is not None:
        for block in blocks:
            second.update(block)
    first.interval(second, overwrite_samples=keep)
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    charged = bca_summary_bytes(
        (size,), n_bootstrap, 0.95, keep_samples=keep, copy_samples=False
    )
    return peak, charged


def main():
    print("| kept | size | replicates | batch | peak B | charged B | charged / peak |")
    print("|---|---|---|---|---|---|---|")
    ratios = []
    for keep in (False, True):
        for size in SIZES:
            for n_bootstrap in REPLICATES:
                for batch in BATCHES:
                    peak, charged = measure(size, n_bootstrap, batch, keep)
                    ratios.append(charged / peak)
                    print(
                        f"| {keep} | {size} | {n_bootstrap} | {batch} | {peak} | "
                        f"{charged:.0f} | {charged / peak:.2f} |"
                    )
    print(f"charged / peak: {min(ratios):.2f} to {max(ratios):.2f}")


if __name__ == "__main__":
    main()
