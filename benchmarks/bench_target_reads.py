"""Reading blocks of a memmap of targets: positioned reads of its file against
copies through its mapping.

2,000 rows x 20,000 float32 targets (160 MB, in the page cache: just
written), in C and Fortran order, read in blocks of 20, 200 and 2,000
columns, as a fit reads its batches. "file" is the reader ``BatchedRidge``
uses on Linux (``skbatch._engine.targets._MappedFile``, which a file cut meanwhile
cannot crash), "mapped" the copy through the mapping in 2 MiB spans that
it falls back to. Median of the repeats, alternating, and the ratio.

    PYTHONPATH=. python benchmarks/bench_target_reads.py          # 5 repeats
    PYTHONPATH=. python benchmarks/bench_target_reads.py --quick  # to check it runs
"""

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from skbatch._engine import targets as _targets

SIZES = (2000, 20_000)
QUICK = (200, 2_000)
WIDTHS = (20, 200, 2000)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    n, t = QUICK if args.quick else SIZES
    print(f"{n} x {t:,} float32 targets; median of {args.repeats} (s)")
    print("| order | block columns | mapped | file | file / mapped |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "targets.dat"
        rng = np.random.default_rng(0)
        rng.standard_normal((n, t), dtype=np.float32).tofile(path)
        for order in ("C", "F"):
            Y = np.memmap(path, np.float32, "r", shape=(n, t), order=order)
            readers = {"mapped": None, "file": _targets._MappedFile.of(Y)}
            for width in WIDTHS:
                times = {name: [] for name in readers}
                for _ in range(args.repeats):
                    for name, file in readers.items():
                        start = time.perf_counter()
                        for first in range(0, t, width):
                            _targets._read_mapped(Y, first, first + width, file)
                        times[name].append(time.perf_counter() - start)
                mapped, read = (statistics.median(times[name]) for name in readers)
                print(
                    f"| {order} | {width} | {mapped:.3f} | {read:.3f} | "
                    f"{read / mapped:.2f} |"
                )
            del Y


if __name__ == "__main__":
    main()
