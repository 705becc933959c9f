"""Overheads of the batching engine and of the streaming accumulator.

- Engine: time per batch of ``run_batched`` with an empty kernel (planning,
  OOM guard, host transfer, reduce call, progress bookkeeping).
- Accumulator: folding B=1000 replicates of a 100,000-element output into a
  ``BootstrapAccumulator`` (mean, std, exact percentile tails), against
  ``np.percentile`` over the stored B x 100,000 array; time and peak memory
  (tracemalloc) of each, median of repeats.

    python benchmarks/bench_engine.py [--quick]
"""

import argparse
import statistics
import time
import tracemalloc

import numpy as np

from skbatch import Backend
from skbatch._engine import run_batched
from skbatch.streaming import BootstrapAccumulator


def engine_overhead(n_batches):
    def kernel(ids):
        return ids

    start = time.perf_counter()
    run_batched(
        kernel,
        lambda ids, out: None,
        n_items=n_batches,
        backend=Backend("numpy"),
        device_bytes_per_item=8,
        batch_size=1,
    )
    return (time.perf_counter() - start) / n_batches


def make_replicates(n_replicates, n_elements, batch):
    rng = np.random.default_rng(0)
    for start in range(0, n_replicates, batch):
        size = min(batch, n_replicates - start)
        yield np.arange(start, start + size), rng.standard_normal((size, n_elements))


def streamed(n_replicates, n_elements, batch):
    acc = BootstrapAccumulator((n_elements,), n_replicates, 0.95)
    fold_time = 0.0
    for ids, block in make_replicates(n_replicates, n_elements, batch):
        start = time.perf_counter()
        acc.update(block, ids)
        fold_time += time.perf_counter() - start
    start = time.perf_counter()
    lower, upper = acc.interval()
    _ = acc.std  # part of what the stored reference computes too
    return fold_time + time.perf_counter() - start, (lower, upper)


def stored(n_replicates, n_elements, batch):
    samples = np.empty((n_replicates, n_elements))
    for ids, block in make_replicates(n_replicates, n_elements, batch):
        samples[ids] = block
    start = time.perf_counter()
    bounds = np.percentile(samples, [2.5, 97.5], axis=0)
    samples.std(axis=0, ddof=1)
    return time.perf_counter() - start, (bounds[0], bounds[1])


def measure(fn, *args):
    tracemalloc.start()
    elapsed, bounds = fn(*args)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return elapsed, peak, bounds


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    n_rep, n_el = (200, 10_000) if args.quick else (1000, 100_000)
    repeats = 1 if args.quick else args.repeats
    batch = 64

    overhead = statistics.median(engine_overhead(2000) for _ in range(repeats))
    print(f"engine: {overhead * 1e6:.1f} us per batch (empty kernel, 2000 batches)")

    runs = [measure(streamed, n_rep, n_el, batch) for _ in range(repeats)]
    refs = [measure(stored, n_rep, n_el, batch) for _ in range(repeats)]
    t_acc = statistics.median(r[0] for r in runs)
    t_ref = statistics.median(r[0] for r in refs)
    m_acc, m_ref = runs[0][1], refs[0][1]
    same = all(
        np.allclose(a, b, rtol=1e-12, atol=0) for a, b in zip(runs[0][2], refs[0][2])
    )
    print(f"\nB={n_rep} replicates x {n_el} elements, fed in batches of {batch}")
    print(f"{'':<34}{'time s':>8}{'per replicate us':>18}{'peak MB':>9}")
    print(
        f"{'streaming accumulator':<34}{t_acc:>8.2f}{t_acc / n_rep * 1e6:>18.0f}"
        f"{m_acc / 1e6:>9.0f}"
    )
    print(
        f"{'np.percentile over stored samples':<34}{t_ref:>8.2f}"
        f"{t_ref / n_rep * 1e6:>18.0f}{m_ref / 1e6:>9.0f}"
    )
    print(
        f"time ratio {t_acc / t_ref:.2f}x (target < 3x), memory {m_acc / m_ref:.1%} "
        f"of storing, intervals identical to 1e-12: {same}"
    )


if __name__ == "__main__":
    main()
